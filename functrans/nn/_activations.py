"""Activation functions, softmax and friends (``jax.nn``'s surface), with ``logmeanexp``
and ``log1mexp``.

Each takes arrays or Python numbers; integer inputs are computed in the default float dtype.
Functions with a kink (``relu``, ``relu6``) pick the derivative 0 at the kink, as JAX does,
so ``grad(relu)(0.0) == 0``.
"""
from __future__ import annotations

import functools
import math

import numpy as np

import functrans.numpy as jnp
from functrans import _dtypes, lax
from functrans.primitives import elementwise as ew
from functrans._custom_derivatives import custom_jvp
from functrans.core import get_aval
from functrans.numpy._log_sum_exp import full_like as _full_like
from functrans.numpy._log_sum_exp import keep as _keep
from functrans.numpy._log_sum_exp import logsumexp
from functrans.numpy._log_sum_exp import mask_of as _mask
from functrans.numpy._log_sum_exp import masked_max as _masked_max
from functrans.numpy._log_sum_exp import masked_sum as _masked_sum
from functrans.numpy._log_sum_exp import reduced_axes as _axes
from functrans.numpy._promotion import broadcast_to_shape, promote_args_inexact, to_array

__all__ = [
    "relu", "relu6", "sigmoid", "log_sigmoid", "softplus", "soft_sign", "silu", "swish", "gelu",
    "elu", "leaky_relu", "celu", "selu", "hard_tanh", "hard_sigmoid", "hard_silu", "hard_swish",
    "tanh", "identity", "glu", "softmax", "log_softmax", "logsumexp", "one_hot", "standardize",
    "sparse_plus", "sparse_sigmoid", "squareplus", "mish", "logmeanexp", "log1mexp",
]


# =============================================================================================
# Helpers: dtypes, axes, masks
# =============================================================================================

def _inexact(name: str, x):
    (x,) = promote_args_inexact(name, x)
    return x


def _where(condition, x, y):
    return lax.select(condition, x, y)


# =============================================================================================
# Activations
# =============================================================================================

def _is_nan(x):
    return ew.ne(x, x)


def relu(x):
    """Rectified linear unit ``max(x, 0)``; its derivative at 0 is 0 (as in JAX).

    Written as a select rather than ``max`` so that the derivative at the kink is that of
    the constant branch (``max``'s derivative splits ties in half); NaN stays NaN.

        >>> import functrans
        >>> relu(-1.0), functrans.grad(relu)(0.0)
        (Array(0., dtype=float32, weak_type=True), Array(0., dtype=float32, weak_type=True))
    """
    x = to_array(x)
    zero = _full_like(x, 0)
    return _where(ew.gt(x, zero), x, _where(_is_nan(x), x, zero))


def relu6(x):
    """``min(max(x, 0), 6)``; derivative 0 at both kinks (as in JAX).

        >>> relu6(7.0)
        Array(6., dtype=float32, weak_type=True)
    """
    x = to_array(x)
    zero, six = _full_like(x, 0), _full_like(x, 6)
    inside = ew.bitwise_and(ew.gt(x, zero), ew.lt(x, six))
    outside = _where(ew.ge(x, six), six, _where(_is_nan(x), x, zero))
    return _where(inside, x, outside)


def sigmoid(x):
    """Logistic sigmoid ``1 / (1 + exp(-x))``.

        >>> sigmoid(0.0)
        Array(0.5, dtype=float32, weak_type=True)
    """
    return lax.logistic(_inexact("sigmoid", x))


def softplus(x):
    """``log(1 + exp(x))``, computed without overflow as
    ``max(x, 0) + log1p(exp(min(x, 0) - max(x, 0)))`` (whose derivative at 0 is 1/2).

        >>> import functrans.numpy as jnp
        >>> softplus(jnp.array([0.0]))
        Array([0.6931472], dtype=float32)
    """
    x = _inexact("softplus", x)
    zero = _full_like(x, 0)
    high = ew.max(x, zero)
    return ew.add(high, lax.log1p(lax.exp(ew.sub(ew.min(x, zero), high))))


def log_sigmoid(x):
    """``log(sigmoid(x)) = -softplus(-x)``, accurate for large ``|x|``.

        >>> import functrans.numpy as jnp
        >>> log_sigmoid(jnp.array([0.0]))
        Array([-0.6931472], dtype=float32)
    """
    x = _inexact("log_sigmoid", x)
    return lax.neg(softplus(lax.neg(x)))


def soft_sign(x):
    """``x / (|x| + 1)``.

        >>> import functrans.numpy as jnp
        >>> soft_sign(jnp.array([1.0]))
        Array([0.5], dtype=float32)
    """
    x = _inexact("soft_sign", x)
    return ew.div(x, ew.add(lax.abs(x), _full_like(x, 1)))


def silu(x):
    """Sigmoid linear unit (swish) ``x * sigmoid(x)``.

        >>> silu(0.0)
        Array(0., dtype=float32, weak_type=True)
    """
    x = _inexact("silu", x)
    return ew.mul(x, lax.logistic(x))


swish = silu


def gelu(x, approximate: bool = True):
    """Gaussian error linear unit. ``approximate=True`` (the default, as in JAX) uses the
    tanh form ``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``; otherwise the exact
    ``x Phi(x) = x/2 erfc(-x / sqrt 2)``.

        >>> gelu(1.0, approximate=False)
        Array(0.8413447, dtype=float32, weak_type=True)
    """
    x = _inexact("gelu", x)
    if approximate:
        cubic = ew.mul(_full_like(x, 0.044715), lax.integer_pow(x, 3))
        inner = ew.mul(_full_like(x, math.sqrt(2 / math.pi)), ew.add(x, cubic))
        return ew.mul(ew.mul(_full_like(x, 0.5), x), ew.add(_full_like(x, 1), lax.tanh(inner)))
    return ew.mul(x, ew.mul(lax.erfc(ew.mul(x, _full_like(x, -1 / math.sqrt(2)))),
                              _full_like(x, 0.5)))


def elu(x, alpha=1.0):
    """Exponential linear unit: ``x`` for ``x > 0``, else ``alpha (exp(x) - 1)``.

        >>> elu(-1.0)
        Array(-0.63212055, dtype=float32, weak_type=True)
    """
    x = _inexact("elu", x)
    positive = ew.gt(x, _full_like(x, 0))
    # exp only of the non-positive part, so large x cannot overflow into the unused branch
    negative_part = ew.mul(_full_like(x, alpha), lax.expm1(_where(positive, _full_like(x, 0), x)))
    return _where(positive, x, negative_part)


def leaky_relu(x, negative_slope=1e-2):
    """``x`` for ``x >= 0``, else ``negative_slope * x``.

        >>> leaky_relu(-2.0, 0.1)
        Array(-0.2, dtype=float32, weak_type=True)
    """
    x = _inexact("leaky_relu", x)
    return _where(ew.ge(x, _full_like(x, 0)), x, ew.mul(_full_like(x, negative_slope), x))


def celu(x, alpha=1.0):
    """Continuously-differentiable ELU: ``max(x, 0) + alpha expm1(min(x, 0) / alpha)``.

        >>> celu(-1.0, 1.0)
        Array(-0.63212055, dtype=float32, weak_type=True)
    """
    x = _inexact("celu", x)
    zero = _full_like(x, 0)
    return ew.add(ew.max(x, zero),
                   ew.mul(_full_like(x, alpha), lax.expm1(ew.div(ew.min(x, zero),
                                                                   _full_like(x, alpha)))))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(x):
    """Scaled ELU with the self-normalizing constants (alpha 1.6733, scale 1.0507).

        >>> selu(1.0)
        Array(1.050701, dtype=float32, weak_type=True)
    """
    x = _inexact("selu", x)
    return ew.mul(_full_like(x, _SELU_SCALE), elu(x, _SELU_ALPHA))


def hard_tanh(x):
    """``clip(x, -1, 1)``.

        >>> hard_tanh(3.0)
        Array(1., dtype=float32, weak_type=True)
    """
    x = _inexact("hard_tanh", x)
    return ew.min(ew.max(x, _full_like(x, -1)), _full_like(x, 1))


def hard_sigmoid(x):
    """``relu6(x + 3) / 6``.

        >>> hard_sigmoid(0.0)
        Array(0.5, dtype=float32, weak_type=True)
    """
    x = _inexact("hard_sigmoid", x)
    return ew.div(relu6(ew.add(x, _full_like(x, 3))), _full_like(x, 6))


def hard_silu(x):
    """``x * hard_sigmoid(x)``.

        >>> hard_silu(3.0)
        Array(3., dtype=float32, weak_type=True)
    """
    x = _inexact("hard_silu", x)
    return ew.mul(x, hard_sigmoid(x))


hard_swish = hard_silu


def tanh(x):
    """Hyperbolic tangent.

        >>> tanh(0.0)
        Array(0., dtype=float32, weak_type=True)
    """
    return lax.tanh(_inexact("tanh", x))


def identity(x):
    """``x`` unchanged.

        >>> identity(2.0)
        2.0
    """
    return x


def glu(x, axis=-1):
    """Gated linear unit: the first half of ``axis`` times sigmoid of the second half.

        >>> import functrans.numpy as jnp
        >>> glu(jnp.array([2.0, 0.0]))
        Array([1.], dtype=float32)
    """
    x = _inexact("glu", x)
    shape = get_aval(x).shape
    axis = int(axis) % len(shape)
    if shape[axis] % 2:
        raise ValueError(f"glu: axis {axis} of shape {shape} must have even size")
    half = shape[axis] // 2
    first = lax.slice_in_dim(x, 0, half, axis=axis)
    second = lax.slice_in_dim(x, half, 2 * half, axis=axis)
    return ew.mul(first, lax.logistic(second))


def sparse_plus(x):
    """A smooth ReLU made of three pieces: 0 for ``x <= -1``, ``(x + 1)**2 / 4`` between -1
    and 1, and ``x`` for ``x >= 1`` (its derivative is :func:`sparse_sigmoid`).

        >>> import functrans.numpy as jnp
        >>> sparse_plus(jnp.array([-2.0, 0.0, 2.0]))
        Array([0.  , 0.25, 2.  ], dtype=float32)
    """
    x = _inexact("sparse_plus", x)
    quadratic = (x + 1) ** 2 / 4
    return jnp.where(x <= -1, jnp.zeros_like(x), jnp.where(x >= 1, x, quadratic))


def sparse_sigmoid(x):
    """The piecewise-linear sigmoid ``clip((x + 1) / 2, 0, 1)``: the derivative of
    :func:`sparse_plus`.

        >>> import functrans.numpy as jnp
        >>> sparse_sigmoid(jnp.array([-2.0, 0.0, 0.5]))
        Array([0.  , 0.5 , 0.75], dtype=float32)
    """
    x = _inexact("sparse_sigmoid", x)
    return 0.5 * jnp.clip(x + 1, 0, 2)


def squareplus(x, b=4):
    """``(x + sqrt(x**2 + b)) / 2``: a softplus-like curve made of algebraic operations only.

        >>> import functrans.numpy as jnp
        >>> squareplus(jnp.array([0.0, 1.5]))
        Array([1., 2.], dtype=float32)
    """
    x = _inexact("squareplus", x)
    return (x + jnp.sqrt(x * x + b)) / 2


def mish(x):
    """Mish, ``x * tanh(softplus(x))``.

        >>> import functrans.numpy as jnp
        >>> mish(jnp.array([0.0, 1.0]))
        Array([0.       , 0.8650984], dtype=float32)
    """
    x = _inexact("mish", x)
    return x * jnp.tanh(softplus(x))


# =============================================================================================
# Softmax, log-softmax, logsumexp
# =============================================================================================

def softmax(x, axis=-1, where=None):
    """``exp(x) / sum(exp(x))`` along ``axis``, computed after subtracting the maximum.
    Entries where the mask ``where`` is False do not take part and get 0.

        >>> import functrans.numpy as jnp
        >>> softmax(jnp.array([0.0, 0.0]))
        Array([0.5, 0.5], dtype=float32)
    """
    x = _inexact("softmax", x)
    shape = get_aval(x).shape
    return _softmax(x, _axes(axis, len(shape)), _mask(where, shape))


def _softmax_of(x, axes, mask):
    shape = get_aval(x).shape
    # the shift cancels in the ratio, so it needs no derivative
    shift = lax.stop_gradient(_keep(_masked_max(x, axes, mask), shape, axes))
    shift = _where(jnp.isfinite(shift), shift, _full_like(shift, 0))
    unnormalized = lax.exp(ew.sub(x, shift))
    if mask is not None:
        unnormalized = _where(mask, unnormalized, _full_like(unnormalized, 0))
    total = _keep(lax.reduce_sum(unnormalized, axes), shape, axes)
    return ew.div(unnormalized, total)


@functools.partial(custom_jvp, nondiff_argnums=(1,))
def _softmax(x, axes, mask):
    return _softmax_of(x, axes, mask)


@_softmax.defjvp
def _softmax_jvp(axes, primals, tangents):
    # d softmax = y * (dx - sum(y * dx)), as JAX's rule: the derivative keeps only the output
    # y, where differentiating the formula would also keep the exponentials (in attention, a
    # second [batch, heads, query, key] array)
    (x, mask), (dx, _) = primals, tangents
    y = _softmax(x, axes, mask)
    total = lax.reduce_sum(lax.mul(y, dx), axes)
    return y, lax.mul(y, lax.sub(dx, _keep(total, get_aval(x).shape, axes)))


def log_softmax(x, axis=-1, where=None):
    """``x - logsumexp(x)`` along ``axis``; masked-out entries (``where`` False) get -inf.

        >>> import functrans.numpy as jnp
        >>> log_softmax(jnp.array([0.0, 0.0]))
        Array([-0.6931472, -0.6931472], dtype=float32)
    """
    x = _inexact("log_softmax", x)
    shape = get_aval(x).shape
    axes = _axes(axis, len(shape))
    mask = _mask(where, shape)
    shift = lax.stop_gradient(_keep(_masked_max(x, axes, mask), shape, axes))
    shift = _where(jnp.isfinite(shift), shift, _full_like(shift, 0))
    shifted = ew.sub(x, shift)
    log_total = lax.log(_masked_sum(lax.exp(shifted), axes, mask))
    out = ew.sub(shifted, _keep(log_total, shape, axes))
    if mask is not None:
        out = _where(mask, out, _full_like(out, -np.inf))
    return out


def logmeanexp(x, axis=None, where=None, keepdims: bool = False):
    """``log(mean(exp(x)))`` over ``axis``, computed stably as ``logsumexp(x) - log(n)``
    (``n`` counts only the entries with ``where`` True when a mask is given).

        >>> import functrans.numpy as jnp
        >>> logmeanexp(jnp.array([1000.0, 1000.0]))
        Array(1000., dtype=float32)
    """
    x = _inexact("logmeanexp", x)
    total = logsumexp(x, axis=axis, keepdims=keepdims, where=where)
    if where is None:
        axes = range(x.ndim) if axis is None else (axis if isinstance(axis, (tuple, list))
                                                   else (axis,))
        count = 1
        for a in axes:
            count *= x.shape[int(a) % x.ndim] if x.ndim else 1
        return total - jnp.log(jnp.asarray(count, total.dtype))
    mask = jnp.broadcast_to(jnp.asarray(where, bool), x.shape)
    count = jnp.sum(mask, axis=axis, keepdims=keepdims, dtype=total.dtype)
    return total - jnp.log(count)


def log1mexp(x):
    """``log(1 - exp(-x))`` for ``x >= 0``, accurate at both ends (NaN for ``x < 0``).

    Near 0, ``1 - exp(-x)`` cancels, so it is computed as ``log(-expm1(-x))``; for large
    ``x``, ``exp(-x)`` is tiny, so ``log1p(-exp(-x))`` keeps its digits. The switch point
    ``log(2)`` is where both forms lose the least (Maechler, 2012). (The example shows 5
    digits: the last ones of a float32 result depend on the CPU; see docs/compiler.md.)

        >>> import functrans.numpy as jnp
        >>> log1mexp(jnp.array([1e-8, 1.0, 50.0]))  # doctest: +ELLIPSIS
        Array([-1.8420...e+01, -4.5867...e-01, -1.9287...e-22], dtype=float32)
    """
    x = _inexact("log1mexp", x)
    log2 = jnp.log(jnp.asarray(2.0, x.dtype))
    small = x < log2
    # the large-x form sees only large x: at x = 0 its derivative is infinite, and a zero
    # cotangent times that infinity would turn the gradient there into NaN
    large_x = jnp.where(small, log2, x)
    return jnp.where(small, jnp.log(-jnp.expm1(-x)), jnp.log1p(-jnp.exp(-large_x)))


# =============================================================================================
# one_hot, standardize
# =============================================================================================

def one_hot(x, num_classes: int, dtype=None, axis=-1):
    """One-hot encoding: ``out[..., c] = (x[...] == c)`` with a new axis of size
    ``num_classes`` at ``axis``. Out-of-range indices give all-zero rows.

        >>> import functrans.numpy as jnp
        >>> one_hot(jnp.array([0, 2]), 3)
        Array([[1., 0., 0.],
               [0., 0., 1.]], dtype=float32)
    """
    dtype = _dtypes.default_float_dtype() if dtype is None else _dtypes.canonicalize_dtype(dtype)
    try:
        num_classes = int(num_classes)
    except TypeError as err:
        raise TypeError("one_hot: num_classes must be a static integer (it sets the output "
                        "shape)") from err
    x = to_array(x)
    aval = get_aval(x)
    out_ndim = aval.ndim + 1
    axis = int(axis) % out_ndim
    out_shape = aval.shape[:axis] + (num_classes,) + aval.shape[axis:]
    x_dims = tuple(i for i in range(out_ndim) if i != axis)
    if _dtypes.is_integer(aval.dtype):
        classes = lax.broadcasted_iota(aval.dtype, out_shape, axis)
        spread = lax.broadcast_in_dim(x, out_shape, x_dims)
    else:
        # float labels compare equal to whole class numbers only
        classes = lax.broadcasted_iota(_dtypes.default_float_dtype(), out_shape, axis)
        spread = lax.broadcast_in_dim(lax.convert_element_type(x, classes.dtype), out_shape, x_dims)
    return lax.convert_element_type(ew.eq(spread, classes), dtype)


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None):
    """``(x - mean) / sqrt(variance + epsilon)`` with the mean and variance over ``axis``
    (computed when not given).

        >>> import functrans.numpy as jnp
        >>> standardize(jnp.array([1.0, 3.0]))
        Array([-0.999995,  0.999995], dtype=float32)
    """
    x = _inexact("standardize", x)
    shape = get_aval(x).shape
    axes = _axes(axis, len(shape))
    mask = _mask(where, shape)
    if mask is None:
        count = float(np.prod([shape[a] for a in axes]))
        count = _full_like(x, count)
    else:
        ones = lax.convert_element_type(mask, get_aval(x).dtype)
        count = _keep(lax.reduce_sum(ones, axes), shape, axes)

    def average(v):
        return ew.div(_keep(_masked_sum(v, axes, mask), shape, axes), count)

    if mean is None:
        mean = average(x)
    else:
        (mean,) = promote_args_inexact("standardize", mean)
        mean = _broadcast(mean, shape, get_aval(x).dtype)
    if variance is None:
        # E[x^2] - E[x]^2 (as JAX computes it)
        variance = ew.sub(average(ew.mul(x, x)), ew.mul(mean, mean))
    else:
        (variance,) = promote_args_inexact("standardize", variance)
        variance = _broadcast(variance, shape, get_aval(x).dtype)
    return ew.mul(ew.sub(x, mean), lax.rsqrt(ew.add(variance, _full_like(x, epsilon))))


def _broadcast(v, shape, dtype):
    return broadcast_to_shape(lax.convert_element_type(v, dtype), shape)
