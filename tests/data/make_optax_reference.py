"""Regenerate ``optax_reference.json``: a few steps of every optimizer in ``CASES`` as optax
0.2.8 runs them, for ``tests/test_optim_optax_reference.py``.

Run with a Python that has JAX and optax installed (the package itself never imports them):

    python tests/data/make_optax_reference.py [name ...]

(with names, only those cases and scenarios are recomputed).

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
import sys
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


def ref(name):
    return {"$ref": name}


def fn(name):
    return {"$fn": name}


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
    # ---- line searches and L-BFGS (update takes value, grad and value_fn)
    case("lbfgs", extra=["value", "grad", "value_fn"]),
    case("lbfgs", "lbfgs_memory_2_lr", extra=["value", "grad", "value_fn"], memory_size=2,
         learning_rate=0.5, scale_init_precond=False),
    case("lbfgs", "lbfgs_no_linesearch", extra=["value", "grad", "value_fn"],
         learning_rate=0.1, linesearch=None),
    case("chain", "sgd_zoom_linesearch", extra=["value", "grad", "value_fn"],
         args=[opt("sgd", learning_rate=1.0),
               opt("scale_by_zoom_linesearch", max_linesearch_steps=10)]),
    case("chain", "sgd_zoom_linesearch_capped", extra=["value", "grad", "value_fn"],
         args=[opt("sgd", learning_rate=1.0),
               opt("scale_by_zoom_linesearch", max_linesearch_steps=10, max_learning_rate=0.3,
                   initial_guess_strategy="one", approx_dec_rtol=None)]),
    case("chain", "sgd_backtracking", extra=["value", "grad", "value_fn"],
         args=[opt("sgd", learning_rate=1.0),
               opt("scale_by_backtracking_linesearch", max_backtracking_steps=15)]),
    case("chain", "sgd_backtracking_store_grad", extra=["value", "grad", "value_fn"],
         args=[opt("sgd", learning_rate=2.0),
               opt("scale_by_backtracking_linesearch", max_backtracking_steps=15,
                   decrease_factor=0.5, store_grad=True)]),
    # ---- transformations and wrappers
    case("chain", "chain_clip_trace", args=[opt("clip", max_delta=0.5), opt("trace", decay=0.5),
                                            opt("scale", step_size=-0.1)]),
    case("named_chain", "named_chain_rms", args=[["rms", opt("scale_by_rms")],
                                                  ["lr", opt("scale", step_size=-0.05)]]),
    case("masked", "masked_adam", inner=opt("adam", learning_rate=0.1),
         mask={"b": True, "w": False}),
    case("partition", transforms={"matrix": opt("adam", learning_rate=0.1),
                                  "vector": opt("sgd", learning_rate=0.2)},
         param_labels=fn("label_by_rank")),
    case("multi_transform", transforms={"matrix": opt("sgd", learning_rate=0.1, momentum=0.9),
                                        "vector": opt("set_to_zero")},
         param_labels={"b": "vector", "w": "matrix"}),
    case("chain", "freeze_sgd", args=[opt("freeze", mask={"b": True, "w": False}),
                                      opt("sgd", learning_rate=0.1)]),
    case("selective_transform", optimizer=opt("adam", learning_rate=0.1),
         freeze_mask={"b": False, "w": True}),
    case("flatten", "flatten_adam", inner=opt("adam", learning_rate=0.1)),
    case("MultiSteps", "multi_steps", opt=opt("adam", learning_rate=0.1), every_k_schedule=2),
    case("MultiSteps", "multi_steps_sum_skip", opt=opt("sgd", learning_rate=0.1),
         every_k_schedule=3, use_grad_mean=False,
         should_skip_update_fn=ref("skip_not_finite")),
    case("chain", "apply_every", args=[opt("sgd", learning_rate=0.1), opt("apply_every", k=2)]),
    case("conditionally_mask", inner=opt("sgd", learning_rate=0.1),
         should_transform_fn=fn("from_step_2")),
    case("conditionally_transform", inner=opt("scale", step_size=-0.3),
         should_transform_fn=fn("every_other_step")),
    case("apply_if_finite", inner=opt("adam", learning_rate=0.1), max_consecutive_errors=2),
    case("chain", "adaptive_grad_clip", args=[opt("adaptive_grad_clip", clipping=0.1),
                                              opt("sgd", learning_rate=1.0)]),
    case("chain", "clip_by_global_norm",
         args=[opt("clip_by_global_norm", max_norm=0.5), opt("sgd", learning_rate=0.5)]),
    case("chain", "clip_by_block_rms", args=[opt("clip_by_block_rms", threshold=0.3),
                                             opt("sgd", learning_rate=0.5)]),
    case("chain", "normalize_by_update_norm",
         args=[opt("normalize_by_update_norm", scale_factor=0.2), opt("scale", step_size=-1.0)]),
    case("chain", "centralize_sgd", args=[opt("centralize"), opt("sgd", learning_rate=0.3)]),
    case("chain", "keep_params_nonnegative",
         args=[opt("sgd", learning_rate=1.5), opt("keep_params_nonnegative")]),
    case("chain", "zero_nans_ema", args=[opt("zero_nans"), opt("ema", decay=0.5),
                                         opt("scale", step_size=-0.2)]),
    case("chain", "add_decayed_weights_schedule",
         args=[opt("add_decayed_weights",
                   weight_decay=schedule("linear_schedule", init_value=0.5, end_value=0.0,
                                         transition_steps=4)),
               opt("sgd", learning_rate=0.1)]),
    case("chain", "monitor_snapshot",
         args=[opt("monitor", measures={"ema": opt("measure_with_ema", measure=ref("tree.norm"),
                                                   decay=0.5)}),
               opt("snapshot", measure_name="norm", measure=ref("tree.norm")),
               opt("sgd", learning_rate=0.1)]),
    case(["inject_hyperparams", {"inner_factory": ref("adamw")}], "inject_hyperparams_adamw",
         learning_rate=schedule("exponential_decay", init_value=0.1, transition_steps=2,
                                decay_rate=0.5), weight_decay=0.01),
    case("chain", "scale_by_distance_over_gradients",
         args=[opt("scale_by_distance_over_gradients"), opt("scale", step_size=-1.0)]),
    case("chain", "scale_by_lion_smooth",
         args=[opt("scale_by_lion", mode="smooth", smooth_beta=3.0), opt("scale", step_size=-0.1)]),
    case("chain", "scale_by_lion_refined",
         args=[opt("scale_by_lion", mode="refined"), opt("scale", step_size=-0.1)]),
    case("chain", "scale_by_param_block_norm",
         args=[opt("scale_by_param_block_norm"), opt("scale", step_size=-0.1)]),
    case("chain", "stateless_with_tree_map",
         args=[opt("stateless_with_tree_map", f=fn("plus_tenth_of_param")),
               opt("scale", step_size=-0.1)]),
    # ---- contrib
    case("contrib.acprop", learning_rate=0.1, weight_decay=0.01),
    case("contrib.ademamix", learning_rate=0.1, b3=0.99),
    case("contrib.ademamix", "contrib.ademamix_schedules", learning_rate=0.1,
         b3=schedule("linear_schedule", init_value=0.9, end_value=0.99, transition_steps=5),
         alpha=schedule("linear_schedule", init_value=0.0, end_value=5.0, transition_steps=5)),
    case("contrib.simplified_ademamix", learning_rate=0.05, alpha=2.0, weight_decay=0.01),
    case("contrib.adopt", learning_rate=0.1),
    case("contrib.adopt", "contrib.adopt_nesterov_unclipped", learning_rate=0.1, b2=0.9,
         nesterov=True, use_clipping=False),
    case("contrib.cocob"),
    case("contrib.cocob", "contrib.cocob_decay", learning_rate=0.5, alpha=10.0,
         weight_decay=0.01),
    case("contrib.dadapt_adamw", learning_rate=1.0, weight_decay=0.01),
    case("contrib.prodigy"),
    case("contrib.prodigy", "contrib.prodigy_safeguard", safeguard_warmup=True, beta3=0.9,
         weight_decay=0.01),
    case("contrib.dog"),
    case("contrib.dog", "contrib.dog_distance", init_step=["distance", 0.1], weight_decay=0.01),
    case("contrib.dog", "contrib.dog_learning_rate", init_step=["learning_rate", 0.05]),
    case("contrib.dowg"),
    case("contrib.dowg", "contrib.dowg_init", init_estim_sq_dist=0.5, weight_decay=0.01),
    case("contrib.madgrad", learning_rate=0.1),
    case("contrib.madgrad", "contrib.madgrad_schedule",
         learning_rate=schedule("linear_schedule", init_value=0.1, end_value=0.01,
                                transition_steps=5), momentum=0.5, weight_decay=0.01),
    case("contrib.mechanize", base_optimizer=opt("adam", learning_rate=1.0)),
    case("contrib.momo", extra=["value"], learning_rate=0.5),
    case("contrib.momo", "contrib.momo_adaptive", extra=["value"], learning_rate=0.5,
         weight_decay=0.01, adapt_lower_bound=True, lower_bound=-1.0),
    case("contrib.momo_adam", extra=["value"], learning_rate=0.1),
    case("contrib.momo_adam", "contrib.momo_adam_adaptive", extra=["value"], learning_rate=0.1,
         weight_decay=0.01, adapt_lower_bound=True, lower_bound=-1.0),
    case("contrib.muon", learning_rate=0.05),
    case("contrib.muon", "contrib.muon_variants", learning_rate=0.05, nesterov=False,
         adaptive=True, weight_decay=0.01, consistent_rms=0.2, adam_learning_rate=0.01),
    case("contrib.muon", "contrib.muon_spectral", learning_rate=0.05,
         preconditioning="spectral", ns_coeffs="dion"),
    case("contrib.muon", "contrib.muon_aol", learning_rate=0.05, preconditioning="aol"),
    case("contrib.muon", "contrib.muon_schatten", learning_rate=0.05,
         preconditioning="schatten", ns_steps=3),
    case("chain", "contrib.reduce_on_plateau", extra=["value"],
         args=[opt("sgd", learning_rate=0.6),
               opt("contrib.reduce_on_plateau", factor=0.5, patience=1, accumulation_size=2,
                   cooldown=1)]),
    case("contrib.sam", optimizer=opt("sgd", learning_rate=0.1),
         adv_optimizer=opt("chain", args=[opt("contrib.normalize"),
                                          opt("sgd", learning_rate=0.05)])),
    case("contrib.sam", "contrib.sam_keep_state", sync_period=3, reset_state=False,
         optimizer=opt("adam", learning_rate=0.1), adv_optimizer=opt("sgd", learning_rate=0.05)),
    case("contrib.schedule_free_adamw", learning_rate=0.05),
    case("contrib.schedule_free_sgd", learning_rate=0.5, warmup_steps=3, weight_decay=0.01),
    case("contrib.schedule_free", base_optimizer=opt("adam", learning_rate=0.1),
         learning_rate=0.1, b1=0.8),
    case("contrib.sophia", extra=["obj_fn"], learning_rate=0.1, update_interval=2),
    case("contrib.galore", learning_rate=0.1, rank=1, update_proj_gap=3),
    case("contrib.galore", "contrib.galore_sgd", learning_rate=0.1, rank=2,
         base_optimizer=opt("sgd", learning_rate=1.0, momentum=0.5), scale=0.5),
    case("chain", "contrib.normalize",
         args=[opt("contrib.normalize"), opt("sgd", learning_rate=0.2)]),
]


# ---------------------------------------------------------------------------------------------

def _resolve(optax, dotted):
    obj = optax
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


FUNCTIONS = {
    # named functions a case can pass as an argument ({"$fn": name})
    "from_step_2": lambda step, **_: step >= 2,
    "every_other_step": lambda step, **_: step % 2 == 0,
    "label_by_rank": lambda params: {k: "matrix" if len(v.shape) > 1 else "vector"
                                     for k, v in params.items()},
    "plus_tenth_of_param": lambda g, p: g + 0.1 * p,
}


def _decode(optax, value):
    """Build the objects a case names: ``{"$opt": [name, kwargs]}`` and ``{"$schedule":
    [name, kwargs]}`` call ``name``, ``{"$ref": name}`` is ``name`` itself, ``{"$fn":
    name}`` one of ``FUNCTIONS``; dicts and lists are decoded inside."""
    if isinstance(value, dict) and len(value) == 1:
        (key, arg), = value.items()
        if key in ("$opt", "$schedule"):
            name, kwargs = arg
            kwargs = {k: _decode(optax, v) for k, v in kwargs.items()}
            return _resolve(optax, name)(*kwargs.pop("args", ()), **kwargs)
        if key == "$ref":
            return _resolve(optax, arg)
        if key == "$fn":
            return FUNCTIONS[arg]
    if isinstance(value, dict):
        return {k: _decode(optax, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(optax, v) for v in value]
    return value


def _factory(optax, factory):
    """A factory is a dotted name, or ``[dotted name, kwargs]`` called to make one
    (``["inject_hyperparams", {"inner_factory": {"$ref": "adam"}}]``)."""
    if isinstance(factory, list):
        name, kwargs = factory
        return _resolve(optax, name)(**_decode(optax, kwargs))
    return _resolve(optax, factory)


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


def run_case(optax, jnp, spec, prob, jit=None):
    """Run ``spec``'s optimizer for its steps; with ``jit`` (jax's or functrans's), the
    update is compiled (functions passed as extra arguments are closed over)."""
    f32 = np.float32
    params = {k: jnp.asarray(np.array(v, f32)) for k, v in prob["params"].items()}
    a = {k: jnp.asarray(np.array(v, f32)) for k, v in prob["curvature"].items()}
    c = {k: jnp.asarray(np.array(v, f32)) for k, v in prob["center"].items()}

    def value_fn(p):
        return sum(jnp.sum(0.5 * a[k] * (p[k] - c[k]) ** 2) for k in sorted(p))

    def grad_fn(p):
        return {k: a[k] * (p[k] - c[k]) for k in p}

    kwargs = _decode(optax, spec["kwargs"])
    args = kwargs.pop("args", ())
    tx = _factory(optax, spec["factory"])(*args, **kwargs)
    state = tx.init(params)
    functions = {name: value_fn for name in ("value_fn", "obj_fn") if name in spec["extra"]}

    def update(grads, state, params, **arrays):
        return tx.update(grads, state, params, **arrays, **functions)

    if jit is not None:
        update = jit(update)
    trajectory = []
    for _ in range(spec["steps"]):
        arrays = {}
        if "value" in spec["extra"]:
            arrays["value"] = value_fn(params)
        if "grad" in spec["extra"]:
            arrays["grad"] = grad_fn(params)
        updates, state = update(grad_fn(params), state, params, **arrays)
        params = optax.apply_updates(params, updates)
        # 9 significant digits round-trip float32 exactly
        trajectory.append({k: [float(f"{x:.9g}") for x in np.asarray(v).astype(f32).ravel()]
                           for k, v in sorted(params.items())})
    return trajectory, describe(state)


# ---------------------------------------------------------------------------------------------
# Scenarios: computations beyond a few optimizer steps, written once against the common API
# (``optax`` is the optimizer package, ``jnp`` its numpy, ``F`` its jax-like top level). Each
# returns a JSON-able tree of numbers; ``SCENARIO_TOLERANCES`` holds (rtol, atol) per name.
# ---------------------------------------------------------------------------------------------

def _tolist(tree, jnp):
    if isinstance(tree, dict):
        return {str(k): _tolist(v, jnp) for k, v in sorted(tree.items())}
    if isinstance(tree, (list, tuple)):
        return [_tolist(v, jnp) for v in tree]
    arr = np.asarray(tree)
    if arr.dtype == bool or np.issubdtype(arr.dtype, np.integer):
        return arr.tolist()
    return np.vectorize(lambda x: float(f"{x:.9g}"), otypes=[float])(arr.astype(np.float64)
                                                                     ).tolist()


def _rosenbrock(jnp):
    def f(x):
        return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
    return f


def scenario_rosenbrock_lbfgs(optax, jnp, F):
    """L-BFGS with the zoom line search from (-1.2, 1) until |grad| < 1e-4."""
    f = _rosenbrock(jnp)
    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(f)

    @F.jit
    def step(x, state):
        value, grad = value_and_grad(x, state=state)
        updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=f)
        return optax.apply_updates(x, updates), state

    x = jnp.asarray([-1.2, 1.0])
    state = opt.init(x)
    iterates = []
    for _ in range(100):
        x, state = step(x, state)
        iterates.append(x)
        if float(optax.tree.norm(optax.tree.get(state, "grad"))) < 1e-4:
            break
    return {"iterations": len(iterates), "first_iterates": iterates[:10], "x": x,
            "linesearch_steps": int(optax.tree.get(state, "info").num_linesearch_steps)}


def _data(seed, *shape):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def scenario_schedules(optax, jnp, F):
    s = optax.schedules
    schedules = {
        "constant": s.constant_schedule(0.3),
        "polynomial": s.polynomial_schedule(1.0, 0.1, 2.0, 6, transition_begin=2),
        "linear": s.linear_schedule(0.0, 1.0, 5),
        "piecewise_constant": s.piecewise_constant_schedule(1.0, {2: 0.5, 5: 0.1}),
        "exponential": s.exponential_decay(1.0, 3, 0.5, transition_begin=1, end_value=0.2),
        "exponential_staircase": s.exponential_decay(1.0, 3, 0.5, staircase=True),
        "exponential_growth": s.exponential_decay(0.1, 2, 2.0, end_value=0.5),
        "cosine_decay": s.cosine_decay_schedule(1.0, 8, alpha=0.1, exponent=2.0),
        "piecewise_interpolate_linear": s.piecewise_interpolate_schedule(
            "linear", 1.0, {3: 0.5, 7: 0.2}),
        "piecewise_interpolate_cosine": s.piecewise_interpolate_schedule(
            "cosine", 1.0, {3: 0.5, 7: 0.2}),
        "linear_onecycle": s.linear_onecycle_schedule(10, 1.0),
        "cosine_onecycle": s.cosine_onecycle_schedule(10, 1.0, pct_start=0.4),
        "warmup_constant": s.warmup_constant_schedule(0.0, 1.0, 3),
        "warmup_cosine_decay": s.warmup_cosine_decay_schedule(0.0, 1.0, 2, 9, end_value=0.1),
        "warmup_exponential_decay": s.warmup_exponential_decay_schedule(
            0.0, 1.0, 2, 3, 0.5, end_value=0.3),
        "sgdr": s.sgdr_schedule([dict(init_value=0.0, peak_value=1.0, warmup_steps=1,
                                      decay_steps=4),
                                 dict(init_value=0.1, peak_value=0.5, warmup_steps=2,
                                      decay_steps=6)]),
        "join": s.join_schedules([s.constant_schedule(1.0), s.linear_schedule(1.0, 0.0, 4)],
                                 [3]),
    }
    counts = jnp.arange(12)
    return {name: [sched(count) for count in counts] for name, sched in schedules.items()}


def scenario_tree_math(optax, jnp, F):
    t = optax.tree
    x = {"a": jnp.asarray(_data(1, 3)), "b": jnp.asarray(_data(2, 2, 2))}
    y = {"a": jnp.asarray(_data(3, 3)), "b": jnp.asarray(_data(4, 2, 2))}
    return {
        "add": t.add(x, y, x), "sub": t.sub(x, y), "mul": t.mul(x, y), "div": t.div(x, y),
        "scale": t.scale(0.5, x), "add_scale": t.add_scale(x, 0.3, y), "vdot": t.vdot(x, y),
        "sum": t.sum(x), "sum_assoc": t.sum(x, associative_reduction=True), "max": t.max(x),
        "min": t.min(x), "size": t.size(x), "norm": t.norm(x), "norm_sq": t.norm(x, squared=True),
        "norm_1": t.norm(x, ord=1), "norm_inf": t.norm(x, ord="inf"),
        "norm_1_sq": t.norm(x, ord=1, squared=True),
        "clip": t.clip(x, -0.5, 0.3), "clip_low": t.clip(x, min_value=0.0),
        "full_like": t.full_like(x, 2.5), "ones_like": t.ones_like(x, dtype=jnp.int32),
        "zeros_like": t.zeros_like(x), "where": t.where(jnp.asarray(False), x, y),
        "batch_shape": t.batch_shape(x, (2,)), "bias_correction": t.bias_correction(
            x, 0.9, jnp.asarray(3)),
        "update_moment": t.update_moment(x, y, 0.9, 2),
        "update_infinity_moment": t.update_infinity_moment(x, y, 0.9, 1e-3),
        "update_moment_per_elem_norm": t.update_moment_per_elem_norm(x, y, 0.8, 2),
        "allclose": t.allclose(x, t.add_scale(x, 1e-9, y)),
        "cast": t.cast(x, jnp.int32), "cast_like": t.cast_like(t.cast(x, jnp.int32), x),
        "real": t.real(x), "conj": t.conj(x),
    }


def scenario_tree_state(optax, jnp, F):
    """Reading and writing optimizer states by name, and mapping over their parameter parts."""
    t = optax.tree
    params = {"a": jnp.asarray(_data(1, 3)), "b": jnp.asarray(_data(2, 2))}
    opt = optax.chain(optax.adam(0.1), optax.inject_hyperparams(optax.sgd)(learning_rate=0.2))
    state = opt.init(params)
    state = opt.update(params, state, params)[1]
    counts = [value for _, value in t.get_all_with_path(state, "count")]
    state2 = t.set(state, learning_rate=jnp.asarray(0.7))
    mu_halved = t.map_params(opt, lambda p: p / 2, state)
    filtered = t.get_all_with_path(
        state, "count", filtering=lambda path, value: "ScaleByAdamState" in str(path[-1]))
    return {"counts": counts, "learning_rate": t.get(state2, "learning_rate"),
            "mu": t.get(state, "mu"), "mu_halved": t.get(mu_halved, "mu"),
            "counts_untouched": [v for _, v in t.get_all_with_path(mu_halved, "count")],
            "filtered": [v for _, v in filtered],
            "missing": t.get(state, "no_such_field", default=jnp.asarray(-1)),
            "dtype": str(t.dtype({"a": jnp.ones(2), "b": jnp.ones(2, jnp.bfloat16)},
                                 "lowest")) == "bfloat16"}


def scenario_lookahead(optax, jnp, F):
    opt = optax.lookahead(optax.adam(0.1), sync_period=3, slow_step_size=0.5, reset_state=True)
    params = optax.LookaheadParams.init_synced({"w": jnp.asarray(_data(5, 4))})
    state = opt.init(params)
    out = []
    for _ in range(7):
        grads = {"w": 2.0 * params.fast["w"] - 1.0}
        updates, state = opt.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        out.append([params.fast["w"], params.slow["w"]])
    return {"params": out, "steps_since_sync": state.steps_since_sync}


def scenario_updates(optax, jnp, F):
    new, old = {"w": jnp.asarray(_data(1, 3))}, {"w": jnp.asarray(_data(2, 3))}
    return {"incremental": optax.incremental_update(new, old, 0.25),
            "periodic": [optax.periodic_update(new, old, jnp.asarray(k), 3) for k in range(4)],
            "apply": optax.apply_updates({"w": jnp.ones(3, jnp.bfloat16)}, new)}


def scenario_linear_algebra(optax, jnp, F):
    a = _data(7, 4, 4)
    spd = jnp.asarray(a @ a.T + 0.5 * np.eye(4, dtype=np.float32))
    value, vector = optax.power_iteration(spd, num_iters=200)
    root, error = optax.matrix_inverse_pth_root(spd, 4)
    b = jnp.asarray(_data(8, 5, 3))
    x = optax.nnls(b, jnp.asarray(_data(9, 5)), iters=200)
    return {"eigenvalue": value, "abs_eigenvector": jnp.abs(vector), "root": root,
            "nnls": x, "global_norm": optax.global_norm({"a": spd, "b": b})}


def scenario_numerics(optax, jnp, F):
    x = jnp.asarray(_data(3, 5))
    return {"safe_norm": optax.safe_norm(x, 0.1), "safe_norm_min": optax.safe_norm(x * 0, 0.1),
            "safe_norm_grad": F.grad(lambda v: optax.safe_norm(v, 0.1))(x * 0),
            "safe_norm_axis": optax.safe_norm(jnp.reshape(x[:4], (2, 2)), 0.1, axis=1),
            "safe_rms": optax.safe_root_mean_squares(x, 0.1),
            "safe_increment": optax.safe_increment(jnp.asarray(2147483647, jnp.int32)),
            "safe_increment_float": optax.safe_increment(jnp.asarray(1.5)),
            "scale_gradient": F.grad(lambda v: jnp.sum(optax.scale_gradient(v, 0.5) ** 2))(x)}


def scenario_clipping(optax, jnp, F):
    t = optax.transforms
    grads = {"a": jnp.asarray(_data(1, 4, 3)), "b": jnp.asarray(_data(2, 4))}
    summed, clipped = t.per_example_global_norm_clip(grads, 1.0)
    layer = t.per_example_layer_norm_clip(grads, 1.0, uniform=False)
    return {"global": [summed, clipped], "layer": layer,
            "unitwise_norm": t.unitwise_norm(grads["a"]),
            "unitwise_norm_4d": t.unitwise_norm(jnp.reshape(jnp.arange(24.0), (2, 3, 2, 2)))}


def scenario_losses(optax, jnp, F):
    L = optax.losses
    logits = jnp.asarray(_data(11, 4, 5) * 3)
    labels = jnp.asarray(np.array([0, 3, 1, 4]))
    probs = F.nn.softmax(jnp.asarray(_data(12, 4, 5)))
    targets = jnp.asarray(np.abs(_data(13, 4, 5)))
    binary = jnp.asarray((_data(14, 4, 5) > 0).astype(np.float32))
    emb = jnp.asarray(_data(15, 6, 3))
    seg_logits = jnp.asarray(_data(16, 2, 3, 3, 4))
    seg_targets = F.nn.one_hot(jnp.asarray(np.random.default_rng(17).integers(0, 4, (2, 3, 3))), 4)
    return {
        "squared_error": L.squared_error(logits, targets), "l2": L.l2_loss(logits),
        "huber": L.huber_loss(logits, targets, delta=0.5), "log_cosh": L.log_cosh(logits),
        "cosine_similarity": L.cosine_similarity(logits, targets, epsilon=1e-6),
        "cosine_distance": L.cosine_distance(logits, targets),
        "sigmoid_bce": L.sigmoid_binary_cross_entropy(logits, binary),
        "sigmoid_focal": L.sigmoid_focal_loss(logits, binary, alpha=0.3, gamma=1.5),
        "hinge": L.hinge_loss(logits, binary * 2 - 1),
        "perceptron": L.perceptron_loss(logits, binary * 2 - 1),
        "softmax_ce": L.softmax_cross_entropy(logits, probs),
        "softmax_ce_int": L.softmax_cross_entropy_with_integer_labels(logits, labels),
        "safe_softmax_ce": L.safe_softmax_cross_entropy(logits, probs),
        "poly": L.poly_loss_cross_entropy(logits, probs, epsilon=1.5),
        "multiclass_hinge": L.multiclass_hinge_loss(logits, labels),
        "multiclass_perceptron": L.multiclass_perceptron_loss(logits, labels),
        "kl": L.kl_divergence(F.nn.log_softmax(logits), probs),
        "kl_log_targets": L.kl_divergence_with_log_targets(F.nn.log_softmax(logits),
                                                           jnp.log(probs)),
        "generalized_kl": L.generalized_kl_divergence(F.nn.log_softmax(logits), targets),
        "convex_kl": L.convex_kl_divergence(F.nn.log_softmax(logits), targets),
        "smooth_labels": L.smooth_labels(probs, 0.1),
        "sparsemax": L.sparsemax_loss(logits, binary),
        "multiclass_sparsemax": L.multiclass_sparsemax_loss(logits, labels),
        "multiclass_sparsemax_grad": F.grad(lambda s: jnp.sum(
            L.multiclass_sparsemax_loss(s, labels)))(logits),
        "fenchel_young": L.make_fenchel_young_loss(F.nn.logsumexp)(logits, probs),
        "ranking": L.ranking_softmax_loss(logits, binary),
        "ranking_where": L.ranking_softmax_loss(logits, binary, where=binary > 0,
                                                weights=targets, reduce_fn=None),
        "ntxent": L.ntxent(emb, jnp.asarray(np.array([0, 1, 0, 1, 2, 2])), temperature=0.5),
        "triplet": L.triplet_margin_loss(emb[:2], emb[2:4], emb[4:], margin=0.5),
        "dice": L.dice_loss(seg_logits, seg_targets),
        "dice_tversky": L.dice_loss(seg_logits, seg_targets, alpha=0.3, beta=0.7,
                                    reduction="none", ignore_background=True,
                                    class_weights=jnp.asarray([1.0, 2.0, 0.5, 1.0])),
        "generalized_dice": L.multiclass_generalized_dice_loss(seg_logits, seg_targets),
        "binary_dice": L.binary_dice_loss(seg_logits[..., 0], seg_targets[..., 0]),
    }


def scenario_ctc(optax, jnp, F):
    logits = jnp.asarray(_data(21, 2, 6, 4))
    logit_paddings = jnp.asarray(np.array([[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1]], np.float32))
    labels = jnp.asarray(np.array([[1, 2, 2], [3, 1, 0]]))
    label_paddings = jnp.asarray(np.array([[0, 0, 0], [0, 0, 1]], np.float32))
    loss, phi, emit = optax.losses.ctc_loss_with_forward_probs(
        logits, logit_paddings, labels, label_paddings)
    grad = F.grad(lambda z: jnp.sum(optax.ctc_loss(z, logit_paddings, labels, label_paddings,
                                                   blank_id=0)))(logits)
    return {"loss": loss, "phi": phi, "emit": emit, "grad": grad}


def scenario_projections(optax, jnp, F):
    P = optax.projections
    x = {"a": jnp.asarray(_data(31, 4)), "b": jnp.asarray(_data(32, 2, 2))}
    v = jnp.asarray(_data(33, 5))
    a = jnp.asarray(_data(34, 5))
    return {
        "non_negative": P.projection_non_negative(x), "box": P.projection_box(v, -0.5, 0.5),
        "hypercube": P.projection_hypercube(v, 0.7), "simplex": P.projection_simplex(x),
        "simplex_scaled": P.projection_simplex(v, 2.0),
        "simplex_grad": F.jacobian(P.projection_simplex)(v),
        "l1_sphere": P.projection_l1_sphere(x, 2.0), "l1_ball": P.projection_l1_ball(x, 2.0),
        "l1_ball_inside": P.projection_l1_ball(v, 100.0), "l2_sphere": P.projection_l2_sphere(x),
        "l2_ball": P.projection_l2_ball(x, 0.5), "linf_ball": P.projection_linf_ball(x, 0.4),
        "vector": P.projection_vector(v, a), "hyperplane": P.projection_hyperplane(v, a, 0.3),
        "halfspace": P.projection_halfspace(v, a, -0.3),
        "halfspace_inside": P.projection_halfspace(v, a, 100.0),
    }


def scenario_assignment(optax, jnp, F):
    out = {}
    for name, shape in (("square", (5, 5)), ("wide", (3, 6)), ("tall", (6, 4))):
        cost = jnp.asarray(_data(41 + shape[0], *shape))
        for algorithm in ("hungarian_algorithm", "base_hungarian_algorithm"):
            rows, cols = getattr(optax.assignment, algorithm)(cost)
            out[f"{algorithm}_{name}"] = [rows, cols, cost[rows, cols].sum()]
    ties = jnp.asarray(np.array([[1, 1, 2], [1, 1, 2], [0, 3, 3]], np.float32))
    out["ties"] = list(optax.assignment.hungarian_algorithm(ties))
    batched = jnp.asarray(_data(47, 3, 4, 4))
    out["vmap"] = list(F.vmap(optax.assignment.hungarian_algorithm)(batched))
    return out


def scenario_second_order(optax, jnp, F):
    def loss(params, inputs, targets):
        hidden = jnp.tanh(inputs @ params["w"] + params["b"])
        return jnp.sum((hidden - targets) ** 2)

    params = {"w": jnp.asarray(_data(51, 3, 2)), "b": jnp.asarray(_data(52, 2))}
    inputs, targets = jnp.asarray(_data(53, 4, 3)), jnp.asarray(_data(54, 4, 2))
    v = jnp.asarray(_data(55, 8))
    so = optax.second_order
    return {"hvp": so.hvp(loss, v, params, inputs, targets),
            "hessian_diag": so.hessian_diag(loss, params, inputs, targets),
            "fisher_diag": so.fisher_diag(loss, params, inputs, targets)}


def scenario_perturbations(optax, jnp, F):
    P = optax.perturbations

    def argmax_one_hot(x):
        return F.nn.one_hot(jnp.argmax(x, axis=-1), x.shape[-1])

    x = jnp.asarray(_data(61, 4))
    key = F.random.PRNGKey(0)
    out = {}
    for name, noise in (("gumbel", P.Gumbel()), ("normal", P.Normal())):
        smooth = P.make_perturbed_fun(argmax_one_hot, num_samples=50, sigma=0.5, noise=noise)
        out[name] = smooth(key, x)
        out[name + "_jacobian"] = F.jacobian(smooth, argnums=1)(key, x)
    plain = P.make_perturbed_fun(lambda z: jnp.sum(z ** 2), num_samples=20, use_baseline=False)
    out["no_baseline_grad"] = F.grad(plain, argnums=1)(key, x)
    return out


def scenario_microbatching(optax, jnp, F):
    M = optax.microbatching
    x = jnp.asarray(_data(71, 8, 3))
    w = jnp.asarray(_data(72, 3))

    def loss(w, example):
        return jnp.sum((example @ w) ** 2)

    def stats(batch):
        return {"sum": jnp.sum(batch), "mean": jnp.mean(batch, axis=0), "rows": batch * 2}

    accumulators = {"sum": M.AccumulationType.SUM, "mean": M.AccumulationType.MEAN,
                    "rows": M.AccumulationType.CONCAT}
    grads, aux = M.micro_grad(loss, microbatch_size=4, keep_batch_dim=False,
                              metrics_fn=lambda g: jnp.sum(g))(w, x)
    return {
        "reshape": M.reshape_batch_axis(x, 2),
        "sum": M.microbatch(lambda b: jnp.sum(b * 2.0), 0, 2)(x),
        "accumulators": M.microbatch(stats, 0, 4, accumulators)(x),
        "running_mean": M.microbatch(lambda b: jnp.mean(b), 0, 2,
                                     M.AccumulationType.RUNNING_MEAN,
                                     num_real_microbatches=3)(x),
        "micro_vmap": M.micro_vmap(lambda e: e @ w, microbatch_size=4)(x),
        "micro_grad": [grads, aux.values, aux.metrics],
        "top_level": optax.microbatch(lambda b: jnp.sum(b), 0, 4)(x),
    }


def scenario_contrib(optax, jnp, F):
    """The contrib optimizers that need more than the shared quadratic: per-example
    gradients, complex parameters, a gradient function, 3-D weights."""
    c = optax.contrib
    out = {}
    per_example = {"a": jnp.asarray(_data(81, 4, 3)), "b": jnp.asarray(_data(82, 4))}
    for name, tx in (("dp_aggregate", c.differentially_private_aggregate(1.0, 0.5, key=3)),
                     ("dpsgd", c.dpsgd(0.1, 1.0, 0.5, seed=4, momentum=0.9))):
        state = tx.init({"a": jnp.zeros(3), "b": jnp.zeros(())})
        updates = []
        for _ in range(2):
            u, state = tx.update(per_example, state, {"a": jnp.zeros(3), "b": jnp.zeros(())})
            updates.append(u)
        out[name] = updates

    complex_params = jnp.asarray(_data(83, 3) + 1j * _data(84, 3))
    tx = c.split_real_and_imaginary(optax.adam(0.1))
    state = tx.init(complex_params)
    p = complex_params
    for _ in range(3):
        u, state = tx.update(jnp.conj(p) * 0 + 2 * p, state, p)
        p = optax.apply_updates(p, u)
    out["split_complex"] = [jnp.real(p), jnp.imag(p)]

    def loss(w):
        return jnp.sum((w - 1.0) ** 4)

    def grad_fn(w, i):
        del i
        return F.grad(loss)(w)

    w = jnp.asarray(_data(85, 3))
    tx = c.sam(optax.sgd(0.1), optax.chain(c.normalize(), optax.sgd(0.05)), sync_period=3,
               opaque_mode=True)
    state = tx.init(w)
    for _ in range(3):
        u, state = tx.update(F.grad(loss)(w), state, w, grad_fn=grad_fn)
        w = optax.apply_updates(w, u)
    out["sam_opaque"] = w

    est = c.hutchinson_estimator_diag_hessian()
    state = est.init(w)
    diags = []
    for _ in range(2):
        d, state = est.update(None, state, w, obj_fn=lambda v: jnp.sum(jnp.sin(v) * v ** 2))
        diags.append(d)
    out["hutchinson"] = diags

    kernel = jnp.asarray(_data(86, 2, 3, 4))     # (batch, in, out)
    dims = c.MuonDimensionNumbers(reduction_axis=1, output_axis=2)
    tx = c.muon(0.05, muon_weight_dimension_numbers={"k": dims, "v": None})
    params = {"k": kernel, "v": jnp.asarray(_data(87, 3))}
    state = tx.init(params)
    for _ in range(2):
        u, state = tx.update({"k": 2 * params["k"], "v": params["v"]}, state, params)
        params = optax.apply_updates(params, u)
    out["muon_batched"] = params

    g_dims = c.GaLoreDimensionNumbers(reduction_axis=(0, 1), output_axis=2)
    tx = c.galore(0.1, rank=2, weight_dimension_numbers={"k": g_dims, "v": None})
    params = {"k": kernel, "v": jnp.asarray(_data(87, 3))}
    state = tx.init(params)
    for _ in range(2):
        u, state = tx.update({"k": 2 * params["k"], "v": params["v"]}, state, params)
        params = optax.apply_updates(params, u)
    out["galore_3d"] = params
    return out


def scenario_aggregating(optax, jnp, F):
    A = optax.experimental.aggregating
    per_example = {"a": jnp.asarray(_data(91, 4, 3)), "b": jnp.asarray(_data(92, 4))}
    params = {"a": jnp.zeros(3), "b": jnp.zeros(())}
    out = {}
    opts = {
        "mean_variance": A.add_mean_variance_to_opt(optax.adam(0.1), ema_decay=0.5,
                                                    accumulation_steps=2),
        "incremental": A.process(optax.identity(), A.average_incrementally_updates(0, 2),
                                 optax.sgd(0.5)),
        "clip_then_average": A.process(optax.clip(0.5), A.average_per_element_updates(),
                                       optax.sgd(1.0)),
    }
    for name, opt in opts.items():
        state = opt.init(params)
        steps = []
        for t in range(4):
            u, state = opt.update(optax.tree.scale(1.0 + t, per_example), state, params)
            steps.append(u)
        out[name] = steps
        if name == "mean_variance":
            out["unbiased"] = list(A.get_unbiased_mean_and_variance_ema(state))
    return out


SCENARIOS = [scenario_rosenbrock_lbfgs, scenario_contrib, scenario_aggregating,
             scenario_assignment, scenario_second_order, scenario_perturbations,
             scenario_microbatching, scenario_schedules, scenario_tree_math,
             scenario_tree_state, scenario_lookahead, scenario_updates,
             scenario_linear_algebra, scenario_numerics, scenario_clipping, scenario_losses,
             scenario_ctc, scenario_projections]
SCENARIO_TOLERANCES = {
    # float32 round-off grows along the iterates (1e-7 at the 5th, 1e-5 at the 10th); both
    # stop at the same iteration, within 1e-4 of the minimum (1, 1)
    "rosenbrock_lbfgs": (1e-4, 1e-4),
    # an iterative root and eigenpair: agree to the iterations' tolerance
    "linear_algebra": (1e-4, 1e-5),
    "schedules": (1e-5, 1e-6),
    "losses": (1e-5, 2e-6),
    "ctc": (1e-5, 1e-5),
    "second_order": (1e-5, 1e-5),
    "perturbations": (1e-5, 1e-5),
    # Newton-Schulz and SVD projections: a few float32 matmuls deep
    "contrib": (1e-4, 1e-5),
}


def run_scenario(scenario, optax, jnp, F):
    return _tolist(scenario(optax, jnp, F), jnp)


# ---------------------------------------------------------------------------------------------
# The public API: every name of the package and its namespaces, with the parameters (name,
# kind, default) of each function and class, for tests/test_optim_api.py
# ---------------------------------------------------------------------------------------------

NAMESPACES = ("", "tree", "tree_utils", "transforms", "schedules", "losses", "contrib",
              "assignment", "projections", "second_order", "perturbations", "microbatching",
              "experimental", "experimental.aggregating")


def describe_default(value):
    """A default value as comparable text: the repr of plain values, ``<dtype name>`` for
    dtypes, ``<function>`` for functions, else ``<TypeName>``."""
    import inspect
    if value is inspect.Parameter.empty:
        return None
    if isinstance(value, (bool, int, float, str, type(None))):
        return repr(value)
    if isinstance(value, tuple) and all(isinstance(v, (bool, int, float, str, type(None), tuple))
                                        for v in value):
        return repr(value)
    try:
        if isinstance(value, type) or hasattr(value, "dtype"):
            return f"<dtype {np.dtype(value).name}>"
    except TypeError:
        pass
    if inspect.isfunction(value) or inspect.isbuiltin(value):
        return "<function>"
    return f"<{type(value).__name__}>"


def describe_api(package):
    """``{dotted name: entry}`` for every public name of ``package``'s namespaces; an entry
    is ``{"kind": "module" | "class" | "function" | "type alias", "params": [[name, kind,
    default]] (functions and classes), "fields": [...] (NamedTuples)}``."""
    import inspect
    import typing
    api = {}
    for namespace in NAMESPACES:
        module = package
        for part in filter(None, namespace.split(".")):
            module = getattr(module, part)
        prefix = namespace + "." if namespace else ""
        for name in dir(module):
            if name.startswith("_"):
                continue
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                if (prefix + name) in NAMESPACES:
                    api[prefix + name] = {"kind": "module"}
                continue   # modules imported for the implementation
            if getattr(typing, name, None) is obj:
                continue   # typing constructs imported for annotations (Any, Sequence, ...)
            if getattr(obj, "__module__", None) in ("typing", "types", "collections.abc"):
                api[prefix + name] = {"kind": "type alias"}
                continue
            if hasattr(obj, "_fields") and isinstance(obj, type):
                api[prefix + name] = {"kind": "class", "fields": list(obj._fields)}
                continue
            kind = "class" if isinstance(obj, type) else "function"
            entry = {"kind": kind}
            if callable(obj) and not getattr(obj, "_is_protocol", False):
                try:
                    signature = inspect.signature(obj)
                except (TypeError, ValueError):
                    signature = None
                if signature is not None:
                    entry["params"] = [[p.name, p.kind.name, describe_default(p.default)]
                                       for p in signature.parameters.values()]
            api[prefix + name] = entry
    return api


def main(only=()):
    """Regenerate every case and scenario, or only those named in ``only`` (the others are
    kept from the existing file)."""
    import jax
    import jax.numpy as jnp
    import optax
    warnings.simplefilter("ignore", DeprecationWarning)
    path = pathlib.Path(__file__).with_name("optax_reference.json")
    old = json.loads(path.read_text()) if only and path.exists() else {"cases": [], "scenarios": {}}
    old_cases = {c["id"]: c for c in old["cases"]}
    prob = problem()
    out = {"optax_version": optax.__version__, "problem": prob, "cases": [], "scenarios": {}}
    for spec in CASES:
        if only and spec["id"] not in only and spec["id"] in old_cases:
            out["cases"].append(old_cases[spec["id"]])
            continue
        trajectory, state = run_case(optax, jnp, spec, prob)
        out["cases"].append(dict(spec, trajectory=trajectory, state=state))
    for scenario in SCENARIOS:
        name = scenario.__name__[len("scenario_"):]
        if only and name not in only and name in old["scenarios"]:
            out["scenarios"][name] = old["scenarios"][name]
            continue
        out["scenarios"][name] = run_scenario(scenario, optax, jnp, jax)
    text = json.dumps(out, separators=(",", ":"))
    path.write_text(text + "\n")
    api = describe_api(optax)
    path.with_name("optax_api.json").write_text(
        json.dumps({"optax_version": optax.__version__, "api": api}, indent=0,
                   sort_keys=True) + "\n")
    print(f"wrote {len(out['cases'])} cases and {len(out['scenarios'])} scenarios to {path} "
          f"({len(text)} bytes)")


if __name__ == "__main__":
    main(sys.argv[1:])
