"""Large results of compiled calls on pooled memory (backends/llvm/output_memory.py): a block
goes back to the pool only when the last array using it has died, the next output of its
size takes it, no two live arrays share one, the pool stays within its bound, and donation
still writes a pooled result in place."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp

pytest.importorskip("llvmlite")

from functrans.backends.llvm import output_memory  # noqa: E402

SHAPE = (256, 512)  # 512 KiB of float32: pooled
NBYTES = SHAPE[0] * SHAPE[1] * 4


def _address(a) -> int:
    return np.asarray(a).__array_interface__["data"][0]


@pytest.fixture(autouse=True)
def _empty_pool():
    output_memory.pool.trim(0)
    yield
    output_memory.pool.trim(0)


def test_a_block_is_reused_only_when_every_view_of_its_array_has_died():
    f = functrans.jit(lambda x: x * 2.0 + 1.0)
    x = jnp.ones(SHAPE)
    y = f(x)
    address = _address(y)
    view = np.asarray(y)[3:].T          # holds y's memory after y itself is gone
    del y
    gc.collect()
    assert output_memory.pool.nbytes == 0
    z = f(x * 2.0)                      # must not land on the view's memory
    assert _address(z) != address
    np.testing.assert_array_equal(view, 3.0)
    np.testing.assert_array_equal(np.asarray(z), 5.0)
    del view
    assert output_memory.pool.nbytes == NBYTES
    w = f(x)                            # takes the block back
    assert _address(w) == address and output_memory.pool.nbytes == 0
    np.testing.assert_array_equal(np.asarray(w), 3.0)
    np.testing.assert_array_equal(np.asarray(z), 5.0)


def test_outputs_of_one_call_never_share_a_block():
    f = functrans.jit(lambda x: (x + 1.0, x + 2.0, x + 3.0))
    x = jnp.zeros(SHAPE)
    for _ in range(3):
        outs = f(x)
        assert len({_address(o) for o in outs}) == 3
        for k, o in enumerate(outs):
            np.testing.assert_array_equal(np.asarray(o), k + 1.0)
        del outs, o


def test_small_and_raw_byte_outputs_keep_numpys_allocator():
    small = functrans.jit(lambda x: x + 1.0)(jnp.ones(1000))
    assert np.asarray(small).flags.owndata
    bf16 = functrans.jit(lambda x: (x + 1.0).astype(jnp.bfloat16))(jnp.ones(SHAPE))
    assert np.asarray(bf16).flags.owndata
    assert np.asarray(bf16).dtype == jnp.bfloat16


def test_the_pool_keeps_at_most_half_the_arena_pool_limit():
    functrans.config.update("arena_pool_max_size", 3 * NBYTES)
    f = functrans.jit(lambda x: (x + 1.0, x + 2.0, x + 3.0, x + 4.0))
    outs = f(jnp.ones(SHAPE))
    del outs
    assert output_memory.pool.nbytes == NBYTES  # 1.5 blocks allowed: one kept
    functrans.config.update("arena_pool_max_size", 0)
    assert output_memory.pool.nbytes == 0
    out = f(jnp.ones(SHAPE))[0]                 # a limit of 0: nothing pooled
    assert np.asarray(out).flags.owndata


def test_clear_caches_empties_the_pool():
    out = functrans.jit(lambda x: x + 1.0)(jnp.ones(SHAPE))
    del out
    assert output_memory.pool.nbytes == NBYTES
    functrans.clear_caches()
    assert output_memory.pool.nbytes == 0


def test_a_donated_pooled_result_is_updated_in_place():
    step = functrans.jit(lambda p, g: p - 0.5 * g, donate_argnums=0)
    g = jnp.ones(SHAPE)
    p = step(jnp.zeros(SHAPE), g)
    assert not np.asarray(p).flags.owndata  # on a lease
    for k in range(2, 5):
        address = _address(p)
        new = step(p, g)
        assert p.is_deleted() and _address(new) == address
        np.testing.assert_array_equal(np.asarray(new), -0.5 * k)
        p = new
    held = np.asarray(p)                    # someone else holds it: never written
    new = step(p, g)
    assert p.is_deleted() and _address(new) != held.__array_interface__["data"][0]
    np.testing.assert_array_equal(held, -2.0)
    np.testing.assert_array_equal(np.asarray(new), -2.5)


def test_threads_taking_and_returning_blocks_get_right_results():
    f = functrans.jit(lambda x, c: x * c)
    x = jnp.ones(SHAPE)
    errors = []

    def work(c):
        for _ in range(20):
            out = f(x, np.float32(c))
            if not np.all(np.asarray(out) == c):
                errors.append(c)
            del out

    threads = [threading.Thread(target=work, args=(c,)) for c in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert output_memory.pool.nbytes <= output_memory.pool.limit()


def test_leases_alive_at_interpreter_exit_give_their_blocks_back_quietly():
    script = textwrap.dedent("""
        import numpy as np
        import functrans, functrans.numpy as jnp
        f = functrans.jit(lambda x: (x + 1.0, x * 2.0))
        kept = f(jnp.ones((512, 512)))
        view = np.asarray(kept[0])[1:]

        class Cycle:
            pass

        cycle = Cycle()
        cycle.self, cycle.arrays = cycle, f(jnp.ones((512, 512)))
        print(float(view[0, 0]) + float(cycle.arrays[1][0, 0]))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300, env=dict(os.environ, FUNCTRANS_DEFAULT_BACKEND="cpu"))
    assert result.returncode == 0 and result.stdout.strip() == "4.0", result.stderr
    assert "Exception ignored" not in result.stderr and "Traceback" not in result.stderr
