"""Single-kernel workloads: an elementwise chain, a row reduction, a matmul, and dispatch.

functrans, JAX and NumPy run the same source (the functions take the numpy-like module);
PyTorch runs the same operations spelled with ``torch``.
"""
from __future__ import annotations

import numpy as np

from benchmarks import frameworks
from benchmarks.harness import Options, Row, compare, time_round_robin


def _jitted(fn, *args):
    """``{impl: zero-argument callable}`` for functrans and JAX (when present) jitting ``fn(np_module, *args)``."""
    ft = frameworks.load("functrans")
    impls = {}
    f = ft.jit(lambda *a: fn(ft.numpy, *a))
    fargs = [ft.numpy.asarray(a) for a in args]
    impls["functrans"] = lambda: ft.block_until_ready(f(*fargs))
    jax = frameworks.load("jax")
    if jax is not None:
        j = jax.jit(lambda *a: fn(jax.numpy, *a))
        jargs = [jax.numpy.asarray(a) for a in args]
        impls["jax"] = lambda: jax.block_until_ready(j(*jargs))
    return impls


def _torch(options: Options, fn, *args, compile: bool = False) -> dict:
    """Callables for eager PyTorch (and ``torch.compile`` when asked and possible)."""
    if "torch" not in options.available:
        return {}
    torch = frameworks.load("torch")
    targs = [torch.from_numpy(a) for a in args]
    impls = {"torch": lambda: fn(torch, *targs)}
    if compile and options.torch_compile:
        compiled = frameworks.torch_compile(lambda *a: fn(torch, *a))
        if compiled is not None:
            impls["torch.compile"] = lambda: compiled(*targs)
    return impls


def _ordered(impls: dict, options: Options) -> dict:
    """Drop implementations not asked for (e.g. JAX installed but excluded)."""
    return {k: v for k, v in impls.items() if k in options.available or k == "torch.compile"}


# ---- memory bandwidth -------------------------------------------------------------------------

def memcpy_bandwidth(n: int, options: Options) -> float:
    """Bytes per second moved by ``np.copyto`` of ``n`` float32 (read + write counted)."""
    src = np.ones(n, np.float32)
    dst = np.empty_like(src)
    t, _ = time_round_robin({"copy": lambda: np.copyto(dst, src)}, options.repeats,
                            options.min_time)["copy"]
    return 2 * src.nbytes / t


# ---- workloads --------------------------------------------------------------------------------

def chain(m, x):
    """Eight elementwise operations (with NumPy's module, functrans.numpy or jax.numpy)."""
    y = x * 1.5 + 0.5
    y = m.tanh(y)
    y = y * y
    y = m.exp(-y)
    y = y + x
    y = m.abs(y)
    return m.maximum(y * 0.5, 0.1)


def torch_chain(torch, x):
    y = torch.tanh(x * 1.5 + 0.5)
    y = torch.exp(-(y * y)) + x
    return torch.clamp_min(torch.abs(y) * 0.5, 0.1)


def elementwise_chain(options: Options) -> list[Row]:
    n = (1 << 20) if options.quick else (1 << 22)
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    impls = _jitted(chain, x)
    impls["numpy"] = lambda: chain(np, x)
    impls.update(_torch(options, torch_chain, x, compile=True))
    row = compare("elementwise", f"8-op elementwise chain, {n >> 20}M f32", _ordered(impls, options),
                  options, tol=1e-5)
    bandwidth = memcpy_bandwidth(n, options)
    moved = 2 * x.nbytes                   # read x once, write the result once
    parts = []
    for impl in ("functrans", "jax", "torch.compile"):
        t = row.times.get(impl)
        if t:
            parts.append(f"{impl} {moved / t / 1e9:.1f} GB/s = {100 * moved / t / bandwidth:.0f}%")
    row.notes = f"memcpy {bandwidth / 1e9:.1f} GB/s; " + ", ".join(parts) + " of it"
    row.extra["memcpy_bytes_per_s"] = bandwidth
    return [row]


def logsumexp_rows_fn(m, x):
    top = m.max(x, axis=1, keepdims=True)
    return m.log(m.sum(m.exp(x - top), axis=1)) + top[:, 0]


def torch_logsumexp_rows(torch, x):
    top = torch.amax(x, dim=1, keepdim=True)
    return torch.log(torch.sum(torch.exp(x - top), dim=1)) + top[:, 0]


def logsumexp_rows(options: Options) -> list[Row]:
    n = 1024 if options.quick else 4096
    x = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    impls = _jitted(logsumexp_rows_fn, x)
    impls["numpy"] = lambda: logsumexp_rows_fn(np, x)
    impls.update(_torch(options, torch_logsumexp_rows, x, compile=True))
    row = compare("logsumexp", f"logsumexp over rows, {n}x{n} f32", _ordered(impls, options),
                  options, tol=1e-5)
    t = row.times.get("functrans")
    if t:
        row.notes = f"functrans reads {x.nbytes / t / 1e9:.1f} GB/s"
    return [row]


def sort_fn(m, x):
    """Sorted values and the stable sorting permutation of each row."""
    return m.sort(x, axis=-1), m.argsort(x, axis=-1, stable=True)


def torch_sort(torch, x):
    values, order = torch.sort(x, dim=-1, stable=True)
    return values, order


def sort_rows(options: Options) -> list[Row]:
    rows, n = (4, 1 << 14) if options.quick else (4, 1 << 18)
    x = np.random.default_rng(3).standard_normal((rows, n)).astype(np.float32)
    impls = _jitted(sort_fn, x)
    impls["numpy"] = lambda: (np.sort(x, axis=-1, kind="stable"), np.argsort(x, axis=-1, kind="stable"))
    impls.update(_torch(options, torch_sort, x))
    row = compare("sort", f"sort + argsort of {rows} rows of {n >> 10}K f32", _ordered(impls, options),
                  options, tol=0)
    return [row]


def matmul(options: Options) -> list[Row]:
    n = 512 if options.quick else 2048
    rng = np.random.default_rng(2)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    impls = _jitted(lambda m, a, b: m.dot(a, b), a, b)
    impls["numpy"] = lambda: np.dot(a, b)
    impls.update(_torch(options, lambda torch, a, b: torch.mm(a, b), a, b))
    row = compare("matmul", f"matmul {n}^3 f32", _ordered(impls, options), options, tol=1e-5,
                  min_time=0.0)
    flops = 2.0 * n ** 3
    t_ft, t_np = row.times.get("functrans"), row.times.get("numpy")
    if t_ft and t_np:
        row.notes = (f"functrans {flops / t_ft / 1e9:.0f} GFLOP/s = {100 * t_np / t_ft:.0f}% of "
                     f"NumPy's BLAS ({flops / t_np / 1e9:.0f} GFLOP/s)")
    return [row]


def dispatch(options: Options) -> list[Row]:
    x = np.arange(4, dtype=np.float32)
    y = np.full(4, 2.0, np.float32)
    impls = _jitted(lambda m, x, y: x * y + 1.0, x, y)
    impls["numpy"] = lambda: x * y + 1.0
    impls.update(_torch(options, lambda torch, x, y: x * y + 1.0, x, y))
    row = compare("dispatch", "dispatch: cached jitted call, 4 floats", _ordered(impls, options),
                  options, tol=0.0, min_time=0.5 if options.quick else 2.0)
    row.notes = "per call; NumPy/torch: the eager op"
    return [row]
