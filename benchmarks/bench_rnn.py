"""Scan RNN: forward + backward of functrans against hand-written NumPy BPTT (and JAX, PyTorch).

    python -m benchmarks --only rnn                    # in the suite's table
    python -m benchmarks.bench_rnn                     # this table: forward and forward+backward
    python -m benchmarks.bench_rnn --seq-len 200 --repeats 10
    python -m benchmarks.bench_rnn --ieee              # and functrans without flushing subnormals

functrans (and JAX, from the same source) runs ``jit(value_and_grad(loss))`` where the
recurrence is one ``lax.scan`` (reverse mode comes from partial evaluation + transposition
of the scan); NumPy runs the same network with backpropagation through time written out by
hand; PyTorch runs a Python loop under ``torch.func.grad_and_value``. All compute the loss
and the gradients of all parameters, and are checked to agree before timing.
"""
from __future__ import annotations

import argparse

import numpy as np

from benchmarks import frameworks
from benchmarks.harness import Options, Row, compare


def init_params(rng, n_in, n_hidden):
    return {
        "wx": rng.normal(0, 1 / np.sqrt(n_in), (n_in, n_hidden)).astype(np.float32),
        "wh": (0.5 / np.sqrt(n_hidden) * rng.normal(0, 1, (n_hidden, n_hidden))).astype(np.float32),
        "b": np.zeros(n_hidden, np.float32),
        "wo": rng.normal(0, 1 / np.sqrt(n_hidden), (n_hidden, 1)).astype(np.float32),
        "bo": np.zeros(1, np.float32),
    }


def make_data(hidden=256, inputs=64, seq_len=100, batch=32, seed=0):
    rng = np.random.default_rng(seed)
    params = init_params(rng, inputs, hidden)
    xs = rng.normal(0, 1, (seq_len, batch, inputs)).astype(np.float32)
    targets = rng.normal(0, 1, batch).astype(np.float32)
    return params, xs, targets


# ---- functrans and JAX: one source ------------------------------------------------------------

def make_rnn_loss(lib):
    """The RNN's loss written against ``lib`` (functrans or jax): one ``lax.scan``."""
    jnp, lax = lib.numpy, lib.lax

    def loss(params, xs, targets):
        h0 = jnp.zeros((xs.shape[1], params["wh"].shape[0]), jnp.float32)

        def step(h, x):
            return jnp.tanh(jnp.dot(x, params["wx"]) + jnp.dot(h, params["wh"]) + params["b"]), None

        h, _ = lax.scan(step, h0, xs)
        err = jnp.reshape(jnp.dot(h, params["wo"]) + params["bo"], targets.shape) - targets
        return jnp.sum(err * err) / err.shape[0]

    return loss


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


# ---- PyTorch ----------------------------------------------------------------------------------

def make_torch_loss(torch):
    def loss(params, xs, targets):
        h = torch.zeros((xs.shape[1], params["wh"].shape[0]))
        for x in xs:
            h = torch.tanh(x @ params["wx"] + h @ params["wh"] + params["b"])
        err = (h @ params["wo"] + params["bo"]).reshape(targets.shape) - targets
        return (err * err).sum() / err.shape[0]
    return loss


# ---- implementations --------------------------------------------------------------------------

def implementations(options: Options, params, xs, targets, backward: bool = True,
                    ieee: bool = False) -> dict:
    """Zero-argument callables returning (loss, grads) (or the loss, ``backward=False``).
    ``ieee``: also ``ft-ieee``, functrans compiled with the option ``flush_denormals`` off
    (subnormal floats computed as IEEE arithmetic says, as before that option existed)."""
    impls = {}
    if ieee and "functrans" in options.available:
        ft = frameworks.load("functrans")
        fn = ft.jit(ft.value_and_grad(make_rnn_loss(ft)) if backward else make_rnn_loss(ft))
        args = ft.tree_util.tree_map(ft.numpy.asarray, (params, xs, targets))
        ft.config.update("flush_denormals", False)
        try:  # compiled now: the executable keeps the code of its option
            compiled = fn.lower(*args).compile()
        finally:
            ft.config.update("flush_denormals", True)
        impls["ft-ieee"] = lambda: ft.block_until_ready(compiled(*args))
    for name in ("functrans", "jax"):
        lib = frameworks.load(name) if name in options.available else None
        if lib is None:
            continue
        loss = make_rnn_loss(lib)
        fn = lib.jit(lib.value_and_grad(loss) if backward else loss)
        args = lib.tree_util.tree_map(lib.numpy.asarray, (params, xs, targets))
        impls[name] = (lambda fn=fn, args=args, lib=lib: lib.block_until_ready(fn(*args)))
    impls["numpy"] = ((lambda: numpy_forward_backward(params, xs, targets)) if backward
                      else (lambda: numpy_forward(params, xs, targets)))
    if "torch" in options.available:
        torch = frameworks.load("torch")
        tloss = make_torch_loss(torch)
        targs = ({k: torch.from_numpy(v) for k, v in params.items()},
                 torch.from_numpy(xs), torch.from_numpy(targets))
        if backward:
            grad_and_value = torch.func.grad_and_value(tloss)

            def run_torch():
                grads, value = grad_and_value(*targs)
                return value, grads
            impls["torch"] = run_torch
        else:
            impls["torch"] = lambda: tloss(*targs)
    return impls


def rnn(options: Options) -> list[Row]:
    """The suite's row: forward + backward of the scan RNN."""
    shape = dict(hidden=256, inputs=64, seq_len=20 if options.quick else 100, batch=32)
    params, xs, targets = make_data(**shape)
    title = (f"scan RNN fwd+bwd, h{shape['hidden']} in{shape['inputs']} "
             f"seq{shape['seq_len']} b{shape['batch']}")
    return [compare("rnn", title, implementations(options, params, xs, targets), options,
                    tol=2e-3)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--inputs", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ieee", action="store_true",
                        help="add ft-ieee: functrans without flushing subnormals to zero")
    args = parser.parse_args(argv)
    options = Options(repeats=args.repeats, min_time=0.0, available=frameworks.available())
    params, xs, targets = make_data(args.hidden, args.inputs, args.seq_len, args.batch)
    rows = [compare("rnn_forward", "forward",
                    implementations(options, params, xs, targets, backward=False,
                                    ieee=args.ieee), options, tol=1e-4),
            compare("rnn", "forward+backward",
                    implementations(options, params, xs, targets, ieee=args.ieee), options,
                    tol=2e-3)]
    impls = [i for i in ("ft-ieee",) + options.available if any(r.times.get(i) for r in rows)]
    print(f"scan RNN: hidden {args.hidden}, input {args.inputs}, sequence {args.seq_len}, "
          f"batch {args.batch}; median ms of {args.repeats}")
    print(f"{'workload':<18}" + "".join(f"{i:>11}" for i in impls) + f"{'ft/numpy':>10}")
    for row in rows:
        cells = "".join(f"{1e3 * row.times[i]:>11.2f}" if row.times.get(i) else f"{'-':>11}"
                        for i in impls)
        print(f"{row.title:<18}{cells}{row.times['functrans'] / row.times['numpy']:>9.2f}x")
    return rows


if __name__ == "__main__":
    main()
