"""Errors point at what the user wrote: the argument and its pytree path, the line that made a
NaN, the parameter a static option names, and tracebacks that end in the user's code."""
from __future__ import annotations

import inspect
import os
import subprocess
import sys
import traceback

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans._source_info import is_internal_file


def _line_of(fun, text: str) -> int:
    """The line number of the first line of ``fun``'s source that contains ``text``."""
    lines, start = inspect.getsourcelines(fun)
    return start + next(i for i, line in enumerate(lines) if text in line)


# ---- vmap and pmap: which argument has which size ---------------------------------------------


def test_vmap_size_mismatch_names_the_argument_and_its_path():
    def predict(p, x):
        return x @ p["w"] + p["b"]

    with pytest.raises(ValueError) as info:
        functrans.vmap(predict)({"w": jnp.ones((5, 3)), "b": jnp.ones(3)}, jnp.ones((16, 5)))
    message = str(info.value)
    assert message.startswith("vmap got inconsistent sizes for the mapped axis:")
    assert "axis 0 of argument p['w'] of type float32[5,3]" in message
    assert "axis 0 of argument p['b'] of type float32[3]" in message
    assert "axis 0 of argument x of type float32[16,5]" in message
    assert "leaves" not in message


def test_vmap_size_mismatch_counts_the_common_size():
    with pytest.raises(ValueError) as info:
        functrans.vmap(lambda a, b, c: a + b + c, in_axes=(0, 0, 1))(
            jnp.ones(4), jnp.ones(4), jnp.ones((2, 3)))
    message = str(info.value)
    assert "most axes (2 of them) had size 4, e.g. axis 0 of argument a of type float32[4]" \
        in message
    assert "one axis had size 3: axis 1 of argument c of type float32[2,3]" in message


def test_pmap_size_mismatch_names_the_argument():
    with pytest.raises(ValueError, match=r"axis 0 of argument ys\[1\] of type float32\[2\]"):
        functrans.pmap(lambda x, ys: x + ys[0] + ys[1])(jnp.ones(1), (jnp.ones(1), jnp.ones(2)))


# ---- debug_nans: the line that made the NaN ---------------------------------------------------


def _norm_of_zero(w):
    d = w * 2 - w * 2
    return jnp.linalg.norm(d)  # the gradient of a norm at zero is NaN


@pytest.mark.parametrize("compiled", [True, False], ids=["jit", "eager"])
def test_debug_nans_in_the_backward_pass_names_the_users_line(compiled):
    grad = functrans.grad(_norm_of_zero)
    if compiled:
        grad = functrans.jit(grad)
    line = _line_of(_norm_of_zero, "jnp.linalg.norm(d)")
    with functrans.debug_nans(True):
        with pytest.raises(FloatingPointError) as info:
            grad(jnp.ones(3))
    assert f"{__file__}:{line}" in str(info.value) or f"test_error_messages.py:{line}" in \
        str(info.value), str(info.value)


def test_debug_nans_traceback_has_no_internal_frames():
    with functrans.debug_nans(True):
        with pytest.raises(FloatingPointError) as info:
            functrans.jit(functrans.grad(_norm_of_zero))(jnp.ones(3))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert not [f for f in frames if is_internal_file(f.filename)], frames


def test_grad_traceback_ends_in_the_users_function():
    def loss(w):
        return jnp.sum(w @ jnp.ones((4, 2)))  # 3 does not contract with 4

    with pytest.raises(TypeError) as info:
        functrans.grad(loss)(jnp.ones(3))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert not [f for f in frames if is_internal_file(f.filename)], frames
    assert frames[-1].name == "loss" and frames[-1].lineno == _line_of(loss, "jnp.sum")


def test_traceback_filtering_off_keeps_internal_frames():
    def loss(w):
        return jnp.sum(w @ jnp.ones((4, 2)))

    functrans.config.update("traceback_filtering", "off")
    try:
        with pytest.raises(TypeError) as info:
            functrans.grad(loss)(jnp.ones(3))
    finally:
        functrans.config.update("traceback_filtering", "on")
    frames = traceback.extract_tb(info.value.__traceback__)
    assert [f for f in frames if is_internal_file(f.filename)]


# ---- jit's static arguments -------------------------------------------------------------------


def test_static_argnums_out_of_range_is_refused_when_jit_is_called():
    with pytest.raises(ValueError, match=r"Jitted function has static_argnums=\(3,\), but only "
                                         r"accepts 1 positional arguments\."):
        functrans.jit(lambda x: x, static_argnums=3)
    with pytest.raises(ValueError, match="static_argnums"):
        functrans.jit(lambda x, y: x, static_argnums=-3)
    functrans.jit(lambda *xs: xs[0], static_argnums=5)  # any position exists


def test_static_argnames_naming_no_parameter_is_refused():
    def f(x, *, scale=1.0):
        return x * scale

    with pytest.raises(ValueError, match=r"invalid argnames \{'y'\} in static_argnames\. "
                                         r"Function does not take these args\."):
        functrans.jit(f, static_argnames="y")
    assert functrans.jit(f, static_argnames="scale")(2.0, scale=3.0) == 6.0
    functrans.jit(lambda x, **kw: x, static_argnames="anything")  # **kw takes any name


def test_static_argnames_refuses_positional_only_parameters():
    def f(x, /, y):
        return x + y

    with pytest.raises(ValueError, match="positional-only"):
        functrans.jit(f, static_argnames="x")


# ---- NumPy's broadcasting errors --------------------------------------------------------------


def test_broadcasting_error_classes_follow_jax():
    with pytest.raises(ValueError, match=r"Incompatible shapes for broadcasting: "
                                         r"shapes=\[\(80,\), \(80, 6\)\]"):
        jnp.ones(80) * jnp.ones((80, 6))  # different ranks
    with pytest.raises(TypeError, match=r"multiply got incompatible shapes for broadcasting: "
                                        r"\(3, 4\), \(5, 4\)"):
        jnp.ones((3, 4)) * jnp.ones((5, 4))  # equal ranks


# ---- JAX's environment variables --------------------------------------------------------------


def _run(code: str, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("JAX_", "XLA_FLAGS", "FUNCTRANS_ENABLE_X64",
                                  "FUNCTRANS_CPU_DEVICES"))}
    return subprocess.run([sys.executable, "-c", code], env={**clean, **env},
                          capture_output=True, text=True, timeout=120)


def test_jax_environment_variables_set_the_options():
    code = ("import functrans\n"
            "c = functrans.config\n"
            "print(c.enable_x64, c.cpu_device_count, c.debug_nans, c.default_backend, "
            "c.threefry_partitionable, c.transfer_guard)")
    out = _run(code, JAX_ENABLE_X64="1", JAX_NUM_CPU_DEVICES="3", JAX_DEBUG_NANS="true",
               JAX_PLATFORMS="cpu", JAX_THREEFRY_PARTITIONABLE="0", JAX_TRANSFER_GUARD="log")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "3", "True", "cpu", "False", "log"]
    # functrans's own variable wins over JAX's
    out = _run(code, JAX_ENABLE_X64="1", FUNCTRANS_ENABLE_X64="0")
    assert out.stdout.split()[0] == "False"
    # the XLA flag JAX users set for CPU devices
    out = _run(code, XLA_FLAGS="--xla_cpu_foo=1 --xla_force_host_platform_device_count=6")
    assert out.stdout.split()[1] == "6", out.stderr


def test_the_float64_warnings_fix_works_and_the_warning_points_at_the_users_line():
    code = ("import warnings\n"
            "import functrans.numpy as jnp\n"
            "x = jnp.ones(2, jnp.float64)\n"
            "print(x.dtype)\n")
    out = _run(code)
    assert "JAX_ENABLE_X64" in out.stderr and "<string>:3: UserWarning" in out.stderr
    assert out.stdout.strip() == "float32"
    out = _run(code, JAX_ENABLE_X64="1")  # the fix the warning suggests
    assert out.returncode == 0 and "UserWarning" not in out.stderr, out.stderr
    assert out.stdout.strip() == "float64"
    assert np.dtype(out.stdout.strip()) == np.float64


@pytest.mark.parametrize("transform", ["pmap", "checkpoint", "eval_shape", "shard_map",
                                       "jacrev", "vjp"])
def test_tracebacks_of_other_transforms_end_in_the_users_function(transform):
    def f(x):
        return x @ jnp.ones((4, 2))  # 3 does not contract with 4

    x = jnp.ones((1, 3))
    calls = {
        "pmap": lambda: functrans.pmap(f)(x),
        "checkpoint": lambda: functrans.checkpoint(f)(x),
        "eval_shape": lambda: functrans.eval_shape(f, x),
        "shard_map": lambda: functrans.shard_map(
            f, mesh=functrans.make_mesh((1,), ("i",)), in_specs=functrans.P(),
            out_specs=functrans.P())(x),
        "jacrev": lambda: functrans.jacrev(f)(x),
        "vjp": lambda: functrans.vjp(f, x),
    }
    with pytest.raises(TypeError) as info:
        calls[transform]()
    frames = traceback.extract_tb(info.value.__traceback__)
    assert not [fr for fr in frames if is_internal_file(fr.filename)], frames
    assert frames[-1].name == "f"
