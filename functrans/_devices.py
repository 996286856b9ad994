"""Devices: CPU devices in this process (``FUNCTRANS_CPU_DEVICES`` of them), and any others
a backend adds (GPUs). Multi-process runs add the other processes' devices."""
from __future__ import annotations

import os
import re
import threading

from functrans._config import config
from functrans import _backends, distributed


class Device:
    """One device: a platform, an id unique across processes, and the process it belongs to."""

    __slots__ = ("platform", "id", "process_index", "local_id")

    def __init__(self, platform: str, id: int, process_index: int = 0, local_id: int | None = None):
        self.platform = platform
        self.id = id
        self.process_index = process_index
        self.local_id = id if local_id is None else local_id

    @property
    def device_kind(self) -> str:
        return self.platform

    def __repr__(self):
        return f"{self.platform.capitalize()}Device(id={self.id})" if self.platform != "cpu" \
            else f"CpuDevice(id={self.id})"

    def __hash__(self):
        return hash((self.platform, self.id))

    def __eq__(self, other):
        return isinstance(other, Device) and (self.platform, self.id) == (other.platform, other.id)


_lock = threading.Lock()
_cpu_devices: list[Device] | None = None
_extra_platforms: dict[str, callable] = {}


def register_platform(platform: str, device_lister) -> None:
    """A backend adds a platform (``"gpu"``) with a function listing its devices."""
    _extra_platforms[platform] = device_lister


def _process_info():
    return distributed.process_index(), distributed.process_count()


def _xla_flags_device_count() -> int | None:
    """JAX's way of asking for several CPU devices, honoured when functrans's own
    (``FUNCTRANS_CPU_DEVICES``, ``cpu_device_count``) is not used: the last
    ``--xla_force_host_platform_device_count=N`` in ``XLA_FLAGS``, read when the devices
    are first made (libraries such as chex set it at run time, before any computation)."""
    found = re.findall(r"--xla_force_host_platform_device_count=(\d+)",
                       os.environ.get("XLA_FLAGS", ""))
    return int(found[-1]) if found else None


def cpu_devices_initialized() -> bool:
    """Whether the CPU devices have been made (after which their number is fixed until
    ``cpu_device_count`` changes)."""
    return _cpu_devices is not None


def cpu_devices() -> list[Device]:
    global _cpu_devices
    if _cpu_devices is None:
        with _lock:
            if _cpu_devices is None:
                count = int(config.cpu_device_count)
                if "FUNCTRANS_CPU_DEVICES" not in os.environ and \
                        not config.was_updated("cpu_device_count"):
                    count = _xla_flags_device_count() or count
                if count < 1:
                    raise ValueError(f"cpu_device_count must be >= 1, got {count}")
                _, nproc = _process_info()
                _cpu_devices = [Device("cpu", p * count + i, p, i)
                                for p in range(nproc) for i in range(count)]
    return _cpu_devices


def _reset_cpu_devices(_value=None) -> None:
    global _cpu_devices
    _cpu_devices = None


config.on_change("cpu_device_count", _reset_cpu_devices)
distributed.on_membership_change(_reset_cpu_devices)


def devices(backend: str | None = None) -> list[Device]:
    """All devices of a platform (``"cpu"`` or ``"gpu"``), across processes."""
    platform = backend or default_platform()
    if platform in ("cuda",):
        platform = "gpu"
    if platform == "cpu":
        return list(cpu_devices())
    lister = _extra_platforms.get(platform)
    if lister is None:
        present = ", ".join(["cpu", *sorted(_extra_platforms)])
        raise RuntimeError(f"Unknown backend: {platform!r} requested, but no platforms that are "
                           f"instances of {platform} are present (is its backend installed?). "
                           f"Platforms present are: {present}")
    return list(lister())


def default_platform() -> str:
    """``"gpu"`` when a GPU backend is available and no other default is configured."""
    return _backends.default_platform()


def local_devices(process_index: int | None = None, backend: str | None = None) -> list[Device]:
    index = distributed.process_index() if process_index is None else process_index
    return [d for d in devices(backend) if d.process_index == index]


def device_count(backend: str | None = None) -> int:
    return len(devices(backend))


def local_device_count(backend: str | None = None) -> int:
    return len(local_devices(backend=backend))


def default_device() -> Device:
    return local_devices()[0]
