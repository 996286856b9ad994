"""Programs and IR queries shared by the control-flow tests."""
from __future__ import annotations

import functrans.numpy as jnp
from functrans import core, lax


def eqns_named(jaxpr, name) -> list:
    """Equations of primitive ``name`` in ``jaxpr`` and all its sub-jaxprs."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == name:
            found.append(eqn)
        for p in eqn.params.values():
            for sub in (p if isinstance(p, tuple) else (p,)):
                if isinstance(sub, core.ClosedJaxpr):
                    found += eqns_named(sub.jaxpr, name)
    return found


def newton_sqrt(x):
    """sqrt(x) by Newton's method, iterating until the update is below tolerance."""
    def cond_fun(carry):
        y, step = carry
        return lax.gt(lax.abs(step), 1e-12 * (1 + lax.abs(y)))

    def body_fun(carry):
        y, _ = carry
        new = 0.5 * (y + x / y)
        return new, new - y

    y, _ = lax.while_loop(cond_fun, body_fun, (x, jnp.ones_like(x)))
    return y
