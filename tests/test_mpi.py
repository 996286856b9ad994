"""pmap across processes under a real ``mpiexec -n 2`` on loopback, and how one failing
process ends the job.

Each mpiexec test launches processes with 2 CPU devices each (4 devices in all). Skipped only
when no MPI launcher and library can be found or installed (``pip install mpich``); the last
two tests need no MPI.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "data_parallel_mlp.py"

def _mpi_works(launcher: str) -> bool:
    try:
        probe = subprocess.run([launcher, "-n", "2", sys.executable, "-c",
                                "from mpi4py import MPI; assert MPI.COMM_WORLD.Get_size() == 2"],
                               capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def _find_mpiexec():
    for name in ("mpiexec", "mpirun"):
        path = shutil.which(name)
        if path and _mpi_works(path):
            return path
    return None


@pytest.fixture(scope="module")
def mpiexec():
    path = _find_mpiexec()
    if path is None:
        # MPI comes from PyPI (the mpich wheel ships mpiexec and the library mpi4py loads).
        try:
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "mpi4py", "mpich"],
                           capture_output=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired):
            pass
        path = _find_mpiexec()
    if path is None:
        pytest.skip("no working MPI: mpiexec/mpirun with mpi4py could not be found or "
                    "installed (`pip install mpi4py mpich`)")
    return path


def _launch(mpiexec, script: Path, *args, nproc=2, devices=2, timeout=180, extra_env=None):
    # examples/ too: an example copied elsewhere imports its neighbour training_report
    env = dict(os.environ, FUNCTRANS_CPU_DEVICES=str(devices),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "examples")]))
    env.update(extra_env or {})
    return subprocess.run([mpiexec, "-n", str(nproc), sys.executable, str(script),
                           *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=str(ROOT))


def _losses_by_rank(output: str) -> dict:
    by_rank: dict = {}
    for rank, loss in re.findall(r"\[rank (\d+)\] step +\d+ loss ([0-9.eE+-]+)", output):
        by_rank.setdefault(int(rank), []).append(float(loss))
    return by_rank


def test_data_parallel_example_under_mpiexec(mpiexec, tmp_path):
    script = tmp_path / "example.py"
    shutil.copy(EXAMPLE, script)
    run = _launch(mpiexec, script, "--steps", "12")
    assert run.returncode == 0, run.stdout + run.stderr
    by_rank = _losses_by_rank(run.stdout)
    assert sorted(by_rank) == [0, 1], run.stdout
    assert by_rank[0] == by_rank[1]
    assert len(by_rank[0]) == 12
    # the same run in one process, without pmap
    single = subprocess.run([sys.executable, str(EXAMPLE), "--single", "--steps", "12"],
                            capture_output=True, text=True, timeout=120, cwd=str(ROOT),
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert single.returncode == 0, single.stderr
    reference = [float(v) for v in re.findall(r"step +\d+ loss ([0-9.eE+-]+)", single.stdout)]
    np.testing.assert_allclose(by_rank[0], reference, rtol=1e-5)
    assert reference[-1] < reference[0]


COLLECTIVES_SCRIPT = textwrap.dedent('''
    import numpy as np
    import functrans
    from functrans import lax, distributed
    distributed.initialize()
    rank, nproc = distributed.process_index(), distributed.process_count()
    nloc = functrans.local_device_count()
    n = functrans.device_count()
    assert n == nproc * nloc and len(functrans.devices()) == n
    assert [d.process_index for d in functrans.local_devices()] == [rank] * nloc
    rng = np.random.default_rng(0)
    g = rng.standard_normal((n, 2 * n, 3)).astype(np.float32)   # the global array
    mine = g[rank * nloc:(rank + 1) * nloc]
    def run(f):
        return np.asarray(functrans.pmap(f, axis_name="i")(mine))
    def check(name, got, expected_global):
        np.testing.assert_allclose(got, expected_global[rank * nloc:(rank + 1) * nloc],
                                   rtol=1e-5, atol=1e-5, err_msg=name)
    check("psum", run(lambda v: lax.psum(v, "i")), np.broadcast_to(g.sum(0), g.shape))
    check("pmax", run(lambda v: lax.pmax(v, "i")), np.broadcast_to(g.max(0), g.shape))
    check("pmean", run(lambda v: lax.pmean(v, "i")), np.broadcast_to(g.mean(0), g.shape))
    check("all_gather", run(lambda v: lax.all_gather(v, "i")), np.broadcast_to(g, (n,) + g.shape))
    check("axis_index", run(lambda v: lax.axis_index("i")), np.arange(n))
    perm = [(i, (i + 1) % n) for i in range(n)]
    check("ppermute", run(lambda v: lax.ppermute(v, "i", perm)), np.roll(g, 1, axis=0))
    check("psum_scatter", run(lambda v: lax.psum_scatter(v, "i", tiled=True)),
          np.stack(np.split(g.sum(0), n, axis=0)))
    a2a = np.stack([np.concatenate([np.split(g[i], n, 0)[j] for i in range(n)], 1)
                    for j in range(n)])
    check("all_to_all", run(lambda v: lax.all_to_all(v, "i", 0, 1, tiled=True)), a2a)
    # a whole data-parallel gradient step: grads averaged over all 4 devices
    w = np.linspace(-1, 1, 3).astype(np.float32)
    loss = lambda w, x: lax.tanh(x * w).sum() ** 2
    step = functrans.pmap(lambda w, x: lax.pmean(functrans.grad(loss)(w, x), "i"),
                          axis_name="i", in_axes=(None, 0))
    got = np.asarray(step(w, mine))
    expected = np.mean([np.asarray(functrans.grad(loss)(w, g[i])) for i in range(n)], axis=0)
    np.testing.assert_allclose(got, np.broadcast_to(expected, got.shape), rtol=1e-4)
    print(f"rank {rank}: collectives OK", flush=True)
''')


def _both_ranks_report(mpiexec, tmp_path, source: str, what: str) -> None:
    """Run ``source`` on 2 processes; each must exit 0 after printing ``rank r: what OK``."""
    script = tmp_path / f"{what}.py"
    script.write_text(source)
    run = _launch(mpiexec, script)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"rank 0: {what} OK" in run.stdout and f"rank 1: {what} OK" in run.stdout


def test_collectives_across_processes(mpiexec, tmp_path):
    _both_ranks_report(mpiexec, tmp_path, COLLECTIVES_SCRIPT, "collectives")


SHARDING_SCRIPT = textwrap.dedent('''
    import numpy as np
    import functrans
    import functrans.numpy as jnp
    from functrans import lax, distributed, P
    from functrans.sharding import NamedSharding
    distributed.initialize()
    rank = distributed.process_index()
    # one global mesh over both processes: 'data' across the processes, 'model' within
    mesh = functrans.make_mesh((2, 2), ("data", "model"))
    assert mesh.is_multi_process and len(mesh.local_devices) == 2
    X = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    spec = NamedSharding(mesh, P("data", "model"))
    x = functrans.make_array_from_process_local_data(spec, X[2 * rank:2 * rank + 2])
    B = [np.split(r, 2, axis=1) for r in np.split(X, 2, axis=0)]
    def check(name, out, expected):
        for shard in out.addressable_shards:   # this process's blocks of the global result
            np.testing.assert_allclose(np.asarray(shard.data), expected[shard.index],
                                       rtol=1e-5, atol=1e-6, err_msg=name)
    def smap(f, out_spec, check_vma=True):
        return functrans.shard_map(f, mesh=mesh, in_specs=P("data", "model"),
                                   out_specs=out_spec, check_vma=check_vma)(x)
    check("psum data", smap(lambda b: lax.psum(b, "data"), P(None, "model")),
          np.concatenate([B[0][j] + B[1][j] for j in range(2)], 1))
    check("psum both", smap(lambda b: lax.psum(b, ("data", "model")), P()),
          sum(sum(r) for r in B))
    check("pmax data", smap(lambda b: lax.pmax(b, "data"), P(None, "model")),
          np.concatenate([np.maximum(B[0][j], B[1][j]) for j in range(2)], 1))
    check("all_gather data", smap(lambda b: lax.all_gather(b, "data", tiled=True),
                                  P(None, "model")), X)
    check("ppermute data", smap(lambda b: lax.ppermute(b, "data", [(0, 1), (1, 0)]),
                                P("data", "model")), np.concatenate([X[2:], X[:2]]))
    check("axis_index", smap(lambda b: b * 0 + lax.axis_index(("data", "model")),
                             P("data", "model")),
          np.block([[np.full((2, 3), 2 * i + j) for j in range(2)] for i in range(2)]))
    check("all_to_all data", smap(lambda b: lax.all_to_all(b, "data", 0, 0, tiled=True),
                                  P("data", "model")),
          np.block([[np.stack([B[0][j][k], B[1][j][k]]) for j in range(2)]
                    for k in range(2)]))
    # jit over the split array: partitioned, a psum across the processes
    total = functrans.jit(lambda a: jnp.sum(a * a, axis=0))(x)
    check("jit sum", total, (X * X).sum(0))
    print(f"rank {rank}: sharding OK", flush=True)
''')


def test_shard_map_and_jit_over_a_mesh_spanning_processes(mpiexec, tmp_path):
    _both_ranks_report(mpiexec, tmp_path, SHARDING_SCRIPT, "sharding")


def _example_losses(output: str, pattern: str) -> dict:
    by_rank: dict = {}
    for rank, loss in re.findall(r"\[rank (\d+)\] step +\d+ loss ([0-9.eE+-]+)" + pattern,
                                 output):
        by_rank.setdefault(int(rank), []).append(float(loss))
    return by_rank


def test_jit_data_parallel_example_under_mpiexec(mpiexec, tmp_path):
    script = tmp_path / "dp.py"
    shutil.copy(ROOT / "examples" / "data_parallel_sharding.py", script)
    run = _launch(mpiexec, script, "--steps", "8")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "a mesh of 4 devices in 2 process(es)" in run.stdout
    by_rank = _example_losses(run.stdout, "")
    assert sorted(by_rank) == [0, 1] and by_rank[0] == by_rank[1] and len(by_rank[0]) == 8
    single = subprocess.run([sys.executable, str(ROOT / "examples" / "data_parallel_sharding.py"),
                             "--single", "--steps", "8"], capture_output=True, text=True,
                            timeout=120, cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert single.returncode == 0, single.stderr
    reference = [float(v) for v in re.findall(r"step +\d+ loss ([0-9.eE+-]+)", single.stdout)]
    np.testing.assert_allclose(by_rank[0], reference, rtol=1e-5)
    assert reference[-1] < reference[0]


def test_tensor_parallel_example_under_mpiexec(mpiexec, tmp_path):
    script = tmp_path / "tp.py"
    shutil.copy(ROOT / "examples" / "tensor_parallel_mlp.py", script)
    run = _launch(mpiexec, script, "--steps", "6")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "{'data': 2, 'model': 2} in 2 process(es)" in run.stdout
    by_rank = _example_losses(run.stdout, "")
    assert sorted(by_rank) == [0, 1] and by_rank[0] == by_rank[1] and len(by_rank[0]) == 6
    diffs = [float(v) for v in re.findall(r"grad difference ([0-9.eE+-]+)", run.stdout)]
    assert len(diffs) == 12 and max(diffs) < 1e-5, run.stdout
    single = subprocess.run([sys.executable, str(ROOT / "examples" / "tensor_parallel_mlp.py"),
                             "--single", "--steps", "6"], capture_output=True, text=True,
                            timeout=120, cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)))
    reference = [float(v) for v in re.findall(r"step +\d+ loss ([0-9.eE+-]+)", single.stdout)]
    np.testing.assert_allclose(by_rank[0], reference, rtol=1e-5)


DEAD_RANK_SCRIPT = textwrap.dedent('''
    import sys
    import numpy as np
    import functrans
    from functrans import lax, distributed
    distributed.initialize(timeout=2)
    if distributed.process_index() == 1:
        sys.exit(0)          # leaves without taking part in the pmap
    try:
        functrans.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(np.ones((2, 2), np.float32))
    except distributed.DistributedTimeoutError as err:
        print("timed out:", err, flush=True)
''')


def test_dead_rank_gives_a_timeout_error_not_a_hang(mpiexec, tmp_path):
    script = tmp_path / "dead.py"
    script.write_text(DEAD_RANK_SCRIPT)
    run = _launch(mpiexec, script, timeout=60)
    assert "timed out:" in run.stdout, run.stdout + run.stderr
    assert "waited more than 2 s" in run.stdout


MISMATCH_SCRIPT = textwrap.dedent('''
    import numpy as np
    import functrans
    from functrans import lax, distributed
    distributed.initialize(timeout=20)
    width = 3 + distributed.process_index()      # the processes disagree on the shape
    try:
        functrans.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(np.ones((2, width), np.float32))
    except ValueError as err:
        print("rejected:", err, flush=True)
''')


def test_mismatched_shapes_across_processes_are_rejected(mpiexec, tmp_path):
    script = tmp_path / "mismatch.py"
    script.write_text(MISMATCH_SCRIPT)
    run = _launch(mpiexec, script, timeout=60)
    assert run.stdout.count("rejected:") == 2, run.stdout + run.stderr
    assert "different programs or argument shapes" in run.stdout


# One failing process ends the job: rank 1 fails before the collective that rank 0 is waiting
# in. The collective timeout is 60 s, so a job ended by it (and not by MPI_Abort) shows rank 0's
# DistributedTimeoutError, which these tests reject; 120 s only guards against a hang.
FAILING_RANK_SCRIPT = textwrap.dedent('''
    import os, signal, sys, threading, time
    import numpy as np
    import functrans
    from functrans import lax, distributed
    mode = sys.argv[1]
    if mode == "opted_out":
        distributed.initialize(timeout=60, abort_on_failure=False)
    else:
        distributed.initialize(timeout=60)         # aborting on failure is the default
    rank = distributed.process_index()
    if rank == 1:
        time.sleep(0.5)                    # rank 0 is in the psum by now
        if mode in ("raise", "opted_out"):
            raise ValueError("rank 1 failed before the psum")
        if mode == "exit":
            sys.exit(3)
        if mode == "raise_exit":
            raise SystemExit(3)
        if mode == "thread":
            worker = threading.Thread(target=lambda: 1 / 0, name="loader")
            worker.start()
            worker.join()
            time.sleep(60)                 # the main thread would go on waiting
        if mode == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(60)
        if mode == "caught":
            try:
                raise ValueError("handled")
            except ValueError:
                pass
            try:
                sys.exit(3)
            except SystemExit:
                pass
    out = functrans.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(np.ones((2, 2), np.float32))
    # one write per line: the launcher interleaves the two processes' writes
    print(f"rank {rank} done {float(np.asarray(out).sum())}", flush=True)
''')


def _run_failing_rank(mpiexec, tmp_path, mode):
    script = tmp_path / "failing.py"
    script.write_text(FAILING_RANK_SCRIPT)
    return _launch(mpiexec, script, mode, timeout=120)


@pytest.mark.parametrize("mode, report", [
    ("raise", "process 1 of 2 stopped by an uncaught ValueError"),
    ("exit", "process 1 of 2 is exiting with status 3"),
    # not through sys.exit: it waited for the collective timeout
    ("raise_exit", "process 1 of 2 is exiting with status 3"),
    ("thread", "process 1 of 2 had an uncaught ZeroDivisionError in thread 'loader'"),
    # a signal never reaches MPI_Finalize: the launcher ends the job by itself
    ("sigterm", None),
])
def test_a_failing_process_aborts_the_job(mpiexec, tmp_path, mode, report):
    run = _run_failing_rank(mpiexec, tmp_path, mode)
    output = run.stdout + run.stderr
    assert run.returncode != 0, output
    assert "waited more than" not in output, output      # rank 0 did not sit out its timeout
    assert "rank 0 done" not in output, output
    if report is not None:
        assert report + "; aborting all 2 processes (MPI_Abort)" in run.stderr, output
    if mode == "raise":
        assert 'raise ValueError("rank 1 failed before the psum")' in run.stderr, output
    if mode == "thread":
        assert "ZeroDivisionError: division by zero" in run.stderr, output


def test_caught_failures_and_a_normal_end_do_not_abort(mpiexec, tmp_path):
    run = _run_failing_rank(mpiexec, tmp_path, "caught")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "rank 0 done 16.0" in run.stdout and "rank 1 done 16.0" in run.stdout, output
    assert "MPI_Abort" not in output, output


def test_abort_on_failure_false_leaves_the_collective_timeout(mpiexec, tmp_path):
    script = tmp_path / "opted_out.py"
    script.write_text(FAILING_RANK_SCRIPT.replace("timeout=60", "timeout=2"))
    run = _launch(mpiexec, script, "opted_out", timeout=120)
    output = run.stdout + run.stderr
    assert run.returncode != 0, output
    assert "MPI_Abort" not in output, output
    assert "waited more than 2 s" in output, output


EXIT_WATCH_SCRIPT = textwrap.dedent('''
    import sys
    from functrans import distributed
    guard = distributed._failure_guard
    guard._abort_at_exit = lambda status: print("abort with status", status, flush=True)
    guard.install()
    try:
        sys.exit(3)
    except SystemExit:
        pass
    kept = []
    try:
        sys.exit(4)
    except SystemExit as request:
        kept.append(request)                # caught, and still alive at exit
    print("still running", flush=True)
    def main():
        try:
            sys.exit(5)
        finally:
            print("cleanup ran", flush=True)
    main()
''')


def test_only_an_exit_status_that_ends_the_program_aborts():
    # No MPI needed: the guard's abort is replaced by a print.
    run = subprocess.run([sys.executable, "-c", EXIT_WATCH_SCRIPT], capture_output=True,
                         text=True, timeout=60, cwd=str(ROOT),
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 5, run.stdout + run.stderr
    assert run.stdout.splitlines() == ["still running", "cleanup ran", "abort with status 5"]
    assert "process 0 of 1 is exiting with status 5" in run.stderr


@pytest.mark.parametrize("statement, status", [
    ("raise SystemExit(6)", 6), ("exit(6)", 6), ("sys.exit(6)", 6),
    ("raise SystemExit('a message')", 1), ("raise SystemExit(0)", None),
    ("raise SystemExit", None)])
def test_every_exit_that_ends_the_program_is_seen(statement, status):
    script = textwrap.dedent(f'''
        import sys
        from functrans import distributed
        guard = distributed._failure_guard
        guard._abort_at_exit = lambda status: print("abort with status", status, flush=True)
        guard.install()
        try:
            raise SystemExit(3)
        except SystemExit as request:
            assert request.code == 3   # read by the program: not an exit
        print("still running", flush=True)
        {statement}
    ''')
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)))
    expected = ["still running"] + ([f"abort with status {status}"] if status else [])
    assert run.stdout.splitlines() == expected, run.stdout + run.stderr
    assert run.returncode == (status or 0), run.stderr


def test_the_guard_chains_to_and_restores_the_hooks():
    from functrans import distributed
    guard = distributed._failure_guard
    saved = sys.excepthook, threading.excepthook, sys.exit
    seen = []

    def user_hook(exc_type, exc, tb):
        seen.append(exc_type)

    def later_thread_hook(args):
        pass

    sys.excepthook = user_hook
    try:
        guard.install()
        guard._abort_at_exit = seen.append
        sys.excepthook(KeyError, KeyError("k"), None)
        assert seen == [KeyError, 1]              # the user's hook ran, then the abort
        threading.excepthook = later_thread_hook
        guard.uninstall()
        assert sys.excepthook is user_hook and sys.exit is saved[2]
        assert type(SystemExit.__dict__["code"]).__name__ == "member_descriptor"
        assert threading.excepthook is later_thread_hook   # installed after the guard: kept
    finally:
        guard.uninstall()
        guard.__dict__.pop("_abort_at_exit", None)
        sys.excepthook, threading.excepthook, sys.exit = saved
