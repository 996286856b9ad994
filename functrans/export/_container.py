"""The bytes of a serialized Exported: one safetensors file.

Layout (any safetensors reader opens it; its arrays are the programs' constants):

* 8 bytes: the length ``n`` of the header (little-endian), then ``n`` bytes of JSON
  header, then the tensors' bytes — the safetensors layout;
* the header's ``__metadata__`` holds ``format`` (``"functrans.export"``), ``version``
  (the format version, an integer as text), ``document`` (the JSON document: the exported
  functions, see :mod:`._exported`) and ``sha256`` (of the document and every tensor's
  bytes, in name order), so a corrupted or truncated file is refused, never half-read;
* every constant is one tensor named ``t<k>`` in its own dtype (raw bytes, ``U8``, for the
  dtypes safetensors has no tag for; the document records each one's dtype and shape).
  Identical constants (the weights a function and its VJP share) are stored once.

Versions: the format version changes only when the document's meaning changes, never in a
patch release. A reader accepts every version from :data:`MIN_VERSION` to
:data:`VERSION` and refuses a newer one with a ``ValueError`` that says to upgrade.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

from functrans.export import _registry

FORMAT = "functrans.export"
VERSION = 1
MIN_VERSION = 1
_MAX_HEADER = 100 << 20  # the safetensors limit

# safetensors' dtype tags; other dtypes are stored as raw bytes (U8)
_TAGS = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
         "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint64": "U64",
         "uint32": "U32", "uint16": "U16", "uint8": "U8", "bool": "BOOL"}


def _digest(document_text: str, names: list[str], data: dict) -> str:
    h = hashlib.sha256(document_text.encode())
    for name in names:
        h.update(name.encode() + b"\0")
        h.update(data[name])
    return h.hexdigest()


def pack(document: dict, arrays: list[np.ndarray]) -> bytearray:
    """The file holding ``document`` (JSON-able; its ``tensors`` entry is filled here) and
    the constant ``arrays`` it refers to by position. The bytes depend only on the inputs
    (sorted JSON keys, tensors laid out by a fixed rule), so equal exports give equal
    files."""
    names, specs, entries, raws = [], [], {}, {}
    for k, array in enumerate(arrays):
        name = f"t{k}"
        dtype = _registry.dtype_name(array.dtype)
        raws[name] = np.ascontiguousarray(array).tobytes()
        tag = _TAGS.get(dtype)
        entries[name] = {"dtype": tag or "U8",
                         "shape": list(array.shape) if tag else [len(raws[name])]}
        names.append(name)
        specs.append({"name": name, "dtype": dtype, "shape": list(array.shape)})
    document = dict(document, tensors=specs)
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)
    # as safetensors writes: widest elements first, so each tensor stays aligned
    order = sorted(names, key=lambda n: (-np.dtype(arrays[int(n[1:])].dtype).itemsize,
                                         int(n[1:])))
    offset = 0
    for name in order:
        entries[name]["data_offsets"] = [offset, offset + len(raws[name])]
        offset += len(raws[name])
    header = {"__metadata__": {"format": FORMAT, "version": str(VERSION), "document": text,
                               "sha256": _digest(text, sorted(names), raws)}, **entries}
    encoded = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the tensors' bytes start 8-byte aligned
    return bytearray(len(encoded).to_bytes(8, "little") + encoded
                     + b"".join(raws[n] for n in order))


def unpack(blob) -> tuple[dict, list[np.ndarray]]:
    """(document, constant arrays) of a file written by :func:`pack`. ``ValueError`` for
    anything else: not this format, a newer version, truncated or corrupted bytes."""
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise TypeError(f"deserialize takes bytes, got {type(blob).__name__}")
    blob = bytes(blob)
    if len(blob) < 8:
        raise ValueError(f"not a serialized Exported: {len(blob)} bytes is too short")
    n = int.from_bytes(blob[:8], "little")
    if n > min(len(blob) - 8, _MAX_HEADER):
        raise ValueError(f"not a serialized Exported, or truncated: its header claims {n} "
                         f"bytes and {len(blob) - 8} follow")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ValueError(f"not a serialized Exported (unreadable header: {err})") from None
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__"), dict):
        raise ValueError("not a serialized Exported (a header without metadata)")
    metadata = header.pop("__metadata__")
    if metadata.get("format") != FORMAT:
        raise ValueError("not a serialized Exported (the file's format is "
                         f"{str(metadata.get('format'))[:40]!r}, not {FORMAT!r})")
    version = metadata.get("version")
    if not (isinstance(version, str) and version.isdigit()):
        raise ValueError(f"corrupted serialized Exported: format version {version!r}")
    if int(version) > VERSION:
        raise ValueError(f"the serialized Exported has format version {version}, newer than "
                         f"this functrans reads (versions {MIN_VERSION} to {VERSION}); "
                         "upgrade functrans to load it")
    if int(version) < MIN_VERSION:
        raise ValueError(f"the serialized Exported has format version {version}, which this "
                         f"functrans no longer reads (versions {MIN_VERSION} to {VERSION})")
    data = _tensor_bytes(header, blob[8 + n:])
    text = metadata.get("document")
    if not isinstance(text, str) or \
            _digest(text, sorted(data), data) != metadata.get("sha256"):
        raise ValueError("corrupted serialized Exported: its checksum does not match its "
                         "contents")
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"corrupted serialized Exported (unreadable document: {err})") from None
    if not isinstance(document, dict) or not isinstance(document.get("tensors"), list):
        raise ValueError("corrupted serialized Exported: no tensor list in its document")
    return document, [_array(spec, data) for spec in document["tensors"]]


def _tensor_bytes(header: dict, body: bytes) -> dict[str, bytes]:
    data = {}
    for name, info in header.items():
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(isinstance(x, int) for x in offsets)
                and 0 <= offsets[0] <= offsets[1] <= len(body)):
            raise ValueError(f"corrupted or truncated serialized Exported: tensor {name!r} "
                             f"lies outside the {len(body)} bytes of data")
        data[name] = body[offsets[0]:offsets[1]]
    return data


def _array(spec, data: dict) -> np.ndarray:
    if not isinstance(spec, dict) or spec.get("name") not in data:
        raise ValueError(f"corrupted serialized Exported: tensor {str(spec)[:60]} is missing")
    dtype = _registry.dtype_from_name(spec.get("dtype"))
    shape = spec.get("shape")
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise ValueError(f"corrupted serialized Exported: tensor shape {shape!r}")
    raw = data[spec["name"]]
    count = int(np.prod(shape, dtype=object))
    if count * dtype.itemsize != len(raw):
        raise ValueError(f"corrupted serialized Exported: tensor {spec['name']} holds "
                         f"{len(raw)} bytes, {spec['dtype']}{shape} needs "
                         f"{count * dtype.itemsize}")
    if dtype.itemsize == 0:  # float0 carries no bytes
        return np.zeros(shape, dtype)
    array = np.frombuffer(raw, dtype=dtype).reshape(shape)
    array.flags.writeable = False
    return array
