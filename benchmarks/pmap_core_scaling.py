"""Strong scaling of the data-parallel MLP gradient step with one core per device.

The baseline is one device on one core (``FUNCTRANS_NUM_THREADS=1``, one BLAS thread); the
parallel run splits the same global batch over N devices (N cores). Efficiency is
``T(1 device) / (N * T(N devices))``. Each configuration runs in its own process, since the
device count and thread counts are fixed at start-up.

    python benchmarks/pmap_core_scaling.py --devices 2 --batch 2048
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _measure(ndev: int, batch: int, repeats: int) -> float:
    """Median milliseconds of one pmapped gradient step (run inside the child process)."""
    import functrans
    from functrans import lax
    from benchmarks.mlp import make_data, make_mlp

    loss, _, _ = make_mlp(functrans)
    params, x, onehot = make_data((784, 512, 512, 10), batch)
    step = functrans.pmap(lambda p, x, y: lax.pmean(functrans.grad(loss)(p, x, y), "d"),
                          axis_name="d")
    replicated = functrans.device_put_replicated(params, functrans.local_devices())
    xs = x.reshape(ndev, batch // ndev, -1)
    ys = onehot.reshape(ndev, batch // ndev, -1)
    functrans.block_until_ready(step(replicated, xs, ys))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        functrans.block_until_ready(step(replicated, xs, ys))
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def _run_child(ndev: int, batch: int, repeats: int, one_core: bool) -> float:
    env = dict(os.environ, FUNCTRANS_CPU_DEVICES=str(ndev), PYTHONPATH=ROOT)
    if one_core:
        env.update(FUNCTRANS_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, __file__, "--child", str(ndev), str(batch), str(repeats)],
                         capture_output=True, text=True, env=env, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(_measure(*args.child))
        return
    single = _run_child(1, args.batch, args.repeats, one_core=True)
    parallel = _run_child(args.devices, args.batch, args.repeats, one_core=False)
    efficiency = single / (args.devices * parallel)
    print(f"global batch {args.batch}: 1 device on 1 core {single:.2f} ms; "
          f"{args.devices} devices {parallel:.2f} ms; strong-scaling efficiency {efficiency:.2f}")


if __name__ == "__main__":
    main()
