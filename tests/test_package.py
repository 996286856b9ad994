"""The package as a user and a package index see it: its namespace and its metadata."""
from __future__ import annotations

import pathlib
import sys

import pytest

import functrans

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_dir_lists_the_lazily_imported_submodules_and_no_stray_names():
    names = dir(functrans)
    for module in ("scipy", "export", "stages", "profiler", "tree", "ad_checkpoint"):
        assert module in names
        assert getattr(functrans, module).__name__ == f"functrans.{module}"
    assert "annotations" not in names and not hasattr(functrans, "annotations")
    assert names == sorted(names)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is Python 3.11+")
def test_project_metadata_has_authors_classifiers_and_a_docs_extra():
    import tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["authors"] and project["keywords"]
    classifiers = project["classifiers"]
    assert any(c.startswith("Development Status ::") for c in classifiers)
    assert "Programming Language :: Python :: 3" in classifiers
    assert "Typing :: Typed" in classifiers  # the package ships py.typed
    docs = project["optional-dependencies"]["docs"]
    assert any(d.startswith("sphinx") for d in docs)
    # the test suite builds the site, so the test extra brings the same tools
    assert set(docs) <= set(project["optional-dependencies"]["test"])
