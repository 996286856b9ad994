"""Test configuration: bounded hypothesis profiles, and global flags restored after each test."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Compiled code is cached in a directory of this run's own, never in the user's cache: made
# by the process that loads this file first (pytest, or the xdist controller, whose workers
# inherit both variables) and removed when that process exits.
if not os.environ.get("FUNCTRANS_TEST_SESSION_CACHE"):
    _session_cache = tempfile.mkdtemp(prefix="functrans-test-cache-")
    os.environ["FUNCTRANS_TEST_SESSION_CACHE"] = os.environ["FUNCTRANS_CACHE_DIR"] = _session_cache
    atexit.register(shutil.rmtree, _session_cache, ignore_errors=True)

# type-check every program the tests stage (check_jaxpr after each trace)
os.environ.setdefault("FUNCTRANS_CHECK_JAXPRS", "1")
# prove every buffer plan sound as it is compiled, and fill scratch memory and fresh outputs
# with NaN (integers: a marker) before every compiled call, so that a read of memory nothing
# wrote changes results instead of passing unseen
os.environ.setdefault("FUNCTRANS_VERIFY_PLANS", "1")
os.environ.setdefault("FUNCTRANS_POISON_SCRATCH", "1")
# the suite tests the CPU compiler by default, also on a machine with a GPU (where jit would
# otherwise default to the cuda backend); tests of the GPU name it explicitly
os.environ.setdefault("FUNCTRANS_DEFAULT_BACKEND", "cpu")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("ci", max_examples=15, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True)
def _restore_config():
    import functrans
    saved = dict(functrans.config._values)
    yield
    for name, value in saved.items():
        if functrans.config._values.get(name) != value:
            functrans.config.update(name, value)


@pytest.fixture
def x64():
    """64-bit mode for the duration of a test (float64 gradient checks)."""
    from functrans.test_util import x64 as enable_x64
    with enable_x64():
        yield


@pytest.fixture
def cache_in(tmp_path):
    """The compilation cache in a fresh directory (``tmp_path``) for the duration of a
    test."""
    import functrans
    old = functrans.config.cache_dir
    functrans.config.update("cache_dir", str(tmp_path))
    yield tmp_path
    functrans.config.update("cache_dir", old)
