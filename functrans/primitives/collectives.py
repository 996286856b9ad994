"""Collectives: operations across the members of a named axis (``psum``, ``pmean``, ``pmax``,
``pmin``, ``all_gather``, ``all_to_all``, ``ppermute``, ``psum_scatter``, ``axis_index``).

A collective is bound to an *axis name* introduced by ``pmap(..., axis_name=...)`` or
``vmap(..., axis_name=...)``; it computes the same result under both:

- under ``vmap`` the batching rule of the collective sees the whole named axis at once (the
  batch dimension) and computes the collective with ordinary array ops (``psum`` = a sum over
  the batch dimension, ``all_gather`` = the batched value itself, ...);
- under ``pmap`` the staged per-device program keeps the collective as an equation; when the
  program runs, every device thread reaches it, meets the others at a rendezvous, and the
  primitive's ``group_impl`` (reference semantics over the list of every member's buffer)
  computes each member's result.

Each primitive's shape rule, group semantics, JVP/transpose and batching rules are declared
together below it. Parameter names mirror JAX's (``axes``, ``axis_name``,
``all_gather_dimension``, ``scatter_dimension``, ``split_axis``, ``concat_axis``, ``perm``,
``tiled``, ``axis_size``, ``axis_index_groups``).

``axis_index_groups`` splits the axis into groups of one size that each run the collective
on their own: ``group_impl`` runs once per group, and under ``vmap`` the members are
reordered into a ``(groups, group size, ...)`` array and the ungrouped collective runs under
a vmap over each group's members.

A collective's operand need not vary along the named axis (``psum(1.0, 'i')``): ``bind``
raises such an operand into the vmap that owns the axis so that its batching rule still
runs (the result is then ``1.0 * axis_size``).
"""
from __future__ import annotations

import operator
import threading
from contextlib import contextmanager

import numpy as np

from functrans import _dtypes, core, tree_util
from functrans.core import Primitive, ShapedArray, Tracer, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters.ad import Zero
from functrans.primitives import elementwise, reductions, structural

# =============================================================================================
# Where axis names are bound
# =============================================================================================


class _Execution(threading.local):
    """The pmap runtime's per-thread state: which member of which axis this thread runs."""

    def __init__(self):
        self.context = None


_execution = _Execution()


def current_device_context():
    """The running pmap device context of this thread (None outside pmap execution)."""
    return _execution.context


@contextmanager
def device_context(context):
    """Run the block as one member of the axes of a pmap (or of a mesh). ``context`` has
    ``axis_sizes`` (axis name -> size), ``index_along(names)`` (this member's position
    along those axes, the first one major) and ``collective(primitive, args, params)``."""
    previous = _execution.context
    _execution.context = context
    try:
        yield context
    finally:
        _execution.context = previous


def _staged_axis_size(name):
    """Size of ``name`` in the axis environment of a pmap being staged (or make_jaxpr's)."""
    for bound, size in reversed(core._state.axis_env):
        if bound == name:
            return size
    return None


def _bound_names() -> list:
    names = [n for n, _ in core._state.axis_env]
    names += [m.payload.name for m in core.trace_stack()
              if m.trace_type is batching.BatchTrace and m.payload.name is not None]
    ctx = _execution.context
    if ctx is not None:
        names.extend(ctx.axis_sizes)
    return names


def _unbound_axis_error(name, primitive_name: str) -> NameError:
    return NameError(
        f"{primitive_name}: unbound axis name: {name!r}. A collective needs an axis name bound "
        f"by an enclosing pmap(..., axis_name=...) or vmap(..., axis_name=...); the axis "
        f"names bound here are {_bound_names()}.")


def _axis_size(axis_name, primitive_name: str = "axis_size") -> int:
    """The number of members of the named axis (a vmap's batch size or a pmap's device
    count); a tuple of names gives the product."""
    if isinstance(axis_name, (tuple, list)):
        return int(np.prod([_axis_size(n, primitive_name) for n in axis_name], dtype=np.int64))
    main = batching.find_axis_main(axis_name)
    if main is not None:
        return main.payload.size
    size = _staged_axis_size(axis_name)
    if size is not None:
        return size
    ctx = _execution.context
    if ctx is not None and axis_name in ctx.axis_sizes:
        return ctx.axis_sizes[axis_name]
    raise _unbound_axis_error(axis_name, primitive_name)


def _names_tuple(axis_name) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


class CollectivePrimitive(Primitive):
    """A primitive over a named axis. ``bind`` checks that the axis names are bound and, when
    a vmap owns one of them, raises the operands into that vmap so its batching rule runs
    even for operands that do not vary along the axis."""

    def __init__(self, name: str, names_param: str):
        super().__init__(name, is_collective=True, batch_needs_axis=True)
        self.names_param = names_param
        self.group_impl = None      # reference semantics over all members' buffers
        self.reduce_op = None       # "sum"/"max"/"min" for reductions (an MPI Allreduce)

    def axis_names(self, params) -> tuple:
        return _names_tuple(params[self.names_param])

    def bind(self, *args, **params):
        mains = []
        for name in self.axis_names(params):
            main = batching.find_axis_main(name)
            if main is not None:
                mains.append(main)
            elif _staged_axis_size(name) is None and not _running_axis(name):
                raise _unbound_axis_error(name, self.name)
        if mains:
            main = max(mains, key=lambda m: m.level)
            # Only when the vmap is the innermost dynamic context: inside a jit staged
            # within the vmap, the equation is recorded and batched with the jit.
            if main.level >= core._state.dynamic.level:
                trace = batching.BatchTrace(main)
                if not args:
                    return core.full_lower(trace.process_primitive(self, [], params))
                args = [a if isinstance(a, Tracer) and a._trace.level >= main.level
                        else trace.full_raise(a) for a in args]
        return super().bind(*args, **params)


def _running_axis(name) -> bool:
    ctx = _execution.context
    return ctx is not None and name in ctx.axis_sizes


def _run_in_context(primitive):
    """The impl of a collective: meet the other members of the running pmap axis."""

    def impl(*args, **params):
        ctx = _execution.context
        names = primitive.axis_names(params)
        if ctx is None:
            raise NameError(
                f"{primitive.name} over axis {names[0]!r} was executed outside pmap: unbound "
                "axis name (collectives run only inside pmap or vmap with that axis_name)")
        bad = [n for n in names if n not in ctx.axis_sizes]
        if bad:
            raise _unbound_axis_error(bad[0], primitive.name)
        return ctx.collective(primitive, args, params)

    primitive.impl = impl
    return impl


def _check_groups(name, axis_index_groups, axis_name) -> tuple | None:
    """``axis_index_groups`` as a tuple of tuples of member indices, checked against the
    size of the named axis: the groups must partition ``0..size-1`` into groups of one size
    (each group then runs the collective on its own, its members ranked in the listed
    order). None stays None: one group of every member."""
    if axis_index_groups is None:
        return None
    names = _names_tuple(axis_name)
    if len(names) != 1:
        raise ValueError(f"{name}: axis_index_groups needs a single axis name, got {names}")
    size = _axis_size(names[0], name)
    try:
        groups = tuple(tuple(operator.index(i) for i in group) for group in axis_index_groups)
    except TypeError:
        raise TypeError(f"{name}: axis_index_groups must be a list of lists of int member "
                        f"indices, got {axis_index_groups!r}") from None
    where = f"{name}: axis_index_groups {[list(g) for g in groups]} over axis {names[0]!r} " \
            f"of size {size}"
    if not groups or any(not g for g in groups):
        raise ValueError(f"{where}: every group must list at least one member")
    outside = sorted({i for g in groups for i in g if not 0 <= i < size})
    if outside:
        raise ValueError(f"{where}: indices {outside} are out of range 0..{size - 1}")
    listed = [i for g in groups for i in g]
    repeated = sorted({i for i in listed if listed.count(i) > 1})
    if repeated:
        raise ValueError(f"{where}: indices {repeated} appear more than once; the groups must "
                         "partition the axis indices")
    missing = sorted(set(range(size)) - set(listed))
    if missing:
        raise ValueError(f"{where}: indices {missing} are in no group; the groups must "
                         "cover every axis index exactly once")
    sizes = sorted({len(g) for g in groups})
    if len(sizes) > 1:
        raise ValueError(f"{where}: the groups have different sizes {sizes}; all groups "
                         "must be the same size")
    return groups


def _group_size(name, groups, axis_name) -> int:
    """The number of members a collective combines: a group's, or the whole axis's."""
    return len(groups[0]) if groups is not None else _axis_size(axis_name, name)


def _per_group(impl):
    """``impl`` (reference semantics over one set of members) run on each group of
    ``axis_index_groups`` separately; ``buffers`` are every member's, in axis order."""

    def group_impl(buffers, **params):
        groups = params.get("axis_index_groups")
        if groups is None:
            return impl(buffers, **params)
        if sum(len(g) for g in groups) != len(buffers):
            raise ValueError(f"axis_index_groups {groups} do not match the {len(buffers)} "
                             "members of the axis")
        inner = dict(params, axis_index_groups=None)
        out = [None] * len(buffers)
        for group in groups:
            for i, result in zip(group, impl([buffers[i] for i in group], **inner)):
                out[i] = result
        return out

    return group_impl


class _GroupAxis:
    """The axis name of one group's members when a vmap computes a grouped collective."""

    def __init__(self, outer):
        self.outer = outer

    def __repr__(self):
        return f"<group of {self.outer!r}>"


def _take_members(x, order):
    """Rows ``order`` of ``x`` along axis 0 (runs of consecutive rows sliced at once)."""
    order = list(order)
    if order == list(range(get_aval(x).shape[0])):
        return x
    pieces, start = [], 0
    while start < len(order):
        stop = start + 1
        while stop < len(order) and order[stop] == order[stop - 1] + 1:
            stop += 1
        pieces.append(structural.slice_in_dim(x, order[start], order[stop - 1] + 1, axis=0))
        start = stop
    return pieces[0] if len(pieces) == 1 else structural.concatenate(pieces, 0)


def _batch_in_groups(primitive, x, d, params, axis_data):
    """Batching rule of a collective with ``axis_index_groups`` over the vmapped axis: the
    members are reordered group by group into a ``(groups, group size, ...)`` array, and
    the ungrouped collective runs under a vmap over each group's members (an inner axis of
    the group's size) and a vmap over the groups; the results go back to member order."""
    groups = params["axis_index_groups"]
    n = axis_data.size
    order = [i for g in groups for i in g]
    x = _take_members(_moved_to_front(x, d, n), order)
    rest = tuple(get_aval(x).shape[1:])
    x = structural.reshape(x, (len(groups), len(groups[0])) + rest)
    inner_name = _GroupAxis(axis_data.name)
    inner = dict(params, axis_index_groups=None)
    inner[primitive.names_param] = (inner_name,)
    per_group = batching.vmap_leading_axis(lambda v: primitive.bind(v, **inner),
                                           axis_name=inner_name)
    out = batching.vmap_leading_axis(per_group)(x)
    out = structural.reshape(out, (n,) + tuple(get_aval(out).shape[2:]))
    inverse = [0] * n
    for position, member in enumerate(order):
        inverse[member] = position
    return _take_members(out, inverse), 0


def _collective_names(name, axis_name) -> tuple:
    """The axis names of a collective that runs over their combined members (the first name
    major): one name under pmap or vmap; several inside ``shard_map`` over a mesh."""
    return _names_tuple(axis_name)


def _vmapped_alone(name, names, axis_data) -> None:
    """A vmap computes a collective over its own axis only when that axis is the only one
    the collective names."""
    if len(names) > 1:
        raise NotImplementedError(
            f"{name} over several axis names {names} under vmap (axis {axis_data.name!r}) is "
            "not supported; over several mesh axes it runs inside shard_map")


def _other_names(params_names, own) -> tuple:
    return tuple(n for n in params_names if n != own)


def _check_member_shape(primitive, x, d, params):
    """Run the shape rule on one member's operand (``x`` without its batch dim ``d``): under
    vmap the batching rule computes the collective without the equation's type check."""
    aval = get_aval(x)
    if d is not None:
        aval = ShapedArray(aval.shape[:d] + aval.shape[d + 1:], aval.dtype, aval.weak_type)
    primitive.abstract_eval(aval, **params)


def _moved_to_front(x, d, size):
    return batching.bdim_at_front(x, d, size)


# =============================================================================================
# psum, pmax, pmin (and pmean, a psum divided by the axis size)
# =============================================================================================


def _reduction_rule(name, allow_bool):
    def rule(x, *, axes, axis_index_groups=None):
        if not allow_bool and x.dtype == _dtypes.bool_:
            raise TypeError(f"{name} does not accept boolean operands, got {x.str_short()}")
        return ShapedArray(x.shape, x.dtype, x.weak_type)
    return rule


def _group_reduction(ufunc):
    def group(buffers, **params):
        out = buffers[0]
        for b in buffers[1:]:
            out = ufunc(out, b)
        out = np.asarray(out, dtype=buffers[0].dtype)
        return [out] * len(buffers)
    return group


def _reduction_batch(primitive, reduce_fn):
    def rule(vals, dims, *, axes, axis_index_groups=None, axis_data):
        (x,), (d,) = vals, dims
        if axis_data.name not in axes:
            return primitive.bind(x, axes=axes, axis_index_groups=axis_index_groups), d
        params = dict(axes=axes, axis_index_groups=axis_index_groups)
        _check_member_shape(primitive, x, d, params)
        if axis_index_groups is not None:
            return _batch_in_groups(primitive, x, d, params, axis_data)
        if d is None:
            out = reduce_fn(x, None, axis_data.size)
        else:
            out = reduce_fn(x, d, axis_data.size)
        rest = _other_names(axes, axis_data.name)
        if rest:
            out = primitive.bind(out, axes=rest, axis_index_groups=axis_index_groups)
        # The result is the same for every member: unbatched.
        return out, None
    return rule


def _sum_over(x, d, size):
    if d is None:
        aval = get_aval(x)
        return elementwise.mul(x, structural.full(aval.shape, size, aval.dtype, aval.weak_type))
    return reductions.reduce_sum(x, (d,))


def _max_over(x, d, size):
    return x if d is None else reductions.reduce_max(x, (d,))


def _min_over(x, d, size):
    return x if d is None else reductions.reduce_min(x, (d,))


psum_p = CollectivePrimitive("psum", "axes")
psum_p.def_abstract_eval(_reduction_rule("psum", allow_bool=False))
psum_p.group_impl = _per_group(_group_reduction(np.add))
psum_p.reduce_op = "sum"
_run_in_context(psum_p)
# Per JAX, psum transposes to psum: each member's cotangent receives the sum of all members'.
ad.deflinear(psum_p, lambda ct, **params: [psum_p.bind(ct, **params)])
psum_p.batch = _reduction_batch(psum_p, _sum_over)

pmax_p = CollectivePrimitive("pmax", "axes")
pmax_p.def_abstract_eval(_reduction_rule("pmax", allow_bool=True))
pmax_p.group_impl = _per_group(_group_reduction(np.maximum))
pmax_p.reduce_op = "max"
_run_in_context(pmax_p)
pmax_p.batch = _reduction_batch(pmax_p, _max_over)

pmin_p = CollectivePrimitive("pmin", "axes")
pmin_p.def_abstract_eval(_reduction_rule("pmin", allow_bool=True))
pmin_p.group_impl = _per_group(_group_reduction(np.minimum))
pmin_p.reduce_op = "min"
_run_in_context(pmin_p)
pmin_p.batch = _reduction_batch(pmin_p, _min_over)


def _extremum_jvp(primitive):
    """Tangent of pmax/pmin: the tangent of the member(s) holding the extremum, averaged
    over ties (so the rule is linear in the tangent and transposes)."""

    def rule(primals, tangents, *, axes, axis_index_groups=None):
        (x,), (t,) = primals, tangents
        out = primitive.bind(x, axes=axes, axis_index_groups=axis_index_groups)
        if isinstance(t, Zero) or not _dtypes.is_inexact(get_aval(x).dtype):
            return out, Zero.from_value(out)
        hit = elementwise.convert_element_type(elementwise.eq(x, out), get_aval(t).dtype)
        count = psum_p.bind(hit, axes=axes, axis_index_groups=axis_index_groups)
        picked = psum_p.bind(elementwise.mul(t, hit), axes=axes, axis_index_groups=axis_index_groups)
        return out, elementwise.div(picked, count)

    return rule


pmax_p.jvp = _extremum_jvp(pmax_p)
pmin_p.jvp = _extremum_jvp(pmin_p)


def _reduction_fn(primitive, doc):
    def fn(x, axis_name, *, axis_index_groups=None):
        groups = _check_groups(primitive.name, axis_index_groups, axis_name)
        axes = _names_tuple(axis_name)
        return tree_util.tree_map(
            lambda leaf: primitive.bind(_as_operand(leaf), axes=axes, axis_index_groups=groups), x)
    fn.__name__ = primitive.name
    fn.__doc__ = doc
    return fn


def _as_operand(x):
    if isinstance(x, Tracer) or hasattr(x, "_value"):
        return x
    return structural.as_array(x)


psum = _reduction_fn(psum_p, """Sum ``x`` (a pytree) over the members of the named axis.

    Every member receives the total. ``axis_name`` may be a tuple of names.
    ``axis_index_groups`` (a list of lists of member indices that partition the axis into
    groups of one size, with a single axis name) sums within each group instead; the same
    holds for ``pmean``, ``pmax``, ``pmin``, ``all_gather``, ``psum_scatter`` and
    ``all_to_all``, where a member's rank is its position in its group.

        >>> import functrans, functrans.numpy as jnp
        >>> functrans.vmap(lambda v: functrans.lax.psum(v, 'i'), axis_name='i')(jnp.arange(3.0))
        Array([3., 3., 3.], dtype=float32)
        >>> f = lambda v: functrans.lax.psum(v, 'i', axis_index_groups=[[0, 1], [2, 3]])
        >>> functrans.vmap(f, axis_name='i')(jnp.arange(4.0))
        Array([1., 1., 5., 5.], dtype=float32)
    """)
pmax = _reduction_fn(pmax_p, """Maximum of ``x`` (a pytree) over the members of the named axis.

        >>> import functrans, functrans.numpy as jnp
        >>> functrans.vmap(lambda v: functrans.lax.pmax(v, 'i'), axis_name='i')(jnp.arange(3.0))
        Array([2., 2., 2.], dtype=float32)
    """)
pmin = _reduction_fn(pmin_p, """Minimum of ``x`` (a pytree) over the members of the named axis.

        >>> import functrans, functrans.numpy as jnp
        >>> functrans.vmap(lambda v: functrans.lax.pmin(v, 'i'), axis_name='i')(jnp.arange(3.0))
        Array([0., 0., 0.], dtype=float32)
    """)


def pmean(x, axis_name, *, axis_index_groups=None):
    """Mean of ``x`` (a pytree) over the members of the named axis.

        >>> import functrans, functrans.numpy as jnp
        >>> functrans.vmap(lambda v: functrans.lax.pmean(v, 'i'), axis_name='i')(jnp.arange(3.0))
        Array([1., 1., 1.], dtype=float32)
    """
    groups = _check_groups("pmean", axis_index_groups, axis_name)
    n = _group_size("pmean", groups, axis_name)
    total = psum(x, axis_name, axis_index_groups=groups)

    def divide(s):
        aval = get_aval(s)
        return elementwise.div(s, structural.full(aval.shape, n, aval.dtype, aval.weak_type))

    return tree_util.tree_map(divide, total)


# =============================================================================================
# all_gather and psum_scatter (reduce_scatter): each other's transpose
# =============================================================================================

all_gather_p = CollectivePrimitive("all_gather", "axis_name")


@all_gather_p.def_abstract_eval
def _all_gather_rule(x, *, all_gather_dimension, axis_name, axis_index_groups, axis_size, tiled):
    d = all_gather_dimension
    if tiled:
        if not 0 <= d < x.ndim:
            raise TypeError(f"all_gather: axis {d} out of range for tiled gather of "
                            f"{x.str_short()}")
        shape = list(x.shape)
        shape[d] *= axis_size
    else:
        if not 0 <= d <= x.ndim:
            raise TypeError(f"all_gather: axis {d} out of range for {x.str_short()}")
        shape = list(x.shape)
        shape.insert(d, axis_size)
    return ShapedArray(tuple(shape), x.dtype, x.weak_type)


def _all_gather_group(buffers, *, all_gather_dimension, axis_name, axis_index_groups,
                      axis_size, tiled):
    join = np.concatenate if tiled else np.stack
    out = join(buffers, axis=all_gather_dimension)
    return [out] * len(buffers)


def _bind_under_other_axis(primitive, x, d, axis_params: dict, params: dict):
    """Batching a collective over a vmap axis it does not name: bind it again on the batched
    value, its axis parameters shifted past the batch axis (moved to the front)."""
    if d is None:
        return primitive.bind(x, **axis_params, **params), None
    x = batching.moveaxis(x, d, 0)
    shifted = {k: v + 1 for k, v in axis_params.items()}
    return primitive.bind(x, **shifted, **params), 0


def _gather_like_batch(primitive, x, d, axis_params: dict, params: dict, axis_data):
    """What batching all_gather, psum_scatter and all_to_all have in common: a vmap over
    another axis binds the collective again; over its own axis, the member shape is checked
    and grouped collectives batch group by group. Returns the result, or None when the
    collective's own rule (over its whole axis) must finish the job."""
    if axis_data.name not in params["axis_name"]:
        return _bind_under_other_axis(primitive, x, d, axis_params, params)
    _vmapped_alone(primitive.name, params["axis_name"], axis_data)
    full = dict(params, **axis_params)
    _check_member_shape(primitive, x, d, full)
    if params["axis_index_groups"] is not None:
        return _batch_in_groups(primitive, x, d, full, axis_data)
    return None


def _all_gather_batch(vals, dims, *, all_gather_dimension, axis_name, axis_index_groups,
                      axis_size, tiled, axis_data):
    (x,), (d,) = vals, dims
    params = dict(axis_name=axis_name, axis_index_groups=axis_index_groups,
                  axis_size=axis_size, tiled=tiled)
    done = _gather_like_batch(all_gather_p, x, d,
                              dict(all_gather_dimension=all_gather_dimension), params, axis_data)
    if done is not None:
        return done
    # The batched value already holds every member's operand: move the batch axis into place.
    x = _moved_to_front(x, d, axis_data.size)
    out = batching.moveaxis(x, 0, all_gather_dimension)
    if tiled:
        shape = list(get_aval(out).shape)
        shape[all_gather_dimension:all_gather_dimension + 2] = [
            shape[all_gather_dimension] * shape[all_gather_dimension + 1]]
        out = structural.reshape(out, tuple(shape))
    return out, None


all_gather_p.group_impl = _per_group(_all_gather_group)
_run_in_context(all_gather_p)
all_gather_p.batch = _all_gather_batch
ad.deflinear(all_gather_p, lambda ct, *, all_gather_dimension, axis_name, axis_index_groups,
             axis_size, tiled: [reduce_scatter_p.bind(
                 ct, scatter_dimension=all_gather_dimension, axis_name=axis_name,
                 axis_index_groups=axis_index_groups, axis_size=axis_size, tiled=tiled)])


def all_gather(x, axis_name, *, axis_index_groups=None, axis: int = 0, tiled: bool = False):
    """Gather ``x`` (a pytree) from every member of the named axis. Each member receives the
    stack of all members' values along a new axis ``axis`` (``tiled=True``: concatenated
    along the existing axis ``axis``). With ``axis_index_groups`` each member gathers its
    group's values, in the order the group lists them (the new axis has the group size).

        >>> import functrans, functrans.numpy as jnp
        >>> f = lambda v: functrans.lax.all_gather(v, 'i')
        >>> functrans.vmap(f, axis_name='i')(jnp.arange(2.0))
        Array([[0., 1.],
               [0., 1.]], dtype=float32)
    """
    names = _collective_names("all_gather", axis_name)
    groups = _check_groups("all_gather", axis_index_groups, names)
    size = _group_size("all_gather", groups, names)

    def gather(leaf):
        leaf = _as_operand(leaf)
        ndim = get_aval(leaf).ndim
        if tiled and ndim == 0:
            raise TypeError("all_gather: tiled=True needs an operand with at least one dimension")
        dim = int(axis) % (ndim if tiled else ndim + 1)
        return all_gather_p.bind(leaf, all_gather_dimension=dim, axis_name=names,
                                 axis_index_groups=groups, axis_size=size, tiled=bool(tiled))

    return tree_util.tree_map(gather, x)


reduce_scatter_p = CollectivePrimitive("reduce_scatter", "axis_name")


@reduce_scatter_p.def_abstract_eval
def _reduce_scatter_rule(x, *, scatter_dimension, axis_name, axis_index_groups, axis_size, tiled):
    d = scatter_dimension
    if not 0 <= d < x.ndim:
        raise TypeError(f"psum_scatter: scatter_dimension {d} out of range for {x.str_short()}")
    shape = list(x.shape)
    if tiled:
        if shape[d] % axis_size:
            raise TypeError(f"psum_scatter: dimension {d} of {x.str_short()} (size {shape[d]}) "
                            f"is not divisible by the axis size {axis_size}")
        shape[d] //= axis_size
    else:
        if shape[d] != axis_size:
            raise TypeError(f"psum_scatter: dimension {d} of {x.str_short()} must equal the "
                            f"axis size {axis_size} (or use tiled=True)")
        del shape[d]
    return ShapedArray(tuple(shape), x.dtype, x.weak_type)


def _reduce_scatter_group(buffers, *, scatter_dimension, axis_name, axis_index_groups,
                          axis_size, tiled):
    total = _group_reduction(np.add)(buffers)[0]
    pieces = np.split(total, axis_size, axis=scatter_dimension)
    if not tiled:
        pieces = [np.squeeze(p, axis=scatter_dimension) for p in pieces]
    return pieces


def _reduce_scatter_batch(vals, dims, *, scatter_dimension, axis_name, axis_index_groups,
                          axis_size, tiled, axis_data):
    (x,), (d,) = vals, dims
    params = dict(axis_name=axis_name, axis_index_groups=axis_index_groups,
                  axis_size=axis_size, tiled=tiled)
    done = _gather_like_batch(reduce_scatter_p, x, d, dict(scatter_dimension=scatter_dimension),
                              params, axis_data)
    if done is not None:
        return done
    total = _sum_over(x, d, axis_data.size)
    if tiled:
        # Split the scattered axis into (member, chunk); member j keeps chunk j.
        shape = list(get_aval(total).shape)
        shape[scatter_dimension:scatter_dimension + 1] = [axis_data.size,
                                                          shape[scatter_dimension] // axis_data.size]
        total = structural.reshape(total, tuple(shape))
    return total, scatter_dimension


reduce_scatter_p.group_impl = _per_group(_reduce_scatter_group)
_run_in_context(reduce_scatter_p)
reduce_scatter_p.batch = _reduce_scatter_batch
ad.deflinear(reduce_scatter_p, lambda ct, *, scatter_dimension, axis_name, axis_index_groups,
             axis_size, tiled: [all_gather_p.bind(
                 ct, all_gather_dimension=scatter_dimension, axis_name=axis_name,
                 axis_index_groups=axis_index_groups, axis_size=axis_size, tiled=tiled)])


def psum_scatter(x, axis_name, *, scatter_dimension: int = 0, axis_index_groups=None,
                 tiled: bool = False):
    """Sum ``x`` over the named axis and give member ``j`` the ``j``-th piece of the total
    along ``scatter_dimension`` (which must have the axis size; ``tiled=True``: a multiple
    of it, pieces keep the dimension).

        >>> import functrans, functrans.numpy as jnp
        >>> f = lambda v: functrans.lax.psum_scatter(v, 'i')
        >>> functrans.vmap(f, axis_name='i')(jnp.ones((2, 2)))
        Array([2., 2.], dtype=float32)
    """
    names = _collective_names("psum_scatter", axis_name)
    groups = _check_groups("psum_scatter", axis_index_groups, names)
    size = _group_size("psum_scatter", groups, names)

    def scatter(leaf):
        leaf = _as_operand(leaf)
        ndim = max(get_aval(leaf).ndim, 1)
        return reduce_scatter_p.bind(leaf, scatter_dimension=int(scatter_dimension) % ndim,
                                     axis_name=names, axis_index_groups=groups, axis_size=size,
                                     tiled=bool(tiled))

    return tree_util.tree_map(scatter, x)


# =============================================================================================
# all_to_all
# =============================================================================================

all_to_all_p = CollectivePrimitive("all_to_all", "axis_name")


@all_to_all_p.def_abstract_eval
def _all_to_all_rule(x, *, split_axis, concat_axis, axis_name, axis_index_groups, axis_size,
                     tiled):
    if not 0 <= split_axis < x.ndim:
        raise TypeError(f"all_to_all: split_axis {split_axis} out of range for {x.str_short()}")
    shape = list(x.shape)
    if tiled:
        if not 0 <= concat_axis < x.ndim:
            raise TypeError(f"all_to_all: concat_axis {concat_axis} out of range for "
                            f"{x.str_short()}")
        if shape[split_axis] % axis_size:
            raise TypeError(f"all_to_all: split axis {split_axis} of {x.str_short()} is not "
                            f"divisible by the axis size {axis_size}")
        shape[split_axis] //= axis_size
        shape[concat_axis] *= axis_size
    else:
        if shape[split_axis] != axis_size:
            raise TypeError(f"all_to_all: split axis {split_axis} of {x.str_short()} must "
                            f"equal the axis size {axis_size} (or use tiled=True)")
        if not 0 <= concat_axis < x.ndim:
            raise TypeError(f"all_to_all: concat_axis {concat_axis} out of range for "
                            f"{x.str_short()}")
        del shape[split_axis]
        shape.insert(concat_axis, axis_size)
    return ShapedArray(tuple(shape), x.dtype, x.weak_type)


def _all_to_all_group(buffers, *, split_axis, concat_axis, axis_name, axis_index_groups,
                      axis_size, tiled):
    # Member i's chunk j goes to member j, which joins the chunks in member order.
    chunks = [np.split(b, axis_size, axis=split_axis) for b in buffers]
    if not tiled:
        chunks = [[np.squeeze(c, axis=split_axis) for c in row] for row in chunks]
    join = np.concatenate if tiled else np.stack
    return [join([chunks[i][j] for i in range(len(buffers))], axis=concat_axis)
            for j in range(len(buffers))]


def _all_to_all_batch(vals, dims, *, split_axis, concat_axis, axis_name, axis_index_groups,
                      axis_size, tiled, axis_data):
    (x,), (d,) = vals, dims
    params = dict(axis_name=axis_name, axis_index_groups=axis_index_groups,
                  axis_size=axis_size, tiled=tiled)
    done = _gather_like_batch(all_to_all_p, x, d,
                              dict(split_axis=split_axis, concat_axis=concat_axis), params,
                              axis_data)
    if done is not None:
        return done
    n = axis_data.size
    x = _moved_to_front(x, d, n)            # axes: [source member i] + per-member axes
    per_member = list(get_aval(x).shape[1:])
    s, c = split_axis, concat_axis
    if tiled:
        # Split the split axis into (destination member j, chunk): x is [i] + T with j
        # inserted before T[s], where T is the per-member shape with T[s] = chunk size.
        chunk = per_member[s] // n
        rest = per_member[:s] + [chunk] + per_member[s + 1:]
        x = structural.reshape(x, tuple([n] + per_member[:s] + [n, chunk] + per_member[s + 1:]))
    else:
        rest = per_member[:s] + per_member[s + 1:]
    pos_j = 1 + s
    pos_rest = [1 + k + (k >= s) for k in range(len(rest))]
    # The new batch axis is j; the source axis i lands just before rest[c] (and in the tiled
    # case merges with it, i-major, which is concatenation in member order).
    perm = [pos_j] + pos_rest[:c] + [0] + pos_rest[c:]
    out = structural.transpose(x, tuple(perm))
    if tiled:
        shape = [n] + rest[:c] + [n * rest[c]] + rest[c + 1:]
        out = structural.reshape(out, tuple(shape))
    return out, 0


all_to_all_p.group_impl = _per_group(_all_to_all_group)
_run_in_context(all_to_all_p)
all_to_all_p.batch = _all_to_all_batch
ad.deflinear(all_to_all_p, lambda ct, *, split_axis, concat_axis, **params: [all_to_all_p.bind(
    ct, split_axis=concat_axis, concat_axis=split_axis, **params)])


def all_to_all(x, axis_name, split_axis: int, concat_axis: int, *, axis_index_groups=None,
               tiled: bool = False):
    """Member ``i`` splits ``x`` along ``split_axis`` into one chunk per member and sends
    chunk ``j`` to member ``j``; each member joins what it receives in member order along
    ``concat_axis``. Without ``tiled`` the split axis (of the axis size) is removed and the
    received chunks are stacked along a new ``concat_axis``.

        >>> import functrans, functrans.numpy as jnp
        >>> f = lambda v: functrans.lax.all_to_all(v, 'i', 0, 0)
        >>> functrans.vmap(f, axis_name='i')(jnp.arange(4.0).reshape(2, 2))
        Array([[0., 2.],
               [1., 3.]], dtype=float32)
    """
    names = _collective_names("all_to_all", axis_name)
    groups = _check_groups("all_to_all", axis_index_groups, names)
    size = _group_size("all_to_all", groups, names)

    def exchange(leaf):
        leaf = _as_operand(leaf)
        ndim = get_aval(leaf).ndim
        if ndim == 0:
            raise TypeError("all_to_all: the operand must have at least one dimension")
        return all_to_all_p.bind(leaf, split_axis=int(split_axis) % ndim,
                                 concat_axis=int(concat_axis) % ndim, axis_name=names,
                                 axis_index_groups=groups, axis_size=size, tiled=bool(tiled))

    return tree_util.tree_map(exchange, x)


# =============================================================================================
# ppermute
# =============================================================================================

ppermute_p = CollectivePrimitive("ppermute", "axis_name")


@ppermute_p.def_abstract_eval
def _ppermute_rule(x, *, axis_name, perm):
    return ShapedArray(x.shape, x.dtype, x.weak_type)


def _ppermute_group(buffers, *, axis_name, perm):
    out = [np.zeros_like(b) for b in buffers]
    for src, dst in perm:
        out[dst] = buffers[src]
    return out


def _ppermute_batch(vals, dims, *, axis_name, perm, axis_data):
    (x,), (d,) = vals, dims
    if axis_data.name not in axis_name:
        return ppermute_p.bind(x, axis_name=axis_name, perm=perm), d
    _vmapped_alone("ppermute", axis_name, axis_data)
    n = axis_data.size
    x = _moved_to_front(x, d, n)
    source_of = {dst: src for src, dst in perm}
    aval = get_aval(x)
    zero = None
    pieces = []
    for j in range(n):
        if j in source_of:
            pieces.append(structural.index_in_dim(x, source_of[j], 0, keepdims=True))
        else:
            if zero is None:
                zero = structural.full((1,) + aval.shape[1:], 0, aval.dtype, aval.weak_type)
            pieces.append(zero)
    return structural.concatenate(pieces, 0), 0


def _check_perm(perm, size):
    perm = tuple((int(s), int(d)) for s, d in perm)
    srcs = [s for s, _ in perm]
    dsts = [d for _, d in perm]
    if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
        raise ValueError(f"ppermute: perm {perm} sends from or to a member more than once")
    if any(not 0 <= i < size for i in srcs + dsts):
        raise ValueError(f"ppermute: perm {perm} names members outside 0..{size - 1}")
    return perm


ppermute_p.group_impl = _ppermute_group
_run_in_context(ppermute_p)
ppermute_p.batch = _ppermute_batch
ad.deflinear(ppermute_p, lambda ct, *, axis_name, perm: [ppermute_p.bind(
    ct, axis_name=axis_name, perm=tuple((d, s) for s, d in perm))])


def ppermute(x, axis_name, perm):
    """Send member ``src``'s value of ``x`` (a pytree) to member ``dst`` for each
    ``(src, dst)`` in ``perm``; members no one sends to receive zeros.

        >>> import functrans, functrans.numpy as jnp
        >>> f = lambda v: functrans.lax.ppermute(v, 'i', [(0, 1), (1, 2), (2, 0)])
        >>> functrans.vmap(f, axis_name='i')(jnp.arange(3.0))
        Array([2., 0., 1.], dtype=float32)
    """
    names = _collective_names("ppermute", axis_name)
    perm = _check_perm(perm, _axis_size(names, "ppermute"))
    return tree_util.tree_map(
        lambda leaf: ppermute_p.bind(_as_operand(leaf), axis_name=names, perm=perm), x)


def pshuffle(x, axis_name, perm):
    """Member ``i`` receives member ``perm[i]``'s value (``ppermute`` with a full
    permutation given as a list of sources)."""
    return ppermute(x, axis_name, [(src, dst) for dst, src in enumerate(perm)])


# =============================================================================================
# axis_index
# =============================================================================================

axis_index_p = CollectivePrimitive("axis_index", "axis_name")


@axis_index_p.def_abstract_eval
def _axis_index_rule(*, axis_name):
    return ShapedArray((), np.int32)


def _axis_index_impl(*, axis_name):
    ctx = _execution.context
    names = _names_tuple(axis_name)
    unbound = [n for n in names if ctx is None or n not in ctx.axis_sizes]
    if unbound:
        raise _unbound_axis_error(unbound[0], "axis_index")
    return np.asarray(ctx.index_along(names), dtype=np.int32)


def _axis_index_batch(vals, dims, *, axis_name, axis_data):
    if axis_data.name not in axis_name:
        return axis_index_p.bind(axis_name=axis_name), None
    _vmapped_alone("axis_index", axis_name, axis_data)
    return structural.iota(np.int32, axis_data.size), 0


axis_index_p.impl = _axis_index_impl
axis_index_p.batch = _axis_index_batch
ad.defjvp_zero(axis_index_p)


def axis_index(axis_name):
    """This member's position along the named axis (an int32 scalar).

        >>> import functrans, functrans.numpy as jnp
        >>> functrans.vmap(lambda v: functrans.lax.axis_index('i'), axis_name='i')(jnp.zeros(3))
        Array([0, 1, 2], dtype=int32)
    """
    names = _collective_names("axis_index", axis_name)
    return axis_index_p.bind(axis_name=names)


COLLECTIVES = (psum_p, pmax_p, pmin_p, all_gather_p, reduce_scatter_p, all_to_all_p,
               ppermute_p, axis_index_p)


def axis_size(axis_name) -> int:
    """The size of the named mapped axis (the batch size of the enclosing
    ``vmap(..., axis_name=...)`` or the device count of the ``pmap``); a tuple of names gives
    the product.

        >>> functrans.vmap(lambda x: x * axis_size("i"), axis_name="i")(jnp.ones(3))
        Array([3., 3., 3.], dtype=float32)
    """
    return _axis_size(axis_name)


def pswapaxes(x, axis_name, axis: int, *, axis_index_groups=None):
    """Swap the named (mapped) axis ``axis_name`` with the unmapped axis ``axis`` of ``x``
    (a pytree of arrays): ``all_to_all(x, axis_name, axis, axis)``. The axis size must equal
    ``x.shape[axis]``.

        >>> import functrans, functrans.numpy as jnp
        >>> functrans.vmap(lambda v: functrans.lax.pswapaxes(v, 'i', 0), axis_name='i')(
        ...     jnp.arange(4.0).reshape(2, 2))
        Array([[0., 2.],
               [1., 3.]], dtype=float32)
    """
    return tree_util.tree_map(
        lambda leaf: all_to_all(leaf, axis_name, axis, axis,
                                axis_index_groups=axis_index_groups), x)



# =============================================================================================
# pcast(..., to="varying"): mark a value as varying along named axes
# =============================================================================================

# The identity on values; what changes is the value's type inside shard_map: it now varies
# along the names (so a P() output of it must be reduced first), and its cotangent is summed
# over them (the transpose of "copy to every member" is a psum).
pvary_p = Primitive("pvary")


@pvary_p.def_impl
def _pvary_impl(x, *, axes):
    return x


@pvary_p.def_abstract_eval
def _pvary_abstract_eval(x, *, axes):
    return x


def _pvary_transpose(ct, x, *, axes):
    if isinstance(ct, ad.Zero):
        return [ct]
    return [psum(ct, axes)]


pvary_p.jvp = lambda primals, tangents, *, axes: (
    pvary_p.bind(primals[0], axes=axes),
    tangents[0] if isinstance(tangents[0], ad.Zero) else pvary_p.bind(tangents[0], axes=axes))
pvary_p.transpose = _pvary_transpose
pvary_p.batch = lambda vals, dims, *, axes: (pvary_p.bind(vals[0], axes=axes), dims[0])


def pcast(x, axis_name, *, to: str):
    """Change the type of ``x`` (a pytree) along the named axes, as ``jax.lax.pcast``:
    ``to="varying"`` marks values that are the same on every member as varying along
    ``axis_name`` (inside ``shard_map``; the values do not change), so they can be
    combined with varying values where the type system asks for it, and their gradients
    are summed over the axis. ``"reduced"``/``"unreduced"`` (JAX's explicit-sharding
    types) are not supported.
    """
    if isinstance(axis_name, (set, frozenset)):
        raise TypeError(f"axis_name={axis_name!r} must be a tuple or a str. Got {axis_name}")
    axes = _names_tuple(axis_name)
    if not axes:
        return x
    if to not in ("varying", "reduced", "unreduced"):
        raise ValueError("Got unexpected `to` value. Allowed `to` values are: "
                         "{'unreduced', 'reduced', 'varying'}")
    if to != "varying":
        raise NotImplementedError(f"pcast(to={to!r}): functrans has no reduced/unreduced "
                                  f"sharding types; only to='varying' is supported")
    for name in axes:
        if batching.find_axis_main(name) is None and _staged_axis_size(name) is None and \
                not _running_axis(name):
            raise _unbound_axis_error(name, "pcast")
    return tree_util.tree_map(lambda leaf: pvary_p.bind(_as_operand(leaf), axes=axes), x)


__all__ = ["all_gather", "all_to_all", "axis_index", "axis_size", "pcast", "pmax", "pmean",
           "pmin", "ppermute", "pshuffle", "pswapaxes", "psum", "psum_scatter"]
