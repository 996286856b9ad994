"""A small convolutional network on scikit-learn's 8x8 handwritten digits.

    python examples/cnn_digits.py              # train, print test accuracy
    python examples/cnn_digits.py --epochs 5   # shorter

Written as JAX code is (``lax.conv_general_dilated``, max pooling with
``lax.reduce_window``, ``nn`` initializers, an ``optim`` optimizer, one jitted train step
with its state donated). functrans compiles the convolutions into gathered windows and BLAS
matrix products and the pooling into one fused reduction.
"""
from __future__ import annotations

import numpy as np

import functrans
import functrans.numpy as jnp
from functrans import lax, nn, optim, random

DIMENSIONS = ("NHWC", "HWIO", "NHWC")

import training_report


def load_digits(seed: int):
    from sklearn.datasets import load_digits as sk_load_digits
    data = sk_load_digits()
    x = (data.images / 16.0).astype(np.float32)[..., None]   # (n, 8, 8, 1)
    y = data.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    split = int(0.8 * len(x))
    return (x[:split], y[:split]), (x[split:], y[split:])


def init_params(key):
    k1, k2, k3 = random.split(key, 3)
    he = nn.initializers.he_normal()
    return {"conv1": he(k1, (3, 3, 1, 16), jnp.float32), "b1": jnp.zeros(16),
            "conv2": he(k2, (3, 3, 16, 32), jnp.float32), "b2": jnp.zeros(32),
            "dense": he(k3, (2 * 2 * 32, 10), jnp.float32), "b3": jnp.zeros(10)}


def max_pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def predict(params, x):
    x = lax.conv_general_dilated(x, params["conv1"], (1, 1), "SAME",
                                 dimension_numbers=DIMENSIONS)
    x = max_pool(nn.relu(x + params["b1"]))                  # (n, 4, 4, 16)
    x = lax.conv_general_dilated(x, params["conv2"], (1, 1), "SAME",
                                 dimension_numbers=DIMENSIONS)
    x = max_pool(nn.relu(x + params["b2"]))                  # (n, 2, 2, 32)
    return x.reshape(x.shape[0], -1) @ params["dense"] + params["b3"]


def loss_fn(params, x, y):
    logits = predict(params, x)
    return optim.losses.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def main(argv=None) -> float:
    parser = training_report.argument_parser(__doc__)
    parser.add_argument("--epochs", type=int, default=15, help="passes over the training set")
    parser.add_argument("--batch-size", type=int, default=64, help="images per step")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the split, the parameters and the shuffling")
    training_report.add_output_flags(parser, progress=False)
    parser.add_argument("--quiet", action="store_true",
                        help="no line per epoch (the summary is still printed)")
    args = parser.parse_args(argv)

    (x_train, y_train), (x_test, y_test) = load_digits(args.seed)
    key = random.PRNGKey(args.seed)
    params = init_params(key)
    optimizer = optim.adam(3e-3)
    state = optimizer.init(params)

    @functrans.jit
    def evaluate(params, x, y):
        return jnp.mean(jnp.argmax(predict(params, x), axis=-1) == y)

    def train_step(params, state, x, y):
        loss, grads = functrans.value_and_grad(loss_fn)(params, x, y)
        updates, state = optimizer.update(grads, state, params)
        return optim.apply_updates(params, updates), state, loss

    step = functrans.jit(train_step, donate_argnums=(0, 1))
    rng = np.random.default_rng(args.seed)
    batches = len(x_train) // args.batch_size
    # the line printed per epoch shows the progress
    report = training_report.Report(args.epochs, quiet=True, unit="epoch")
    for epoch in range(args.epochs):
        order = rng.permutation(len(x_train))
        losses = []
        for b in range(batches):
            idx = order[b * args.batch_size:(b + 1) * args.batch_size]
            params, state, loss = report.timed(step, params, state, x_train[idx], y_train[idx])
            losses.append(float(loss))
        report.record(np.mean(losses))
        if not args.quiet:
            print(f"epoch {epoch + 1:2d}  loss {np.mean(losses):.4f}")
    accuracy = float(evaluate(params, x_test, y_test))
    print(f"epochs: {args.epochs}  final loss: {np.mean(losses):.4f}  test accuracy: "
          f"{accuracy:.4f}")
    report.unit = "step"  # timed per step, recorded per epoch
    report.summary(test_accuracy=accuracy)
    if args.plot:
        training_report.plot_losses(args.plot, report.losses, "CNN on digits", "epoch")
    return accuracy


if __name__ == "__main__":
    main()
