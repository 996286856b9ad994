"""Data exchange with the host: arrays from buffers, strings, iterables and files, saving
and loading through NumPy, printing, and DLPack import.

    >>> import functrans.numpy as jnp
    >>> jnp.frombuffer(b"\\x01\\x02", dtype=jnp.uint8)
    Array([1, 2], dtype=uint8)
"""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans._api import device_put
from functrans._array import is_concrete_array
from functrans.numpy._creation import asarray


# These read bytes, text, iterables or files on the host at call time (at trace time under
# jit, where the result is a constant), then convert as jnp.asarray does: 64-bit types are
# narrowed unless x64 is enabled.

def frombuffer(buffer, dtype=float, count=-1, offset=0):
    """A 1-D array of the bytes in ``buffer`` read as ``dtype`` (``count`` items, or all,
    starting at byte ``offset``).

        >>> frombuffer(b"\\x01\\x02\\x03", dtype=jnp.uint8)
        Array([1, 2, 3], dtype=uint8)
    """
    return asarray(np.frombuffer(buffer, dtype=np.dtype(dtype), count=count,
                                 offset=offset))


def fromstring(string, dtype=float, count=-1, *, sep):
    """A 1-D array of the numbers in the text ``string``, separated by ``sep``.

        >>> fromstring("1 2 3", dtype=int, sep=" ")
        Array([1, 2, 3], dtype=int32)
    """
    return asarray(np.fromstring(string, dtype=np.dtype(dtype), count=count, sep=sep))


def fromiter(iterable, dtype, count=-1):
    """A 1-D array of the values of ``iterable`` (consumed on the host when called).

        >>> fromiter(range(3), dtype=float)
        Array([0., 1., 2.], dtype=float32)
    """
    return asarray(np.fromiter(iterable, dtype=np.dtype(dtype), count=count))


def fromfile(file, dtype=float, count=-1, sep="", offset=0):
    """A 1-D array of the data in ``file`` (binary, or text when ``sep`` is given), read on
    the host when called."""
    return asarray(np.fromfile(file, dtype=np.dtype(dtype), count=count, sep=sep,
                               offset=offset))


def save(file, arr, allow_pickle=True):
    """Save one array to a ``.npy`` file (through ``numpy.save``)."""
    np.save(file, np.asarray(arr), allow_pickle=allow_pickle)


def savez(file, *args, allow_pickle=True, **kwds):
    """Save several arrays to an uncompressed ``.npz`` archive (through ``numpy.savez``)."""
    np.savez(file, *(np.asarray(a) for a in args), allow_pickle=allow_pickle,
             **{k: np.asarray(v) for k, v in kwds.items()})


def load(file, *args, **kwargs):
    """Load a ``.npy`` file as an Array (arguments as ``numpy.load``); ``.npz`` archives
    come back as NumPy's lazy archive object. bfloat16 data, which NumPy stores as 2-byte
    opaque records, is recognized and restored.

        >>> import io
        >>> f = io.BytesIO()
        >>> save(f, jnp.array([1, 2], dtype=jnp.bfloat16))
        >>> _ = f.seek(0)
        >>> load(f)
        Array([1, 2], dtype=bfloat16)
    """
    out = np.load(file, *args, **kwargs)
    if not isinstance(out, np.ndarray):
        return out
    if out.dtype == np.dtype("V2"):
        out = out.view(_dtypes.bfloat16)
    try:
        return asarray(out)
    except TypeError:
        return out  # a dtype arrays cannot hold (e.g. object): hand back NumPy's array


# =============================================================================================
# Printing and DLPack
# =============================================================================================

# Arrays print through NumPy, so NumPy's print options govern them.
printoptions = np.printoptions
get_printoptions = np.get_printoptions
set_printoptions = np.set_printoptions


def array_repr(arr, max_line_width=None, precision=None, suppress_small=None):
    """The ``repr`` of an array with the given print options, e.g. ``Array([1., 2.],
    dtype=float32)`` (NumPy arrays print as NumPy prints them).

        >>> array_repr(jnp.array([1.0, 2.5]), precision=1)
        'Array([1. , 2.5], dtype=float32)'
    """
    if not is_concrete_array(arr):
        return np.array_repr(np.asarray(arr), max_line_width, precision, suppress_small)
    with np.printoptions(**{k: v for k, v in (("linewidth", max_line_width),
                                               ("precision", precision),
                                               ("suppress", suppress_small))
                            if v is not None}):
        return repr(arr)


def array_str(a, max_line_width=None, precision=None, suppress_small=None):
    """The ``str`` of an array (its values only) with the given print options.

        >>> array_str(jnp.array([1.0, 2.5]))
        '[1.  2.5]'
    """
    return np.array_str(np.asarray(a), max_line_width, precision, suppress_small)


def from_dlpack(x, /, *, device=None, copy=None):
    """An Array from any object with ``__dlpack__`` on the host (a NumPy array, a PyTorch
    CPU tensor, ...). The data are copied unless ``copy=False``: functrans arrays are
    immutable, and a shared buffer could change under them.

        >>> from_dlpack(np.arange(3))
        Array([0, 1, 2], dtype=int32)
    """
    host = np.from_dlpack(x)
    if copy is not False:
        host = np.array(host, copy=True)
    out = asarray(host)
    if device is not None:
        out = device_put(out, device)
    return out
