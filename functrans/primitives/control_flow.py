"""Structured control flow: ``cond``/``switch``, ``while_loop``, ``fori_loop``, ``scan``, ``map``.

Each construct is a *higher-order primitive*: its equation holds closed sub-jaxprs (the
branches, the loop body) staged once from the user's Python functions, so a 1000-step loop is
one equation with one body, never 1000 copies. Values the user's functions close over
(arrays, tracers of enclosing transforms) become explicit leading operands, so every
transform sees them as ordinary inputs.

Three primitives carry everything:

``cond``   operands ``(index, *consts, *operands)``; ``branches``: one closed jaxpr per branch,
           each taking ``(*consts, *operands)``. ``cond``/``switch`` both bind it.
``while``  operands ``(*cond_consts, *body_consts, *carry)``; ``cond_jaxpr``: carry -> bool[],
           ``body_jaxpr``: carry -> carry.
``scan``   operands ``(*consts, *carry, *xs)``; ``jaxpr``: ``(consts, carry, x) -> (carry, y)``,
           run ``length`` times over the leading axis of ``xs``, stacking the ``y``.
           ``fori_loop`` with static bounds and ``map`` are scans.

Each primitive is declared, with its rules beside it (reference implementation, shape rule,
JVP, partial evaluation, so that ``linearize``/``grad`` split each loop into a known primal
loop and a linear loop, transposition, batching and dead-code elimination), in its own
module: :mod:`~functrans.primitives.cond`, :mod:`~functrans.primitives.while_loop` (with
``fori_loop``) and :mod:`~functrans.primitives.scan` (with ``map``); what they share (staging
the user's functions, evaluating and pruning sub-jaxprs) is in
:mod:`~functrans.primitives.loop_bodies`. This module gathers the family under one name for
``lax`` and for code that reaches the primitives as ``control_flow.scan_p``.
"""
from __future__ import annotations

from functrans.primitives import cond as _cond
from functrans.primitives import scan as _scan
from functrans.primitives import while_loop as _while_loop
from functrans.primitives.cond import *  # noqa: F401,F403
from functrans.primitives.cond import cond_p  # noqa: F401
from functrans.primitives.scan import *  # noqa: F401,F403
from functrans.primitives.scan import scan_p  # noqa: F401
from functrans.primitives.while_loop import *  # noqa: F401,F403
from functrans.primitives.while_loop import while_p  # noqa: F401

__all__ = sorted(_cond.__all__ + _while_loop.__all__ + _scan.__all__)
