"""The differential fuzzer: random programs (:mod:`functrans.testing.programs`), each checked
against an oracle in four ways.

- ``jit``: the default backend's compiled result against the reference interpreter (and,
  for one program in four, again with the first argument donated);
- ``vmap``: ``jit(vmap(f))`` over a batch of three against a loop of ``jit(f)``;
- ``grad``: in float64, the gradient of a weighted sum of the results (forward mode for
  programs with a ``while_loop``) against central differences of the reference interpreter;
- ``sharded``: ``jit(f)`` with arguments split over four CPU devices against the reference;
- ``targets``: ``jit(f)`` compiled for an x86-64-v2 CPU against ``jit(f)`` for this one.

(The first four are what the test suite calls the four ways.) A mismatch raises
:class:`Mismatch`, whose report holds the program's source, the seed of
its arguments, the largest difference, and the compiler pass to blame: the first optional
pass (see ``functrans.config.disable_passes``) whose removal makes the check pass.

Floating-point results are compared within ``rtol * |expected| + atol * max(1, max
|expected|)`` (float32: 2e-4 and 1e-4, float64: 1e-9 and 1e-10) plus 1e-6 of the magnitude
bound of the intermediate values (a sum of large terms that cancel loses absolute, not
relative, precision); integers and booleans exactly; NaN where the oracle has NaN.

In the test suite: ``tests/test_fuzz.py``. From the command line (a long run before a
release; programs run in batches in worker processes, ``--jobs`` at once)::

    python -m functrans.testing.fuzz --programs 20000 --seed 1 --jobs 2
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter

import numpy as np

import functrans
from functrans import _backends
from functrans._config import config
from functrans.sharding import NamedSharding, PartitionSpec
from functrans.testing.programs import Program, programs

CHECKS = ("jit", "vmap", "grad", "sharded", "targets")
BATCH = 3  # vmap's batch
DEVICES = 4  # sharded: CPU devices in the mesh
OTHER_TARGET = "x86-64-v2"  # targets: the CPU compiled for besides this one
_TOLERANCES = {np.dtype(np.float32): (2e-4, 1e-4), np.dtype(np.float64): (1e-9, 1e-10)}

# per check: programs checked, programs it does not apply to, mismatches
counts: Counter = Counter()


class NotApplicable(Exception):
    """The check has nothing to compare for this program (no float result to
    differentiate, no argument to split over devices)."""


class Mismatch(AssertionError):
    """A check found the compiled result differing from its oracle. ``str()`` is the full
    report, with the bisection (run once, when the report is first asked for)."""

    def __init__(self, check: str, program: Program, seed: int, detail: str, rerun=None):
        super().__init__(check, detail)
        self.check, self.program, self.seed, self.detail = check, program, seed, detail
        self._rerun = rerun
        self._blame = None

    def blame(self) -> str:
        if self._blame is None:
            self._blame = bisect(self._rerun) if self._rerun is not None else "not bisected"
        return self._blame

    def __str__(self):
        return (f"the {self.check} check of a random program failed: {self.detail}\n"
                f"compiler pass to blame: {self.blame()}\n"
                f"arguments: Program.arguments(seed={self.seed}, ...) of shapes "
                f"{self.program.inputs}\n\n{self.program.source}")


# ---- comparing --------------------------------------------------------------------------------


def _compare(got, expected, bound: float, what: str) -> str | None:
    """None if ``got`` matches ``expected`` (see the module docstring), else what differs."""
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return f"{what}: {got.dtype}{list(got.shape)}, expected {expected.dtype}{list(expected.shape)}"
    if expected.dtype.kind not in "fc":
        bad = got != expected
        if bad.any():
            i = tuple(int(j) for j in np.argwhere(bad)[0])
            return f"{what}[{i}] is {got[i].item()!r}, expected {expected[i].item()!r}"
        return None
    rtol, atol = _TOLERANCES.get(expected.dtype, _TOLERANCES[np.dtype(np.float32)])
    nan = np.isnan(expected)
    finite = np.isfinite(expected)
    scale = float(np.max(np.abs(expected[finite]), initial=1.0))
    tol = rtol * np.abs(expected) + atol * scale + 1e-6 * bound * (expected.dtype.itemsize == 4)
    bad = (np.isnan(got) != nan) | (finite & ~(np.abs(got - expected) <= tol)) | \
        (~finite & ~nan & (got != expected))
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        return (f"{what}[{i}] is {got[i].item()!r}, expected {expected[i].item()!r} (tolerance "
                f"{float(np.broadcast_to(tol, expected.shape)[i]):.3g}; {int(bad.sum())} of "
                f"{bad.size} elements differ)")
    return None


def _compare_all(got, expected, bounds, what: str) -> str | None:
    got, expected = list(got), list(expected)
    if len(got) != len(expected):
        return f"{what}: {len(got)} results, expected {len(expected)}"
    for k, (g, e, bound) in enumerate(zip(got, expected, bounds)):
        found = _compare(g, e, bound, f"{what} result {k}")
        if found:
            return found
    return None


def _reference(f):
    return functrans.jit(f, backend="reference")


# ---- the checks -------------------------------------------------------------------------------


def check_jit(program: Program, seed: int) -> None:
    """The compiled program against the reference interpreter (also with its first
    argument donated, when the program says so)."""
    f = program.function(np.float32)
    args = program.arguments(seed, np.float32)
    expected = _reference(f)(*args)

    def run():
        found = _compare_all(functrans.jit(program.function(np.float32))(*args), expected,
                             program.bounds, "jit")
        if found is None and program.donate and args and args[0].size:
            donated = [functrans.numpy.array(args[0])] + list(args[1:])
            g = functrans.jit(program.function(np.float32), donate_argnums=0)
            found = _compare_all(g(*donated), expected, program.bounds, "jit (donated)")
        return found

    _run_check("jit", program, seed, run)


def check_vmap(program: Program, seed: int) -> None:
    """``jit(vmap(f))`` against ``jit(f)`` on each member of a batch of three; the arguments
    batched or not as ``seed`` says."""
    f = program.function(np.float32)
    batches = [program.arguments(seed + i, np.float32) for i in range(BATCH)]
    rng = np.random.default_rng(seed)
    in_axes = [int(rng.integers(0, 2)) == 0 for _ in program.inputs]
    if not any(in_axes):
        in_axes[0] = True
    args = [np.stack([b[k] for b in batches]) if batched else batches[0][k]
            for k, batched in enumerate(in_axes)]
    jf = functrans.jit(f)
    members = [jf(*[args[k][i] if batched else args[k] for k, batched in enumerate(in_axes)])
               for i in range(BATCH)]
    expected = [np.stack([np.asarray(m[j]) for m in members]) for j in range(len(members[0]))]

    def run():
        g = functrans.jit(functrans.vmap(program.function(np.float32),
                                         in_axes=tuple(0 if b else None for b in in_axes)))
        return _compare_all(g(*args), expected, program.bounds, "vmap")

    _run_check("vmap", program, seed, run)


def check_grad(program: Program, seed: int) -> None:
    """In float64: the derivative of ``sum_j <w_j, f(x)_j>`` along a random direction, from
    ``jit(grad)`` (``jit(jvp)`` for programs with a ``while_loop``) against central
    differences of the reference interpreter, with steps of 1e-5 and 1e-6 (one of them must
    agree: a step that carries an input across a kink of ``where``, ``argmax`` and the like
    moves the difference by a jump over the step, and a shorter step crosses fewer), within
    a relative 1e-5 plus how far the two steps' differences are apart."""
    floats = [k for k, (_, kind) in enumerate(program.inputs) if kind == "f"]
    outs = [j for j, kind in enumerate(program.kinds) if kind == "f"]
    if not floats or not outs:
        raise NotApplicable
    with _x64():
        f = program.function(np.float64)
        args = program.arguments(seed, np.float64)
        rng = np.random.default_rng(seed + 1)
        shapes = functrans.eval_shape(f, *args)
        weights = [rng.standard_normal(shapes[j].shape) for j in outs]
        direction = [rng.standard_normal(args[k].shape) for k in floats]
        constants = [functrans.numpy.asarray(a) for a in args]  # the arguments not varied
        primal = [args[k] for k in floats]

        def loss_of(fun):
            def loss(*xs):
                full = list(constants)
                for k, x in zip(floats, xs):
                    full[k] = x
                results = fun(*full)
                return sum(functrans.numpy.sum(results[j] * w) for j, w in zip(outs, weights))
            return loss

        reference = _reference(loss_of(f))
        numerical = []
        for eps in (1e-5, 1e-6):
            plus = reference(*[x + eps * v for x, v in zip(primal, direction)])
            minus = reference(*[x - eps * v for x, v in zip(primal, direction)])
            numerical.append((float(plus) - float(minus)) / (2 * eps))
        if not all(np.isfinite(numerical)):
            raise NotApplicable  # the program overflows near its arguments

    def run():
        with _x64():
            loss = loss_of(program.function(np.float64))
            if program.has_while:  # reverse mode does not go through while_loop
                _, tangent = functrans.jit(lambda p, t: functrans.jvp(loss, p, t))(
                    tuple(primal), tuple(direction))
                analytic, scale = float(tangent), abs(float(tangent))
            else:
                grads = functrans.jit(functrans.grad(loss, argnums=tuple(range(len(floats)))))(
                    *primal)
                terms = [np.asarray(g) * v for g, v in zip(grads, direction)]
                analytic = float(sum(np.sum(t) for t in terms))
                scale = float(sum(np.sum(np.abs(t)) for t in terms))
        # the two steps' disagreement estimates the error of the differences themselves
        # (large where the function curves sharply: a carry squared at every iteration)
        slack = abs(numerical[0] - numerical[1])
        if not any(abs(analytic - n) <= 1e-5 * (1.0 + scale + abs(n)) + slack
                   for n in numerical):
            return (f"the derivative along a random direction is {analytic!r}; central "
                    f"differences give {numerical[0]!r} (step 1e-5) and {numerical[1]!r} "
                    f"(step 1e-6)")
        return None

    _run_check("grad", program, seed, run)


def check_sharded(program: Program, seed: int) -> None:
    """``jit(f)`` with every argument whose first dimension four divides split over four CPU
    devices (the others replicated), against the reference interpreter."""
    args = program.arguments(seed, np.float32)
    split = [a.ndim >= 1 and a.shape[0] % DEVICES == 0 and a.shape[0] > 0 for a in args]
    if not any(split):
        raise NotApplicable
    if functrans.device_count() < DEVICES:
        config.update("cpu_device_count", DEVICES)
    f = program.function(np.float32)
    expected = _reference(f)(*args)
    mesh = functrans.make_mesh((DEVICES,), ("d",))

    def run():
        placed = [functrans.device_put(a, NamedSharding(mesh, PartitionSpec("d") if s else PartitionSpec()))
                  for a, s in zip(args, split)]
        return _compare_all(functrans.jit(program.function(np.float32))(*placed), expected,
                            program.bounds, "sharded jit")

    _run_check("sharded", program, seed, run)


def check_targets(program: Program, seed: int, target: str = OTHER_TARGET) -> None:
    """``jit(f)`` compiled for ``target`` (an older CPU: no FMA, no AVX) against ``jit(f)``
    for this machine's CPU: results differ by the float32 math's ulps at most, which is
    well within the comparison's tolerance."""
    f = program.function(np.float32)
    args = program.arguments(seed, np.float32)
    expected = functrans.jit(f)(*args)

    def run():
        other = functrans.jit(program.function(np.float32),
                              compiler_options={"target_cpu": target})
        return _compare_all(other(*args), expected, program.bounds, f"jit for {target}")

    try:
        functrans.jit(lambda: 0.0, compiler_options={"target_cpu": target})()
    except ValueError:  # not an x86-64 machine, or the default backend takes no target
        raise NotApplicable from None
    _run_check("targets", program, seed, run)


CHECK_FUNCTIONS = {"jit": check_jit, "vmap": check_vmap, "grad": check_grad,
                   "sharded": check_sharded, "targets": check_targets}


def check(program: Program, seed: int, checks=CHECKS) -> None:
    """Run ``checks`` on ``program``, counting them in :data:`counts`."""
    counts["programs"] += 1
    for name in checks:
        try:
            CHECK_FUNCTIONS[name](program, seed)
        except NotApplicable:
            counts[f"{name} not applicable"] += 1


def _attempt(run) -> str | None:
    """What ``run()`` found wrong, or None; an error raised while compiling or running the
    program (a plan the verifier refuses, say) counts as a mismatch too."""
    try:
        return run()
    except Exception as err:  # noqa: BLE001 -- reported with the program that raised it
        return f"{type(err).__name__}: {err}"


def _run_check(name: str, program: Program, seed: int, run) -> None:
    found = _attempt(run)
    counts[f"{name} checked"] += 1
    if found is not None:
        counts[f"{name} mismatches"] += 1
        raise Mismatch(name, program, seed, found, run)


def _x64():
    return config.setting("enable_x64", True)


def disabled(names: str):
    """The config option ``disable_passes`` set to ``names`` for a block."""
    return config.setting("disable_passes", names)


def bisect(run) -> str:
    """The first optional pass of the default backend whose removal makes ``run()`` (a
    check, returning None when it passes) pass; or why none could be found."""
    names = _backends.get_backend().optional_passes()
    with disabled(",".join(names)):
        if _attempt(run) is not None:
            return "none: the check fails with every optional pass disabled"
    for name in names:
        with disabled(name):
            if _attempt(run) is None:
                return f"{name!r} (the check passes with it disabled)"
    return "no single pass: the check passes only with several disabled"


# ---- the command line -------------------------------------------------------------------------


def run_batch(programs_count: int, seed: int, checks=CHECKS, database=None) -> dict:
    """Check ``programs_count`` programs drawn by hypothesis from ``seed`` in this process;
    return the counts. (The first four are what the test suite calls the four ways.) A mismatch raises
:class:`Mismatch` after hypothesis has shrunk it
    (and saved it in ``database``, a folder, replayed first by later runs)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st
    from hypothesis.database import DirectoryBasedExampleDatabase

    @settings(max_examples=programs_count, deadline=None, derandomize=False,
              database=DirectoryBasedExampleDatabase(database) if database else None,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
    @hypothesis_seed(seed)
    @given(programs(), st.integers(0, 2 ** 31 - 1))
    def fuzz(program, argument_seed):
        check(program, argument_seed, checks)

    fuzz()
    return dict(counts)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m functrans.testing.fuzz",
        description="Differential fuzzing of the compiler: random programs, each checked "
                    "with jit against the reference interpreter, vmap against a loop, grad "
                    "against numerical differences, a jit sharded over four CPU devices, and "
                    "code for an x86-64-v2 CPU against code for this one.")
    parser.add_argument("--programs", type=int, default=1000,
                        help="how many programs to check (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the first batch; batch k uses seed + k (default: "
                             "%(default)s)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="worker processes at once (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=500,
                        help="programs per worker process (default: %(default)s)")
    parser.add_argument("--checks", default=",".join(CHECKS),
                        help="comma-separated checks to run (default: %(default)s)")
    parser.add_argument("--database", default=os.path.join(".hypothesis", "fuzz"),
                        help="folder where failing programs are kept and replayed from "
                             "(default: %(default)s)")
    parser.add_argument("--no-checks", action="store_true",
                        help="compile without the buffer-plan verifier and poisoned scratch "
                             "(on by default, as in the test suite)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    checks = tuple(c for c in options.checks.split(",") if c)
    unknown = set(checks) - set(CHECKS)
    if unknown:
        parser.error(f"unknown checks {sorted(unknown)}; known: {', '.join(CHECKS)}")
    if options.worker:
        # what the test suite runs with: a plan the verifier refuses, or a read of memory
        # that nothing wrote, is a mismatch rather than luck
        config.update("verify_plans", not options.no_checks)
        config.update("poison_scratch", not options.no_checks)
        try:
            found = run_batch(options.programs, options.seed, checks, options.database)
        except Mismatch as mismatch:
            print(str(mismatch), file=sys.stderr)
            print(json.dumps(dict(counts)))
            return 1
        print(json.dumps(found))
        return 0
    return _run_workers(options, checks)


def _run_workers(options, checks) -> int:
    batches = [(options.seed + k, min(options.batch, options.programs - k * options.batch))
               for k in range(-(-options.programs // options.batch))]
    total: Counter = Counter()
    failed = []
    start = time.perf_counter()
    running: list = []  # (seed, process, its output file, its error file)
    while batches or running:
        while batches and len(running) < options.jobs:
            seed, n = batches.pop(0)
            command = [sys.executable, "-m", "functrans.testing.fuzz", "--worker",
                       *(["--no-checks"] if options.no_checks else []),
                       "--programs", str(n), "--seed", str(seed), "--checks", ",".join(checks),
                       "--database", options.database]
            out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
            running.append((seed, subprocess.Popen(command, stdout=out, stderr=err, text=True),
                            out, err))
        finished = [r for r in running if r[1].poll() is not None]
        if not finished:
            time.sleep(0.1)
            continue
        for item in finished:
            running.remove(item)
            seed, process, out, err = item
            out.seek(0)
            err.seek(0)
            lines = out.read().strip().splitlines()
            if lines:
                total.update(json.loads(lines[-1]))
            print(f"batch seed={seed}: {'FAILED' if process.returncode else 'ok'}; so far "
                  f"{total['programs']} programs in {time.perf_counter() - start:.0f} s",
                  flush=True)
            if process.returncode != 0:  # its report at once: a long run may be stopped
                failed.append(seed)
                print(f"\n---- batch with seed {seed} ----\n{err.read()}", file=sys.stderr,
                      flush=True)
    print(json.dumps(dict(sorted(total.items())), indent=1))
    if failed:
        print(f"failed batches: seeds {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
