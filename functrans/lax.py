"""``functrans.lax``: the primitives under ``jax.lax``'s names and signatures.

Each primitive family module lists its public functions in ``__all__``; this module gathers
them, gives the transcendental functions ``jax.lax``'s ``accuracy=`` keyword, and exports
the primitive objects themselves under JAX's names (``add_p``, ``dot_general_p``,
``scan_p``, ...) for code that inspects jaxprs or registers rules.
"""
from __future__ import annotations

import builtins as _builtins
import enum as _enum
import importlib as _importlib

from functrans.core import Primitive as _Primitive
from functrans.primitives.elementwise import *  # noqa: F401,F403
from functrans.primitives.structural import *  # noqa: F401,F403
from functrans.primitives.reductions import *  # noqa: F401,F403
from functrans.primitives.indexing import *  # noqa: F401,F403
from functrans.primitives.dot import *  # noqa: F401,F403
from functrans.primitives.convolution import *  # noqa: F401,F403
from functrans.primitives.decompositions import *  # noqa: F401,F403
from functrans.primitives.sorting import *  # noqa: F401,F403
from functrans.primitives.cond import *  # noqa: F401,F403
from functrans.primitives.while_loop import *  # noqa: F401,F403
from functrans.primitives.scan import *  # noqa: F401,F403
from functrans.primitives.collectives import *  # noqa: F401,F403
from functrans.primitives.fft import *  # noqa: F401,F403
from functrans.primitives.windowed import *  # noqa: F401,F403
from functrans.primitives.implicit import *  # noqa: F401,F403
from functrans.primitives.special import *  # noqa: F401,F403
from functrans.primitives.random_bits import (RandomAlgorithm, rng_bit_generator,  # noqa: F401
                                              rng_uniform)
from functrans.sharding._constraints import with_sharding_constraint  # noqa: F401

from functrans.primitives import elementwise as _elementwise  # noqa: E402
from functrans.primitives import special as _special  # noqa: E402

# jax.lax promotes no dtypes: lax.add(jnp.int32(1), 1.0) is a TypeError (the forms imported
# above let a Python scalar take the other operand's dtype, for the library's own use)
globals().update(_elementwise.LAX_FUNCTIONS_WITHOUT_PROMOTION)
globals().update(_special.LAX_FUNCTIONS_WITHOUT_PROMOTION)

from functrans import _lax_linalg as linalg  # noqa: E402,F401

# ``import functrans.lax.linalg`` (and ``from functrans.lax.linalg import ...``) as for
# jax.lax.linalg, though this module is not a package
import sys as _sys  # noqa: E402
_sys.modules.setdefault(__name__ + ".linalg", linalg)

# ---- accuracy= on transcendental functions ----------------------------------------------------


class AccuracyMode(_enum.Enum):
    """Accuracy request for transcendental functions (``lax.exp(x, accuracy=...)``). This
    backend has one implementation per function (accurate to a few ulps), used for every
    mode."""
    HIGHEST = 1
    DEFAULT = 2


class Tolerance:
    """An accuracy target ``(atol, rtol, ulps)`` for transcendental functions
    (``lax.tanh(x, accuracy=Tolerance(rtol=1e-6))``). This backend's one implementation per
    function is used whatever the target."""

    def __init__(self, atol: float = 0.0, rtol: float = 0.0, ulps: int = 0):
        if atol < 0 or rtol < 0 or ulps < 0:
            raise ValueError("Tolerance: atol, rtol and ulps must be non-negative")
        self.atol, self.rtol, self.ulps = float(atol), float(rtol), int(ulps)

    def __repr__(self):
        return f"Tolerance(atol={self.atol}, rtol={self.rtol}, ulps={self.ulps})"

    def __eq__(self, other):
        return isinstance(other, Tolerance) and \
            (self.atol, self.rtol, self.ulps) == (other.atol, other.rtol, other.ulps)

    def __hash__(self):
        return hash((self.atol, self.rtol, self.ulps))


def _with_accuracy(fn):
    def wrapped(x, *, accuracy=None):
        # One implementation per function on this backend (a few ulps): every accuracy
        # request (AccuracyMode or Tolerance) computes the same result.
        return fn(x)
    wrapped.__name__ = fn.__name__
    wrapped.__qualname__ = fn.__name__
    wrapped.__doc__ = (fn.__doc__ or "") + (
        "\n\n``accuracy`` (an ``AccuracyMode`` or ``Tolerance``) is accepted; this backend "
        "has one implementation, used for every accuracy request.")
    return wrapped


cbrt, cos, exp, exp2, expm1, log, log1p, logistic, rsqrt, sin, sqrt, tan, tanh = _builtins.map(  # noqa: F405
    _with_accuracy, (cbrt, cos, exp, exp2, expm1, log, log1p, logistic, rsqrt, sin,  # noqa: F405
                     sqrt, tan, tanh))  # noqa: F405

# ---- the primitive objects under jax.lax's names ----------------------------------------------

# jax.lax's exported primitive names. Those functrans has are bound below to its own Primitive
# objects; the rest (XLA-specific ones such as create_token_p) stay absent.
_JAX_PRIMITIVE_NAMES = (
    "abs_p", "acos_p", "acosh_p", "add_p", "after_all_p", "all_gather_p", "all_to_all_p",
    "and_p", "approx_top_k_p", "argmax_p", "argmin_p", "asin_p", "asinh_p", "atan2_p",
    "atan_p", "atanh_p", "axis_index_p", "bessel_i0e_p", "bessel_i1e_p",
    "bitcast_convert_type_p", "broadcast_in_dim_p", "cbrt_p", "ceil_p", "clamp_p", "clz_p",
    "complex_p", "concatenate_p", "cond_p", "conj_p", "conv_general_dilated_p",
    "convert_element_type_p", "copy_p", "cos_p", "cosh_p", "create_token_p",
    "cumlogsumexp_p", "cummax_p", "cummin_p", "cumprod_p", "cumsum_p", "dce_sink_p",
    "device_put_p", "digamma_p", "div_p", "dot_general_p", "dynamic_slice_p",
    "dynamic_update_slice_p", "eq_p", "eq_to_p", "erf_inv_p", "erf_p", "erfc_p", "exp2_p",
    "exp_p", "expm1_p", "fft_p", "floor_p", "gather_p", "ge_p", "gt_p", "igamma_grad_a_p",
    "igamma_p", "igammac_p", "imag_p", "integer_pow_p", "iota_p", "is_finite_p", "le_p",
    "le_to_p", "lgamma_p", "linear_solve_p", "log1p_p", "log_p", "logistic_p", "lt_p",
    "lt_to_p", "max_p", "min_p", "mul_p", "mulhi_p", "ne_p", "neg_p", "nextafter_p", "not_p",
    "optimization_barrier_p", "or_p", "pad_p", "pmax_p", "pmin_p", "polygamma_p",
    "population_count_p", "pow_p", "ppermute_p", "psum_p", "ragged_all_to_all_p", "real_p",
    "reduce_and_p", "reduce_max_p", "reduce_min_p", "reduce_or_p", "reduce_p",
    "reduce_precision_p", "reduce_prod_p", "reduce_sum_p", "reduce_window_max_p",
    "reduce_window_min_p", "reduce_window_p", "reduce_window_sum_p", "reduce_xor_p",
    "regularized_incomplete_beta_p", "rem_p", "reshape_p", "rev_p", "rng_bit_generator_p",
    "rng_uniform_p", "round_p", "rsqrt_p", "scan_p", "scatter_add_p", "scatter_max_p",
    "scatter_min_p", "scatter_mul_p", "scatter_p", "scatter_sub_p", "select_and_gather_add_p",
    "select_and_scatter_add_p", "select_and_scatter_p", "select_n_p", "sharding_constraint_p",
    "shift_left_p", "shift_right_arithmetic_p", "shift_right_logical_p", "sign_p", "sin_p",
    "sinh_p", "slice_p", "sort_p", "split_p", "sqrt_p", "square_p", "squeeze_p", "stack_p",
    "stage_p", "stop_gradient_p", "sub_p", "tan_p", "tanh_p", "tile_p", "top_k_p",
    "transpose_p", "unstack_p", "while_p", "xor_p", "zeta_p",
)

_PRIMITIVE_MODULES = ("elementwise", "structural", "reductions", "indexing", "dot",
                      "convolution", "decompositions", "sorting", "cond", "while_loop", "scan",
                      "collectives", "fft", "windowed", "implicit", "special", "random_bits")


def _export_primitives() -> list:
    found = {}
    for module_name in _PRIMITIVE_MODULES:
        module = _importlib.import_module(f"functrans.primitives.{module_name}")
        for name, value in vars(module).items():
            if name.endswith("_p") and isinstance(value, _Primitive):
                found.setdefault(name, value)
    exported = [name for name in _JAX_PRIMITIVE_NAMES if name in found]
    globals().update({name: found[name] for name in exported})
    return exported


_exported_primitives = _export_primitives()

# (after the export above, which binds mulhi_p wherever its module defines it)
mulhi = _elementwise.binary_fn_without_promotion(mulhi_p, "mulhi", mulhi.__doc__)  # noqa: F405,F821
