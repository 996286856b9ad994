"""The committed primitive coverage table (docs/primitive_coverage.md) matches the code, no
primitive loses a rule silently, and a primitive runs on the host (NumPy) under a compiled
backend only when that backend's ``HOST`` table (``backends/<backend>/lowering.py``) gives
the reason."""
from __future__ import annotations

import pathlib

import pytest

pytest.importorskip("llvmlite")

from functrans.backends import coverage  # noqa: E402

TABLE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "primitive_coverage.md"


@pytest.fixture(scope="module")
def rows():
    return coverage.coverage_rows()


def _committed():
    rows = {}
    for line in TABLE.read_text().splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_no_primitive_lost_a_rule(rows):
    committed = _committed()
    lost = [(r["primitive"], rule) for r in rows if r["primitive"] in committed
            for rule, cell in zip(coverage.RULES, committed[r["primitive"]])
            if cell == "x" and not r[rule]]
    assert lost == [], "primitives lost rules the coverage table lists"


@pytest.mark.parametrize("backend", coverage.BACKENDS)
def test_every_host_fallback_has_a_reason(rows, backend):
    host = {r["primitive"] for r in rows if r[backend] == "host"}
    listed = {r["primitive"] for r in rows if r[backend + "_host"]}
    assert host - listed == set(), \
        f"these now fall back to NumPy on {backend}: lower them, or give the reason in " \
        f"backends/{backend}/lowering.py HOST"


@pytest.mark.parametrize("backend", coverage.BACKENDS)
def test_collectives_are_the_runtimes_not_fallbacks(rows, backend):
    from functrans.primitives import collectives
    runtime = {r["primitive"] for r in rows if r[backend] == "runtime"}
    assert {"psum", "all_gather", "ppermute", "axis_index"} <= runtime
    assert runtime == {p.name for p in coverage.all_primitives()
                       if isinstance(p, collectives.CollectivePrimitive)}
    assert not any(r[backend + "_host"] for r in rows if r["primitive"] in runtime)


def test_committed_table_is_current(rows):
    assert TABLE.read_text() == coverage.render(rows), (
        "docs/primitive_coverage.md is stale: run "
        "`python -m functrans.backends.coverage > docs/primitive_coverage.md`")
