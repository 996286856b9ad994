"""functrans's benchmark suite: the workloads users care about, against NumPy, JAX, PyTorch.

    python -m benchmarks                         # everything, one table
    python -m benchmarks --quick                 # smaller sizes, fewer repeats
    python -m benchmarks --only mlp,matmul --json out.json

Each workload lives in one module (``mlp``, ``kernels``, ``compile_time``, ``bench_rnn``,
``bench_pmap``) and returns rows built by ``harness.compare``, which checks every
implementation's result against the reference before timing it. See benchmarks/README.md.
"""
