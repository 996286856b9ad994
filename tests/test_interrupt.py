"""Ctrl-C stops compiled code (see backends/llvm/interrupts.py).

Each scenario runs in a child process that starts a compiled loop with no end in sight
(2**31 - 1 iterations of a chain of multiply-adds, or an outer product of sines split over
the thread pool: minutes of work), sends itself SIGINT half a second in, expects
KeyboardInterrupt, then checks that the process is still usable: the same function, called
again with a short trip count, gives the right answer. The child prints how long the
KeyboardInterrupt took after the signal (the parent prints it; no test asserts a time).
Before this backend polled for interrupts, every scenario ran until the subprocess timeout.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("llvmlite")

_CHILD = textwrap.dedent("""
    import json, os, signal, sys, threading, time
    import numpy as np
    import functrans, functrans.numpy as jnp
    from functrans import lax

    ENDLESS = 2**31 - 1
    report = {}

    def chain(c):
        for _ in range(8):  # dependent multiply-adds: nanoseconds per iteration
            c = c * 0.999 + 0.001
        return c

    def body(i, carry):
        count, c = carry
        return count + 1, chain(c)

    def expected(n, c=0.5):
        c = np.float32(c)
        for _ in range(n):
            for _ in range(8):
                c = np.float32(c * np.float32(0.999) + np.float32(0.001))
        return c

    def check_short(name, out, n):
        count, c = (np.asarray(o) for o in out)
        assert count.tolist() == n, (name, count, n)
        np.testing.assert_allclose(c, expected(n), rtol=1e-6, err_msg=name)

    def interrupt_after(delay):
        sent = {}
        def fire():
            time.sleep(delay)
            sent["at"] = time.perf_counter()
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=fire, daemon=True).start()
        return sent

    def flush_bits():
        from functrans import _float_mode
        return _float_mode.mxcsr() & _float_mode.FLUSH_BITS

    def interrupted(name, call):
        mode = flush_bits()
        sent = interrupt_after(0.5)
        try:
            call()
        except KeyboardInterrupt:
            report[name] = round((time.perf_counter() - sent["at"]) * 1e3, 3)
            # compiled code stopped early still restores the caller's floating-point mode
            assert flush_bits() == mode, (name, mode, flush_bits())
            return sent
        raise AssertionError(f"{name}: the call finished without KeyboardInterrupt")

    x = (np.int32(0), np.float32(0.5))

    def loops():
        fori = functrans.jit(lambda x, n: lax.fori_loop(0, n, body, x))  # a while loop
        check_short("fori", fori(x, 3), 3)
        interrupted("fori", lambda: fori(x, ENDLESS))
        check_short("fori", fori(x, 5), 5)

        def while_(x, limit):
            return lax.while_loop(lambda carry: carry[0] < limit,
                                  lambda carry: body(0, carry), x)
        while_ = functrans.jit(while_)
        check_short("while", while_(x, 2), 2)
        interrupted("while", lambda: while_(x, ENDLESS))
        check_short("while", while_(x, 4), 4)

        def scan(x, length):  # static trip count: a scan
            return lax.fori_loop(0, length, body, x)
        long_scan = functrans.jit(scan, static_argnums=1).lower(x, ENDLESS).compile()
        interrupted("scan", lambda: long_scan(x))
        interrupted("scan again", lambda: long_scan(x))  # the same executable, again
        check_short("scan", functrans.jit(scan, static_argnums=1)(x, 6), 6)

    def sines(a, b):
        s = a[:, None] * b[None, :]
        for _ in range(8):
            s = jnp.sin(s)
        return jnp.sum(s, axis=1)

    def pool():
        rng = np.random.default_rng(0)
        a, b = (rng.standard_normal(1 << 17).astype(np.float32) for _ in range(2))
        huge = functrans.jit(sines).lower(a, b).compile()
        assert "ft_parallel_for" in huge.as_text()
        interrupted("pool", lambda: huge(a, b))
        small = (a[:1024], b[:512])  # 2**19 elements: still split over the pool
        compiled = functrans.jit(sines).lower(*small).compile()
        assert "ft_parallel_for" in compiled.as_text()
        want = np.asarray(small[0], np.float64)[:, None] * small[1][None, :]
        for _ in range(8):
            want = np.sin(want)
        np.testing.assert_allclose(np.asarray(compiled(*small)), want.sum(1), rtol=2e-4,
                                   atol=2e-3)

    def threads():
        fori = functrans.jit(lambda x, n: lax.fori_loop(0, n, body, x))
        check_short("thread", fori(x, 3), 3)
        outcome, finished = {}, threading.Event()

        def work():
            try:
                fori(x, ENDLESS)
                outcome["how"] = "finished"
            except KeyboardInterrupt:
                outcome["how"], outcome["at"] = "interrupted", time.perf_counter()
            finally:
                finished.set()

        threading.Thread(target=work).start()
        # the main thread waits in Python (where Python's handler raises), the worker in
        # compiled code
        sent = interrupted("main thread, waiting", threading.Event().wait)
        assert finished.wait(60) and outcome["how"] == "interrupted", outcome
        report["worker thread"] = round((outcome["at"] - sent["at"]) * 1e3, 3)
        check_short("thread", fori(x, 4), 4)

        mapped = functrans.pmap(lambda x, n: lax.fori_loop(0, n, body, x), in_axes=(0, None))
        xs = (np.zeros(2, np.int32), np.full(2, 0.5, np.float32))
        for out in [np.asarray(o) for o in mapped(xs, 3)]:
            assert out.shape == (2,)
        interrupted("pmap", lambda: mapped(xs, ENDLESS))
        count, c = (np.asarray(o) for o in mapped(xs, 5))
        assert count.tolist() == [5, 5]
        np.testing.assert_allclose(c, [expected(5)] * 2, rtol=1e-6)

    def user_handler():
        fori = functrans.jit(lambda x, n: lax.fori_loop(0, n, body, x))
        check_short("handler", fori(x, 3), 3)
        # the native handler is in place now; Python's view of SIGINT has not changed
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        start = time.perf_counter()
        fori(x, 200_000)
        per_iteration = (time.perf_counter() - start) / 200_000
        n = int(min(1.5 / per_iteration, 2**30))  # about 1.5 s
        seen = []
        signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
        interrupt_after(0.3)
        out = fori(x, n)  # a handler of the user's: the call runs to the end...
        for _ in range(100):  # ... and then the handler runs
            if seen:
                break
            time.sleep(0.01)
        assert seen == [signal.SIGINT], seen
        assert np.asarray(out[0]).tolist() == n
        signal.signal(signal.SIGINT, signal.default_int_handler)
        interrupted("default handler again", lambda: fori(x, ENDLESS))
        check_short("handler", fori(x, 4), 4)
        # an event loop sets a handler of its own for its run, then the default again
        import asyncio
        async def nothing():
            await asyncio.sleep(0.05)
        asyncio.run(nothing())
        interrupted("after an event loop", lambda: fori(x, ENDLESS))

    def donation():
        def scale(p, n):
            return p * lax.fori_loop(0, n, body, x)[1]  # written into p's buffer
        f = functrans.jit(scale, donate_argnums=0)
        np.testing.assert_allclose(f(jnp.ones(256), 3), np.full(256, expected(3)), rtol=1e-6)
        for how, call in (("donated", lambda p: f(p, ENDLESS)),
                          ("donated, keyword", lambda p: f(p, n=ENDLESS))):
            p = jnp.ones(256)
            interrupted(how, lambda: call(p))
            # consumed, as by a call that finished: its buffer may hold part of a result
            assert p.is_deleted(), how
        np.testing.assert_allclose(f(jnp.ones(256), 4), np.full(256, expected(4)), rtol=1e-6)

    {"loops": loops, "pool": pool, "threads": threads, "user_handler": user_handler,
     "donation": donation}[sys.argv[1]]()
    print(json.dumps(report))
""")


@pytest.mark.parametrize("scenario", ["loops", "pool", "threads", "user_handler", "donation"])
def test_ctrl_c_stops_compiled_code(scenario, tmp_path):
    env = dict(os.environ, FUNCTRANS_CACHE_DIR=str(tmp_path), FUNCTRANS_NUM_THREADS="2",
               FUNCTRANS_CPU_DEVICES="2", FUNCTRANS_DEFAULT_BACKEND="cpu")
    try:
        result = subprocess.run([sys.executable, "-c", _CHILD, scenario], env=env,
                                capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{scenario}: SIGINT did not stop the compiled code")
    assert result.returncode == 0, result.stderr[-3000:]
    latencies = json.loads(result.stdout.strip().splitlines()[-1])
    print(f"{scenario}: KeyboardInterrupt this many ms after SIGINT: {latencies}")
    assert latencies  # every interrupted call is in the report


def test_thread_pool_drops_the_rest_of_an_interrupted_job():
    """Once the SIGINT counter moves during a job, no thread claims another chunk of it; the
    call returns when the chunks already running have finished, and the next job runs
    whole. (The chunk function here does not poll, as generated ones do: only the pool
    stops it.)"""
    from functrans.backends.llvm import interrupts, thread_pool
    thread_pool.ensure_started()
    if thread_pool.workers() == 0:
        pytest.skip("one CPU: the pool runs jobs on the calling thread")
    words = interrupts._state["words"]
    ran = []

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
    def chunk(ctx, index):
        if not ran:
            words[0] += 1  # the first chunk to run moves the counter, as a SIGINT would
        ran.append(index)

    parallel_for = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        thread_pool._state["address"])
    parallel_for(ctypes.cast(chunk, ctypes.c_void_p), None, 1000)
    # besides the first, only chunks other threads had claimed before the counter moved
    assert 1 <= len(ran) < 10, sorted(ran)
    ran.clear()

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
    def plain(ctx, index):
        ran.append(index)

    parallel_for(ctypes.cast(plain, ctypes.c_void_p), None, 1000)
    assert sorted(ran) == list(range(1000))
    # a job run on the calling thread alone (the pool held, or paused on a busy machine)
    # stops at the next chunk too
    ran.clear()
    with thread_pool.reserved() as held:
        parallel_for(ctypes.cast(chunk, ctypes.c_void_p), None, 1000)
    assert held and ran == [0]
