"""``functrans.extend``: the pieces JAX libraries build new primitives and transforms from
(``jax.extend``): ``core`` (``Primitive``, ``Jaxpr``, ``ClosedJaxpr``, ``Var``, ``Literal``,
``Effect``, ...), ``linear_util`` and ``source_info_util``.

A primitive defined here takes its rules as JAX's do: ``def_impl`` (on arrays),
``def_abstract_eval``, and the tables ``functrans.interpreters.ad.primitive_jvps``,
``ad.primitive_transposes`` and ``functrans.interpreters.batching.primitive_batchers``; it then
works under ``jit``, ``grad`` and ``vmap``.
"""
from __future__ import annotations

import importlib

_SUBMODULES = ("core", "linear_util", "source_info_util", "backend", "random")


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"functrans.extend.{name}")
    raise AttributeError(f"module 'functrans.extend' has no attribute {name!r}")
