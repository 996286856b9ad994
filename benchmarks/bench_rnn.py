"""Scan RNN: forward + backward time of functrans against hand-written NumPy BPTT.

    python benchmarks/bench_rnn.py                 # hidden 256, input 64, seq 100, batch 32
    python benchmarks/bench_rnn.py --seq-len 200 --repeats 10

functrans runs ``jit(value_and_grad(loss))`` where the recurrence is one ``lax.scan``
(reverse mode comes from partial evaluation + transposition of the scan); NumPy runs the
same network with backpropagation through time written out by hand. Both compute the loss
and the gradients of all parameters; the gradients are checked to agree before timing.
Prints a table of median times and the ratio functrans / NumPy.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import functrans
import functrans.numpy as jnp
from functrans import lax


def init_params(rng, n_in, n_hidden):
    return {
        "wx": rng.normal(0, 1 / np.sqrt(n_in), (n_in, n_hidden)).astype(np.float32),
        "wh": (0.5 / np.sqrt(n_hidden) * rng.normal(0, 1, (n_hidden, n_hidden))).astype(np.float32),
        "b": np.zeros(n_hidden, np.float32),
        "wo": rng.normal(0, 1 / np.sqrt(n_hidden), (n_hidden, 1)).astype(np.float32),
        "bo": np.zeros(1, np.float32),
    }


# ---- functrans -------------------------------------------------------------------------------

def functrans_loss(params, xs, targets):
    h0 = jnp.zeros((xs.shape[1], params["wh"].shape[0]), jnp.float32)

    def step(h, x):
        return jnp.tanh(lax.dot(x, params["wx"]) + lax.dot(h, params["wh"]) + params["b"]), None

    h, _ = lax.scan(step, h0, xs)
    err = lax.reshape(lax.dot(h, params["wo"]) + params["bo"], targets.shape) - targets
    return jnp.sum(err * err) / err.shape[0]


functrans_forward = functrans.jit(functrans_loss)
functrans_forward_backward = functrans.jit(functrans.value_and_grad(functrans_loss))


# ---- NumPy, backpropagation through time by hand -----------------------------------------------

def numpy_forward(params, xs, targets, keep=False):
    h = np.zeros((xs.shape[1], params["wh"].shape[0]), np.float32)
    hs = [h]
    for x in xs:
        h = np.tanh(x @ params["wx"] + h @ params["wh"] + params["b"])
        if keep:
            hs.append(h)
    err = (h @ params["wo"] + params["bo"]).reshape(targets.shape) - targets
    loss = np.sum(err * err) / err.shape[0]
    return (loss, hs, err) if keep else loss


def numpy_forward_backward(params, xs, targets):
    loss, hs, err = numpy_forward(params, xs, targets, keep=True)
    d_out = (2.0 / err.shape[0]) * err[:, None]
    grads = {"wo": hs[-1].T @ d_out, "bo": d_out.sum(axis=0)}
    dh = d_out @ params["wo"].T
    gwx, gwh, gb = (np.zeros_like(params[k]) for k in ("wx", "wh", "b"))
    for t in range(len(xs) - 1, -1, -1):
        da = dh * (1.0 - hs[t + 1] ** 2)
        gwx += xs[t].T @ da
        gwh += hs[t].T @ da
        gb += da.sum(axis=0)
        dh = da @ params["wh"].T
    grads.update(wx=gwx, wh=gwh, b=gb)
    return loss, grads


def _median_ms(fn, repeats: int) -> float:
    fn()  # warm up: tracing and compilation are not measured
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _block(out):
    return functrans.block_until_ready(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--inputs", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    params = init_params(rng, args.inputs, args.hidden)
    xs = rng.normal(0, 1, (args.seq_len, args.batch, args.inputs)).astype(np.float32)
    targets = rng.normal(0, 1, args.batch).astype(np.float32)
    ft_params = {k: jnp.asarray(v) for k, v in params.items()}
    ft_xs, ft_targets = jnp.asarray(xs), jnp.asarray(targets)

    # The two implementations must agree before their speed means anything.
    loss, grads = functrans_forward_backward(ft_params, ft_xs, ft_targets)
    np_loss, np_grads = numpy_forward_backward(params, xs, targets)
    np.testing.assert_allclose(float(loss), np_loss, rtol=1e-4)
    for k in params:
        np.testing.assert_allclose(np.asarray(grads[k]), np_grads[k], rtol=2e-3, atol=1e-5,
                                   err_msg=f"gradient of {k}")

    rows = [
        ("forward", _median_ms(lambda: _block(functrans_forward(ft_params, ft_xs, ft_targets)), args.repeats),
         _median_ms(lambda: numpy_forward(params, xs, targets), args.repeats)),
        ("forward+backward",
         _median_ms(lambda: _block(functrans_forward_backward(ft_params, ft_xs, ft_targets)), args.repeats),
         _median_ms(lambda: numpy_forward_backward(params, xs, targets), args.repeats)),
    ]
    backend = functrans._backends.get_backend().name
    print(f"scan RNN: hidden {args.hidden}, input {args.inputs}, sequence {args.seq_len}, "
          f"batch {args.batch}; functrans backend: {backend}; median of {args.repeats}")
    print(f"{'workload':<18} {'functrans ms':>13} {'numpy ms':>10} {'ratio':>7}")
    for name, ft_ms, np_ms in rows:
        print(f"{name:<18} {ft_ms:>13.2f} {np_ms:>10.2f} {ft_ms / np_ms:>6.2f}x")
    return rows


if __name__ == "__main__":
    main()
