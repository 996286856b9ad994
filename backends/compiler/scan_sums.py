"""Sums over a scan's iterations, taken out of the loop (a compiler pass on jaxprs).

A scan carry that the body only ever adds products or sums to,

    c = c + dot_general(x_t, d_t) + dot_general(h_t, d_t) + reduce_sum(d_t) ...

ends as ``c0 + sum over t`` of those terms, and the sum of each is one ``dot_general`` (or
``reduce_sum``) over its operands stacked along the iterations, with the iteration axis
contracted too. The reverse-mode derivative of a scan has such a carry for every weight of
the loop body (an RNN's ``dW += h_t^T delta_t``): ``length`` small matrix products of
inner dimension ``batch`` become one product of inner dimension ``length * batch``, which
BLAS runs at a higher rate and the thread pool can split, and the sequential loop shrinks
to the recurrence itself (the benchmarks' RNN step at batch 8: 13% less time).

The carry leaves the scan; each operand the body computes becomes a stacked output of the
scan (an operand that is already a scanned input is read from the stacked input as it is).
A ``reduce_sum`` is taken out only when its operand is stacked anyway. Only the rounding
of the sum changes: its terms are added in another order.

    >>> import functrans, functrans.numpy as jnp
    >>> from functrans.backends.compiler.fusion import flat_closed
    >>> def loss(w, xs):
    ...     step = lambda h, x: (jnp.tanh(x @ w + h @ w), None)
    ...     return functrans.lax.scan(step, jnp.zeros((2, 3)), xs)[0].sum()
    >>> closed = functrans.make_jaxpr(functrans.grad(loss))(jnp.ones((3, 3)), jnp.ones((5, 2, 3)))
    >>> hoisted = hoist_closed(flat_closed(closed))   # dW: two products after the loop
    >>> [e.params["num_carry"] for e in hoisted.jaxpr.eqns if e.primitive.name == "scan"]
    [1, 1]
"""
from __future__ import annotations

import numpy as np

from functrans.core import ClosedJaxpr, DropVar, Eqn, Jaxpr, Literal, ShapedArray, Var
from functrans.primitives import control_flow, linalg
from functrans.primitives import reductions as reductions_module
from functrans.primitives import elementwise as ew

_REDUCTIONS = (linalg.dot_general_p, reductions_module.reduce_sum_p)
# Stacked operands (the body's values kept for every iteration) may take this much memory
# per scan; beyond it the sums stay in the loop.
MAX_STACKED_BYTES = 64 << 20


def hoist_closed(closed: ClosedJaxpr) -> ClosedJaxpr:
    """``closed`` with the iteration sums of its scans (and of scans inside them) taken out
    of the loops. Returns ``closed`` itself when there are none."""
    jaxpr = _hoist_jaxpr(closed.jaxpr)
    return closed if jaxpr is closed.jaxpr else ClosedJaxpr(jaxpr, closed.consts)


def _hoist_jaxpr(jaxpr: Jaxpr) -> Jaxpr:
    eqns, changed = [], False
    for eqn in jaxpr.eqns:
        if eqn.primitive is control_flow.scan_p:
            body = eqn.params["jaxpr"]
            inner = hoist_closed(body)
            if inner is not body:
                eqn, changed = eqn.replace(params={**eqn.params, "jaxpr": inner}), True
            hoisted = _hoist_scan(eqn)
            if hoisted is not None:
                eqns.extend(hoisted)
                changed = True
                continue
        eqns.append(eqn)
    if not changed:
        return jaxpr
    return Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.outvars, eqns)


class _Sum:
    """Carry ``index`` updated as ``carry + term + ...`` (the ``adds``), each term a
    ``reduction`` (``dot_general`` or ``reduce_sum``) of values of the iteration."""

    def __init__(self, index, adds, reductions):
        self.index, self.adds, self.reductions = index, adds, reductions


def _hoist_scan(eqn: Eqn) -> list[Eqn] | None:
    """The equations replacing a scan equation whose carries include iteration sums, or
    None when none does (or stacking their operands would take too much memory)."""
    params = eqn.params
    body: Jaxpr = params["jaxpr"].jaxpr
    n_consts, n_carry, length = params["num_consts"], params["num_carry"], params["length"]
    defs = {id(v): e for e in body.eqns for v in e.outvars}
    uses: dict = {}
    for v in [v for e in body.eqns for v in e.invars] + list(body.outvars):
        if not isinstance(v, Literal):
            uses[id(v)] = uses.get(id(v), 0) + 1
    invariant = {id(v) for v in list(body.constvars) + list(body.invars[:n_consts])}
    sums = [s for i in range(n_carry)
            if (s := _iteration_sum(body, i, n_consts, defs, uses, invariant)) is not None]
    xs_position = {id(v): n_consts + n_carry + j
                   for j, v in enumerate(body.invars[n_consts + n_carry:])}
    def product_operands(sums) -> dict:
        """The operands the products of ``sums`` read that the body computes (by id)."""
        return {id(v): v for s in sums for r in s.reductions
                if r.primitive is linalg.dot_general_p for v in r.invars
                if id(v) not in xs_position}

    def movable(s, stacked) -> bool:
        return all(r.primitive is linalg.dot_general_p or all(
            id(v) in xs_position or id(v) in stacked for v in r.invars) for r in s.reductions)

    # operands of products are stacked; a reduce_sum goes only with an operand stacked anyway
    # (until no sum that stays in the loop leaves an operand stacked for nothing)
    while True:
        stacked = product_operands(sums)
        kept = [s for s in sums if movable(s, stacked)]
        if len(kept) == len(sums):
            break
        sums = kept
    if not sums:
        return None
    stacked_bytes = sum(length * int(np.prod(v.aval.shape, dtype=np.int64))
                        * np.dtype(v.aval.dtype).itemsize for v in stacked.values())
    if stacked_bytes > MAX_STACKED_BYTES:
        return None
    return _rewrite(eqn, sums, list(stacked.values()), xs_position)


def _iteration_sum(body: Jaxpr, i: int, n_consts: int, defs: dict, uses: dict,
                   invariant: set) -> _Sum | None:
    """Carry ``i`` as an iteration sum, or None."""
    carry, out = body.invars[n_consts + i], body.outvars[i]
    if isinstance(out, Literal) or uses.get(id(carry)) != 1 or uses.get(id(out)) != 1:
        return None
    adds, reductions = [], []

    def split(v) -> int | None:
        """How many times ``v``, a tree of adds each used once, holds the carry; its other
        leaves go to ``reductions``. None: not such a tree."""
        if v is carry:
            return 1
        eqn = None if isinstance(v, Literal) or uses.get(id(v)) != 1 else defs.get(id(v))
        if eqn is None or v.aval.shape != carry.aval.shape or v.aval.dtype != carry.aval.dtype:
            return None
        if eqn.primitive is ew.add_p:
            counts = [split(operand) for operand in eqn.invars]
            if None in counts:
                return None
            adds.append(eqn)
            return sum(counts)
        # a term whose operands all change from one iteration to the next (a loop-invariant
        # factor would need the other summed first: not this pass's form)
        if eqn.primitive in _REDUCTIONS and not any(
                isinstance(x, Literal) or id(x) in invariant for x in eqn.invars):
            reductions.append(eqn)
            return 0
        return None

    if split(out) != 1 or not reductions:
        return None
    return _Sum(i, adds, reductions)


def _rewrite(eqn: Eqn, sums: list, stacked: list, xs_position: dict) -> list[Eqn]:
    params = eqn.params
    closed_body: ClosedJaxpr = params["jaxpr"]
    body = closed_body.jaxpr
    n_consts, n_carry, length = params["num_consts"], params["num_carry"], params["length"]
    gone = {s.index for s in sums}
    dropped = {id(e) for s in sums for e in s.adds + s.reductions}
    body_eqns = [e for e in body.eqns if id(e) not in dropped]
    body_outs = [body.outvars[i] for i in range(n_carry) if i not in gone] \
        + body.outvars[n_carry:] + stacked
    # the operands the body keeps: its constants, the other carries, and the scanned
    # inputs it still reads (one only the moved sums read is read after the loop instead)
    read = {id(v) for e in body_eqns for v in e.invars} | {id(v) for v in body_outs}
    kept = [p for p in range(len(body.invars))
            if p < n_consts or (p < n_consts + n_carry and p - n_consts not in gone)
            or (p >= n_consts + n_carry and id(body.invars[p]) in read)]
    new_body = Jaxpr(body.constvars, [body.invars[p] for p in kept], body_outs, body_eqns)
    linear = tuple(params["linear"])
    stacked_outs = [Var(ShapedArray((length,) + tuple(v.aval.shape), v.aval.dtype))
                    for v in stacked]
    scan = eqn.replace(
        invars=[eqn.invars[p] for p in kept],
        outvars=[eqn.outvars[i] for i in range(n_carry) if i not in gone]
        + eqn.outvars[n_carry:] + stacked_outs,
        params={**params, "jaxpr": ClosedJaxpr(new_body, closed_body.consts),
                "num_carry": n_carry - len(gone), "linear": tuple(linear[p] for p in kept)})
    outer = {id(v): out for v, out in zip(stacked, stacked_outs)}
    for v_id, position in xs_position.items():
        outer[v_id] = eqn.invars[position]
    eqns = [scan]
    for s in sums:
        result = eqn.outvars[s.index]
        if isinstance(result, DropVar):
            continue
        total = eqn.invars[n_consts + s.index]  # the carry's initial value
        for k, r in enumerate(s.reductions):
            term = Var(r.outvars[0].aval)
            eqns.append(r.replace(invars=[outer[id(v)] for v in r.invars], outvars=[term],
                                  params=_over_iterations(r)))
            last = k == len(s.reductions) - 1
            added = result if last else Var(result.aval)
            eqns.append(s.adds[0].replace(invars=[total, term], outvars=[added]))
            total = added
    return eqns


def _over_iterations(reduction: Eqn) -> dict:
    """The reduction's parameters for operands with a leading iteration axis, summed over."""
    params = dict(reduction.params)
    if reduction.primitive is reductions_module.reduce_sum_p:
        params["axes"] = (0,) + tuple(a + 1 for a in params["axes"])
        return params
    (lc, rc), (lb, rb) = params["dimension_numbers"]
    params["dimension_numbers"] = (((0,) + tuple(d + 1 for d in lc),
                                    (0,) + tuple(d + 1 for d in rc)),
                                   (tuple(d + 1 for d in lb), tuple(d + 1 for d in rb)))
    return params
