"""``Compiled.cost_analysis()`` and ``memory_analysis()`` read the compiler's own plan."""
from __future__ import annotations

import functrans
import functrans.numpy as jnp
from functrans import lax


def _compiled(f, *args):
    return functrans.jit(f).lower(*args).compile()


def test_matmul_flops_are_two_per_multiply_add():
    cost = _compiled(lambda a, b: a @ b, jnp.ones((4, 8)), jnp.ones((8, 3))).cost_analysis()
    assert cost["flops"] == 2 * 4 * 3 * 8
    assert cost["transcendentals"] == 0
    # each operand read once and the result written once
    assert cost["bytes accessed"] == 4 * (4 * 8 + 8 * 3 + 4 * 3)


def test_elementwise_work_and_transcendentals_are_counted_per_element():
    cost = _compiled(lambda x: jnp.exp(x) * 2.0 + x, jnp.ones(100)).cost_analysis()
    assert cost["transcendentals"] == 100
    assert cost["flops"] == 200  # a multiply and an add per element, fused into one loop
    assert cost["bytes accessed"] == 2 * 400  # one read, one write


def test_a_scan_body_counts_once_per_iteration():
    def f(xs):
        return lax.scan(lambda c, x: (c * x + 1.0, c), 0.0, xs)[0]

    one = _compiled(f, jnp.ones(1)).cost_analysis()["flops"]
    ten = _compiled(f, jnp.ones(10)).cost_analysis()["flops"]
    assert one > 0 and ten == 10 * one


def test_memory_analysis_reports_the_buffer_plan():
    def f(x, w):
        h = jnp.tanh(x @ w)  # an intermediate the plan places in scratch memory
        return (h @ w.T).sum(axis=1)

    compiled = _compiled(f, jnp.ones((16, 32)), jnp.ones((32, 32)))
    stats = compiled.memory_analysis()
    assert stats.argument_size_in_bytes == 4 * (16 * 32 + 32 * 32)
    assert stats.output_size_in_bytes == 4 * 16
    assert stats.temp_size_in_bytes >= 4 * 16 * 32
    assert stats.temp_size_in_bytes == compiled._executable.plan.arena_size
    assert stats.generated_code_size_in_bytes > 0
    assert stats.alias_size_in_bytes == 0
