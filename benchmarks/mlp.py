"""The MLP workloads: a training step and per-example gradients, in every implementation.

The network is 784-512-512-10 with ReLU hidden layers and softmax cross-entropy, float32.
functrans and JAX run the *same* Python code (:func:`make_mlp` takes the library as an
argument: porting is changing the import); NumPy runs a hand-written backward pass; PyTorch
runs ``torch.func.grad`` (and ``torch.func.vmap`` for per-example gradients).

Parameters are a list of ``{"b": bias, "w": weights}`` dicts in every implementation, so
results flatten to the same leaves (see ``harness.to_leaves``).
"""
from __future__ import annotations

import numpy as np

from benchmarks import frameworks
from benchmarks.harness import Options, Row, compare, step_as_gradients

LEARNING_RATE = 0.1


def sizes_for(options: Options) -> tuple[int, ...]:
    return (784, 128, 128, 10) if options.quick else (784, 512, 512, 10)


def batch_for(options: Options) -> int:
    return 32 if options.quick else 128


def make_data(sizes, batch: int, seed: int = 0):
    """Parameters (scaled normal weights, zero biases), inputs and one-hot labels."""
    rng = np.random.default_rng(seed)
    params = [{"w": (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32),
               "b": np.zeros(n, np.float32)} for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    onehot = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], batch)]
    return params, x, onehot


# ---- functrans and JAX: one source ------------------------------------------------------------

def make_mlp(lib, lr: float = LEARNING_RATE):
    """``(loss, train_step, per_example_grads)`` written against ``lib`` (functrans or jax).

        >>> import functrans
        >>> loss, step, per_example = make_mlp(functrans)
    """
    jnp = lib.numpy

    def loss(params, x, onehot):
        h = x
        for i, layer in enumerate(params):
            h = jnp.dot(h, layer["w"]) + layer["b"]
            if i < len(params) - 1:
                h = jnp.maximum(h, 0.0)
        m = jnp.max(h, axis=1, keepdims=True)
        logp = h - m - jnp.log(jnp.sum(jnp.exp(h - m), axis=1, keepdims=True))
        return -jnp.mean(jnp.sum(logp * onehot, axis=1))

    def train_step(params, x, onehot):
        grads = lib.grad(loss)(params, x, onehot)
        return lib.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)

    def example_loss(params, x, onehot):
        return loss(params, x[None], onehot[None])

    per_example_grads = lib.vmap(lib.grad(example_loss), in_axes=(None, 0, 0))
    return loss, train_step, per_example_grads


# ---- NumPy: the backward pass by hand --------------------------------------------------------

def numpy_forward(params, x):
    """Activations (inputs of each layer) and pre-activations of the hidden layers."""
    acts, pre = [x], []
    h = x
    for i, layer in enumerate(params):
        z = h @ layer["w"] + layer["b"]
        if i < len(params) - 1:
            pre.append(z)
            h = np.maximum(z, 0)
        else:
            h = z
        acts.append(h)
    return acts, pre


def _softmax_minus_onehot(logits, onehot):
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True) - onehot


def numpy_train_step(params, x, onehot, lr: float = LEARNING_RATE):
    acts, pre = numpy_forward(params, x)
    g = _softmax_minus_onehot(acts[-1], onehot) / x.shape[0]
    new = [None] * len(params)
    for i in reversed(range(len(params))):
        w, b = params[i]["w"], params[i]["b"]
        new[i] = {"w": w - lr * (acts[i].T @ g), "b": b - lr * g.sum(axis=0)}
        if i:
            g = (g @ w.T) * (pre[i - 1] > 0)
    return new


def numpy_per_example_grads(params, x, onehot):
    """Per-example gradients: outer products per example with einsum, no Python loop."""
    acts, pre = numpy_forward(params, x)
    g = _softmax_minus_onehot(acts[-1], onehot)     # each example's own mean over 1 row
    grads = [None] * len(params)
    for i in reversed(range(len(params))):
        grads[i] = {"w": np.einsum("bi,bj->bij", acts[i], g), "b": g}
        if i:
            g = (g @ params[i]["w"].T) * (pre[i - 1] > 0)
    return grads


# ---- PyTorch ----------------------------------------------------------------------------------

def make_torch_mlp(torch, lr: float = LEARNING_RATE):
    def loss(params, x, onehot):
        h = x
        for i, layer in enumerate(params):
            h = h @ layer["w"] + layer["b"]
            if i < len(params) - 1:
                h = torch.relu(h)
        logp = torch.log_softmax(h, dim=1)
        return -(logp * onehot).sum(dim=1).mean()

    def train_step(params, x, onehot):
        grads = torch.func.grad(loss)(params, x, onehot)
        return [{k: p[k] - lr * g[k] for k in p} for p, g in zip(params, grads)]

    def example_loss(params, x, onehot):
        return loss(params, x[None], onehot[None])

    per_example_grads = torch.func.vmap(torch.func.grad(example_loss), in_dims=(None, 0, 0))
    return loss, train_step, per_example_grads


# ---- the workloads ----------------------------------------------------------------------------

def _implementations(options: Options, which: str, params, x, onehot) -> dict:
    """Zero-argument callables running ``which`` ("step" or "per_example") everywhere."""
    impls = {}
    numpy_fn = numpy_train_step if which == "step" else numpy_per_example_grads
    ft = frameworks.load("functrans")
    _, step, per_example = make_mlp(ft)
    fn = ft.jit(step if which == "step" else per_example)
    fargs = ft.tree_util.tree_map(ft.numpy.asarray, (params, x, onehot))
    impls["functrans"] = lambda: ft.block_until_ready(fn(*fargs))
    if "jax" in options.available:
        jax = frameworks.load("jax")
        _, jstep, jper_example = make_mlp(jax)
        jfn = jax.jit(jstep if which == "step" else jper_example)
        jargs = jax.tree_util.tree_map(jax.numpy.asarray, (params, x, onehot))
        impls["jax"] = lambda: jax.block_until_ready(jfn(*jargs))
    impls["numpy"] = lambda: numpy_fn(params, x, onehot)
    if "torch" in options.available:
        torch = frameworks.load("torch")
        _, tstep, tper_example = make_torch_mlp(torch)
        tfn = tstep if which == "step" else tper_example
        targs = ([{k: torch.from_numpy(v) for k, v in p.items()} for p in params],
                 torch.from_numpy(x), torch.from_numpy(onehot))
        impls["torch"] = lambda: tfn(*targs)
        if options.torch_compile:
            compiled = frameworks.torch_compile(tfn)
            if compiled is not None:
                impls["torch.compile"] = lambda: compiled(*targs)
    return impls


def mlp_train_step(options: Options) -> list[Row]:
    sizes, batch = sizes_for(options), batch_for(options)
    params, x, onehot = make_data(sizes, batch)
    title = f"MLP {'-'.join(map(str, sizes))} train step, batch {batch}"
    impls = _implementations(options, "step", params, x, onehot)
    return [compare("mlp", title, impls, options, tol=2e-4, check=step_as_gradients(params, LEARNING_RATE))]


def per_example_gradients(options: Options) -> list[Row]:
    sizes, batch = sizes_for(options), batch_for(options)
    params, x, onehot = make_data(sizes, batch)
    title = f"per-example grads jit(vmap(grad)), batch {batch}"
    impls = _implementations(options, "per_example", params, x, onehot)
    return [compare("per_example", title, impls, options, tol=2e-4)]
