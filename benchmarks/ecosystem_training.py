"""Train the same small MLP with equinox, flax.linen and flax.nnx (each with optax), written
for JAX, and print the losses: run it under JAX and under functrans to compare.

    /work/jaxvenv/bin/python benchmarks/ecosystem_training.py            # JAX
    python -m functrans.run benchmarks/ecosystem_training.py             # functrans

Prints one JSON object: library -> the loss after each of the training steps. The data,
the initial parameters and the optimizer are the same under both (parameters are made with
NumPy from a fixed seed, then loaded into each library's model), so the losses should agree
to float32 rounding. ``--compare a.json b.json`` prints the largest relative difference.
"""
from __future__ import annotations

import json
import sys

import numpy as np

STEPS = 50
SIZES = (8, 32, 32, 1)


def _data_and_weights():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, SIZES[0])).astype(np.float32)
    y = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
    weights = [(rng.normal(size=(m, n)).astype(np.float32) / np.sqrt(m),
                np.zeros(n, np.float32)) for m, n in zip(SIZES[:-1], SIZES[1:])]
    return x, y, weights


def train_equinox():
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import optax
    x, y, weights = _data_and_weights()
    model = eqx.nn.MLP(SIZES[0], SIZES[-1], SIZES[1], len(SIZES) - 2,
                       activation=jax.nn.tanh, key=jax.random.PRNGKey(0))
    for i, (w, b) in enumerate(weights):
        model = eqx.tree_at(lambda m, i=i: (m.layers[i].weight, m.layers[i].bias), model,
                            (jnp.asarray(w.T), jnp.asarray(b)))
    optimizer = optax.adam(1e-2)
    state = optimizer.init(eqx.filter(model, eqx.is_array))

    @eqx.filter_jit
    def step(model, state):
        def loss_fn(m):
            return jnp.mean((jax.vmap(m)(x) - y) ** 2)
        loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
        updates, state = optimizer.update(grads, state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), state, loss

    losses = []
    for _ in range(STEPS):
        model, state, loss = step(model, state)
        losses.append(float(loss))
    return losses


def train_linen():
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax
    x, y, weights = _data_and_weights()

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, h):
            for i, size in enumerate(SIZES[1:]):
                h = nn.Dense(size, name=f"dense{i}")(h)
                if i < len(SIZES) - 2:
                    h = jnp.tanh(h)
            return h

    model = MLP()
    params = {"params": {f"dense{i}": {"kernel": jnp.asarray(w), "bias": jnp.asarray(b)}
                         for i, (w, b) in enumerate(weights)}}
    shapes = jax.tree.map(jnp.shape, model.init(jax.random.PRNGKey(0), x))
    assert shapes == jax.tree.map(jnp.shape, params), shapes
    optimizer = optax.adam(1e-2)
    state = optimizer.init(params)

    @jax.jit
    def step(params, state):
        loss, grads = jax.value_and_grad(
            lambda p: jnp.mean((model.apply(p, x) - y) ** 2))(params)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    losses = []
    for _ in range(STEPS):
        params, state, loss = step(params, state)
        losses.append(float(loss))
    return losses


def train_nnx():
    from flax import nnx
    import jax.numpy as jnp
    import optax
    x, y, weights = _data_and_weights()

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(m, n, rngs=rngs)
                                    for m, n in zip(SIZES[:-1], SIZES[1:])])

        def __call__(self, h):
            for i, layer in enumerate(self.layers):
                h = layer(h)
                if i < len(self.layers) - 1:
                    h = jnp.tanh(h)
            return h

    model = MLP(nnx.Rngs(0))
    for layer, (w, b) in zip(model.layers, weights):
        layer.kernel.value = jnp.asarray(w)
        layer.bias.value = jnp.asarray(b)
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        optimizer.update(model, grads)
        return loss

    return [float(step(model, optimizer)) for _ in range(STEPS)]


TRAINERS = {"equinox": train_equinox, "flax.linen": train_linen, "flax.nnx": train_nnx}


def compare(path_a: str, path_b: str) -> None:
    with open(path_a) as fa, open(path_b) as fb:
        a, b = json.load(fa), json.load(fb)
    for name in TRAINERS:
        if name in a and name in b and isinstance(a[name], list) and isinstance(b[name], list):
            la, lb = np.array(a[name]), np.array(b[name])
            diff = np.max(np.abs(la - lb) / np.maximum(np.abs(la), 1e-12))
            print(f"{name}: loss {la[0]:.6f} -> {la[-1]:.6f} vs {lb[0]:.6f} -> {lb[-1]:.6f}; "
                  f"largest relative difference {diff:.2e}")
        else:
            print(f"{name}: {a.get(name)!r} vs {b.get(name)!r}")


def main(argv) -> None:
    if argv[:1] == ["--compare"]:
        compare(argv[1], argv[2])
        return
    results = {}
    for name, train in TRAINERS.items():
        try:
            results[name] = train()
        except Exception as err:  # report, and go on to the next library
            results[name] = f"{type(err).__name__}: {err}"
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
