"""Collectives with ``axis_index_groups``: each group of members runs the collective on its
own, its members ranked in the order the group lists them.

Every grouped collective is checked against a NumPy reference written here (one loop over
the groups) under pmap on 4 and 8 CPU devices and under vmap with the same axis name;
gradients through grouped collectives are checked against the same program written with
explicit indexing instead of collectives; invalid groups raise clear errors.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans._pmap import pmap
from functrans.primitives import collectives

GROUPINGS = {
    4: [[[0, 1], [2, 3]], [[0, 2], [1, 3]], [[3, 1], [0, 2]], [[0, 1, 2, 3]], [[2], [0], [3], [1]]],
    8: [[[0, 1, 2, 3], [4, 5, 6, 7]], [[7, 0], [1, 6], [2, 5], [4, 3]],
        [[0, 2, 4, 6], [1, 3, 5, 7]]],
}
CASES = [(n, g) for n, gs in GROUPINGS.items() for g in gs]


@pytest.fixture(params=CASES, ids=lambda c: f"{c[0]}dev-{c[1]}")
def grouping(request):
    n, groups = request.param
    functrans.config.update("cpu_device_count", n)
    return n, groups


def _per_group(x, groups, fn):
    """NumPy reference: row ``groups[a][r]`` of the result is ``fn(rows of group a)[r]``."""
    out = [None] * x.shape[0]
    for group in groups:
        results = fn(np.stack([x[i] for i in group]))
        for r, i in enumerate(group):
            out[i] = results[r]
    return np.stack(out)


def _same(fn):
    """A reference where every member of a group receives ``fn`` of the group's rows."""
    return lambda rows: [fn(rows)] * len(rows)


def _ref_all_to_all(rows, split, concat, tiled):
    g = rows.shape[0]
    out = []
    for j in range(g):
        chunks = [np.split(rows[i], g, axis=split)[j] for i in range(g)]
        out.append(np.concatenate(chunks, axis=concat) if tiled else
                   np.stack([np.squeeze(c, split) for c in chunks], axis=concat))
    return out


def _ref_scatter(rows, dim, tiled):
    pieces = np.split(rows.sum(0), rows.shape[0], axis=dim)
    return pieces if tiled else [np.squeeze(p, dim) for p in pieces]


def _cases(groups, g):
    """(function of one member's value, NumPy reference over a group's rows, operand shape
    per member)."""
    kw = dict(axis_index_groups=groups)
    return {
        "psum": (lambda v: lax.psum(v, "i", **kw), _same(lambda r: r.sum(0)), (3, 2)),
        "pmean": (lambda v: lax.pmean(v, "i", **kw), _same(lambda r: r.mean(0)), (3, 2)),
        "pmax": (lambda v: lax.pmax(v, "i", **kw), _same(lambda r: r.max(0)), (3, 2)),
        "pmin": (lambda v: lax.pmin(v, "i", **kw), _same(lambda r: r.min(0)), (3, 2)),
        "all_gather": (lambda v: lax.all_gather(v, "i", **kw), _same(lambda r: r), (3, 2)),
        "all_gather_axis1": (lambda v: lax.all_gather(v, "i", axis=1, **kw),
                             _same(lambda r: np.moveaxis(r, 0, 1)), (3, 2)),
        "all_gather_tiled": (lambda v: lax.all_gather(v, "i", tiled=True, **kw),
                             _same(lambda r: np.concatenate(list(r), 0)), (3, 2)),
        "all_gather_tiled_axis1": (lambda v: lax.all_gather(v, "i", axis=1, tiled=True, **kw),
                                   _same(lambda r: np.concatenate(list(r), 1)), (3, 2)),
        "psum_scatter": (lambda v: lax.psum_scatter(v, "i", **kw),
                         lambda r: _ref_scatter(r, 0, False), (g, 3)),
        "psum_scatter_tiled_dim1": (
            lambda v: lax.psum_scatter(v, "i", scatter_dimension=1, tiled=True, **kw),
            lambda r: _ref_scatter(r, 1, True), (3, 2 * g)),
        "all_to_all": (lambda v: lax.all_to_all(v, "i", 0, 1, **kw),
                       lambda r: _ref_all_to_all(r, 0, 1, False), (g, 3)),
        "all_to_all_tiled": (lambda v: lax.all_to_all(v, "i", 1, 0, tiled=True, **kw),
                             lambda r: _ref_all_to_all(r, 1, 0, True), (3, 2 * g)),
    }


CASE_NAMES = sorted(_cases([[0]], 1))


@pytest.mark.parametrize("case", CASE_NAMES)
def test_grouped_collectives_match_numpy_under_pmap_and_vmap(grouping, case):
    n, groups = grouping
    fun, reference, shape = _cases(groups, len(groups[0]))[case]
    x = np.random.default_rng(hash(case) % 2**32).standard_normal((n,) + shape)
    x = x.astype(np.float32)
    want = _per_group(x, groups, reference)
    by_pmap = pmap(fun, axis_name="i")(x)
    by_vmap = functrans.vmap(fun, axis_name="i")(x)
    np.testing.assert_allclose(np.asarray(by_pmap), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(by_vmap), want, rtol=1e-5, atol=1e-5)


def test_grouped_collectives_under_jit_inside_pmap_and_vmap_llvm_and_reference():
    functrans.config.update("cpu_device_count", 4)
    groups = [[0, 3], [2, 1]]
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)

    @functrans.jit
    def f(v):
        s = lax.psum(jnp.sin(v), "i", axis_index_groups=groups)
        return s * v + lax.pmax(v, "i", axis_index_groups=groups)

    sums = _per_group(np.sin(x), groups, _same(lambda r: r.sum(0)))
    want = sums * x + _per_group(x, groups, _same(lambda r: r.max(0)))
    for backend in ("llvm", "reference"):
        got = pmap(f, axis_name="i", backend=backend)(x)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    vmapped = functrans.jit(functrans.vmap(f, axis_name="i"))(x)
    np.testing.assert_allclose(np.asarray(vmapped), want, rtol=1e-5, atol=1e-5)
    jit_inside = functrans.vmap(f, axis_name="i")(x)  # f's jit batched with the collective
    np.testing.assert_allclose(np.asarray(jit_inside), want, rtol=1e-5, atol=1e-5)


def test_grouped_collective_inside_control_flow_under_pmap():
    functrans.config.update("cpu_device_count", 4)
    groups = [[0, 2], [1, 3]]
    x = np.arange(4, dtype=np.float32)

    def f(v):
        # psum inside a loop body: the whole program runs on the reference backend
        return lax.fori_loop(0, 3, lambda k, c: lax.psum(c, "i", axis_index_groups=groups) * 0.5,
                             v)

    want = x.copy()
    for _ in range(3):
        want = _per_group(want, groups, _same(lambda r: r.sum(0))) * 0.5
    np.testing.assert_allclose(np.asarray(pmap(f, axis_name="i")(x)), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(functrans.vmap(f, axis_name="i")(x)), want, rtol=1e-6)


def test_psum_of_unmapped_value_counts_group_members():
    functrans.config.update("cpu_device_count", 8)
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]
    f = lambda v: v + lax.psum(1.0, "i", axis_index_groups=groups)  # noqa: E731
    x = np.zeros(8, np.float32)
    np.testing.assert_allclose(np.asarray(pmap(f, axis_name="i")(x)), np.full(8, 4.0))
    np.testing.assert_allclose(np.asarray(functrans.vmap(f, axis_name="i")(x)), np.full(8, 4.0))


def test_groups_over_an_inner_axis_with_an_outer_vmap():
    # vmap over 'j' outside pmap over 'i': the grouped psum over 'i' is batched along 'j'.
    functrans.config.update("cpu_device_count", 4)
    groups = [[0, 3], [1, 2]]
    x = np.random.default_rng(1).standard_normal((2, 4, 3)).astype(np.float32)
    inner = lambda v: lax.psum(v, "i", axis_index_groups=groups)  # noqa: E731
    got = functrans.vmap(pmap(inner, axis_name="i"), axis_name="j")(x)
    want = np.stack([_per_group(x[b], groups, _same(lambda r: r.sum(0))) for b in range(2)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)
    # a collective over the outer name leaves the inner grouping alone
    both = functrans.vmap(functrans.vmap(lambda v: lax.psum(inner(v), "j"), axis_name="i"),
                          axis_name="j")(x)
    np.testing.assert_allclose(np.asarray(both), np.broadcast_to(want.sum(0), want.shape),
                               rtol=1e-5)


# =============================================================================================
# Derivatives
# =============================================================================================

def _group_matrix(n, groups):
    """``M[i, j] = 1`` when members i and j share a group: a grouped psum is ``M @ x``."""
    m = np.zeros((n, n), np.float32)
    for g in groups:
        for i in g:
            for j in g:
                m[i, j] = 1.0
    return m


@pytest.mark.parametrize("mean", [False, True], ids=["psum", "pmean"])
def test_grad_through_grouped_psum_matches_explicit_sums(grouping, mean):
    n, groups = grouping
    collective = lax.pmean if mean else lax.psum
    scale = 1.0 / len(groups[0]) if mean else 1.0
    mat = jnp.asarray(_group_matrix(n, groups) * scale)

    def member_loss(v):
        return jnp.sum(jnp.sin(v) * collective(v ** 2, "i", axis_index_groups=groups))

    def total_with_collectives(x):
        return jnp.sum(functrans.vmap(member_loss, axis_name="i")(x))

    def total_explicit(x):
        return jnp.sum(jnp.sin(x) * (mat @ (x ** 2)))

    x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
    want = np.asarray(functrans.grad(total_explicit)(x))
    np.testing.assert_allclose(np.asarray(functrans.grad(total_with_collectives)(x)), want,
                               rtol=1e-4, atol=1e-5)
    # Under pmap, grad of each member's loss transposes psum to the same grouped psum, which
    # is the gradient of the total loss.
    per_device = pmap(functrans.grad(member_loss), axis_name="i")(x)
    np.testing.assert_allclose(np.asarray(per_device), want, rtol=1e-4, atol=1e-5)
    # forward mode agrees too
    t = np.random.default_rng(n + 1).standard_normal((n, 3)).astype(np.float32)
    _, tangent = functrans.jvp(total_with_collectives, (x,), (t,))
    np.testing.assert_allclose(float(tangent), float((want * t).sum()), rtol=1e-4)


def test_grad_through_grouped_all_gather_and_psum_scatter():
    functrans.config.update("cpu_device_count", 4)
    groups = [[2, 0], [1, 3]]
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    w = rng.standard_normal((4, 2, 3)).astype(np.float32)

    def member_loss(v, wi):
        gathered = lax.all_gather(v, "i", axis_index_groups=groups)        # (2, 3)
        scattered = lax.psum_scatter(gathered * wi, "i", axis_index_groups=groups)  # (3,)
        return jnp.sum(jnp.tanh(scattered) * v)

    def total_with_collectives(x):
        return jnp.sum(functrans.vmap(member_loss, axis_name="i")(x, jnp.asarray(w)))

    def total_explicit(x):
        # a loop over members, writing the collectives as indexing
        total = 0.0
        for group in groups:
            gathered = jnp.stack([x[i] for i in group])
            summed = sum(gathered * w[i] for i in group)
            for r, i in enumerate(group):
                total = total + jnp.sum(jnp.tanh(summed[r]) * x[i])
        return total

    want = np.asarray(functrans.grad(total_explicit)(x))
    np.testing.assert_allclose(np.asarray(functrans.grad(total_with_collectives)(x)), want,
                               rtol=1e-4, atol=1e-5)
    per_device = pmap(functrans.grad(member_loss), axis_name="i")(x, w)
    np.testing.assert_allclose(np.asarray(per_device), want, rtol=1e-4, atol=1e-5)


def test_grad_through_grouped_all_to_all_and_pmax():
    functrans.config.update("cpu_device_count", 4)
    groups = [[0, 1], [3, 2]]
    x = np.random.default_rng(3).standard_normal((4, 2, 3)).astype(np.float32)

    def member_loss(v):
        swapped = lax.all_to_all(v, "i", 0, 0, axis_index_groups=groups)
        return jnp.sum(swapped ** 3) + jnp.sum(lax.pmax(v, "i", axis_index_groups=groups))

    def total_explicit(x):
        total = 0.0
        for group in groups:
            for j in range(len(group)):
                total = total + jnp.sum(jnp.stack([x[i][j] for i in group]) ** 3)
            peak = jnp.max(jnp.stack([x[i] for i in group]), axis=0)
            total = total + len(group) * jnp.sum(peak)
        return total

    want = np.asarray(functrans.grad(total_explicit)(x))
    got = functrans.grad(lambda x: jnp.sum(functrans.vmap(member_loss, axis_name="i")(x)))(x)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
    per_device = pmap(functrans.grad(member_loss), axis_name="i")(x)
    np.testing.assert_allclose(np.asarray(per_device), want, rtol=1e-4, atol=1e-5)


# =============================================================================================
# Errors
# =============================================================================================

@pytest.mark.parametrize("groups, message", [
    ([[0, 1], [1, 2]], r"indices \[1\] appear more than once"),
    ([[0, 1], [2]], r"indices \[3\] are in no group"),
    ([[0, 1, 2], [3]], r"different sizes \[1, 3\]"),
    ([[0, 1], [2, 4]], r"indices \[4\] are out of range 0..3"),
    ([[0, 1], [2, -1]], r"indices \[-1\] are out of range"),
    ([[0, 1, 2, 3], []], r"at least one member"),
])
def test_invalid_groups_raise_clear_errors(groups, message):
    functrans.config.update("cpu_device_count", 4)
    x = np.zeros((4, 4), np.float32)
    for fun in (lambda v: lax.psum(v, "i", axis_index_groups=groups),
                lambda v: lax.pmean(v, "i", axis_index_groups=groups),
                lambda v: lax.all_gather(v, "i", axis_index_groups=groups),
                lambda v: lax.all_to_all(v, "i", 0, 0, axis_index_groups=groups)):
        for transform in (pmap, lambda f, axis_name: functrans.vmap(f, axis_name=axis_name)):
            with pytest.raises(ValueError, match=message) as info:
                transform(fun, axis_name="i")(x)
            assert "axis_index_groups" in str(info.value)


def test_group_errors_name_types_and_axes():
    functrans.config.update("cpu_device_count", 4)
    x = np.zeros((4, 2, 4), np.float32)
    with pytest.raises(TypeError, match="list of lists of int"):
        functrans.vmap(lambda v: lax.psum(v, "i", axis_index_groups=[[0.5, 1], [2, 3]]),
                       axis_name="i")(x)
    with pytest.raises(ValueError, match="single axis name"):
        functrans.vmap(functrans.vmap(
            lambda v: lax.psum(v, ("i", "j"), axis_index_groups=[[0, 1]]), axis_name="j"),
            axis_name="i")(x)
    # the split axis must have the group size, not the axis size
    with pytest.raises(TypeError, match="must equal the axis size 2"):
        functrans.vmap(lambda v: lax.all_to_all(v[0], "i", 0, 0,
                                                axis_index_groups=[[0, 1], [2, 3]]),
                       axis_name="i")(x)
    with pytest.raises(NameError, match="unbound axis name"):
        lax.psum(np.ones(2, np.float32), "zz", axis_index_groups=[[0, 1]])


def test_staged_params_hold_the_groups_and_the_group_size():
    closed = functrans.make_jaxpr(
        lambda v: lax.all_gather(v, "i", axis_index_groups=[[0, 2], [1, 3]]),
        axis_env=[("i", 4)])(np.zeros(3, np.float32))
    (eqn,) = closed.jaxpr.eqns
    assert eqn.params["axis_index_groups"] == ((0, 2), (1, 3))
    assert eqn.params["axis_size"] == 2
    assert closed.out_avals[0].shape == (2, 3)


# =============================================================================================
# GPUs and several processes
# =============================================================================================

def test_gpu_placement_leaves_grouped_collectives_to_the_host_path():
    """NCCL's communicator spans every member, so a grouped collective must not take the NCCL
    plan: the placement returns None (pmap then runs group_impl on host copies) and the plan
    itself refuses rather than computing over the whole axis."""
    pmap_support = pytest.importorskip("functrans.backends.cuda.pmap_support")
    placement = object.__new__(pmap_support.GpuPlacement)
    placement._group = object()  # a communicator that must not be used
    params = dict(axes=("i",), axis_index_groups=((0, 1), (2, 3)))
    values = [np.ones(3, np.float32)] * 4
    assert placement.collective(collectives.psum_p, params, values, 0) is None
    with pytest.raises(NotImplementedError, match="axis_index_groups"):
        pmap_support.run_collective("psum", params, values, None, np)
    # and the host path computes it per group
    outs = collectives.psum_p.group_impl([np.full(2, i, np.float32) for i in range(4)], **params)
    np.testing.assert_array_equal(np.stack(outs), [[1, 1], [1, 1], [5, 5], [5, 5]])


def test_multi_process_path_gathers_members_for_groups(monkeypatch):
    """Across processes a grouped reduction may span processes: the members are gathered and
    each process keeps its own members' results (MPI emulated: two processes, the other's
    members supplied by the fake allgather)."""
    from functrans import _pmap, distributed
    groups = ((0, 2), (1, 3))
    mine, theirs = [np.float32(1), np.float32(2)], [np.float32(10), np.float32(20)]
    monkeypatch.setattr(distributed, "process_count", lambda: 2)
    monkeypatch.setattr(distributed, "allgather",
                        lambda x, what="": np.stack([x, np.stack(theirs)]))

    def no_allreduce(*args, **kwargs):
        raise AssertionError("a grouped reduction must not use the whole-axis Allreduce")

    monkeypatch.setattr(distributed, "allreduce", no_allreduce)
    params = dict(axes=("i",), axis_index_groups=groups)
    outs = _pmap._compute_collective(collectives.psum_p, params, mine, 0)
    np.testing.assert_array_equal(outs, [11, 22])


def _working_mpiexec():
    for name in ("mpiexec", "mpirun"):
        path = shutil.which(name)
        if path is None:
            continue
        try:
            probe = subprocess.run(
                [path, "-n", "2", sys.executable, "-c",
                 "from mpi4py import MPI; assert MPI.COMM_WORLD.Get_size() == 2"],
                capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return path
    return None


def test_groups_spanning_processes_under_mpiexec(tmp_path):
    mpiexec = _working_mpiexec()
    if mpiexec is None:
        pytest.skip("no working mpiexec with mpi4py")
    root = Path(__file__).resolve().parents[1]
    script = tmp_path / "groups.py"
    script.write_text(textwrap.dedent("""
        import sys
        import numpy as np
        import functrans
        from functrans import distributed, lax
        distributed.initialize()
        rank = distributed.process_index()
        groups = [[0, 2], [1, 3]]          # each group spans both processes
        x = np.arange(2, dtype=np.float32) + 2 * rank + 1
        f = functrans.pmap(lambda v: (lax.psum(v, "i", axis_index_groups=groups),
                                      lax.all_gather(v, "i", axis_index_groups=groups)),
                           axis_name="i")
        total, gathered = f(x)
        # one file per rank: the ranks' stdout lines may interleave
        with open(f"{sys.argv[1]}/rank{rank}.txt", "w") as out:
            out.write(f"{np.asarray(total).tolist()} {np.asarray(gathered).tolist()}")
    """))
    env = dict(os.environ, FUNCTRANS_CPU_DEVICES="2", PYTHONPATH=str(root))
    run = subprocess.run([mpiexec, "-n", "2", sys.executable, str(script), str(tmp_path)],
                         capture_output=True, text=True, timeout=180, env=env, cwd=str(root))
    assert run.returncode == 0, run.stdout + run.stderr
    # members 0..3 hold 1, 2, 3, 4: process 0 runs members 0 and 1 (groups {0, 2}, {1, 3});
    # both processes see the same per-member results
    for rank in range(2):
        assert (tmp_path / f"rank{rank}.txt").read_text() == \
            "[4.0, 6.0] [[1.0, 3.0], [2.0, 4.0]]", run.stdout + run.stderr
