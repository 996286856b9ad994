"""Every ```python block in docs/ and README.md runs, so the documentation never rots."""
from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# every page of the site (generated pages and build output aside) and the README
DOCS = sorted(p for p in (ROOT / "docs").rglob("*.md")
              if not {"_build", "generated", "api"} & set(p.relative_to(ROOT / "docs").parts)
              ) + [ROOT / "README.md"]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _blocks():
    for path in DOCS:
        for i, code in enumerate(BLOCK.findall(path.read_text())):
            yield pytest.param(code, id=f"{path.relative_to(ROOT).as_posix()}-{i}")


@pytest.mark.parametrize("code", list(_blocks()))
def test_doc_block_runs(code, monkeypatch):
    import sys
    import types
    # a real module to run in: dataclasses and pickling look their class's module up
    module = types.ModuleType("__doc_test__")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, "<doc>", "exec"), module.__dict__)


@pytest.mark.parametrize("devices", [1, 3])
def test_readme_tour_runs_with_any_device_count(devices):
    import os
    import subprocess
    import sys
    tour = BLOCK.findall((ROOT / "README.md").read_text())[0]
    out = subprocess.run([sys.executable, "-c", tour], capture_output=True, text=True,
                         timeout=240, env=dict(os.environ, FUNCTRANS_CPU_DEVICES=str(devices)))
    assert out.returncode == 0, out.stderr[-3000:]
