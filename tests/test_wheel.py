"""The wheel is whole: built from the source tree, installed in a fresh virtual environment,
every module of the package imports and a jit, grad and vmap program runs from it.

The rest of the suite runs against the editable install, which reads the source tree
itself: a package the build leaves out (as ``functrans.scipy._special`` once was) is only
seen here. The build runs offline (``--no-build-isolation``: the setuptools of this
environment, ``setuptools>=77`` in the test extra); the fresh environment sees this one's
dependencies through a ``.pth`` file and gets the wheel with ``--no-deps``.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import site
import subprocess
import sys
import sysconfig
import textwrap
import venv

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# what a build reads from the source tree (the sdist's contents)
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "functrans", "backends")

_USE_THE_INSTALLED_PACKAGE = textwrap.dedent("""
    import importlib, pathlib, pkgutil, sys
    import numpy as np
    import functrans
    import functrans.numpy as jnp

    here = pathlib.Path(sys.argv[1]).resolve()
    assert pathlib.Path(functrans.__file__).resolve().is_relative_to(here), functrans.__file__
    optional = {"cupy", "mpi4py"}   # extras: cuda, mpi
    imported = []
    for package in ("functrans", "functrans.backends"):
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, package + "."):
            try:
                importlib.import_module(info.name)
            except ImportError as err:
                if err.name is None or err.name.split(".")[0] not in optional:
                    raise
            imported.append(info.name)
    import functrans.scipy.special  # noqa: F401  (its functions live in scipy._special)

    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    x = np.ones((5, 4), np.float32)
    grads = functrans.jit(functrans.vmap(functrans.grad(loss), in_axes=(None, 0)))(w, x[:, None])
    assert grads.shape == (5, 4, 3)
    expected = functrans.grad(loss)(w, x[:1])
    np.testing.assert_allclose(np.asarray(grads[0]), np.asarray(expected), rtol=1e-5, atol=1e-6)
    assert functrans.jit(loss).lower(w, x).compile()._executable.__module__.startswith(
        "functrans.backends.llvm")
    print(len(imported))
""")


@pytest.mark.skipif(not (ROOT / "pyproject.toml").exists(), reason="not a source checkout")
def test_the_built_wheel_installs_and_runs_in_a_fresh_environment(tmp_path):
    pytest.importorskip("setuptools", minversion="77")
    source = tmp_path / "source"   # built from a copy: a build writes build/ and egg-info
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        elif path.exists():
            shutil.copy(path, source / name)
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(dist), str(source)], check=True,
                   capture_output=True, cwd=tmp_path)
    [wheel] = dist.glob("functrans-*.whl")

    environment = tmp_path / "venv"
    venv.create(environment, with_pip=False)
    scheme = {"base": str(environment), "platbase": str(environment)}
    site_packages = pathlib.Path(sysconfig.get_path("purelib", vars=scheme))
    site_packages.mkdir(parents=True, exist_ok=True)
    # this environment's dependencies (numpy, scipy, llvmlite, ...), after the wheel's own
    # files; a folder named in a .pth file is only added to the path, so the editable
    # install's finder there stays inactive
    dependencies = [p for p in site.getsitepackages() + [site.getusersitepackages()]
                    if os.path.isdir(p)]
    (site_packages / "dependencies.pth").write_text("\n".join(dependencies) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                    "--target", str(site_packages), str(wheel)], check=True,
                   capture_output=True, cwd=tmp_path)

    python = environment / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "FUNCTRANS"))}
    env["FUNCTRANS_CACHE_DIR"] = str(tmp_path / "cache")
    result = subprocess.run([str(python), "-I", "-c", _USE_THE_INSTALLED_PACKAGE,
                             str(site_packages)], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[-1]) > 100   # modules imported from the wheel
