"""functrans.optim exposes optax 0.2.8's public API: every name of optax and of its
namespaces (tree, tree_utils, transforms, schedules, losses, contrib, assignment,
projections, second_order, perturbations, microbatching, experimental.aggregating) exists,
and every function and class takes the same parameters (names, kinds, defaults) and every
NamedTuple state has the same fields, so ``import functrans.optim as optax`` ports code.

The expected API was recorded from optax 0.2.8 in ``tests/data/optax_api.json`` by
``tests/data/make_optax_reference.py``.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

from functrans import optim

DATA = pathlib.Path(__file__).parent / "data"
OPTAX_API = json.loads((DATA / "optax_api.json").read_text())["api"]

# deliberate supersets of optax's signatures, with the reason
EXTRA_PARAMETERS = {
    # the optional decoupled weight decay of earlier optax versions is kept
    "adabelief": ["weight_decay", "weight_decay_mask"],
}


def _describe_ours():
    spec = importlib.util.spec_from_file_location("make_optax_reference",
                                                  DATA / "make_optax_reference.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    return generator.describe_api(optim)


OURS = _describe_ours()


def test_every_optax_name_exists():
    missing = sorted(set(OPTAX_API) - set(OURS))
    assert not missing, f"optax 0.2.8 names missing from functrans.optim: {missing}"


@pytest.mark.parametrize("name", sorted(OPTAX_API))
def test_same_parameters_and_fields(name):
    want, got = OPTAX_API[name], OURS.get(name)
    assert got is not None, f"{name} is missing"
    extra = EXTRA_PARAMETERS.get(name)
    if extra and "params" in got:
        got = dict(got, params=[p for p in got["params"] if p[0] not in extra])
    assert got == want, f"{name}: functrans.optim has {got}, optax 0.2.8 has {want}"


def test_known_extras_are_still_extras():
    # an entry of EXTRA_PARAMETERS that optax gained (or we dropped) should be removed
    for name, extra in EXTRA_PARAMETERS.items():
        ours = [p[0] for p in OURS[name]["params"]]
        theirs = [p[0] for p in OPTAX_API[name]["params"]]
        assert all(e in ours and e not in theirs for e in extra), name


def test_deprecated_names_warn_and_point_to_their_new_place():
    import functrans.numpy as jnp
    with pytest.warns(DeprecationWarning, match="optax.contrib.dpsgd"):
        assert optim.dpsgd is optim.contrib.dpsgd
    with pytest.warns(DeprecationWarning, match="contrib.differentially_private_aggregate"):
        assert optim.differentially_private_aggregate is \
            optim.contrib.differentially_private_aggregate
    with pytest.warns(DeprecationWarning, match="tree_norm"):
        l1 = optim.tree_utils.tree_l1_norm
    assert float(l1({"a": jnp.array([3.0, -4.0])})) == 7.0
    with pytest.raises(AttributeError, match="monte_carlo is deprecated"):
        optim.monte_carlo   # noqa: B018 (the access is the test)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        optim.no_such_name   # noqa: B018
