"""functrans.random against JAX's own numbers: every sampler JAX has, from PRNGKey(0),
PRNGKey(42) and key(1234), for scalar, odd and large shapes and for half, single and double
precision, under JAX's current (partitionable) threefry scheme and, for the basic draws,
the original one.

tests/data/random_vectors.json holds the reference: one entry per call (the function, the
key, the arguments in a small JSON encoding, the x64 and scheme flags) with JAX 0.10.2's
result (CPU), in full for small results and, for large ones, the first and last 8 values,
16 evenly spaced ones, the sum and the SHA-256 of the bytes.

Tolerances (``tol`` in the file), as a bound on ``|ours - jax|`` in units of the result
dtype's epsilon times ``max(|jax|, 1)`` (the values near 0 come from differences of terms of
size ~1, so their error is absolute):

* ``exact`` (0): keys, bits, every integer and boolean result, and the uniform floats of
  [0, 1): those are bit manipulations and exactly rounded arithmetic.
* ``float`` (4): uniform floats scaled to ``[minval, maxval)`` and triangular samples: one
  multiply-add, which XLA may contract into a fused multiply-add, and a square root.
* ``log`` and ``tan`` (16): transforms through log, log1p, exp, pow or tan; XLA's CPU
  versions and NumPy's are each within ~2 ulp of the true value, and the formulas chain
  up to three of them (gumbel's ``-log(-log(u))``).
* ``erf_inv`` (16): normal-based samples. XLA's inverse error function is a polynomial
  approximation (float32: ~2 ulp, float64: ~10 ulp off the correctly rounded value, which
  is what we compute).
* ``gamma`` (32): the gamma family's rejection loops take the same decisions as JAX's (a
  flip would change a value completely, not by ulps), so the samples differ only by the
  rounding of the logs, powers and inverse error functions in their formulas.
* ``linalg`` (64): Cholesky, QR and einsum reduce in a different order than LAPACK/Eigen.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import pathlib

import numpy as np
import pytest
from hypothesis import given, strategies as st

import functrans
import functrans.numpy as jnp
import functrans.random as random
from functrans.test_util import x64

DATA = json.loads((pathlib.Path(__file__).parent / "data" / "random_vectors.json").read_text())
CASES = DATA["cases"]

ULPS = {"exact": 0, "float": 4, "log": 16, "tan": 16, "erf_inv": 16, "gamma": 32, "linalg": 64}


def _decode(x):
    """An argument from its JSON encoding: arrays, tuples (shapes) and dtypes are tagged."""
    if isinstance(x, dict):
        if "array" in x:
            return jnp.asarray(np.asarray(x["array"], dtype=x["dtype"]))
        if "tuple" in x:
            return tuple(x["tuple"])
        if "dtype" in x:
            return jnp.bfloat16 if x["dtype"] == "bfloat16" else np.dtype(x["dtype"])
        return {k: _decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_decode(v) for v in x]
    return x


def _key(spec):
    kind, seed = spec
    return random.PRNGKey(seed) if kind == "PRNGKey" else random.key(seed)


@contextlib.contextmanager
def _flags(case):
    previous = functrans.config.threefry_partitionable
    with x64() if case["x64"] else contextlib.nullcontext():
        functrans.config.update("jax_threefry_partitionable", case["partitionable"])
        try:
            yield
        finally:
            functrans.config.update("jax_threefry_partitionable", previous)


def _sampler(case):
    """``key -> numpy result`` for ``case`` (typed keys are compared through their data)."""
    fn = getattr(random, case["fn"])
    args, kwargs = _decode(case["args"]), _decode(case["kwargs"])

    def sample(key):
        out = fn(key, *args, **kwargs)
        return random.key_data(out) if isinstance(out, random.PRNGKeyArray) else out
    return sample


def _case_id(case):
    text = json.dumps([case["args"], case["kwargs"]], separators=(",", ":"))
    for ch in '{}[]":':
        text = text.replace(ch, "")
    flags = ("-x64" if case["x64"] else "") + ("" if case["partitionable"] else "-original")
    return f"{case['fn']}-{case['key'][0]}{case['key'][1]}-{text[:50]}{flags}"


def _expected(case):
    """(positions, values) of JAX's result that the file records, and the result's size."""
    result = case["result"]
    if "values" in result:
        values = result["values"]
        positions = np.arange(len(values))
    else:
        summary = result["summary"]
        size = int(np.prod(result["shape"]))
        positions = np.concatenate([np.arange(8), np.arange(size - 8, size),
                                    summary["strided_index"]])
        values = summary["first"] + summary["last"] + summary["strided"]
    values = np.array(values, dtype=np.float64 if result["dtype"] != "bool" else bool)
    if values.ndim == 2:   # complex numbers are stored as [re, im]
        values = values[:, 0] + 1j * values[:, 1]
    return positions, values


def check_against_jax(case, got):
    result = case["result"]
    got = np.asarray(got)
    assert list(got.shape) == result["shape"] and str(got.dtype) == result["dtype"]
    flat = got.reshape(-1)
    positions, want = _expected(case)
    ours = flat[positions]
    if case["tol"] == "exact":
        np.testing.assert_array_equal(ours.astype(want.dtype), want)
        if "summary" in result:
            digest = hashlib.sha256(np.ascontiguousarray(flat).view(np.uint8)).hexdigest()
            assert digest == result["summary"]["sha256"]
        return
    eps = float(jnp.finfo(got.dtype).eps)
    ours = ours.astype(want.dtype)
    bound = ULPS[case["tol"]] * eps * np.maximum(np.abs(want), 1.0)
    both_nan = np.isnan(ours) & np.isnan(want)
    error = np.where(both_nan | (ours == want), 0.0, np.abs(ours - want))
    ulps = float(np.max(error / (eps * np.maximum(np.abs(want), 1.0))))
    assert np.all(error <= bound), (f"{int(np.sum(error > bound))} values off by up to "
                                    f"{ulps:.1f} ulp (allowed {ULPS[case['tol']]})", ours, want)
    if "summary" in result:
        np.testing.assert_allclose(np.sum(flat.astype(np.float64)), result["summary"]["sum"],
                                   rtol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_matches_jax(case):
    with _flags(case):
        check_against_jax(case, _sampler(case)(_key(case["key"])))


def test_the_file_covers_every_sampler_jax_has():
    tested = {c["fn"] for c in CASES}
    public = set(random.__all__) - {"PRNGKey", "PRNGKeyArray", "key", "key_data",
                                    "wrap_key_data", "key_impl", "key_dtype", "clone",
                                    "threefry_2x32"}
    assert public <= tested, sorted(public - tested)
    assert {tuple(c["key"]) for c in CASES} == {("PRNGKey", 0), ("PRNGKey", 42), ("key", 1234)}


# =============================================================================================
# Under jit and vmap: one call per sampler, from the keys the file has vectors for
# =============================================================================================

def _groups():
    """For each sampler, its first call made with both PRNGKey(0) and PRNGKey(42) (in the
    default scheme, without x64, small): the two cases, keyed by seed."""
    by_call = {}
    for case in CASES:
        if case["x64"] or not case["partitionable"] or "summary" in case["result"]:
            continue
        call = (case["fn"], json.dumps(case["args"]), json.dumps(case["kwargs"]))
        by_call.setdefault(call, {})[tuple(case["key"])] = case
    firsts = {}
    for (fn, *_), cases in by_call.items():
        if fn not in firsts and ("PRNGKey", 0) in cases and ("PRNGKey", 42) in cases:
            firsts[fn] = (cases[("PRNGKey", 0)], cases[("PRNGKey", 42)])
    return firsts


GROUPS = _groups()
# Samplers built from gamma draws compile two or three of gamma's nested rejection loops
# each (seconds of LLVM time apiece); gamma and loggamma are jitted here, and these
# compositions under jit in test_random_distributions.py (test_deterministic_jit_and_vmap).
GAMMA_COMPOSITIONS = {"beta", "dirichlet", "chisquare", "f", "t", "generalized_normal"}


@pytest.mark.parametrize("fn", sorted(set(GROUPS) - GAMMA_COMPOSITIONS))
def test_matches_jax_under_jit(fn):
    first, second = GROUPS[fn]
    jitted = functrans.jit(_sampler(first))
    check_against_jax(first, jitted(random.PRNGKey(0)))
    check_against_jax(second, jitted(random.PRNGKey(42)))    # the same program, another key


@pytest.mark.parametrize("fn", sorted(GROUPS))
def test_vmap_over_keys_is_the_loop_over_keys(fn):
    first, second = GROUPS[fn]
    sample = _sampler(first)
    raw = jnp.stack([random.PRNGKey(0), random.PRNGKey(42)])
    for keys in (raw, random.wrap_key_data(raw)):
        batched = np.asarray(functrans.vmap(sample)(keys))
        looped = [np.asarray(sample(keys[i])) for i in range(2)]
        for row, single, case in zip(batched, looped, (first, second)):
            check_against_jax(case, row)
            if row.dtype.kind in "fc" or row.dtype == jnp.bfloat16:
                np.testing.assert_allclose(row.astype(np.float64), single.astype(np.float64),
                                           rtol=1e-6, atol=1e-7)
            else:
                np.testing.assert_array_equal(row, single)



# =============================================================================================
# The partitionable scheme's defining property, for any shape
# =============================================================================================

@given(st.lists(st.integers(1, 6), min_size=0, max_size=3), st.sampled_from([8, 16, 32, 64]),
       st.integers(0, 2 ** 32 - 1))
def test_each_element_depends_only_on_its_index(shape, width, seed):
    # bits of any shape are the first prod(shape) bits of a longer draw, in row-major order:
    # a shard of the output can be computed on its own (the original scheme has no such
    # property: its halves depend on the total size)
    shape = tuple(shape)
    size = int(np.prod(shape, dtype=np.int64))
    dtype = np.dtype(f"uint{width}")
    key = random.PRNGKey(seed)
    with x64() if width == 64 else contextlib.nullcontext():
        longer = np.asarray(random.bits(key, (size + 5,), dtype))
        np.testing.assert_array_equal(np.asarray(random.bits(key, shape, dtype)),
                                      longer[:size].reshape(shape))
    keys = random.split(random.key(seed), shape)
    np.testing.assert_array_equal(np.asarray(random.key_data(keys)),
                                  np.asarray(random.key_data(random.split(random.key(seed),
                                                                          size + 3)))[:size]
                                  .reshape(shape + (2,)))
