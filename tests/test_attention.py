"""nn.dot_product_attention against a NumPy reference (and JAX's, when installed)."""
from __future__ import annotations

import numpy as np
import pytest

import functrans
from functrans import nn
from functrans.test_util import check_grads


def reference(q, k, v, bias=None, mask=None, scale=None, is_causal=False, q_lengths=None,
              kv_lengths=None, window=None):
    """Attention in float64 NumPy, written independently of the library's version."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    b, t, n, h = q.shape
    s, heads = k.shape[1], k.shape[2]
    k, v = np.repeat(k, n // heads, axis=2), np.repeat(v, n // heads, axis=2)
    scale = 1 / np.sqrt(h) if scale is None else scale
    logits = np.einsum("btnh,bsnh->bnts", q, k) * scale
    if bias is not None:
        logits = logits + bias
    keep = np.ones((b, n, t, s), bool)
    if mask is not None:
        keep &= np.broadcast_to(mask, keep.shape)
    i, j = np.arange(t)[:, None], np.arange(s)[None, :]
    if is_causal:
        keep &= j <= i
    if window is not None:
        left, right = (window, window) if isinstance(window, int) else window
        keep &= (j >= i - left) & (j <= i + right)
    if q_lengths is not None:
        keep &= (np.arange(t)[None, :, None] < np.asarray(q_lengths)[:, None, None])[:, None]
    if kv_lengths is not None:
        keep &= (np.arange(s)[None, None, :] < np.asarray(kv_lengths)[:, None, None])[:, None]
    logits = np.where(keep, logits, -1e300)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return np.einsum("bnts,bsnh->btnh", w, v)


def _inputs(rng, b=2, t=5, s=6, n=4, k=2, h=8):
    q = rng.standard_normal((b, t, n, h)).astype(np.float32)
    key = rng.standard_normal((b, s, k, h)).astype(np.float32)
    v = rng.standard_normal((b, s, k, h)).astype(np.float32)
    return q, key, v


CASES = {
    "plain": {},
    "causal": dict(is_causal=True),
    "bias": dict(bias="bias"),
    "mask": dict(mask="mask"),
    "scale": dict(scale=0.3),
    "lengths": dict(query_seq_lengths=[5, 3], key_value_seq_lengths=[6, 2]),
    "window": dict(local_window_size=1),
    "window_pair": dict(local_window_size=(2, 0), is_causal=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_reference(name):
    rng = np.random.default_rng(0)
    q, k, v = _inputs(rng, t=6)
    kwargs = dict(CASES[name])
    if kwargs.get("bias") == "bias":
        kwargs["bias"] = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    if kwargs.get("mask") == "mask":
        kwargs["mask"] = rng.random((2, 1, 6, 6)) > 0.3
    ours = nn.dot_product_attention(q, k, v, **kwargs)
    ref_kwargs = {"bias": kwargs.get("bias"), "mask": kwargs.get("mask"),
                  "scale": kwargs.get("scale"), "is_causal": kwargs.get("is_causal", False),
                  "q_lengths": kwargs.get("query_seq_lengths"),
                  "kv_lengths": kwargs.get("key_value_seq_lengths"),
                  "window": kwargs.get("local_window_size")}
    np.testing.assert_allclose(np.asarray(ours), reference(q, k, v, **ref_kwargs),
                               rtol=2e-5, atol=2e-5)
    jitted = functrans.jit(lambda a, b, c: nn.dot_product_attention(a, b, c, **kwargs))
    np.testing.assert_allclose(np.asarray(jitted(q, k, v)), np.asarray(ours), rtol=1e-5,
                               atol=1e-6)


def test_unbatched_dtypes_and_fully_masked_rows():
    rng = np.random.default_rng(1)
    q, k, v = _inputs(rng, b=1)
    out = nn.dot_product_attention(q[0], k[0], v[0], is_causal=True)
    np.testing.assert_allclose(np.asarray(out), reference(q, k, v, is_causal=True)[0],
                               rtol=2e-5, atol=2e-5)
    half = nn.dot_product_attention(q.astype(np.float16), k.astype(np.float16),
                                    v.astype(np.float16))
    assert half.dtype == np.float16
    np.testing.assert_allclose(np.asarray(half, np.float32), reference(q, k, v), atol=5e-3)
    # a query that may see nothing averages the values
    none = nn.dot_product_attention(q, k, v, mask=np.zeros((1, 1, 5, 6), bool))
    np.testing.assert_allclose(np.asarray(none),
                               np.broadcast_to(np.repeat(v, 2, axis=2).mean(1, keepdims=True),
                                               none.shape), rtol=1e-5, atol=1e-6)


def test_errors_say_what_is_wrong():
    q, k, v = _inputs(np.random.default_rng(2), n=3, k=2)
    with pytest.raises(ValueError, match="multiple of K"):
        nn.dot_product_attention(q, k, v)
    with pytest.raises(ValueError, match="do not fit"):
        nn.dot_product_attention(q[..., :4], k, v)
    with pytest.raises(NotImplementedError, match="cudnn"):
        nn.dot_product_attention(q, q, q, implementation="cudnn")


def test_gradients_and_vmap(x64):
    rng = np.random.default_rng(3)
    q, k, v = (a.astype(np.float64) for a in _inputs(rng, b=1, t=3, s=4, n=2, k=1, h=3))
    check_grads(lambda a, b, c: nn.dot_product_attention(a, b, c, is_causal=True),
                (q, k, v), order=2, modes=("fwd", "rev"))
    stack = [np.repeat(a[0][None], 3, axis=0) for a in (q, k, v)]
    batched = functrans.vmap(lambda a, b, c: nn.dot_product_attention(a, b, c))(*stack)
    for i in range(3):
        np.testing.assert_allclose(np.asarray(batched[i]),
                                   np.asarray(nn.dot_product_attention(q[0], k[0], v[0])),
                                   rtol=1e-12)


def test_agrees_with_jax_when_installed():
    jax = pytest.importorskip("jax")
    rng = np.random.default_rng(4)
    q, k, v = _inputs(rng)
    mask = rng.random((2, 1, 5, 6)) > 0.2
    for kwargs in ({}, {"is_causal": True}, {"mask": mask}, {"scale": 0.5},
                   {"key_value_seq_lengths": np.array([6, 3])}):
        theirs = jax.nn.dot_product_attention(q, k, v, **kwargs)
        ours = nn.dot_product_attention(q, k, v, **kwargs)
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-4, atol=1e-5)
