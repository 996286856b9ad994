"""Named rematerialization, as ``jax.ad_checkpoint``: :func:`checkpoint_name` marks values,
the policies of :data:`checkpoint_policies` choose by name (or primitive) which values reverse
mode keeps, and :func:`print_saved_residuals` shows what it keeps.

    >>> import functrans, functrans.numpy as jnp
    >>> from functrans.ad_checkpoint import checkpoint_name, print_saved_residuals
    >>> def f(x):
    ...     a = checkpoint_name(jnp.sin(x), "a")
    ...     return jnp.sin(a)
    >>> policy = functrans.checkpoint_policies.save_only_these_names("a")
    >>> print_saved_residuals(functrans.checkpoint(f, policy=policy), jnp.ones(3))  # doctest: +ELLIPSIS
    f32[3] from the argument x
    f32[3] named 'a' from ...

``checkpoint`` and ``remat`` are here too (``jax.checkpoint``); the residual report follows
the ``vjp`` of the function: its inputs first, then the values computed in the forward pass
in program order.
"""
from __future__ import annotations

from typing import Callable

from functrans import tree_util
from functrans._api import _as_array
from functrans._jit import jit_p
from functrans._remat import (Offloadable, Recompute, Saveable, checkpoint, checkpoint_name,
                              checkpoint_policies, name_p, remat)
from functrans.core import Literal, get_aval
from functrans.interpreters import ad
from functrans.interpreters.staging import trace_to_jaxpr_dynamic

__all__ = ["Offloadable", "Recompute", "Saveable", "checkpoint", "checkpoint_name",
           "checkpoint_policies", "print_saved_residuals", "remat", "saved_residuals"]


def saved_residuals(f: Callable, *args, **kwargs) -> list:
    """``(aval, description)`` for each value reverse mode keeps from ``f(*args, **kwargs)``'s
    forward pass for its backward pass.

        >>> import functrans.numpy as jnp
        >>> [(str(a), d) for a, d in saved_residuals(jnp.sin, jnp.ones(2))]  # doctest: +ELLIPSIS
        [('f32[2]', 'output of cos from ...')]
    """
    leaves, in_tree = tree_util.tree_flatten((args, kwargs))
    leaves = [_as_array(x) for x in leaves]

    def residuals_of(*xs):
        def flat_f(*ys):
            a, kw = tree_util.tree_unflatten(in_tree, ys)
            return tree_util.tree_leaves(f(*a, **kw))
        _, _, residuals, _ = ad.linearize_flat(flat_f, xs)
        return residuals

    jaxpr, _ = trace_to_jaxpr_dynamic(residuals_of, [get_aval(x) for x in leaves])
    return _describe(jaxpr, tree_util._argument_paths(f, args, kwargs))


def print_saved_residuals(f: Callable, *args, **kwargs) -> None:
    """Print, one per line, the values reverse mode keeps from ``f(*args, **kwargs)``'s
    forward pass: ``f32[3] from the argument x``, ``f32[3] named 'a' from file:line:col (fn)``,
    ``f32[3] output of cos from ...``.

        >>> import functrans, functrans.numpy as jnp
        >>> print_saved_residuals(functrans.checkpoint(lambda x: jnp.sin(jnp.sin(x))), jnp.ones(2))
        f32[2] from the argument x
    """
    for aval, description in saved_residuals(f, *args, **kwargs):
        print(f"{aval.str_short(short_dtypes=True)} {description}")


def _describe(jaxpr, arg_names) -> list:
    """Where each output of ``jaxpr`` (the residuals) comes from: an argument, a constant, a
    literal, or an equation (a named value, a jitted call's result, a primitive's result)."""
    outs = jaxpr.outvars
    residual_ids = {id(v) for v in outs if not isinstance(v, Literal)}
    results = [(v.aval, "from a literal") for v in outs if isinstance(v, Literal)]
    results += [(v.aval, "from a constant") for v in jaxpr.constvars if id(v) in residual_ids]
    for i, v in enumerate(jaxpr.invars):
        if id(v) in residual_ids:
            name = arg_names[i] if i < len(arg_names) else ""
            results.append((v.aval, f"from the argument {name}" if name else
                            f"from the argument at flattened index {i}"))
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            if id(v) not in residual_ids:
                continue
            where = _summarize(eqn.source_info)
            if eqn.primitive is name_p:
                results.append((v.aval, f"named '{eqn.params['name']}' from {where}"))
            elif eqn.primitive is jit_p:
                results.append((v.aval, f"output of jitted function '{eqn.params['name']}' "
                                        f"from {where}"))
            else:
                results.append((v.aval, f"output of {eqn.primitive.name} from {where}"))
    return results


def _summarize(info) -> str:
    if info is None:
        return "unknown"
    column = info.column
    line = f"{info.lineno}:{column}" if column is not None else f"{info.lineno}"
    return f"{info.filename}:{line} ({info.function})"

