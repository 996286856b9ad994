"""``while_loop`` and ``fori_loop``: the ``while`` primitive's operands are
``(*cond_consts, *body_consts, *carry)``; ``cond_jaxpr`` maps the carry to a bool[] and
``body_jaxpr`` the carry to the next carry. Its reference implementation, shape rule, JVP,
partial evaluation, transpose, batching rule (a batched predicate becomes a masked loop)
and dead-code elimination sit beside it.

Reverse mode through ``while_loop`` (which JAX refuses) works: when the trip count (or,
under ``vmap``, a bound on it) is known while differentiating, the loop is re-expressed as
a ``scan`` of that many steps, which stores per-iteration residuals; when it is staged
(under ``jit``), nothing per iteration is stored and the backward loop recomputes each
step's primal carry from the initial one (O(n²) body evaluations, O(1) memory); see
:func:`_while_partial_eval` and :func:`_while_transpose`. ``fori_loop`` is a ``scan`` when
its bounds are static and a ``while_loop`` otherwise.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from functrans import _dtypes, core, tree_util
from functrans.core import Primitive, ShapedArray, Tracer, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters import partial_eval as pe
from functrans.primitives import elementwise as ew
from functrans.primitives import reductions, structural
from functrans.primitives.scan import _scan_partial_eval, scan
from functrans.primitives.loop_bodies import (batch_body, cast_leaves, check_carry,
                                              eval_closed, eval_closed_numpy, instantiate,
                                              is_nonzero_tangent, merge_lists, prune, reorder,
                                              same_type, split_list, stage_user_fun,
                                              stage_wrapper, types_str, with_unused_inputs,
                                              zeros)


# =============================================================================================
# while_loop
# =============================================================================================

while_p = Primitive("while", multiple_results=True)


@while_p.def_impl
def _while_impl(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cond_consts, body_consts, carry = split_list(args, [cond_nconsts, body_nconsts])
    while bool(np.asarray(eval_closed_numpy(cond_jaxpr, cond_consts + carry)[0])):
        carry = eval_closed_numpy(body_jaxpr, body_consts + carry)
    return carry


@while_p.def_abstract_eval
def _while_abstract_eval(*avals, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    _, _, carry = split_list(avals, [cond_nconsts, body_nconsts])
    body_out = body_jaxpr.out_avals
    if len(body_out) != len(carry) or not all(same_type(a, b) for a, b in zip(carry, body_out)):
        raise TypeError(f"while: the body maps ({', '.join(a.str_short() for a in carry)}) to "
                        f"({', '.join(a.str_short() for a in body_out)}); the carry type must not change")
    pred = cond_jaxpr.out_avals
    if len(pred) != 1 or pred[0].shape != () or pred[0].dtype != _dtypes.bool_:
        raise TypeError(f"while: the condition must return a boolean scalar, got "
                        f"({', '.join(a.str_short() for a in pred)})")
    return list(carry)


def _while_jvp(primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cond_consts, body_consts, carry = split_list(primals, [cond_nconsts, body_nconsts])
    _, body_const_t, carry_t = split_list(tangents, [cond_nconsts, body_nconsts])
    bconst_nz = [is_nonzero_tangent(t, get_aval(x)) for t, x in zip(body_const_t, body_consts)]
    carry_nz = [is_nonzero_tangent(t, get_aval(x)) for t, x in zip(carry_t, carry)]
    carry_avals = [get_aval(x) for x in carry]
    # A carry's tangent is nonzero if it is nonzero on entry or becomes so after any number
    # of iterations: iterate the body's tangent dependence to a fixed point.
    while True:
        _, out_nz = ad.jvp_jaxpr(body_jaxpr, bconst_nz + carry_nz, instantiate=carry_nz)
        new_nz = [(a or b) and _dtypes.is_inexact(av.dtype)
                  for a, b, av in zip(carry_nz, out_nz, carry_avals)]
        if new_nz == carry_nz:
            break
        carry_nz = new_nz
    body_jvp, _ = ad.jvp_jaxpr(body_jaxpr, bconst_nz + carry_nz, instantiate=carry_nz)
    nb, nc, nbt = len(body_consts), len(carry), sum(bconst_nz)
    nct = sum(carry_nz)
    # jvp_jaxpr orders inputs (consts, carry, const tangents, carry tangents); the while
    # primitive wants all body consts first, then the carry.
    order = list(range(nb)) + list(range(nb + nc, nb + nc + nbt)) + \
        list(range(nb, nb + nc)) + list(range(nb + nc + nbt, nb + nc + nbt + nct))
    body_jvp = reorder(body_jvp, in_order=order)
    tangent_avals = [ad.tangent_aval(a) for a, nz in zip(carry_avals, carry_nz) if nz]
    cond_aug = with_unused_inputs(cond_jaxpr, tangent_avals, len(cond_jaxpr.in_avals))
    bconst_tangents = [t for t, nz in zip(body_const_t, bconst_nz) if nz]
    carry_tangents = [ad.instantiate_zeros(t) if not isinstance(t, ad.Zero) else zeros(ad.tangent_aval(a))
                      for t, a, nz in zip(carry_t, carry_avals, carry_nz) if nz]
    outs = while_p.bind(*cond_consts, *body_consts, *bconst_tangents, *carry, *carry_tangents,
                        cond_jaxpr=cond_aug, body_jaxpr=body_jvp, cond_nconsts=cond_nconsts,
                        body_nconsts=nb + nbt)
    primals_out, tangents_out = outs[:nc], outs[nc:]
    tangents_out = merge_lists(carry_nz, tangents_out,
                          [ad.Zero(ad.tangent_aval(a)) for a, nz in zip(carry_avals, carry_nz) if not nz])
    return primals_out, tangents_out


def _while_partial_eval(trace, tracers, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    """Split a while loop whose carry is partly unknown (under ``linearize``: primal carries
    known, tangent carries unknown), so that reverse mode works — which JAX refuses, the trip
    count being data dependent.

    The known part of the loop runs first, counting its iterations. Then:

    * the count is a number (the primal is being evaluated, e.g. ``grad(f)(x)``): the loop
      is exactly a ``scan`` of that many steps, and the scan rule splits it into a known
      scan stacking the per-iteration residuals and a linear scan that transposes;
    * only an upper bound is known (under ``vmap`` each example has its own count, and the
      batch's largest is known): a scan of that many steps whose step ``i`` updates the
      carry only while ``i < count`` (the masking is a select, so it differentiates);
    * the count is staged (the primal runs under ``jit``): residual storage of unknown size
      cannot be allocated, so nothing per iteration is stored. The unknown side is a loop
      that runs exactly ``count`` times from the initial carry, recomputing the known carry
      as it goes (:func:`_counted_loop`); its residuals are the initial known carry, the
      constants and the count. It evaluates forward as it is (``jvp``, ``linearize``), and
      :func:`_while_transpose` runs it backwards by recomputation.
    """
    params = dict(cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr, cond_nconsts=cond_nconsts,
                  body_nconsts=body_nconsts)
    cc_tracers, bc_tracers, carry_tracers = split_list(tracers, [cond_nconsts, body_nconsts])
    cc_uk = [not t.pval.is_known() for t in cc_tracers]
    bc_uk = [not t.pval.is_known() for t in bc_tracers]
    carry_uk = [not t.pval.is_known() for t in carry_tracers]
    while True:
        _, _, out_uk, _ = pe.partial_eval_jaxpr(body_jaxpr, bc_uk + carry_uk, instantiate=carry_uk)
        new_uk = [a or b for a, b in zip(carry_uk, out_uk)]
        if new_uk == carry_uk:
            break
        carry_uk = new_uk
    _, cond_used = pe.dce_jaxpr(cond_jaxpr.jaxpr, [True])
    cond_reads_unknown = any(u and uk for u, uk in zip(cond_used, cc_uk + carry_uk))
    if all(carry_uk) or cond_reads_unknown:
        return trace.default_process_primitive(while_p, tracers, params)

    known_body, _, _, _ = pe.partial_eval_jaxpr(body_jaxpr, bc_uk + carry_uk, instantiate=carry_uk)
    carry_avals = [t.aval for t in carry_tracers]
    count, known_results = _count_trips(
        [t.pval.get_known() for t in cc_tracers],
        [t.pval.get_known() for t, uk in zip(bc_tracers, bc_uk) if not uk],
        [t.pval.get_known() for t, uk in zip(carry_tracers, carry_uk) if not uk],
        cond_jaxpr=cond_jaxpr, known_body=known_body, carry_avals=carry_avals,
        carry_known=[not uk for uk in carry_uk], keep_carry=True)
    exact = _concrete_value(count)
    num_carry = len(carry_tracers)
    if exact is not None:
        # The trip count is a number: the loop is exactly a scan of that many steps.
        scan_params = dict(jaxpr=body_jaxpr, num_consts=body_nconsts, num_carry=num_carry,
                           length=int(exact), reverse=False,
                           linear=(False,) * (body_nconsts + num_carry), unroll=1)
        return _scan_partial_eval(trace, bc_tracers + carry_tracers, **scan_params)
    bound = _known_upper_bound(count)
    if bound is not None:
        # Only an upper bound is known (under vmap each example has its own trip count):
        # scan that many steps; step i updates the carry only while i < count.
        masked = _masked_body(body_jaxpr, body_nconsts, carry_avals)
        bound = int(bound)
        scan_params = dict(jaxpr=masked, num_consts=body_nconsts + 1, num_carry=num_carry + 1,
                           length=bound, reverse=False,
                           linear=(False,) * (body_nconsts + num_carry + 2), unroll=1)
        outs = _scan_partial_eval(trace, bc_tracers + [trace.pure(count), trace.pure(np.int32(0))]
                                  + carry_tracers, **scan_params)
        return outs[1:]
    # The trip count is staged: keep the known results of the counting loop above, and stage
    # for the unknown carries a loop of exactly `count` steps over the whole carry.
    counted_cond, counted_body = _counted_loop(body_jaxpr, body_nconsts, carry_avals)
    operands = ([trace.instantiate_const(trace.pure(count))] +
                [trace.instantiate_const(t) for t in bc_tracers] +
                [trace.instantiate_const(trace.pure(np.int32(0)))] +
                [trace.instantiate_const(t) for t in carry_tracers])
    outs = trace.default_process_primitive(
        while_p, operands, dict(cond_jaxpr=counted_cond, body_jaxpr=counted_body,
                                cond_nconsts=1, body_nconsts=body_nconsts))
    return merge_lists(carry_uk, [o for o, uk in zip(outs[1:], carry_uk) if uk], known_results)


_COUNTER = ShapedArray((), np.int32)


def _counted_loop(body_jaxpr, body_nconsts, carry_avals):
    """Condition and body of ``for i in range(n): carry = body(carry)`` as a while loop:
    ``cond(n, i, *carry) = i < n``, ``body(*consts, i, *carry) = (i + 1, *body(consts, carry))``."""
    consts_avals = list(body_jaxpr.in_avals[:body_nconsts])

    def cond(n, i, *carry):
        return [ew.lt(i, n)]

    def body(*args):
        consts, (i,), carry = split_list(args, [body_nconsts, 1])
        return [ew.add(i, np.int32(1))] + eval_closed(body_jaxpr, *consts, *carry)

    return (stage_wrapper(cond, [_COUNTER, _COUNTER] + list(carry_avals)),
            stage_wrapper(body, consts_avals + [_COUNTER] + list(carry_avals)))


def _count_trips(cond_consts, known_consts, known_carry, *, cond_jaxpr, known_body, carry_avals,
                 carry_known, keep_carry: bool):
    """Run the part of a while loop that reads only known values, counting its iterations.

    ``known_body`` maps ``(known_consts, known_carry)`` to the next known carry (followed by
    any other outputs, ignored); the condition must read only known carries. Returns the
    trip count (int32) and the final known carry — when ``keep_carry``, else only the count
    is computed, with the carries the condition does not need pruned away."""
    num_known = len(known_carry)
    kc_avals = [a for a, k in zip(carry_avals, carry_known) if k]
    cc_avals = [get_aval(x) for x in cond_consts]
    kbc_avals = [get_aval(x) for x in known_consts]

    def count_body(*args):
        consts, (i,), carry = split_list(args, [len(kbc_avals), 1])
        outs = eval_closed(known_body, *consts, *carry)
        return [ew.add(i, np.int32(1))] + outs[:num_known]

    def count_cond(*args):
        consts, (_,), carry = split_list(args, [len(cc_avals), 1])
        # the condition reads only known carries; the unknown slots get placeholders
        full = merge_lists(carry_known, carry, [zeros(a) for a, k in zip(carry_avals, carry_known) if not k])
        return eval_closed(cond_jaxpr, *consts, *full)

    body = stage_wrapper(count_body, kbc_avals + [_COUNTER] + kc_avals)
    cond = stage_wrapper(count_cond, cc_avals + [_COUNTER] + kc_avals)
    outs = _bind_while_pruned(list(cond_consts), list(known_consts),
                              [np.int32(0)] + list(known_carry), cond, body,
                              [True] + [keep_carry] * num_known)
    return outs[0], outs[1:]


def _concrete_value(x):
    """The NumPy value of ``x`` if it is known now (not staged or batched), else None."""
    if isinstance(x, Tracer):
        x = x.to_concrete_value()
        if x is None or isinstance(x, Tracer):
            return None
    return np.asarray(core.to_numpy(x))


def _known_upper_bound(x):
    """An upper bound of the integer ``x`` known now: its value, or for a batched value the
    largest over the batch."""
    value = _concrete_value(x)
    if value is not None:
        return int(np.max(value))
    if isinstance(x, batching.BatchTracer):
        return _known_upper_bound(x.val)
    return None


def _masked_body(body_jaxpr, body_nconsts, carry_avals):
    """``(consts, count, i, carry) -> (i + 1, carry')`` with ``carry' = body(carry)`` while
    ``i < count`` and ``carry`` unchanged afterwards."""
    consts_avals = body_jaxpr.in_avals[:body_nconsts]
    counter = ShapedArray((), np.int32)

    def fun(*args):
        consts, (count, i), carry = split_list(args, [body_nconsts, 2])
        new = eval_closed(body_jaxpr, *consts, *carry)
        active = ew.lt(i, count)
        return [ew.add(i, np.int32(1))] + [ew.select_n(active, old, n) for old, n in zip(carry, new)]

    return stage_wrapper(fun, list(consts_avals) + [counter, counter] + list(carry_avals))


def _while_transpose(cts, *args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    """Reverse mode through a while loop linear in some of its body constants and carries
    (the loop :func:`_while_partial_eval` stages when the trip count is not known while
    differentiating). The loop's other values (the primal carry) are known, so its trip
    count ``n`` is found by running their part of the loop again (for the counted loop of
    the partial-evaluation rule, that is only its counter). Then for ``j = n-1`` down to
    ``0`` the cotangent goes back through step ``j``: the known carry before step ``j`` is
    recomputed from the initial one by an inner loop of ``j`` steps, the step's residuals
    come from it, and the linear part of the step is transposed. That costs O(n²) body
    evaluations and O(1) memory, for any trip count, staged or not.
    """
    cc, bc, carry = split_list(args, [cond_nconsts, body_nconsts])
    bc_lin = [ad.is_undefined_primal(x) for x in bc]
    carry_undefined = [ad.is_undefined_primal(x) for x in carry]
    # A carry that starts as a given value (an instantiated zero tangent) but is updated
    # from linear values is linear too; its given start only offsets the affine map.
    carry_lin = carry_undefined
    while True:
        known_body, lin_body, out_uk, num_res = pe.partial_eval_jaxpr(
            body_jaxpr, bc_lin + carry_lin, instantiate=carry_lin)
        new_lin = [a or b for a, b in zip(carry_lin, out_uk)]
        if new_lin == carry_lin:
            break
        carry_lin = new_lin
    _, cond_read = pe.dce_jaxpr(cond_jaxpr.jaxpr, [True])
    if any(ad.is_undefined_primal(x) for x in cc) or any(
            r and lin for r, lin in zip(cond_read[cond_nconsts:], carry_lin)):
        raise NotImplementedError("while: cannot transpose a loop whose condition reads a "
                                  "linear (tangent) value")
    carry_avals = list(body_jaxpr.in_avals[body_nconsts:])
    known_consts = [x for x in bc if not ad.is_undefined_primal(x)]
    init_known = [x for x, lin in zip(carry, carry_lin) if not lin]
    lin_const_avals = [x.aval for x in bc if ad.is_undefined_primal(x)]
    lin_carry_avals = [a for a, lin in zip(carry_avals, carry_lin) if lin]
    ct_const_avals = [ad.tangent_aval(a) for a in lin_const_avals]
    ct_carry_avals = [ad.tangent_aval(a) for a in lin_carry_avals]
    nkc, nk, nlc = len(known_consts), len(init_known), len(lin_const_avals)
    kc_avals = [get_aval(x) for x in known_consts]
    k_avals = [a for a, lin in zip(carry_avals, carry_lin) if not lin]

    count, _ = _count_trips(cc, known_consts, init_known, cond_jaxpr=cond_jaxpr,
                            known_body=known_body, carry_avals=carry_avals,
                            carry_known=[not lin for lin in carry_lin], keep_carry=False)

    # The step's residuals as a function of the known constants and the known carry
    # before the step; only the carries it reads need recomputing.
    res_jaxpr, res_reads = prune(known_body, [False] * nk + [True] * num_res,
                                  [False] * (nkc + nk))
    carry_read = res_reads[nkc:]
    recompute_cond = stage_wrapper(lambda j, k, *kc: [ew.lt(k, j)], [_COUNTER, _COUNTER] + k_avals)

    def recompute_step(*args):
        consts, (k,), known = split_list(args, [nkc, 1])
        return [ew.add(k, np.int32(1))] + eval_closed(known_body, *consts, *known)[:nk]

    recompute_body = stage_wrapper(recompute_step, kc_avals + [_COUNTER] + k_avals)

    def reverse_step(*args):
        consts, init, (j,), ct_consts, ct_carry = split_list(args, [nkc, nk, 1, nlc])
        known = list(init)
        if any(carry_read):
            # the known carry before step j: j steps from the initial one
            outs = _bind_while_pruned([j], list(consts), [np.int32(0)] + known, recompute_cond,
                                      recompute_body, [False] + carry_read)
            known = [o if r else x for o, r, x in zip(outs[1:], carry_read, known)]
        res = eval_closed(res_jaxpr, *[x for x, r in zip(list(consts) + known, res_reads) if r])
        primals = (list(res) + [ad.UndefinedPrimal(a) for a in lin_const_avals] +
                   [ad.UndefinedPrimal(a) for a in lin_carry_avals])
        cts_in = ad.backward_pass(lin_body.jaxpr, lin_body.consts, primals, list(ct_carry))
        _, ct_step_consts, ct_prev = split_list(cts_in, [num_res, nlc])
        new_ct_consts = [acc if isinstance(c, ad.Zero) else ad.add_tangents(acc, c)
                         for acc, c in zip(ct_consts, ct_step_consts)]
        return ([ew.sub(j, np.int32(1))] + new_ct_consts +
                [instantiate(c, a) for c, a in zip(ct_prev, ct_carry_avals)])

    reverse_cond = stage_wrapper(lambda j, *cts_: [ew.ge(j, np.int32(0))],
                           [_COUNTER] + ct_const_avals + ct_carry_avals)
    reverse_body = stage_wrapper(reverse_step, kc_avals + k_avals + [_COUNTER] + ct_const_avals +
                           ct_carry_avals)
    ct_carry_out = [instantiate(ct, a) for ct, a, lin in
                    zip(cts, [ad.tangent_aval(a) for a in carry_avals], carry_lin) if lin]
    outs = _bind_while_pruned(
        [], known_consts + init_known,
        [ew.sub(count, np.int32(1))] + [zeros(a) for a in ct_const_avals] + ct_carry_out,
        reverse_cond, reverse_body, [True] * (1 + nlc + len(ct_carry_out)))
    _, ct_consts, ct_init = split_list(outs, [1, nlc])
    ct_consts, ct_init = iter(ct_consts), iter(ct_init)
    ct_init = [next(ct_init) if lin else None for lin in carry_lin]
    return ([None] * cond_nconsts + [next(ct_consts) if lin else None for lin in bc_lin] +
            [ct if undefined else None for ct, undefined in zip(ct_init, carry_undefined)])


def _while_dce_params(cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, used_carry):
    """Prune a while loop to the carries needed for ``used_carry``: those, the ones the
    condition reads, and (to a fixed point) the ones their updates read. Returns the new
    params, which operands stay and which carries stay."""
    _, cond_read = pe.dce_jaxpr(cond_jaxpr.jaxpr, [True])
    needed = [u or r for u, r in zip(used_carry, cond_read[cond_nconsts:])]
    while True:
        _, body_read = pe.dce_jaxpr(body_jaxpr.jaxpr, needed)
        new_needed = [a or b for a, b in zip(needed, body_read[body_nconsts:])]
        if new_needed == needed:
            break
        needed = new_needed
    new_cond, cond_kept = prune(cond_jaxpr, [True], [False] * cond_nconsts + needed)
    new_body, body_kept = prune(body_jaxpr, needed, [False] * body_nconsts + needed)
    keep_cc, keep_bc = cond_kept[:cond_nconsts], body_kept[:body_nconsts]
    params = dict(cond_jaxpr=new_cond, body_jaxpr=new_body, cond_nconsts=sum(keep_cc),
                  body_nconsts=sum(keep_bc))
    return params, keep_cc + keep_bc + needed, needed


def _bind_while_pruned(cond_consts, body_consts, carry, cond_jaxpr, body_jaxpr, used_carry):
    """Bind a while loop cut down to what ``used_carry`` needs; the final carry, with None
    where a carry was pruned."""
    params, keep_in, keep_out = _while_dce_params(cond_jaxpr, body_jaxpr, len(cond_consts),
                                                  len(body_consts), used_carry)
    operands = [x for x, k in zip(list(cond_consts) + list(body_consts) + list(carry), keep_in) if k]
    outs = iter(while_p.bind(*operands, **params))
    return [next(outs) if k else None for k in keep_out]


def _while_dce(eqn, used_outputs):
    """Drop the carries no used result needs (see :func:`_while_dce_params`), with the body
    equations computing them and the constants no longer read."""
    params, keep_in, keep_out = _while_dce_params(**eqn.params, used_carry=list(used_outputs))
    return eqn.replace(invars=[v for v, k in zip(eqn.invars, keep_in) if k],
                       outvars=[v for v, k in zip(eqn.outvars, keep_out) if k],
                       params=dict(eqn.params, **params))


def _while_batch(vals, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, axis_data=None):
    size = batching.batch_size_of(vals, dims)
    vals = [batching.moveaxis(v, d, 0) if d is not None else v for v, d in zip(vals, dims)]
    batched = [d is not None for d in dims]
    cc, bc, carry = split_list(vals, [cond_nconsts, body_nconsts])
    cc_b, bc_b, carry_b = split_list(batched, [cond_nconsts, body_nconsts])

    def as_dims(flags):
        return [0 if b else None for b in flags]

    def body_fixed_point(carry_b):
        while True:
            _, out_dims = batch_body(axis_data, body_jaxpr, size, as_dims(bc_b + carry_b), carry_b)
            new_b = [a or d is not None for a, d in zip(carry_b, out_dims)]
            if new_b == carry_b:
                return carry_b
            carry_b = new_b

    carry_b = body_fixed_point(carry_b)
    cond_b, (pred_dim,) = batch_body(axis_data, cond_jaxpr, size, as_dims(cc_b + carry_b), False)
    if pred_dim is None:
        body_b, _ = batch_body(axis_data, body_jaxpr, size, as_dims(bc_b + carry_b), carry_b)
        init_b = split_list(batched, [cond_nconsts, body_nconsts])[2]
        carry = [batching.bdim_at_front(x, 0 if ib else None, size) if b else x
                 for x, b, ib in zip(carry, carry_b, init_b)]
        outs = while_p.bind(*cc, *bc, *carry, cond_jaxpr=cond_b, body_jaxpr=body_b,
                            cond_nconsts=cond_nconsts, body_nconsts=body_nconsts)
        return outs, as_dims(carry_b)
    # A per-example predicate: loop until every example is done; examples that are done keep
    # their carry (the body still runs on them, its result is discarded by a select).
    init_b = split_list(batched, [cond_nconsts, body_nconsts])[2]
    carry_b = [True] * len(carry)
    body_b, _ = batch_body(axis_data, body_jaxpr, size, as_dims(bc_b + carry_b), True)
    cond_b, _ = batch_body(axis_data, cond_jaxpr, size, as_dims(cc_b + carry_b), True)
    carry = [batching.bdim_at_front(x, 0 if b else None, size) for x, b in zip(carry, init_b)]
    carry_avals = [get_aval(x) for x in carry]
    cc_avals = [get_aval(x) for x in cc]
    bc_avals = [get_aval(x) for x in bc]

    def any_active(*args):
        pred, = eval_closed(cond_b, *args)
        count = reductions.reduce_sum(ew.convert_element_type(pred, np.int32), (0,))
        return [ew.gt(count, np.int32(0))]

    def masked_body(*args):
        consts_c, consts_b, old = split_list(args, [len(cc), len(bc)])
        pred, = eval_closed(cond_b, *consts_c, *old)
        new = eval_closed(body_b, *consts_b, *old)
        out = []
        for o, n in zip(old, new):
            shape = get_aval(o).shape
            which = structural.broadcast_in_dim(pred, shape, (0,)) if len(shape) > 1 else pred
            out.append(ew.select_n(which, o, n))
        return out

    new_cond = stage_wrapper(any_active, cc_avals + carry_avals)
    new_body = stage_wrapper(masked_body, cc_avals + bc_avals + carry_avals)
    outs = while_p.bind(*cc, *cc, *bc, *carry, cond_jaxpr=new_cond, body_jaxpr=new_body,
                        cond_nconsts=len(cc), body_nconsts=len(cc) + len(bc))
    return outs, [0] * len(carry)


while_p.jvp = _while_jvp
while_p.partial_eval = _while_partial_eval
while_p.transpose = _while_transpose
while_p.batch = _while_batch
while_p.dce = _while_dce
while_p.batch_needs_axis = True


def while_loop(cond_fun: Callable, body_fun: Callable, init_val):
    """Repeat ``val = body_fun(val)`` while ``cond_fun(val)`` is True; return the final value.

    Semantically::

        while cond_fun(val):
            val = body_fun(val)
        return val

    but staged as one loop primitive, so the trip count can depend on data. The carry
    (``init_val``, any pytree of arrays) must keep its structure, shapes and dtypes.
    Forward- and reverse-mode differentiation both work. Reverse mode stores per-iteration
    values when the trip count is known while differentiating; under ``jit`` it recomputes
    them instead, taking time quadratic in the trip count (see the module notes), so for
    long loops with a static trip count prefer ``fori_loop``/``scan``.

        >>> from functrans import lax
        >>> lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 2.0), (0, 1.0))
        (Array(5, dtype=int32, weak_type=True), Array(32., dtype=float32, weak_type=True))
    """
    if not (callable(cond_fun) and callable(body_fun)):
        raise TypeError("while_loop: cond_fun and body_fun must be callable")
    leaves, tree = tree_util.tree_flatten(init_val)
    avals = [get_aval(x) for x in leaves]
    in_tree = tree_util.tree_structure((init_val,))
    body, body_consts, body_tree = stage_user_fun(body_fun, in_tree, avals, "while_loop body_fun")
    promoted = check_carry("while_loop body_fun", tree, avals, body_tree, body.out_avals)
    if promoted is not None:
        leaves = cast_leaves(leaves, promoted)
        avals = [get_aval(x) for x in leaves]
        body, body_consts, body_tree = stage_user_fun(body_fun, in_tree, avals, "while_loop body_fun")
        check_carry("while_loop body_fun", tree, avals, body_tree, body.out_avals)
    cond_jaxpr, cond_consts, cond_tree = stage_user_fun(cond_fun, in_tree, avals, "while_loop cond_fun")
    pred = cond_jaxpr.out_avals
    if len(pred) != 1 or pred[0].shape != () or pred[0].dtype != _dtypes.bool_:
        raise TypeError("while_loop cond_fun must return a boolean scalar, got "
                        f"{types_str(cond_tree, pred)}")
    outs = while_p.bind(*cond_consts, *body_consts, *leaves, cond_jaxpr=cond_jaxpr,
                        body_jaxpr=body, cond_nconsts=len(cond_consts),
                        body_nconsts=len(body_consts))
    return tree_util.tree_unflatten(tree, outs)


# =============================================================================================
# fori_loop: a scan with static bounds, else a while_loop
# =============================================================================================


def _concrete_int(x):
    """The value of ``x`` as a Python int if it is known now, else None."""
    if isinstance(x, Tracer):
        value = x.to_concrete_value()
        return None if value is None else int(np.asarray(core.to_numpy(value)))
    try:
        return int(np.asarray(core.to_numpy(x)))
    except (TypeError, ValueError):
        return None


def fori_loop(lower, upper, body_fun: Callable, init_val, *, unroll: int | bool | None = None):
    """``for i in range(lower, upper): val = body_fun(i, val)``; returns ``val``.

    With bounds known at trace time (Python ints, concrete arrays) this is a ``scan`` of
    ``upper - lower`` steps, so it supports reverse-mode differentiation; with traced
    bounds it is a ``while_loop``.

        >>> from functrans import lax
        >>> lax.fori_loop(0, 5, lambda i, x: x + i, 0.0)
        Array(10., dtype=float32, weak_type=True)
    """
    if not callable(body_fun):
        raise TypeError("fori_loop: body_fun must be callable")
    for bound, name in ((lower, "lower"), (upper, "upper")):
        aval = get_aval(bound)
        if aval.shape != () or not _dtypes.is_integer(aval.dtype):
            raise TypeError(f"fori_loop: {name} must be an integer scalar, got {aval.str_short()}")
    dtype = _fori_bound_dtype(lower, upper)
    lo, hi = _concrete_int(lower), _concrete_int(upper)
    if lo is not None and hi is not None:
        def step(carry, _):
            i, val = carry
            return (i + 1, body_fun(i, val)), None

        # Known bounds become Python ints, as in JAX: the index is a weakly typed integer,
        # so `x + i` keeps a Python-scalar carry weakly typed.
        (_, result), _ = scan(step, (lo, init_val), None, length=max(hi - lo, 0),
                              unroll=1 if unroll is None else unroll)
        return result

    def loop_cond(carry):
        i, stop, _ = carry
        return ew.lt(i, stop)

    def loop_body(carry):
        i, stop, val = carry
        return ew.add(i, np.asarray(1, dtype)[()]), stop, body_fun(i, val)

    lower = ew.convert_element_type(lower, dtype)
    upper = ew.convert_element_type(upper, dtype)
    _, _, result = while_loop(loop_cond, loop_body, (lower, upper, init_val))
    return result


def _fori_bound_dtype(lower, upper):
    """The loop index dtype: the bounds' common dtype; a weakly typed bound (a Python int)
    takes the other's signed integer type, and other mixes are refused as in JAX."""
    a, b = get_aval(lower), get_aval(upper)
    if a.dtype == b.dtype:
        return a.dtype
    signed = _dtypes.is_signed(a.dtype) and _dtypes.is_signed(b.dtype)
    if signed and a.weak_type != b.weak_type:
        return b.dtype if a.weak_type else a.dtype
    raise TypeError("lower and upper arguments to fori_loop must have equal types, got "
                    f"{np.dtype(a.dtype).name} and {np.dtype(b.dtype).name}")


__all__ = ["fori_loop", "while_loop"]
