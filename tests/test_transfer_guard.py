"""Transfer guards and config context managers, against JAX 0.10.2's behaviour (recorded
here as literals): implicit host-to-device transfers (host data into a jitted call or
jnp.asarray) are logged or refused; device_put is explicit."""
import logging

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans.errors import JaxRuntimeError

f = functrans.jit(lambda x: x + 1)

# (level, implicit transfer allowed, explicit transfer allowed, logged kinds)
LEVELS = [
    ("allow", True, True, ()),
    ("log", True, True, ("implicit",)),
    ("disallow", False, True, ()),
    ("log_explicit", True, True, ("implicit", "explicit")),
    ("disallow_explicit", False, False, ()),
]


def outcome(thunk):
    try:
        thunk()
    except JaxRuntimeError as e:
        return str(e)
    return "ok"


@pytest.mark.parametrize("level,implicit_ok,explicit_ok,logged", LEVELS)
def test_levels(level, implicit_ok, explicit_ok, logged, caplog):
    x = jnp.ones(3)
    f(x), f(np.ones(3, np.float32))   # compiled before the guard
    with caplog.at_level(logging.WARNING, logger="functrans"), functrans.transfer_guard(level):
        implicit = [outcome(lambda: f(np.ones(3, np.float32))), outcome(lambda: f(1.0)),
                    outcome(lambda: jnp.asarray(np.ones(3)))]
        explicit = outcome(lambda: functrans.device_put(np.ones(3)))
        assert outcome(lambda: f(x)) == "ok"      # an Array moves nothing
        assert outcome(lambda: np.asarray(x)) == "ok"   # CPU memory is host memory
    if implicit_ok:
        assert implicit == ["ok"] * 3
    else:
        assert implicit[0] == ("INVALID_ARGUMENT: Disallowed host-to-device transfer: "
                               "aval=ShapedArray(float32[3]), dst_sharding="
                               "SingleDeviceSharding(device=CpuDevice(id=0))")
        assert "aval=ShapedArray(float32[], weak_type=True)" in implicit[1]
        assert implicit[2].startswith("INVALID_ARGUMENT: Disallowed host-to-device")
    assert (explicit == "ok") == explicit_ok
    messages = [r.getMessage() for r in caplog.records if "transfer" in r.getMessage()]
    expected = 3 * ("implicit" in logged) + ("explicit" in logged)
    assert len(messages) == expected
    assert all(m.startswith("host-to-device transfer: aval=") for m in messages)


def test_the_guard_ends_with_its_context_and_directions_are_separate():
    with functrans.transfer_guard_device_to_host("disallow"):
        assert outcome(lambda: jnp.asarray(np.ones(2))) == "ok"
    with functrans.transfer_guard_host_to_device("disallow"):
        with functrans.transfer_guard_host_to_device("allow"):
            assert outcome(lambda: jnp.asarray(np.ones(2))) == "ok"
        assert outcome(lambda: jnp.asarray(np.ones(2))) != "ok"
    assert outcome(lambda: jnp.asarray(np.ones(2))) == "ok"


def test_config_option():
    try:
        functrans.config.update("jax_transfer_guard", "disallow")
        assert outcome(lambda: f(np.ones(3, np.float32))) != "ok"
        functrans.config.update("jax_transfer_guard_host_to_device", "allow")
        assert outcome(lambda: f(np.ones(3, np.float32))) == "ok"
    finally:
        functrans.config.update("jax_transfer_guard", None)
        functrans.config.update("jax_transfer_guard_host_to_device", None)
    assert outcome(lambda: f(np.ones(3, np.float32))) == "ok"


def test_unknown_levels_are_value_errors():
    message = ("new enum value must be None or in ['allow', 'log', 'disallow', "
               "'log_explicit', 'disallow_explicit'], got nope of type <class 'str'>.")
    with pytest.raises(ValueError) as e:
        functrans.transfer_guard("nope").__enter__()
    assert str(e.value) == message
    with pytest.raises(ValueError):
        functrans.config.update("jax_transfer_guard_device_to_host", "nope")


def test_default_matmul_precision():
    x = jnp.arange(4.0).reshape(2, 2)
    assert functrans.config.jax_default_matmul_precision is None
    for value in ("default", "high", "highest", "bfloat16", "tensorfloat32", "float32",
                  "BF16_BF16_F32", "ANY_F8_ANY_F8_F32"):
        with functrans.default_matmul_precision(value):
            assert functrans.config.jax_default_matmul_precision == value
            # the CPU backends compute every matmul in full float32
            np.testing.assert_array_equal(x @ x, np.asarray(x) @ np.asarray(x))
    assert functrans.config.jax_default_matmul_precision is None
    for bad in ("bfloat16_3x", "tensorfloat32_3x", "nope"):   # not accepted by JAX 0.10.2
        with pytest.raises(ValueError, match="new enum value must be None or in"):
            with functrans.default_matmul_precision(bad):
                pass
        with pytest.raises(ValueError):
            functrans.config.update("jax_default_matmul_precision", bad)


def test_staging_a_program_transfers_nothing(caplog):
    """Constants met while a program is staged (a first jit trace, make_jaxpr, a scan body)
    become part of the program: no guard sees them, even at "disallow". Eager operations
    on Python scalars do transfer (as in JAX 0.10.2)."""
    x = jnp.ones(3)
    fresh = [functrans.jit(lambda x: x + 1),
             functrans.jit(lambda x: jnp.sin(x) * 2.0 + jnp.arange(3) + np.float32(3)),
             functrans.jit(lambda x: x + jnp.asarray(np.ones(3))),
             functrans.jit(lambda x: functrans.lax.scan(
                 lambda c, _: (c * 2.0 + 1, None), x, None, length=3)[0])]
    with caplog.at_level(logging.WARNING, logger="functrans"), \
            functrans.transfer_guard("log"):
        for g in fresh:
            g(x)
        functrans.make_jaxpr(lambda x: x * 3.0 + np.ones(3, np.float32))(x)
    assert not [r for r in caplog.records if "transfer" in r.getMessage()]
    with functrans.transfer_guard("disallow"):
        assert outcome(lambda: functrans.jit(lambda x: x * 5.0 - 1)(x)) == "ok"
        assert outcome(lambda: jnp.sin(x) * 2.0).startswith(
            "INVALID_ARGUMENT: Disallowed host-to-device transfer")
        assert outcome(lambda: functrans.grad(lambda x: jnp.sum(x * 2.0))(x)) != "ok"
