"""``python -m functrans.run script.py [args...]``: run a JAX program on functrans, unchanged.

``import jax`` (and every ``jax.X.Y``, ``jaxlib``) inside the program and inside the
libraries it uses resolves to functrans (see :func:`functrans.install_as_jax`).
``python -m functrans.run -m module [args...]`` runs a module the same way, e.g.
``python -m functrans.run -m pytest tests/`` runs a library's own tests on functrans.
"""
from __future__ import annotations

import os
import runpy
import sys

from functrans._as_jax import install_as_jax

_USAGE = "usage: python -m functrans.run (script.py | -m module) [args...]"


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE, file=sys.stderr if not argv else sys.stdout)
        raise SystemExit(0 if argv else 2)
    install_as_jax()
    if argv[0] == "-m":
        if len(argv) < 2:
            print(_USAGE, file=sys.stderr)
            raise SystemExit(2)
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
