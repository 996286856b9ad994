"""Custom derivative rules, under the names of ``jax.custom_derivatives``: the decorators,
the objects rules see with ``symbolic_zeros=True``, ``closure_convert`` and
``custom_gradient``.

    >>> import functrans
    >>> from functrans.custom_derivatives import SymbolicZero, custom_jvp
    >>> @custom_jvp
    ... def f(x, y):
    ...     return x * y
    >>> def f_jvp(primals, tangents):
    ...     (x, y), (tx, ty) = primals, tangents
    ...     out = 0.0 if isinstance(ty, SymbolicZero) else x * ty
    ...     return f(x, y), tx * y + out
    >>> _ = f.defjvp(f_jvp, symbolic_zeros=True)
    >>> functrans.grad(f)(2.0, 3.0)
    Array(3., dtype=float32, weak_type=True)
"""
from __future__ import annotations

from functrans._program_transforms import closure_convert
from functrans._custom_derivatives import custom_gradient
from functrans._custom_derivatives import (CustomVJPPrimal, SymbolicZero, custom_jvp,
                                           custom_jvp_call_p, custom_vjp, custom_vjp_call_p,
                                           custom_vjp_primal_tree_values, zero_from_primal)

__all__ = ["CustomVJPPrimal", "SymbolicZero", "closure_convert", "custom_gradient", "custom_jvp",
           "custom_jvp_call_p", "custom_vjp", "custom_vjp_call_p",
           "custom_vjp_primal_tree_values", "zero_from_primal"]
