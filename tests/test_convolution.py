"""The llvm backend's direct convolution kernels (backends/llvm/convolution.py) against the
reference interpreter and NumPy: forward, input gradient (a transposed convolution) and
kernel gradient, over strides, paddings, input and kernel dilation, feature and batch
groups, layouts, odd sizes, float32 and float64."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import functrans
from functrans import lax
from functrans.backends.compiler.decompose import decompose_closed, is_direct_convolution

LAYOUTS = {
    1: [("NCH", "OIH", "NCH"), ("NHC", "HIO", "NHC"), ("HNC", "HIO", "NCH")],
    2: [("NCHW", "OIHW", "NCHW"), ("NHWC", "HWIO", "NHWC"), ("NHWC", "OIHW", "NCHW"),
        ("CHWN", "HWIO", "NHWC")],
}


def _program(fn, *args) -> str:
    return functrans.jit(fn).lower(*args).compile()._executable.program.describe()


@st.composite
def convolutions(draw):
    nsp = draw(st.sampled_from([1, 2]))
    groups = draw(st.sampled_from([1, 2]))
    group_kind = draw(st.sampled_from(["feature", "batch"])) if groups > 1 else "feature"
    fgc, bgc = (groups, 1) if group_kind == "feature" else (1, groups)
    batch = draw(st.integers(1, 3)) * bgc
    in_per_group = draw(st.integers(1, 3))
    channels = in_per_group * fgc
    out_features = draw(st.integers(1, 11)) * groups  # past a tile's 2 vectors at float64
    kernel = [draw(st.integers(1, 3)) for _ in range(nsp)]
    strides = [draw(st.integers(1, 2)) for _ in range(nsp)]
    lhs_dil = [draw(st.integers(1, 2)) for _ in range(nsp)]
    rhs_dil = [draw(st.integers(1, 2)) for _ in range(nsp)]
    # up to 15 along the last axis: more outputs than one register tile holds
    sizes = [draw(st.integers((k - 1) * d + 1, 15 if last else 6))
             for last, k, d in zip([False] * (nsp - 1) + [True], kernel, rhs_dil)]
    padding = draw(st.one_of(
        st.sampled_from(["SAME", "VALID"]),
        st.lists(st.tuples(st.integers(-1, 2), st.integers(-1, 2)), min_size=nsp,
                 max_size=nsp)))
    layout = draw(st.sampled_from(LAYOUTS[nsp]))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    canonical_lhs = (batch, channels, *sizes)
    canonical_rhs = (out_features, in_per_group, *kernel)
    return dict(lhs=_shape(canonical_lhs, layout[0], nsp), rhs=_shape(canonical_rhs, layout[1], nsp),
                params=dict(window_strides=strides, padding=padding, lhs_dilation=lhs_dil,
                            rhs_dilation=rhs_dil, dimension_numbers=layout,
                            feature_group_count=fgc, batch_group_count=bgc),
                dtype=dtype)


def _shape(canonical, layout, nsp):
    """The shape of an array whose (N|O, C|I, spatial...) sizes are ``canonical`` in
    ``layout`` (spatial letters after the first two, in order)."""
    spatial = [c for c in layout if c not in "NCOI"]
    order = ("N" if "N" in layout else "O", "C" if "C" in layout else "I", *spatial)
    return tuple(canonical[order.index(c)] for c in layout)


def _conv(params):
    return lambda x, w: lax.conv_general_dilated(x, w, **params)


def _valid(case) -> bool:
    try:
        out = functrans.eval_shape(_conv(case["params"]),
                                   np.zeros(case["lhs"], np.float32),
                                   np.zeros(case["rhs"], np.float32))
    except (TypeError, ValueError):
        return False
    return all(d > 0 for d in out.shape)


@settings(max_examples=25, deadline=None)
@given(convolutions(), st.integers(0, 2**31 - 1))
def test_direct_convolution_and_gradients_match_the_reference(case, seed):
    assume(_valid(case))
    rng = np.random.default_rng(seed)
    dtype = case["dtype"]
    x = rng.standard_normal(case["lhs"]).astype(dtype)
    w = rng.standard_normal(case["rhs"]).astype(dtype)
    f = _conv(case["params"])
    ct = rng.standard_normal(functrans.eval_shape(f, x, w).shape).astype(dtype)

    def grads(x, w):
        out, pullback = functrans.vjp(f, x, w)
        return (out,) + tuple(pullback(ct))

    tol = 2e-4 if dtype == np.float32 else 1e-10
    with _x64(dtype):
        assert "conv[direct" in _program(grads, x, w)  # the kernels, not NumPy
        got = functrans.jit(grads)(x, w)
        want = functrans.jit(grads, backend="reference")(x, w)
        for a, b in zip(got, want):
            a, b = np.asarray(a), np.asarray(b)
            assert a.dtype == b.dtype == dtype
            scale = max(1.0, float(np.max(np.abs(b))))
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol * scale)


class _x64:
    """Enables 64-bit types for float64 cases (restored on exit)."""

    def __init__(self, dtype):
        self.enable = np.dtype(dtype) == np.float64

    def __enter__(self):
        self.before = functrans.config.jax_enable_x64
        if self.enable:
            functrans.config.update("jax_enable_x64", True)

    def __exit__(self, *exc):
        functrans.config.update("jax_enable_x64", self.before)


def _numpy_conv_nhwc(x, w, stride, padding):
    """A 2-D NHWC/HWIO convolution by explicit sums over the kernel window (NumPy only)."""
    (top, bottom), (left, right) = padding
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    kh, kw = w.shape[:2]
    oh = (xp.shape[1] - kh) // stride + 1
    ow = (xp.shape[2] - kw) // stride + 1
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]), np.float64)
    for i in range(kh):
        for j in range(kw):
            window = xp[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            out += np.einsum("nhwc,co->nhwo", window, w[i, j])
    return out


@pytest.mark.parametrize("stride,padding", [(1, ((1, 1), (1, 1))), (2, ((0, 1), (2, 0)))])
def test_direct_convolution_matches_numpy_window_sums(stride, padding):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 11, 9, 5)).astype(np.float32)
    w = rng.standard_normal((3, 3, 5, 13)).astype(np.float32)  # 13 features: a padded vector
    f = lambda x, w: lax.conv_general_dilated(  # noqa: E731
        x, w, (stride, stride), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))
    assert "conv[direct" in _program(f, x, w)
    np.testing.assert_allclose(np.asarray(functrans.jit(f)(x, w)),
                               _numpy_conv_nhwc(x.astype(np.float64), w.astype(np.float64),
                                                stride, padding), rtol=1e-4, atol=1e-4)


def test_channels_last_layers_are_not_transposed():
    """A channels-last network's convolution and both its gradients run on the activations
    as they are: only the (small) kernel is flipped and transposed for the input gradient."""
    x = np.ones((4, 8, 8, 3), np.float32)
    w = np.ones((3, 3, 3, 8), np.float32)
    f = lambda x, w: (lax.conv_general_dilated(  # noqa: E731
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) ** 2).sum()
    closed = functrans.make_jaxpr(functrans.grad(f, argnums=(0, 1)))(x, w)
    rewritten = decompose_closed(closed, direct_convolutions=True)
    convs = [e for e in _all_eqns(rewritten.jaxpr) if e.primitive.name == "conv_general_dilated"]
    assert len(convs) == 3 and all(is_direct_convolution(e) for e in convs)
    program = _program(functrans.grad(f, argnums=(0, 1)), x, w)
    assert program.count("conv[direct") == 3
    transposing = [line for line in program.splitlines() if "transpose" in line]
    assert transposing and all("-> %" in line and "[3, 3, " in line.split("->")[1]
                               for line in transposing), program


def _all_eqns(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", None)
            if inner is not None and hasattr(inner, "eqns"):
                yield from _all_eqns(inner)


def test_convolution_inside_a_loop_body_runs_the_kernel():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 6, 6, 8)).astype(np.float32)
    w = (rng.standard_normal((3, 3, 8, 8)) * 0.2).astype(np.float32)

    def f(x, w):
        step = lambda _, h: functrans.nn.relu(lax.conv_general_dilated(  # noqa: E731
            h, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))
        return lax.fori_loop(0, 3, step, x)

    np.testing.assert_allclose(np.asarray(functrans.jit(f)(x, w)), np.asarray(f(x, w)),
                               rtol=1e-4, atol=1e-4)


def test_kernel_gradient_over_a_large_batch_sums_every_block():
    """The kernel gradient sums over the whole batch in cache-sized blocks of it, the
    partial sums going through the output."""
    from functrans.backends.llvm.convolution import ConvolutionStep
    from functrans.backends.compiler.fusion import Buffer
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 12, 12, 8)).astype(np.float32)
    w = rng.standard_normal((3, 3, 8, 16)).astype(np.float32)
    f = lambda x, w: (lax.conv_general_dilated(  # noqa: E731
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) ** 2).sum()
    grad_w = functrans.grad(f, argnums=1)
    assert "conv[direct" in _program(grad_w, x, w)
    # the kernel gradient's step: x (batch as features) correlated with the output
    # cotangent, as the transpose rule and the rewrite produce it
    step = ConvolutionStep(Buffer(0, (64, 14, 14, 8), np.float32, "temp"),
                           Buffer(1, (64, 12, 12, 16), np.float32, "temp"),
                           Buffer(2, (3, 3, 8, 16), np.float32, "temp"),
                           dict(window_strides=(1, 1), rhs_dilation=(1, 1),
                                feature_group_count=1, batch_group_count=1,
                                dimension_numbers=((3, 0, 1, 2), (3, 0, 1, 2), (2, 3, 0, 1))))
    assert step.reduction_block() < 64  # more than one block
    want = np.asarray(functrans.jit(grad_w, backend="reference")(x, w))
    np.testing.assert_allclose(np.asarray(functrans.jit(grad_w)(x, w)), want, rtol=1e-4,
                               atol=1e-5 * np.max(np.abs(want)))


_KERNEL_GRADIENT_SCRIPT = """
import sys
import numpy as np
import functrans
from functrans import lax
rng = np.random.default_rng(3)
x = rng.standard_normal((16, 20, 20, 16)).astype(np.float32)
w = rng.standard_normal((3, 3, 16, 16)).astype(np.float32)
f = lambda x, w: (lax.conv_general_dilated(
    x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) ** 2).sum()
np.save(sys.argv[1], np.asarray(functrans.jit(functrans.grad(f, argnums=1))(x, w)))
"""


def _kernel_gradient_step(taps=(3, 3), features=16):
    from functrans.backends.llvm.convolution import ConvolutionStep
    from functrans.backends.compiler.fusion import Buffer
    return ConvolutionStep(Buffer(0, (64, 34, 34, features), np.float32, "temp"),
                           Buffer(1, (64, 32, 32, 16), np.float32, "temp"),
                           Buffer(2, (*taps, features, 16), np.float32, "temp"),
                           dict(window_strides=(1, 1), rhs_dilation=(1, 1),
                                feature_group_count=1, batch_group_count=1,
                                dimension_numbers=((3, 0, 1, 2), (3, 0, 1, 2), (2, 3, 0, 1))))


def test_a_blocked_kernel_gradient_runs_one_chunk_per_thread_in_equal_rows():
    """A kernel gradient (its rows are the 9 taps of a 3x3 window, its reduction blocked
    over the batch) runs one chunk per thread, each going block by block over all its rows;
    its tile axis is cut in two so that two threads get 9 rows each, not 5 and 4."""
    step = _kernel_gradient_step()
    assert step.blocked() and step.rows == 9
    assert step.tile_parts(threads=2) == 2 and step.work_rows(threads=2) == 18
    assert step.chunks(threads=2) == 2
    assert step.tile_parts(threads=3) == 1 and step.chunks(threads=3) == 3
    assert step.chunks(threads=1) == 1 and step.work_rows(threads=1) == 9
    # an input-feature axis too short to cut keeps its tiles whole
    assert _kernel_gradient_step(features=3).tile_parts(threads=2) == 1


def test_a_kernel_gradient_has_the_same_bits_on_any_number_of_threads(tmp_path):
    """Each output sums its blocks in order whatever rows a chunk holds or how its tile axis
    is cut, so one, two and three threads give the same bits."""
    results = []
    for threads in (1, 2, 3):
        path = tmp_path / f"grad{threads}.npy"
        env = dict(os.environ, FUNCTRANS_NUM_THREADS=str(threads))
        done = subprocess.run([sys.executable, "-c", _KERNEL_GRADIENT_SCRIPT, str(path)],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        results.append(np.load(path))
    assert results[0].shape == (3, 3, 16, 16)
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])
