"""Save and restore pytrees of arrays (parameters, optimizer state, PRNG keys, step counters)
atomically, in an open format. Nothing is ever pickled.

A checkpoint is one `safetensors <https://github.com/huggingface/safetensors>`_ file: every
leaf is a named tensor (named by its key path, e.g. ``['params']['w']``), and the header's
text metadata holds a JSON document with the tree structure, each leaf's dtype, shape and
SHA-256, the step and the user's metadata. Any safetensors reader can open the arrays;
functrans reads the structure back too.

Saving writes the file in a private staging directory beside the destination, fsyncs it,
renames it over the destination (``os.replace``, atomic on POSIX) and fsyncs the directory.
A crash at any point leaves either the previous checkpoint or the new one, never a torn
file; the staging directory a killed save leaves behind is removed by a later save or
:class:`CheckpointManager`. Every malformed checkpoint raises :class:`CheckpointError`.

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
import keyword
import math
import operator
import os
import re
import shutil
import stat
import sys
import time
import types
import uuid

import numpy as np

from functrans import _dtypes
from functrans.tree_util import PyTreeDef, keystr, tree_flatten_with_path, tree_unflatten
from functrans._array import Array
from functrans._remat import checkpoint as remat
from functrans.core import Tracer
from functrans.random import PRNGKeyArray

__all__ = ["CheckpointError", "CheckpointManager", "save", "restore", "read_metadata",
           "CheckpointManagerOptions", "StandardCheckpointer", "args"]

_FORMAT = "functrans.checkpoint"
_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint is corrupted, truncated, malformed or does not match the requested
    target, or a pytree or metadata cannot be saved as one."""


# Trees and metadata nested deeper than this are refused when saving and when reading: the
# JSON header then always parses within Python's recursion limit.
_MAX_DEPTH = 256


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


def _savable(dtype: np.dtype) -> bool:
    """Booleans, integers, floats and complex numbers (and bfloat16): what a file holds."""
    return dtype.kind in "biufc" or dtype == _dtypes.bfloat16


def _dtype_name(dtype: np.dtype) -> str:
    return "bfloat16" if dtype == _dtypes.bfloat16 else dtype.name


def _dtype_from_name(name) -> np.dtype:
    """The dtype a file names, which must be one :func:`save` writes (by its canonical
    name: ``float32``, never ``f4`` or ``>f4``)."""
    try:
        dtype = None if not isinstance(name, str) else (
            _dtypes.bfloat16 if name == "bfloat16" else np.dtype(name))
    except (TypeError, ValueError, SyntaxError):
        dtype = None
    if dtype is None or not _savable(dtype) or _dtype_name(dtype) != name:
        raise CheckpointError(f"dtype {name!r} is not one a checkpoint holds (booleans, "
                              "integers, floats, complex numbers, bfloat16)")
    return dtype


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


_KEY_TYPES = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,),
              "none": (type(None),), "repr": (str,)}


def _decode_key(encoded):
    """A dict key from ``[type, value]``; :class:`CheckpointError` for anything else."""
    if not (isinstance(encoded, list) and len(encoded) == 2 and isinstance(encoded[0], str)
            and encoded[0] in _KEY_TYPES):
        raise CheckpointError(f"a dict key is {encoded!r}, not a [type, value] pair")
    kind, value = encoded
    if not isinstance(value, _KEY_TYPES[kind]) or (kind in ("int", "float") and
                                                   isinstance(value, bool)):
        raise CheckpointError(f"a dict key of type {kind} holds {_clip(value)}")
    if kind == "float":
        try:
            return float(value)
        except OverflowError:  # an integer no float can hold (JSON's numbers are unbounded)
            raise CheckpointError(f"a dict key of type float holds {_clip(value)}, too large "
                                  "for a float") from None
    return value


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


def _tree_depth(treedef: PyTreeDef) -> int:
    depth, level = 0, [treedef]
    while level:
        depth += 1
        level = [c for node in level for c in node.children]
    return depth


_NODE_KINDS = ("leaf", "none", "tuple", "list", "custom", "dict", "odict", "namedtuple",
               "prng_key")


def _check_structure(structure, leaves: dict) -> None:
    """Check (without recursion) that ``structure`` is a tree of well-formed nodes at most
    ``_MAX_DEPTH`` deep whose leaves name every array of ``leaves`` (name -> description)
    once."""
    leaf_names = set(leaves)
    seen = set()
    stack = [(structure, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise CheckpointError(f"the tree is nested more than {_MAX_DEPTH} levels deep")
        if not isinstance(node, dict) or node.get("kind") not in _NODE_KINDS:
            raise CheckpointError(f"a tree node is malformed: {_clip(node)}")
        kind = node["kind"]
        if kind == "leaf":
            name = node.get("name")
            if not isinstance(name, str) or name not in leaf_names or name in seen:
                raise CheckpointError(f"a tree leaf names {name!r}, which is not an array of "
                                      "the file, or names one twice")
            seen.add(name)
            continue
        if kind == "none":
            continue
        children = node.get("children")
        if not isinstance(children, list):
            raise CheckpointError(f"a {kind} node has no list of children")
        if kind in ("dict", "odict"):
            keys = node.get("keys")
            if not isinstance(keys, list) or len(keys) != len(children):
                raise CheckpointError(f"a {kind} node has {_clip(keys)} as keys for "
                                      f"{len(children)} children")
            if len({_decode_key(k) for k in keys}) != len(keys):
                raise CheckpointError(f"a {kind} node repeats a key: {_clip(keys)}")
        if kind == "prng_key":
            _check_prng_key(node, leaves)
        if kind == "namedtuple":
            fields = node.get("fields")
            if (not isinstance(node.get("name"), str) or not isinstance(fields, list)
                    or len(fields) != len(children)
                    or not all(isinstance(f, str) for f in fields)):
                raise CheckpointError(f"a namedtuple node is malformed: {_clip(node)}")
        stack.extend((child, depth + 1) for child in children)
    if seen != leaf_names:
        raise CheckpointError("arrays of the file are not in its tree: "
                              + ", ".join(sorted(leaf_names - seen)))


def _check_prng_key(node: dict, leaves: dict) -> None:
    """A typed PRNG key is its two words: two leaves of uint32 arrays of one shape."""
    children = node["children"]
    if node.get("impl") != "threefry2x32" or len(children) != 2:
        raise CheckpointError(f"unsupported PRNG key entry: {_clip(node)}")
    words = [leaves.get(c.get("name")) if isinstance(c, dict) and c.get("kind") == "leaf"
             else None for c in children]
    if any(w is None or w.get("dtype") != "uint32" or w.get("python_type") is not None
           for w in words) or words[0].get("shape") != words[1].get("shape"):
        described = [f"{w['dtype']}{w['shape']}" if w else _clip(c, 30)
                     for w, c in zip(words, children)]
        raise CheckpointError(f"a PRNG key's words must be two uint32 arrays of one shape, "
                              f"not {', '.join(described)}")


def _clip(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _key_array_type():
    # imported here: functrans imports this module before functrans.random
    return PRNGKeyArray


def _decode_structure(node, leaves: dict):
    """Rebuild containers from JSON (checked by :func:`_check_structure`). Namedtuples come
    back as namedtuples of the same name and fields (created here, never imported), typed
    PRNG keys as keys; other registered custom nodes come back as lists."""
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
    if kind == "prng_key":
        return _key_array_type()(*children, node["impl"])
    return _namedtuple_type(node["name"], tuple(node["fields"]))(*children)


_NAMEDTUPLES: dict = {}


def _namedtuple_type(name: str, fields: tuple):
    # one class per (name, fields) so restored trees of one structure compare equal
    key = (name, fields)
    if key not in _NAMEDTUPLES:
        valid = name.isidentifier() and not keyword.iskeyword(name)
        _NAMEDTUPLES[key] = collections.namedtuple(name if valid else "RestoredNamedTuple",
                                                   fields, rename=True)
    return _NAMEDTUPLES[key]


def _leaf_name(path) -> str:
    return keystr(path) or "<root>"


# =============================================================================================
# Leaves -> host arrays
# =============================================================================================

_PYTHON_SCALARS = {bool: "bool", int: "int", float: "float", complex: "complex"}


def _host_value(path, leaf):
    """(NumPy array, python scalar type name or None) for one leaf."""
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
    if not _savable(value.dtype):
        raise CheckpointError(f"the leaf at {_leaf_name(path)} has dtype {value.dtype}, "
                              "which a checkpoint cannot hold")
    if not value.dtype.isnative:  # files hold native (little-endian) bytes
        value = value.astype(value.dtype.newbyteorder("="))
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


# A save writes into a staging directory beside the destination, named
# ``.<file name>.tmp-<host tag>-<pid>-<random hex>``: safetensors writes its own temporary file
# (``.tmpXXXXXX``) there and renames it, and the finished file is renamed over the
# destination. A killed save leaves only that directory behind, so every byte of debris sits
# under a name this module makes. Each save and each CheckpointManager removes the staging
# directories of dead writers: on this host (and PID namespace) those whose process is gone,
# and any other that nothing has written to for _STALE_AFTER_SECONDS (a process elsewhere
# cannot be asked whether it lives). Live writers, in this process or others, saving other
# checkpoints into the same directory keep theirs: their process exists and their files are
# fresh. No lock is taken.
_STAGING = re.compile(r"^\..+\.tmp-(?P<tag>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]{16}$")
# debris of earlier versions: their temporary file beside the destination, and the one
# safetensors wrote there (removed only when it holds a functrans checkpoint's header)
_OLD_TEMPORARY = re.compile(r"^\..+\.tmp-\d+-[0-9a-f]{8}$")
_SAFETENSORS_TEMPORARY = re.compile(r"^\.tmp[A-Za-z0-9]{6}$")
_STALE_AFTER_SECONDS = 3600.0


def _host_tag() -> str:
    """Names this host and PID namespace: the pids of staging directories with this tag
    are pids of this machine's processes, which can be checked."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    host = os.uname().nodename if hasattr(os, "uname") else os.environ.get("COMPUTERNAME", "")
    return hashlib.sha256(f"{host}\0{namespace}".encode()).hexdigest()[:8]


def _staging_path(path: str) -> str:
    directory, base = os.path.split(path)
    name = f".{base}.tmp-{_host_tag()}-{os.getpid()}-{uuid.uuid4().hex[:16]}"
    return os.path.join(directory, name)


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if os.name == "nt":  # os.kill would terminate it: assume alive, the age rule applies
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _last_written(entry: os.DirEntry) -> float:
    """The newest modification time of ``entry`` and, for a directory, of what it holds."""
    newest = entry.stat(follow_symlinks=False).st_mtime
    if entry.is_dir(follow_symlinks=False):
        try:
            with os.scandir(entry.path) as inner:
                for item in inner:
                    newest = max(newest, item.stat(follow_symlinks=False).st_mtime)
        except OSError:
            pass
    return newest


def _holds_checkpoint_header(path: str) -> bool:
    """Whether the file starts with the safetensors header of a functrans checkpoint."""
    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            if size > 100 * 2 ** 20:
                return False
            header = json.loads(f.read(size))
    except (OSError, ValueError, RecursionError):
        return False
    return (isinstance(header, dict) and isinstance(header.get("__metadata__"), dict)
            and header["__metadata__"].get("format") == _FORMAT)


def _is_debris(entry: os.DirEntry, tag: str, now: float) -> bool:
    staging = _STAGING.match(entry.name)
    if staging and entry.is_dir(follow_symlinks=False):
        if staging["tag"] == tag and not _process_alive(int(staging["pid"])):
            return True
        return now - _last_written(entry) > _STALE_AFTER_SECONDS
    if not entry.is_file(follow_symlinks=False):
        return False
    if _OLD_TEMPORARY.match(entry.name):
        return now - _last_written(entry) > _STALE_AFTER_SECONDS
    if _SAFETENSORS_TEMPORARY.match(entry.name):
        return (now - _last_written(entry) > _STALE_AFTER_SECONDS
                and _holds_checkpoint_header(entry.path))
    return False


def _remove_debris(directory) -> None:
    """Remove what interrupted saves left in ``directory`` (see above)."""
    tag, now = _host_tag(), time.time()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        try:
            if not _is_debris(entry, tag, now):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.remove(entry.path)
        except OSError:
            continue  # gone already (its writer finished), or not ours to remove


def _write_atomically(path: str, tensors: dict, header: dict) -> None:
    import safetensors.numpy
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    _remove_debris(directory)
    staging = _staging_path(path)
    os.mkdir(staging)
    try:
        staged = os.path.join(staging, os.path.basename(path))
        safetensors.numpy.save_file(tensors, staged, metadata=header)
        # safetensors writes a private (0600) temporary file: the checkpoint gets the mode a
        # new file gets under the umask, which the staging directory (mkdir'd 0777 & ~umask)
        # shows without changing the process-wide umask
        os.chmod(staged, stat.S_IMODE(os.stat(staging).st_mode) & 0o666)
        with open(staged, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(staged, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _fsync_directory(directory)


# =============================================================================================
# save / restore
# =============================================================================================

def save(path, pytree, step: int | None = None, metadata: dict | None = None) -> None:
    """Save ``pytree`` (arrays, NumPy arrays, Python numbers; any nesting of dicts, lists,
    tuples, namedtuples and registered nodes, at most 256 levels) to the file ``path``
    atomically.

    ``step`` and ``metadata`` (JSON-serializable, at most 256 levels deep) are stored
    alongside and can be read back with :func:`read_metadata`. An existing file at ``path``
    is replaced only once the new one is completely on disk; input that cannot be saved
    raises :class:`CheckpointError` before anything is written.

        >>> import tempfile, os, functrans.numpy as jnp
        >>> p = os.path.join(tempfile.mkdtemp(), "c.safetensors")
        >>> save(p, {"w": jnp.zeros((2, 2))}, step=10, metadata={"lr": 0.1})
        >>> read_metadata(p)["step"]
        10
    """
    path = os.fspath(path)
    try:
        keyed, treedef = tree_flatten_with_path(pytree)
    except RecursionError:
        keyed, treedef = None, None
    if treedef is None or _tree_depth(treedef) > _MAX_DEPTH:
        raise CheckpointError(f"the pytree is nested more than {_MAX_DEPTH} levels deep")
    tensors, leaf_info = {}, []
    for path_keys, leaf in keyed:
        name = _leaf_name(path_keys)
        if name in tensors:
            raise CheckpointError(f"two leaves share the key path {name}; rename a dict key")
        value, python_type = _host_value(path_keys, leaf)
        dtype_name = _dtype_name(value.dtype)
        stored = value
        if dtype_name not in _SAFETENSORS_TAGS:
            stored = value.reshape(-1).view(np.uint8)
        tensors[name] = stored
        leaf_info.append({"name": name, "dtype": dtype_name, "shape": list(value.shape),
                          "sha256": _sha256(value), "python_type": python_type})
    document = {
        "version": _VERSION,
        "structure": _encode_structure(treedef, iter(info["name"] for info in leaf_info)),
        "leaves": leaf_info,
        "step": _checked_step(step),
        "metadata": metadata,
    }
    if _json_depth(metadata) > _MAX_DEPTH:
        raise CheckpointError(f"metadata is nested more than {_MAX_DEPTH} levels deep "
                              "(or refers to itself)")
    try:
        text = json.dumps(document, sort_keys=True)
    except (TypeError, ValueError, RecursionError) as err:
        raise CheckpointError(f"metadata must be JSON-serializable: {err}") from err
    header = {"format": _FORMAT, "tree": text,
              "tree_sha256": hashlib.sha256(text.encode()).hexdigest()}
    _write_atomically(path, tensors, header)


def _checked_step(step):
    if step is None:
        return None
    try:
        return operator.index(step)
    except TypeError:
        raise CheckpointError(f"step must be an integer or None, got {_clip(step)}") from None


def _json_depth(value) -> int:
    """Nesting depth of a JSON-like value, counted without recursion and up to just past
    ``_MAX_DEPTH`` (so a value that contains itself ends the count)."""
    depth, level = 0, [value]
    while level and depth <= _MAX_DEPTH:
        depth += 1
        inner = []
        for item in level:
            if isinstance(item, dict):
                inner.extend(item.values())
            elif isinstance(item, (list, tuple)):
                inner.extend(item)
        level = inner
    return depth


def _read_file(path: str):
    """(document, {name: raw tensor}) with the header and the document validated."""
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
        header = json.loads(data[8:8 + header_len])
        metadata = header.get("__metadata__") or {}
        text = metadata.get("tree") if metadata.get("format") == _FORMAT else None
    except (ValueError, AttributeError, RecursionError) as err:
        raise CheckpointError(f"{path}: unreadable safetensors header") from err
    if not isinstance(text, str):
        raise CheckpointError(f"{path}: a safetensors file, but not a functrans checkpoint "
                              "(no tree description in its metadata)")
    if hashlib.sha256(text.encode()).hexdigest() != metadata.get("tree_sha256"):
        raise CheckpointError(f"{path}: the tree description is corrupted (checksum mismatch)")
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise CheckpointError(f"{path}: the tree description is not readable JSON "
                              f"({type(err).__name__})") from None
    if not isinstance(document, dict) or document.get("version") != _VERSION:
        version = document.get("version") if isinstance(document, dict) else None
        raise CheckpointError(f"{path}: checkpoint format version {_clip(version)} "
                              f"is not supported (this functrans reads version {_VERSION})")
    try:
        _check_document(document)
    except CheckpointError as err:
        raise CheckpointError(f"{path}: malformed checkpoint: {err}") from None
    return document, dict(raw)


_PYTHON_TYPE_KINDS = {"bool": "b", "int": "iu", "float": "f", "complex": "c"}
# the array kinds a target's Python number can be restored from without losing its value
_TARGET_SCALAR_KINDS = {"bool": "b", "int": "biu", "float": "biuf", "complex": "biufc"}


def _check_leaf_info(info) -> None:
    if not isinstance(info, dict) or not isinstance(info.get("name"), str):
        raise CheckpointError(f"a leaf description is malformed: {_clip(info)}")
    name, shape = info["name"], info.get("shape")
    dtype = _dtype_from_name(info.get("dtype"))
    if not (isinstance(shape, list) and
            all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise CheckpointError(f"array {name} has shape {_clip(shape)}, not a list of sizes")
    if not (isinstance(info.get("sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", info["sha256"])):
        raise CheckpointError(f"array {name} has no SHA-256 checksum")
    python_type = info.get("python_type")
    if python_type is not None and (not isinstance(python_type, str)
                                    or python_type not in _PYTHON_TYPE_KINDS or shape
                                    or dtype.kind not in _PYTHON_TYPE_KINDS[python_type]):
        raise CheckpointError(f"array {name} ({info['dtype']}{shape}) cannot be the Python "
                              f"type {_clip(python_type)}")


def _check_document(document: dict) -> None:
    """Every field :func:`restore` and :func:`read_metadata` use has its type and range."""
    leaves, step = document.get("leaves"), document.get("step")
    if not isinstance(leaves, list):
        raise CheckpointError("no list of leaves")
    for info in leaves:
        _check_leaf_info(info)
    names = {info["name"] for info in leaves}
    if len(names) != len(leaves):
        raise CheckpointError("two leaves share one name")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        raise CheckpointError(f"the step is {_clip(step)}, not an integer")
    if _json_depth(document.get("metadata")) > _MAX_DEPTH:
        raise CheckpointError(f"metadata is nested more than {_MAX_DEPTH} levels deep")
    _check_structure(document.get("structure"), {info["name"]: info for info in leaves})


def _stored_bytes(path: str, info: dict, raw: dict):
    """The bytes of the array ``info`` describes, once the file's tensor is checked to be
    stored as described (dtype, shape, size): ``read_metadata`` reports only what the
    arrays agree with."""
    name = info["name"]
    if name not in raw:
        raise CheckpointError(f"{path}: array {name} is missing from the file")
    dtype = _dtype_from_name(info["dtype"])
    shape = tuple(info["shape"])
    tensor = raw[name]
    stored = ((_SAFETENSORS_TAGS[info["dtype"]], list(shape))
              if info["dtype"] in _SAFETENSORS_TAGS
              else ("U8", [math.prod(shape) * dtype.itemsize]))
    if (tensor.get("dtype"), tensor.get("shape")) != stored:
        raise CheckpointError(f"{path}: array {name} is stored as {tensor.get('dtype')}"
                              f"{_clip(tensor.get('shape'))}, but the tree describes "
                              f"{info['dtype']}{_clip(list(shape))}")
    buffer = tensor["data"]
    expected_bytes = math.prod(shape) * dtype.itemsize
    if len(buffer) != expected_bytes:
        raise CheckpointError(f"{path}: array {name} holds {len(buffer)} bytes, but "
                              f"{info['dtype']}{_clip(list(shape))} needs {expected_bytes}")
    return buffer


def _decode_leaf(path: str, info: dict, raw: dict) -> np.ndarray:
    buffer = _stored_bytes(path, info, raw)
    value = np.frombuffer(buffer, dtype=_dtype_from_name(info["dtype"]))
    value = value.reshape(tuple(info["shape"]))
    name = info["name"]
    if _sha256(value) != info["sha256"]:
        raise CheckpointError(f"{path}: array {name} is corrupted (SHA-256 mismatch)")
    return value


def read_metadata(path) -> dict:
    """The ``step`` and user ``metadata`` stored in a checkpoint, and its leaves' key paths,
    dtypes and shapes (each checked against the stored array, as :func:`restore` does),
    without reading the arrays' data into memory twice."""
    path = os.fspath(path)
    document, raw = _read_file(path)
    for info in document["leaves"]:
        _stored_bytes(path, info, raw)
    return {"step": document.get("step"), "metadata": document.get("metadata"),
            "leaves": {info["name"]: (info["dtype"], tuple(info["shape"]))
                       for info in document["leaves"]}}


def _target_leaf_type(name: str, leaf):
    """(dtype, shape, python type) a target leaf asks for."""
    python_type = _PYTHON_SCALARS.get(type(leaf))
    if python_type is not None:
        return None, (), python_type
    dtype = getattr(leaf, "dtype", None)
    shape = getattr(leaf, "shape", None)
    try:
        if dtype is None or shape is None:
            value = np.asarray(leaf)
            dtype, shape = value.dtype, value.shape
        return np.dtype(dtype), tuple(int(d) for d in shape), None
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"the target leaf at {name} ({type(leaf).__name__}) has no "
                              f"array dtype and shape: {err}") from None


def _finish_leaf(value: np.ndarray, python_type):
    if python_type is not None:
        convert = {"bool": bool, "int": int, "float": float, "complex": complex}[python_type]
        return convert(value[()])
    canonical = _dtypes.canonicalize_dtype(value.dtype)
    # a private copy: the file's buffer is not kept alive by the restored array
    return Array._from_buffer(np.array(value, dtype=canonical, copy=True))


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
        leaves = {name: _finish_leaf(values[name], infos[name].get("python_type"))
                  for name in values}
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
        dtype, shape, python_type = _target_leaf_type(name, leaf)
        if python_type is not None:
            if (value.shape != () or info.get("python_type") not in (python_type, None)
                    or value.dtype.kind not in _TARGET_SCALAR_KINDS[python_type]):
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


class CheckpointManager:
    """Checkpoints of one run, one file per step in ``directory``, keeping the newest
    ``max_to_keep`` (all when None; or ``options.max_to_keep``, as orbax's manager takes it).

        >>> import tempfile, functrans.numpy as jnp
        >>> manager = CheckpointManager(tempfile.mkdtemp(), max_to_keep=2)
        >>> for step in (1, 2, 3):
        ...     manager.save(step, {"w": jnp.full(2, step)})
        >>> manager.all_steps(), manager.latest_step()
        ([2, 3], 3)
        >>> manager.restore()["w"]
        Array([3, 3], dtype=int32)

    orbax's calls work too: ``CheckpointManager(directory, options=CheckpointManagerOptions(
    max_to_keep=3, save_interval_steps=100))``, ``save(step, args=args.StandardSave(state))``
    (which returns whether it saved) and ``restore(step, args=args.StandardRestore(target))``.

    A save interrupted by a crash leaves at most a hidden staging directory, which is never
    listed as a step and is removed when a manager starts or saves (once its writer is
    dead); the previous checkpoints stay intact.
    """

    def __init__(self, directory, max_to_keep: int | None = None, *,
                 options: "CheckpointManagerOptions | None" = None):
        if options is not None and max_to_keep is None:
            max_to_keep = options.max_to_keep
        if max_to_keep is not None and max_to_keep < 1:
            raise ValueError(f"max_to_keep must be at least 1 or None, got {max_to_keep}")
        self.directory = os.fspath(directory)
        self.max_to_keep = max_to_keep
        self.options = options if options is not None else CheckpointManagerOptions(max_to_keep)
        if not self.options.create and not os.path.isdir(self.directory):
            raise FileNotFoundError(f"no checkpoint directory {self.directory} (options.create "
                                    "is False)")
        os.makedirs(self.directory, exist_ok=True)
        _remove_debris(self.directory)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def wait_until_finished(self) -> None:
        """Saves are synchronous: when ``save`` returns, the checkpoint is on disk."""

    def close(self) -> None:
        """Nothing to release (saves are synchronous); kept for code written for orbax."""

    def should_save(self, step: int) -> bool:
        """Whether ``save(step, ...)`` saves: ``step`` is not saved yet and is a multiple of
        ``options.save_interval_steps``."""
        return int(step) not in self.all_steps() and \
            int(step) % self.options.save_interval_steps == 0

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

    def save(self, step: int, pytree=None, metadata: dict | None = None, *, args=None,
             force: bool = False) -> bool:
        """Save ``pytree`` (or orbax's ``args``: a ``StandardSave`` or a ``Composite`` of
        ``StandardSave`` and ``JsonSave`` items) as ``step``, then delete the oldest
        checkpoints beyond ``max_to_keep``. With ``args``, a step that :meth:`should_save`
        refuses is skipped unless ``force``; without, an existing step is replaced. Returns
        whether it saved."""
        if int(step) < 0:
            raise ValueError(f"step must be non-negative, got {step}")
        if args is not None:
            if pytree is not None:
                raise ValueError("pass the tree to save as pytree or as args, not both")
            if not force and not self.should_save(step):
                return False
            pytree, metadata = _tree_from_save_args(args, metadata)
        save(self.path_for(step), pytree, step=int(step), metadata=metadata)
        if self.max_to_keep is not None:
            for old in self.all_steps()[:-self.max_to_keep]:
                os.remove(self.path_for(old))
            _fsync_directory(self.directory)
        return True

    def restore(self, step: int | None = None, target=None, *, args=None):
        """Restore ``step`` (the latest when None); see :func:`restore` for ``target``. With
        orbax's ``args`` (``StandardRestore(target)``, or a ``Composite`` of
        ``StandardRestore`` and ``JsonRestore`` items) the result is what orbax returns: the
        tree, or a ``Composite`` of the items."""
        path = self._existing_path(step)
        if args is None:
            return restore(path, target)
        return _restore_with_args(path, args)

    def metadata(self, step: int | None = None) -> dict:
        """:func:`read_metadata` of ``step`` (the latest when None)."""
        return read_metadata(self._existing_path(step))

    def _existing_path(self, step: int | None) -> str:
        if step is None:
            step = self.latest_step()
            if step is None:
                raise CheckpointError(f"no checkpoint in {self.directory}")
        path = self.path_for(step)
        if not os.path.exists(path):
            raise CheckpointError(f"no checkpoint for step {step} in {self.directory} "
                                  f"(steps: {self.all_steps()})")
        return path


# =============================================================================================
# orbax's everyday surface (``import orbax.checkpoint as ocp``): the argument classes, the
# manager's options and StandardCheckpointer, over the same files
# =============================================================================================


class CheckpointManagerOptions:
    """The options of a :class:`CheckpointManager`, as orbax names them: keep the newest
    ``max_to_keep`` steps (all when None), save only steps that are multiples of
    ``save_interval_steps``, and create the directory when it is missing (``create``)."""

    def __init__(self, max_to_keep: int | None = None, save_interval_steps: int = 1,
                 create: bool = True):
        if save_interval_steps < 1:
            raise ValueError(f"save_interval_steps must be at least 1, got "
                             f"{save_interval_steps}")
        self.max_to_keep = max_to_keep
        self.save_interval_steps = int(save_interval_steps)
        self.create = create

    def __repr__(self):
        return (f"CheckpointManagerOptions(max_to_keep={self.max_to_keep}, "
                f"save_interval_steps={self.save_interval_steps}, create={self.create})")


class _Item:
    """One argument of a save or restore: the tree (or JSON value) it carries."""

    def __init__(self, item=None):
        self.item = item

    def __repr__(self):
        return f"{type(self).__name__}({self.item!r})"


class StandardSave(_Item):
    """Save this pytree of arrays (``args.StandardSave(state)``)."""


class StandardRestore(_Item):
    """Restore a pytree; with ``item`` (arrays or ``ShapeDtypeStruct`` leaves), of that
    structure, shapes and dtypes."""


class JsonSave(_Item):
    """Save this JSON value (a dict of numbers and strings) beside the arrays."""


class JsonRestore(_Item):
    """Restore the JSON value saved with :class:`JsonSave`."""


class Composite:
    """Several named items saved as one step: ``Composite(state=StandardSave(tree),
    meta=JsonSave({...}))``; a restore returns a ``Composite`` whose items are read as
    attributes or keys (``restored.state``, ``restored["meta"]``)."""

    def __init__(self, **items):
        self._items = dict(items)

    def __getattr__(self, name):
        items = self.__dict__.get("_items", {})
        if name in items:
            return items[name]
        raise AttributeError(name)

    def __getitem__(self, name):
        return self._items[name]

    def __contains__(self, name):
        return name in self._items

    def keys(self):
        return self._items.keys()

    def items(self):
        return self._items.items()

    def __repr__(self):
        return "Composite(" + ", ".join(f"{k}={v!r}" for k, v in self._items.items()) + ")"


args = types.ModuleType(__name__ + ".args", "orbax's argument classes for ``save`` and "
                        "``restore``: ``StandardSave``, ``StandardRestore``, ``JsonSave``, "
                        "``JsonRestore``, ``Composite``.")
for _cls in (StandardSave, StandardRestore, JsonSave, JsonRestore, Composite):
    setattr(args, _cls.__name__, _cls)

# the metadata key under which a Composite records its JSON items and item kinds
_COMPOSITE_KEY = "orbax_composite"


def _tree_from_save_args(save_args, metadata):
    """The pytree and metadata a save with orbax's ``args`` writes."""
    if isinstance(save_args, StandardSave):
        return save_args.item, metadata
    if isinstance(save_args, Composite):
        trees, json_items = {}, {}
        for name, item in save_args.items():
            if isinstance(item, StandardSave):
                trees[name] = item.item
            elif isinstance(item, JsonSave):
                json_items[name] = item.item
            else:
                raise TypeError(f"Composite item {name!r}: expected StandardSave or JsonSave, "
                                f"got {type(item).__name__}")
        metadata = dict(metadata or {})
        metadata[_COMPOSITE_KEY] = {"json": json_items, "trees": sorted(trees)}
        return trees, metadata
    raise TypeError(f"save args must be args.StandardSave or args.Composite, got "
                    f"{type(save_args).__name__}")


def _restore_with_args(path, restore_args):
    """What a restore with orbax's ``args`` returns from the checkpoint at ``path``."""
    if isinstance(restore_args, StandardRestore):
        return restore(path, restore_args.item)
    if not isinstance(restore_args, Composite):
        raise TypeError(f"restore args must be args.StandardRestore or args.Composite, got "
                        f"{type(restore_args).__name__}")
    saved = (read_metadata(path).get("metadata") or {}).get(_COMPOSITE_KEY)
    if saved is None:
        raise CheckpointError(f"{path}: this checkpoint was not saved with args.Composite")
    wanted = {name: item for name, item in restore_args.items()
              if isinstance(item, StandardRestore)}
    if all(item.item is not None for item in wanted.values()) and \
            set(wanted) == set(saved["trees"]):
        trees = restore(path, {name: item.item for name, item in wanted.items()})
    else:
        trees = restore(path)
    out = {}
    for name, item in restore_args.items():
        if isinstance(item, StandardRestore):
            if name not in saved["trees"]:
                raise CheckpointError(f"{path}: no item {name!r} (saved: {saved['trees']})")
            out[name] = trees[name]
        elif isinstance(item, JsonRestore):
            if name not in saved["json"]:
                raise CheckpointError(f"{path}: no JSON item {name!r} "
                                      f"(saved: {sorted(saved['json'])})")
            out[name] = saved["json"][name]
        else:
            raise TypeError(f"Composite item {name!r}: expected StandardRestore or "
                            f"JsonRestore, got {type(item).__name__}")
    return Composite(**out)


class StandardCheckpointer:
    """orbax's ``StandardCheckpointer``: one pytree saved into a directory of its own.

        >>> import tempfile, os, functrans.numpy as jnp
        >>> checkpointer = StandardCheckpointer()
        >>> where = os.path.join(tempfile.mkdtemp(), "state")
        >>> checkpointer.save(where, {"w": jnp.ones(2)})
        >>> checkpointer.restore(where)["w"]
        Array([1., 1.], dtype=float32)

    The directory holds one safetensors file (see :func:`save`); saving into a directory
    that exists needs ``force=True``, as in orbax. Saves are synchronous.
    """

    _FILE = "checkpoint.safetensors"

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def save(self, directory, state=None, *, args=None, force: bool = False) -> None:
        """Save ``state`` (or ``args.StandardSave(state)``) into ``directory``."""
        if args is not None:
            state, _ = _tree_from_save_args(args, None)
        directory = os.fspath(directory)
        if os.path.exists(directory) and not force:
            raise ValueError(f"Destination {directory} already exists (pass force=True to "
                             "overwrite it)")
        os.makedirs(directory, exist_ok=True)
        save(os.path.join(directory, self._FILE), state)

    def restore(self, directory, target=None, *, args=None):
        """Restore the tree saved in ``directory``; with ``target`` (or
        ``args.StandardRestore(target)``), of ``target``'s structure, shapes and dtypes."""
        if args is not None:
            return _restore_with_args(os.path.join(os.fspath(directory), self._FILE), args)
        return restore(os.path.join(os.fspath(directory), self._FILE), target)

    def metadata(self, directory) -> dict:
        """:func:`read_metadata` of the checkpoint in ``directory``."""
        return read_metadata(os.path.join(os.fspath(directory), self._FILE))

    def wait_until_finished(self) -> None:
        """Saves are synchronous: when ``save`` returns, the checkpoint is on disk."""

    def close(self) -> None:
        """Nothing to release; kept for code written for orbax."""


# =============================================================================================
# ``functrans.checkpoint`` is also JAX's remat decorator
# =============================================================================================

class _CheckpointModule(types.ModuleType):
    """This module's type: calling the module is ``functrans.checkpoint(f)`` (rematerialize
    ``f``'s intermediates in reverse mode, as ``jax.checkpoint``), so the save/restore API and
    the remat decorator share the name ``functrans.checkpoint`` as the design asks."""

    def __call__(self, fun, **kwargs):
        return remat(fun, **kwargs)


sys.modules[__name__].__class__ = _CheckpointModule
