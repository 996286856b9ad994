"""Data-parallel training of a small MLP with jit and NamedSharding: the batch is split over
a mesh of devices, the parameters are replicated, and the compiler partitions the training
step (each device computes on its slice of the batch; the gradients are summed with psum).
The same code runs on one device: no pmap, no collectives written by hand.

    python examples/data_parallel_sharding.py                              # 4 CPU devices
    python examples/data_parallel_sharding.py --devices 8                  # 8 CPU devices
    FUNCTRANS_CPU_DEVICES=2 mpiexec -n 2 python examples/data_parallel_sharding.py  # 2 x 2
    python examples/data_parallel_sharding.py --single                     # no sharding

Under MPI the mesh spans every process's devices; each process passes only its part of the
global batch (``make_array_from_process_local_data``). Every run sees the same global
batches, so all of them print the same loss curve up to float32 rounding.
"""
from __future__ import annotations


import numpy as np

import functrans
import functrans.numpy as jnp
from functrans import P, tree_util
from functrans.sharding import NamedSharding

import training_report


def init_params(seed: int, sizes):
    rng = np.random.default_rng(seed)
    return [{"w": (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32),
             "b": np.zeros(n, np.float32)} for m, n in zip(sizes[:-1], sizes[1:])]


def predict(params, x):
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y):
    """Mean squared error over the batch."""
    return jnp.mean((predict(params, x) - y) ** 2)


def batches(seed: int, steps: int, batch: int, sizes):
    """The same global batches in every process: inputs and a teacher network's outputs."""
    rng = np.random.default_rng(seed)
    teacher = init_params(seed + 1, sizes)
    for _ in range(steps):
        x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
        h = x
        for layer in teacher[:-1]:
            h = np.tanh(h @ (2.0 * layer["w"]))
        yield x, (h @ teacher[-1]["w"]).astype(np.float32)


def make_train_step(lr: float):
    @functrans.jit
    def train_step(params, x, y):
        loss, grads = functrans.value_and_grad(loss_fn)(params, x, y)
        return tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss
    return train_step


def train(args, sizes, report) -> list[float]:
    train_step = make_train_step(args.lr)
    params = init_params(args.seed, sizes)
    if args.single:
        return [float(loss) for loss in _run(train_step, params, args, sizes, None, report)]
    n = functrans.device_count()
    if args.batch % n:
        raise SystemExit(f"--batch {args.batch} must be divisible by the {n} devices "
                         f"(try --batch {args.batch - args.batch % n or n})")
    mesh = functrans.make_mesh((n,), ("data",))
    # the parameters replicated on every device; the batch split along its first axis
    params = functrans.device_put(params, NamedSharding(mesh, P()))
    return [float(loss) for loss in _run(train_step, params, args, sizes,
                                         NamedSharding(mesh, P("data")), report)]


def _run(train_step, params, args, sizes, batch_sharding, report):
    rank, nproc = functrans.process_index(), functrans.process_count()
    for x, y in batches(args.seed, args.steps, args.batch, sizes):
        if batch_sharding is not None:
            # each process holds its consecutive part of the global batch
            part = slice(rank * args.batch // nproc, (rank + 1) * args.batch // nproc)
            x = functrans.make_array_from_process_local_data(batch_sharding, x[part])
            y = functrans.make_array_from_process_local_data(batch_sharding, y[part])
        params, loss = report.timed(train_step, params, x, y)
        report.record(loss)
        yield loss


def main(argv=None) -> list[float]:
    parser = training_report.argument_parser(__doc__)
    parser.add_argument("--steps", type=int, default=30, help="training steps")
    parser.add_argument("--batch", type=int, default=64,
                        help="global batch size, split evenly over the mesh")
    parser.add_argument("--hidden", type=int, default=32, help="width of the two hidden layers")
    parser.add_argument("--lr", type=float, default=0.1, help="SGD learning rate")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the parameters and of the made-up data")
    parser.add_argument("--single", action="store_true",
                        help="train on one device without sharding, for comparison")
    training_report.add_devices_flag(parser)
    training_report.add_output_flags(parser)
    args = parser.parse_args(argv)
    training_report.use_cpu_devices(args.devices)
    sizes = [8, args.hidden, args.hidden, 2]
    if training_report.launched_by_mpi() and not functrans.distributed.is_initialized():
        functrans.distributed.initialize()
    rank, nproc = functrans.process_index(), functrans.process_count()
    where = "1 device, no sharding" if args.single else \
        f"a mesh of {functrans.device_count()} devices in {nproc} process(es)"
    if not args.single and functrans.device_count() == 1:
        where += " (pass --devices 4 or set FUNCTRANS_CPU_DEVICES=4 for more)"
    tag = f"[rank {rank}] " if nproc > 1 else ""
    print(f"{tag}training on {where}")
    report = training_report.Report(args.steps, quiet=args.quiet or rank > 0)
    losses = train(args, sizes, report)
    for i, loss in enumerate(losses):
        print(f"{tag}step {i:3d} loss {loss:.7f}")
    report.summary()
    if rank == 0:
        report.plot(args.plot, title="data-parallel MLP over a mesh")
    return losses


if __name__ == "__main__":
    main()
