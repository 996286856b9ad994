"""The layers: what the core declares for the layers above it (Primitive fields, the
registrations of the eager array type and of device evaluation, the reference evaluator),
and the import contracts that keep every import pointing down."""
from __future__ import annotations

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import core, lax
from functrans._array import Array
from functrans.primitives import collectives, control_flow


def test_primitive_declares_the_fields_transforms_read():
    plain = core.Primitive("plain")
    assert plain.batch_needs_axis is False and plain.is_collective is False
    assert core.Primitive("axis_rule", batch_needs_axis=True).batch_needs_axis is True
    for p in (collectives.psum_p, collectives.all_gather_p, collectives.axis_index_p):
        assert p.is_collective and p.batch_needs_axis, p
    for p in (control_flow.cond_p, control_flow.while_p, control_flow.scan_p):
        assert p.batch_needs_axis and not p.is_collective, p
    assert not lax.sin_p.is_collective


def test_collective_of_unbatched_operand_under_vmap_still_runs_its_rule():
    # is_collective makes vmap run psum's rule on an operand that is not batched
    out = functrans.vmap(lambda x: collectives.psum(1.0, "i"), axis_name="i")(jnp.zeros(5))
    np.testing.assert_array_equal(np.asarray(out), np.full(5, 5.0, np.float32))


def test_eval_jaxpr_numpy_lives_in_the_core():
    closed = functrans.make_jaxpr(lambda x: lax.sin(x) * 2.0 + 1.0)(np.float32(0.5))
    out, = core.eval_jaxpr_numpy(closed.jaxpr, [core.to_numpy(c) for c in closed.consts],
                                 [np.float32(0.5)])
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, np.sin(np.float32(0.5)) * 2 + 1, rtol=1e-6)


class _OnOtherDevice(Array):
    """An Array that says it lives off the host, as a GPU array does."""
    __slots__ = ()
    _platform = "elsewhere"


@pytest.fixture
def registered_device_eval():
    calls = []
    previous = core._device_eval

    def evaluate(primitive, args, params):
        calls.append(primitive.name)
        if primitive is lax.neg_p:
            return NotImplemented  # declined: the reference implementation runs instead
        return Array(np.full(np.shape(args[0]), 7.0, np.float32))

    core.register_device_eval(evaluate)
    try:
        yield calls
    finally:
        core.register_device_eval(previous)


def test_eager_primitive_on_a_device_array_goes_to_the_registered_evaluator(
        registered_device_eval):
    x = _OnOtherDevice(np.ones(3, np.float32))
    np.testing.assert_array_equal(np.asarray(lax.sin(x)), np.full(3, 7.0, np.float32))
    np.testing.assert_array_equal(np.asarray(lax.neg(x)), -np.ones(3, np.float32))
    # host arrays never reach it
    np.testing.assert_allclose(np.asarray(lax.sin(jnp.ones(3))), np.sin(np.ones(3)), rtol=1e-6)
    assert registered_device_eval == ["sin", "neg"]


def test_eager_results_are_the_registered_array_type():
    assert core._array_type is Array
    assert type(lax.sin(np.float32(1.0))) is Array
