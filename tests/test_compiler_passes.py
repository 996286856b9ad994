"""The shared compiler (backends/compiler): its passes are target independent, and every
backend's driver is a list of them."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llvmlite")

import functrans  # noqa: E402
import functrans.numpy as jnp  # noqa: E402
from functrans.backends.compiler import fusion  # noqa: E402


def _custom_sine():
    f = functrans.custom_jvp(lambda x: jnp.sin(x) * 2)
    f.defjvp(lambda primals, tangents: (f(*primals), tangents[0]))
    return f


def test_flat_program_inlines_every_call_like_equation():
    f = _custom_sine()
    closed = functrans.make_jaxpr(lambda x: functrans.jit(f)(x) + 1)(np.ones(3, np.float32))
    jaxpr, consts = fusion.flat_program(closed)
    names = [e.primitive.name for e in jaxpr.eqns]
    assert "jit" not in names and "custom_jvp_call" not in names
    assert "sin" in names


def test_a_custom_derivative_call_fuses_with_its_neighbours():
    from functrans.backends.llvm import pipeline
    f = _custom_sine()
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    closed = functrans.make_jaxpr(lambda x: f(x) + 1)(x)
    program = pipeline.plan_native(closed).program
    assert not any(isinstance(s, fusion.FallbackStep) for s in program.steps)
    [out] = pipeline.compile_jaxpr(closed)(x)
    np.testing.assert_allclose(out, np.sin(x) * 2 + 1, rtol=1e-6)


def _imported_modules(package_dir):
    import ast
    import pathlib
    for path in sorted(pathlib.Path(package_dir).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                yield path.name, node.module
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    yield path.name, alias.name


@pytest.mark.parametrize("package, forbidden", [
    ("compiler", ("functrans.backends.llvm", "functrans.backends.cuda", "llvmlite", "cupy")),
    ("cuda", ("functrans.backends.llvm", "llvmlite")),
    ("llvm", ("functrans.backends.cuda", "cupy")),
])
def test_backends_share_the_compiler_and_never_import_each_other(package, forbidden):
    import pathlib
    import functrans.backends
    root = pathlib.Path(functrans.backends.__file__).parent / package
    bad = [(f, m) for f, m in _imported_modules(root) if m.startswith(forbidden)]
    assert bad == []


@pytest.fixture
def dump_dir(tmp_path):
    functrans.config.update("dump_passes", str(tmp_path))
    try:
        yield tmp_path
    finally:
        functrans.config.update("dump_passes", "")


def _dumped(root, backend):
    [folder] = [p for p in root.iterdir() if p.name.endswith("-" + backend)]
    return {p.stem: p.read_text() for p in sorted(folder.iterdir())}


def _conv_program():
    x = np.ones((1, 1, 6, 6), np.float32)
    w = np.ones((1, 1, 3, 3), np.float32)
    return functrans.make_jaxpr(lambda x, w: functrans.nn.relu(
        functrans.lax.conv_general_dilated(x, w, (1, 1), "VALID")))(x, w)


def test_llvm_passes_dump_the_program_after_each_pass(dump_dir):
    from functrans.backends.llvm import pipeline
    closed = _conv_program()
    pipeline.compile_jaxpr(closed, use_cache=False)
    dumps = _dumped(dump_dir, "llvm")
    names = [p.name for p in pipeline.passes(closed)]
    assert list(dumps) == ["00-input"] + [f"{k:02d}-{n}" for k, n in enumerate(names, 1)]
    assert "conv_general_dilated" in dumps["00-input"]
    # decompose rewrites the convolution into the direct kernel's layout, in a call
    assert "= jit[" in dumps["01-decompose"]
    assert "= jit[" not in dumps["02-inline"]
    assert "loop[" in dumps["04-fuse"] and "numpy conv_general_dilated" in dumps["04-fuse"]
    lowered = next(text for name, text in dumps.items() if name.endswith("lower_native_steps"))
    assert "conv[direct" in lowered and "numpy conv_general_dilated" not in lowered
    assert "arena" in dumps[f"{len(names):02d}-plan_buffers"]


def test_cuda_passes_dump_the_program_after_each_pass(dump_dir):
    from functrans.backends.cuda import runtime
    runtime.compile_jaxpr(_conv_program())
    dumps = _dumped(dump_dir, "cuda")
    names = [p.name for p in runtime.passes()]
    assert list(dumps) == ["00-input"] + [f"{k:02d}-{n}" for k, n in enumerate(names, 1)]
    assert "__global__" in dumps[f"{len(names):02d}-generate"]


def test_nothing_is_dumped_by_default(tmp_path, monkeypatch):
    from functrans.backends.llvm import pipeline
    monkeypatch.chdir(tmp_path)
    assert functrans.config.read("dump_passes") == ""
    pipeline.compile_jaxpr(_conv_program(), use_cache=False)
    assert list(tmp_path.iterdir()) == []
