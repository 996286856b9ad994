"""The user-facing transforms: grad, jvp, vjp, linearize, jacobians, vmap, make_jaxpr,
eval_shape. Each flattens pytrees and calls the flat transform in ``interpreters``."""
from __future__ import annotations

import functools
from typing import Callable, Sequence

import numpy as np

from functrans import _devices, _dtypes, _transfer_guard, core, tree_util
from functrans._array import Array, host_to_array, is_concrete_array, sharding_layer
from functrans.core import ShapedArray, Tracer, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters.staging import trace_to_jaxpr_dynamic
from functrans.primitives import elementwise, structural
from functrans._traceback_util import api_boundary
from functrans.tree_util import tree_flatten, tree_map, tree_unflatten
from functrans import _axis_env as env_module


def _check_array_arg(x, fname: str):
    if isinstance(x, Tracer):
        return x
    if not core.valid_jaxtype(x):
        raise TypeError(f"{fname}: argument of type {type(x).__name__} is not a valid array "
                        f"type: {x!r}")
    return x


def _as_array(x):
    """A pytree leaf as an array value: tracers and Arrays as they are, host values (Python
    scalars, NumPy values, objects NumPy converts) as Arrays."""
    if isinstance(x, Tracer) or is_concrete_array(x):
        return x
    if hasattr(x, "__jax_array__"):
        return _as_array(x.__jax_array__())
    if _dtypes.is_python_scalar(x):
        return host_to_array(x)
    x = np.asarray(x)
    if x.dtype.kind in "OUS" or x.dtype.names is not None:
        raise TypeError(f"cannot convert {x!r} to an array (ragged or non-numeric)")
    return host_to_array(x)


def _flat_fun(fun, in_tree, out_tree_cell):
    def flat(*leaves):
        args = tree_unflatten(in_tree, leaves)
        out = fun(*args)
        out_leaves, out_tree = tree_flatten(out)
        out_tree_cell.append(out_tree)
        return out_leaves
    return flat


# =============================================================================================
# Forward mode
# =============================================================================================


@api_boundary
def jvp(fun: Callable, primals, tangents, has_aux: bool = False):
    """Forward-mode derivative: returns ``(fun(*primals), J @ tangents)``.

        >>> import functrans, functrans.numpy as jnp
        >>> functrans.jvp(jnp.sin, (0.0,), (1.0,))
        (Array(0., dtype=float32, weak_type=True), Array(1., dtype=float32, weak_type=True))
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp: primals and tangents must be tuples or lists, got "
                        f"{type(primals).__name__} and {type(tangents).__name__}")
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    primal_leaves, in_tree = tree_flatten(tuple(primals))
    tangent_leaves, tangent_tree = tree_flatten(tuple(tangents))
    if in_tree != tangent_tree:
        raise ValueError(f"jvp: primal and tangent structures differ: {in_tree} vs {tangent_tree}")
    for p, t in zip(primal_leaves, tangent_leaves):
        pa, ta = get_aval(p), get_aval(t)
        expected = ad.tangent_aval(pa)
        if pa.shape != ta.shape or (expected.dtype != ta.dtype and
                                    not (_dtypes.is_float(ta.dtype) and expected.dtype != _dtypes.float0)):
            raise TypeError(f"jvp: primal {pa.str_short()} needs a tangent of type "
                            f"{expected.str_short()}, got {ta.str_short()}")
    primal_leaves = [_as_array(p) for p in primal_leaves]
    tangent_leaves = [ad.Zero(ad.tangent_aval(get_aval(p))) if get_aval(t).dtype == _dtypes.float0
                      else _as_array(t) for p, t in zip(primal_leaves, tangent_leaves)]
    out_tree_cell: list = []

    def flat(*leaves):
        out = fun(*tree_unflatten(in_tree, leaves))
        if has_aux:
            out, aux = out
            out_tree_cell.append(tree_structure_and_aux(out, aux))
            return tree_flatten(out)[0] + tree_flatten(aux)[0]
        out_leaves, out_tree = tree_flatten(out)
        out_tree_cell.append((out_tree, None))
        return out_leaves

    primals_out, tangents_out = ad.jvp_flat(flat, primal_leaves, tangent_leaves)
    out_tree, aux_tree = out_tree_cell[0]
    n = out_tree.num_leaves
    tangents_out = [ad.instantiate_zeros(t) for t in tangents_out[:n]]
    result = (tree_unflatten(out_tree, primals_out[:n]), tree_unflatten(out_tree, tangents_out))
    if has_aux:
        return result + (tree_unflatten(aux_tree, primals_out[n:]),)
    return result


def tree_structure_and_aux(out, aux):
    return tree_util.tree_structure(out), tree_util.tree_structure(aux)


@api_boundary
def linearize(fun: Callable, *primals, has_aux: bool = False):
    """Returns ``(fun(*primals), f_jvp)`` where ``f_jvp(*tangents)`` evaluates the linear map
    without re-running the primal computation."""
    primal_leaves, in_tree = tree_flatten(primals)
    primal_leaves = [_as_array(p) for p in primal_leaves]
    out_tree_cell: list = []
    flat = _flat_fun_aux(fun, in_tree, out_tree_cell, has_aux)
    primals_out, jaxpr, residuals, _ = ad.linearize_flat(flat, primal_leaves)
    out_tree, aux_tree = out_tree_cell[0]
    n = out_tree.num_leaves

    def f_jvp(*tangents):
        tangent_leaves, tangent_tree = tree_flatten(tangents)
        if tangent_tree != in_tree:
            raise ValueError(f"linearized function: tangent structure {tangent_tree} does not "
                             f"match the primals' {in_tree}")
        outs = core.eval_jaxpr(jaxpr, residuals, *tangent_leaves)
        return tree_unflatten(out_tree, outs[:n])

    out = tree_unflatten(out_tree, primals_out[:n])
    if has_aux:
        return out, f_jvp, tree_unflatten(aux_tree, primals_out[n:])
    return out, f_jvp


def _flat_fun_aux(fun, in_tree, cell, has_aux):
    def flat(*leaves):
        out = fun(*tree_unflatten(in_tree, leaves))
        if has_aux:
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise TypeError("has_aux=True requires the function to return a pair "
                                "(output, auxiliary data)")
            out, aux = out
            aux_leaves, aux_tree = tree_flatten(aux)
            out_leaves, out_tree = tree_flatten(out)
            cell.append((out_tree, aux_tree))
            return out_leaves + [ad_stop(a) for a in aux_leaves]
        out_leaves, out_tree = tree_flatten(out)
        cell.append((out_tree, None))
        return out_leaves
    return flat


def ad_stop(x):
    return elementwise.stop_gradient(x)


# =============================================================================================
# Reverse mode
# =============================================================================================


@api_boundary
def vjp(fun: Callable, *primals, has_aux: bool = False):
    """Reverse-mode derivative: returns ``(fun(*primals), vjp_fun)`` where
    ``vjp_fun(cotangent)`` returns a tuple of cotangents, one per primal argument.

        >>> import functrans, functrans.numpy as jnp
        >>> y, f_vjp = functrans.vjp(jnp.sin, 0.0)
        >>> f_vjp(1.0)
        (Array(1., dtype=float32, weak_type=True),)
    """
    primal_leaves, in_tree = tree_flatten(primals)
    for x in primal_leaves:
        _check_array_arg(x, "vjp")
    primal_leaves = [_as_array(p) for p in primal_leaves]
    out_tree_cell: list = []
    flat = _flat_fun_aux(fun, in_tree, out_tree_cell, has_aux)
    primals_out, vjp_flat_fun, out_tangent_avals = ad.vjp_flat(flat, primal_leaves)
    out_tree, aux_tree = out_tree_cell[0]
    n = out_tree.num_leaves
    in_avals = [get_aval(p) for p in primal_leaves]

    @api_boundary
    def vjp_fun(cotangent):
        ct_leaves, ct_tree = tree_flatten(cotangent)
        if ct_tree != out_tree:
            raise ValueError(f"vjp: the cotangent has structure {ct_tree} but the function's "
                             f"output has structure {out_tree}")
        cts = []
        for ct, aval in zip(ct_leaves, out_tangent_avals[:n]):
            cta = get_aval(ct)
            if cta.shape != aval.shape:
                raise ValueError(f"vjp: cotangent of shape {cta.shape} for an output of shape "
                                 f"{aval.shape}")
            cts.append(ad.Zero(aval) if aval.dtype == _dtypes.float0 else _as_array(ct))
        cts += [ad.Zero(a) for a in out_tangent_avals[n:]]
        cts_in = vjp_flat_fun(cts)
        cts_in = [_zeros_cotangent(aval) if isinstance(ct, ad.Zero) else ct
                  for ct, aval in zip(cts_in, in_avals)]
        return tuple(tree_unflatten(in_tree, cts_in))

    out = tree_unflatten(out_tree, primals_out[:n])
    if has_aux:
        return out, vjp_fun, tree_unflatten(aux_tree, primals_out[n:])
    return out, vjp_fun


def _zeros_cotangent(aval):
    return ad.zeros_like_aval(ad.tangent_aval(aval))


def _with_fixed_args(fun, args, kwargs, argnums):
    """``fun`` as a function of the arguments at ``argnums`` only, the others fixed."""
    def partial_fun(*dargs):
        full = list(args)
        for a, v in zip(argnums, dargs):
            full[a] = v
        return fun(*full, **kwargs)
    return partial_fun


def split_static_args(args, static_argnums):
    """``(dynamic_args, rebuild)``: the arguments not at ``static_argnums``, and a function
    that puts (traced) replacements for them back between the static ones."""
    statics = {i: a for i, a in enumerate(args) if i in static_argnums}
    dynamic = [a for i, a in enumerate(args) if i not in static_argnums]

    def rebuild(dynamic_values):
        it = iter(dynamic_values)
        return [statics[i] if i in statics else next(it) for i in range(len(args))]

    return dynamic, rebuild


def _check_grad_input(x, allow_int: bool, holomorphic: bool):
    dtype = get_aval(x).dtype
    if holomorphic:
        if not _dtypes.is_complex(dtype):
            raise TypeError(f"grad with holomorphic=True requires complex inputs, got {dtype.name}")
    elif not (_dtypes.is_inexact(dtype) or allow_int):
        raise TypeError(
            f"grad requires real- or complex-valued inputs (input dtype that is a sub-dtype of "
            f"np.inexact), but got {dtype.name}. If you want to use integer-valued inputs, "
            "use vjp or set allow_int to True.")


def _check_scalar_output(out, holomorphic: bool):
    aval = get_aval(out)
    if aval.shape != ():
        raise TypeError(f"grad requires a scalar output, but the function returned shape "
                        f"{aval.shape}. Use jacrev/jacfwd or vjp for non-scalar outputs.")
    if _dtypes.is_complex(aval.dtype) and not holomorphic:
        raise TypeError("grad requires a real-valued output (the function returned "
                        f"{aval.dtype.name}); use holomorphic=True for holomorphic functions")
    if not _dtypes.is_inexact(aval.dtype):
        raise TypeError(f"grad requires a float output, but the function returned {aval.dtype.name}")


def value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
                   holomorphic: bool = False, allow_int: bool = False, reduce_axes=()):
    """Returns a function computing both ``fun``'s value and its gradient with respect to
    the arguments at ``argnums``.

        >>> import functrans, functrans.numpy as jnp
        >>> functrans.value_and_grad(lambda x: jnp.sum(x ** 2))(jnp.arange(3.0))
        (Array(5., dtype=float32), Array([0., 2., 4.], dtype=float32))
    """
    int_argnums = isinstance(argnums, int)
    argnums_t = (argnums,) if int_argnums else tuple(argnums)

    @functools.wraps(fun)
    @api_boundary
    def value_and_grad_f(*args, **kwargs):
        for a in argnums_t:
            if a >= len(args):
                raise TypeError(f"differentiating with respect to argnums={argnums} requires at "
                                f"least {max(argnums_t) + 1} positional arguments, got {len(args)}")
        diff_args = tuple(args[a] for a in argnums_t)
        for leaf in tree_util.tree_leaves(diff_args):
            _check_array_arg(leaf, "grad")
            _check_grad_input(leaf, allow_int, holomorphic)

        partial_fun = _with_fixed_args(fun, args, kwargs, argnums_t)

        if has_aux:
            ans, vjp_fun, aux = vjp(partial_fun, *diff_args, has_aux=True)
        else:
            ans, vjp_fun = vjp(partial_fun, *diff_args)
        _check_scalar_output(ans, holomorphic)
        aval = get_aval(ans)
        grads = vjp_fun(structural.full(aval.shape, 1, aval.dtype, weak_type=aval.weak_type))
        grads = tuple(tree_map(_float0_for_int, g, d) for g, d in zip(grads, diff_args))
        g = grads[0] if int_argnums else grads
        if has_aux:
            return (ans, aux), g
        return ans, g

    return value_and_grad_f


def _float0_for_int(g, x):
    if not _dtypes.is_inexact(get_aval(x).dtype):
        return Array(np.zeros(get_aval(x).shape, _dtypes.float0))
    return g


def grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
         holomorphic: bool = False, allow_int: bool = False, reduce_axes=()):
    """Gradient of a scalar-valued ``fun`` with respect to the arguments at ``argnums``.

        >>> import functrans, functrans.numpy as jnp
        >>> functrans.grad(lambda x: jnp.sum(jnp.sin(x)))(jnp.zeros(2))
        Array([1., 1.], dtype=float32)
    """
    vg = value_and_grad(fun, argnums, has_aux, holomorphic, allow_int)

    @functools.wraps(fun)
    @api_boundary
    def grad_f(*args, **kwargs):
        if has_aux:
            (_, aux), g = vg(*args, **kwargs)
            return g, aux
        _, g = vg(*args, **kwargs)
        return g

    return grad_f


# =============================================================================================
# Jacobians
# =============================================================================================


def _std_basis(leaves):
    """Stacked one-hot tangents for every element of every leaf: shape (N, *leaf.shape)."""
    sizes = [int(np.prod(get_aval(x).shape, dtype=np.int64)) for x in leaves]
    total = sum(sizes)
    out, start = [], 0
    for x, size in zip(leaves, sizes):
        aval = get_aval(x)
        block = np.eye(total, dtype=np.float64)[:, start:start + size]
        out.append(host_to_array(block.reshape((total,) + aval.shape).astype(aval.dtype)))
        start += size
    return out, total


def jacfwd(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False):
    """Jacobian by forward mode (vmapped jvp over the standard basis of the inputs).
    The result has the output's structure, each leaf of shape ``out.shape + in.shape``."""
    int_argnums = isinstance(argnums, int)
    argnums_t = (argnums,) if int_argnums else tuple(argnums)

    @api_boundary
    def jacfun(*args, **kwargs):
        diff_args = tuple(args[a] for a in argnums_t)
        # checked through tree_map as JAX checks them: the rebuilt tree holds the checks'
        # None results, so a custom node whose unflatten refuses None fails as in JAX
        tree_map(lambda leaf: _check_grad_input(leaf, False, holomorphic), diff_args)
        leaves, tree = tree_flatten(diff_args)
        leaves = [_as_array(x) for x in leaves]
        basis, total = _std_basis(leaves)

        partial_fun = _with_fixed_args(fun, args, kwargs, argnums_t)

        def push(*tangent_leaves):
            primals = tuple(tree_unflatten(tree, leaves))
            tangents = tuple(tree_unflatten(tree, tangent_leaves))
            if has_aux:
                y, t, aux = jvp(partial_fun, primals, tangents, has_aux=True)
                return y, t, aux
            y, t = jvp(partial_fun, primals, tangents)
            return y, t

        outs = vmap(push, in_axes=0, out_axes=(None, -1, None) if has_aux else (None, -1))(*basis)
        y, jac_flat = outs[0], outs[1]
        # jac leaves have shape out.shape + (total,): split the last axis per input leaf
        y_leaves, y_tree = tree_flatten(y)

        def split(j):
            pieces, start = [], 0
            for x in leaves:
                aval = get_aval(x)
                size = int(np.prod(aval.shape, dtype=np.int64))
                piece = j[..., start:start + size]
                pieces.append(piece.reshape(get_aval(j).shape[:-1] + aval.shape))
                start += size
            per_arg = tree_unflatten(tree, pieces)
            return per_arg[0] if int_argnums else per_arg

        jac = tree_map(split, jac_flat)
        if has_aux:
            return jac, outs[2]
        return jac

    return jacfun


def jacrev(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False, allow_int: bool = False):
    """Jacobian by reverse mode (vmapped vjp over the standard basis of the outputs)."""
    int_argnums = isinstance(argnums, int)
    argnums_t = (argnums,) if int_argnums else tuple(argnums)

    @api_boundary
    def jacfun(*args, **kwargs):
        diff_args = tuple(args[a] for a in argnums_t)
        tree_map(lambda leaf: _check_grad_input(leaf, allow_int, holomorphic), diff_args)

        partial_fun = _with_fixed_args(fun, args, kwargs, argnums_t)

        if has_aux:
            y, pullback, aux = vjp(partial_fun, *diff_args, has_aux=True)
        else:
            y, pullback = vjp(partial_fun, *diff_args)
        y_leaves, y_tree = tree_flatten(y)
        basis, total = _std_basis([_as_array(v) for v in y_leaves])
        cts = vmap(lambda *b: pullback(tree_unflatten(y_tree, b)))(*basis)
        # cts: tuple over args, leaves of shape (total, *in.shape); split axis 0 per output leaf

        def per_output(ct_leaf):
            pieces, start = [], 0
            for yl in y_leaves:
                shape = get_aval(yl).shape
                size = int(np.prod(shape, dtype=np.int64))
                pieces.append(ct_leaf[start:start + size].reshape(shape + get_aval(ct_leaf).shape[1:]))
                start += size
            return pieces

        arg_jacs = [tree_map(per_output, c) for c in cts]  # per arg: tree of lists (one per y leaf)
        result_leaves = []
        for k in range(len(y_leaves)):
            per_arg = tuple(tree_map(lambda lst: lst[k], aj, is_leaf=lambda v: isinstance(v, list))
                            for aj in arg_jacs)
            result_leaves.append(per_arg[0] if int_argnums else per_arg)
        jac = tree_unflatten(y_tree, result_leaves)
        if has_aux:
            return jac, aux
        return jac

    return jacfun


def hessian(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
            holomorphic: bool = False):
    """Hessian of a scalar function: ``jacfwd(jacrev(fun))``."""
    return jacfwd(jacrev(fun, argnums, has_aux=has_aux, holomorphic=holomorphic), argnums,
                  has_aux=has_aux, holomorphic=holomorphic)


# =============================================================================================
# vmap
# =============================================================================================


def _flatten_axes(name, treedef, axis_tree):
    """Broadcast a prefix tree of axes (ints or None) to the leaves of ``treedef``."""
    try:
        return tree_util.broadcast_prefix_to(treedef, axis_tree, is_leaf=lambda x: x is None)
    except ValueError as err:
        raise ValueError(f"vmap {name} specification must be a tree prefix of the "
                         f"corresponding value, got specification {axis_tree} for value tree "
                         f"{treedef}") from err


def inconsistent_sizes_message(transform: str, names, leaves, dims) -> str:
    """The error for mapped axes of different sizes, naming one argument per size as the
    user wrote it (``axis 0 of argument p['w'] of type float32[5,3]``), the most common size
    first. ``names``, ``leaves`` and ``dims`` are per flattened leaf (dim None: not mapped)."""
    by_size: dict = {}
    for name, x, d in zip(names, leaves, dims):
        if d is not None:
            by_size.setdefault(get_aval(x).shape[d], []).append((name, x, d))
    lines = []
    for rank, (size, mapped) in enumerate(
            sorted(by_size.items(), key=lambda item: -len(item[1]))):
        name, x, d = mapped[0]
        example = (f"axis {d} of argument {name} of type "
                   f"{get_aval(x).strip_weak_type().str_short()}")
        if len(mapped) == 1:
            lines.append(f"  * one axis had size {size}: {example}")
        else:
            many = "most" if rank == 0 else "some"
            lines.append(f"  * {many} axes ({len(mapped)} of them) had size {size}, "
                         f"e.g. {example}")
    return f"{transform} got inconsistent sizes for the mapped axis:\n" + ";\n".join(lines)


def vmap(fun: Callable, in_axes=0, out_axes=0, axis_name=None, axis_size: int | None = None,
         spmd_axis_name=None, chunk_size: int | None = None):
    """Vectorize ``fun`` over a mapped axis of its inputs.

    ``in_axes``: an int, None, or a pytree prefix of the arguments; ``out_axes`` likewise for
    the outputs. ``chunk_size`` evaluates the batch in chunks of that size to bound memory.

        >>> import functrans, functrans.numpy as jnp
        >>> functrans.vmap(jnp.dot)(jnp.ones((3, 2)), jnp.ones((3, 2)))
        Array([2., 2., 2.], dtype=float32)
    """
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if not (in_axes is None or type(in_axes) in (int, tuple)):
        raise TypeError("vmap in_axes must be an int, None, or a tuple of entries "
                        "corresponding to the positional arguments passed to the function, "
                        f"but got {in_axes}.")

    @functools.wraps(fun)
    @api_boundary
    def vmap_f(*args, **kwargs):
        if kwargs:
            # keyword arguments are mapped along axis 0, as in JAX: passed as one more
            # positional argument (a dict) with in_axes 0
            if isinstance(in_axes, tuple) and len(in_axes) != len(args):
                raise ValueError(f"vmap in_axes has length {len(in_axes)} but the function was "
                                 f"called with {len(args)} positional arguments")
            axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
            with_kwargs = vmap(lambda *a: fun(*a[:-1], **a[-1]), axes + (0,), out_axes,
                               axis_name, axis_size, spmd_axis_name, chunk_size)
            return with_kwargs(*args, kwargs)
        args_leaves, in_tree = tree_flatten(args)
        if isinstance(in_axes, tuple):
            if len(in_axes) != len(args):
                raise ValueError(f"vmap in_axes has length {len(in_axes)} but the function was "
                                 f"called with {len(args)} positional arguments")
            axes_spec = in_axes
        else:
            axes_spec = (in_axes,) * len(args)
        in_dims = _flatten_axes("in_axes", in_tree, tuple(axes_spec))
        sizes = {}
        dims = []
        for i, (x, d) in enumerate(zip(args_leaves, in_dims)):
            if d is None:
                dims.append(None)
                continue
            aval = get_aval(x)
            if not -aval.ndim <= d < aval.ndim:
                raise ValueError(f"vmap was requested to map its argument along axis {d}, "
                                 f"which implies that its rank should be at least {d + 1 if d >= 0 else -d}, "
                                 f"but is only {aval.ndim} (its shape is {aval.shape})")
            d = d % aval.ndim
            dims.append(d)
            sizes.setdefault(aval.shape[d], []).append(i)
        if len(sizes) > 1:
            raise ValueError(inconsistent_sizes_message(
                "vmap", tree_util._argument_paths(fun, args, {}), args_leaves, dims))
        if not sizes:
            if axis_size is None:
                raise ValueError("vmap must have at least one non-None value in in_axes, or "
                                 "axis_size must be given")
            size = int(axis_size)
        else:
            size = next(iter(sizes))
            if axis_size is not None and axis_size != size:
                raise ValueError(f"vmap axis_size={axis_size} but the mapped axes have size {size}")
        leaves = [x if isinstance(x, Tracer) else (_as_array(x) if d is not None else x)
                  for x, d in zip(args_leaves, dims)]
        if chunk_size is not None and size > chunk_size:
            return _chunked_vmap(fun, args, leaves, in_tree, dims, size, chunk_size)
        out_tree_cell: list = []
        flat = _flat_fun(fun, in_tree, out_tree_cell)

        def out_dims_fn(n):
            return _flatten_axes("out_axes", out_tree_cell[0], out_axes)

        outs = batching.batch_fun(flat, leaves, dims, size, out_dims_fn, axis_name, spmd_axis_name)
        return tree_unflatten(out_tree_cell[0], outs)

    def _chunked_vmap(fun_, args, leaves, in_tree, dims, size, chunk):
        pieces = []
        for start in range(0, size, chunk):
            stop = min(size, start + chunk)
            sliced = [x if d is None else structural.slice_in_dim(x, start, stop, axis=d)
                      for x, d in zip(leaves, dims)]
            sub_args = tree_unflatten(in_tree, sliced)
            pieces.append(vmap(fun_, in_axes=in_axes, out_axes=out_axes, axis_name=axis_name)(*sub_args))
        first = pieces[0]
        out_leaves0, out_tree = tree_flatten(first)
        out_dims = _flatten_axes("out_axes", out_tree, out_axes)
        columns = zip(*[tree_flatten(p)[0] for p in pieces])
        merged = [col[0] if d is None else structural.concatenate(list(col), d)
                  for col, d in zip(columns, out_dims)]
        return tree_unflatten(out_tree, merged)

    return vmap_f


# =============================================================================================
# Staging helpers
# =============================================================================================


def make_jaxpr(fun: Callable, static_argnums: int | Sequence[int] = (), axis_env=None,
               return_shape: bool = False):
    """Returns a function that gives the closed jaxpr of ``fun`` at the given arguments.

        >>> import functrans, functrans.numpy as jnp
        >>> print(functrans.make_jaxpr(lambda x: jnp.sin(x) * 2.0)(1.0))
        { lambda ; a:f32[]. let
            b:f32[] = sin a
            c:f32[] = mul b 2.0
          in (c,) }
    """
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)

    @functools.wraps(fun)
    @api_boundary
    def make_jaxpr_f(*args, **kwargs):
        dyn, rebuild = split_static_args(args, static_argnums)
        leaves, in_tree = tree_flatten((dyn, kwargs))
        avals = [get_aval(x) for x in leaves]
        out_tree_cell: list = []

        def flat(*flat_args):
            dargs, kw = tree_unflatten(in_tree, flat_args)
            out = fun(*rebuild(dargs), **kw)
            out_leaves, out_tree = tree_flatten(out)
            out_tree_cell.append(out_tree)
            return out_leaves

        with _axis_env(axis_env):
            jaxpr, consts = trace_to_jaxpr_dynamic(flat, avals)
        closed = core.ClosedJaxpr(jaxpr, consts)
        if return_shape:
            shapes = tree_unflatten(out_tree_cell[0],
                                    [ShapeDtypeStruct(a.shape, a.dtype) for a in jaxpr.out_avals])
            return closed, shapes
        return closed

    return make_jaxpr_f


def _axis_env(axis_env):
    import contextlib
    if not axis_env:
        return contextlib.nullcontext()
    return env_module.extend_axis_env_nd(axis_env)


class ShapeDtypeStruct:
    """A shape and dtype, standing in for an array (as ``jax.ShapeDtypeStruct``)."""

    __slots__ = ("shape", "dtype", "weak_type", "sharding")

    def __init__(self, shape, dtype, weak_type: bool = False, sharding=None, *, vma=None,
                 is_ref: bool = False):
        self.shape = tuple(shape)
        # an extended dtype (a key array's key<fry>) is kept as it is
        self.dtype = dtype if _dtypes.extended_kind(dtype) is not None else np.dtype(dtype)
        self.weak_type = weak_type
        self.sharding = sharding

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

    @property
    def aval(self):
        if _dtypes.extended_kind(self.dtype) is not None:
            return core.extended_aval(self.shape, self.dtype)
        return ShapedArray(self.shape, self.dtype, self.weak_type)

    def update(self, **kwargs) -> "ShapeDtypeStruct":
        """This struct with ``shape``, ``dtype``, ``weak_type`` or ``sharding`` replaced."""
        fields = dict(shape=self.shape, dtype=self.dtype, weak_type=self.weak_type,
                      sharding=self.sharding)
        fields.update(kwargs)
        return ShapeDtypeStruct(**fields)

    def __repr__(self):
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name})"

    def __eq__(self, other):
        return isinstance(other, ShapeDtypeStruct) and (self.shape, self.dtype) == (other.shape, other.dtype)

    def __hash__(self):
        return hash((self.shape, self.dtype))


def _abstract_argument(x) -> ShapedArray:
    if isinstance(x, ShapedArray):
        return x
    if not isinstance(x, Tracer) and not hasattr(x, "aval") and hasattr(x, "shape") and \
            hasattr(x, "dtype") and not isinstance(x, (np.ndarray, np.generic)):
        return ShapedArray(tuple(x.shape), np.dtype(x.dtype),
                           bool(getattr(x, "weak_type", False)))
    return get_aval(x)


@api_boundary
def eval_shape(fun: Callable, *args, **kwargs):
    """The shapes and dtypes ``fun`` would return, computed without running it. The
    arguments may be arrays, scalars, or anything with ``shape`` and ``dtype`` (a
    ``ShapeDtypeStruct``, an abstract value)."""
    leaves, in_tree = tree_flatten((args, kwargs))
    avals = [_abstract_argument(x) for x in leaves]
    out_tree_cell: list = []

    def flat(*flat_args):
        a, kw = tree_unflatten(in_tree, flat_args)
        out_leaves, out_tree = tree_flatten(fun(*a, **kw))
        out_tree_cell.append(out_tree)
        return out_leaves

    jaxpr, _ = trace_to_jaxpr_dynamic(flat, avals)
    out = tree_unflatten(out_tree_cell[0],
                         [ShapeDtypeStruct(a.shape, a.dtype, a.weak_type) for a in jaxpr.out_avals])
    # a key array comes back as one struct of its key dtype, as JAX gives it
    return tree_util.tree_map(
        lambda x: ShapeDtypeStruct(x._key_words[0].shape, x.dtype)
        if hasattr(x, "_key_words") else x, out, is_leaf=lambda x: hasattr(x, "_key_words"))


def block_until_ready(x):
    """Wait for every array in the pytree ``x`` to be computed; returns ``x``."""
    if type(x) is Array:  # one host array, the usual case, without flattening a tree
        return x
    for leaf in tree_util.tree_leaves(x):
        if type(leaf) is Array:  # a host array is computed when it exists
            continue
        ready = getattr(leaf, "block_until_ready", None)
        if ready is not None:
            ready()
    return x


def effects_barrier() -> None:
    """Wait until every side effect of the calls made so far has happened (``debug.print``,
    ``debug.callback``), as ``jax.effects_barrier``.

    It returns at once because no effect here outlives the call that makes it: a compiled
    program runs its callbacks on the host, in program order, before the call returns (on a
    GPU too: the program waits for the device's results a callback reads), and ``pmap``
    joins its device threads, whose callbacks they are, before it returns. Kernels a GPU
    still runs after a call returns have no effects beyond their outputs, which
    :func:`block_until_ready` waits for.

        >>> import functrans, functrans.numpy as jnp
        >>> @functrans.jit
        ... def f(x):
        ...     functrans.debug.print("x = {}", x)
        ...     return x
        >>> _ = f(jnp.float32(1.0)); functrans.effects_barrier()
        x = 1.0
    """


def device_put(x, device=None, *, src=None, donate=False, may_alias=None):
    """Place every array of the pytree ``x`` on ``device``: a device (default: the default
    device), a sharding (``NamedSharding(mesh, P('data'))`` gives each device of the mesh
    its block, cut from ``x`` without gathering it anywhere), or a pytree prefix of ``x``
    of devices and shardings. ``src``, ``donate`` and ``may_alias`` are accepted as in JAX.

        >>> import functrans, numpy as np
        >>> functrans.device_put(np.ones(2)).shape
        (2,)
    """
    # placing by a sharding is functrans.sharding's, a layer above (registered with _array)
    shardings = sharding_layer

    def put(leaf, target):
        if isinstance(target, shardings.sharding_type):
            if isinstance(leaf, Tracer):
                return shardings.put_traced(leaf, target)
            return shardings.put(leaf, target)
        if isinstance(leaf, Tracer):
            return leaf
        if target is None:
            target = _devices.default_device()
        if isinstance(leaf, shardings.partitioned_array_type):
            leaf = leaf._value
        placer = getattr(target, "put", None)
        if placer is not None:
            return placer(leaf)
        if is_concrete_array(leaf):  # its buffer is immutable: the new Array shares it
            if _transfer_guard.switch.on and leaf.device != target:
                _transfer_guard.check("device_to_device", True,
                                      lambda: f"aval={get_aval(leaf)!r}, from {leaf.device!r} "
                                              f"to {target!r}")
            return Array._from_buffer(leaf._value, leaf.weak_type, target)
        # host data is copied, never aliased
        return host_to_array(leaf, device=target, explicit=True)

    if device is None or isinstance(device, (_devices.Device, shardings.sharding_type)) or \
            hasattr(device, "put"):
        return tree_map(lambda leaf: put(leaf, device), x)
    targets = tree_util.tree_broadcast(device, x, is_leaf=lambda t: t is None)
    return tree_map(put, x, targets)
