"""A small CNN train step: two 3x3 convolutions with ReLU and 2x2 max pooling, a dense layer,
softmax cross-entropy, gradient and SGD update, batch 64 of 28x28x1 images (NHWC).

functrans and JAX run the same source (:func:`make_cnn` takes the library); the "numpy"
column is functrans's reference interpreter (each primitive's NumPy implementation, op by
op: ``jit(..., backend="reference")``), which is also what the others are checked against;
PyTorch runs ``torch.func.grad`` with ``conv2d``/``max_pool2d`` on the same NHWC data.
"""
from __future__ import annotations

import numpy as np

from benchmarks import frameworks
from benchmarks.harness import Options, Row, compare, jit_impls, step_as_gradients

LEARNING_RATE = 0.1
DIMENSIONS = ("NHWC", "HWIO", "NHWC")


def make_data(batch: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    params = {"w1": (rng.standard_normal((3, 3, 1, 16)) * 0.3).astype(np.float32),
              "w2": (rng.standard_normal((3, 3, 16, 32)) * 0.1).astype(np.float32),
              "w3": (rng.standard_normal((7 * 7 * 32, 10)) * 0.05).astype(np.float32)}
    x = rng.standard_normal((batch, 28, 28, 1)).astype(np.float32)
    onehot = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]
    return params, x, onehot


def make_cnn(lib, lr: float = LEARNING_RATE):
    """The train step written against ``lib`` (functrans or jax)."""
    jnp, lax = lib.numpy, lib.lax

    def pool(h):
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def loss(p, x, onehot):
        h = pool(lib.nn.relu(lax.conv_general_dilated(x, p["w1"], (1, 1), "SAME",
                                                      dimension_numbers=DIMENSIONS)))
        h = pool(lib.nn.relu(lax.conv_general_dilated(h, p["w2"], (1, 1), "SAME",
                                                      dimension_numbers=DIMENSIONS)))
        logits = h.reshape(h.shape[0], -1) @ p["w3"]
        return -jnp.mean(jnp.sum(lib.nn.log_softmax(logits) * onehot, axis=1))

    def step(p, x, onehot):
        grads = lib.grad(loss)(p, x, onehot)
        return lib.tree_util.tree_map(lambda a, g: a - lr * g, p, grads)
    return step


def make_torch_cnn(torch, lr: float = LEARNING_RATE):
    F = torch.nn.functional

    def loss(p, x, onehot):
        h = x.permute(0, 3, 1, 2)                                    # NHWC -> NCHW
        h = F.max_pool2d(F.relu(F.conv2d(h, p["w1"].permute(3, 2, 0, 1), padding=1)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, p["w2"].permute(3, 2, 0, 1), padding=1)), 2)
        h = h.permute(0, 2, 3, 1).reshape(h.shape[0], -1)            # flatten as NHWC
        return -(F.log_softmax(h @ p["w3"], dim=1) * onehot).sum(dim=1).mean()

    def step(p, x, onehot):
        grads = torch.func.grad(loss)(p, x, onehot)
        return {k: p[k] - lr * grads[k] for k in p}
    return step


def cnn_train_step(options: Options) -> list[Row]:
    batch = 16 if options.quick else 64
    params, x, onehot = make_data(batch)
    impls = jit_impls(make_cnn, (params, x, onehot), options)
    if "torch" in options.available:
        torch = frameworks.load("torch")
        tfn = make_torch_cnn(torch)
        targs = ({k: torch.from_numpy(v) for k, v in params.items()}, torch.from_numpy(x),
                 torch.from_numpy(onehot))
        impls["torch"] = lambda: tfn(*targs)
    title = f"CNN conv-pool-conv-pool-dense train step, batch {batch}"
    row = compare("cnn", title, impls, options, tol=2e-4, check=step_as_gradients(params, LEARNING_RATE))
    row.notes = "numpy: functrans's reference interpreter (NumPy op by op)"
    return [row]
