"""Which of the compared libraries this Python can import, loaded on first use.

JAX and PyTorch are optional: the suite never needs them, and their columns show "-" when
they are missing. Importing them lazily keeps ``--only`` runs of functrans-only workloads
fast and keeps a broken install of one from stopping the others.
"""
from __future__ import annotations

import importlib
import os

_loaded: dict[str, object] = {}


def load(name: str):
    """The module ``name`` ("functrans", "jax", "torch") or None if it cannot be imported.

        >>> load("numpy").__name__
        'numpy'
    """
    if name not in _loaded:
        try:
            if name == "jax":
                # A fair CPU comparison: JAX on the host, 32-bit like functrans, no GPU probing.
                os.environ.setdefault("JAX_PLATFORMS", "cpu")
                module = importlib.import_module("jax")
                importlib.import_module("jax.numpy")
            elif name == "functrans":
                module = importlib.import_module("functrans")
                importlib.import_module("functrans.numpy")
            else:
                module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - any import failure means "not available"
            module = None
        _loaded[name] = module
    return _loaded[name]


def available() -> tuple[str, ...]:
    """The implementations that can run here, in table order."""
    names = ["functrans", "numpy"]
    if load("jax") is not None:
        names.insert(1, "jax")
    if load("torch") is not None:
        names.append("torch")
    return tuple(names)


def versions() -> dict[str, str]:
    """Version of each importable library."""
    out = {}
    for name in ("functrans", "numpy", "scipy", "llvmlite", "jax", "torch"):
        module = load(name)
        if module is not None:
            out[name] = getattr(module, "__version__", "?")
    return out


def torch_compile(fn):
    """``torch.compile(fn)``, or None when torch or its compiler is unusable here.

    The compiled function is only built here; the caller's first call (untimed, and
    compared with the reference) is where a missing C++ compiler shows, so that error is
    reported in the table rather than raised.
    """
    torch = load("torch")
    if torch is None:
        return None
    try:
        return torch.compile(fn)
    except Exception:  # noqa: BLE001
        return None
