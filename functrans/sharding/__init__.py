"""``functrans.sharding``: meshes of devices, partition specs and shardings, as
``jax.sharding``.

    >>> import functrans, numpy as np
    >>> from functrans.sharding import NamedSharding, PartitionSpec as P
    >>> mesh = functrans.make_mesh((functrans.device_count(),), ('data',))
    >>> x = functrans.device_put(np.zeros((8, 2)), NamedSharding(mesh, P('data')))
    >>> x.sharding.spec
    P('data',)

See docs/sharding.md: ``device_put`` places arrays, ``jit`` partitions programs over
sharded arguments, and ``shard_map`` runs per-device code with collectives.
"""
from __future__ import annotations

from functrans.sharding._mesh import (AbstractMesh, AxisType, Mesh,  # noqa: F401
                                      get_abstract_mesh, get_mesh,
                                      make_mesh, set_mesh)
from functrans.sharding._partition_spec import P, PartitionSpec  # noqa: F401
from functrans.sharding._shardings import (DuplicateSpecError, NamedSharding,  # noqa: F401
                                           Sharding, SingleDeviceSharding,
                                           make_single_device_sharding)
from functrans.sharding._arrays import (PartitionedArray, Shard,  # noqa: F401
                                        make_array_from_callback,
                                        make_array_from_process_local_data,
                                        make_array_from_single_device_arrays)
from functrans.sharding._shard_map import shard_map  # noqa: F401
from functrans.sharding._visualize import visualize_array_sharding, visualize_sharding  # noqa: F401
from functrans.sharding._constraints import auto_axes, explicit_axes, reshard  # noqa: F401
from functrans import _array
from functrans import core as _core
from functrans.sharding import _arrays, _constraints
from functrans.sharding import _partitioned

_partitioned.install()  # jit partitions calls over split arrays and with in/out_shardings

__all__ = ["AbstractMesh", "AxisType", "DuplicateSpecError", "Mesh", "NamedSharding", "P",
           "PartitionSpec", "PartitionedArray", "Shard", "Sharding", "SingleDeviceSharding",
           "auto_axes", "explicit_axes",
           "get_abstract_mesh", "get_mesh", "make_array_from_callback",
           "make_array_from_process_local_data", "make_array_from_single_device_arrays",
           "make_mesh", "make_single_device_sharding", "reshard", "set_mesh", "shard_map",
           "visualize_array_sharding", "visualize_sharding"]


def _replicated_over_current_mesh(aval):
    return NamedSharding(get_mesh(), P(*([None] * aval.ndim)))


_core.register_aval_sharding(_replicated_over_current_mesh)
_array.register_sharding_layer(
    sharding_type=Sharding, partitioned_array_type=PartitionedArray,
    single_device_sharding=SingleDeviceSharding, shard=Shard, put=_arrays.put,
    put_traced=_arrays.put_traced, constrain=_constraints.with_sharding_constraint)
