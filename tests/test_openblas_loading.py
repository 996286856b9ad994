"""Loading SciPy's OpenBLAS asks for a short idle spin of its threads (see
``blas.OPENBLAS_THREAD_TIMEOUT``) without changing the process's environment."""
import ctypes.util
import os

import pytest

from functrans.backends.llvm import blas


@pytest.fixture
def libc_path():
    path = ctypes.util.find_library("c")
    if path is None:
        pytest.skip("no C library to load")
    return path


@pytest.fixture
def timeouts_seen(monkeypatch):
    """The value of OPENBLAS_THREAD_TIMEOUT each library load saw, in order."""
    seen = []
    real_cdll = ctypes.CDLL

    def recording_cdll(path, *args, **kwargs):
        seen.append(os.environ.get("OPENBLAS_THREAD_TIMEOUT"))
        return real_cdll(path, *args, **kwargs)

    monkeypatch.setattr(blas.ctypes, "CDLL", recording_cdll)
    return seen


def test_the_environment_is_left_as_it_was(libc_path, timeouts_seen, monkeypatch):
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    blas._load_openblas(libc_path)
    assert timeouts_seen == [str(blas.OPENBLAS_THREAD_TIMEOUT)]
    assert "OPENBLAS_THREAD_TIMEOUT" not in os.environ


def test_a_timeout_the_user_set_is_kept(libc_path, timeouts_seen, monkeypatch):
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "26")
    blas._load_openblas(libc_path)
    assert timeouts_seen == ["26"]
    assert os.environ["OPENBLAS_THREAD_TIMEOUT"] == "26"
