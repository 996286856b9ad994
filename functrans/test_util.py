"""Testing helpers exported for users: numerical gradient checks.

    >>> import functrans.numpy as jnp
    >>> from functrans.test_util import check_grads
    >>> check_grads(jnp.sin, (0.5,), order=2)
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from functrans import _dtypes, tree_util
from functrans._config import config
from functrans._api import jvp, vjp
from functrans._array import Array, is_concrete_array

__all__ = ["check_grads", "check_jvp", "check_vjp", "numerical_jvp", "x64"]


def x64():
    """Context manager that turns on 64-bit mode for the duration of a block."""
    return config.setting("enable_x64", True)


_DEFAULT_TOL = {np.dtype(np.float16): 1e-1, _dtypes.bfloat16: 1e-1,
                np.dtype(np.float32): 2e-2, np.dtype(np.float64): 1e-5,
                np.dtype(np.complex64): 2e-2, np.dtype(np.complex128): 1e-5}


def _tol(values, atol, rtol):
    dtypes = [np.asarray(v).dtype for v in values]
    default = max((_DEFAULT_TOL.get(d, 1e-5) for d in dtypes), default=1e-5)
    return (default if atol is None else atol), (default if rtol is None else rtol)


def _as_np(x):
    return np.asarray(x)


def _add_scaled(xs, ts, eps):
    out = []
    for x, t in zip(xs, ts):
        xv = _as_np(x)
        if not _dtypes.is_inexact(xv.dtype):
            out.append(x)
            continue
        shifted = np.asarray(xv + eps * _as_np(t), dtype=xv.dtype)
        # the shifted point keeps the argument's type: f(np_array[i]) may fail where
        # f(Array[i]) works (a NumPy array cannot be indexed by a tracer, e.g. inside vmap)
        out.append(Array(shifted, weak_type=x.weak_type) if is_concrete_array(x) else shifted)
    return out


def numerical_jvp(f: Callable, primals: Sequence, tangents: Sequence, eps: float):
    """Central finite difference ``(f(x + eps t) - f(x - eps t)) / 2 eps`` over pytrees."""
    f_pos = f(*_add_scaled(primals, tangents, eps))
    f_neg = f(*_add_scaled(primals, tangents, -eps))
    def difference(a, b):
        a, b = _as_np(a), _as_np(b)
        if not _dtypes.is_inexact(a.dtype):
            return np.zeros(np.shape(a))
        # complex outputs keep their imaginary part
        wide = np.complex128 if _dtypes.is_complex(a.dtype) else np.float64
        return (a.astype(wide) - b.astype(wide)) / (2 * eps)
    return tree_util.tree_map(difference, f_pos, f_neg)


def _rand_like(rng, x):
    xv = _as_np(x)
    if not _dtypes.is_inexact(xv.dtype):
        return np.zeros(xv.shape, _dtypes.float0)
    t = rng.standard_normal(xv.shape)
    if _dtypes.is_complex(xv.dtype):
        t = t + 1j * rng.standard_normal(xv.shape)
    return np.asarray(t, dtype=xv.dtype)


def _assert_close(name, actual, expected, atol, rtol):
    a_leaves = tree_util.tree_leaves(actual)
    e_leaves = tree_util.tree_leaves(expected)
    assert len(a_leaves) == len(e_leaves), f"{name}: structures differ"
    for a, e in zip(a_leaves, e_leaves):
        a = _as_np(a)
        e = _as_np(e)
        if a.dtype == _dtypes.float0 or e.dtype == _dtypes.float0:
            continue
        np.testing.assert_allclose(a.astype(np.complex128 if np.iscomplexobj(a) else np.float64),
                                   e, atol=atol, rtol=rtol, err_msg=name)


def _flat(f, args):
    """``f`` as a function of the leaves of ``args`` (which may be pytrees), and the leaves."""
    leaves, tree = tree_util.tree_flatten(tuple(args))
    return (lambda *xs: f(*tree_util.tree_unflatten(tree, xs))), leaves


def check_jvp(f: Callable, args: Sequence, atol=None, rtol=None, eps=None, rng=None):
    """Compare ``jvp(f)`` with central finite differences along a random direction."""
    f, args = _flat(f, args)
    rng = rng or np.random.default_rng(0)
    atol, rtol = _tol(tree_util.tree_leaves(args), atol, rtol)
    eps = eps or (1e-4 if any(_as_np(a).dtype == np.float64 for a in tree_util.tree_leaves(args)) else 1e-2)
    tangents = [_rand_like(rng, a) for a in args]
    _, tangent_out = jvp(f, tuple(args), tuple(tangents))
    expected = numerical_jvp(f, args, tangents, eps)
    _assert_close("JVP vs finite differences", tangent_out, expected, atol, rtol)


def _inner(a, b) -> float:
    total = 0.0
    for x, y in zip(tree_util.tree_leaves(a), tree_util.tree_leaves(b)):
        x, y = _as_np(x), _as_np(y)
        if x.dtype == _dtypes.float0 or y.dtype == _dtypes.float0:
            continue
        total += np.real(np.sum(np.conj(x.astype(np.complex128)) * y.astype(np.complex128)))
    return float(total)


def check_vjp(f: Callable, args: Sequence, atol=None, rtol=None, eps=None, rng=None):
    """Check ``vjp(f)`` against finite differences via the identity <ct, J t> = <J^T ct, t>."""
    f, args = _flat(f, args)
    rng = rng or np.random.default_rng(1)
    atol, rtol = _tol(tree_util.tree_leaves(args), atol, rtol)
    eps = eps or (1e-4 if any(_as_np(a).dtype == np.float64 for a in tree_util.tree_leaves(args)) else 1e-2)
    out, f_vjp = vjp(f, *args)
    cotangent = tree_util.tree_map(lambda o: _rand_like(rng, o), out)
    tangents = [_rand_like(rng, a) for a in args]
    # Complex cotangents follow JAX's convention (a VJP transposes without conjugating), so
    # the adjoint that pairs with the real inner product is conj(vjp(conj(ct))).
    def conj(tree):
        return tree_util.tree_map(
            lambda x: np.conj(_as_np(x)) if np.iscomplexobj(_as_np(x)) else x, tree)
    cts_in = conj(f_vjp(conj(cotangent)))
    jvp_num = numerical_jvp(f, args, tangents, eps)
    lhs = _inner(cotangent, jvp_num)
    rhs = _inner(cts_in, tangents)
    scale = max(1.0, abs(lhs), abs(rhs))
    assert abs(lhs - rhs) <= atol * scale + rtol * abs(lhs), (
        f"VJP vs finite differences: <ct, J t> = {lhs} but <J^T ct, t> = {rhs}")


def check_grads(f: Callable, args: Sequence, order: int, modes: Sequence[str] = ("fwd", "rev"),
                atol=None, rtol=None, eps=None, rng=None):
    """Check derivatives of ``f`` at ``args`` up to ``order`` by finite differences, in forward
    ("fwd") and/or reverse ("rev") mode. Higher orders check derivatives of derivatives.
    Use float64 inputs (with x64 enabled) for tight tolerances."""
    f, args = _flat(f, args)
    args = tuple(args)
    rng = rng or np.random.default_rng(0)

    def check(fun, fun_args, remaining):
        if "fwd" in modes:
            check_jvp(fun, fun_args, atol, rtol, eps, rng)
        if "rev" in modes:
            check_vjp(fun, fun_args, atol, rtol, eps, rng)
        if remaining <= 1:
            return
        if "fwd" in modes:
            tangents = [_rand_like(rng, a) for a in fun_args]

            def fun_jvp(*primals):
                return jvp(fun, primals, tuple(tangents))[1]

            check(fun_jvp, fun_args, remaining - 1)
        if "rev" in modes:
            out = fun(*fun_args)
            cotangent = tree_util.tree_map(lambda o: _rand_like(rng, o), out)

            def fun_vjp(*primals):
                return vjp(fun, *primals)[1](cotangent)

            check(fun_vjp, fun_args, remaining - 1)

    check(f, args, order)


