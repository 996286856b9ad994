"""Differentially-private SGD on the digits data: per-example gradients with vmap(grad).

Each step computes the gradient of every example separately (one batched program, no Python
loop over examples), clips each to an L2 norm of at most --clip, averages, adds Gaussian
noise scaled by --noise * --clip, and applies the update.

    python examples/per_example_grads.py --steps 200
"""
from __future__ import annotations

import numpy as np

import functrans
import functrans.numpy as jnp
from functrans import nn, optim, random, tree_util

import training_report


def init_params(key, sizes):
    keys = random.split(key, len(sizes) - 1)
    return [{"w": nn.initializers.glorot_normal()(k, (m, n), jnp.float32),
             "b": jnp.zeros((n,), jnp.float32)} for k, (m, n) in zip(keys, zip(sizes[:-1], sizes[1:]))]


def predict(params, x):
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def example_loss(params, x, y):
    """Cross-entropy of one example (x: features, y: integer label)."""
    logits = predict(params, x)
    return -jnp.sum(nn.one_hot(y, logits.shape[-1]) * nn.log_softmax(logits))


def clipped_mean(per_example_grads, clip: float):
    """Clip each example's gradient to L2 norm <= clip, then average over examples."""
    leaves = tree_util.tree_leaves(per_example_grads)
    norms = jnp.sqrt(sum(jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in leaves))
    scale = jnp.minimum(1.0, clip / (norms + 1e-12))
    return tree_util.tree_map(
        lambda g: jnp.mean(g * scale.reshape((-1,) + (1,) * (g.ndim - 1)), axis=0),
        per_example_grads)


def make_step(optimizer, clip: float, noise: float):
    per_example = functrans.vmap(functrans.grad(example_loss), in_axes=(None, 0, 0))

    @functrans.jit
    def step(params, opt_state, key, x, y):
        grads = clipped_mean(per_example(params, x, y), clip)
        leaves, tree = tree_util.tree_flatten(grads)
        keys = random.split(key, len(leaves))
        noisy = [g + (noise * clip / x.shape[0]) * random.normal(k, g.shape, g.dtype)
                 for g, k in zip(leaves, keys)]
        updates, opt_state = optimizer.update(tree_util.tree_unflatten(tree, noisy), opt_state, params)
        # the (noise-free) batch loss, to show progress
        loss = jnp.mean(functrans.vmap(example_loss, in_axes=(None, 0, 0))(params, x, y))
        return optim.apply_updates(params, updates), opt_state, loss

    return step


def main(argv=None) -> float:
    parser = training_report.argument_parser(__doc__)
    parser.add_argument("--steps", type=int, default=300, help="DP-SGD steps")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="examples per step (each gets its own gradient)")
    parser.add_argument("--clip", type=float, default=1.0,
                        help="largest L2 norm of one example's gradient")
    parser.add_argument("--noise", type=float, default=0.5,
                        help="noise multiplier: the Gaussian noise's deviation is this times "
                             "--clip")
    parser.add_argument("--lr", type=float, default=0.5, help="SGD learning rate")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the parameters, the batches and the noise")
    training_report.add_output_flags(parser)
    args = parser.parse_args(argv)

    from sklearn.datasets import load_digits
    data = load_digits()
    x_all = (data.data / 16.0).astype(np.float32)
    y_all = data.target.astype(np.int32)
    order = np.random.default_rng(args.seed).permutation(len(x_all))
    x_all, y_all = x_all[order], y_all[order]
    split = int(0.8 * len(x_all))
    x_train, y_train, x_test, y_test = x_all[:split], y_all[:split], x_all[split:], y_all[split:]

    key = random.PRNGKey(args.seed)
    key, init_key = random.split(key)
    params = init_params(init_key, [64, 64, 10])
    optimizer = optim.sgd(args.lr)
    opt_state = optimizer.init(params)
    step = make_step(optimizer, args.clip, args.noise)
    rng = np.random.default_rng(args.seed)
    report = training_report.Report(args.steps, quiet=args.quiet)
    for _ in range(args.steps):
        idx = rng.choice(len(x_train), args.batch_size, replace=False)
        key, step_key = random.split(key)
        params, opt_state, loss = report.timed(step, params, opt_state, step_key,
                                               x_train[idx], y_train[idx])
        report.record(loss)
    acc = float(jnp.mean(jnp.argmax(predict(params, x_test), axis=-1) == y_test))
    print(f"DP-SGD: {args.steps} steps, clip {args.clip}, noise multiplier {args.noise}, "
          f"test accuracy {acc:.4f}")
    report.summary(test_accuracy=acc)
    report.plot(args.plot, title="DP-SGD on digits (per-example gradients)")
    return acc


if __name__ == "__main__":
    main()
