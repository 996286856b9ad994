"""Timing, agreement checks and the result rows shared by every workload.

A workload hands :func:`compare` one zero-argument callable per implementation (each
returns its result and waits for it to be ready). ``compare`` calls each once (compilation
and warm-up are not timed), checks the result against the reference implementation's, and
only then times the implementations that agreed: a wrong result never gets a time.
Samples are taken in rounds of blocks, one block per implementation per round (see
:func:`time_round_robin`), so a burst of load from another process on a small machine
slows all of them alike instead of one.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
import traceback
from typing import Any, Callable

import numpy as np

from benchmarks import frameworks

# Column order of the table; "numpy" is the usual reference.
IMPLEMENTATIONS = ("functrans", "jax", "numpy", "torch", "torch.compile")


@dataclasses.dataclass
class Options:
    """What the command line asked for."""

    quick: bool = False
    repeats: int = 15
    min_time: float = 1.0          # seconds of samples per implementation, at least
    rounds: int = 3                # interleaved rounds of blocks (see time_round_robin)
    torch_compile: bool = True
    available: tuple = ()           # implementations importable in this process


@dataclasses.dataclass
class Row:
    """One line of the table: median seconds per implementation, and what was checked.

    ``times[impl]`` is None when the implementation was skipped or disagreed; ``checks``
    maps an implementation to "ok" or to why it has no time; ``spread`` is the
    interquartile range of the samples over their median (the noise of the number).
    """

    name: str
    title: str
    times: dict = dataclasses.field(default_factory=dict)
    checks: dict = dataclasses.field(default_factory=dict)
    spread: dict = dataclasses.field(default_factory=dict)
    notes: str = ""
    unit: str = "time"              # "time", or "compile" for compile-time rows
    extra: dict = dataclasses.field(default_factory=dict)


# ---- results as NumPy leaves ----------------------------------------------------------------

def to_leaves(x) -> list[np.ndarray]:
    """Flatten a result of any implementation to NumPy arrays in one canonical order.

    Dicts are walked by sorted key (as functrans, JAX and our NumPy code all build the same
    parameter dicts), lists and tuples in order; tensors and device arrays become NumPy.
    """
    if isinstance(x, dict):
        return [leaf for k in sorted(x) for leaf in to_leaves(x[k])]
    if isinstance(x, (list, tuple)):
        return [leaf for item in x for leaf in to_leaves(item)]
    if hasattr(x, "detach"):        # a torch tensor
        return [x.detach().cpu().numpy()]
    return [np.asarray(x)]


def max_error(result, reference) -> float:
    """Largest |result - reference| over all leaves, each scaled by its reference's max."""
    got, want = to_leaves(result), to_leaves(reference)
    if len(got) != len(want):
        raise ValueError(f"{len(got)} result arrays, the reference has {len(want)}")
    worst = 0.0
    for g, w in zip(got, want):
        if g.shape != w.shape:
            raise ValueError(f"shape {g.shape}, the reference has {w.shape}")
        g, w = g.astype(np.float64), w.astype(np.float64)
        if not np.all(np.isfinite(g)) or not np.all(np.isfinite(w)):
            return float("inf")
        scale = max(float(np.max(np.abs(w))) if w.size else 0.0, 1e-30)
        worst = max(worst, float(np.max(np.abs(g - w))) / scale if w.size else 0.0)
    return worst


# ---- timing ---------------------------------------------------------------------------------

def step_as_gradients(params, learning_rate: float):
    """A ``check`` for :func:`compare` of SGD train steps: compare the gradient each step
    applied, (p - p_new) / lr, not p_new, which is dominated by p, so a wrong gradient could
    hide in its rounding."""
    before = [leaf.astype(np.float64) for leaf in to_leaves(params)]

    def check(result, reference):
        def grads(new):
            return [(b - n.astype(np.float64)) / learning_rate
                    for b, n in zip(before, to_leaves(new))]
        return max_error(grads(result), grads(reference))
    return check


def jit_impls(make_step: Callable[[Any], Callable], args: tuple,
              options: Options) -> dict[str, Callable[[], Any]]:
    """The implementations of a step written once against a library (``make_step(lib)``):
    functrans jitted, JAX jitted when installed, and functrans's reference interpreter as
    "numpy", each a zero-argument callable on ``args`` (NumPy arrays) converted once."""
    ft = frameworks.load("functrans")
    step = make_step(ft)
    fargs = ft.tree_util.tree_map(ft.numpy.asarray, args)
    fn = ft.jit(step)
    impls = {"functrans": lambda: ft.block_until_ready(fn(*fargs))}
    if "jax" in options.available:
        jax = frameworks.load("jax")
        jfn = jax.jit(make_step(jax))
        jargs = jax.tree_util.tree_map(jax.numpy.asarray, args)
        impls["jax"] = lambda: jax.block_until_ready(jfn(*jargs))
    reference = ft.jit(step, backend="reference")
    impls["numpy"] = lambda: ft.block_until_ready(reference(*fargs))
    return impls


def _calibrate(fn: Callable[[], Any], target: float = 2e-3) -> int:
    """How many calls make one sample of about ``target`` seconds (1 for slow functions)."""
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    if once >= target:
        return 1
    return min(100_000, max(1, int(target / max(once, 1e-7))))


def time_round_robin(fns: dict[str, Callable[[], Any]], repeats: int, min_time: float,
                     rounds: int = 3, settle: float = 0.25) -> dict[str, tuple[float, float]]:
    """Median seconds per call and relative spread (IQR / median) for each function.

    Samples are taken in ``rounds`` rounds; in each round every function gets one block of
    consecutive samples (at least ``repeats / rounds`` of them and ``min_time / rounds``
    seconds, capped at 10x the count). Blocks, not single alternating calls: BLAS,
    OpenMP and XLA worker threads spin for a while after each call, and alternating call
    by call would bill one library for another's spinning threads on a small machine.
    Rounds: a burst of load from another process then hits every function, not just one.
    Before each block it sleeps ``settle`` seconds: NumPy's OpenBLAS threads spin for about
    0.12 s after a product, taking a core from whichever library is measured next.
    """
    numbers = {name: _calibrate(fn) for name, fn in fns.items()}
    samples: dict[str, list[float]] = {name: [] for name in fns}
    rounds = max(1, min(rounds, repeats))
    per_block = -(-repeats // rounds)
    for _ in range(rounds):
        for name, fn in fns.items():
            n = numbers[name]
            time.sleep(settle)       # let the previous library's threads go idle
            fn()
            spent, count = 0.0, 0
            while count < per_block or (count < 10 * per_block and spent < min_time / rounds):
                start = time.perf_counter()
                for _ in range(n):
                    fn()
                elapsed = time.perf_counter() - start
                samples[name].append(elapsed / n)
                spent += elapsed
                count += 1
    out = {}
    for name, values in samples.items():
        med = statistics.median(values)
        q = statistics.quantiles(values, n=4) if len(values) >= 2 else [med, med, med]
        out[name] = (med, (q[2] - q[0]) / med if med > 0 else 0.0)
    return out


def median_time(fn: Callable[[], Any], repeats: int, min_time: float = 0.0) -> float:
    """Median seconds per call of ``fn()`` (after one untimed call)."""
    fn()
    return time_round_robin({"f": fn}, repeats, min_time)["f"][0]


# ---- comparing implementations ----------------------------------------------------------------

def _short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text[:100]


def compare(name: str, title: str, impls: dict[str, Callable[[], Any]], options: Options, *,
            reference: str = "numpy", tol: float = 1e-4, check=None,
            repeats: int | None = None, min_time: float | None = None) -> Row:
    """Check every implementation against ``reference``, then time those that agree.

    ``impls`` maps an implementation name to a zero-argument callable returning its
    (ready) result; a factory that raises while being built should be left out by the
    caller. ``tol`` bounds :func:`max_error`; ``check(result, reference_result)`` may
    replace the comparison (return the error to compare with ``tol``).

        >>> opts = Options(repeats=3, min_time=0)
        >>> row = compare("demo", "demo", {"numpy": lambda: np.ones(3),
        ...                                "functrans": lambda: np.ones(3)}, opts)
        >>> row.checks["functrans"]
        'ok'
    """
    row = Row(name, title)
    results, errors = {}, {}
    for impl, fn in impls.items():
        try:
            results[impl] = fn()        # compiles / warms up; not timed
        except Exception as exc:  # noqa: BLE001 - a failing implementation is reported, not fatal
            row.checks[impl] = "failed: " + _short_error(exc)
            if impl == "functrans":
                traceback.print_exc()
    if reference not in results:
        raise RuntimeError(f"{title}: the reference implementation {reference!r} did not run: "
                           f"{row.checks.get(reference)}")
    want = results[reference]
    timed = {}
    for impl, got in results.items():
        if impl == reference:
            row.checks[impl] = "ok"
            timed[impl] = impls[impl]
            continue
        try:
            err = check(got, want) if check is not None else max_error(got, want)
        except Exception as exc:  # noqa: BLE001
            row.checks[impl] = "disagrees: " + _short_error(exc)
            continue
        errors[impl] = err
        if err <= tol:
            row.checks[impl] = "ok"
            timed[impl] = impls[impl]
        else:
            row.checks[impl] = f"disagrees: error {err:.2e} > {tol:.0e}"
    row.extra["max_error"] = errors
    stats = time_round_robin(timed, repeats or options.repeats,
                             options.min_time if min_time is None else min_time,
                             rounds=options.rounds)
    for impl in impls:
        row.times[impl] = stats[impl][0] if impl in stats else None
        if impl in stats:
            row.spread[impl] = stats[impl][1]
    return row


def skipped(title: str, name: str, why: str) -> Row:
    """A row for a workload that could not run here."""
    return Row(name, title, notes=why)
