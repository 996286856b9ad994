"""Transfer guards on host data that lax-level functions take as operands (a collective's
operand under vmap, custom_linear_solve's ``b``, custom_root's initial guess): turning it
into an Array is an implicit host-to-device transfer, as ``jnp.asarray`` is. The outcomes
are JAX 0.10.2's for the same programs, recorded here as literals."""
import logging

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans.errors import JaxRuntimeError

REFUSED = ("INVALID_ARGUMENT: Disallowed host-to-device transfer: "
           "aval=ShapedArray(float32[3]), dst_sharding=SingleDeviceSharding(device=CpuDevice(id=0))")

HOST = np.arange(3, dtype=np.float32)
DIAG = jnp.diag(jnp.arange(1.0, 4.0))


def outcome(thunk):
    try:
        thunk()
    except JaxRuntimeError as e:
        return str(e)
    return "ok"


def _vmapped(collective):
    return lambda: functrans.vmap(lambda x: collective(x), axis_name="i")(jnp.ones((2, 3)))


@pytest.mark.parametrize("collective", [
    lambda x: lax.psum(HOST, "i"),
    lambda x: lax.all_gather(HOST, "i"),
    lambda x: lax.ppermute(HOST, "i", [(0, 1), (1, 0)]),
], ids=["psum", "all_gather", "ppermute"])
def test_collective_of_host_data_is_an_implicit_transfer(collective):
    with functrans.transfer_guard("disallow"):
        assert outcome(_vmapped(collective)) == REFUSED
        # the members' own values are Arrays already: nothing moves
        assert outcome(_vmapped(lambda x: lax.psum(x, "i"))) == "ok"


def test_collective_of_host_data_is_logged(caplog):
    with caplog.at_level(logging.WARNING, logger="functrans"), \
            functrans.transfer_guard("log"):
        out = _vmapped(lambda x: lax.psum(HOST, "i"))()
    np.testing.assert_array_equal(np.asarray(out), np.tile(2 * HOST, (2, 1)))
    messages = [r.getMessage() for r in caplog.records if "transfer" in r.getMessage()]
    assert messages == [REFUSED.split("Disallowed ")[1]]


def test_host_data_in_a_staged_collective_is_a_constant_of_the_program():
    with functrans.transfer_guard("disallow"):
        out = functrans.pmap(lambda x: x + lax.psum(HOST, "i"), axis_name="i")(jnp.ones((1, 3)))
    np.testing.assert_array_equal(np.asarray(out), 1 + HOST[None])


def _solve(matvec, b):
    return b / jnp.diag(DIAG)


def test_custom_linear_solve_of_host_data_is_an_implicit_transfer():
    def matvec(v):
        return DIAG @ v

    b = jnp.asarray(HOST)
    with functrans.transfer_guard("disallow"):
        assert outcome(lambda: lax.custom_linear_solve(matvec, HOST, _solve)) == REFUSED
        assert outcome(lambda: lax.custom_linear_solve(matvec, b, _solve)) == "ok"
        # staged, the host data is a constant of the program
        staged = functrans.jit(lambda: lax.custom_linear_solve(matvec, HOST, _solve))
        assert outcome(staged) == "ok"


def test_custom_root_of_a_host_guess_is_an_implicit_transfer():
    target = jnp.arange(3.0)

    def solve(f, x0):
        return jnp.sqrt(target) + x0 - x0

    def tangent_solve(g, y):
        return y / (jnp.sqrt(target) + jnp.sqrt(target))

    with functrans.transfer_guard("disallow"):
        assert outcome(lambda: lax.custom_root(lambda x: x * x - target, np.ones(3, np.float32),
                                               solve, tangent_solve)) == REFUSED
