"""What every example shows its user: a ``--help`` that explains each flag and its default,
progress on long work, a closing summary (final metrics, steps per second, compile time) and,
with ``--plot``, the loss curve as a PNG.

    parser = training_report.argument_parser(__doc__)
    parser.add_argument("--steps", type=int, default=100, help="training steps")
    training_report.add_output_flags(parser)
    args = parser.parse_args()
    report = training_report.Report(args.steps, quiet=args.quiet)
    for i in range(args.steps):
        params, loss = report.timed(train_step, params, batch)
        report.record(loss)
    report.summary(test_accuracy=0.97)
    report.plot(args.plot, title="...")
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import functrans


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter,
                     argparse.RawDescriptionHelpFormatter):
    """The module docstring as written, and every flag's default after its help."""


def argument_parser(doc: str) -> argparse.ArgumentParser:
    """A parser whose ``--help`` shows the whole docstring ``doc`` and each default."""
    return argparse.ArgumentParser(description=doc, formatter_class=_HelpFormatter)


def add_output_flags(parser: argparse.ArgumentParser, progress: bool = True) -> None:
    """``--plot PATH`` (the loss curve as a PNG) and ``--quiet`` (no progress bar)."""
    parser.add_argument("--plot", default=None, metavar="PATH",
                        help="save the training loss curve to this PNG file")
    if progress:
        parser.add_argument("--quiet", action="store_true",
                            help="no progress bar (the summary is still printed)")


def add_devices_flag(parser: argparse.ArgumentParser, default: int = 4) -> None:
    """``--devices N``: CPU devices to run on. Its default is the count the environment
    sets (``FUNCTRANS_CPU_DEVICES``, or JAX's ``JAX_NUM_CPU_DEVICES`` or ``XLA_FLAGS``
    device count), else ``default``."""
    from_env = "FUNCTRANS_CPU_DEVICES" in os.environ or "JAX_NUM_CPU_DEVICES" in os.environ \
        or "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
    parser.add_argument(
        "--devices", type=int,
        default=functrans.config.cpu_device_count if from_env else default,
        help="CPU devices to split the work over (the environment can set it too: "
             "FUNCTRANS_CPU_DEVICES, or JAX's JAX_NUM_CPU_DEVICES or "
             "XLA_FLAGS=--xla_force_host_platform_device_count=N); on a machine with GPUs "
             "the GPUs are used instead")


def launched_by_mpi() -> bool:
    """Whether this process was started by ``mpirun``/``mpiexec`` (MPICH, Open MPI or PMIx
    set these variables in every rank)."""
    return any(k in os.environ for k in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK",
                                         "MPI_LOCALNRANKS"))


def use_cpu_devices(count: int) -> None:
    """Give this process ``count`` CPU devices; call before any device is used."""
    functrans.config.update("cpu_device_count", int(count))


class Report:
    """Times a training loop's steps and collects its losses.

    The first call of :meth:`timed` traces and compiles the step as well as running it: its
    time is reported as the compile time, and the rate in steps per second counts the
    steps after it."""

    def __init__(self, total: int, quiet: bool = False, unit: str = "step",
                 description: str = "training"):
        self.total, self.unit = total, unit
        self.losses: list[float] = []
        self.compile_seconds: float | None = None
        self.run_seconds = 0.0
        self.calls = 0
        self._start = time.perf_counter()
        self._bar = None
        if not quiet:
            try:
                from tqdm import tqdm
                self._bar = tqdm(total=total, desc=description, unit=unit, file=sys.stderr,
                                 mininterval=0.5)
            except ImportError:
                self._bar = None

    def timed(self, step, *args, **kwargs):
        """``step(*args, **kwargs)``, waited for and timed."""
        start = time.perf_counter()
        out = functrans.block_until_ready(step(*args, **kwargs))
        elapsed = time.perf_counter() - start
        if self.compile_seconds is None:
            self.compile_seconds = elapsed
        else:
            self.run_seconds += elapsed
            self.calls += 1
        return out

    def record(self, loss=None, advance: int = 1) -> None:
        """Note one finished unit of work and, if given, its loss."""
        if loss is not None:
            self.losses.append(float(loss))
        if self._bar is not None:
            self._bar.update(advance)
            if self.losses:
                self._bar.set_postfix(loss=f"{self.losses[-1]:.4f}", refresh=False)

    def summary(self, **metrics) -> str:
        """Close the progress bar and print one line: the metrics given, the final loss,
        steps per second after the first step, and the first step's (compile) time."""
        if self._bar is not None:
            self._bar.close()
        parts = []
        if self.losses:
            parts.append(f"final loss {self.losses[-1]:.4f}")
        parts += [f"{name.replace('_', ' ')} {_format(value)}" for name, value in metrics.items()]
        if self.calls:
            parts.append(f"{self.calls / self.run_seconds:.1f} {self.unit}s/s")
        if self.compile_seconds is not None:
            parts.append(f"compile + first {self.unit} {self.compile_seconds:.2f} s")
        parts.append(f"total {time.perf_counter() - self._start:.1f} s")
        line = "summary: " + ", ".join(parts)
        print(line)
        return line

    def plot(self, path: str | None, title: str, xlabel: str | None = None) -> None:
        """Save the recorded losses as a line plot to ``path`` (nothing when None)."""
        if not path:
            return
        plot_losses(path, self.losses, title, xlabel or self.unit)


def plot_losses(path: str, losses, title: str, xlabel: str = "step") -> None:
    """Save ``losses`` as a PNG line plot at ``path``."""
    import matplotlib  # deferred: only --plot needs it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, len(losses) + 1), losses)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("training loss")
    ax.set_title(title)
    if losses and min(losses) > 0 and max(losses) / min(losses) > 20:
        ax.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"loss curve saved to {path}")


def _format(value) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)
