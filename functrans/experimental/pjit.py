"""``jax.experimental.pjit``: ``pjit`` is ``jit`` with ``in_shardings``/``out_shardings``."""
from __future__ import annotations

from functrans._jit import jit

__all__ = ["pjit"]


def pjit(fun=None, /, in_shardings=None, out_shardings=None, static_argnums=None,
         static_argnames=None, donate_argnums=None, donate_argnames=None,
         keep_unused: bool = False, device=None, backend=None, inline: bool = False,
         **kwargs):
    """:func:`functrans.jit` under its former name (``jax.experimental.pjit.pjit``)."""
    for legacy in ("in_axis_resources", "out_axis_resources"):
        if legacy in kwargs:
            raise TypeError(f"pjit: {legacy} was renamed; use "
                            f"{legacy.replace('axis_resources', 'shardings')}")
    if kwargs:
        raise TypeError(f"pjit got unexpected keyword arguments {sorted(kwargs)}")
    return jit(fun, in_shardings=in_shardings, out_shardings=out_shardings,
               static_argnums=static_argnums, static_argnames=static_argnames,
               donate_argnums=donate_argnums, donate_argnames=donate_argnames,
               keep_unused=keep_unused, device=device, backend=backend, inline=inline)
