"""Control flow whose bodies need NumPy steps (backends/llvm/host_loops.py): the loop runs in
Python around compiled bodies, and must give exactly what the reference interpreter gives."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llvmlite")

import functrans  # noqa: E402
import functrans.lax as lax  # noqa: E402
import functrans.numpy as jnp  # noqa: E402

rng = np.random.default_rng(11)


def _body_with_fallbacks(c, x):
    """eigvalsh and cumlogsumexp are not compiled natively: the body has NumPy steps."""
    m = c @ c.T + jnp.eye(c.shape[0]) * 4.0 + x + x.T
    w = jnp.linalg.eigvalsh(m)
    s = lax.cumlogsumexp(c, axis=1) * 0.1 + w
    return jnp.tanh(s) * 0.3, jnp.sum(w)


def _scan(reverse=False):
    return lambda c, xs: lax.scan(_body_with_fallbacks, c, xs, reverse=reverse)


def _while(c):
    def cond(state):
        i, _ = state
        return i < 5

    def body(state):
        i, c = state
        return i + 1, _body_with_fallbacks(c, jnp.zeros_like(c))[0]
    return lax.while_loop(cond, body, (0, c))


def _cond(i, c):
    return lax.switch(i, [lambda c: lax.cumlogsumexp(c, axis=0), lambda c: c * 2.0,
                          lambda c: jnp.linalg.eigh(c @ c.T + 3.0 * jnp.eye(4))[0] + c], c)


def _nested(c, xs):
    def outer(c, x):
        c, ys = lax.scan(_body_with_fallbacks, c, x)
        return c, jnp.max(ys)
    return lax.scan(outer, c, xs)


C = rng.standard_normal((4, 4)).astype(np.float32) * 0.3
XS = rng.standard_normal((6, 4, 4)).astype(np.float32) * 0.1

CASES = {
    "scan": (_scan(), (C, XS)),
    "scan_reverse": (_scan(reverse=True), (C, XS)),
    "scan_empty": (_scan(), (C, XS[:0])),
    "while": (_while, (C,)),
    "switch_0": (_cond, (np.int32(0), C)),
    "switch_2": (_cond, (np.int32(2), C)),
    "switch_clamped": (_cond, (np.int32(7), C)),
    "nested": (_nested, (C, XS.reshape(3, 2, 4, 4))),
    "grad": (functrans.grad(lambda c, xs: jnp.sum(_scan()(c, xs)[1])), (C, XS)),
    "vmap": (functrans.vmap(_scan(), in_axes=(None, 0)), (C, XS.reshape(2, 3, 4, 4))),
}


@pytest.mark.parametrize("name", list(CASES))
def test_loops_around_compiled_bodies_match_the_reference(name):
    fun, args = CASES[name]
    compiled = functrans.jit(fun).lower(*args).compile()
    description = compiled._executable.description
    assert "around compiled bodies" in description, description
    got = functrans.tree_util.tree_leaves(compiled(*args))
    expected = functrans.tree_util.tree_leaves(functrans.jit(fun, backend="reference")(*args))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert np.asarray(g).shape == np.asarray(e).shape
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=2e-5, atol=2e-6)


def test_native_bodies_stay_native_loops():
    """A loop whose body compiles without NumPy steps is still one native loop."""
    fun = lambda c, xs: lax.scan(lambda c, x: (jnp.tanh(c @ c + x), jnp.sum(c)), c, xs)  # noqa: E731
    description = functrans.jit(fun).lower(C, XS).compile()._executable.description
    assert "around compiled bodies" not in description and "numpy scan" not in description
