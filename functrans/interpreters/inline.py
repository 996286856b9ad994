"""Inlining of call-like equations before compilation.

``jit``, ``custom_jvp_call``, ``custom_vjp_call`` and ``remat`` equations only matter to
transforms; a compiler sees their bodies spliced into the enclosing program (recursively), so
fusion can work across them.
"""
from __future__ import annotations

from functrans.core import ClosedJaxpr, DropVar, Eqn, Jaxpr, Literal, Var

INLINABLE = {"jit": "jaxpr", "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
             "custom_vmap_call": "call_jaxpr", "remat": "jaxpr"}


def inline_calls(closed: ClosedJaxpr) -> ClosedJaxpr:
    """A closed jaxpr equal to ``closed`` with every call-like equation replaced by its body."""
    if not any(e.primitive.name in INLINABLE for e in closed.jaxpr.eqns):
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
        key = INLINABLE.get(eqn.primitive.name)
        if key is None:
            outvars = eqn.outvars
            if fresh:
                outvars = [v if isinstance(v, DropVar) else Var(v.aval) for v in eqn.outvars]
                for old, new in zip(eqn.outvars, outvars):
                    renames[id(old)] = new
            eqns.append(eqn.replace(invars=[rename(v) for v in eqn.invars], outvars=outvars))
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
