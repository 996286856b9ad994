"""The tracer leak checker (jax.checking_leaks / jax_check_tracer_leaks) and effects_barrier."""
import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax

TRANSFORMS = {
    "jit": lambda f: functrans.jit(f)(1.0),
    "grad": lambda f: functrans.grad(f)(1.0),
    "vjp": lambda f: functrans.vjp(f, 1.0),
    "jvp": lambda f: functrans.jvp(f, (1.0,), (1.0,)),
    "vmap": lambda f: functrans.vmap(f)(jnp.ones(3)),
    "make_jaxpr": lambda f: functrans.make_jaxpr(f)(1.0),
    "scan": lambda f: lax.scan(lambda c, _: (f(c), None), 1.0, None, length=2),
    "cond": lambda f: lax.cond(True, f, f, 1.0),
    "while_loop": lambda f: lax.while_loop(lambda c: c < 3.0, lambda c: f(c) + 1.0, 1.0),
}


@pytest.mark.parametrize("transform", list(TRANSFORMS))
def test_a_leaked_tracer_raises_only_under_checking_leaks(transform):
    leaked = []

    def leaking_function():  # a new function each time: a cached trace is not re-checked
        def f(x):
            leaked.append(x * 2.0)
            return x
        return f

    with functrans.check_tracer_leaks(False):  # not checked: no error
        TRANSFORMS[transform](leaking_function())
    leaked.clear()
    with functrans.checking_leaks():
        with pytest.raises(functrans.UnexpectedTracerError, match="Leaked trace") as info:
            TRANSFORMS[transform](leaking_function())
    leaked.clear()
    assert "is referred to by" in str(info.value)


@pytest.mark.parametrize("transform", list(TRANSFORMS))
def test_functions_that_do_not_leak_pass_the_check(transform):
    with functrans.checking_leaks():
        TRANSFORMS[transform](lambda x: lax.abs(x) * 2.0)
        np.testing.assert_allclose(functrans.grad(lambda x: x * x)(3.0), 6.0)


def test_the_message_names_the_tracer_its_line_and_its_holder():
    holder = []

    def f(x):
        holder.append(x + 1.0)
        return x

    with functrans.checking_leaks():
        with pytest.raises(functrans.UnexpectedTracerError) as info:
            functrans.jit(f)(1.0)
    message = str(info.value)
    assert "DynamicJaxprTrace" in message and "jit" in message
    assert "JitTracer(~float32[])" in message
    assert "test_tracer_leaks.py" in message  # the line that created it
    assert "[0]" in message  # held at index 0 of a list


def test_a_tracer_kept_by_a_closure_is_found():
    closures = []

    def f(x):
        closures.append(lambda: x)
        return x

    with functrans.checking_leaks():
        with pytest.raises(functrans.UnexpectedTracerError, match="closed-over variable x"):
            functrans.jit(f)(1.0)


def test_the_config_option_and_context_manager_restore_the_flag():
    assert not functrans.config.check_tracer_leaks
    functrans.config.update("jax_check_tracer_leaks", True)
    try:
        assert functrans.check_tracer_leaks.value
    finally:
        functrans.config.update("jax_check_tracer_leaks", False)
    with functrans.check_tracer_leaks(True):
        assert functrans.config.read("check_tracer_leaks")
    assert not functrans.config.check_tracer_leaks


def test_using_a_leaked_tracer_later_is_still_an_unexpected_tracer_error():
    leaked = []
    with functrans.check_tracer_leaks(False):
        functrans.jit(lambda x: leaked.append(x) or x)(1.0)
    with pytest.raises(functrans.UnexpectedTracerError):
        leaked[0] + 1.0


def test_effects_barrier_after_a_debug_print(capfd):
    @functrans.jit
    def f(x):
        functrans.debug.print("x = {}", x)
        return x * 2

    f(jnp.float32(3.0))
    functrans.effects_barrier()
    assert "x = 3.0" in capfd.readouterr().out


def test_array_readiness_methods():
    x = jnp.arange(3.0)
    assert x.is_ready()
    assert x.copy_to_host_async() is None
    assert functrans.block_until_ready({"a": x, "b": 1})["a"] is x
    assert x.block_until_ready() is x
