"""``jax._src.xla_bridge``: which backends have been started. functrans starts its CPU
devices on first use; ``_backends`` maps "cpu" to them once they exist (an empty dict
before), which is what libraries read to tell whether the device count can still change
(``XLA_FLAGS=--xla_force_host_platform_device_count=N`` is honoured until then)."""
from __future__ import annotations

from functrans import _devices


def __getattr__(name):
    if name == "_backends":
        return {"cpu": _devices.cpu_devices()} if _devices.cpu_devices_initialized() else {}
    raise AttributeError(f"module 'jax._src.xla_bridge' has no attribute {name!r}")


def backends_are_initialized() -> bool:
    return _devices.cpu_devices_initialized()
