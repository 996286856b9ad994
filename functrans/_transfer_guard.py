"""Transfer guards: allow, log or refuse data moving between the host and devices.

A transfer is *explicit* when the program asks for it (``device_put``, ``device_get``) and
*implicit* otherwise: a NumPy array or Python scalar passed to a jitted function, or turned
into an array by ``jnp.asarray``/``jnp.array``, is copied to a device without being asked.
Each direction (host to device, device to host, device to device) has a level:

- ``"allow"``: every transfer (the default);
- ``"log"``: log implicit transfers (logger ``functrans``, level WARNING);
- ``"disallow"``: raise ``JaxRuntimeError`` for implicit transfers;
- ``"log_explicit"`` / ``"disallow_explicit"``: the same for explicit transfers too.

The level comes from the innermost guard context manager of this thread for that
direction, else from the config option for the direction
(``jax_transfer_guard_host_to_device``, ...), else from ``jax_transfer_guard``.

On the CPU an array's buffer is host memory, so reading it (``np.asarray(x)``, ``float(x)``,
printing) moves nothing, and the device-to-host guard applies, as in JAX, to arrays held on
an accelerator.
"""
from __future__ import annotations

import contextlib
import logging
import threading

from functrans import _devices, core
from functrans._config import check_enum, config
from functrans.errors import JaxRuntimeError

DIRECTIONS = ("host_to_device", "device_to_host", "device_to_device")
_OPTIONS = ("transfer_guard",) + tuple(f"transfer_guard_{d}" for d in DIRECTIONS)

logger = logging.getLogger("functrans")


class _State(threading.local):
    def __init__(self):
        self.levels = {}  # direction -> level set by this thread's context managers


_thread = _State()


class _Switch:
    """``on`` is True while some guard may act (a context is open in some thread, or a
    config option is set to a level other than allow): transfers check nothing otherwise."""
    on = False
    open_contexts = 0


switch = _Switch()
_lock = threading.Lock()


def validate(value) -> None:
    """Raise ValueError (JAX's message) unless ``value`` is a transfer guard level or None."""
    check_enum("transfer_guard", value)


def _update_switch(_value=None) -> None:
    configured = any(config.read(o) not in (None, "allow") for o in _OPTIONS)
    switch.on = configured or switch.open_contexts > 0


for _option in _OPTIONS:
    config.on_change(_option, _update_switch)


def level(direction: str) -> str:
    """The level in force for ``direction`` in this thread."""
    value = _thread.levels.get(direction)
    if value is None:
        value = config.read(f"transfer_guard_{direction}")
    if value is None:
        value = config.read("transfer_guard")
    return value or "allow"


def check(direction: str, explicit: bool, describe) -> None:
    """Log or refuse one transfer as the guard for ``direction`` says; ``describe()`` gives
    what moves (called only when needed)."""
    mode = level(direction)
    if mode == "allow" or (explicit and not mode.endswith("_explicit")):
        return
    what = f"{direction.replace('_', '-')} transfer: {describe()}"
    if mode.startswith("log"):
        logger.warning(what)
        return
    raise JaxRuntimeError(f"INVALID_ARGUMENT: Disallowed {what}")


def describe_host_to_device(aval, device) -> str:
    device = device if device is not None else _devices.default_device()
    return f"aval={aval!r}, dst_sharding=SingleDeviceSharding(device={device!r})"


def _check_implicit_host_to_device(aval) -> None:
    """The guard on host data that the layers below this one (the primitives' lax-level
    functions) turn into an Array: registered in the core. While a program is being staged
    the data becomes a constant of the program instead, as in JAX."""
    if switch.on and not core.is_staging():
        check("host_to_device", False, lambda: describe_host_to_device(aval, None))


core.register_implicit_transfer_check(_check_implicit_host_to_device)


@contextlib.contextmanager
def _guard(directions, new_val: str):
    validate(new_val)
    saved = dict(_thread.levels)
    with _lock:
        switch.open_contexts += 1
        switch.on = True
    try:
        _thread.levels.update({d: new_val for d in directions})
        yield
    finally:
        _thread.levels.clear()
        _thread.levels.update(saved)
        with _lock:
            switch.open_contexts -= 1
            _update_switch()


def transfer_guard(new_val: str):
    """Context manager: the guard level for every direction in this thread.

    Example::

        with functrans.transfer_guard("disallow"):
            f(x)                   # fine: x is already an Array
            f(np.ones(3))          # JaxRuntimeError: an implicit host-to-device transfer
            functrans.device_put(np.ones(3))   # fine: explicit
    """
    return _guard(DIRECTIONS, new_val)


def transfer_guard_host_to_device(new_val: str):
    """Context manager: the guard level for host-to-device transfers in this thread (see
    :func:`transfer_guard`)."""
    return _guard(("host_to_device",), new_val)


def transfer_guard_device_to_host(new_val: str):
    """Context manager: the guard level for device-to-host transfers in this thread (see
    :func:`transfer_guard`)."""
    return _guard(("device_to_host",), new_val)


def transfer_guard_device_to_device(new_val: str):
    """Context manager: the guard level for device-to-device transfers in this thread (see
    :func:`transfer_guard`)."""
    return _guard(("device_to_device",), new_val)
