"""Train an MLP on scikit-learn's handwritten digits with jit(value_and_grad) and adam.

    python examples/mlp_digits.py                 # train, print test accuracy
    python examples/mlp_digits.py --plot loss.png # also plot the loss curve
    python examples/mlp_digits.py --resume        # continue from the last checkpoint

Checkpoints (params, optimizer state, PRNG key, step) go to --ckpt-dir after every epoch, so
``--resume`` continues exactly where an interrupted run stopped.
"""
from __future__ import annotations

import os

import numpy as np

import functrans
import functrans.numpy as jnp
from functrans import checkpoint, nn, optim, random

import training_report


def load_digits(seed: int):
    from sklearn.datasets import load_digits as sk_load_digits
    data = sk_load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    split = int(0.8 * len(x))
    return (x[:split], y[:split]), (x[split:], y[split:])


def init_params(key, sizes):
    params = []
    keys = random.split(key, len(sizes) - 1)
    for k, (n_in, n_out) in zip(keys, zip(sizes[:-1], sizes[1:])):
        w = nn.initializers.he_normal()(k, (n_in, n_out), jnp.float32)
        params.append({"w": w, "b": jnp.zeros((n_out,), jnp.float32)})
    return params


def predict(params, x):
    for layer in params[:-1]:
        x = nn.relu(x @ layer["w"] + layer["b"])
    last = params[-1]
    return x @ last["w"] + last["b"]


def loss_fn(params, x, y):
    logits = predict(params, x)
    one_hot = nn.one_hot(y, logits.shape[-1])
    return -jnp.mean(jnp.sum(one_hot * nn.log_softmax(logits), axis=-1))


def accuracy(params, x, y) -> float:
    return float(jnp.mean(jnp.argmax(predict(params, x), axis=-1) == y))


def main(argv=None) -> float:
    parser = training_report.argument_parser(__doc__)
    parser.add_argument("--epochs", type=int, default=30, help="passes over the training set")
    parser.add_argument("--batch-size", type=int, default=64, help="examples per step")
    parser.add_argument("--hidden", type=int, default=128, help="width of the two hidden layers")
    parser.add_argument("--lr", type=float, default=3e-3, help="adam learning rate")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the split, the parameters and the shuffling")
    parser.add_argument("--ckpt-dir", default=os.path.join("checkpoints", "mlp_digits"),
                        help="where a checkpoint is saved after every epoch")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the last checkpoint in --ckpt-dir")
    parser.add_argument("--stop-after", type=int, default=None,
                        help="stop after this many epochs (to try --resume)")
    training_report.add_output_flags(parser)
    args = parser.parse_args(argv)

    (x_train, y_train), (x_test, y_test) = load_digits(args.seed)
    optimizer = optim.adam(args.lr)
    key = random.PRNGKey(args.seed)
    key, init_key = random.split(key)
    params = init_params(init_key, [64, args.hidden, args.hidden, 10])
    opt_state = optimizer.init(params)
    start_epoch, losses = 0, []
    manager = checkpoint.CheckpointManager(args.ckpt_dir, max_to_keep=3)
    if args.resume and manager.latest_step() is not None:
        start_epoch = manager.latest_step()
        target = {"params": params, "opt_state": opt_state, "key": key,
                  "losses": jnp.zeros((start_epoch,), jnp.float32)}
        state = manager.restore(start_epoch, target=target)
        params, opt_state, key = state["params"], state["opt_state"], state["key"]
        losses = [float(v) for v in np.asarray(state["losses"])]
        print(f"resumed from epoch {start_epoch}")

    @functrans.jit
    def train_step(params, opt_state, x, y):
        loss, grads = functrans.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optim.apply_updates(params, updates), opt_state, loss

    steps_per_epoch = len(x_train) // args.batch_size
    end_epoch = args.epochs if args.stop_after is None else min(args.epochs, start_epoch + args.stop_after)
    report = training_report.Report(end_epoch - start_epoch, quiet=args.quiet, unit="epoch")
    for epoch in range(start_epoch, end_epoch):
        key, shuffle_key = random.split(key)
        order = np.asarray(random.permutation(shuffle_key, len(x_train)))
        epoch_loss = 0.0
        for i in range(steps_per_epoch):
            idx = order[i * args.batch_size:(i + 1) * args.batch_size]
            params, opt_state, loss = report.timed(train_step, params, opt_state,
                                                   x_train[idx], y_train[idx])
            epoch_loss += float(loss)
        losses.append(epoch_loss / steps_per_epoch)
        report.record(losses[-1])
        manager.save(epoch + 1, {"params": params, "opt_state": opt_state, "key": key,
                                 "losses": jnp.asarray(np.array(losses, np.float32))})

    acc = accuracy(params, x_test, y_test)
    print(f"epochs: {end_epoch}  final loss: {losses[-1]:.4f}  test accuracy: {acc:.4f}")
    report.unit = "step"  # timed per step, recorded per epoch
    report.summary(test_accuracy=acc)
    if args.plot:
        training_report.plot_losses(args.plot, losses, "MLP on digits", "epoch")
    return acc


if __name__ == "__main__":
    main()
