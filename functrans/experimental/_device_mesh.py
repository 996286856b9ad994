"""Devices arranged into the array a ``Mesh`` is built from: the module JAX names
``jax.experimental.mesh_utils`` (``functrans.experimental.mesh_utils``).

functrans's devices have no physical topology (no torus or slice to follow), so devices are
laid out in their order: process by process, then device by device.

    >>> import functrans
    >>> from functrans.experimental import mesh_utils
    >>> mesh_utils.create_device_mesh((1,)).shape
    (1,)
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from functrans._devices import devices as _all_devices

__all__ = ["create_device_mesh", "create_hybrid_device_mesh"]


def _ordered(devices) -> list:
    devices = list(_all_devices() if devices is None else devices)
    return sorted(devices, key=lambda d: (getattr(d, "process_index", 0), d.id))


def create_device_mesh(mesh_shape: Sequence[int], devices=None, *,
                       contiguous_submeshes: bool = False,
                       allow_split_physical_axes: bool = False) -> np.ndarray:
    """An array of shape ``mesh_shape`` of ``devices`` (default: all devices), which must be
    exactly as many as the mesh has places."""
    devices = _ordered(devices)
    size = math.prod(mesh_shape)
    if size != len(devices):
        raise ValueError(f"Number of devices {len(devices)} must equal the product of "
                         f"mesh_shape {tuple(mesh_shape)}")
    return np.array(devices, dtype=object).reshape(tuple(mesh_shape))


def create_hybrid_device_mesh(mesh_shape: Sequence[int], dcn_mesh_shape: Sequence[int],
                              devices=None, *, process_is_granule: bool = False,
                              should_sort_granules_by_key: bool = True,
                              allow_split_physical_axes: bool = False) -> np.ndarray:
    """A mesh of shape ``mesh_shape * dcn_mesh_shape`` (elementwise) where each block of
    shape ``mesh_shape`` holds one process's devices and the blocks are arranged as
    ``dcn_mesh_shape``."""
    if len(mesh_shape) != len(dcn_mesh_shape):
        raise ValueError("mesh_shape and dcn_mesh_shape must have the same length")
    devices = _ordered(devices)
    by_process: dict = {}
    for d in devices:
        by_process.setdefault(getattr(d, "process_index", 0), []).append(d)
    granules = [by_process[k] for k in sorted(by_process)]
    if len(granules) != math.prod(dcn_mesh_shape):
        raise ValueError(f"{len(granules)} processes cannot form the dcn mesh "
                         f"{tuple(dcn_mesh_shape)}")
    # (dcn axes..., local axes...) -> each axis k as (dcn k, local k), then merged
    stacked = np.array([create_device_mesh(mesh_shape, g) for g in granules], dtype=object)
    stacked = stacked.reshape(tuple(dcn_mesh_shape) + tuple(mesh_shape))
    n = len(mesh_shape)
    order = [axis for k in range(n) for axis in (k, n + k)]
    return stacked.transpose(order).reshape(
        tuple(d * m for d, m in zip(dcn_mesh_shape, mesh_shape)))
