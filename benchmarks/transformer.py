"""A decoder-only transformer train step: token and position embeddings (a gather), two
pre-norm blocks of 4-head causal self-attention and a GELU MLP, a tied output projection,
softmax cross-entropy, gradient and SGD update. Batch 16 of 64 tokens, width 128.

functrans and JAX run the same source (:func:`make_transformer` takes the library); the
"numpy" column is functrans's reference interpreter (each primitive's NumPy implementation,
op by op), which the others are checked against.
"""
from __future__ import annotations

import numpy as np

from benchmarks.harness import Options, Row, compare, jit_impls, step_as_gradients

LEARNING_RATE = 0.05


def sizes_for(options: Options) -> dict:
    if options.quick:
        return dict(vocab=64, seq=16, width=32, heads=2, layers=1, batch=4)
    return dict(vocab=96, seq=64, width=128, heads=4, layers=2, batch=16)


def make_data(sizes: dict, seed: int = 0):
    rng = np.random.default_rng(seed)
    d, v, t = sizes["width"], sizes["vocab"], sizes["seq"]

    def dense(m, n):
        return (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32)
    params = {"embed": (rng.standard_normal((v, d)) * 0.1).astype(np.float32),
              "pos": (rng.standard_normal((t, d)) * 0.1).astype(np.float32),
              "final_scale": np.ones(d, np.float32), "final_shift": np.zeros(d, np.float32),
              "blocks": [{"scale1": np.ones(d, np.float32), "shift1": np.zeros(d, np.float32),
                          "qkv": dense(d, 3 * d), "out": dense(d, d),
                          "scale2": np.ones(d, np.float32), "shift2": np.zeros(d, np.float32),
                          "up": dense(d, 4 * d), "up_bias": np.zeros(4 * d, np.float32),
                          "down": dense(4 * d, d), "down_bias": np.zeros(d, np.float32)}
                         for _ in range(sizes["layers"])]}
    tokens = rng.integers(0, v, (sizes["batch"], t + 1)).astype(np.int32)
    targets = np.eye(v, dtype=np.float32)[tokens[:, 1:]]
    return params, tokens[:, :-1], targets


def make_loss(lib, heads: int):
    """The model's loss ``loss(params, tokens, targets)`` written against ``lib`` (functrans or
    jax)."""
    jnp, lax, nn = lib.numpy, lib.lax, lib.nn

    def layer_norm(x, scale, shift):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        return (x - mean) * lax.rsqrt(var + 1e-5) * scale + shift

    def attention(x, p):
        b, t, d = x.shape
        q, k, v = jnp.split(x @ p["qkv"], 3, axis=-1)
        q, k, v = (z.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3) for z in (q, k, v))
        scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(d // heads).astype(np.float32)
        causal = jnp.tril(jnp.ones((t, t), bool))
        weights = nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
        out = jnp.einsum("bhqk,bhkd->bhqd", weights, v).transpose(0, 2, 1, 3).reshape(b, t, d)
        return out @ p["out"]

    def loss(params, tokens, targets):
        x = params["embed"][tokens] + params["pos"]
        for p in params["blocks"]:
            x = x + attention(layer_norm(x, p["scale1"], p["shift1"]), p)
            h = nn.gelu(layer_norm(x, p["scale2"], p["shift2"]) @ p["up"] + p["up_bias"])
            x = x + h @ p["down"] + p["down_bias"]
        x = layer_norm(x, params["final_scale"], params["final_shift"])
        logits = x @ params["embed"].T
        return -jnp.mean(jnp.sum(nn.log_softmax(logits) * targets, axis=-1))
    return loss


def make_transformer(lib, heads: int, lr: float = LEARNING_RATE):
    """The train step written against ``lib`` (functrans or jax)."""
    loss = make_loss(lib, heads)

    def step(params, tokens, targets):
        grads = lib.grad(loss)(params, tokens, targets)
        return lib.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
    return step


def transformer_train_step(options: Options) -> list[Row]:
    sizes = sizes_for(options)
    params, tokens, targets = make_data(sizes)
    impls = jit_impls(lambda lib: make_transformer(lib, sizes["heads"]),
                      (params, tokens, targets), options)
    title = (f"transformer {sizes['layers']}x(attn+MLP) d{sizes['width']} train step, "
             f"batch {sizes['batch']}x{sizes['seq']}")
    row = compare("transformer", title, impls, options, tol=2e-4,
                  check=step_as_gradients(params, LEARNING_RATE))
    row.notes = "numpy: functrans's reference interpreter (NumPy op by op)"
    return [row]
