"""The stages of a jitted function, under ``jax.stages``'s names.

``jit(f)`` is a :class:`Wrapped`; ``jit(f).trace(*args)`` a :class:`Traced` (``.jaxpr``);
``.lower()`` a :class:`Lowered`; ``.compile()`` a :class:`Compiled`, callable with arguments
of the types it was lowered for. Each stage has ``in_tree``, ``in_avals``, ``args_info``
(:class:`ArgInfo` per argument) and ``out_info``.

    >>> import functrans, numpy as np
    >>> traced = functrans.jit(lambda x: x * 2).trace(np.ones(3, np.float32))
    >>> traced.out_info
    ShapeDtypeStruct(shape=(3,), dtype=float32)
    >>> traced.lower().compile()(np.ones(3, np.float32))
    Array([2., 2., 2.], dtype=float32)
"""
from __future__ import annotations

from functrans._jit import ArgInfo, Compiled, JitWrapped as Wrapped, Lowered, Traced

__all__ = ["ArgInfo", "Compiled", "CompilerOptions", "Lowered", "Traced", "Wrapped"]

# the type of jit's compiler_options: option name -> value
CompilerOptions = dict[str, str | bool]
