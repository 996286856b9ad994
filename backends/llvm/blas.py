"""BLAS and LAPACK for generated code: the routines it calls, found in SciPy's libraries and
registered with the JIT linker, and the thread pool's hold on BLAS's threads.

Generated code calls ``ft_<routine>`` (Fortran ABI) so that cached machine code is linked
against this process's libraries, whatever their addresses. Registration is done on first
need: SciPy's libraries take a noticeable part of a second to load.

    >>> register_blas_symbols()        # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import ctypes
import os

from functrans.backends.llvm import linker, thread_pool

# what split matrix products call to run their chunks on the thread pool (see
# matrix_products.gemm_split), and the bands of matrix-vector products (gemv_bands)
GEMM_FOR_SYMBOL = "ft_gemm_for"
GEMM_RANGE_FOR_SYMBOL = "ft_gemm_for_range"
# ... and products cut into blocks of rows or columns that are one call when run serially
GEMM_JOINED_FOR_SYMBOL = "ft_gemm_for_joined"

_blas_registered = False


# BLAS and LAPACK routines generated code calls (as ``ft_<name>``), from SciPy's libraries
BLAS_ROUTINES = ("sgemm", "dgemm", "sgemv", "dgemv", "strsm", "dtrsm")
LAPACK_ROUTINES = ("spotrf", "dpotrf")


def register_blas_symbols() -> None:
    """Register ``ft_sgemm``/``ft_dgemm`` (and the other :data:`BLAS_ROUTINES` and
    :data:`LAPACK_ROUTINES`) as the Fortran-ABI routines of SciPy's BLAS and LAPACK. Done on
    first need: importing scipy.linalg takes a noticeable part of a second."""
    global _blas_registered
    if _blas_registered:
        return
    names = BLAS_ROUTINES + LAPACK_ROUTINES
    openblas = _scipy_openblas()
    if openblas is not None and all(hasattr(openblas, f"scipy_{n}_") for n in names):
        # the library behind SciPy's cython_blas, without importing it (and SciPy)
        for name in names:
            address = ctypes.cast(getattr(openblas, f"scipy_{name}_"), ctypes.c_void_p).value
            linker.register_symbol(f"ft_{name}", address)
    else:
        get_name = ctypes.pythonapi.PyCapsule_GetName
        get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
        get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
        get_pointer.restype, get_pointer.argtypes = (ctypes.c_void_p,
                                                     [ctypes.py_object, ctypes.c_char_p])
        for module, routines in ((_load_cython_module("cython_blas"), BLAS_ROUTINES),
                                 (_load_cython_module("cython_lapack"), LAPACK_ROUTINES)):
            for name in routines:
                capsule = module.__pyx_capi__[name]
                linker.register_symbol(f"ft_{name}", get_pointer(capsule, get_name(capsule)))
    _blas_registered = True


_openblas_library: list = []

# OpenBLAS's idle threads spin (yielding) for 2**OPENBLAS_THREAD_TIMEOUT cycles before they
# sleep: 2**28 by default, about 0.1 s, from the moment the library is loaded and after each
# threaded call. Generated code never runs SciPy's OpenBLAS threaded (see thread_pool's hold),
# so that spin only takes a core from the first calls of the program that loaded it: the MLP
# step's first 10 calls in a fresh process on the 2-core development VM, 6 pairs, took 3.7 ms
# (median) with it against 2.1 ms without (docs/performance.md, "The MLP step"). When functrans
# loads the library it asks for this shorter spin, about 0.3 ms, still long enough for a
# user's back-to-back threaded SciPy calls; a value the user set is kept.
OPENBLAS_THREAD_TIMEOUT = 20


def _load_openblas(path: str) -> ctypes.CDLL:
    """``ctypes.CDLL(path)``, OpenBLAS's thread timeout set while it loads (it reads its
    environment then, once) unless the user set one; the environment is left as it was, so
    child processes see what the user gave them."""
    name = "OPENBLAS_THREAD_TIMEOUT"
    if name in os.environ:
        return ctypes.CDLL(path)
    os.environ[name] = str(OPENBLAS_THREAD_TIMEOUT)
    try:
        return ctypes.CDLL(path)
    finally:
        del os.environ[name]


def _scipy_openblas():
    """The OpenBLAS that SciPy's wheels ship (``scipy.libs``), loaded, or None."""
    if not _openblas_library:
        import glob
        import importlib.util
        found = None
        try:
            site = os.path.dirname(os.path.dirname(importlib.util.find_spec("scipy").origin))
            for folder in ("scipy.libs", os.path.join("scipy", ".dylibs")):
                for path in sorted(glob.glob(os.path.join(site, folder, "*openblas*"))):
                    try:
                        found = _load_openblas(path)
                        break
                    except OSError:
                        continue
                if found is not None:
                    break
        except Exception:  # noqa: BLE001 (no SciPy layout we know)
            found = None
        _openblas_library.append(found)
    return _openblas_library[0]


def _load_cython_module(name: str):
    """SciPy's ``cython_blas`` or ``cython_lapack`` extension (its ``__pyx_capi__`` holds the
    routines' pointers). Loaded from its file when possible: importing it through
    ``scipy.linalg`` runs that package's ``__init__``, which takes a large part of a
    second."""
    import glob
    import importlib
    import importlib.machinery
    import importlib.util
    try:
        scipy_spec = importlib.util.find_spec("scipy")
        folder = os.path.join(os.path.dirname(scipy_spec.origin), "linalg")
        suffixes = importlib.machinery.EXTENSION_SUFFIXES
        paths = [p for suffix in suffixes for p in glob.glob(os.path.join(folder, name + suffix))]
        loader = importlib.machinery.ExtensionFileLoader(name, paths[0])
        spec = importlib.util.spec_from_file_location(name, paths[0], loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        module.__pyx_capi__  # noqa: B018 (the pointers we need are there)
        return module
    except Exception:  # noqa: BLE001 (any layout surprise: the ordinary import)
        return importlib.import_module(f"scipy.linalg.{name}")


_gemm_registered = False


def register_gemm_symbols() -> None:
    """Register what matrix products call: ``ft_gemm_for`` runs a split product's chunks
    (see :func:`matrix_products.gemm_split`) on the thread pool, ``ft_gemm_for_range`` the
    bands of a matrix-vector product (one call when run serially), and ``ft_blas_hold`` keeps
    BLAS on one thread around a product (see :mod:`thread_pool`) through OpenBLAS's
    ``openblas_set_num_threads_local``. A BLAS without that function keeps its own threads:
    the chunks then run one after another on the calling thread, and the hold does
    nothing."""
    global _gemm_registered
    if _gemm_registered:
        return
    register_blas_symbols()
    local_threads = _blas_local_threads_address()
    thread_pool.hold_blas_with(local_threads)  # starts the pool: it defines ft_blas_hold
    pooled = local_threads is not None and thread_pool.num_threads() > 1
    for name, on_pool, serial in (
            (GEMM_FOR_SYMBOL, thread_pool.SYMBOL, thread_pool.SERIAL_SYMBOL),
            (GEMM_RANGE_FOR_SYMBOL, thread_pool.RANGE_SYMBOL, thread_pool.SERIAL_RANGE_SYMBOL),
            (GEMM_JOINED_FOR_SYMBOL, thread_pool.JOINED_SYMBOL,
             thread_pool.SERIAL_RANGE_SYMBOL)):
        linker.register_symbol(name, thread_pool.helper_address(on_pool if pooled else serial))
    _gemm_registered = True


def _blas_local_threads_address():
    """The address of ``openblas_set_num_threads_local`` in the OpenBLAS behind SciPy's
    BLAS (OpenBLAS >= 0.3.27), or None."""
    libraries = [_scipy_openblas()]
    if libraries[0] is None and os.path.exists("/proc/self/maps"):
        # a shared OpenBLAS (a distribution's or conda's), not the copy inside NumPy's wheel
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps
                            if "openblas" in line and "numpy" not in line})
        libraries = []
        for path in paths:
            try:
                libraries.append(ctypes.CDLL(path))
            except OSError:
                continue
    for library in libraries:
        function = getattr(library, "openblas_set_num_threads_local", None)
        if function is not None:
            return ctypes.cast(function, ctypes.c_void_p).value
    return None


_blas_controller = None


@contextlib.contextmanager
def blas_threads(count: int):
    """Limit the BLAS libraries to ``count`` threads within the block (no-op before BLAS is
    loaded, or without threadpoolctl)."""
    global _blas_controller
    if not _blas_registered:
        yield
        return
    if _blas_controller is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            yield
            return
        _blas_controller = ThreadpoolController()
    with _blas_controller.limit(limits=count, user_api="blas"):
        yield


def needs_blas(object_code: bytes) -> bool:
    """Whether compiled code calls BLAS or LAPACK (their names are in its symbol table)."""
    return any(f"ft_{name}".encode() in object_code
               for name in BLAS_ROUTINES + LAPACK_ROUTINES)


def splits_gemms(object_code: bytes) -> bool:
    """Whether compiled code runs matrix products in chunks (see
    :func:`matrix_products.gemm_split`) or holds BLAS to one thread around a product."""
    return any(name.encode() in object_code
               for name in (GEMM_FOR_SYMBOL, GEMM_RANGE_FOR_SYMBOL, GEMM_JOINED_FOR_SYMBOL,
                            thread_pool.BLAS_HOLD_SYMBOL))
