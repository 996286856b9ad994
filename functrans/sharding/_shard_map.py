"""``shard_map``: per-device code over a mesh, with collectives over its axes.

``shard_map(f, mesh=mesh, in_specs=..., out_specs=...)`` runs ``f`` once per device of the
mesh, on the device's block of each argument (the block its ``PartitionSpec`` gives it);
inside ``f`` the mesh axes are axis names for the collectives (``psum``, ``all_gather``,
``ppermute``, ...). The results are the devices' blocks put together by ``out_specs``: a
mesh axis an output's spec names concatenates the blocks along that dimension; an axis it
does not name says the blocks are equal along it (checked when ``check_vma``).

``f`` is traced once per argument signature at the per-device shapes into a jaxpr, held by
one ``shard_map`` equation. Its rules (below) make it compose like ``jit``: the JVP, partial
evaluation, transposition and batching rules transform the per-device program and bind
``shard_map`` again, so ``grad``, ``vmap``, ``jit`` and ``scan`` of a ``shard_map`` still
run per-device code. Run eagerly, the equation runs its program on the devices of the mesh
(``_runtime.py``); inside ``jit`` it is one region of the partitioned program.

The transpose follows the convention of the unchecked shard_map: the cotangent of an output
that is replicated over some mesh axes is divided by the number of copies, and the cotangent
of an input that is replicated over some axes is summed over them (``psum``), so that
``grad`` of a ``shard_map`` equals ``grad`` of the function it computes.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np

from functrans import core, tree_util
from functrans._axis_env import extend_axis_env_nd
from functrans._traceback_util import api_boundary
from functrans.core import ClosedJaxpr, Jaxpr, Primitive, ShapedArray, Tracer, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters import partial_eval as pe
from functrans.interpreters.staging import trace_to_jaxpr_dynamic
from functrans.primitives import collectives, elementwise, structural
from functrans.sharding._mesh import Mesh, get_mesh
from functrans.sharding._partition_spec import PartitionSpec
from functrans.sharding._shardings import NamedSharding, check_spec, layout_of, spec_of

class RegionPrimitive(Primitive):
    """A primitive whose eager implementation places its operands on the mesh itself: its
    arguments reach ``impl`` as they are (arrays split over other processes' devices
    included), not as host copies of whole arrays."""

    def bind(self, *args, **params):
        if not any(isinstance(a, Tracer) for a in args) and \
                core.find_top_trace(args).main.level == 0:
            return self.impl(*args, **params)
        return super().bind(*args, **params)


# Its eager implementation (place the arguments, run the per-device program on the mesh) is
# the partitioned runtime's, above this module: sharding._partitioned registers it.
shard_map_p = RegionPrimitive("shard_map", multiple_results=True)


# =============================================================================================
# Per-device and global types
# =============================================================================================


def _parts(mesh: Mesh, axes) -> int:
    return math.prod(mesh.shape[a] for a in axes)


def local_aval(aval: ShapedArray, layout, mesh: Mesh) -> ShapedArray:
    """The per-device type of a value of type ``aval`` split by ``layout``."""
    shape = tuple(n // _parts(mesh, axes) for n, axes in zip(aval.shape, layout))
    return ShapedArray(shape, aval.dtype, aval.weak_type)


def global_aval(aval: ShapedArray, layout, mesh: Mesh) -> ShapedArray:
    """The global type of the per-device blocks ``aval`` put together by ``layout``."""
    shape = tuple(n * _parts(mesh, axes) for n, axes in zip(aval.shape, layout))
    return ShapedArray(shape, aval.dtype, aval.weak_type)


def _axis_env(mesh: Mesh, axis_names):
    return extend_axis_env_nd([(a, mesh.shape[a]) for a in axis_names])


def _replicated_over(mesh: Mesh, axis_names, layout) -> tuple:
    """The manual axes (of size > 1) that ``layout`` does not split: the value is the same
    on every device along them."""
    named = {a for axes in layout for a in axes}
    return tuple(a for a in axis_names if a not in named and mesh.shape[a] > 1)


# =============================================================================================
# The primitive
# =============================================================================================


@shard_map_p.def_abstract_eval
def _shard_map_abstract_eval(*avals, jaxpr, mesh, in_specs, out_specs, axis_names, check_vma):
    for k, (aval, layout, body) in enumerate(zip(avals, in_specs, jaxpr.in_avals)):
        want = local_aval(aval, layout, mesh)
        if want.shape != body.shape or want.dtype != body.dtype:
            raise TypeError(f"shard_map: operand {k} of type {aval.str_short()} split by "
                            f"{spec_of(layout)} gives blocks {want.str_short()}, but the "
                            f"per-device program takes {body.str_short()}")
    return [global_aval(a, layout, mesh) for a, layout in zip(jaxpr.out_avals, out_specs)]


def one_equation(primitive, params, in_avals) -> ClosedJaxpr:
    invars = [core.Var(a) for a in in_avals]
    outvars = [core.Var(a) for a in primitive.abstract_eval_many(in_avals, params)]
    return ClosedJaxpr(Jaxpr([], invars, outvars, [core.Eqn(primitive, invars, outvars,
                                                            params)]), [])


def _trace_per_device(fun: Callable, in_avals, mesh, axis_names) -> ClosedJaxpr:
    """``fun`` (flat in, flat out) staged at per-device types with the mesh axes bound."""
    with _axis_env(mesh, axis_names):
        jaxpr, consts = trace_to_jaxpr_dynamic(fun, list(in_avals))
    return ClosedJaxpr(jaxpr, consts)


def _shard_map_jvp(primals, tangents, *, jaxpr, mesh, in_specs, out_specs, axis_names,
                   check_vma):
    nonzeros = [not isinstance(t, ad.Zero) for t in tangents]
    with _axis_env(mesh, axis_names):
        jvp_closed, out_nonzeros = ad.jvp_jaxpr(jaxpr, nonzeros, instantiate=False)
    nz_tangents = [t for t in tangents if not isinstance(t, ad.Zero)]
    outs = shard_map_p.bind(
        *primals, *nz_tangents, jaxpr=jvp_closed, mesh=mesh,
        in_specs=in_specs + tuple(s for s, nz in zip(in_specs, nonzeros) if nz),
        out_specs=out_specs + tuple(s for s, nz in zip(out_specs, out_nonzeros) if nz),
        axis_names=axis_names, check_vma=check_vma)
    num_out = len(out_specs)
    primals_out, nz_out = outs[:num_out], iter(outs[num_out:])
    tangents_out = [next(nz_out) if nz else
                    ad.Zero(ad.tangent_aval(global_aval(a, s, mesh)))
                    for a, s, nz in zip(jaxpr.out_avals, out_specs, out_nonzeros)]
    return primals_out, tangents_out


def _shard_map_transpose(cts, *args, jaxpr, mesh, in_specs, out_specs, axis_names, check_vma):
    undefined = [ad.is_undefined_primal(a) for a in args]
    defined = [a for a in args if not ad.is_undefined_primal(a)]
    defined_specs = tuple(s for s, u in zip(in_specs, undefined) if not u)
    nonzero = [not isinstance(ct, ad.Zero) for ct in cts]
    ct_specs = tuple(s for s, nz in zip(out_specs, nonzero) if nz)
    in_avals = jaxpr.in_avals
    res_avals = [a for a, u in zip(in_avals, undefined) if not u]
    ct_avals = [ad.tangent_aval(a) for a, nz in zip(jaxpr.out_avals, nonzero) if nz]

    def backward(*flat):
        residuals, cts_in = iter(flat[:len(res_avals)]), iter(flat[len(res_avals):])
        primals = [ad.UndefinedPrimal(a) if u else next(residuals)
                   for a, u in zip(in_avals, undefined)]
        cts_full = []
        for aval, layout, nz in zip(jaxpr.out_avals, out_specs, nonzero):
            if not nz:
                cts_full.append(ad.Zero(ad.tangent_aval(aval)))
                continue
            ct = next(cts_in)
            copies = _parts(mesh, _replicated_over(mesh, axis_names, layout))
            if copies > 1 and np.issubdtype(get_aval(ct).dtype, np.inexact):
                # each copy of a replicated output carries its share of the cotangent
                ct_aval = get_aval(ct)
                ct = elementwise.div(ct, structural.full(ct_aval.shape, copies, ct_aval.dtype,
                                                         ct_aval.weak_type))
            cts_full.append(ct)
        cts_out = ad.backward_pass(jaxpr.jaxpr, jaxpr.consts, primals, cts_full)
        return [ad.instantiate_zeros(ct) for ct, u in zip(cts_out, undefined) if u]

    # An input replicated over some axes gets a cotangent on every copy: they are summed
    # over those axes, unless the backward program already made it the same on every
    # member there (a pcast(..., to="varying") on its way, whose transpose is that psum).
    raw = _trace_per_device(backward, res_avals + ct_avals, mesh, axis_names)
    # (the cotangent of an output replicated over axes comes in divided among the copies:
    # shares, to be summed over those axes, so it counts as varying along them)
    in_vary = [{a for axes in layout for a in axes if a in axis_names}
               for layout in defined_specs] + \
        [{a for axes in layout for a in axes if a in axis_names} |
         set(_replicated_over(mesh, axis_names, layout)) for layout in ct_specs]
    ct_vary = varying_axes(raw.jaxpr, in_vary)

    def transposed(*flat):
        cts = backward(*flat)
        results = []
        for ct, layout, vary in zip(cts, [s for s, u in zip(in_specs, undefined) if u],
                                    ct_vary):
            over = tuple(a for a in _replicated_over(mesh, axis_names, layout) if a in vary)
            if over and np.issubdtype(get_aval(ct).dtype, np.inexact):
                ct = collectives.psum(ct, over)
            results.append(ct)
        return results

    body = _trace_per_device(transposed, res_avals + ct_avals, mesh, axis_names)
    outs = shard_map_p.bind(*defined, *[ct for ct in cts if not isinstance(ct, ad.Zero)],
                            jaxpr=body, mesh=mesh, in_specs=defined_specs + ct_specs,
                            out_specs=tuple(s for s, u in zip(in_specs, undefined) if u),
                            axis_names=axis_names, check_vma=False)
    outs = iter(outs)
    return [next(outs) if u else None for u in undefined]


def _residual_layout(axis_names, aval) -> tuple:
    # one block per device along a new leading axis: every device keeps its own residuals
    return (tuple(axis_names),) + ((),) * aval.ndim


def _shard_map_partial_eval(trace, tracers, *, jaxpr, mesh, in_specs, out_specs, axis_names,
                            check_vma):
    unknowns = [not t.pval.is_known() for t in tracers]
    with _axis_env(mesh, axis_names):
        known, unknown, out_unknowns, num_res = pe.partial_eval_jaxpr(jaxpr, unknowns,
                                                                      instantiate=False)
    num_known_out = len(known.out_avals) - num_res
    res_avals = known.out_avals[num_known_out:]
    res_specs = tuple(_residual_layout(axis_names, a) for a in res_avals)

    def known_with_residual_axis(*xs):
        outs = core.eval_jaxpr(known.jaxpr, known.consts, *xs)
        return outs[:num_known_out] + [structural.reshape(r, (1,) + get_aval(r).shape)
                                       for r in outs[num_known_out:]]

    def unknown_from_residual_axis(*xs):
        res = [structural.reshape(r, a.shape) for r, a in zip(xs[:num_res], res_avals)]
        return core.eval_jaxpr(unknown.jaxpr, unknown.consts, *res, *xs[num_res:])

    known_body = _trace_per_device(known_with_residual_axis, known.in_avals, mesh, axis_names)
    unknown_avals = [a.update(shape=(1,) + a.shape) for a in res_avals] + \
        list(unknown.in_avals[num_res:])
    unknown_body = _trace_per_device(unknown_from_residual_axis, unknown_avals, mesh,
                                     axis_names)
    known_vals = [t.pval.get_known() for t in tracers if t.pval.is_known()]
    known_out_specs = tuple(s for s, uk in zip(out_specs, out_unknowns) if not uk)
    known_outs = shard_map_p.bind(
        *known_vals, jaxpr=known_body, mesh=mesh,
        in_specs=tuple(s for s, uk in zip(in_specs, unknowns) if not uk),
        out_specs=known_out_specs + res_specs, axis_names=axis_names, check_vma=check_vma)
    known_out_vals, residuals = known_outs[:num_known_out], known_outs[num_known_out:]
    res_tracers = [trace.instantiate_const(trace.pure(r)) for r in residuals]
    unknown_tracers = [trace.instantiate_const(t) for t in tracers if not t.pval.is_known()]
    unknown_outs = trace.default_process_primitive(
        shard_map_p, res_tracers + unknown_tracers,
        dict(jaxpr=unknown_body, mesh=mesh,
             in_specs=res_specs + tuple(s for s, uk in zip(in_specs, unknowns) if uk),
             out_specs=tuple(s for s, uk in zip(out_specs, out_unknowns) if uk),
             axis_names=axis_names, check_vma=False))
    known_iter, unknown_iter = iter(known_out_vals), iter(unknown_outs)
    return [next(unknown_iter) if uk else next(known_iter) for uk in out_unknowns]


def _shard_map_batch(vals, dims, *, jaxpr, mesh, in_specs, out_specs, axis_names, check_vma,
                     axis_data=None):
    size = batching.batch_size_of(vals, dims)
    moved = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(vals, dims)]
    in_dims = [None if d is None else 0 for d in dims]
    with _axis_env(mesh, axis_names):
        body, out_dims = batching.batch_jaxpr(
            jaxpr, size, in_dims, False, axis_name=axis_data.name if axis_data else None,
            spmd_axis_name=axis_data.spmd_name if axis_data else None)
    # the batch axis is a new, whole leading dimension on every device
    outs = shard_map_p.bind(
        *moved, jaxpr=body, mesh=mesh,
        in_specs=tuple(s if d is None else ((),) + s for s, d in zip(in_specs, in_dims)),
        out_specs=tuple(s if d is None else ((),) + s for s, d in zip(out_specs, out_dims)),
        axis_names=axis_names, check_vma=check_vma)
    return outs, out_dims


shard_map_p.jvp = _shard_map_jvp
shard_map_p.transpose = _shard_map_transpose
shard_map_p.partial_eval = _shard_map_partial_eval
shard_map_p.batch = _shard_map_batch
shard_map_p.batch_needs_axis = True


# =============================================================================================
# Which mesh axes each value varies along (check_vma)
# =============================================================================================


def varying_axes(jaxpr: Jaxpr, in_vary: list) -> list:
    """For each output of ``jaxpr``, the set of mesh axes its value may differ along, given
    that of each input (constants vary along none)."""
    env: dict = {}

    def read(v):
        return frozenset() if isinstance(v, core.Literal) else env.get(id(v), frozenset())

    for v, vary in zip(jaxpr.invars, in_vary):
        env[id(v)] = frozenset(vary)
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        union = frozenset().union(*ins)
        prim = eqn.primitive
        if prim is collectives.pvary_p:
            outs = [union | frozenset(eqn.params["axes"])]
        elif prim.is_collective:
            names = frozenset(prim.axis_names(eqn.params))
            if prim in (collectives.psum_p, collectives.pmax_p, collectives.pmin_p,
                        collectives.all_gather_p):
                outs = [union - names]
            else:  # axis_index, ppermute, psum_scatter, all_to_all: one value per member
                outs = [union | names]
        else:
            outs = _varying_through(eqn, ins, union)
        for v, vary in zip(eqn.outvars, outs):
            env[id(v)] = vary
    return [read(v) for v in jaxpr.outvars]


def _varying_through(eqn, ins, union) -> list:
    name = eqn.primitive.name
    n_out = len(eqn.outvars)
    if name == "scan":
        p = eqn.params
        consts, carry = ins[:p["num_consts"]], list(ins[p["num_consts"]:p["num_consts"] +
                                                        p["num_carry"]])
        xs = ins[p["num_consts"] + p["num_carry"]:]
        while True:  # carries only grow: a fixed point is reached
            outs = varying_axes(p["jaxpr"].jaxpr, consts + carry + xs)
            new = [c | o for c, o in zip(carry, outs[:p["num_carry"]])]
            if new == carry:
                return new + outs[p["num_carry"]:]
            carry = new
    if name == "while":
        p = eqn.params
        cc, bc = p["cond_nconsts"], p["body_nconsts"]
        cond_consts, body_consts, carry = ins[:cc], ins[cc:cc + bc], list(ins[cc + bc:])
        while True:
            pred = varying_axes(p["cond_jaxpr"].jaxpr, cond_consts + carry)[0]
            outs = varying_axes(p["body_jaxpr"].jaxpr, body_consts + carry)
            new = [c | o | pred for c, o in zip(carry, outs)]
            if new == carry:
                return new
            carry = new
    if name == "cond":
        index, operands = ins[0], ins[1:]
        outs = [index] * n_out
        for branch in eqn.params["branches"]:
            outs = [a | b for a, b in zip(outs, varying_axes(branch.jaxpr, operands))]
        return outs
    subs = list(core.subjaxprs(eqn))
    if len(subs) == 1 and len(subs[0].invars) == len(ins) and len(subs[0].outvars) == n_out:
        return varying_axes(subs[0], ins)  # a call: jit, custom_jvp, remat, shard_map-free
    return [union] * n_out


def _check_replication(fun, mesh, axis_names, body: ClosedJaxpr, in_specs, out_specs,
                       out_paths) -> None:
    in_vary = [{a for axes in layout for a in axes if a in axis_names} for layout in in_specs]
    out_vary = varying_axes(body.jaxpr, in_vary)
    problems = []
    for path, layout, vary in zip(out_paths, out_specs, out_vary):
        wrong = [a for a in _replicated_over(mesh, axis_names, layout) if a in vary]
        if wrong:
            axes = ", ".join(repr(a) for a in wrong)
            problems.append(f"* out_specs{path} is {spec_of(layout)}, which says the output "
                            f"is the same on every device along mesh axis {axes}, but it may "
                            f"vary along {sorted(vary)}")
    if problems:
        raise ValueError(
            f"shard_map applied to the function '{_name(fun)}' was given out_specs which "
            f"require replication which can't be statically inferred given the mesh:\n\n"
            f"The mesh given has shape {tuple(mesh.shape.values())} with corresponding axis "
            f"names {mesh.axis_names}.\n\n" + "\n\n".join(problems) + "\n\nCheck if these "
            "output values are meant to be replicated over those mesh axes. If not, consider "
            "revising the corresponding out_specs entries. If so, consider disabling the "
            "check by passing the check_vma=False argument to `functrans.shard_map`.")


# =============================================================================================
# The user-facing wrapper
# =============================================================================================


class _InferSpecs:
    """in_specs left out: each argument's own sharding over the mesh (P() otherwise)."""

    def __repr__(self):
        return "Infer"


Infer = _InferSpecs()


def _name(fun) -> str:
    return getattr(fun, "__name__", repr(fun))


def _is_spec_leaf(x) -> bool:
    return x is None or isinstance(x, PartitionSpec)


def _broadcast_specs(specs, tree, what: str, fun, none_is_leaf: bool = True) -> list:
    """One spec (or None) per leaf of ``tree``, from the prefix ``specs``. Without
    ``none_is_leaf`` (out_specs), a None in ``specs`` is an empty subtree, as in JAX: it
    matches an output that is None."""
    is_leaf = _is_spec_leaf if none_is_leaf else (lambda x: isinstance(x, PartitionSpec))
    try:
        full = tree_util.tree_broadcast(specs, tree, is_leaf=is_leaf)
    except (ValueError, TypeError) as err:
        raise ValueError(f"shard_map applied to the function '{_name(fun)}': {what} "
                         f"specification {specs} must be a tree prefix of the corresponding "
                         f"value {tree_util.tree_structure(tree)}") from err
    out = tree_util.tree_leaves(full, is_leaf=is_leaf)
    for s in out:
        if not _is_spec_leaf(s):
            raise TypeError(f"shard_map {what}: the leaves of a specification are "
                            f"PartitionSpec (functrans.P) or None, got {s!r}")
    return out


def _paths(tree) -> list:
    return [tree_util.keystr(path) for path, _ in tree_util.tree_flatten_with_path(tree)[0]]


class ShardMapFunction:
    """A function mapped over the blocks of its arguments on a mesh; see :func:`shard_map`."""

    def __init__(self, fun, mesh, in_specs, out_specs, axis_names, check_vma):
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._mesh = mesh
        self._in_specs = in_specs
        self._out_specs = out_specs
        self._axis_names = frozenset(axis_names)
        self._check_vma = check_vma
        self._cache: dict = {}

    def _mesh_and_axes(self):
        mesh = self._mesh if self._mesh is not None else get_mesh()
        if not isinstance(mesh, Mesh) or mesh.empty:
            raise ValueError(f"shard_map of '{_name(self._fun)}' needs a mesh: pass mesh= or "
                             "set one with functrans.set_mesh(mesh)")
        unknown = sorted(a for a in self._axis_names if a not in mesh.shape)
        if unknown:
            raise ValueError(f"shard_map: axis_names {unknown} are not axes of the mesh "
                             f"{mesh.axis_names}")
        manual = self._axis_names or frozenset(mesh.axis_names)
        return mesh, tuple(a for a in mesh.axis_names if a in manual)

    def _layouts(self, mesh, axis_names, specs, avals, paths, what) -> tuple:
        layouts = []
        for spec, aval, path in zip(specs, avals, paths):
            check_spec(mesh, spec, "shard_map")
            if len(spec) > aval.ndim:
                raise ValueError(
                    f"shard_map applied to the function '{_name(self._fun)}' was given an "
                    f"{what}_specs entry which is too long to be compatible with the "
                    f"corresponding {what}put value from the function: {what}_specs{path} is "
                    f"{spec} which has length {len(spec)}, but the value has shape "
                    f"{aval.str_short()}, which has rank {aval.ndim}. For scalar values "
                    "(rank 0), consider using an entry of `P()`.")
            layout = layout_of(spec, aval.ndim)
            auto = sorted({a for axes in layout for a in axes if a not in axis_names})
            if auto:
                raise ValueError(f"shard_map {what}_specs{path} is {spec}, which names mesh "
                                 f"axes {auto} that are not among the manual axis_names "
                                 f"{list(axis_names)}")
            layouts.append(layout)
        return tuple(layouts)

    def _check_divisible(self, mesh, layouts, avals, paths) -> None:
        problems = []
        for layout, aval, path in zip(layouts, avals, paths):
            for d, axes in enumerate(layout):
                parts = _parts(mesh, axes)
                if aval.shape[d] % parts:
                    axis = f"axes {axes}" if len(axes) > 1 else f"axis '{axes[0]}'"
                    problems.append(
                        f"* the passed args{path} of shape {aval.str_short()} corresponds to "
                        f"in_specs{path} of value {spec_of(layout)}, which maps array axis "
                        f"{d} (of size {aval.shape[d]}) to mesh {axis} (of size {parts}), "
                        f"but {parts} does not evenly divide {aval.shape[d]}")
        if problems:
            raise ValueError(
                f"shard_map applied to the function '{_name(self._fun)}' was given argument "
                f"arrays with axis sizes that are not evenly divisible by the corresponding "
                f"mesh axis sizes:\n\nThe mesh given has shape {tuple(mesh.shape.values())} "
                f"with corresponding axis names {mesh.axis_names}.\n\n" + "\n\n".join(problems)
                + "\n\nArray arguments' axis sizes must be evenly divisible by the mesh axis or "
                "axes indicated by the corresponding elements of the argument's in_specs entry. "
                "Consider checking that in_specs are correct, and if so consider changing the "
                f"mesh axis sizes or else padding the input and adapting '{_name(self._fun)}' "
                "appropriately.")

    def _inferred_specs(self, mesh, axis_names, leaves) -> list:
        specs = []
        for x in leaves:
            sharding = getattr(x, "sharding", None) if not isinstance(x, Tracer) else None
            if isinstance(sharding, NamedSharding) and sharding.mesh == mesh:
                layout = sharding.layout(get_aval(x).ndim)
                specs.append(spec_of(tuple(tuple(a for a in axes if a in axis_names)
                                           for axes in layout)))
            else:
                specs.append(PartitionSpec())
        return specs

    @api_boundary
    def __call__(self, *args):
        mesh, axis_names = self._mesh_and_axes()
        leaves, in_tree = tree_util.tree_flatten(args)
        if self._in_specs is Infer:
            specs = self._inferred_specs(mesh, axis_names, leaves)
        else:
            specs = _broadcast_specs(self._in_specs, args, "in_specs", self._fun)
        static = [s is None for s in specs]
        dyn = [x for x, st in zip(leaves, static) if not st]
        avals = [get_aval(x) for x in dyn]
        paths = [p for p, st in zip(_paths(args), static) if not st]
        layouts = self._layouts(mesh, axis_names, [s for s in specs if s is not None], avals,
                                paths, "in")
        self._check_divisible(mesh, layouts, avals, paths)
        statics = tuple((i, x) for i, (x, st) in enumerate(zip(leaves, static)) if st)
        key = (in_tree, tuple(avals), layouts, mesh, axis_names, statics)
        try:
            entry = self._cache.get(key)
        except TypeError:  # an unhashable argument passed as it is: staged every call
            key = entry = None
        if entry is None:
            entry = self._stage(mesh, axis_names, in_tree, leaves, static, avals, layouts)
            if key is not None and not any(isinstance(c, Tracer) for c in entry[2]):
                self._cache[key] = entry
        body, out_layouts, consts, out_tree = entry
        outs = shard_map_p.bind(
            *consts, *dyn, jaxpr=body, mesh=mesh,
            in_specs=tuple(layout_of(PartitionSpec(), get_aval(c).ndim) for c in consts) +
            layouts, out_specs=out_layouts, axis_names=axis_names, check_vma=self._check_vma)
        return tree_util.tree_unflatten(out_tree, outs)

    def _stage(self, mesh, axis_names, in_tree, leaves, static, avals, layouts):
        out_cell: list = []

        def flat_fun(*dyn_blocks):
            it = iter(dyn_blocks)
            full = [x if st else next(it) for x, st in zip(leaves, static)]
            out = self._fun(*tree_util.tree_unflatten(in_tree, full))
            out_leaves, out_tree = tree_util.tree_flatten(out)
            out_specs = _broadcast_specs(self._out_specs, out, "out_specs", self._fun,
                                         none_is_leaf=False)
            if any(s is None for s in out_specs):
                raise ValueError("shard_map out_specs leaves must be PartitionSpecs, not None")
            out_cell[:] = [out_tree, out_specs, _paths(out)]
            return out_leaves

        local = [local_aval(a, layout, mesh) for a, layout in zip(avals, layouts)]
        body = _trace_per_device(flat_fun, local, mesh, axis_names)
        out_tree, out_specs, out_paths = out_cell
        out_layouts = self._layouts(mesh, axis_names, out_specs, body.out_avals, out_paths,
                                    "out")
        if self._check_vma:
            _check_replication(self._fun, mesh, axis_names, body, layouts, out_layouts,
                               out_paths)
        # constants the function closed over become replicated operands (they may be the
        # tracers of an enclosing transform)
        consts = list(body.consts)
        body = ClosedJaxpr(Jaxpr([], list(body.jaxpr.constvars) + list(body.jaxpr.invars),
                                 body.jaxpr.outvars, body.jaxpr.eqns), [])
        return body, out_layouts, consts, out_tree


def shard_map(f: Callable | None = None, /, *, out_specs, in_specs=Infer, mesh=None,
              axis_names=frozenset(), check_vma: bool = True):
    """Map ``f`` over the blocks of its arguments on ``mesh`` (default: the current mesh).

    ``in_specs``: a PartitionSpec (or None, for an argument passed as it is) per argument,
    or a pytree prefix of the arguments: each device gets the block of each argument that
    its spec gives it (left out: the arguments' own shardings). Inside ``f`` the mesh axes
    are axis names for ``lax.psum``, ``all_gather``, ``ppermute``, ``axis_index``, ...
    ``out_specs`` say how the devices' results are put together: a named mesh axis
    concatenates along that dimension; an axis not named means the results are equal
    along it (checked when ``check_vma``). ``axis_names`` restricts the manual axes (the
    others replicate). A dimension not divisible by its mesh axes raises ``ValueError``.

        >>> import functrans, numpy as np
        >>> from functrans import lax, P
        >>> mesh = functrans.make_mesh((1,), ('i',))
        >>> total = functrans.shard_map(lambda x: lax.psum(x.sum(), 'i'), mesh=mesh,
        ...                             in_specs=P('i'), out_specs=P())
        >>> float(total(np.arange(4.0)))
        6.0
    """
    kwargs = dict(out_specs=out_specs, in_specs=in_specs, mesh=mesh, axis_names=axis_names,
                  check_vma=check_vma)
    if f is None:
        return lambda g: shard_map(g, **kwargs)
    if not callable(f):
        raise TypeError(f"shard_map requires a callable for its first argument, but got {f} "
                        f"of type {type(f)}.")
    return ShardMapFunction(f, mesh, in_specs, out_specs, axis_names, check_vma)


__all__ = ["Infer", "ShardMapFunction", "shard_map", "shard_map_p"]
