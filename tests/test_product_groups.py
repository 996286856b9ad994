"""Independent products side by side (product_groups, matrix_products.group_side_by_side):
the backward pass of a dense layer runs ``g Wᵀ`` and ``W - lr hᵀ g`` whole, one per thread,
with the bits of one BLAS call each, the SGD update's copy inside its product's chunk, and a
donated ``W`` still updated in place, after the product that reads it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("llvmlite")

import functrans  # noqa: E402
from functrans._config import config  # noqa: E402
from functrans.backends.compiler.product_groups import ProductGroup  # noqa: E402
from functrans.backends.llvm import matrix_products  # noqa: E402

rng = np.random.default_rng(5)


def backward(w, h, g):
    """A dense layer's input gradient and its weights' SGD update: independent products."""
    return g @ w.T, w - 0.1 * (h.T @ g)


def _args():
    return [rng.standard_normal(s).astype(np.float32) for s in ((512, 512), (128, 512),
                                                                   (128, 512))]


def _program(fun, args):
    with config.setting("disable_passes", "group_products"):
        return functrans.jit(fun).lower(*args).compile()._executable.program


def test_independent_products_of_a_backward_pass_form_one_group_on_two_threads():
    program = _program(backward, _args())
    grouped = matrix_products.group_side_by_side(program, threads=2)
    groups = [s for s in grouped.steps if isinstance(s, ProductGroup)]
    assert len(groups) == 1
    (group,) = groups
    assert [(p.m, p.n, p.k) for p in group.products] == [(128, 512, 512), (512, 512, 128)]
    # the update's initial value (w) is copied by the product's own chunk
    assert group.copies[0] is None and group.copies[1] is program.inputs[0]


def test_products_of_unequal_work_or_dependent_ones_stay_apart():
    def chain(w, h, g):
        return (g @ w.T) @ w      # the second reads the first
    args = _args()
    grouped = matrix_products.group_side_by_side(_program(chain, args), threads=2)
    assert not any(isinstance(s, ProductGroup) for s in grouped.steps)

    def unequal(w, h, g):
        return g @ w.T, w - 0.1 * (h[:32].T @ g[:32])   # a quarter of the other's work
    grouped = matrix_products.group_side_by_side(_program(unequal, args), threads=2)
    assert not any(isinstance(s, ProductGroup) for s in grouped.steps)
    one = matrix_products.group_side_by_side(_program(backward, args), threads=1)
    assert not any(isinstance(s, ProductGroup) for s in one.steps)
    # a transformer layer's products: milliseconds each, equal flops but not equal times
    large = [np.ones(s, np.float32) for s in ((512, 2048), (2048, 512), (2048, 2048))]
    grouped = matrix_products.group_side_by_side(_program(backward, large), threads=2)
    assert not any(isinstance(s, ProductGroup) for s in grouped.steps)


SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import functrans
    sys.path.insert(0, sys.argv[1])
    from test_product_groups import backward, _args
    from functrans.backends.compiler.product_groups import ProductGroup

    args = _args()
    fun = functrans.jit(backward)
    program = fun.lower(*args).compile()._executable.program
    outs = [[np.asarray(o) for o in fun(*args)] for _ in range(5)]
    donating = functrans.jit(backward, donate_argnums=0)
    w = functrans.jit(lambda v: v + 0.0)(args[0])   # an exclusively owned buffer
    address = w._value.__array_interface__["data"][0]
    donated = donating(w, *args[1:])
    print(json.dumps({
        "groups": sum(isinstance(s, ProductGroup) for s in program.steps),
        "bits": [o.tobytes().hex() for o in outs[0]],
        "repeatable": all(np.array_equal(a, b) for run in outs for a, b in zip(outs[0], run)),
        "in_place": donated[1]._value.__array_interface__["data"][0] == address,
        "donated_equal": all(np.array_equal(np.asarray(a), b)
                             for a, b in zip(donated, outs[0])),
        "close": all(np.allclose(a, b, rtol=1e-5, atol=1e-4)
                     for a, b in zip(outs[0], backward(*args))),
    }))
""")


def _run(threads: int) -> dict:
    env = dict(os.environ, FUNCTRANS_NUM_THREADS=str(threads))
    done = subprocess.run([sys.executable, "-c", SCRIPT, os.path.dirname(__file__)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_group_gives_the_bits_of_one_thread_and_donation_still_works():
    """On two threads the products run side by side; their bits are those of one BLAS call
    each, as on one thread. A donated ``w`` holds the update, written after ``g @ w.T`` read
    it (the group runs its products in order when an output is an input's memory)."""
    two, one = _run(2), _run(1)
    assert two["groups"] == 1 and one["groups"] == 0
    assert two["bits"] == one["bits"]
    for run in (one, two):
        assert run["repeatable"] and run["in_place"] and run["donated_equal"]
        assert run["close"]
