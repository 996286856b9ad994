"""Inlining of call-like equations before compilation.

``jit``, ``custom_jvp_call``, ``custom_vjp_call``, ``custom_vjp_fwd`` and ``remat`` equations
only matter to transforms; a compiler sees their bodies spliced into the enclosing program
(recursively, and inside the bodies of control flow), so fusion can work across them. A
``name`` equation (``checkpoint_name``) is the identity to a compiler: its result is its
operand.
"""
from __future__ import annotations

from functrans import core
from functrans.core import ClosedJaxpr, DropVar, Eqn, Jaxpr, Literal, Var

INLINABLE = {"jit": "jaxpr", "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
             "custom_vmap_call": "call_jaxpr", "remat": "jaxpr", "custom_vjp_fwd": "fwd_jaxpr"}
# equations whose result is their one operand, kept in programs only for transforms
FORWARDED = frozenset({"name"})


def inline_calls(closed: ClosedJaxpr) -> ClosedJaxpr:
    """A closed jaxpr equal to ``closed`` with every call-like equation replaced by its body."""
    if not _has_calls(closed.jaxpr):
        return closed
    constvars = list(closed.jaxpr.constvars)
    consts = list(closed.consts)
    eqns: list[Eqn] = []
    renames: dict = {}
    _splice(closed.jaxpr, renames, eqns, constvars, consts, fresh=False)
    outvars = [v if isinstance(v, Literal) else renames.get(id(v), v) for v in closed.jaxpr.outvars]
    jaxpr = Jaxpr(constvars, closed.jaxpr.invars, outvars, eqns)
    return ClosedJaxpr(jaxpr, consts)


def _splice(jaxpr: Jaxpr, renames: dict, eqns: list, constvars: list, consts: list,
            fresh: bool) -> None:
    """Append ``jaxpr``'s equations to ``eqns``. Inside an inlined body (``fresh``) every
    result gets a new variable, since the same body may be spliced in more than once."""
    def rename(v):
        return v if isinstance(v, Literal) else renames.get(id(v), v)

    for eqn in jaxpr.eqns:
        if eqn.primitive.name in FORWARDED:
            renames[id(eqn.outvars[0])] = rename(eqn.invars[0])
            continue
        key = INLINABLE.get(eqn.primitive.name)
        if key is None:
            outvars = eqn.outvars
            if fresh:
                outvars = [v if isinstance(v, DropVar) else Var(v.aval) for v in eqn.outvars]
                for old, new in zip(eqn.outvars, outvars):
                    renames[id(old)] = new
            params = {k: _inline_param(v) for k, v in eqn.params.items()}
            eqns.append(eqn.replace(invars=[rename(v) for v in eqn.invars], outvars=outvars,
                                    params=params))
            continue
        body: ClosedJaxpr = eqn.params[key]
        inner = {}
        for v, c in zip(body.jaxpr.constvars, body.consts):
            nv = Var(v.aval)
            constvars.append(nv)
            consts.append(c)
            inner[id(v)] = nv
        for v, outer in zip(body.jaxpr.invars, eqn.invars):
            inner[id(v)] = rename(outer)
        _splice(body.jaxpr, inner, eqns, constvars, consts, fresh=True)
        # bind the call's outputs to the body's results
        for out, res in zip(eqn.outvars, body.jaxpr.outvars):
            target = res if isinstance(res, Literal) else inner.get(id(res), res)
            renames[id(out)] = target


def _has_calls(jaxpr: Jaxpr) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in INLINABLE or eqn.primitive.name in FORWARDED:
            return True
        if any(_has_calls(sub) for sub in core.subjaxprs(eqn)):
            return True
    return False


def _inline_param(value):
    """A parameter with the programs it holds (bodies of control flow) inlined too."""
    if isinstance(value, ClosedJaxpr):
        return inline_calls(value)
    if isinstance(value, tuple) and value and all(isinstance(v, ClosedJaxpr) for v in value):
        return tuple(inline_calls(v) for v in value)
    return value
