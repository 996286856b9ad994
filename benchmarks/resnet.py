"""A ResNet-style train step: a 3x3 stem convolution, then a residual block of two 3x3
convolutions, each followed by batch normalization (batch statistics, learned scale and
shift) and ReLU (the second after the residual sum), global average pooling, a dense layer,
softmax cross-entropy, gradient and SGD update; batch 64 of 32x32x3 images (NHWC), 16
channels.

functrans and JAX run the same source (:func:`make_resnet` takes the library); "numpy" is
functrans's reference interpreter, as in the CNN workload; PyTorch runs ``torch.func.grad``
with ``conv2d``/``batch_norm`` on the same data, eagerly and under ``torch.compile``.
"""
from __future__ import annotations

import numpy as np

from benchmarks import frameworks
from benchmarks.harness import Options, Row, compare, jit_impls, step_as_gradients

LEARNING_RATE = 0.1
CHANNELS = 16
EPSILON = 1e-5
DIMENSIONS = ("NHWC", "HWIO", "NHWC")


def make_data(batch: int, size: int = 32, seed: int = 0):
    rng = np.random.default_rng(seed)
    c = CHANNELS
    params = {"stem": (rng.standard_normal((3, 3, 3, c)) * 0.3).astype(np.float32),
              "conv1": (rng.standard_normal((3, 3, c, c)) * 0.1).astype(np.float32),
              "conv2": (rng.standard_normal((3, 3, c, c)) * 0.1).astype(np.float32),
              "dense": (rng.standard_normal((c, 10)) * 0.3).astype(np.float32)}
    for name in ("stem", "conv1", "conv2"):
        params[f"{name}_scale"] = np.ones(c, np.float32)
        params[f"{name}_shift"] = np.zeros(c, np.float32)
    x = rng.standard_normal((batch, size, size, 3)).astype(np.float32)
    onehot = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]
    return params, x, onehot


def make_resnet(lib, lr: float = LEARNING_RATE):
    """The train step written against ``lib`` (functrans or jax)."""
    jnp, lax = lib.numpy, lib.lax

    def conv_norm(p, name, h):
        h = lax.conv_general_dilated(h, p[name], (1, 1), "SAME", dimension_numbers=DIMENSIONS)
        mean = jnp.mean(h, axis=(0, 1, 2))
        var = jnp.mean(jnp.square(h - mean), axis=(0, 1, 2))
        return (h - mean) * (p[f"{name}_scale"] / jnp.sqrt(var + EPSILON)) + p[f"{name}_shift"]

    def loss(p, x, onehot):
        h = lib.nn.relu(conv_norm(p, "stem", x))
        r = lib.nn.relu(conv_norm(p, "conv1", h))
        h = lib.nn.relu(conv_norm(p, "conv2", r) + h)
        logits = jnp.mean(h, axis=(1, 2)) @ p["dense"]
        return -jnp.mean(jnp.sum(lib.nn.log_softmax(logits) * onehot, axis=1))

    def step(p, x, onehot):
        grads = lib.grad(loss)(p, x, onehot)
        return lib.tree_util.tree_map(lambda a, g: a - lr * g, p, grads)
    return step


def make_torch_resnet(torch, lr: float = LEARNING_RATE):
    F = torch.nn.functional

    def conv_norm(p, name, h):
        h = F.conv2d(h, p[name].permute(3, 2, 0, 1), padding=1)
        return F.batch_norm(h, None, None, p[f"{name}_scale"], p[f"{name}_shift"],
                            training=True, eps=EPSILON)

    def loss(p, x, onehot):
        h = F.relu(conv_norm(p, "stem", x.permute(0, 3, 1, 2)))     # NHWC -> NCHW
        r = F.relu(conv_norm(p, "conv1", h))
        h = F.relu(conv_norm(p, "conv2", r) + h)
        logits = h.mean(dim=(2, 3)) @ p["dense"]
        return -(F.log_softmax(logits, dim=1) * onehot).sum(dim=1).mean()

    def step(p, x, onehot):
        grads = torch.func.grad(loss)(p, x, onehot)
        return {k: p[k] - lr * grads[k] for k in p}
    return step


def resnet_train_step(options: Options) -> list[Row]:
    batch, size = (8, 16) if options.quick else (64, 32)
    params, x, onehot = make_data(batch, size)
    impls = jit_impls(make_resnet, (params, x, onehot), options)
    if "torch" in options.available:
        torch = frameworks.load("torch")
        tfn = make_torch_resnet(torch)
        targs = ({k: torch.from_numpy(v) for k, v in params.items()}, torch.from_numpy(x),
                 torch.from_numpy(onehot))
        impls["torch"] = lambda: tfn(*targs)
        if options.torch_compile:
            compiled = frameworks.torch_compile(tfn)
            if compiled is not None:
                impls["torch.compile"] = lambda: compiled(*targs)
    title = (f"ResNet block (conv-BN-ReLU x3, residual) train step, batch {batch}, "
             f"{size}x{size}x3")
    # batch statistics are float32 sums over batch x 32 x 32 positions: the reference's
    # gradients of the small shift parameters differ from float64 ones by ~3e-3 of their
    # largest entry (JAX and PyTorch by less), so the check allows 1e-2; a wrong convolution
    # or normalization gradient is off by order 1
    row = compare("resnet", title, impls, options, tol=1e-2,
                  check=step_as_gradients(params, LEARNING_RATE))
    row.notes = "numpy: functrans's reference interpreter (NumPy op by op)"
    return [row]
