"""Save and restore pytrees of arrays (parameters, optimizer state, PRNG keys, step counters)
atomically, in an open format. Nothing is ever pickled.

A checkpoint is one `safetensors <https://github.com/huggingface/safetensors>`_ file: every
leaf is a named tensor (named by its key path, e.g. ``['params']['w']``), and the header's
text metadata holds a JSON document with the tree structure, each leaf's dtype, shape and
SHA-256, the step and the user's metadata. Any safetensors reader can open the arrays;
functrans reads the structure back too.

Saving writes a temporary file in the destination directory, flushes and fsyncs it, renames
it over the destination (``os.replace``, atomic on POSIX) and fsyncs the directory. A crash
at any point leaves either the previous checkpoint or the new one, never a torn file.

    >>> import tempfile, os, functrans.numpy as jnp
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.safetensors")
    >>> save(path, {"w": jnp.ones(3), "step": 7})
    >>> restore(path)["step"]
    7
"""
from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import sys
import types
import uuid

import numpy as np

from functrans import _dtypes
from functrans.tree_util import PyTreeDef, keystr, tree_flatten_with_path, tree_unflatten

__all__ = ["CheckpointError", "CheckpointManager", "save", "restore", "read_metadata"]

_FORMAT = "functrans.checkpoint"
_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint is corrupted, truncated, or does not match the requested target."""


# =============================================================================================
# dtypes: our names <-> safetensors' names
# =============================================================================================

# safetensors has tags for these; anything else (complex128, ...) is stored as raw bytes
# (tag U8) and reinterpreted with the dtype recorded in our JSON.
_SAFETENSORS_TAGS = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
    "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8",
    "bool": "BOOL", "complex64": "C64",
}


def _dtype_from_name(name: str) -> np.dtype:
    if name == "bfloat16":
        return _dtypes.bfloat16
    try:
        return np.dtype(name)
    except TypeError as err:
        raise CheckpointError(f"unknown dtype {name!r} in checkpoint") from err


# =============================================================================================
# Tree structure <-> JSON
# =============================================================================================

def _encode_key(key) -> list:
    """A dict key as ``[type, value]`` so int and str keys survive JSON."""
    if isinstance(key, bool):
        return ["bool", key]
    if isinstance(key, int):
        return ["int", key]
    if isinstance(key, float):
        return ["float", key]
    if isinstance(key, str):
        return ["str", key]
    if key is None:
        return ["none", None]
    # other hashables cannot be rebuilt without code execution: keep their text
    return ["repr", repr(key)]


def _decode_key(encoded):
    kind, value = encoded
    return {"bool": bool, "int": int, "float": float}.get(kind, lambda v: v)(value)


def _encode_structure(treedef: PyTreeDef, names):
    kind = treedef.kind
    children = [_encode_structure(c, names) for c in treedef.children]
    if kind == "leaf":
        return {"kind": "leaf", "name": next(names)}
    if kind == "none":
        return {"kind": "none"}
    if kind in ("tuple", "list"):
        return {"kind": kind, "children": children}
    if kind in ("dict", "odict"):
        return {"kind": kind, "keys": [_encode_key(k) for k in treedef.aux], "children": children}
    if kind == "ddict":
        return {"kind": "dict", "keys": [_encode_key(k) for k in treedef.aux[1]],
                "children": children}
    if kind == "namedtuple":
        cls = treedef.aux
        return {"kind": "namedtuple", "name": cls.__name__, "fields": list(cls._fields),
                "children": children}
    nodetype = treedef.aux[0]
    if nodetype is _key_array_type():
        # typed PRNG keys: their two uint32 words, rebuilt into keys on restore
        return {"kind": "prng_key", "impl": treedef.aux[1], "children": children}
    return {"kind": "custom", "name": f"{nodetype.__module__}.{nodetype.__qualname__}",
            "children": children}


def _key_array_type():
    # imported here: functrans imports this module before functrans.random
    from functrans.random import PRNGKeyArray
    return PRNGKeyArray


def _decode_structure(node, leaves: dict):
    """Rebuild containers from JSON. Namedtuples come back as namedtuples of the same name
    and fields (created here, never imported), typed PRNG keys as keys; other registered
    custom nodes come back as lists."""
    kind = node["kind"]
    if kind == "leaf":
        return leaves[node["name"]]
    if kind == "none":
        return None
    children = [_decode_structure(c, leaves) for c in node["children"]]
    if kind == "tuple":
        return tuple(children)
    if kind in ("list", "custom"):
        return children
    if kind == "dict":
        return {_decode_key(k): c for k, c in zip(node["keys"], children)}
    if kind == "odict":
        return collections.OrderedDict((_decode_key(k), c) for k, c in zip(node["keys"], children))
    if kind == "namedtuple":
        return _namedtuple_type(node["name"], tuple(node["fields"]))(*children)
    if kind == "prng_key":
        if node.get("impl") != "threefry2x32" or len(children) != 2:
            raise CheckpointError(f"unsupported PRNG key entry in checkpoint: {node.get('impl')!r}")
        return _key_array_type()(*children, node["impl"])
    raise CheckpointError(f"unknown tree node kind {kind!r} in checkpoint")


_NAMEDTUPLES: dict = {}


def _namedtuple_type(name: str, fields: tuple):
    # one class per (name, fields) so restored trees of one structure compare equal
    key = (name, fields)
    if key not in _NAMEDTUPLES:
        safe_name = name if name.isidentifier() else "RestoredNamedTuple"
        _NAMEDTUPLES[key] = collections.namedtuple(safe_name, fields, rename=True)
    return _NAMEDTUPLES[key]


def _leaf_name(path) -> str:
    return keystr(path) or "<root>"


# =============================================================================================
# Leaves -> host arrays
# =============================================================================================

_PYTHON_SCALARS = {bool: "bool", int: "int", float: "float", complex: "complex"}


def _host_value(path, leaf):
    """(NumPy array, python scalar type name or None) for one leaf."""
    from functrans.core import Tracer
    if isinstance(leaf, Tracer):
        raise CheckpointError(f"cannot save the traced value at {_leaf_name(path)}: "
                              "save concrete arrays outside jit/grad/vmap")
    python_type = _PYTHON_SCALARS.get(type(leaf))
    if python_type is not None:
        if python_type == "int":
            return np.asarray(leaf, dtype=np.int64), python_type
        return np.asarray(leaf), python_type
    if not hasattr(leaf, "__array__") and not isinstance(leaf, (np.ndarray, np.generic)):
        raise CheckpointError(f"the leaf at {_leaf_name(path)} is a {type(leaf).__name__}, "
                              "not an array; checkpoints hold arrays and numbers only")
    value = np.asarray(leaf)
    if value.dtype == _dtypes.float0:
        raise CheckpointError(f"the leaf at {_leaf_name(path)} has dtype float0 (a tangent of "
                              "an integer value); it carries no data to save")
    if value.dtype.kind not in "biufc" and value.dtype != _dtypes.bfloat16:
        raise CheckpointError(f"the leaf at {_leaf_name(path)} has dtype {value.dtype}, "
                              "which a checkpoint cannot hold")
    return _contiguous(value), None


def _contiguous(value: np.ndarray) -> np.ndarray:
    # not np.ascontiguousarray: it turns 0-d arrays into 1-d ones
    return value if value.flags.c_contiguous else value.copy(order="C")


def _sha256(value: np.ndarray) -> str:
    return hashlib.sha256(_contiguous(value).reshape(-1).view(np.uint8)).hexdigest()


# =============================================================================================
# Atomic file writing
# =============================================================================================

def _fsync_directory(directory: str) -> None:
    # makes the rename itself durable; not every platform can open a directory
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _temp_path(path: str) -> str:
    directory, base = os.path.split(path)
    # pid in the name lets a manager recognise leftovers of dead writers
    return os.path.join(directory, f".{base}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def _write_atomically(path: str, tensors: dict, header: dict) -> None:
    import safetensors.numpy
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = _temp_path(os.path.abspath(path))
    try:
        safetensors.numpy.save_file(tensors, tmp, metadata=header)
        with open(tmp, "rb+") as f:
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    _fsync_directory(directory)


# =============================================================================================
# save / restore
# =============================================================================================

def save(path, pytree, step: int | None = None, metadata: dict | None = None) -> None:
    """Save ``pytree`` (arrays, NumPy arrays, Python numbers; any nesting of dicts, lists,
    tuples, namedtuples and registered nodes) to the file ``path`` atomically.

    ``step`` and ``metadata`` (a JSON-serializable dict) are stored alongside and can be read
    back with :func:`read_metadata`. An existing file at ``path`` is replaced only once the
    new one is completely on disk.

        >>> import tempfile, os, functrans.numpy as jnp
        >>> p = os.path.join(tempfile.mkdtemp(), "c.safetensors")
        >>> save(p, {"w": jnp.zeros((2, 2))}, step=10, metadata={"lr": 0.1})
        >>> read_metadata(p)["step"]
        10
    """
    path = os.fspath(path)
    keyed, treedef = tree_flatten_with_path(pytree)
    tensors, leaf_info = {}, []
    for path_keys, leaf in keyed:
        name = _leaf_name(path_keys)
        if name in tensors:
            raise CheckpointError(f"two leaves share the key path {name}; rename a dict key")
        value, python_type = _host_value(path_keys, leaf)
        dtype_name = "bfloat16" if value.dtype == _dtypes.bfloat16 else value.dtype.name
        stored = value
        if dtype_name not in _SAFETENSORS_TAGS:
            stored = value.reshape(-1).view(np.uint8)
        tensors[name] = stored
        leaf_info.append({"name": name, "dtype": dtype_name, "shape": list(value.shape),
                          "sha256": _sha256(value), "python_type": python_type})
    if metadata is not None:
        try:
            json.dumps(metadata)
        except TypeError as err:
            raise CheckpointError(f"metadata must be JSON-serializable: {err}") from err
    document = {
        "version": _VERSION,
        "structure": _encode_structure(treedef, iter(info["name"] for info in leaf_info)),
        "leaves": leaf_info,
        "step": None if step is None else int(step),
        "metadata": metadata,
    }
    text = json.dumps(document, sort_keys=True)
    header = {"format": _FORMAT, "tree": text,
              "tree_sha256": hashlib.sha256(text.encode()).hexdigest()}
    _write_atomically(path, tensors, header)


def _read_file(path: str):
    """(document, {name: raw bytes-backed array}) with the header validated."""
    import safetensors
    with open(path, "rb") as f:
        data = f.read()
    try:
        raw = safetensors.deserialize(data)
    except Exception as err:  # noqa: BLE001 - the library raises its own error types
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated or corrupted "
                              f"safetensors data): {err}") from err
    header_len = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8:8 + header_len]).get("__metadata__") or {}
    except (ValueError, AttributeError) as err:
        raise CheckpointError(f"{path}: unreadable safetensors header") from err
    if header.get("format") != _FORMAT or "tree" not in header:
        raise CheckpointError(f"{path}: a safetensors file, but not a functrans checkpoint "
                              "(no tree description in its metadata)")
    text = header["tree"]
    if hashlib.sha256(text.encode()).hexdigest() != header.get("tree_sha256"):
        raise CheckpointError(f"{path}: the tree description is corrupted (checksum mismatch)")
    document = json.loads(text)
    if document.get("version") != _VERSION:
        raise CheckpointError(f"{path}: checkpoint format version {document.get('version')} "
                              f"is not supported (this functrans reads version {_VERSION})")
    return document, dict(raw)


def _decode_leaf(path: str, info: dict, raw: dict) -> np.ndarray:
    name = info["name"]
    if name not in raw:
        raise CheckpointError(f"{path}: array {name} is missing from the file")
    dtype = _dtype_from_name(info["dtype"])
    shape = tuple(info["shape"])
    buffer = raw[name]["data"]
    expected_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(buffer) != expected_bytes:
        raise CheckpointError(f"{path}: array {name} holds {len(buffer)} bytes, but "
                              f"{info['dtype']}{list(shape)} needs {expected_bytes}")
    value = np.frombuffer(buffer, dtype=dtype).reshape(shape)
    if _sha256(value) != info["sha256"]:
        raise CheckpointError(f"{path}: array {name} is corrupted (SHA-256 mismatch)")
    return value


def read_metadata(path) -> dict:
    """The ``step`` and user ``metadata`` stored in a checkpoint, and its leaves' key paths,
    dtypes and shapes, without reading the arrays' data into memory twice."""
    document, _ = _read_file(os.fspath(path))
    return {"step": document["step"], "metadata": document["metadata"],
            "leaves": {info["name"]: (info["dtype"], tuple(info["shape"]))
                       for info in document["leaves"]}}


def _target_leaf_type(leaf):
    """(dtype, shape, python type) a target leaf asks for."""
    python_type = _PYTHON_SCALARS.get(type(leaf))
    if python_type is not None:
        return None, (), python_type
    dtype = getattr(leaf, "dtype", None)
    shape = getattr(leaf, "shape", None)
    if dtype is None or shape is None:
        value = np.asarray(leaf)
        dtype, shape = value.dtype, value.shape
    return np.dtype(dtype), tuple(shape), None


def _finish_leaf(value: np.ndarray, python_type):
    if python_type is not None:
        return {"bool": bool, "int": int, "float": float, "complex": complex}[python_type](value[()])
    from functrans._array import Array
    canonical = _dtypes.canonicalize_dtype(value.dtype)
    # a private copy: the file's buffer is not kept alive by the restored array
    return Array(np.array(value, dtype=canonical, copy=True))


def restore(path, target=None):
    """Read the pytree saved at ``path``.

    With ``target`` (a pytree of arrays or ``ShapeDtypeStruct``-like leaves, e.g. freshly
    initialised parameters and optimizer state), the result has ``target``'s structure (its
    NamedTuple and custom node classes) and every leaf must match the target's key path, shape
    and dtype. Without it, containers are rebuilt from the file: dicts, lists, tuples, and
    namedtuples of the same name and fields.

    Raises :class:`CheckpointError` naming the key when the file is truncated or corrupted
    (every array's SHA-256 is checked) or does not match ``target``.

        >>> import tempfile, os, functrans.numpy as jnp
        >>> p = os.path.join(tempfile.mkdtemp(), "c.safetensors")
        >>> save(p, {"w": jnp.ones(2)})
        >>> restore(p, target={"w": jnp.zeros(2)})["w"]
        Array([1., 1.], dtype=float32)
    """
    path = os.fspath(path)
    document, raw = _read_file(path)
    infos = {info["name"]: info for info in document["leaves"]}
    values = {name: _decode_leaf(path, info, raw) for name, info in infos.items()}
    if target is None:
        leaves = {name: _finish_leaf(values[name], infos[name]["python_type"]) for name in values}
        return _decode_structure(document["structure"], leaves)

    keyed, treedef = tree_flatten_with_path(target)
    target_names = [_leaf_name(p) for p, _ in keyed]
    missing = [n for n in target_names if n not in values]
    unexpected = [n for n in values if n not in set(target_names)]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append("missing from the checkpoint: " + ", ".join(missing))
        if unexpected:
            parts.append("in the checkpoint but not in the target: " + ", ".join(unexpected))
        raise CheckpointError(f"{path}: the checkpoint's tree does not match the target ("
                              + "; ".join(parts) + ")")
    out = []
    for name, (_, leaf) in zip(target_names, keyed):
        value, info = values[name], infos[name]
        dtype, shape, python_type = _target_leaf_type(leaf)
        if python_type is not None:
            if value.shape != () or info["python_type"] not in (python_type, None):
                raise CheckpointError(f"{path}: {name} is {info['dtype']}{list(value.shape)} in "
                                      f"the checkpoint but the target has a Python {python_type}")
            out.append(_finish_leaf(value, python_type))
            continue
        if value.shape != shape:
            raise CheckpointError(f"{path}: {name} has shape {value.shape} in the checkpoint "
                                  f"but {shape} in the target")
        if value.dtype != dtype and _dtypes.canonicalize_dtype(value.dtype) != dtype:
            raise CheckpointError(f"{path}: {name} has dtype {info['dtype']} in the checkpoint "
                                  f"but {dtype.name} in the target")
        out.append(_finish_leaf(value, None))
    return tree_unflatten(treedef, out)


# =============================================================================================
# A directory of checkpoints by step
# =============================================================================================

_STEP_FILE = re.compile(r"^checkpoint_(\d+)\.safetensors$")
_TEMP_FILE = re.compile(r"^\.checkpoint_\d+\.safetensors\.tmp-(\d+)-[0-9a-f]+$")


class CheckpointManager:
    """Checkpoints of one run, one file per step in ``directory``, keeping the newest
    ``max_to_keep`` (all when None).

        >>> import tempfile, functrans.numpy as jnp
        >>> manager = CheckpointManager(tempfile.mkdtemp(), max_to_keep=2)
        >>> for step in (1, 2, 3):
        ...     manager.save(step, {"w": jnp.full(2, step)})
        >>> manager.all_steps(), manager.latest_step()
        ([2, 3], 3)
        >>> manager.restore()["w"]
        Array([3, 3], dtype=int32)

    A save interrupted by a crash leaves at most a hidden temporary file, which is never
    listed as a step; the previous checkpoints stay intact.
    """

    def __init__(self, directory, max_to_keep: int | None = None):
        if max_to_keep is not None and max_to_keep < 1:
            raise ValueError(f"max_to_keep must be at least 1 or None, got {max_to_keep}")
        self.directory = os.fspath(directory)
        self.max_to_keep = max_to_keep
        os.makedirs(self.directory, exist_ok=True)

    def path_for(self, step: int) -> str:
        """The file that holds ``step``'s checkpoint."""
        return os.path.join(self.directory, f"checkpoint_{int(step)}.safetensors")

    def all_steps(self) -> list[int]:
        """Steps with a complete checkpoint, oldest first."""
        steps = []
        for entry in os.listdir(self.directory):
            match = _STEP_FILE.match(entry)
            if match:
                steps.append(int(match.group(1)))
        return sorted(steps)

    def latest_step(self) -> int | None:
        """The newest saved step, or None when there is none."""
        steps = self.all_steps()
        return steps[-1] if steps else None

    def save(self, step: int, pytree, metadata: dict | None = None) -> None:
        """Save ``pytree`` as ``step`` (replacing an existing checkpoint of that step), then
        delete the oldest checkpoints beyond ``max_to_keep``."""
        if int(step) < 0:
            raise ValueError(f"step must be non-negative, got {step}")
        save(self.path_for(step), pytree, step=int(step), metadata=metadata)
        if self.max_to_keep is not None:
            for old in self.all_steps()[:-self.max_to_keep]:
                os.remove(self.path_for(old))
            _fsync_directory(self.directory)
        self._remove_dead_writers_leftovers()

    def restore(self, step: int | None = None, target=None):
        """Restore ``step`` (the latest when None); see :func:`restore` for ``target``."""
        if step is None:
            step = self.latest_step()
            if step is None:
                raise CheckpointError(f"no checkpoint in {self.directory}")
        path = self.path_for(step)
        if not os.path.exists(path):
            raise CheckpointError(f"no checkpoint for step {step} in {self.directory} "
                                  f"(steps: {self.all_steps()})")
        return restore(path, target)

    def metadata(self, step: int | None = None) -> dict:
        """:func:`read_metadata` of ``step`` (the latest when None)."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"no checkpoint in {self.directory}")
        return read_metadata(self.path_for(step))

    def _remove_dead_writers_leftovers(self) -> None:
        # temporaries of a process that died mid-save are garbage; a live writer's are not
        for entry in os.listdir(self.directory):
            match = _TEMP_FILE.match(entry)
            if match and not _process_alive(int(match.group(1))):
                try:
                    os.remove(os.path.join(self.directory, entry))
                except OSError:
                    pass


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# =============================================================================================
# ``functrans.checkpoint`` is also JAX's remat decorator
# =============================================================================================

class _CheckpointModule(types.ModuleType):
    """This module's type: calling the module is ``functrans.checkpoint(f)`` (rematerialize
    ``f``'s intermediates in reverse mode, as ``jax.checkpoint``), so the save/restore API and
    the remat decorator share the name ``functrans.checkpoint`` as the design asks."""

    def __call__(self, fun, **kwargs):
        from functrans._remat import checkpoint as remat
        return remat(fun, **kwargs)


sys.modules[__name__].__class__ = _CheckpointModule
