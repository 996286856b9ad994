"""``scan`` and ``map``: the ``scan`` primitive's operands are ``(*consts, *carry, *xs)``;
its ``jaxpr`` maps ``(consts, carry, x)`` to ``(carry, y)`` and runs ``length`` times over
the leading axis of ``xs``, stacking the ``y``. Its reference implementation, shape rule,
JVP, partial evaluation (a known primal scan stacking residuals and a linear scan),
transpose, batching rule and dead-code elimination sit beside it. ``map`` is a scan.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from functrans import _dtypes, core, tree_util
from functrans.core import Literal, Primitive, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters import partial_eval as pe
from functrans.primitives import structural
from functrans.primitives.loop_bodies import (batch_body, cast_leaves, check_carry,
                                              eval_closed, instantiate, is_nonzero_tangent,
                                              merge_lists, prune, reorder, same_type,
                                              split_list, stage_user_fun, stage_wrapper, zeros)


# =============================================================================================
# scan
# =============================================================================================

scan_p = Primitive("scan", multiple_results=True)


@scan_p.def_impl
def _scan_impl(*args, jaxpr, num_consts, num_carry, length, reverse, linear, unroll):
    consts, carry, xs = split_list(args, [num_consts, num_carry])
    y_avals = jaxpr.out_avals[num_carry:]
    ys = [np.empty((length,) + a.shape, a.dtype) for a in y_avals]
    body_consts = [core.to_numpy(c) for c in jaxpr.consts]
    for step in range(length):
        i = length - 1 - step if reverse else step
        outs = core.eval_jaxpr_numpy(jaxpr.jaxpr, body_consts, consts + carry + [x[i] for x in xs])
        carry = outs[:num_carry]
        for y, o in zip(ys, outs[num_carry:]):
            y[i] = o
    return carry + ys


@scan_p.def_abstract_eval
def _scan_abstract_eval(*avals, jaxpr, num_consts, num_carry, length, reverse, linear, unroll):
    _, carry, xs = split_list(avals, [num_consts, num_carry])
    body_in = jaxpr.in_avals
    if len(body_in) != len(avals):
        raise TypeError(f"scan: the body takes {len(body_in)} inputs, given {len(avals)} operands")
    for x, b in zip(xs, body_in[num_consts + num_carry:]):
        if x.shape[:1] != (length,) or x.shape[1:] != b.shape or x.dtype != b.dtype:
            raise TypeError(f"scan: scanned operand {x.str_short()} does not match the body's "
                            f"slice type {b.str_short()} with length {length}")
    carry_out = jaxpr.out_avals[:num_carry]
    if not all(same_type(a, b) for a, b in zip(carry, carry_out)):
        raise TypeError(f"scan: the body maps the carry ({', '.join(a.str_short() for a in carry)}) "
                        f"to ({', '.join(a.str_short() for a in carry_out)}); its type must not change")
    ys = [a.update(shape=(length,) + a.shape) for a in jaxpr.out_avals[num_carry:]]
    return list(carry) + ys


def _scan_jvp(primals, tangents, *, jaxpr, num_consts, num_carry, length, reverse, linear, unroll):
    consts, carry, xs = split_list(primals, [num_consts, num_carry])
    const_t, carry_t, xs_t = split_list(tangents, [num_consts, num_carry])
    const_nz = [is_nonzero_tangent(t, get_aval(x)) for t, x in zip(const_t, consts)]
    xs_nz = [is_nonzero_tangent(t, get_aval(x)) for t, x in zip(xs_t, xs)]
    carry_nz = [is_nonzero_tangent(t, get_aval(x)) for t, x in zip(carry_t, carry)]
    carry_avals = [get_aval(x) for x in carry]
    num_ys = len(jaxpr.out_avals) - num_carry
    while True:
        _, out_nz = ad.jvp_jaxpr(jaxpr, const_nz + carry_nz + xs_nz,
                                 instantiate=carry_nz + [False] * num_ys)
        new_nz = [(a or b) and _dtypes.is_inexact(av.dtype)
                  for a, b, av in zip(carry_nz, out_nz[:num_carry], carry_avals)]
        if new_nz == carry_nz:
            break
        carry_nz = new_nz
    jvp_body, out_nz = ad.jvp_jaxpr(jaxpr, const_nz + carry_nz + xs_nz,
                                    instantiate=carry_nz + [False] * num_ys)
    ys_nz = out_nz[num_carry:]
    nc, ncar, nx = num_consts, num_carry, len(xs)
    nct, ncart, nxt = sum(const_nz), sum(carry_nz), sum(xs_nz)
    n = nc + ncar + nx
    # jvp_jaxpr orders (primals..., tangents...); scan wants consts, carry and xs each
    # followed by their tangents.
    in_order = (list(range(nc)) + list(range(n, n + nct)) +
                list(range(nc, nc + ncar)) + list(range(n + nct, n + nct + ncart)) +
                list(range(nc + ncar, n)) + list(range(n + nct + ncart, n + nct + ncart + nxt)))
    ny, nyt = num_ys, sum(ys_nz)
    m = ncar + ny
    out_order = (list(range(ncar)) + list(range(m, m + ncart)) +
                 list(range(ncar, m)) + list(range(m + ncart, m + ncart + nyt)))
    jvp_body = reorder(jvp_body, in_order, out_order)
    const_tangents = [t for t, nz in zip(const_t, const_nz) if nz]
    carry_tangents = [instantiate(t, ad.tangent_aval(a))
                      for t, a, nz in zip(carry_t, carry_avals, carry_nz) if nz]
    xs_tangents = [t for t, nz in zip(xs_t, xs_nz) if nz]
    new_linear = ((False,) * nc + (True,) * nct + (False,) * ncar + (True,) * ncart +
                  (False,) * nx + (True,) * nxt)
    outs = scan_p.bind(*consts, *const_tangents, *carry, *carry_tangents, *xs, *xs_tangents,
                       jaxpr=jvp_body, num_consts=nc + nct, num_carry=ncar + ncart,
                       length=length, reverse=reverse, linear=new_linear, unroll=unroll)
    carry_out, carry_t_out, ys_out, ys_t_out = split_list(outs, [ncar, ncart, ny])
    y_avals = [a.update(shape=(length,) + a.shape) for a in jaxpr.out_avals[num_carry:]]
    carry_t_out = merge_lists(carry_nz, carry_t_out,
                         [ad.Zero(ad.tangent_aval(a)) for a, nz in zip(carry_avals, carry_nz) if not nz])
    ys_t_out = merge_lists(ys_nz, ys_t_out,
                      [ad.Zero(ad.tangent_aval(a)) for a, nz in zip(y_avals, ys_nz) if not nz])
    return carry_out + ys_out, carry_t_out + ys_t_out


def _scan_partial_eval(trace, tracers, *, jaxpr, num_consts, num_carry, length, reverse, linear,
                       unroll):
    """Split a scan into a known scan (run now, or staged by an enclosing jit) that also
    returns the per-iteration residuals stacked along the scanned axis, and an unknown scan
    over those residuals (under ``linearize``: the linear tangent scan that reverse mode
    transposes). Residuals that are loop invariant (a known constant operand, a literal) or
    that are slices of a known scanned operand are passed as they are instead of stacked."""
    const_tr, carry_tr, xs_tr = split_list(tracers, [num_consts, num_carry])
    const_uk = [not t.pval.is_known() for t in const_tr]
    xs_uk = [not t.pval.is_known() for t in xs_tr]
    carry_uk = [not t.pval.is_known() for t in carry_tr]
    num_ys = len(jaxpr.out_avals) - num_carry
    while True:
        _, _, out_uk, _ = pe.partial_eval_jaxpr(jaxpr, const_uk + carry_uk + xs_uk,
                                                instantiate=carry_uk + [False] * num_ys)
        new_uk = [a or b for a, b in zip(carry_uk, out_uk[:num_carry])]
        if new_uk == carry_uk:
            break
        carry_uk = new_uk
    known, unknown, out_uk, num_res = pe.partial_eval_jaxpr(
        jaxpr, const_uk + carry_uk + xs_uk, instantiate=carry_uk + [False] * num_ys)
    ys_uk = out_uk[num_carry:]
    num_known_out = len(known.out_avals) - num_res
    known_const_tr = [t for t, uk in zip(const_tr, const_uk) if not uk]
    known_carry_tr = [t for t, uk in zip(carry_tr, carry_uk) if not uk]
    known_xs_tr = [t for t, uk in zip(xs_tr, xs_uk) if not uk]
    nkc, nkcar = len(known_const_tr), len(known_carry_tr)

    # Classify each residual: ("const", i) a known const operand, ("xs", i) a slice of a
    # known scanned operand, ("value", v) a constant, ("stacked", None) per iteration.
    position = {id(v): i for i, v in enumerate(known.jaxpr.invars)}
    const_value = {id(v): c for v, c in zip(known.jaxpr.constvars, known.consts)}
    kinds = []
    for v in known.jaxpr.outvars[num_known_out:]:
        if isinstance(v, Literal):
            kinds.append(("value", v.val))
        elif id(v) in const_value:
            kinds.append(("value", const_value[id(v)]))
        elif id(v) in position and position[id(v)] < nkc:
            kinds.append(("const", position[id(v)]))
        elif id(v) in position and position[id(v)] >= nkc + nkcar:
            kinds.append(("xs", position[id(v)] - nkc - nkcar))
        else:
            kinds.append(("stacked", None))
    res_avals = known.out_avals[num_known_out:]

    def known_body(*args):
        outs = eval_closed(known, *args)
        res = outs[num_known_out:]
        return outs[:num_known_out] + [r for r, (kind, _) in zip(res, kinds) if kind == "stacked"]

    known_jaxpr = stage_wrapper(known_body, known.in_avals)
    known_vals = [t.pval.get_known() for t in known_const_tr + known_carry_tr + known_xs_tr]
    known_outs = scan_p.bind(*known_vals, jaxpr=known_jaxpr, num_consts=nkc, num_carry=nkcar,
                             length=length, reverse=reverse,
                             linear=(False,) * len(known_vals), unroll=unroll)
    known_out_vals, stacked = known_outs[:num_known_out], known_outs[num_known_out:]

    # The unknown scan: consts = invariant residuals + unknown consts; carry = unknown carry;
    # xs = scanned-operand residuals + stacked residuals + unknown xs.
    const_res, xs_res, stacked_res = [], [], []
    for r, ((kind, arg), aval) in enumerate(zip(kinds, res_avals)):
        if kind == "const":
            const_res.append((r, trace.instantiate_const(known_const_tr[arg]), aval))
        elif kind == "value":
            const_res.append((r, trace.instantiate_const(trace.pure(arg)), aval))
        elif kind == "xs":
            xs_res.append((r, trace.instantiate_const(known_xs_tr[arg]), aval))
    stacked_iter = iter(stacked)
    for r, (kind, _) in enumerate(kinds):
        if kind == "stacked":
            stacked_res.append((r, trace.instantiate_const(trace.pure(next(stacked_iter))),
                                res_avals[r]))
    uk_consts = [t for t, uk in zip(const_tr, const_uk) if uk]
    uk_carry = [trace.instantiate_const(t) for t, uk in zip(carry_tr, carry_uk) if uk]
    uk_xs = [t for t, uk in zip(xs_tr, xs_uk) if uk]
    num_uk_consts = len(const_res) + len(uk_consts)
    res_order = [r for r, _, _ in const_res] + [r for r, _, _ in xs_res + stacked_res]

    def unknown_body(*args):
        c_res, uk_c, uk_carry_in, x_res, uk_x = split_list(
            args, [len(const_res), len(uk_consts), len(uk_carry), len(xs_res) + len(stacked_res)])
        res = [None] * num_res
        for r, val in zip(res_order, c_res + x_res):
            res[r] = val
        return eval_closed(unknown, *res, *uk_c, *uk_carry_in, *uk_x)

    body_in_avals = ([a for _, _, a in const_res] + [t.aval for t in uk_consts] +
                     [t.aval for t in uk_carry] + [a for _, _, a in xs_res + stacked_res] +
                     [jaxpr.in_avals[num_consts + num_carry + i] for i, uk in enumerate(xs_uk) if uk])
    unknown_jaxpr = stage_wrapper(unknown_body, body_in_avals)
    operands = ([t for _, t, _ in const_res] + uk_consts + uk_carry +
                [t for _, t, _ in xs_res + stacked_res] + uk_xs)
    new_linear = ((False,) * len(const_res) + (True,) * len(uk_consts) + (True,) * len(uk_carry) +
                  (False,) * (len(xs_res) + len(stacked_res)) + (True,) * len(uk_xs))
    unknown_outs = trace.default_process_primitive(
        scan_p, operands,
        dict(jaxpr=unknown_jaxpr, num_consts=num_uk_consts, num_carry=len(uk_carry),
             length=length, reverse=reverse, linear=new_linear, unroll=unroll))
    return merge_lists(carry_uk + ys_uk, unknown_outs, known_out_vals)


def _scan_transpose(cts, *args, jaxpr, num_consts, num_carry, length, reverse, linear, unroll):
    """Reverse-mode scan: a scan in the opposite direction over the transposed body. The
    cotangents of the linear constant operands are summed over iterations in the carry."""
    consts, init, xs = split_list(args, [num_consts, num_carry])
    const_lin = [ad.is_undefined_primal(c) for c in consts]
    xs_lin = [ad.is_undefined_primal(x) for x in xs]
    res_consts = [c for c in consts if not ad.is_undefined_primal(c)]
    res_xs = [x for x in xs if not ad.is_undefined_primal(x)]
    ct_carry, ct_ys = cts[:num_carry], cts[num_carry:]
    carry_avals = jaxpr.in_avals[num_consts:num_consts + num_carry]
    x_avals = jaxpr.in_avals[num_consts + num_carry:]
    y_avals = jaxpr.out_avals[num_carry:]
    const_avals = jaxpr.in_avals[:num_consts]
    lin_const_avals = [a for a, lin in zip(const_avals, const_lin) if lin]
    lin_x_avals = [a for a, lin in zip(x_avals, xs_lin) if lin]
    ys_nz = [not isinstance(ct, ad.Zero) for ct in ct_ys]
    ct_carry = [instantiate(ct, ad.tangent_aval(a)) for ct, a in zip(ct_carry, carry_avals)]
    ct_consts_init = [zeros(ad.tangent_aval(a)) for a in lin_const_avals]
    nrc, nlc, nrx = len(res_consts), len(lin_const_avals), len(res_xs)

    def transposed_body(*args):
        r_consts, ct_acc, ct_c, r_xs, ct_y = split_list(args, [nrc, nlc, num_carry, nrx])
        primals = (merge_lists(const_lin, [ad.UndefinedPrimal(a) for a in lin_const_avals], r_consts) +
                   [ad.UndefinedPrimal(a) for a in carry_avals] +
                   merge_lists(xs_lin, [ad.UndefinedPrimal(a) for a in lin_x_avals], r_xs))
        cts_out = list(ct_c) + merge_lists(ys_nz, ct_y, [ad.Zero(ad.tangent_aval(a))
                                                    for a, nz in zip(y_avals, ys_nz) if not nz])
        cts_in = ad.backward_pass(jaxpr.jaxpr, jaxpr.consts, primals, cts_out)
        ct_consts, ct_init, ct_xs = split_list(cts_in, [num_consts, num_carry])
        ct_consts = [c for c, lin in zip(ct_consts, const_lin) if lin]
        new_acc = [acc if isinstance(c, ad.Zero) else ad.add_tangents(acc, c)
                   for acc, c in zip(ct_acc, ct_consts)]
        return (new_acc + [instantiate(c, ad.tangent_aval(a)) for c, a in zip(ct_init, carry_avals)] +
                [instantiate(c, ad.tangent_aval(a)) for c, lin, a in zip(ct_xs, xs_lin, x_avals) if lin])

    in_avals = ([get_aval(c) for c in res_consts] + [ad.tangent_aval(a) for a in lin_const_avals] +
                [ad.tangent_aval(a) for a in carry_avals] + list(_slice_avals(res_xs)) +
                [ad.tangent_aval(a) for a, nz in zip(y_avals, ys_nz) if nz])
    t_jaxpr = stage_wrapper(transposed_body, in_avals)
    ct_ys_nz = [ct for ct in ct_ys if not isinstance(ct, ad.Zero)]
    new_linear = ((False,) * nrc + (True,) * (nlc + num_carry) + (False,) * nrx +
                  (True,) * len(ct_ys_nz))
    outs = scan_p.bind(*res_consts, *ct_consts_init, *ct_carry, *res_xs, *ct_ys_nz,
                       jaxpr=t_jaxpr, num_consts=nrc, num_carry=nlc + num_carry, length=length,
                       reverse=not reverse, linear=new_linear, unroll=unroll)
    ct_consts, ct_init, ct_xs = split_list(outs, [nlc, num_carry])
    ct_consts_it, ct_xs_it = iter(ct_consts), iter(ct_xs)
    result = [next(ct_consts_it) if lin else None for lin in const_lin]
    result += [ct if ad.is_undefined_primal(a) else None for ct, a in zip(ct_init, init)]
    result += [next(ct_xs_it) if lin else None for lin in xs_lin]
    return result


def _slice_avals(stacked):
    """Per-iteration slice types of stacked operands."""
    for x in stacked:
        a = get_aval(x)
        yield a.update(shape=a.shape[1:])


def _scan_batch(vals, dims, *, jaxpr, num_consts, num_carry, length, reverse, linear, unroll,
                axis_data=None):
    size = batching.batch_size_of(vals, dims)
    consts, init, xs = split_list(vals, [num_consts, num_carry])
    const_dims, init_dims, xs_dims = split_list(dims, [num_consts, num_carry])
    # batch dims: consts and carry at axis 0; scanned operands at axis 1 (axis 0 is scanned)
    consts = [batching.moveaxis(c, d, 0) if d is not None else c for c, d in zip(consts, const_dims)]
    xs = [batching.moveaxis(x, d, 1) if d is not None else x for x, d in zip(xs, xs_dims)]
    const_b = [d is not None for d in const_dims]
    xs_b = [d is not None for d in xs_dims]
    carry_b = [d is not None for d in init_dims]
    num_ys = len(jaxpr.out_avals) - num_carry

    def as_dims(flags):
        return [0 if b else None for b in flags]

    # A carry is batched if it starts batched or becomes batched after some iterations.
    while True:
        _, out_dims = batch_body(axis_data, jaxpr, size, as_dims(const_b + carry_b + xs_b),
                                           carry_b + [False] * num_ys)
        new_b = [a or d is not None for a, d in zip(carry_b, out_dims[:num_carry])]
        if new_b == carry_b:
            break
        carry_b = new_b
    batched, out_dims = batch_body(axis_data, jaxpr, size, as_dims(const_b + carry_b + xs_b),
                                             carry_b + [False] * num_ys)
    init = [batching.bdim_at_front(x, d, size) if b else x
            for x, d, b in zip(init, init_dims, carry_b)]
    outs = scan_p.bind(*consts, *init, *xs, jaxpr=batched, num_consts=num_consts,
                       num_carry=num_carry, length=length, reverse=reverse, linear=linear,
                       unroll=unroll)
    ys_dims = [1 if d is not None else None for d in out_dims[num_carry:]]
    return outs, as_dims(carry_b) + ys_dims


def _scan_dce(eqn, used_outputs):
    """Drop unused stacked results and the carries that feed no used result (to a fixed
    point: a carry read by the update of a used carry stays), the body equations computing
    only them, and the constants and scanned operands the body no longer reads."""
    p = eqn.params
    jaxpr, num_consts, num_carry = p["jaxpr"], p["num_consts"], p["num_carry"]
    num_xs = len(eqn.invars) - num_consts - num_carry
    used_carry, used_ys = list(used_outputs[:num_carry]), list(used_outputs[num_carry:])
    while True:
        _, read = pe.dce_jaxpr(jaxpr.jaxpr, used_carry + used_ys)
        new_used = [a or b for a, b in zip(used_carry, read[num_consts:num_consts + num_carry])]
        if new_used == used_carry:
            break
        used_carry = new_used
    body, kept = prune(jaxpr, used_carry + used_ys,
                        [False] * num_consts + used_carry + [False] * num_xs)
    keep_consts, _, keep_xs = split_list(kept, [num_consts, num_carry])
    return eqn.replace(
        invars=[v for v, k in zip(eqn.invars, kept) if k],
        outvars=[v for v, u in zip(eqn.outvars, used_carry + used_ys) if u],
        params=dict(p, jaxpr=body, num_consts=sum(keep_consts), num_carry=sum(used_carry),
                    linear=tuple(lin for lin, k in zip(p["linear"], kept) if k)))


scan_p.jvp = _scan_jvp
scan_p.partial_eval = _scan_partial_eval
scan_p.dce = _scan_dce
scan_p.transpose = _scan_transpose
scan_p.batch = _scan_batch
scan_p.batch_needs_axis = True


def scan(f: Callable, init, xs=None, length: int | None = None, reverse: bool = False,
         unroll: int | bool = 1, _split_transpose: bool = False):
    """Loop ``f(carry, x) -> (carry, y)`` over the leading axis of ``xs``, returning the
    final carry and the ``y`` values stacked. Semantically::

        def scan(f, init, xs, length=None):
            carry, ys = init, []
            for x in (xs if xs is not None else [None] * length):
                carry, y = f(carry, x)
                ys.append(y)
            return carry, np.stack(ys)

    ``init``, ``xs`` and ``y`` may be pytrees; ``xs=None`` scans ``length`` times with ``x``
    None. ``reverse=True`` runs from the last element to the first (ys stay in place). The
    body is staged once; ``unroll`` is a hint for compiled backends and never changes results.

        >>> import functrans.numpy as jnp
        >>> from functrans import lax
        >>> lax.scan(lambda c, x: (c + x, c * x), 0.0, jnp.arange(4.0))
        (Array(6., dtype=float32), Array([0., 0., 2., 9.], dtype=float32))
    """
    if not callable(f):
        raise TypeError("scan: f must be callable")
    xs_leaves, xs_tree = tree_util.tree_flatten(xs)
    xs_avals = [get_aval(x) for x in xs_leaves]
    for a in xs_avals:
        if a.ndim == 0:
            raise ValueError(f"scan: every leaf of xs must have a leading axis to scan over, "
                             f"got a scalar {a.str_short()}")
    lengths = sorted({a.shape[0] for a in xs_avals})
    if len(lengths) > 1:
        raise ValueError(f"scan: all leaves of xs must have the same leading axis length, "
                         f"got lengths {lengths}")
    if length is not None:
        length = int(length)
        if lengths and lengths[0] != length:
            raise ValueError(f"scan: length={length} does not match the leading axis "
                             f"{lengths[0]} of xs")
    elif lengths:
        length = lengths[0]
    else:
        raise ValueError("scan: with no xs to scan over, give length")
    if isinstance(unroll, bool):
        unroll = length if unroll else 1
    unroll = max(int(unroll), 1)
    init_leaves, init_tree = tree_util.tree_flatten(init)
    x_avals = [a.update(shape=a.shape[1:]) for a in xs_avals]
    trees = {}

    def body_fun(carry, x):
        out = f(carry, x)
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise TypeError("scan: f must return a pair (carry, y), got "
                            f"{type(out).__name__}")
        carry_out, y = out
        trees["carry"] = tree_util.tree_structure(carry_out)
        trees["y"] = tree_util.tree_structure(y)
        return tuple(out)

    def stage(carry_avals):
        in_tree = tree_util.tree_structure((init, xs))
        closed, consts, _ = stage_user_fun(body_fun, in_tree, carry_avals + x_avals, "scan f")
        return closed, consts

    carry_avals = [get_aval(x) for x in init_leaves]
    closed, consts = stage(carry_avals)
    num_carry_out = trees["carry"].num_leaves
    promoted = check_carry("scan f", init_tree, carry_avals, trees["carry"],
                            closed.out_avals[:num_carry_out])
    if promoted is not None:
        init_leaves = cast_leaves(init_leaves, promoted)
        carry_avals = [get_aval(x) for x in init_leaves]
        closed, consts = stage(carry_avals)
        check_carry("scan f", init_tree, carry_avals, trees["carry"],
                     closed.out_avals[:trees["carry"].num_leaves])
    operands = list(consts) + list(init_leaves) + list(xs_leaves)
    outs = scan_p.bind(*operands, jaxpr=closed, num_consts=len(consts),
                       num_carry=len(init_leaves), length=length, reverse=bool(reverse),
                       linear=(False,) * len(operands), unroll=unroll)
    carry_out, ys = outs[:len(init_leaves)], outs[len(init_leaves):]
    return (tree_util.tree_unflatten(init_tree, carry_out),
            tree_util.tree_unflatten(trees["y"], ys))




# =============================================================================================
# map: a scan over the leading axis
# =============================================================================================


def map(f: Callable, xs, *, batch_size: int | None = None):  # noqa: A001 - jax.lax.map's name
    """``f`` applied to each slice of ``xs`` along its leading axis, results stacked — as a
    ``scan``, so one example is processed at a time (low memory, one staged body). With
    ``batch_size``, ``batch_size`` examples are processed at once with ``vmap``.

        >>> import functrans.numpy as jnp
        >>> from functrans import lax
        >>> lax.map(lambda x: x * 2, jnp.arange(3.0))
        Array([0., 2., 4.], dtype=float32)
    """
    if batch_size is None:
        _, ys = scan(lambda _, x: ((), f(x)), (), xs)
        return ys
    batch_size = int(batch_size)
    if batch_size < 1:
        raise ValueError(f"map: batch_size must be positive, got {batch_size}")
    leaves, tree = tree_util.tree_flatten(xs)
    if not leaves:
        raise ValueError("map: xs has no arrays to map over")
    n = get_aval(leaves[0]).shape[0]
    num_batches, remainder = divmod(n, batch_size)
    batched_f = batching.vmap_leading_axis(f)
    outs = []
    if num_batches:
        main = [x if not remainder else _slice_leading(x, 0, num_batches * batch_size)
                for x in leaves]
        chunks = [structural.reshape(x, (num_batches, batch_size) + get_aval(x).shape[1:])
                  for x in main]
        _, ys = scan(lambda _, c: ((), batched_f(tree_util.tree_unflatten(tree, c))), (), chunks)
        ys_leaves, y_tree = tree_util.tree_flatten(ys)
        outs.append(([structural.reshape(y, (num_batches * batch_size,) + get_aval(y).shape[2:])
                      for y in ys_leaves], y_tree))
    if remainder:
        rest = [_slice_leading(x, num_batches * batch_size, n) for x in leaves]
        ys_leaves, y_tree = tree_util.tree_flatten(batched_f(tree_util.tree_unflatten(tree, rest)))
        outs.append((ys_leaves, y_tree))
    if len(outs) == 1:
        return tree_util.tree_unflatten(outs[0][1], outs[0][0])
    (main_leaves, y_tree), (rest_leaves, _) = outs
    return tree_util.tree_unflatten(
        y_tree, [structural.concatenate([a, b], 0) for a, b in zip(main_leaves, rest_leaves)])


def _slice_leading(x, start: int, stop: int):
    return structural.slice_in_dim(x, start, stop, axis=0)


__all__ = ["map", "scan"]
