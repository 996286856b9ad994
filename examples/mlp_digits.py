"""Train an MLP on scikit-learn's handwritten digits with jit(value_and_grad) and adam.

    python examples/mlp_digits.py                 # train, print test accuracy
    python examples/mlp_digits.py --plot loss.png # also plot the loss curve
    python examples/mlp_digits.py --resume        # continue from the last checkpoint

Checkpoints (params, optimizer state, PRNG key, step) go to --ckpt-dir after every epoch, so
``--resume`` continues exactly where an interrupted run stopped.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import functrans
import functrans.numpy as jnp
from functrans import checkpoint, nn, optim, random


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ckpt-dir", default=os.path.join("checkpoints", "mlp_digits"))
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.add_argument("--stop-after", type=int, default=None,
                        help="stop after this many epochs (to test --resume)")
    parser.add_argument("--plot", default=None, help="save the loss curve to this PNG file")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
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
    progress = _progress(range(start_epoch, end_epoch), args.quiet)
    for epoch in progress:
        key, shuffle_key = random.split(key)
        order = np.asarray(random.permutation(shuffle_key, len(x_train)))
        epoch_loss = 0.0
        for i in range(steps_per_epoch):
            idx = order[i * args.batch_size:(i + 1) * args.batch_size]
            params, opt_state, loss = train_step(params, opt_state, x_train[idx], y_train[idx])
            epoch_loss += float(loss)
        losses.append(epoch_loss / steps_per_epoch)
        if hasattr(progress, "set_postfix"):
            progress.set_postfix(loss=f"{losses[-1]:.4f}")
        manager.save(epoch + 1, {"params": params, "opt_state": opt_state, "key": key,
                                 "losses": jnp.asarray(np.array(losses, np.float32))})

    acc = accuracy(params, x_test, y_test)
    print(f"epochs: {end_epoch}  final loss: {losses[-1]:.4f}  test accuracy: {acc:.4f}")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        plt.plot(np.arange(1, len(losses) + 1), losses)
        plt.xlabel("epoch")
        plt.ylabel("training loss")
        plt.title("MLP on digits")
        plt.savefig(args.plot, dpi=100)
        print(f"loss curve saved to {args.plot}")
    return acc


def _progress(iterable, quiet):
    if quiet:
        return iterable
    try:
        from tqdm import tqdm
    except ImportError:
        return iterable
    return tqdm(iterable, desc="training", unit="epoch", file=sys.stdout)


if __name__ == "__main__":
    main()
