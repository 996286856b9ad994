"""Train a recurrent network whose time loop is one ``lax.scan``, with jit(value_and_grad).

    python examples/rnn_scan.py              # a few SGD steps, printing the loss
    python examples/rnn_scan.py --steps 50   # train longer

The RNN reads a sequence of 100 input vectors (64 features, batch 32) into a hidden state of
256 units, ``h = tanh(x_t Wx + h Wh + b)``, and predicts a scalar from the last state. The
task: the mean over time of each sequence's first input feature, so the network must carry
information through the whole sequence. The recurrence is staged once as a scan (one loop
body, whatever the sequence length) and differentiated through it in reverse mode.
"""
from __future__ import annotations

import numpy as np

import functrans
import functrans.numpy as jnp
from functrans import lax

import training_report


def init_params(rng: np.random.Generator, n_in: int, n_hidden: int) -> dict:
    scale_in, scale_h = 1.0 / np.sqrt(n_in), 1.0 / np.sqrt(n_hidden)
    return {
        "wx": jnp.asarray(rng.normal(0, scale_in, (n_in, n_hidden)).astype(np.float32)),
        # a recurrent matrix with spectral radius below 1 keeps the state stable
        "wh": jnp.asarray((0.5 * scale_h * rng.normal(0, 1, (n_hidden, n_hidden))).astype(np.float32)),
        "b": jnp.zeros((n_hidden,), jnp.float32),
        "wo": jnp.asarray(rng.normal(0, scale_h, (n_hidden, 1)).astype(np.float32)),
        "bo": jnp.zeros((1,), jnp.float32),
    }


def rnn_final_state(params, xs):
    """Run the RNN over ``xs`` (time, batch, features); return the last hidden state."""
    batch = xs.shape[1]
    h0 = jnp.zeros((batch, params["wh"].shape[0]), jnp.float32)

    def step(h, x):
        h = jnp.tanh(lax.dot(x, params["wx"]) + lax.dot(h, params["wh"]) + params["b"])
        return h, None

    h, _ = lax.scan(step, h0, xs)
    return h


def loss_fn(params, xs, targets):
    prediction = lax.dot(rnn_final_state(params, xs), params["wo"]) + params["bo"]
    err = lax.reshape(prediction, targets.shape) - targets
    return jnp.sum(err * err) / err.shape[0]


def make_data(rng: np.random.Generator, seq_len: int, batch: int, n_in: int):
    xs = rng.normal(0, 1, (seq_len, batch, n_in)).astype(np.float32)
    targets = xs[:, :, 0].mean(axis=0) * np.sqrt(seq_len)  # unit variance
    return jnp.asarray(xs), jnp.asarray(targets.astype(np.float32))


def main(argv=None) -> list[float]:
    parser = training_report.argument_parser(__doc__)
    parser.add_argument("--steps", type=int, default=8, help="SGD steps")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    parser.add_argument("--hidden", type=int, default=256, help="units of the hidden state")
    parser.add_argument("--inputs", type=int, default=64, help="features of each input vector")
    parser.add_argument("--seq-len", type=int, default=100,
                        help="time steps of each sequence (iterations of the scan)")
    parser.add_argument("--batch", type=int, default=32, help="sequences per batch")
    parser.add_argument("--seed", type=int, default=0, help="seed of the parameters and data")
    training_report.add_output_flags(parser, progress=False)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    params = init_params(rng, args.inputs, args.hidden)
    xs, targets = make_data(rng, args.seq_len, args.batch, args.inputs)
    lr = args.lr

    @functrans.jit
    def train_step(params, xs, targets):
        loss, grads = functrans.value_and_grad(loss_fn)(params, xs, targets)
        # plain SGD, written out: every leaf moves against its gradient
        new_params = functrans.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
        return new_params, loss

    report = training_report.Report(args.steps, quiet=True)  # a line per step shows progress
    for step in range(args.steps):
        params, loss = report.timed(train_step, params, xs, targets)
        report.record(loss)
        print(f"step {step:3d}  loss {report.losses[-1]:.4f}")
    losses = report.losses
    print(f"loss: {losses[0]:.4f} -> {losses[-1]:.4f}")
    report.summary()
    report.plot(args.plot, title=f"RNN over lax.scan ({args.seq_len} time steps)")
    return losses


if __name__ == "__main__":
    main()
