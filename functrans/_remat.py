"""``checkpoint`` / ``remat``: recompute the forward pass during the backward pass, keeping
only the values a *policy* allows; ``checkpoint_name`` and the policies of
``jax.checkpoint_policies``.

``checkpoint(f)`` stages ``f`` into a ``remat`` equation. Evaluated or differentiated in
forward mode it is just ``f``. Under reverse mode (``linearize``, ``vjp``, ``grad``) its
partial-evaluation rule splits the differentiated body into the part computable now and the
linear part, then decides which values the linear part reads are *residuals* (kept from the
forward pass) and which are recomputed from them in the backward pass:

* the known inputs of the checkpointed function are always available (they are residuals
  when the backward pass reads them);
* the outputs of an equation the policy calls saveable are residuals;
* every other value the backward pass needs is recomputed, which may in turn need inputs
  or saved values.

The forward pass computes the primal outputs and the saved values; the ``remat_linear``
equation holds the recomputation and the linear program, and its transpose first recomputes,
then runs the backward pass of the linear part. A policy is called as
``policy(primitive, *input_avals, **params)`` for each equation, and answers ``True`` /
:data:`Saveable`, ``False`` / :data:`Recompute`, or :class:`Offloadable`. Calls to ``jit``
inside the checkpointed function are opened when the policy would save something inside
them, so names and dots under a nested ``jit`` count; a ``scan``, ``cond`` or ``while_loop``
is one equation, saved or recomputed as a whole.
"""
from __future__ import annotations

import dataclasses
import functools
import types
from typing import Callable, NamedTuple

from functrans import core, tree_util
from functrans._api import _as_array, split_static_args
from functrans._jit import jit_p
from functrans._traceback_util import api_boundary
from functrans.core import ClosedJaxpr, Jaxpr, Literal, Primitive, Var, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters import partial_eval as pe
from functrans.interpreters.staging import closed_over_consts_as_args, trace_to_jaxpr_dynamic
from functrans.primitives.linalg import conv_general_dilated_p, dot_general_p
from functrans.primitives.windowed import optimization_barrier_p

__all__ = ["checkpoint", "remat", "checkpoint_name", "checkpoint_policies", "Recompute",
           "Saveable", "Offloadable"]


# =============================================================================================
# What a policy may answer
# =============================================================================================


class _RematCase:
    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return self._name


Recompute = _RematCase("Recompute")
Saveable = _RematCase("Saveable")


class Offloadable(NamedTuple):
    """Keep the value, in memory ``dst`` (moved there from ``src``)."""
    src: str
    dst: str


# functrans arrays live in one memory space per device: "device". Host memory is where a CPU
# device keeps its arrays, so an offload to the host keeps the residual where it is.
_OFFLOAD_DESTINATIONS = ("pinned_host", "unpinned_host", "device")


def _remat_case(answer, primitive):
    if isinstance(answer, bool):
        return Saveable if answer else Recompute
    if answer is Saveable or answer is Recompute:
        return answer
    if isinstance(answer, Offloadable):
        if answer.src != "device":
            raise ValueError(f"checkpoint policy offloads the output of '{primitive.name}' from "
                             f"memory {answer.src!r}: functrans values are in 'device' memory, "
                             "so offload_src must be 'device'")
        if answer.dst not in _OFFLOAD_DESTINATIONS:
            raise ValueError(f"checkpoint policy offloads the output of '{primitive.name}' to "
                             f"memory {answer.dst!r}; the destinations are "
                             f"{', '.join(map(repr, _OFFLOAD_DESTINATIONS))}")
        return answer
    if answer is Offloadable:
        raise TypeError("a checkpoint policy returned the class Offloadable; return an "
                        "instance, Offloadable(src=..., dst=...)")
    raise TypeError(f"a checkpoint policy must return a bool, Recompute, Saveable or "
                    f"Offloadable(...), but for '{primitive.name}' it returned {answer!r} of "
                    f"type {type(answer).__name__}")


# =============================================================================================
# checkpoint_name
# =============================================================================================

name_p = Primitive("name")
name_p.def_impl(lambda x, *, name: x)
name_p.def_abstract_eval(lambda x, *, name: x)


def _name_jvp(primals, tangents, *, name):
    # the primal carries the name; its tangent is an ordinary value
    return name_p.bind(primals[0], name=name), tangents[0]


def _name_batch(vals, dims, *, name):
    return name_p.bind(vals[0], name=name), dims[0]


name_p.jvp = _name_jvp
name_p.batch = _name_batch


def checkpoint_name(x, name: str):
    """``x`` (an array or a pytree of arrays) unchanged, named ``name`` for the policies of
    :func:`checkpoint` (``save_only_these_names``, ``save_any_names_but_these``, ...).

        >>> import functrans, functrans.numpy as jnp
        >>> from functrans.ad_checkpoint import checkpoint_name
        >>> def f(x):
        ...     return jnp.sin(checkpoint_name(jnp.cos(x), "c"))
        >>> policy = functrans.checkpoint_policies.save_only_these_names("c")
        >>> functrans.grad(functrans.checkpoint(f, policy=policy))(0.0)
        Array(-0., dtype=float32, weak_type=True)
    """
    return tree_util.tree_map(lambda leaf: name_p.bind(leaf, name=name), x)


# =============================================================================================
# Policies
# =============================================================================================


def everything_saveable(*_, **__) -> bool:
    """Save every value: reverse mode as if ``checkpoint`` were not used."""
    return True


def nothing_saveable(*_, **__) -> bool:
    """Save nothing but the inputs: recompute every intermediate (the default policy)."""
    return False


@dataclasses.dataclass(frozen=True)
class DotsSaveable:
    """Save the results of matrix products (and convolutions, unless
    ``only_if_no_batch_dims``, which keeps only products without batch dimensions)."""
    only_if_no_batch_dims: bool

    def __call__(self, primitive, *avals, **params) -> bool:
        if self.only_if_no_batch_dims:
            if primitive is not dot_general_p:
                return False
            (_, _), (lhs_batch, rhs_batch) = params["dimension_numbers"]
            return not lhs_batch and not rhs_batch
        return primitive is dot_general_p or primitive is conv_general_dilated_p


dots_saveable = DotsSaveable(False)
dots_with_no_batch_dims_saveable = DotsSaveable(True)


def offload_dot_with_no_batch_dims(offload_src: str, offload_dst: str) -> Callable:
    """As ``dots_with_no_batch_dims_saveable``, with the products offloaded to ``offload_dst``."""
    def policy(primitive, *avals, **params):
        if dots_with_no_batch_dims_saveable(primitive, *avals, **params):
            return Offloadable(src=offload_src, dst=offload_dst)
        return Recompute
    return policy


@dataclasses.dataclass(frozen=True)
class SaveOnlyTheseNames:
    """Save the values named (by :func:`checkpoint_name`) with one of ``names``, nothing else."""
    names: frozenset

    def __call__(self, primitive, *avals, **params) -> bool:
        return primitive is name_p and params["name"] in self.names


@dataclasses.dataclass(frozen=True)
class SaveAnyNamesButThese:
    """Save every named value except those named with one of ``names``; nothing unnamed."""
    names: frozenset

    def __call__(self, primitive, *avals, **params) -> bool:
        return primitive is name_p and params["name"] not in self.names


def save_only_these_names(*names: str) -> Callable:
    """A policy saving only the values named with one of ``names``.

        >>> import functrans
        >>> functrans.checkpoint_policies.save_only_these_names("a", "b").names == {"a", "b"}
        True
    """
    return SaveOnlyTheseNames(frozenset(names))


def save_any_names_but_these(*names: str) -> Callable:
    """A policy saving every named value except those named with one of ``names``."""
    return SaveAnyNamesButThese(frozenset(names))


def save_anything_except_these_names(*names: str) -> Callable:
    """A policy that keeps every value, as JAX's does: a policy is asked about each
    operation, and a named value is also the result of the operation that computed it, which
    this policy keeps, so naming a value does not make it recomputed. (To recompute named
    values, use ``save_any_names_but_these`` or ``save_only_these_names``.)"""
    return everything_saveable


def save_and_offload_only_these_names(*, names_which_can_be_saved,
                                      names_which_can_be_offloaded, offload_src: str,
                                      offload_dst: str) -> Callable:
    """Save the values named in ``names_which_can_be_saved``, offload (to memory
    ``offload_dst``) those in ``names_which_can_be_offloaded``, recompute the rest. The
    memories are ``"device"`` (``offload_src``) and ``"pinned_host"``, ``"unpinned_host"`` or
    ``"device"`` (``offload_dst``); functrans keeps a CPU device's arrays in host memory, so
    there an offloaded value stays where it is."""
    saved, offloaded = set(names_which_can_be_saved), set(names_which_can_be_offloaded)
    if saved & offloaded:
        raise ValueError(f"a name cannot be both saved and offloaded: "
                         f"names_which_can_be_saved={saved} and names_which_can_be_offloaded="
                         f"{offloaded} share {saved & offloaded}")
    offload = Offloadable(src=offload_src, dst=offload_dst)
    _remat_case(offload, name_p)  # check the memories now, not at the first differentiation

    def policy(primitive, *avals, **params):
        if primitive is name_p and params["name"] in saved:
            return Saveable
        if primitive is name_p and params["name"] in offloaded:
            return offload
        return Recompute
    return policy


def save_from_both_policies(policy_1: Callable, policy_2: Callable) -> Callable:
    """A policy saving what either policy saves (both must answer with a bool)."""
    def policy(primitive, *avals, **params):
        a = policy_1(primitive, *avals, **params)
        b = policy_2(primitive, *avals, **params)
        if not (isinstance(a, bool) and isinstance(b, bool)):
            raise ValueError(f"save_from_both_policies combines policies that answer with a "
                             f"bool, but they answered {a!r} and {b!r}; write the combined "
                             "policy as a function instead")
        return a or b
    return policy


checkpoint_policies = types.SimpleNamespace(
    everything_saveable=everything_saveable,
    nothing_saveable=nothing_saveable,
    dots_saveable=dots_saveable,
    checkpoint_dots=dots_saveable,
    dots_with_no_batch_dims_saveable=dots_with_no_batch_dims_saveable,
    checkpoint_dots_with_no_batch_dims=dots_with_no_batch_dims_saveable,
    offload_dot_with_no_batch_dims=offload_dot_with_no_batch_dims,
    save_anything_except_these_names=save_anything_except_these_names,
    save_any_names_but_these=save_any_names_but_these,
    save_only_these_names=save_only_these_names,
    save_from_both_policies=save_from_both_policies,
    save_and_offload_only_these_names=save_and_offload_only_these_names,
)


# =============================================================================================
# The remat primitive
# =============================================================================================

remat_p = Primitive("remat", multiple_results=True)


@remat_p.def_abstract_eval
def _remat_abstract_eval(*avals, jaxpr, policy, prevent_cse=True):
    return jaxpr.out_avals


@remat_p.def_impl
def _remat_impl(*args, jaxpr, policy, prevent_cse=True):
    return core.eval_jaxpr_numpy(jaxpr.jaxpr, [core.to_numpy(c) for c in jaxpr.consts], args)


def _remat_jvp(primals, tangents, *, jaxpr, policy, prevent_cse=True):
    nonzeros = [not isinstance(t, ad.Zero) for t in tangents]
    jvp_closed, out_nonzeros = ad.jvp_jaxpr(jaxpr, nonzeros, instantiate=False)
    nz = [t for t in tangents if not isinstance(t, ad.Zero)]
    if isinstance(prevent_cse, tuple):
        prevent_cse = prevent_cse + (True,) * len(nz)
    outs = remat_p.bind(*primals, *nz, jaxpr=jvp_closed, policy=policy, prevent_cse=prevent_cse)
    n = len(jaxpr.out_avals)
    it = iter(outs[n:])
    return outs[:n], [next(it) if nzo else ad.Zero(ad.tangent_aval(a))
                      for a, nzo in zip(jaxpr.out_avals, out_nonzeros)]


def _remat_batch(vals, dims, *, jaxpr, policy, prevent_cse=True):
    size = batching.batch_size_of(vals, dims)
    batched, out_dims = batching.batch_jaxpr(jaxpr, size, dims, False)
    return remat_p.bind(*vals, jaxpr=batched, policy=policy, prevent_cse=prevent_cse), out_dims


class _ResidualPlan(NamedTuple):
    inputs: list      # known inputs of the body the backward pass needs
    saved: list       # outputs of forward equations kept for the backward pass
    recompute: list   # forward equations run again in the backward pass, in order


def _plan_residuals(known: Jaxpr, residuals, policy) -> _ResidualPlan:
    """Walk the forward program backwards from the values the linear part reads: keep what
    the policy saves (and effectful results), recompute the rest from their inputs."""
    needed = {id(v) for v in residuals if not isinstance(v, Literal)}
    saved_ids: set[int] = set()
    recompute = []
    for eqn in reversed(known.eqns):
        outs = [v for v in eqn.outvars if id(v) in needed]
        if not outs:
            continue
        case = Saveable if eqn.primitive.effectful else _remat_case(
            policy(eqn.primitive, *[v.aval for v in eqn.invars], **eqn.params), eqn.primitive)
        if case is Recompute:
            recompute.append(eqn)
            needed.update(id(v) for v in eqn.invars if not isinstance(v, Literal))
        else:
            saved_ids.update(id(v) for v in outs)
    recompute.reverse()
    saved = [v for eqn in known.eqns for v in eqn.outvars if id(v) in saved_ids]
    return _ResidualPlan([v for v in known.invars if id(v) in needed], saved, recompute)


def _remat_partial_eval(trace, tracers, *, jaxpr, policy, prevent_cse=True):
    policy = policy or nothing_saveable
    unknowns = [not t.pval.is_known() for t in tracers]
    known_closed, linear, out_unknowns, num_res = pe.partial_eval_jaxpr(
        _open_calls_for_policy(jaxpr, policy), unknowns, instantiate=False)
    known = known_closed.jaxpr
    num_known_out = len(known.outvars) - num_res
    residuals = known.outvars[num_known_out:]
    plan = _plan_residuals(known, residuals, policy)

    # The forward pass: the known outputs and the saved values.
    forward = pe.dce_closed_jaxpr(ClosedJaxpr(
        Jaxpr(known.constvars, known.invars, known.outvars[:num_known_out] + plan.saved,
              known.eqns), known_closed.consts))
    known_vals = [t.pval.get_known() for t in tracers if t.pval.is_known()]
    outs = core.eval_jaxpr(forward.jaxpr, forward.consts, *known_vals)
    known_outs, saved_vals = outs[:num_known_out], outs[num_known_out:]

    # The backward pass recomputes every residual from the needed inputs and saved values.
    recompute = pe.dce_closed_jaxpr(ClosedJaxpr(
        Jaxpr(known.constvars, plan.inputs + plan.saved, residuals, plan.recompute),
        known_closed.consts))
    value_of = {id(v): x for v, x in zip(known.invars, known_vals)}
    res_in = [value_of[id(v)] for v in plan.inputs] + list(saved_vals)
    res_tracers = [trace.instantiate_const(trace.pure(x)) for x in res_in]
    unknown_tracers = [trace.instantiate_const(t) for t in tracers if not t.pval.is_known()]
    # a tuple flags the checkpointed function's arguments; the recomputation reads residuals
    # only, and those are always kept apart from the forward pass (as in JAX)
    unknown_outs = trace.default_process_primitive(
        remat_linear_p, res_tracers + unknown_tracers,
        dict(recompute=recompute, linear=linear, num_res=len(res_in),
             prevent_cse=prevent_cse is not False))
    known_iter, unknown_iter = iter(known_outs), iter(unknown_outs)
    return [next(unknown_iter) if uk else next(known_iter) for uk in out_unknowns]


def _open_calls_for_policy(closed: ClosedJaxpr, policy) -> ClosedJaxpr:
    """``closed`` with each ``jit`` call spliced in where the policy would keep a value inside
    it but not the call's results, so the policy decides per equation there."""
    if not any(e.primitive is jit_p and _saves_inside(e, policy) for e in closed.jaxpr.eqns):
        return closed
    consts = list(closed.consts)
    constvars = list(closed.jaxpr.constvars)
    eqns: list = []
    rename: dict = {}
    _splice_calls(closed.jaxpr, rename, eqns, constvars, consts, policy)
    outvars = [_renamed(rename, v) for v in closed.jaxpr.outvars]
    return ClosedJaxpr(Jaxpr(constvars, closed.jaxpr.invars, outvars, eqns), consts)


def _saves_inside(eqn, policy) -> bool:
    case = _remat_case(policy(eqn.primitive, *[v.aval for v in eqn.invars], **eqn.params),
                       eqn.primitive)
    if case is not Recompute:
        return False
    body = eqn.params["jaxpr"].jaxpr

    def saves(jaxpr):
        for e in jaxpr.eqns:
            if e.primitive is jit_p:
                if saves(e.params["jaxpr"].jaxpr):
                    return True
            elif _remat_case(policy(e.primitive, *[v.aval for v in e.invars], **e.params),
                             e.primitive) is not Recompute:
                return True
        return False
    return saves(body)


def _renamed(rename, v):
    return v if isinstance(v, Literal) else rename.get(id(v), v)


def _splice_calls(jaxpr: Jaxpr, rename, eqns, constvars, consts, policy) -> None:
    for eqn in jaxpr.eqns:
        invars = [_renamed(rename, v) for v in eqn.invars]
        if not (eqn.primitive is jit_p and _saves_inside(eqn, policy)):
            # a body may be spliced twice: give its results fresh variables each time
            outvars = [Var(v.aval) for v in eqn.outvars]
            rename.update((id(old), new) for old, new in zip(eqn.outvars, outvars))
            eqns.append(eqn.replace(invars=invars, outvars=outvars))
            continue
        body = eqn.params["jaxpr"]
        inner = {id(v): x for v, x in zip(body.jaxpr.invars, invars)}
        for v, c in zip(body.jaxpr.constvars, body.consts):
            inner[id(v)] = new = Var(v.aval)
            constvars.append(new)
            consts.append(c)
        _splice_calls(body.jaxpr, inner, eqns, constvars, consts, policy)
        rename.update((id(o), _renamed(inner, r)) for o, r in zip(eqn.outvars, body.jaxpr.outvars))


remat_p.jvp = _remat_jvp
remat_p.batch = _remat_batch
remat_p.partial_eval = _remat_partial_eval

# ---- the linear half: recompute residuals, then the tangent program -------------------------
#
# Transposed, the recomputation becomes plain equations of the backward pass, equal to the
# forward pass's: a compiler's common-subexpression elimination would read the forward
# values instead, keeping them alive until the backward pass and undoing the checkpoint.
# With ``prevent_cse`` the recomputation reads its inputs through an
# ``optimization_barrier``: new values, equal to the residuals, that no equation of the
# forward pass reads.

remat_linear_p = Primitive("remat_linear", multiple_results=True)


@remat_linear_p.def_abstract_eval
def _remat_linear_abstract_eval(*avals, recompute, linear, num_res, prevent_cse):
    return linear.out_avals


@remat_linear_p.def_impl
def _remat_linear_impl(*args, recompute, linear, num_res, prevent_cse):
    residuals = core.eval_jaxpr_numpy(recompute.jaxpr, [core.to_numpy(c) for c in recompute.consts],
                                 args[:num_res])
    return core.eval_jaxpr_numpy(linear.jaxpr, [core.to_numpy(c) for c in linear.consts],
                            list(residuals) + list(args[num_res:]))


def _remat_linear_transpose(cts, *args, recompute, linear, num_res, prevent_cse):
    res_in = args[:num_res]
    if prevent_cse and res_in:
        res_in = optimization_barrier_p.bind(*res_in)
    residuals = core.eval_jaxpr(recompute.jaxpr, recompute.consts, *res_in)
    primals = list(residuals) + list(args[num_res:])
    cts_in = ad.backward_pass(linear.jaxpr, linear.consts, primals, list(cts))
    return [None] * num_res + cts_in[len(residuals):]


def _remat_linear_batch(vals, dims, *, recompute, linear, num_res, prevent_cse):
    size = batching.batch_size_of(vals, dims)
    rec_b, res_dims = batching.batch_jaxpr(recompute, size, dims[:num_res], False)
    lin_b, out_dims = batching.batch_jaxpr(linear, size, list(res_dims) + list(dims[num_res:]),
                                           False)
    outs = remat_linear_p.bind(*vals, recompute=rec_b, linear=lin_b, num_res=num_res,
                               prevent_cse=prevent_cse)
    return outs, out_dims


remat_linear_p.transpose = _remat_linear_transpose
remat_linear_p.batch = _remat_linear_batch


# =============================================================================================
# checkpoint
# =============================================================================================

_NOT_GIVEN = object()


def _check_static_argnums(static_argnums, num_args: int) -> frozenset:
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    if not (isinstance(static_argnums, tuple) and all(type(i) is int for i in static_argnums)):
        raise TypeError("the `static_argnums` argument to `checkpoint` / `remat` must be an "
                        f"int or a tuple of ints, but got {static_argnums!r}")
    if not all(-num_args <= i < num_args for i in static_argnums):
        raise ValueError(f"checkpoint / remat: static_argnums {static_argnums} out of range for "
                         f"a call with {num_args} positional arguments (each must be in "
                         f"[-{num_args}, {num_args}))")
    return frozenset(i % num_args for i in static_argnums)


def checkpoint(fun: Callable, *, prevent_cse: bool = True, policy: Callable | None = None,
               static_argnums=(), static_argnames=(), concrete=_NOT_GIVEN) -> Callable:
    """Mark ``fun`` for rematerialization: reverse mode recomputes its intermediates in the
    backward pass instead of storing them (saving memory for compute). ``policy`` (one of
    ``checkpoint_policies``) names the values that may be kept; ``static_argnums`` /
    ``static_argnames`` are arguments fixed at trace time (Python values the function may
    branch on). ``prevent_cse`` (default True; a bool, or one per argument) keeps the
    compiler's common-subexpression elimination from merging the backward pass's
    recomputation with the forward pass's values, which would keep those alive (an
    ``optimization_barrier`` on the recomputation's inputs, free at run time); False
    leaves the recomputation open to merging, for a checkpoint inside a loop body, whose
    backward pass a compiler cannot merge with the forward pass anyway.

        >>> import functrans, functrans.numpy as jnp
        >>> f = functrans.checkpoint(lambda x: jnp.sin(jnp.sin(x)))
        >>> functrans.grad(f)(0.0)
        Array(1., dtype=float32, weak_type=True)
    """
    if concrete is not _NOT_GIVEN:
        raise NotImplementedError("checkpoint's `concrete` option was removed (as in JAX "
                                  "0.10); mark the arguments static with `static_argnums`")
    if isinstance(prevent_cse, (list, tuple)):
        prevent_cse = tuple(bool(b) for b in prevent_cse)
    elif not isinstance(prevent_cse, bool):
        raise TypeError(f"prevent_cse must be a bool or a tuple of bools, got "
                        f"{type(prevent_cse).__name__}")
    static_argnames = (static_argnames,) if isinstance(static_argnames, str) else \
        tuple(static_argnames)

    @functools.wraps(fun)
    @api_boundary
    def remat_f(*args, **kwargs):
        statics = _check_static_argnums(static_argnums, len(args)) if static_argnums else ()
        dyn, rebuild = split_static_args(args, statics)
        static_kw = {k: v for k, v in kwargs.items() if k in static_argnames}
        dyn_kw = {k: v for k, v in kwargs.items() if k not in static_argnames}
        leaves, in_tree = tree_util.tree_flatten((dyn, dyn_kw))
        leaves = [_as_array(x) for x in leaves]
        out_tree_cell = []

        def flat(*xs):
            dargs, kw = tree_util.tree_unflatten(in_tree, xs)
            out_leaves, out_tree = tree_util.tree_flatten(fun(*rebuild(dargs), **kw, **static_kw))
            out_tree_cell.append(out_tree)
            return out_leaves

        jaxpr, consts = trace_to_jaxpr_dynamic(flat, [get_aval(x) for x in leaves])
        closed, const_args = closed_over_consts_as_args(ClosedJaxpr(jaxpr, consts))
        cse = prevent_cse
        if isinstance(cse, tuple):  # one flag per positional argument, for each of its leaves
            flags = [f for a, f in zip(dyn, cse) for _ in tree_util.tree_leaves(a)]
            cse = (False,) * len(const_args) + tuple(flags + [True] * (len(leaves) - len(flags)))
        outs = remat_p.bind(*const_args, *leaves, jaxpr=closed, policy=policy, prevent_cse=cse)
        return tree_util.tree_unflatten(out_tree_cell[0], outs)

    return remat_f


remat = checkpoint
