"""The committed primitive coverage table (docs/primitive_coverage.md) matches the code, no
primitive loses a rule silently, and a primitive runs on the host (NumPy) under a compiled
backend only when listed below."""
from __future__ import annotations

import pathlib

import pytest

pytest.importorskip("llvmlite")

from functrans.backends import coverage  # noqa: E402

TABLE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "primitive_coverage.md"

# Primitives each backend runs through their NumPy implementation: collectives (the pmap
# runtime carries them), decompositions and special functions without native code yet.
_COMMON_HOST = {
    "all_gather", "all_to_all", "axis_index", "bessel_i0e", "bessel_i1e",
    "bitcast_convert_type", "complex", "cumlogsumexp", "cumulative_tangent", "custom_lin",
    "debug_callback", "eigh", "fft", "first_order_only", "hessenberg", "igamma",
    "igamma_grad_a", "igammac", "linear_solve", "lu", "mulhi", "optimization_barrier", "pmax",
    "pmin", "polygamma", "ppermute", "psum", "pure_callback", "qr", "random_gamma_grad",
    "reduce_precision", "reduce_scatter", "regularized_incomplete_beta", "remat_linear",
    "rng_bit_generator", "rng_uniform", "schur", "shard_map", "sharding_constraint", "svd",
    "top_k", "zeta",
}
HOST_FALLBACKS = {
    "llvm": _COMMON_HOST | {"digamma"},
    "cuda": _COMMON_HOST | {"cholesky", "sort", "triangular_solve"},
}


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
def test_host_fallbacks_are_exactly_the_allowed_ones(rows, backend):
    host = {r["primitive"] for r in rows if r[backend] == "host"}
    assert host - HOST_FALLBACKS[backend] == set(), \
        f"these now fall back to NumPy on {backend}: lower them or list them"
    assert HOST_FALLBACKS[backend] - host == set(), \
        f"these now run natively on {backend}: remove them from HOST_FALLBACKS"


def test_committed_table_is_current(rows):
    assert TABLE.read_text() == coverage.render(rows), (
        "docs/primitive_coverage.md is stale: run "
        "`python -m functrans.backends.coverage > docs/primitive_coverage.md`")
