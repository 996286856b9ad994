"""Scaled dot-product attention, as ``jax.nn.dot_product_attention``."""
from __future__ import annotations

import math

import numpy as np

from functrans import _dtypes
import functrans.numpy as jnp
from functrans.nn._activations import softmax

__all__ = ["dot_product_attention"]


def dot_product_attention(query, key, value, bias=None, mask=None, *, scale=None,
                          is_causal: bool = False, query_seq_lengths=None,
                          key_value_seq_lengths=None, local_window_size=None,
                          implementation=None):
    """``softmax(scale * q k^T + bias, masked) v`` over the key positions.

    Shapes follow JAX: ``query`` is ``[B, T, N, H]`` (batch, query positions, heads, head
    size; the batch axis may be left out), ``key`` and ``value`` are ``[B, S, K, H]`` with
    ``N`` a multiple of ``K`` (grouped-query attention shares each key/value head among
    ``N // K`` query heads). ``bias`` and ``mask`` broadcast to ``[B, N, T, S]``; ``mask``
    keeps positions where it is True. ``is_causal`` lets query ``t`` see keys ``s <= t``;
    ``query_seq_lengths``/``key_value_seq_lengths`` (``[B]``) ignore the padding after
    each sequence's length; ``local_window_size`` (an int or a ``(left, right)`` pair)
    limits each query to keys within that many positions. ``scale`` defaults to
    ``1/sqrt(H)``. The scores and the softmax are computed in float32 (or float64) and the
    result has the query's dtype. A query whose every key is masked out gets the average
    of the values, as in JAX.

        >>> import functrans.numpy as jnp
        >>> q = k = v = jnp.ones((1, 3, 2, 4))
        >>> dot_product_attention(q, k, v, is_causal=True).shape
        (1, 3, 2, 4)
    """
    if implementation not in (None, "xla"):
        raise NotImplementedError(f"dot_product_attention: implementation={implementation!r} "
                                  f"is not available; use None")
    query, key, value = jnp.asarray(query), jnp.asarray(key), jnp.asarray(value)
    unbatched = query.ndim == 3
    if unbatched:
        if key.ndim != 3 or value.ndim != 3:
            raise ValueError("dot_product_attention: an unbatched query [T, N, H] needs "
                             f"unbatched key and value, got {key.shape} and {value.shape}")
        query, key, value = query[None], key[None], value[None]
        bias = None if bias is None else _add_batch(jnp.asarray(bias))
        mask = None if mask is None else _add_batch(jnp.asarray(mask))
    if query.ndim != 4 or key.ndim != 4 or value.ndim != 4:
        raise ValueError(f"dot_product_attention: query, key and value must be [B, T, N, H] "
                         f"(or [T, N, H]), got {query.shape}, {key.shape}, {value.shape}")
    b, t, n, h = query.shape
    s, k_heads = key.shape[1], key.shape[2]
    if key.shape != (b, s, k_heads, h) or value.shape[:3] != (b, s, k_heads):
        raise ValueError(f"dot_product_attention: key {key.shape} and value {value.shape} "
                         f"do not fit query {query.shape} ([B, S, K, H] with the query's B "
                         f"and H)")
    if n % k_heads:
        raise ValueError(f"dot_product_attention: {n} query heads cannot share {k_heads} "
                         f"key/value heads (N must be a multiple of K)")
    if n != k_heads:  # grouped-query attention: each key/value head serves n // K heads
        key = jnp.repeat(key, n // k_heads, axis=2)
        value = jnp.repeat(value, n // k_heads, axis=2)
    out_dtype = query.dtype
    work = np.float64 if out_dtype == np.float64 else np.float32
    scale = 1.0 / math.sqrt(h) if scale is None else scale
    logits = jnp.einsum("btnh,bsnh->bnts", query.astype(work), key.astype(work)) * scale
    if bias is not None:
        logits = logits + jnp.asarray(bias).astype(work)
    keep = _combined_mask(mask, is_causal, query_seq_lengths, key_value_seq_lengths,
                          local_window_size, b, t, s)
    if keep is not None:
        # a large finite negative, not -inf: a fully masked row averages instead of NaN
        logits = jnp.where(keep, logits, 0.7 * float(_dtypes.finfo(work).min))
    weights = _softmax_last(logits)
    out = jnp.einsum("bnts,bsnh->btnh", weights, value.astype(work)).astype(out_dtype)
    return out[0] if unbatched else out


def _add_batch(x):
    return x[None] if x.ndim == 3 else x  # [N, T, S] -> [1, N, T, S]; others broadcast


def _softmax_last(x):
    return softmax(x, axis=-1)


def _combined_mask(mask, is_causal, q_lengths, kv_lengths, window, b, t, s):
    """The positions each query may attend to, broadcastable to [B, N, T, S], or None."""
    keep = None if mask is None else jnp.asarray(mask).astype(bool)

    def both(extra):
        return extra if keep is None else jnp.logical_and(keep, extra)

    rows = jnp.arange(t)[:, None]
    cols = jnp.arange(s)[None, :]
    if is_causal:
        keep = both((cols <= rows)[None, None])
    if window is not None:
        left, right = (window, window) if isinstance(window, int) else window
        keep = both(((cols >= rows - left) & (cols <= rows + right))[None, None])
    if q_lengths is not None:
        q_lengths = jnp.asarray(q_lengths).reshape(b, 1, 1, 1)
        keep = both(rows[None, None] < q_lengths)
    if kv_lengths is not None:
        kv_lengths = jnp.asarray(kv_lengths).reshape(b, 1, 1, 1)
        keep = both(cols[None, None] < kv_lengths)
    return keep
