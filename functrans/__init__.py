"""functrans: composable transforms of functional array programs.

    >>> import functrans, functrans.numpy as jnp
    >>> functrans.grad(lambda x: jnp.sum(x ** 2))(jnp.arange(3.0))
    Array([0., 2., 4.], dtype=float32)
"""
from __future__ import annotations

from functrans.version import __version__  # noqa: F401

from functrans._config import config  # noqa: F401
from functrans import core  # noqa: F401
from functrans._array import Array  # noqa: F401
from functrans import tree_util  # noqa: F401
from functrans.primitives import elementwise as _elementwise  # noqa: F401
from functrans.primitives import structural as _structural  # noqa: F401
from functrans.primitives import reductions as _reductions  # noqa: F401
from functrans._api import (ShapeDtypeStruct, block_until_ready, device_put,  # noqa: F401
                            effects_barrier, eval_shape,
                            grad, hessian, jacfwd, jacrev, jvp, linearize, make_jaxpr,
                            value_and_grad, vjp, vmap)
from functrans._jit import jit  # noqa: F401
from functrans._custom_derivatives import custom_jvp, custom_vjp  # noqa: F401
from functrans._remat import checkpoint_policies, remat  # noqa: F401
# functrans.checkpoint is the save/restore module; calling it is remat (jax.checkpoint)
from functrans import checkpoint  # noqa: F401,E402
from functrans._devices import (default_device, device_count, devices, local_device_count,  # noqa: F401
                                local_devices)
from functrans import numpy  # noqa: F401
from functrans import lax  # noqa: F401
from functrans import distributed  # noqa: F401
from functrans.distributed import process_count, process_index  # noqa: F401
from functrans._pmap import ShardedArray, device_put_replicated, device_put_sharded, pmap  # noqa: F401
from functrans import debug  # noqa: F401
from functrans import sharding  # noqa: F401
from functrans.sharding import (NamedSharding, P, make_array_from_callback,  # noqa: F401
                                make_array_from_process_local_data,
                                make_array_from_single_device_arrays, make_mesh, reshard,
                                set_mesh, shard_map)
from functrans import random  # noqa: F401
from functrans import nn  # noqa: F401
from functrans import optim  # noqa: F401
from functrans._disable_jit import disable_jit  # noqa: F401
from functrans._transfer_guard import (transfer_guard,  # noqa: F401
                                       transfer_guard_device_to_device,
                                       transfer_guard_device_to_host,
                                       transfer_guard_host_to_device)
from functrans._config import default_matmul_precision  # noqa: F401
from functrans._callbacks import *  # noqa: F401,F403
from functrans._environment import *  # noqa: F401,F403
from functrans._program_transforms import *  # noqa: F401,F403
from functrans._custom_derivatives import custom_gradient  # noqa: F401
from functrans._flag_contexts import (check_tracer_leaks, checking_leaks,  # noqa: F401
                                      debug_infs, debug_nans, enable_x64, explain_cache_misses,
                                      log_compiles, numpy_dtype_promotion,
                                      numpy_rank_promotion)
from functrans._process_state import (copy_to_host_async, host_count, host_id,  # noqa: F401
                                      host_ids, live_arrays, process_indices)
from functrans._devices import Device  # noqa: F401
from functrans._dtypes import float0  # noqa: F401
from functrans import custom_batching  # noqa: F401
from functrans import errors  # noqa: F401
from functrans import version  # noqa: F401
from functrans.version import __version_info__  # noqa: F401

from functrans._refs import Ref, new_ref  # noqa: F401
from functrans._as_jax import install_as_jax, uninstall_as_jax  # noqa: F401
from functrans.core import (ConcretizationTypeError, TracerArrayConversionError,  # noqa: F401
                            TracerBoolConversionError,
                            TracerIntegerConversionError, UnexpectedTracerError)


# Imported on first use (``functrans.scipy.special``, ``functrans.tree.map``, ...), as a
# program that never touches them should not pay for importing them.
_LAZY_MODULES = ("scipy", "tree", "flatten_util", "dtypes", "image", "ops", "typing", "dlpack",
                 "stages", "custom_derivatives", "ad_checkpoint", "profiler", "export",
                 "monitoring", "api_util", "extend", "experimental")


def __getattr__(name):
    if name in _LAZY_MODULES:
        import importlib
        return importlib.import_module(f"functrans.{name}")
    raise AttributeError(f"module 'functrans' has no attribute {name!r}")


def __dir__():
    # the lazily imported submodules are part of the namespace before their first use
    return sorted(set(globals()) | set(_LAZY_MODULES))


del annotations  # the __future__ import's binding is no part of the API
