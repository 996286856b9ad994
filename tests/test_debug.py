"""Debugging features: debug.print/callback under transforms, NaN checks, retrace
explanations, disable_jit, source lines in the IR and in errors."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import functrans
from functrans import lax
import functrans.numpy as jnp


def test_debug_print_under_jit_vmap_grad(capsys):
    def f(x):
        functrans.debug.print("x = {}", x)
        return lax.sin(x)

    functrans.jit(f)(np.float32(1.5))
    assert capsys.readouterr().out == "x = 1.5\n"
    functrans.vmap(f)(np.array([1.0, 2.0], np.float32))
    assert capsys.readouterr().out == "x = 1.0\nx = 2.0\n"
    g = functrans.grad(f)(np.float32(0.0))
    assert capsys.readouterr().out == "x = 0.0\n"
    assert g == 1.0  # printing does not change the derivative


def test_debug_callback_receives_concrete_values():
    seen = []
    functrans.jit(lambda x: (functrans.debug.callback(lambda v: seen.append(v.sum()), x), x)[1])(
        np.ones(4, np.float32))
    assert seen == [4.0]


def test_debug_nans_names_primitive_and_line():
    functrans.config.update("debug_nans", True)

    def f(x):
        y = lax.log(x)  # the NaN comes from here for negative x
        return y * 2.0

    with pytest.raises(FloatingPointError, match=r"'log'.*test_debug.py"):
        functrans.jit(f)(np.float32(-1.0))
    with pytest.raises(FloatingPointError, match="log"):
        f(np.float32(-1.0))


def test_explain_cache_misses_says_what_changed(caplog):
    functrans.config.update("explain_cache_misses", True)
    g = functrans.jit(lambda x, y: x * y, static_argnames="y")
    with caplog.at_level(logging.WARNING, logger="functrans"):
        g(np.ones(3, np.float32), y=2)
        g(np.ones(4, np.float32), y=2)
        g(np.ones(4, np.int32), y=2)
        g(np.ones(4, np.int32), y=3)
    text = caplog.text
    assert "shape changed from (3,) to (4,)" in text
    assert "dtype changed from float32 to int32" in text
    assert "static argument 'y' changed from 2 to 3" in text


def test_disable_jit_runs_python():
    calls = []

    def f(x):
        calls.append(type(x).__name__)
        return x + 1

    with functrans.disable_jit():
        functrans.jit(f)(np.float32(1))
    assert calls == ["float32"]


def test_source_info_in_pretty_print():
    text = functrans.make_jaxpr(lambda x: lax.exp(x))(1.0).pretty_print(source_info=True)
    assert "test_debug.py" in text


def test_debug_print_under_pmap_shows_the_device(capsys):
    functrans.config.update("cpu_device_count", 2)
    f = functrans.pmap(lambda x: (functrans.debug.print("x = {}", x), x * 2)[1], axis_name="i")
    out = f(np.arange(2, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(out), [0.0, 2.0])
    lines = sorted(capsys.readouterr().out.splitlines())
    assert len(lines) == 2
    assert lines[0].startswith("[device 0] x = ") and "0." in lines[0]
    assert lines[1].startswith("[device 1] x = ") and "1." in lines[1]


def test_debug_print_inside_scan_body(capsys):
    def body(c, x):
        functrans.debug.print("c={} x={}", c, x)
        return c + x, c

    functrans.jit(lambda xs: lax.scan(body, 0.0, xs))(np.arange(3, dtype=np.float32))
    assert capsys.readouterr().out.splitlines() == ["c=0.0 x=0.0", "c=0.0 x=1.0", "c=1.0 x=2.0"]


def test_callback_under_pmap_sees_per_device_shapes():
    functrans.config.update("cpu_device_count", 2)
    shapes = []
    f = functrans.pmap(lambda x: (functrans.debug.callback(lambda v: shapes.append(v.shape), x),
                                  x * 2)[1], axis_name="i")
    f(np.arange(2, dtype=np.float32))
    f(np.ones((2, 3), np.float32))
    assert sorted(shapes) == [(), (), (3,), (3,)]


F32 = np.float32


# =============================================================================================
# debug_nans / debug_infs
# =============================================================================================


def test_debug_nans_config_with_jax_prefix_raises_and_is_restored():
    assert functrans.config.jax_debug_nans is False
    functrans.config.update("jax_debug_nans", True)
    try:
        assert functrans.config.jax_debug_nans is True and functrans.debug_nans.value
        f = lambda x: jnp.log(x) * 2.0  # noqa: E731
        with pytest.raises(FloatingPointError, match="log"):
            functrans.jit(f)(F32(-1.0))
        with pytest.raises(FloatingPointError, match="log"):
            f(F32(-1.0))
        # nested jit: the innermost primitive is named
        with pytest.raises(FloatingPointError, match="'log'"):
            functrans.jit(lambda x: functrans.jit(f)(x) + 1.0)(F32(-1.0))
        # no NaN, no error; an inf is not a NaN
        np.testing.assert_allclose(functrans.jit(f)(F32(1.0)), 0.0)
        assert np.isinf(functrans.jit(lambda x: 1.0 / x)(F32(0.0)))
    finally:
        functrans.config.update("jax_debug_nans", False)
    assert functrans.config.jax_debug_nans is False
    assert np.isnan(functrans.jit(lambda x: jnp.log(x))(F32(-1.0)))


def test_debug_nans_and_infs_context_managers():
    assert not functrans.debug_infs.value
    with functrans.debug_infs(True):
        assert functrans.config.jax_debug_infs
        with pytest.raises(FloatingPointError, match="inf.*'div'"):
            functrans.jit(lambda x: 1.0 / x)(F32(0.0))
        with pytest.raises(FloatingPointError, match="inf"):
            jnp.exp(F32(1000.0))
        np.testing.assert_allclose(jnp.exp(F32(0.0)), 1.0)
    assert not functrans.config.jax_debug_infs
    with functrans.debug_nans(True):
        with pytest.raises(FloatingPointError, match="NaN"):
            jnp.sqrt(F32(-1.0))
    assert not functrans.config.jax_debug_nans
    assert np.isnan(jnp.sqrt(F32(-1.0)))
