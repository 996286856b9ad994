"""Sphinx configuration of functrans's documentation site.

Build it with ``python -m sphinx -W -b html docs docs/_build/html`` (the test suite does, in
tests/test_docs_site.py). Pages are Markdown (MyST); the API reference, the list of missing
modules and the pictures are generated from the code at build time (docs/_ext).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext"))
# the sharding pictures and examples use a mesh of 8 CPU devices
os.environ.setdefault("FUNCTRANS_CPU_DEVICES", "8")

import functrans  # noqa: E402

project = "functrans"
author = "The functrans developers"
copyright = "the functrans developers"
release = functrans.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "functrans_docs",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "README.md", "differences.md", "generated/*.md",
                    "screenshots"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# API pages list their objects; the table of contents lists pages and their sections only
# (thousands of object entries in it would make every page's navigation slow to build)
toc_object_entries = False

autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"  # signatures show defaults; types are in the docstrings
autodoc_inherit_docstrings = False
# functrans.core.Primitive is also functrans.extend.core.Primitive (JAX's name for it): a
# reference to it finds both pages, which is not an error
suppress_warnings = ["ref.python"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"functrans {release}"
html_static_path = []
html_theme_options = {
    "source_edit_link": None,
    "navigation_with_keys": True,
}
