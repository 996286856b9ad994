"""Tensor-parallel MLP with shard_map (the Megatron layout): the first layer's weights are
split by columns over the 'model' axis, the second layer's by rows, so each device computes
its slice of the hidden layer with no communication and one psum adds up the output. Data
parallelism over a 'data' axis composes with it: the batch is split over 'data'.

    python examples/tensor_parallel_mlp.py                               # 2 (data) x 2 (model)
    python examples/tensor_parallel_mlp.py --devices 8                   # 4 (data) x 2 (model)
    python examples/tensor_parallel_mlp.py --devices 1                   # 1 CPU device
    FUNCTRANS_CPU_DEVICES=2 mpiexec -n 2 python examples/tensor_parallel_mlp.py
    python examples/tensor_parallel_mlp.py --single                      # unsharded

Each step prints the loss and the largest difference between the sharded gradients and the
gradients of the same network computed unsharded on one device (float32 rounding).
"""
from __future__ import annotations


import numpy as np

import functrans
import functrans.numpy as jnp
from functrans import P, lax, tree_util

import training_report


def init_params(seed: int, d_in: int, hidden: int, d_out: int):
    rng = np.random.default_rng(seed)
    return {"w1": (rng.standard_normal((d_in, hidden)) / np.sqrt(d_in)).astype(np.float32),
            "b1": np.zeros(hidden, np.float32),
            "w2": (rng.standard_normal((hidden, d_out)) / np.sqrt(hidden)).astype(np.float32),
            "b2": np.zeros(d_out, np.float32)}


def mlp(params, x):
    """The network, unsharded."""
    h = jax_relu(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def jax_relu(x):
    return jnp.maximum(x, 0.0)


def tensor_parallel_block(w1, b1, w2, b2, x):
    """One device's share: its columns of w1 (and b1), its rows of w2."""
    h = jax_relu(x @ w1 + b1)                  # (batch, hidden / model): no communication
    return lax.psum(h @ w2, "model") + b2      # partial outputs summed over 'model'


def make_mesh():
    n = functrans.device_count()
    model = 2 if n % 2 == 0 else 1
    return functrans.make_mesh((n // model, model), ("data", "model"))


def make_sharded_mlp(mesh):
    block = functrans.shard_map(
        tensor_parallel_block, mesh=mesh,
        in_specs=(P(None, "model"), P("model"), P("model", None), P(), P("data")),
        out_specs=P("data"))
    return lambda params, x: block(params["w1"], params["b1"], params["w2"], params["b2"], x)


def data(seed: int, steps: int, batch: int, d_in: int, d_out: int):
    rng = np.random.default_rng(seed)
    teacher = rng.standard_normal((d_in, d_out)).astype(np.float32)
    for _ in range(steps):
        x = rng.standard_normal((batch, d_in)).astype(np.float32)
        yield x, np.sin(x @ teacher).astype(np.float32)


def make_train_step(model, lr: float):
    def loss_fn(params, x, y):
        return jnp.mean((model(params, x) - y) ** 2)

    @functrans.jit
    def train_step(params, x, y):
        loss, grads = functrans.value_and_grad(loss_fn)(params, x, y)
        return tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss, grads
    return train_step


def main(argv=None) -> list[float]:
    parser = training_report.argument_parser(__doc__)
    parser.add_argument("--steps", type=int, default=20, help="training steps")
    parser.add_argument("--batch", type=int, default=32,
                        help="global batch size, split over the mesh's 'data' axis")
    parser.add_argument("--hidden", type=int, default=64,
                        help="width of the hidden layer, split over the 'model' axis")
    parser.add_argument("--lr", type=float, default=0.2, help="SGD learning rate")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the parameters and of the made-up data")
    parser.add_argument("--single", action="store_true",
                        help="train the unsharded network on one device, for comparison")
    training_report.add_devices_flag(parser)
    training_report.add_output_flags(parser, progress=False)
    args = parser.parse_args(argv)
    training_report.use_cpu_devices(args.devices)
    if training_report.launched_by_mpi() and not functrans.distributed.is_initialized():
        functrans.distributed.initialize()
    d_in, d_out = 8, 4
    reference_step = make_train_step(mlp, args.lr)
    params = reference = init_params(args.seed, d_in, args.hidden, d_out)
    if args.single:
        step, where = reference_step, "1 device, unsharded"
    else:
        mesh = make_mesh()
        rows = mesh.shape["data"]
        if args.batch % rows:
            raise SystemExit(f"--batch {args.batch} must be divisible by the {rows} rows of "
                             f"the mesh's 'data' axis (try --batch "
                             f"{args.batch - args.batch % rows or rows})")
        step = make_train_step(make_sharded_mlp(mesh), args.lr)
        where = f"a mesh {dict(mesh.shape)} in {functrans.process_count()} process(es)"
    tag = f"[rank {functrans.process_index()}] " if functrans.process_count() > 1 else ""
    print(f"{tag}training on {where}")
    report = training_report.Report(args.steps, quiet=True)  # a line per step shows progress
    losses = []
    for i, (x, y) in enumerate(data(args.seed, args.steps, args.batch, d_in, d_out)):
        params, loss, grads = report.timed(step, params, x, y)
        reference, _, ref_grads = reference_step(reference, x, y)
        # the sharded gradients equal the unsharded network's (replicated: readable anywhere)
        diff = max(float(np.max(np.abs(np.asarray(g) - np.asarray(r))))
                   for g, r in zip(tree_util.tree_leaves(grads), tree_util.tree_leaves(ref_grads)))
        losses.append(float(loss))
        report.record(loss)
        print(f"{tag}step {i:3d} loss {float(loss):.7f} grad difference {diff:.2e}")
    report.summary()
    if functrans.process_index() == 0:
        report.plot(args.plot, title=f"tensor-parallel MLP ({where})")
    return losses


if __name__ == "__main__":
    main()
