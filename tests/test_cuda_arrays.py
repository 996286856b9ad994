"""GPU arrays: device_put to a GPU, jit on GPU arrays keeps results there, the GPU as the
default platform. Everything here needs CuPy and a GPU, except the checks that the CPU
path is unchanged without them."""
from __future__ import annotations

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import _backends
from functrans.backends.cuda import runtime

needs_gpu = pytest.mark.skipif(not runtime.is_available(),
                               reason="CuPy with a CUDA GPU is not available: GPU execution skipped")


def test_cpu_arrays_report_a_cpu_device():
    x = jnp.arange(3.0)
    assert x.device.platform == "cpu"
    assert x._platform == "cpu"


def test_suite_pins_the_cpu_backend():
    assert _backends.get_backend(None).platform == "cpu"


@pytest.mark.skipif(runtime.is_available(), reason="a GPU is present")
def test_default_platform_without_gpu_is_cpu():
    functrans.config.update("default_backend", "")
    assert _backends.default_platform() == "cpu"
    assert functrans.default_device().platform == "cpu"


@pytest.fixture
def gpu():
    return functrans.devices("gpu")[0]


@needs_gpu
def test_device_put_roundtrip(gpu):
    from functrans.backends.cuda.arrays import GpuArray
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.int32, np.float16, np.bool_, functrans.numpy.bfloat16):
        host = rng.standard_normal((3, 5)).astype(dtype)
        x = functrans.device_put(host, gpu)
        assert isinstance(x, GpuArray) and x.device == gpu
        assert x.shape == (3, 5) and x.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(np.asarray(x), host)
        back = functrans.device_put(x, functrans.devices("cpu")[0])
        assert back._platform == "cpu"
        np.testing.assert_array_equal(np.asarray(back), host)


@needs_gpu
def test_jit_on_gpu_arrays_stays_on_gpu(gpu):
    from functrans.backends.cuda.arrays import GpuArray

    @functrans.jit
    def f(w, x):
        return jnp.tanh(x @ w).sum(axis=1), x * 2

    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    gw, gx = functrans.device_put((w, x), gpu)
    for _ in range(3):  # the first call traces, the later ones take the fast path
        out, doubled = f(gw, gx)
        assert isinstance(out, GpuArray) and isinstance(doubled, GpuArray)
    np.testing.assert_allclose(np.asarray(out), np.tanh(x @ w).sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(doubled), x * 2)
    # the same function on CPU arrays runs on the CPU: another cache entry
    cpu_out, _ = f(w, x)
    assert cpu_out._platform == "cpu"
    np.testing.assert_allclose(np.asarray(cpu_out), np.asarray(out), rtol=1e-5, atol=1e-5)


@needs_gpu
def test_results_feed_back_without_copies(gpu):
    step = functrans.jit(lambda p, g: p - 0.5 * g)
    p = functrans.device_put(np.ones(1000, np.float32), gpu)
    g = functrans.device_put(np.full(1000, 2.0, np.float32), gpu)
    for _ in range(4):
        p = step(p, g)
        assert p._host is None  # nothing was read back to the host
    np.testing.assert_array_equal(np.asarray(p), np.full(1000, -3.0, np.float32))


@needs_gpu
def test_eager_ops_and_transforms_on_gpu_arrays(gpu):
    x = functrans.device_put(np.linspace(-1, 1, 7, dtype=np.float32), gpu)
    np.testing.assert_allclose(np.asarray(jnp.sin(x) + 1), np.sin(np.asarray(x)) + 1, rtol=1e-6)
    g = functrans.jit(functrans.grad(lambda v: jnp.sum(jnp.tanh(v) ** 2)))(x)
    v = np.asarray(x, np.float64)
    np.testing.assert_allclose(np.asarray(g), 2 * np.tanh(v) * (1 - np.tanh(v) ** 2), rtol=1e-5)
    per_row = functrans.jit(functrans.vmap(lambda r: r @ r))(
        functrans.device_put(np.arange(12, dtype=np.float32).reshape(3, 4), gpu))
    np.testing.assert_allclose(np.asarray(per_row), [14, 126, 366])


@needs_gpu
def test_gpu_is_the_default_platform_when_present(gpu):
    from functrans.backends.cuda.arrays import GpuArray
    functrans.config.update("default_backend", "")
    assert _backends.default_platform() == "gpu"
    assert functrans.default_device().platform == "gpu"
    assert isinstance(functrans.device_put(np.ones(3, np.float32)), GpuArray)
    out = functrans.jit(lambda v: v + 1)(np.ones(3, np.float32))
    assert isinstance(out, GpuArray)
    np.testing.assert_array_equal(np.asarray(out), 2 * np.ones(3))


@needs_gpu
def test_dlpack_and_cuda_array_interface(gpu):
    import cupy
    x = functrans.device_put(np.arange(6, dtype=np.float32), gpu)
    shared = cupy.from_dlpack(x)
    assert shared.data.ptr == x.device_buffer.data.ptr
    assert cupy.asarray(x).data.ptr == x.device_buffer.data.ptr
    x.block_until_ready()
