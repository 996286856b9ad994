"""``functrans.experimental``: what ``jax.experimental`` offers that JAX libraries build on.

``checkify`` (functional error checks), ``shard_map``, ``mesh_utils``, ``pjit``,
``io_callback``, ``ode`` (``odeint``), ``enable_x64``/``disable_x64``, ``multihost_utils``.
"""
from __future__ import annotations

import importlib
import sys

from functrans._flag_contexts import enable_x64  # noqa: F401
from functrans._callbacks import io_callback  # noqa: F401
from functrans.experimental import _device_mesh, _process_exchange

_SUBMODULES = ("checkify", "shard_map", "pjit", "ode", "layout", "hijax")

# JAX's names for two modules named here by what they hold: ``mesh_utils`` lays devices out
# into a mesh, ``multihost_utils`` exchanges host values between processes. Registered under
# both names, so ``import functrans.experimental.mesh_utils`` (and, through install_as_jax,
# ``import jax.experimental.mesh_utils``) finds them.
mesh_utils = _device_mesh
multihost_utils = _process_exchange
sys.modules[f"{__name__}.mesh_utils"] = mesh_utils
sys.modules[f"{__name__}.multihost_utils"] = multihost_utils


def disable_x64():
    """A context in which 64-bit types are off (``enable_x64(False)``)."""
    return enable_x64(False)


def cur_qdd(x):
    """See :func:`functrans.experimental.hijax.cur_qdd` (not supported)."""
    # deferred: the submodules of functrans.experimental load on first use (start-up time)
    from functrans.experimental.hijax import cur_qdd as hijax_cur_qdd
    return hijax_cur_qdd(x)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"functrans.experimental.{name}")
    raise AttributeError(f"module 'functrans.experimental' has no attribute {name!r}")
