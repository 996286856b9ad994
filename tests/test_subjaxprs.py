"""``core.subjaxprs``: the one walker over the programs an equation holds in its params."""
from __future__ import annotations

import numpy as np

import functrans
from functrans import core, lax


def _eqn(closed, name):
    (eqn,) = [e for e in closed.jaxpr.eqns if e.primitive.name == name]
    return eqn


def test_cond_yields_every_branch_open():
    closed = functrans.make_jaxpr(
        lambda p, x: lax.cond(p, lambda v: v + 1.0, lambda v: v * 2.0, x))(True, 1.0)
    eqn = _eqn(closed, "cond")
    subs = list(core.subjaxprs(eqn))
    assert len(subs) == 2 and all(isinstance(s, core.Jaxpr) for s in subs)
    assert [s for s in subs] == [b.jaxpr for b in eqn.params["branches"]]


def test_while_yields_cond_and_body_in_params_order():
    closed = functrans.make_jaxpr(lambda x: lax.while_loop(lambda c: c < 3.0,
                                                           lambda c: c + 1.0, x))(0.0)
    eqn = _eqn(closed, "while")
    subs = list(core.subjaxprs(eqn))
    held = [v.jaxpr for v in eqn.params.values() if isinstance(v, core.ClosedJaxpr)]
    assert subs == held and len(subs) == 2


def test_plain_equation_holds_none_and_params_dicts_are_accepted():
    closed = functrans.make_jaxpr(lambda x: x * 2.0)(np.float32(1.0))
    (eqn,) = closed.jaxpr.eqns
    assert list(core.subjaxprs(eqn)) == []
    inner = functrans.make_jaxpr(lambda x: x + 1.0)(1.0)
    params = {"jaxpr": inner, "branches": [inner.jaxpr, inner], "n": 3}
    assert list(core.subjaxprs(params)) == [inner.jaxpr] * 3
