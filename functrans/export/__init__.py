"""Exporting functions: serialized programs that run without their Python source.

The API is ``jax.export``'s: ``export(jit(f))(*specs)`` returns an :class:`Exported` whose
``serialize()`` bytes another process loads with :func:`deserialize` and runs with
``Exported.call`` — compiled by the local backend, with no need for ``f``'s code.
``symbolic_shape`` names dimensions for exports that take any batch size;
``to_shared_library`` compiles an Exported into a ``.so`` with a C entry point. See
``docs/export.md``.

    >>> import functrans, functrans.numpy as jnp
    >>> from functrans import export
    >>> exp = export.export(functrans.jit(lambda x: 2 * x))(jnp.ones(3))
    >>> export.deserialize(exp.serialize()).call(jnp.arange(3.0))
    Array([0., 2., 4.], dtype=float32)
"""
from __future__ import annotations

from functrans.export._container import MIN_VERSION as minimum_supported_serialization_version
from functrans.export._container import VERSION as maximum_supported_serialization_version
from functrans.export._dimensions import (is_symbolic_dim, symbolic_args_specs,
                                          symbolic_shape)
from functrans.export._exported import (DisabledSafetyCheck, Exported, default_export_platform,
                                        deserialize, export)
from functrans.export._pytrees import (register_namedtuple_serialization,
                                       register_pytree_node_serialization)
from functrans.export._shared_library import SharedLibrary, to_shared_library

__all__ = ["DisabledSafetyCheck", "Exported", "default_export_platform", "deserialize",
           "export", "is_symbolic_dim", "minimum_supported_serialization_version",
           "maximum_supported_serialization_version", "register_namedtuple_serialization",
           "register_pytree_node_serialization", "SharedLibrary", "symbolic_args_specs",
           "symbolic_shape", "to_shared_library"]
