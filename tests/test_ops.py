"""functrans.ops (segment reductions) against a NumPy loop: values, defaults and dtypes,
errors, jit and vmap, and gradients by finite differences in float64."""


import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import functrans
import functrans.numpy as jnp
import functrans.ops
from functrans.test_util import check_grads, x64
from assertions import assert_same


_SEGMENT_OPS = {
    "segment_sum": (np.add, 0),
    "segment_prod": (np.multiply, 1),
    "segment_max": (np.maximum, "low"),
    "segment_min": (np.minimum, "high"),
}


def _segment_reference(name, data, ids, num_segments, mode=None):
    combine, identity = _SEGMENT_OPS[name]
    data = np.asarray(data)
    if identity == "low":
        identity = -np.inf if data.dtype.kind in "fc" else (
            False if data.dtype == np.bool_ else np.iinfo(data.dtype).min)
    elif identity == "high":
        identity = np.inf if data.dtype.kind in "fc" else (
            True if data.dtype == np.bool_ else np.iinfo(data.dtype).max)
    out = np.full((num_segments,) + data.shape[1:], identity, dtype=data.dtype)
    for i, s in enumerate(np.asarray(ids)):
        if mode == "clip":
            s = min(max(s, 0), num_segments - 1)
        elif not 0 <= s < num_segments:
            continue
        out[s] = combine(out[s], data[i])
    return out


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 9), st.integers(1, 5), st.sampled_from(list(_SEGMENT_OPS)),
       st.sampled_from([None, "clip"]), st.sampled_from([np.float32, np.int32, np.uint8]),
       st.integers(0, 2 ** 16))
def test_segment_ops_match_numpy_loop(rows, num_segments, name, mode, dtype, seed):
    rng = np.random.default_rng(seed)
    data = (rng.normal(size=(rows, 2)) * 3).astype(dtype)
    ids = rng.integers(-2, num_segments + 2, size=rows).astype(np.int32)
    got = getattr(functrans.ops, name)(jnp.asarray(data), jnp.asarray(ids), num_segments,
                                       mode=mode)
    expected = _segment_reference(name, data, ids, num_segments, mode)
    assert got.dtype == np.dtype(dtype)
    assert_same(got, expected, rtol=1e-5)


def test_segment_ops_defaults_and_dtypes():
    ids = jnp.array([0, 0, 2, 1, 2])
    data = jnp.array([1.0, 2.0, 3.0, 4.0, 5.0])
    # without num_segments: max(ids) + 1 segments
    assert_same(functrans.ops.segment_sum(data, ids), [3.0, 4.0, 8.0])
    assert_same(functrans.ops.segment_max(jnp.array([True, False]), jnp.array([0, 0]), 2),
                [True, False])
    assert_same(functrans.ops.segment_min(jnp.array([1, 2, 3], jnp.uint8),
                                          jnp.array([0, 0, 2]), 3), [1, 255, 3], np.uint8)
    # scalar data broadcasts to the rows
    assert_same(functrans.ops.segment_sum(5.0, jnp.array([1, 1]), 3), [0.0, 10.0, 0.0])
    # trailing axes are kept, and bucket_size does not change the result
    data2 = jnp.arange(12.0).reshape(6, 2)
    ids2 = jnp.array([0, 1, 0, 1, 2, 2])
    assert_same(functrans.ops.segment_sum(data2, ids2, 3, bucket_size=2),
                [[4.0, 6.0], [8.0, 10.0], [18.0, 20.0]])
    assert functrans.ops.segment_sum(data2, ids2, 0).shape == (0, 2)
    assert functrans.ops.segment_prod(data2, ids2, 0, mode="clip").shape == (0, 2)
    with x64():
        assert functrans.ops.segment_sum(jnp.arange(3.0), jnp.array([0, 1, 0]),
                                         np.int64(2)).dtype == np.float64
    complex_data = jnp.array([1 + 2j, 1 + 3j, 2 - 1j, 0 + 5j])
    assert_same(functrans.ops.segment_max(complex_data, jnp.array([0, 0, 1, 1]), 2),
                [1 + 3j, 2 - 1j])


def test_segment_ops_errors():
    ops = functrans.ops
    with pytest.raises(TypeError, match="list"):
        ops.segment_sum([1.0, 2.0], jnp.array([0, 1]), 2)
    with pytest.raises(TypeError, match="integers"):
        ops.segment_sum(jnp.ones(2), jnp.array([0.0, 1.0]), 2)
    with pytest.raises(TypeError, match="boolean"):
        ops.segment_sum(jnp.array([True, False]), jnp.array([0, 0]), 2)
    with pytest.raises(ValueError, match="broadcast"):
        ops.segment_sum(jnp.ones(3), jnp.array([0, 1]), 2)
    with pytest.raises(functrans.ConcretizationTypeError, match="num_segments"):
        functrans.jit(lambda d, i, n: ops.segment_sum(d, i, n))(jnp.ones(2), jnp.array([0, 1]), 2)
    with pytest.raises(functrans.ConcretizationTypeError, match="num_segments"):
        functrans.jit(lambda d, i: ops.segment_sum(d, i))(jnp.ones(2), jnp.array([0, 1]))
    with pytest.raises(ValueError, match="empty"):
        ops.segment_sum(jnp.ones(0), jnp.zeros(0, jnp.int32))


@pytest.mark.parametrize("name", list(_SEGMENT_OPS))
def test_segment_ops_jit_vmap(name):
    op = getattr(functrans.ops, name)
    rng = np.random.default_rng(3)
    data = jnp.asarray(rng.normal(size=(3, 6, 2)).astype(np.float32))
    ids = jnp.asarray(rng.integers(-1, 5, size=(3, 6)).astype(np.int32))
    f = lambda d, i: op(d, i, 4)  # noqa: E731
    assert_same(functrans.jit(f)(data[0], ids[0]), f(data[0], ids[0]))
    assert_same(functrans.jit(f, static_argnums=())(data[1], ids[1]), f(data[1], ids[1]))
    loop = np.stack([np.asarray(f(data[i], ids[i])) for i in range(3)])
    assert_same(functrans.vmap(f)(data, ids), loop)
    loop_data_only = np.stack([np.asarray(f(data[i], ids[0])) for i in range(3)])
    assert_same(functrans.vmap(f, in_axes=(0, None))(data, ids[0]), loop_data_only)
    static_n = functrans.jit(lambda d, i, n: op(d, i, n), static_argnums=2)(data[0], ids[0], 4)
    assert_same(static_n, f(data[0], ids[0]))


@pytest.mark.parametrize("name", list(_SEGMENT_OPS))
@pytest.mark.parametrize("mode", [None, "clip"])
def test_segment_ops_gradients(name, mode):
    op = getattr(functrans.ops, name)
    ids = np.array([0, 2, 0, 1, 2, 2, -1, 5])
    # distinct values, so max/min have no ties; one zero to exercise products over zeros
    data = np.array([0.7, -1.3, 2.1, 0.4, -0.9, 1.6, 3.0, 0.0])
    with x64():
        # three segments, so none is empty (an empty max/min segment holds -inf/inf)
        check_grads(lambda d: op(d, ids, 3, mode=mode), (data,), order=1)
        if name == "segment_prod":
            # first derivatives only: a second one is an error, not a wrong number
            with pytest.raises(NotImplementedError):
                functrans.hessian(lambda d: op(d, ids, 3, mode=mode).sum())(data)
            with pytest.raises(NotImplementedError):
                functrans.jacfwd(functrans.jacfwd(lambda d: op(d, ids, 3, mode=mode)))(data)
        else:
            check_grads(lambda d: op(d, ids, 3, mode=mode), (data,), order=2)
        # rows of two values per segment id
        check_grads(lambda d: op(d, ids[:4], 3, mode=mode), (data.reshape(4, 2),), order=1)


def test_segment_prod_gradient_with_zeros_and_batched_rows():
    ids = np.array([0, 0, 0, 1, 1, 2])
    cases = [np.array([0.0, 2.0, 3.0, 0.0, 0.0, 5.0]), np.array([1.5, 0.0, -2.0, 4.0, 0.5, 0.0])]
    for data in cases:
        with x64():
            check_grads(lambda d: functrans.ops.segment_prod(d, ids, 3), (data,), order=1)
            grad = functrans.grad(lambda d: functrans.ops.segment_prod(d, ids, 3).sum())(data)
        # d prod / d x_i = product of the other members of the segment
        expected = np.zeros_like(data)
        for i, s in enumerate(ids):
            members = [data[j] for j in range(len(ids)) if ids[j] == s and j != i]
            expected[i] = np.prod(members)
        assert_same(grad, expected, atol=1e-12)
    rows = np.random.default_rng(4).normal(size=(6, 3))
    with x64():
        check_grads(lambda d: functrans.ops.segment_prod(d, ids, 3), (rows,), order=1)
        check_grads(lambda d: functrans.ops.segment_max(d, ids, 3), (rows,), order=1)


def test_segment_sum_grad_matches_gather():
    ids = jnp.array([0, 2, 0, 1, -1])
    g = functrans.grad(lambda d: (functrans.ops.segment_sum(d, ids, 3) ** 2).sum())(
        jnp.arange(5.0))
    sums = np.array([0.0 + 2.0, 3.0, 1.0])
    assert_same(g, [2 * sums[0], 2 * sums[2], 2 * sums[0], 2 * sums[1], 0.0])
