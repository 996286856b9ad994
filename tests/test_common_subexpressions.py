"""Equal equations of a flat program computed once (backends/compiler/common_subexpressions.py),
as the llvm pipeline's inlining pass does after inlining."""
from __future__ import annotations

import numpy as np

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans.backends.compiler import fusion
from functrans.backends.compiler.common_subexpressions import (MAX_EXTENSION, has_remat,
                                                                merge_closed)


def _flat(fn, *args):
    return fusion.flat_closed(functrans.make_jaxpr(fn)(*args))


def _names(closed):
    return [e.primitive.name for e in closed.jaxpr.eqns]


def test_a_value_written_twice_is_computed_once():
    """Batch normalization's ``h - mean``, written for the variance and again for the
    output, is one equation in its gradient (where the first is read by the backward pass
    anyway); the results are the same."""
    def norm(h):
        mean = jnp.mean(h, axis=0)
        var = jnp.mean(jnp.square(h - mean), axis=0)
        return jnp.sum(jnp.sin((h - mean) / jnp.sqrt(var + 1e-5)))
    h = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
    flat = _flat(functrans.grad(norm), h)
    merged = merge_closed(flat)
    assert _names(merged).count("sub") == _names(flat).count("sub") - 1
    np.testing.assert_allclose(np.asarray(functrans.jit(functrans.grad(norm))(h)),
                               np.asarray(functrans.grad(norm)(h)), rtol=1e-5, atol=1e-6)


def test_max_pooling_gathers_its_windows_once_and_keeps_its_results():
    """Max pooling's gradient gathers the windows for the maximum and again for the mask of
    where it was: one gather, the same gradient."""
    def loss(x):
        pooled = lax.reduce_window(x, -np.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return jnp.sum(jnp.sin(pooled))
    x = np.random.default_rng(1).standard_normal((2, 8, 8, 4)).astype(np.float32)
    flat = _flat(functrans.grad(loss), x)
    merged = merge_closed(flat)
    assert len(merged.jaxpr.eqns) < len(flat.jaxpr.eqns)
    np.testing.assert_allclose(np.asarray(functrans.jit(functrans.grad(loss))(x)),
                               np.asarray(functrans.grad(loss)(x)), rtol=1e-6, atol=1e-7)


def test_different_literals_and_parameters_are_not_merged():
    """0.0 and -0.0 are different literals; different parameters are different equations."""
    def f(x):
        return (lax.pad(x, 0.0, [(1, 1, 0)]), lax.pad(x, -0.0, [(1, 1, 0)]),
                lax.pad(x, 0.0, [(1, 2, 0)]))
    merged = merge_closed(_flat(f, np.ones(3, np.float32)))
    assert _names(merged).count("pad") == 3
    outs = functrans.jit(f)(np.ones(3, np.float32))
    assert np.signbit(np.asarray(outs[1])[0]) and not np.signbit(np.asarray(outs[0])[0])


def test_outputs_stateful_draws_and_checkpointed_programs_keep_every_copy():
    x = np.arange(4, dtype=np.float32)
    # each output keeps its own equation (the caller owns its buffer)
    both = merge_closed(_flat(lambda x: (x * 2, x * 2), x))
    assert _names(both).count("mul") == 2
    # two draws from the global generator are two different values
    draws = merge_closed(_flat(lambda a: (lax.rng_uniform(a, a + 1, (3,)) +
                                          lax.rng_uniform(a, a + 1, (3,))), np.float32(0)))
    assert _names(draws).count("rng_uniform") == 2
    # checkpoint's recomputation in the backward pass (plain equations once differentiated)
    # stays a recomputation when the forward pass's value died long before
    def loss(x):
        h = functrans.checkpoint(lambda y: jnp.sin(jnp.sin(y)))(x)
        for _ in range(20):
            h = jnp.tanh(h) * 1.5
        return h.sum()
    flat = _flat(functrans.grad(loss), x)
    assert _names(flat).count("sin") == 3
    assert _names(merge_closed(flat)).count("sin") == 3
    # a call of it that is still there before inlining leaves the program as it is
    assert has_remat(functrans.make_jaxpr(functrans.checkpoint(lambda y: jnp.sin(y) * 2))(x))
    assert not has_remat(functrans.make_jaxpr(lambda y: jnp.sin(y) * 2)(x))


def test_a_value_is_kept_alive_at_most_a_few_equations_longer_to_be_merged():
    """The first ``x * 3`` is dead (last read by ``sin``) long before the second is
    computed: the second stays. A few equations later, or still read, it is merged."""
    def far(x):
        a = jnp.sin(x * 3)
        for _ in range(MAX_EXTENSION):
            a = jnp.tanh(a) * 1.5
        return x * 3 + a
    assert _names(merge_closed(_flat(far, np.arange(4, dtype=np.float32)))).count("mul") \
        == 1 + MAX_EXTENSION + 1

    def near(x):
        a = jnp.sin(x * 3)
        return x * 3 + jnp.cos(a)
    assert _names(merge_closed(_flat(near, np.arange(4, dtype=np.float32)))).count("mul") == 1


def test_the_merge_is_switched_off_by_name_for_bisecting():
    """``disable_passes=common_subexpressions`` leaves the inlining pass's program with every
    copy, as the fuzzer's bisection needs of each optimization."""
    from functrans.backends.llvm import pipeline

    def f(h):
        return jnp.sin(h - 1.0) + jnp.cos(h - 1.0)
    closed = functrans.make_jaxpr(f)(np.ones(8, np.float32))
    inline = next(p for p in pipeline.passes(closed) if p.name == "inline")
    assert _names(inline.run(closed)).count("sub") == 1
    with functrans.config.setting("disable_passes", "common_subexpressions"):
        assert _names(inline.run(closed)).count("sub") == 2
