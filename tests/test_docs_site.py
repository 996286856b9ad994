"""The documentation site builds with Sphinx with warnings as errors (a broken link, a bad
docstring or a page outside the table of contents fails), and its generated parts hold what
they claim: an API page per public module, the pictures, the table of missing modules.
The code blocks of its pages run in tests/test_docs.py."""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_parser")
pytest.importorskip("furo")

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_the_documentation_site(tmp_path):
    """One test, so that parallel test runs build the site once."""
    site = _build(tmp_path)
    _check_pages(site)
    _check_api_pages(site)
    _check_pictures(site)
    _check_missing_modules(site)
    _check_error_links(site)


def _build(base):
    """The site built from a copy of docs/ (the build writes generated pages into its
    source folder, which must not be the working tree)."""
    source = base / "docs"
    shutil.copytree(DOCS, source, ignore=shutil.ignore_patterns("_build", "generated", "api",
                                                                "screenshots"))
    out = base / "html"
    env = {k: v for k, v in os.environ.items() if k != "FUNCTRANS_CPU_DEVICES"}
    build = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q",
                            "-b", "html", str(source), str(out)],
                           capture_output=True, text=True, timeout=600, env=env)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-6000:]
    return source, out


def _check_pages(site):
    _, out = site
    assert (out / "index.html").exists()
    for page in ("getting_started", "tutorials/sharp_bits", "tutorials/pytrees",
                 "tutorials/random_numbers", "tutorials/control_flow", "tutorials/compilation",
                 "sharding", "export", "checkpoints", "porting", "errors", "experimental",
                 "examples", "api/index"):
        assert (out / f"{page}.html").exists(), page


def _check_api_pages(site):
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import functrans_docs
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    _, out = site
    modules = functrans_docs.public_modules()
    for name in ("functrans", "functrans.numpy", "functrans.lax", "functrans.random",
                 "functrans.tree_util", "functrans.nn", "functrans.optim",
                 "functrans.checkpoint", "functrans.sharding", "functrans.export",
                 "functrans.errors", "functrans.scipy.special"):
        assert name in modules
    for name in modules:
        assert (out / "api" / f"{name}.html").exists(), name
    numpy_page = (out / "api" / "functrans.numpy.html").read_text()
    assert 'id="functrans.numpy.einsum"' in numpy_page  # rendered from the docstring


def _check_pictures(site):
    source, out = site
    for picture in ("shardings.png", "pipeline.png", "fusion.png", "loss_mlp_digits.png",
                    "loss_data_parallel.png", "loss_rnn_scan.png"):
        data = (source / "generated" / picture).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", picture
        assert list((out / "_images").glob(picture)), picture
    # the sharding page shows visualize_array_sharding's own table for the same arrays
    sharding = (out / "sharding.html").read_text()
    assert "CPU 0,1,2,3" in sharding and "shardings.png" in sharding


def _check_missing_modules(site):
    import importlib.util
    source, _ = site
    table = (source / "generated" / "missing_modules.md").read_text()
    for name in ("functrans.experimental", "functrans.extend", "functrans.interpreters"):
        row = next(line for line in table.splitlines() if f"`{name}`" in line)
        exists = importlib.util.find_spec(name) is not None
        assert ("**missing**" in row) != exists, row


def _check_error_links(site):
    import functrans
    import functrans.numpy as jnp
    _, out = site
    page = (out / "errors.html").read_text()
    anchors = set(re.findall(r'id="([a-z0-9-]+)"', page))
    with pytest.raises(functrans.errors.TracerBoolConversionError) as info:
        functrans.jit(lambda x: 1.0 if x > 0 else 0.0)(jnp.float32(1.0))
    link = re.search(r"docs/errors\.md#([a-z]+)", str(info.value)).group(1)
    assert link in anchors
    for name in functrans.errors.__all__:
        if isinstance(getattr(functrans.errors, name), type) and name != "JaxRuntimeError":
            assert name.lower() in anchors, name
