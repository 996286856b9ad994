"""``jit`` with the llvm backend against NumPy (and JAX when installed).

    python benchmarks/bench_jit.py            # all workloads
    python benchmarks/bench_jit.py --quick    # fewer repetitions

Prints one row per workload: median times and the speedup over NumPy (>1 means functrans
is faster). Each functrans function is called once before timing, so compilation (or the
persistent cache) is not measured; the compile time is printed separately.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import functrans  # noqa: E402
import functrans.numpy as jnp  # noqa: E402

try:
    import jax  # noqa: F401
    import jax.numpy as jjnp
    HAVE_JAX = True
except ImportError:
    HAVE_JAX = False


def median_time(fn, repeats: int, min_time: float = 0.0) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs (more for fast functions)."""
    times = []
    start = time.perf_counter()
    while len(times) < repeats or time.perf_counter() - start < min_time:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def block(x):
    return functrans.block_until_ready(x)


def memcpy_bandwidth(nbytes: int, repeats: int) -> float:
    """Bytes moved per second by a plain copy (read + write) of ``nbytes``."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    t = median_time(lambda: np.copyto(dst, src), repeats)
    return 2 * nbytes / t


# =============================================================================================
# Workloads
# =============================================================================================


def elementwise_chain(n=1 << 22):
    x = np.random.default_rng(0).normal(size=n).astype(np.float32)

    def f(x):  # eight elementwise ops
        y = x * 1.5 + 0.5
        y = jnp.tanh(y)
        y = y * y
        y = jnp.exp(-y)
        y = y + x
        y = jnp.abs(y)
        return jnp.maximum(y * 0.5, 0.1)

    def numpy_f(x):
        y = x * np.float32(1.5) + np.float32(0.5)
        y = np.tanh(y)
        y = y * y
        y = np.exp(-y)
        y = y + x
        y = np.abs(y)
        return np.maximum(y * np.float32(0.5), np.float32(0.1))

    return "8-op elementwise chain, 4M f32", f, numpy_f, (x,), 2 * x.nbytes


def logsumexp_rows(n=4096):
    x = np.random.default_rng(1).normal(size=(n, n)).astype(np.float32)

    def f(x):
        m = jnp.max(x, axis=1, keepdims=True)
        return jnp.log(jnp.sum(jnp.exp(x - m), axis=1)) + m[:, 0]

    def numpy_f(x):
        m = x.max(axis=1, keepdims=True)
        return np.log(np.exp(x - m).sum(axis=1)) + m[:, 0]

    return "logsumexp over rows, 4096x4096 f32", f, numpy_f, (x,), x.nbytes


def matmul(n=2048):
    rng = np.random.default_rng(2)
    a = rng.normal(size=(n, n)).astype(np.float32)
    b = rng.normal(size=(n, n)).astype(np.float32)
    return "matmul 2048^3 f32", lambda a, b: jnp.dot(a, b), np.dot, (a, b), None


def mlp_step(batch=128, sizes=(784, 512, 512, 10)):
    rng = np.random.default_rng(3)
    params = [(rng.normal(size=(m, n)).astype(np.float32) / np.sqrt(m), np.zeros(n, np.float32))
              for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.normal(size=(batch, sizes[0])).astype(np.float32)
    labels = rng.integers(0, sizes[-1], batch)
    onehot = np.eye(sizes[-1], dtype=np.float32)[labels]

    def loss(params, x, onehot):
        h = x
        for i, (w, b) in enumerate(params):
            h = jnp.dot(h, w) + b
            if i < len(params) - 1:
                h = jnp.maximum(h, 0.0)
        m = jnp.max(h, axis=1, keepdims=True)
        logp = h - m - jnp.log(jnp.sum(jnp.exp(h - m), axis=1, keepdims=True))
        return -jnp.mean(jnp.sum(logp * onehot, axis=1))

    f = functrans.value_and_grad(loss)

    def numpy_f(params, x, onehot):
        acts, pre = [x], []
        h = x
        for i, (w, b) in enumerate(params):
            z = h @ w + b
            pre.append(z)
            h = np.maximum(z, 0) if i < len(params) - 1 else z
            acts.append(h)
        m = h.max(axis=1, keepdims=True)
        e = np.exp(h - m)
        s = e.sum(axis=1, keepdims=True)
        logp = h - m - np.log(s)
        value = -np.mean(np.sum(logp * onehot, axis=1))
        g = (e / s - onehot) / x.shape[0]
        grads = []
        for i in reversed(range(len(params))):
            w, _ = params[i]
            grads.append((acts[i].T @ g, g.sum(axis=0)))
            if i:
                g = (g @ w.T) * (pre[i - 1] > 0)
        return value, grads[::-1]

    return "MLP 784-512-512-10 fwd+bwd, batch 128", f, numpy_f, (params, x, onehot), None


def dispatch():
    x = np.ones(4, np.float32)
    return "dispatch: cached call on 4 floats", lambda x, y: x * y + 1.0, \
        lambda x, y: x * y + np.float32(1.0), (x, x), None


# =============================================================================================


def run(quick: bool):
    repeats = 5 if quick else 15
    rows = []
    bandwidth = memcpy_bandwidth(1 << 26, repeats)
    for make in (elementwise_chain, logsumexp_rows, matmul, mlp_step, dispatch):
        name, f, numpy_f, args, nbytes = make()
        jitted = functrans.jit(f)
        device_args = functrans.tree_util.tree_map(jnp.asarray, args)
        start = time.perf_counter()
        block(jitted(*device_args))
        first_call = time.perf_counter() - start
        small = make is dispatch
        reps = 2000 if small else repeats
        t_ft = median_time(lambda: block(jitted(*device_args)), reps, 0.5 if small else 0)
        t_np = median_time(lambda: numpy_f(*args), reps, 0.5 if small else 0)
        t_jax = None
        if HAVE_JAX:
            jf = jax.jit(lambda *a: f(*a))
            jargs = jax.tree_util.tree_map(jjnp.asarray, args)
            jax.block_until_ready(jf(*jargs))
            t_jax = median_time(lambda: jax.block_until_ready(jf(*jargs)), reps)
        extra = ""
        if nbytes:
            gbs = nbytes / t_ft / 1e9
            extra = f"{gbs:.1f} GB/s = {100 * nbytes / t_ft / bandwidth:.0f}% of memcpy"
        rows.append((name, t_ft, t_np, t_jax, first_call, extra))
    print(f"memcpy bandwidth (read+write): {bandwidth / 1e9:.1f} GB/s;  "
          f"backend: {functrans._backends.get_backend(None).name};  cores: {os.cpu_count()}")
    header = f"{'workload':40s} {'functrans':>11s} {'numpy':>11s} {'speedup':>8s}"
    if HAVE_JAX:
        header += f" {'jax':>11s}"
    header += f" {'1st call':>9s}  notes"
    print(header)
    print("-" * len(header))
    for name, t_ft, t_np, t_jax, first, extra in rows:
        line = f"{name:40s} {_fmt(t_ft):>11s} {_fmt(t_np):>11s} {t_np / t_ft:>7.2f}x"
        if HAVE_JAX:
            line += f" {_fmt(t_jax):>11s}"
        line += f" {_fmt(first):>9s}  {extra}"
        print(line)
    if not HAVE_JAX:
        print("(JAX is not installed: its column is skipped)")


def _fmt(t) -> str:
    if t is None:
        return "-"
    if t < 1e-3:
        return f"{t * 1e6:.1f} µs"
    if t < 1:
        return f"{t * 1e3:.2f} ms"
    return f"{t:.2f} s"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    run(parser.parse_args().quick)
