"""Data-parallel training of a small MLP with pmap: parameters replicated on every device,
each device takes its slice of the batch, gradients are averaged with ``pmean``.

    python examples/data_parallel_mlp.py                              # 4 CPU devices
    python examples/data_parallel_mlp.py --devices 8                  # 8 CPU devices
    FUNCTRANS_CPU_DEVICES=2 mpiexec -n 2 python examples/data_parallel_mlp.py   # 2 x 2 devices
    python examples/data_parallel_mlp.py --single                     # no pmap, for comparison

Every run sees the same global batches (a regression task made up by a fixed "teacher"
network), so all of them print the same loss curve up to float32 rounding.
"""
from __future__ import annotations


import numpy as np

import functrans
import functrans.numpy as jnp
from functrans import lax, tree_util

import training_report


def init_params(seed: int, sizes):
    rng = np.random.default_rng(seed)
    return [{"w": (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32),
             "b": np.zeros(n, np.float32)} for m, n in zip(sizes[:-1], sizes[1:])]


def predict(params, x):
    for layer in params[:-1]:
        x = lax.tanh(lax.dot(x, layer["w"]) + layer["b"])
    return lax.dot(x, params[-1]["w"]) + params[-1]["b"]


def loss_fn(params, x, y):
    """Mean squared error over the examples given."""
    err = predict(params, x) - y
    return jnp.sum(err * err) / (x.shape[0] * y.shape[1])


def sgd(params, grads, lr):
    return tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


def batches(seed: int, steps: int, batch: int, sizes):
    """The same global batches in every process: inputs and a teacher network's outputs."""
    rng = np.random.default_rng(seed)
    teacher = init_params(seed + 1, sizes)
    for _ in range(steps):
        x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
        h = x
        for layer in teacher[:-1]:
            h = np.tanh(h @ (2.0 * layer["w"]))
        y = (h @ teacher[-1]["w"]).astype(np.float32)
        yield x, y


def train_data_parallel(args, sizes, report) -> list[float]:
    n_local = functrans.local_device_count()
    n_global = functrans.device_count()
    if args.batch % n_global:
        raise SystemExit(f"--batch {args.batch} must be divisible by the {n_global} devices "
                         f"(try --batch {args.batch - args.batch % n_global or n_global})")
    per_device = args.batch // n_global
    first = functrans.distributed.process_index() * n_local * per_device

    def step(params, x, y):
        loss, grads = functrans.value_and_grad(loss_fn)(params, x, y)
        # Each device holds the gradient of its slice's mean loss; their mean over devices
        # is the gradient of the global batch's mean loss.
        grads = lax.pmean(grads, "batch")
        return sgd(params, grads, args.lr), lax.pmean(loss, "batch")

    train_step = functrans.pmap(step, axis_name="batch")
    params = functrans.device_put_replicated(init_params(args.seed, sizes), functrans.local_devices())
    losses = []
    for x, y in batches(args.seed, args.steps, args.batch, sizes):
        # This process's devices take consecutive slices of the global batch.
        mine = slice(first, first + n_local * per_device)
        xs = x[mine].reshape(n_local, per_device, -1)
        ys = y[mine].reshape(n_local, per_device, -1)
        params, loss = report.timed(train_step, params, xs, ys)
        losses.append(float(np.asarray(loss)[0]))
        report.record(losses[-1])
    return losses


def train_single(args, sizes, report) -> list[float]:
    @functrans.jit
    def step(params, x, y):
        loss, grads = functrans.value_and_grad(loss_fn)(params, x, y)
        return sgd(params, grads, args.lr), loss

    params = init_params(args.seed, sizes)
    losses = []
    for x, y in batches(args.seed, args.steps, args.batch, sizes):
        params, loss = report.timed(step, params, x, y)
        losses.append(float(loss))
        report.record(losses[-1])
    return losses


def main(argv=None) -> list[float]:
    parser = training_report.argument_parser(__doc__)
    parser.add_argument("--steps", type=int, default=30, help="training steps")
    parser.add_argument("--batch", type=int, default=64,
                        help="global batch size, split evenly over the devices")
    parser.add_argument("--hidden", type=int, default=32, help="width of the two hidden layers")
    parser.add_argument("--lr", type=float, default=0.1, help="SGD learning rate")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the parameters and of the made-up data")
    parser.add_argument("--single", action="store_true",
                        help="train on one device without pmap, for comparison")
    parser.add_argument("--print-every", type=int, default=1,
                        help="print the loss every this many steps")
    training_report.add_devices_flag(parser)
    training_report.add_output_flags(parser)
    args = parser.parse_args(argv)
    training_report.use_cpu_devices(args.devices)
    sizes = [8, args.hidden, args.hidden, 2]

    if training_report.launched_by_mpi() and not functrans.distributed.is_initialized():
        functrans.distributed.initialize()
    rank = functrans.distributed.process_index()
    nproc = functrans.distributed.process_count()
    tag = f"[rank {rank}] " if nproc > 1 else ""
    if args.single:
        where = "1 device, no pmap"
    else:
        where = (f"{functrans.device_count()} devices in {nproc} process(es), "
                 f"{functrans.local_device_count()} here")
        if functrans.device_count() == 1:
            where += " (pass --devices 4 or set FUNCTRANS_CPU_DEVICES=4 for more)"
    print(f"{tag}training on {where}")
    report = training_report.Report(args.steps, quiet=args.quiet or rank > 0)
    losses = (train_single if args.single else train_data_parallel)(args, sizes, report)
    for i, loss in enumerate(losses):
        if i % args.print_every == 0 or i == len(losses) - 1:
            print(f"{tag}step {i:3d} loss {loss:.7f}")
    report.summary()
    if rank == 0:
        report.plot(args.plot, title=f"data-parallel MLP ({where.split(',')[0]})")
    return losses


if __name__ == "__main__":
    main()
