"""Regenerate ``optax_reference.json``: a few steps of every optimizer in ``CASES`` as optax
0.2.8 runs them, for ``tests/test_optim_optax_reference.py``.

Run with a Python that has JAX and optax installed (the package itself never imports them):

    python tests/data/make_optax_reference.py

Each case names a factory by its dotted path under the optimizer package (``"adam"``,
``"contrib.muon"``), its keyword arguments as JSON, and which extra arguments ``update``
takes. Arguments of the form ``{"$opt": [name, kwargs]}`` build an optimizer and
``{"$schedule": [name, kwargs]}`` a schedule, so the test can construct the same objects.
The problem is a separable quadratic ``sum(0.5 * a * (p - c)**2)`` over a small pytree; its
gradient ``a * (p - c)`` is computed the same way on both sides.
"""
from __future__ import annotations

import json
import pathlib
import warnings

import numpy as np

STEPS = 6

PROBLEM_SEED = 20250101


def problem():
    rng = np.random.default_rng(PROBLEM_SEED)
    shapes = {"b": (3,), "w": (2, 3)}
    f32 = np.float32
    return {
        "params": {k: rng.normal(size=s).astype(f32).tolist() for k, s in shapes.items()},
        "curvature": {k: rng.uniform(0.5, 2.0, size=s).astype(f32).tolist()
                      for k, s in shapes.items()},
        "center": {k: rng.normal(size=s).astype(f32).tolist() for k, s in shapes.items()},
    }


def opt(name, **kwargs):
    return {"$opt": [name, kwargs]}


def schedule(name, **kwargs):
    return {"$schedule": [name, kwargs]}


def case(factory, case_id=None, extra=(), steps=STEPS, rtol=1e-5, atol=1e-6, **kwargs):
    return {"id": case_id or factory, "factory": factory, "kwargs": kwargs,
            "extra": list(extra), "steps": steps, "rtol": rtol, "atol": atol}


CASES = [
    # ---- optimizers at the top level
    case("sgd", learning_rate=0.1),
    case("sgd", "sgd_nesterov", learning_rate=0.1, momentum=0.9, nesterov=True),
    case("adam", learning_rate=0.1),
    case("adam", "adam_schedule", learning_rate=schedule("linear_schedule", init_value=0.1,
                                                          end_value=0.01, transition_steps=4)),
    case("adamw", learning_rate=0.1, weight_decay=0.05),
    case("adamw", "adamw_mask", learning_rate=0.1, weight_decay=0.05,
         mask={"b": False, "w": True}),
    case("nadam", learning_rate=0.1),
    case("nadamw", learning_rate=0.1, weight_decay=0.05),
    case("adamax", learning_rate=0.1),
    case("adamaxw", learning_rate=0.1, weight_decay=0.05),
    case("adabelief", learning_rate=0.1),
    case("adadelta", learning_rate=2.0),
    case("adadelta", "adadelta_no_lr", weight_decay=0.1),
    case("adafactor", learning_rate=0.05),
    case("adafactor", "adafactor_factored", learning_rate=0.05, min_dim_size_to_factor=2,
         momentum=0.9, weight_decay_rate=0.01),
    case("adagrad", learning_rate=0.3),
    case("adan", learning_rate=0.1),
    case("adan", "adan_decay", learning_rate=0.1, weight_decay=0.05, eps_root=0.0),
    case("amsgrad", learning_rate=0.1),
    case("fromage", learning_rate=0.1),
    case("lamb", learning_rate=0.1, weight_decay=0.01),
    case("lars", learning_rate=0.1, weight_decay=0.01, trust_coefficient=0.5),
    case("lars", "lars_nesterov_masks", learning_rate=0.1, weight_decay=0.01,
         weight_decay_mask={"b": False, "w": True}, trust_ratio_mask={"b": True, "w": False},
         nesterov=True),
    case("lion", learning_rate=0.05, weight_decay=0.1),
    case("noisy_sgd", learning_rate=0.1, key=3),
    case("novograd", learning_rate=0.1, weight_decay=0.01),
    case("optimistic_gradient_descent", learning_rate=0.1, alpha=0.5, beta=0.7),
    case("optimistic_adam_v2", learning_rate=0.1, alpha=0.5, beta=0.7),
    case("polyak_sgd", extra=["value"], max_learning_rate=0.5),
    case("polyak_sgd", "polyak_sgd_plus", extra=["value"], max_learning_rate=0.5, f_min=-1.0,
         variant="sps+", eps=0.01),
    # RAdam's rho_t (~6 at step 6) is the difference of two numbers near 2000, so the one
    # ulp by which XLA's float ** int32 (repeated squaring) differs from a correctly rounded
    # power grows to ~2e-5 in the parameters
    case("radam", learning_rate=0.1, steps=7, atol=5e-5, rtol=5e-4),
    case("rmsprop", learning_rate=0.05),
    case("rmsprop", "rmsprop_centered_momentum", learning_rate=0.05, centered=True,
         momentum=0.5, bias_correction=True),
    case("rmsprop", "rmsprop_bias_correction", learning_rate=0.05, bias_correction=True,
         eps_in_sqrt=False),
    case("rprop", learning_rate=0.1),
    case("sign_sgd", learning_rate=0.1),
    case("signum", learning_rate=0.1),
    case("sm3", learning_rate=0.1),
    case("yogi", learning_rate=0.1),
]


# ---------------------------------------------------------------------------------------------

def _resolve(optax, dotted):
    obj = optax
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _decode(optax, value):
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ("$opt", "$schedule"):
        name, kwargs = next(iter(value.values()))
        return _resolve(optax, name)(**{k: _decode(optax, v) for k, v in kwargs.items()})
    return value


def describe(state):
    """The state's structure: NamedTuple type and field names, containers, leaf shape/dtype."""
    if hasattr(state, "_fields"):
        return {"type": type(state).__name__,
                "fields": {f: describe(getattr(state, f)) for f in state._fields}}
    if isinstance(state, (tuple, list)):
        return [describe(x) for x in state]
    if isinstance(state, dict):
        return {"dict": {str(k): describe(v) for k, v in sorted(state.items())}}
    if state is None:
        return None
    if hasattr(state, "dtype") and hasattr(state, "shape"):
        return [list(state.shape), str(state.dtype)]
    arr = np.asarray(state)
    return [list(arr.shape), str(arr.dtype)]


def run_case(optax, jnp, spec, prob):
    f32 = np.float32
    params = {k: jnp.asarray(np.array(v, f32)) for k, v in prob["params"].items()}
    a = {k: jnp.asarray(np.array(v, f32)) for k, v in prob["curvature"].items()}
    c = {k: jnp.asarray(np.array(v, f32)) for k, v in prob["center"].items()}

    def value_fn(p):
        return sum(jnp.sum(0.5 * a[k] * (p[k] - c[k]) ** 2) for k in sorted(p))

    def grad_fn(p):
        return {k: a[k] * (p[k] - c[k]) for k in p}

    kwargs = {k: _decode(optax, v) for k, v in spec["kwargs"].items()}
    tx = _resolve(optax, spec["factory"])(**kwargs)
    state = tx.init(params)
    trajectory = []
    for _ in range(spec["steps"]):
        extra = {}
        if "value" in spec["extra"]:
            extra["value"] = value_fn(params)
        if "grad" in spec["extra"]:
            extra["grad"] = grad_fn(params)
        if "value_fn" in spec["extra"]:
            extra["value_fn"] = value_fn
        updates, state = tx.update(grad_fn(params), state, params, **extra)
        params = optax.apply_updates(params, updates)
        # 9 significant digits round-trip float32 exactly
        trajectory.append({k: [float(f"{x:.9g}") for x in np.asarray(v).astype(f32).ravel()]
                           for k, v in sorted(params.items())})
    return trajectory, describe(state)


def main():
    import jax
    import jax.numpy as jnp
    import optax
    # functrans.random draws the bits of JAX's original (non-partitionable) threefry
    # splitting; with it the noisy optimizers' trajectories agree as well
    jax.config.update("jax_threefry_partitionable", False)
    warnings.simplefilter("ignore", DeprecationWarning)
    prob = problem()
    out = {"optax_version": optax.__version__, "problem": prob, "cases": []}
    for spec in CASES:
        trajectory, state = run_case(optax, jnp, spec, prob)
        out["cases"].append(dict(spec, trajectory=trajectory, state=state))
    path = pathlib.Path(__file__).with_name("optax_reference.json")
    text = json.dumps(out, separators=(",", ":"))
    path.write_text(text + "\n")
    print(f"wrote {len(out['cases'])} cases to {path} ({len(text)} bytes)")


if __name__ == "__main__":
    main()
