"""Every primitive through the same drivers, one row each (``primitive_table.py``):

1. the reference interpreter (eager evaluation) against NumPy/SciPy, and its shape rule;
2. forward and reverse derivatives against finite differences (``check_grads``);
3. ``vmap`` against a Python loop over the batch, with varied ``in_axes``;
4. the llvm backend (``jit``) against the reference interpreter;
5. the cuda backend against the reference interpreter: on a GPU, or else with ``nvcc`` by
   running the generated kernels as host code (skipped when neither is there);
6. it runs natively: the llvm and cuda schedules of the primitive hold no NumPy fallback step,
   unless the row gives the reason it still has one;
7. the llvm backend's code for several target CPUs (native, x86-64-v3, x86-64-v2: those this
   machine runs) gives results within the row's bound of each other (``Row.ulps``).

And a guard: every ``Primitive`` object of the library has a row, or a reasoned entry in
``EXCLUDED``.
"""
from __future__ import annotations

import importlib
import pkgutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import functrans
from functrans import tree_util
from functrans.core import Primitive
from functrans.test_util import check_grads, x64

import primitive_table as table
from primitive_table import Case, Draw

ROWS = table.ROWS
VMAP_SIZE = 3


def _fallback_step_class():
    """The llvm compiler's marker for an equation left to NumPy (where the compiler package
    keeps it)."""
    from functrans.backends.compiler.fusion import FallbackStep
    return FallbackStep


def _hypothesis_draw(data) -> Draw:
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="values seed"))
    return Draw(lambda lo, hi: data.draw(st.integers(lo, hi)), rng)


def _rows(predicate=lambda row: True):
    return [pytest.param(row, id=row.name) for row in ROWS if predicate(row)]


def _leaves(x) -> list:
    return [np.asarray(leaf) for leaf in tree_util.tree_leaves(x)]


def assert_close(got, expected, tol, label=""):
    """Same structure, shapes and values (within ``tol``, NaN where NaN; exact for
    integers and booleans and where ``tol`` is 0)."""
    got, expected = _leaves(got), _leaves(expected)
    assert len(got) == len(expected), f"{label}: {len(got)} outputs, expected {len(expected)}"
    for k, (g, e) in enumerate(zip(got, expected)):
        where = f"{label} output {k}"
        assert g.shape == e.shape, f"{where}: shape {g.shape}, expected {e.shape}"
        if g.dtype.kind in "biu" or tol == 0:
            np.testing.assert_array_equal(g, e.astype(g.dtype) if e.dtype != g.dtype else e,
                                          err_msg=where)
        else:
            kind = np.complex128 if np.iscomplexobj(g) or np.iscomplexobj(e) else np.float64
            np.testing.assert_allclose(g.astype(kind), e.astype(kind), rtol=tol, atol=tol,
                                       err_msg=where)


def _check_against(row, case, out, expected, label):
    if row.check is not None and expected is None:
        row.check(case, out)
    else:
        assert_close(out, expected, row.tol, label)


# =============================================================================================
# 1. the reference interpreter against NumPy, and the shape rule
# =============================================================================================


@pytest.mark.parametrize("row", _rows())
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_reference_matches_numpy(row, data):
    with x64():
        case = row.cases(_hypothesis_draw(data))
        out = row.call(case)
        if row.numpy is not None:
            assert_close(out, row.numpy(*case.args, **case.params), row.tol, row.name)
        if row.check is not None:
            row.check(case, out)


_EXAMPLES: dict = {}


def binding_example(row) -> tuple:
    """The first of a row's fixed examples whose program binds the row's primitive (some
    cases, e.g. an identity permutation, are simplified away), staged with 64-bit types."""
    if row.name not in _EXAMPLES:
        for seed in range(10):
            case = row.example(seed)
            closed = functrans.make_jaxpr(row.bound(case))(*case.args)
            if any(e.primitive is row.primitive for e in _all_eqns(closed.jaxpr)):
                _EXAMPLES[row.name] = case, closed
                break
        else:
            raise AssertionError(f"{row.name}: the row's function does not bind {row.primitive}")
    return _EXAMPLES[row.name]


@pytest.mark.parametrize("row", _rows())
def test_shape_rule_matches_reference(row):
    with x64():
        case, closed = binding_example(row)
        outs = _leaves(row.call(case))
        assert [(a.shape, np.dtype(a.dtype)) for a in closed.out_avals] == \
            [(o.shape, o.dtype) for o in outs]


def _all_eqns(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in (value if isinstance(value, (tuple, list)) else (value,)):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _all_eqns(inner)


# =============================================================================================
# 2. derivatives against finite differences
# =============================================================================================


def _float64(case: Case) -> Case:
    def widen(a):
        a = np.asarray(a)
        if a.dtype.kind == "f":
            return a.astype(np.float64)
        if a.dtype.kind == "c":
            return a.astype(np.complex128)
        return a
    return Case(tuple(widen(a) for a in case.args), case.params)


@pytest.mark.parametrize("mode", ["fwd", "rev"])
@pytest.mark.parametrize("row", _rows(lambda row: row.grad))
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_derivatives_match_finite_differences(row, mode, data):
    if mode not in row.grad_modes:
        pytest.skip(f"{row.name} is not differentiable in {mode} mode")
    with x64():
        case = _float64((row.grad_cases or row.cases)(_hypothesis_draw(data)))
        check_grads(row.bound(case), case.args, order=row.grad, modes=(mode,),
                    atol=row.grad_tol, rtol=row.grad_tol)


@pytest.mark.parametrize("row", _rows(lambda row: row.linear))
def test_linear_rows_have_a_transpose_rule(row):
    assert row.primitive.transpose is not None, f"{row.name} is linear but cannot transpose"


# =============================================================================================
# 3. vmap against a loop
# =============================================================================================


def _replaying_draw(data, replay: list | None, record: list) -> Draw:
    """A draw whose structural choices repeat ``replay`` (when given) with fresh values."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    choices = iter(replay) if replay is not None else None

    def integer(lo, hi):
        value = next(choices) if choices is not None else data.draw(st.integers(lo, hi))
        record.append(value)
        return value
    return Draw(integer, rng)


@pytest.mark.parametrize("row", _rows(lambda row: row.vmap))
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_vmap_matches_loop(row, data):
    with x64():
        structure: list = []
        examples = [row.cases(_replaying_draw(data, None, structure))]
        for _ in range(VMAP_SIZE - 1):
            examples.append(row.cases(_replaying_draw(data, structure, [])))
        n = len(examples[0].args)
        in_axes = [data.draw(st.one_of(st.none(), st.integers(0, np.ndim(a))))
                   for a in examples[0].args]
        if all(axis is None for axis in in_axes):
            in_axes[data.draw(st.integers(0, n - 1))] = 0
        batched = [examples[0].args[i] if axis is None else
                   np.stack([np.asarray(e.args[i]) for e in examples], axis)
                   for i, axis in enumerate(in_axes)]
        fun = row.bound(examples[0])
        out = functrans.vmap(fun, in_axes=tuple(in_axes))(*batched)
        for k in range(VMAP_SIZE):
            args = [b if axis is None else np.take(b, k, axis) for b, axis in zip(batched, in_axes)]
            expected = fun(*args)
            assert_close([o[k] for o in _leaves(out)], expected, max(row.tol, 1e-6),
                         f"{row.name} example {k} of in_axes={in_axes}")


# =============================================================================================
# 4. the llvm backend against the reference interpreter
# =============================================================================================


@pytest.mark.parametrize("row", _rows())
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_llvm_matches_reference(row, data):
    with x64():
        case = row.cases(_hypothesis_draw(data))
        fun = row.bound(case)
        got = functrans.jit(fun, backend="llvm")(*case.args)
        if row.numpy is None:
            row.check(case, got)
        else:
            expected = functrans.jit(fun, backend="reference")(*case.args)
            assert_close(got, expected, row.tol, f"{row.name} llvm vs reference")


# =============================================================================================
# 5. the cuda backend against the reference interpreter
# =============================================================================================


def _cuda_runtime():
    return pytest.importorskip("functrans.backends.cuda.runtime")


@pytest.fixture(scope="module")
def cuda_programs():
    """Each row's fixed example compiled by the cuda backend (no GPU needed to compile)."""
    runtime = _cuda_runtime()
    from functrans.backends.cuda import codegen
    programs = {}
    with x64():
        for i, row in enumerate(ROWS):
            case, closed = binding_example(row)
            exe = runtime.compile_jaxpr(closed)
            exe.module = codegen.generate(exe.program, prefix=f"p{i}_")  # unique kernel names
            programs[row.name] = (case, closed, exe)
    return programs


@pytest.fixture(scope="module")
def cuda_runner(cuda_programs, tmp_path_factory):
    """Runs a compiled program: on the GPU, or with nvcc as host code (all rows' kernels in
    one library, built once), or skips."""
    runtime = _cuda_runtime()
    if runtime.is_available():
        return lambda exe, args: exe(*args)
    from functrans.backends.cuda import host_emulation
    if host_emulation.nvcc_path() is None:
        pytest.skip("neither a CUDA GPU nor nvcc: the cuda backend's results are not checked")
    library = host_emulation.build_library([exe.module for _, _, exe in cuda_programs.values()])
    return lambda exe, args: host_emulation.run(exe, library, *args)


@pytest.mark.parametrize("row", _rows())
def test_cuda_matches_reference(row, cuda_programs, cuda_runner):
    case, closed, exe = cuda_programs[row.name]
    with x64():
        got = cuda_runner(exe, [np.asarray(a) for a in case.args])
        if row.numpy is None:
            row.check(case, got if len(got) > 1 else got[0])
        else:
            expected = functrans.jit(row.bound(case), backend="reference")(*case.args)
            assert_close(got, expected, row.tol, f"{row.name} cuda vs reference")


# =============================================================================================
# 6. runs natively
# =============================================================================================


def _llvm_fallbacks(closed) -> set:
    """The primitives of ``closed`` that the llvm backend leaves to NumPy (in control-flow
    bodies too); a loop driven from Python around compiled bodies counts as one."""
    from functrans.backends.llvm import control_flow, pipeline
    fallback = _fallback_step_class()
    with pipeline._compile_lock:
        program = pipeline.plan_native(closed).program
    programs = [program] + [body.program for body in control_flow.nested_programs(program)]
    return {step.eqn.primitive.name for p in programs for step in p.steps
            if isinstance(step, fallback)}


def _cuda_fallbacks(exe) -> set:
    from functrans.backends.cuda.control_flow import ControlLaunch
    fallback = _fallback_step_class()

    def items(module):
        for item in module.schedule:
            yield item
            if isinstance(item, ControlLaunch):
                for inner in item.modules:
                    yield from items(inner)
    return {item.eqn.primitive.name for item in items(exe.module) if isinstance(item, fallback)}


@pytest.mark.parametrize("row", _rows())
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_runs_natively_on_llvm(row, data):
    with x64():
        case = row.cases(_hypothesis_draw(data))
        closed = functrans.make_jaxpr(row.bound(case))(*case.args)
        left = _llvm_fallbacks(closed)
    if row.llvm_fallback:
        assert left <= {row.primitive.name}, left
    else:
        assert not left, f"{row.name}: NumPy fallback steps for {sorted(left)} in " \
                         f"{closed.jaxpr}"


@pytest.mark.parametrize("row", _rows())
def test_runs_natively_on_cuda(row, cuda_programs):
    case, closed, exe = cuda_programs[row.name]
    left = _cuda_fallbacks(exe)
    if row.cuda_fallback:
        assert left <= {row.primitive.name}, left
    else:
        assert not left, f"{row.name}: NumPy fallback steps for {sorted(left)}"


# =============================================================================================
# 7. the llvm backend for several target CPUs, within the row's bound of each other
# =============================================================================================


def _target_cpus() -> list:
    """native, and the x86-64 levels below AVX-512 whose code this machine runs."""
    from functrans.backends.llvm import targets
    names = ["native"]
    if targets.host().triple.startswith(("x86_64", "amd64")):
        names += [n for n in ("x86-64-v3", "x86-64-v2")
                  if not targets.missing_features(targets.resolve(n))]
    return names


def ulps_apart(a, b, accumulates: bool = False) -> float:
    """The largest distance between ``a`` and ``b`` in ulps of their dtype, at the larger
    magnitude of each pair (``accumulates``: at the largest magnitude in ``a`` and ``b``);
    0 where both are the same value or both NaN, inf where only one is NaN or they differ
    in an integer or boolean."""
    a, b = np.atleast_1d(np.asarray(a)), np.atleast_1d(np.asarray(b))
    if a.dtype.kind in "biu" or a.size == 0:
        return 0.0 if np.array_equal(a, b) else float("inf")
    if a.dtype.kind == "c":
        return max(ulps_apart(a.real, b.real, accumulates), ulps_apart(a.imag, b.imag,
                                                                         accumulates))
    with np.errstate(invalid="ignore", over="ignore"):
        magnitude = np.maximum(np.abs(a), np.abs(b))
        if accumulates:
            finite = magnitude[np.isfinite(magnitude)]
            magnitude = np.full_like(magnitude, finite.max() if finite.size else 0)
        spacing = np.spacing(magnitude.astype(a.dtype)).astype(np.float64)
        apart = np.abs(a.astype(np.float64) - b.astype(np.float64)) / spacing
    apart[(a == b) | (np.isnan(a) & np.isnan(b))] = 0.0
    apart[np.isnan(apart)] = np.inf
    return float(apart.max())


@pytest.mark.parametrize("row", _rows(lambda row: row.ulps is not None))
def test_target_cpus_agree_within_the_rows_bound(row):
    names = _target_cpus()
    if len(names) < 2:
        pytest.skip("this machine runs code for one target CPU only")
    with x64():
        case, _ = binding_example(row)
        fun = row.bound(case)
        results = {name: _leaves(functrans.jit(fun, backend="llvm",
                                                compiler_options={"target_cpu": name})(*case.args))
                   for name in names}
    for name in names[1:]:
        for k, (got, native) in enumerate(zip(results[name], results["native"])):
            apart = ulps_apart(got, native, row.accumulates)
            assert apart <= row.ulps, (f"{row.name} output {k}: {name} is {apart} ulps from "
                                       f"native (bound {row.ulps})")


@pytest.mark.parametrize("row", _rows(lambda row: row.llvm_fallback))
def test_known_llvm_fallbacks_still_fall_back(row):
    """A row whose listed fallback no longer happens (for any of ten examples) must drop it."""
    with x64():
        for seed in range(10):
            case = row.example(seed)
            closed = functrans.make_jaxpr(row.bound(case))(*case.args)
            if row.primitive.name in _llvm_fallbacks(closed):
                return
    raise AssertionError(f"{row.name} now runs natively on llvm: remove it from LLVM_FALLBACKS")


@pytest.mark.parametrize("row", _rows(lambda row: row.cuda_fallback))
def test_known_cuda_fallbacks_still_fall_back(row):
    runtime = _cuda_runtime()
    with x64():
        for seed in range(10):
            case = row.example(seed)
            closed = functrans.make_jaxpr(row.bound(case))(*case.args)
            if row.primitive.name in _cuda_fallbacks(runtime.compile_jaxpr(closed)):
                return
    raise AssertionError(f"{row.name} now runs natively on cuda: remove it from CUDA_FALLBACKS")


# =============================================================================================
# The guard: every primitive has a row
# =============================================================================================


def library_primitives() -> dict:
    """Every ``Primitive`` object at the top level of a functrans module, by name."""
    found: dict = {}
    for info in pkgutil.walk_packages(functrans.__path__, "functrans."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, Primitive):
                other = found.setdefault(value.name, value)
                assert other is value, f"two primitives are named {value.name!r}"
    return found


def test_every_primitive_has_a_row():
    primitives = library_primitives()
    with_rows = {row.primitive.name: row.primitive for row in ROWS}
    for name, primitive in with_rows.items():
        assert primitives.get(name) is primitive, f"row {name!r} names an unknown primitive"
    missing = set(primitives) - set(with_rows) - set(table.EXCLUDED)
    assert not missing, f"primitives without a row in tests/primitive_table.py: {sorted(missing)}"
    assert not set(with_rows) & set(table.EXCLUDED), "a primitive both has a row and is excluded"
    assert set(table.EXCLUDED) <= set(primitives), "an exclusion names no primitive"
