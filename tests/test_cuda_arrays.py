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


# =============================================================================================
# The same paths on an emulated GPU (no CuPy needed): GPU arrays are host arrays tagged with
# a GPU, and the "cuda" backend runs the CPU compiler's code with device-array inputs and
# outputs, as the real one does. This checks jit's placement logic anywhere.
# =============================================================================================

from gpu_emulation import EmulatedCupy, EmulatedDeviceArray  # noqa: E402


class EmulatedExecutable:
    """A cuda-backend executable as jit sees it: takes device buffers, returns device
    buffers (always on the GPU, as compiled for jit), wraps them as GpuArrays."""

    takes_device_buffers = True

    def __init__(self, closed, devices=None):
        self.cpu = _backends.get_backend("cpu").compile(closed, devices)
        self.calls = 0
        EmulatedExecutable.compiled.append(self)

    def __call__(self, *args):
        self.calls += 1
        host = [np.asarray(a._checked()) if isinstance(a, EmulatedDeviceArray) else a
                for a in args]
        return [EmulatedCupy._new(np.asarray(o)) for o in self.cpu(*host)]

    @staticmethod
    def wrap_outputs(buffers, avals):
        from functrans.backends.cuda.arrays import wrap_outputs
        return wrap_outputs(buffers, avals)


@pytest.fixture
def emulated_gpu(monkeypatch):
    from functrans.backends import cuda
    from functrans.backends.cuda import arrays
    from functrans.backends.cuda.arrays import GpuDevice
    monkeypatch.setattr(runtime, "cupy_module", lambda: EmulatedCupy)
    monkeypatch.setattr(arrays, "cupy_module", lambda: EmulatedCupy)
    monkeypatch.setattr(runtime, "gpu_count", lambda: 2)
    monkeypatch.setattr(arrays, "_devices_by_ordinal", {})
    monkeypatch.setitem(_backends._registry, "cuda",
                        _backends.Backend("cuda", "gpu", EmulatedExecutable, priority=20))
    monkeypatch.setattr(EmulatedExecutable, "compiled", [], raising=False)
    devices = [GpuDevice(i, 0, i) for i in range(2)]
    monkeypatch.setattr(cuda, "gpu_devices", lambda: devices)
    from functrans import _devices
    monkeypatch.setitem(_devices._extra_platforms, "gpu", lambda: devices)
    return devices


def test_emulated_device_put_keeps_shape_dtype_and_device(emulated_gpu):
    from functrans.backends.cuda.arrays import GpuArray
    gpu = emulated_gpu[1]
    for value in (np.float32(2.5), np.arange(6, dtype=np.int32).reshape(2, 3),
                  np.ones((2, 2), functrans.numpy.bfloat16), 3.0):
        x = functrans.device_put(value, gpu)
        host = np.asarray(value)
        assert isinstance(x, GpuArray) and x.device == gpu
        assert x.device_buffer.gpu == 1
        assert x.shape == host.shape
        np.testing.assert_array_equal(np.asarray(x), host.astype(x.dtype))
    assert functrans.device_put(3.0, gpu).weak_type  # a Python scalar stays weakly typed
    assert functrans.device_put(x, gpu) is x


def test_emulated_jit_runs_where_the_arguments_are(emulated_gpu):
    from functrans.backends.cuda.arrays import GpuArray
    gpu = emulated_gpu[0]
    f = functrans.jit(lambda w, x: (jnp.tanh(x @ w), x.sum()))
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    gw, gx = functrans.device_put((w, x), gpu)
    for _ in range(3):  # trace, then the fast path
        y, s = f(gw, gx)
        assert isinstance(y, GpuArray) and isinstance(s, GpuArray)
        assert y._host is None and y.device_buffer.gpu == 0
    assert len(EmulatedExecutable.compiled) == 1 and EmulatedExecutable.compiled[0].calls == 3
    np.testing.assert_allclose(np.asarray(y), np.tanh(x @ w), rtol=1e-5)
    np.testing.assert_allclose(float(s), x.sum(), rtol=1e-5)
    assert y.device == gpu  # found from the buffer's GPU
    # CPU arguments: the CPU compiler, a separate cache entry
    cpu_y, _ = f(w, x)
    assert cpu_y._platform == "cpu" and f._cache_size() == 2
    assert len(EmulatedExecutable.compiled) == 1
    # results feed back in without copies, and may be mixed with host values
    z = functrans.jit(lambda a, b: a * b + 1.0)(y, np.float32(2))
    assert isinstance(z, GpuArray) and y._host is not None  # (read above by np.asarray)
    np.testing.assert_allclose(np.asarray(z), 2 * np.tanh(x @ w) + 1, rtol=1e-5)


def test_emulated_transforms_under_jit_and_eager_ops(emulated_gpu):
    from functrans.backends.cuda.arrays import GpuArray
    x = functrans.device_put(np.linspace(-1, 1, 6, dtype=np.float32), emulated_gpu[0])
    g = functrans.jit(functrans.grad(lambda v: jnp.sum(jnp.sin(v) ** 2)))(x)
    assert isinstance(g, GpuArray)
    v = np.linspace(-1, 1, 6)
    np.testing.assert_allclose(np.asarray(g), 2 * np.sin(v) * np.cos(v), rtol=1e-5, atol=1e-6)
    rows = functrans.jit(functrans.vmap(jnp.sum))(
        functrans.device_put(np.arange(6, dtype=np.float32).reshape(2, 3), emulated_gpu[0]))
    np.testing.assert_array_equal(np.asarray(rows), [3, 12])
    # eager ops on GPU arrays run on the GPU too, each a one-equation program compiled once
    compiled = len(EmulatedExecutable.compiled)
    for _ in range(3):
        eager = jnp.cos(x) * 2.0
        assert isinstance(eager, GpuArray) and x._host is None
    assert len(EmulatedExecutable.compiled) == compiled + 2  # cos, mul
    np.testing.assert_allclose(np.asarray(eager), 2 * np.cos(v), rtol=1e-6)
    assert isinstance(x[1:3], GpuArray) and isinstance(x.sum(), GpuArray)
    np.testing.assert_allclose(float(x.sum()), v.sum(), atol=1e-6)
    # mixed with host values; an op holding a function (a callback) runs on the host
    mixed = x + np.ones(6, np.float32)
    assert isinstance(mixed, GpuArray)
    seen = []
    functrans.debug.callback(lambda a: seen.append(np.asarray(a)), x)
    np.testing.assert_allclose(seen[0], v, rtol=1e-6)
    # a jit inside a transform of a GPU value is staged, then compiled for the GPU
    h = functrans.jit(lambda v: functrans.jvp(jnp.sin, (v,), (jnp.ones_like(v),))[1])(x)
    assert isinstance(h, GpuArray)
    np.testing.assert_allclose(np.asarray(h), np.cos(v), rtol=1e-5)


def test_emulated_gpu_default_platform(emulated_gpu):
    from functrans.backends.cuda.arrays import GpuArray
    functrans.config.update("default_backend", "")
    assert _backends.default_platform() == "gpu"
    assert functrans.default_device() == emulated_gpu[0]
    x = functrans.device_put(np.ones(3, np.float32))
    assert isinstance(x, GpuArray) and x.device == emulated_gpu[0]
    out = functrans.jit(lambda v: v * 3)(np.ones(3, np.float32))  # host in, GPU out
    assert isinstance(out, GpuArray)
    np.testing.assert_array_equal(np.asarray(out), [3, 3, 3])
    # plain arrays still say they are on the CPU
    assert jnp.ones(2).device.platform == "cpu"
    functrans.config.update("default_backend", "cpu")
    assert functrans.jit(lambda v: v + 1)(np.ones(2, np.float32))._platform == "cpu"


def test_emulated_gpu_arrays_pickle_and_explain_moves(emulated_gpu, caplog):
    import pickle
    x = functrans.device_put(np.arange(3, dtype=np.float32), emulated_gpu[0])
    back = pickle.loads(pickle.dumps(x))
    assert back._platform == "cpu"
    np.testing.assert_array_equal(np.asarray(back), [0, 1, 2])
    functrans.config.update("explain_cache_misses", True)
    f = functrans.jit(lambda v: v + 1)
    f(np.arange(3, dtype=np.float32))
    with caplog.at_level("WARNING", logger="functrans"):
        f(x)
    assert "moved to another device" in caplog.text
