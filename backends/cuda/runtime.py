"""The CUDA runtime: compile a program's CUDA C with NVRTC (through CuPy) and run it.

:class:`CudaExecutable` follows the schedule of a :class:`~codegen.CudaModule`: generated
kernels are launched on the current CuPy stream, matrix products go to cuBLAS through
``cupy.matmul``, control flow runs its compiled bodies from the host (a
:class:`~control_flow.ControlLaunch`: the carries stay on the device, only a loop predicate
or branch index is read back), and steps the GPU code cannot do (a :class:`FallbackStep`)
run their primitive's reference implementation on the host, with a copy each way. Intermediates live
in one device arena laid out by the llvm backend's buffer planner; outputs are fresh arrays.

Arguments may be NumPy arrays (copied to the device; results come back as NumPy arrays) or
device arrays: a CuPy array, or anything with ``__dlpack__`` or ``__cuda_array_interface__``
(taken without a copy; results stay on the device as CuPy arrays). bfloat16, which CuPy does
not know, travels as its ``uint16`` bit patterns on the device.

The same schedule runs on the CPU with the kernels compiled as host code (see
:mod:`host_emulation`): the steps are written once, against a small :class:`ArrayBackend`.

    $ python -c "import functrans, functrans.numpy as jnp; \\
    >     print(functrans.jit(jnp.sin, backend='cuda')(jnp.ones(3)))"
"""
from __future__ import annotations

import hashlib
import threading

import numpy as np

from functrans._caches import LRUCache
from functrans._config import config
from functrans.backends.compiler import fusion, native_steps
from functrans.backends.compiler.buffers import ALIGNMENT, plan_buffers
from functrans.backends.compiler.decompose import decompose_closed
from functrans.backends.compiler.fusion import Buffer, DotKernel, FallbackStep
from functrans.backends.compiler.passes import Pass, run_passes
from functrans.backends.compiler.verify import verify_plan
from functrans.backends.cuda import codegen
from functrans.backends.cuda.arrays import wrap_outputs as wrap_device_outputs
from functrans.backends.cuda.control_flow import ControlLaunch
# the rest of the backend (and pmap's support) finds CuPy through here
from functrans.backends.cuda.driver import cupy_module, gpu_count, is_available  # noqa: F401
from functrans.backends.cuda.kernel_source import BLOCK_SIZE, KernelLaunch
from functrans.backends.cuda.scalar_ops import BFLOAT16, storage_dtype
from functrans.core import ClosedJaxpr, to_numpy

NVRTC_OPTIONS = ("--std=c++14",)


# =============================================================================================
# Where arrays live: the device (CuPy) or, for emulation, the host (NumPy)
# =============================================================================================


class ArrayBackend:
    """Memory and kernel launches for :meth:`CudaExecutable.run_schedule`."""

    xp = np

    def empty(self, shape, dtype):
        return self.xp.empty(shape, dtype)

    def pointer(self, array) -> int:
        raise NotImplementedError

    def from_host(self, array: np.ndarray):
        raise NotImplementedError

    def to_host(self, array) -> np.ndarray:
        raise NotImplementedError

    def launch(self, launch: KernelLaunch, pointers: list, scratch: int) -> None:
        raise NotImplementedError


class DeviceBackend(ArrayBackend):
    """CuPy arrays on one GPU; kernels from the module compiled for it."""

    def __init__(self, cupy, raw_module, device_id: int):
        self.xp = cupy
        self.module = raw_module
        self.device_id = device_id
        self.functions: dict = {}
        with cupy.cuda.Device(device_id):
            attrs = cupy.cuda.Device(device_id).attributes
            self.sm_count = int(attrs.get("MultiProcessorCount", 80))

    def pointer(self, array) -> int:
        return int(array.data.ptr)

    def from_host(self, array):
        return self.xp.asarray(array)

    def to_host(self, array) -> np.ndarray:
        return self.xp.asnumpy(array)

    def function(self, name):
        fn = self.functions.get(name)
        if fn is None:
            fn = self.functions[name] = self.module.get_function(name)
        return fn

    def launch(self, launch: KernelLaunch, pointers: list, scratch: int) -> None:
        args = tuple(np.uint64(p) for p in pointers)
        for name, grid, extra in launch_plan(launch, self.sm_count):
            prefix = (np.uint64(scratch),) if extra else ()
            self.function(name)((grid,), (BLOCK_SIZE,), prefix + args)


def launch_plan(launch: KernelLaunch, sm_count: int) -> list:
    """(kernel name, grid size, takes the scratch pointer) for each launch of a kernel.
    Grids are capped at a few waves of the GPU; the kernels' grid-stride loops do the rest."""
    cap = max(1, sm_count * 32)
    blocks = lambda n: max(1, min(-(-n // BLOCK_SIZE), cap))  # noqa: E731
    if launch.strategy in ("loop", "thread"):
        return [(launch.name, blocks(launch.count), False)]
    if launch.strategy == "block":
        return [(launch.name, max(1, min(launch.count, cap)), False)]
    return [(launch.name + "_partial", max(1, min(launch.count * launch.partitions, 2 ** 31 - 1)), True),
            (launch.finish_name, max(1, min(launch.count, cap)), True)]


# NVRTC output, per source and device: compiling is the slow part of a first call. At most
# config.executable_cache_max_entries modules, the least recently used evicted.
_modules = LRUCache("executable_cache_max_entries")
_modules_lock = threading.Lock()


def compile_source(cupy, source: str, device_id: int):
    """A ``cupy.RawModule`` of ``source`` for ``device_id``, cached by the source's hash."""
    key = (hashlib.sha256(source.encode()).hexdigest(), device_id)
    with _modules_lock:
        module = _modules.lookup(key)
        if module is None:
            with cupy.cuda.Device(device_id):
                module = cupy.RawModule(code=source, options=NVRTC_OPTIONS)
                module.compile()  # compile now, so errors surface at compile time
            _modules.insert(key, module)
    return module


# =============================================================================================
# Executable
# =============================================================================================


class CudaExecutable:
    """A compiled program: ``executable(*arrays) -> list of arrays`` (see the module doc)."""

    # jit hands GpuArrays over as their CuPy buffers (see functrans._jit)
    takes_device_buffers = True

    def __init__(self, module: codegen.CudaModule, device_id: int | None = None,
                 use_cuda_graph: bool = False, device_outputs: bool = False):
        self.module = module
        self.device_outputs = device_outputs
        self.program = module.program
        self.plan = plan_buffers(self.program)
        if config.verify_plans:
            verify_plan(self.program, self.plan)
        self.device_id = device_id
        # graphs need fixed memory: only kernels, and every output a distinct fresh buffer
        outs = [b for b in self.program.outputs if isinstance(b, Buffer)]
        self.use_cuda_graph = (use_cuda_graph
                               and all(isinstance(s, KernelLaunch) for s in module.schedule)
                               and all(b.kind == "output" for b in outs)
                               and len({b.id for b in outs}) == len(outs))
        self._backends: dict = {}
        self._consts: dict = {}
        self._graphs: dict = {}
        self._lock = threading.Lock()

    # ---- text --------------------------------------------------------------------------------

    def as_text(self) -> str:
        return self.program.describe() + "\n\n" + self.module.source

    @staticmethod
    def wrap_outputs(buffers, avals) -> list:
        """functrans arrays of a call's results (GpuArray for device buffers)."""
        return wrap_device_outputs(buffers, avals)

    # ---- calling -----------------------------------------------------------------------------

    def __call__(self, *args):
        cp = cupy_module()
        if cp is None or not is_available():
            raise RuntimeError("the cuda backend needs CuPy and a CUDA GPU: install the extra "
                               "with `pip install functrans[cuda]` (cupy-cuda12x)")
        on_device = self.device_outputs or any(_is_device_array(cp, a) for a in args)
        outs = self.call_device(*args)
        if on_device:
            return outs
        return [o if isinstance(o, np.ndarray) else _logical(cp.asnumpy(o), b)
                for o, b in zip(outs, self.program.outputs)]

    def call_device(self, *args) -> list:
        """Run on the GPU and return CuPy arrays (bfloat16 as uint16 bit patterns)."""
        cp = cupy_module()
        if len(args) != len(self.program.inputs):
            raise TypeError(f"compiled program takes {len(self.program.inputs)} arguments, "
                            f"got {len(args)}")
        device_id = self.device_id
        if device_id is None:  # where the arguments are, else CuPy's current device
            device_id = next((int(a.device.id) for a in args if isinstance(a, cp.ndarray)),
                             None)
            if device_id is None:
                device_id = cp.cuda.Device().id
        with cp.cuda.Device(device_id):
            backend = self.backend(cp, device_id)
            if self.use_cuda_graph:
                return self._call_graph(cp, backend, args)
            return self.run_schedule(backend, [self._device_input(cp, a, b)
                                               for a, b in zip(args, self.program.inputs)])

    def backend(self, cp, device_id: int) -> DeviceBackend:
        backend = self._backends.get(device_id)
        if backend is None:
            with self._lock:
                backend = self._backends.get(device_id)
                if backend is None:
                    raw = compile_source(cp, self.module.source, device_id)
                    backend = self._backends[device_id] = DeviceBackend(cp, raw, device_id)
        return backend

    def _device_input(self, cp, arg, buf: Buffer):
        dtype = storage_dtype(buf.dtype)
        # kernels index inputs by the compiled shape, unchecked: a same-size array of
        # another shape (a transpose) must not be reshaped into it silently
        if tuple(getattr(arg, "shape", np.shape(arg))) != buf.shape:
            raise TypeError(f"compiled program: an argument must be an array of type "
                            f"{buf.dtype.name}[{','.join(map(str, buf.shape))}], got one of "
                            f"shape {tuple(getattr(arg, 'shape', np.shape(arg)))}")
        if isinstance(arg, cp.ndarray):
            array = arg
        elif not isinstance(arg, np.ndarray) and (hasattr(arg, "__cuda_array_interface__")
                                                   or _dlpack_on_gpu(arg)):
            array = cp.asarray(arg) if hasattr(arg, "__cuda_array_interface__") else cp.from_dlpack(arg)
        else:
            host = np.asarray(arg)
            if host.dtype != buf.dtype:
                host = host.astype(buf.dtype)
            return cp.asarray(np.ascontiguousarray(host).view(dtype).reshape(buf.shape))
        if array.dtype != dtype:
            if buf.dtype == BFLOAT16:
                raise TypeError(f"cuda backend: a bfloat16 argument on the device must be given as "
                                f"uint16 bit patterns, got {array.dtype}")
            array = array.astype(dtype)
        return cp.ascontiguousarray(array).reshape(buf.shape)

    # ---- the schedule ------------------------------------------------------------------------

    def const_arrays(self, backend: ArrayBackend, key) -> dict:
        """The program's constants on ``backend``, uploaded once."""
        consts = self._consts.get(key)
        if consts is None:
            consts = {b.id: backend.from_host(_storage(to_numpy(b.value), b)) for b in self.program.consts}
            self._consts[key] = consts
        return consts

    @property
    def arena_bytes(self) -> int:
        """Intermediates (as planned), then the scratch space of split reductions."""
        return _round_up(self.plan.arena_size) + self.module.scratch_bytes

    def run_schedule(self, backend: ArrayBackend, inputs: list, key=None, arena=None,
                     outputs=None) -> list:
        """Run every step on ``backend`` with ``inputs`` already there (storage dtype, the
        input buffers' shapes). Returns the outputs on ``backend`` (literal outputs as NumPy).
        ``arena`` (``arena_bytes`` of uint8) and ``outputs`` (buffer id -> array) may be
        given to run in fixed memory; by default both are allocated per call."""
        program, xp = self.program, backend.xp
        arrays: dict = dict(outputs or {})
        arrays.update({b.id: a for b, a in zip(program.inputs, inputs)})
        arrays.update(self.const_arrays(backend, key if key is not None else id(backend)))
        scratch_offset = _round_up(self.plan.arena_size)
        if arena is None:
            arena = backend.empty((self.arena_bytes,), np.uint8)
        arena_ptr = backend.pointer(arena) if arena.size else 0

        def array_of(buf: Buffer):
            a = arrays.get(buf.id)
            if a is None:
                if buf.kind == "temp":
                    start = self.plan.offsets[buf.id]
                    a = arena[start:start + buf.nbytes].view(storage_dtype(buf.dtype)).reshape(buf.shape)
                else:  # an output: a fresh array per call
                    a = backend.empty(buf.shape, storage_dtype(buf.dtype))
                arrays[buf.id] = a
            return a

        def pointer(buf: Buffer) -> int:
            if buf.kind == "temp":
                return arena_ptr + self.plan.offsets[buf.id]
            return backend.pointer(array_of(buf))

        const_key = key if key is not None else id(backend)
        for item in self.module.schedule:
            if isinstance(item, KernelLaunch):
                backend.launch(item, [pointer(b) for b in item.buffers], arena_ptr + scratch_offset)
            elif isinstance(item, DotKernel):
                _run_dot(xp, item, array_of)
            elif isinstance(item, FallbackStep):
                self._run_fallback(backend, item, array_of, arrays)
            elif isinstance(item, ControlLaunch):
                item.run(backend, array_of, arrays, const_key, CudaExecutable)
            else:
                raise NotImplementedError(f"cuda backend: schedule item {item!r}")

        results = []
        for out in program.outputs:
            if not isinstance(out, Buffer):
                results.append(np.asarray(out))
                continue
            a = array_of(out)
            if out.kind in ("output", "fallback") and not any(r is a for r in results):
                results.append(a)
            else:  # an input, a constant or a repeated output: the caller gets its own copy
                results.append(a.copy())
        return results

    def _run_fallback(self, backend, step: FallbackStep, array_of, arrays):
        """The equation's reference implementation on host copies of its operands."""
        ins = [_logical(backend.to_host(array_of(x)), x) if isinstance(x, Buffer) else x
               for x in step.inputs]
        prim = step.eqn.primitive
        outs = prim.run_impl(*ins, **step.eqn.params)
        if not prim.multiple_results:
            outs = [outs]
        for buf, value in zip(step.outputs, outs):
            if buf is None:
                continue
            value = np.asarray(to_numpy(value))
            if value.dtype != buf.dtype:
                value = value.astype(buf.dtype)
            arrays[buf.id] = backend.from_host(_storage(value.reshape(buf.shape), buf))

    # ---- CUDA graphs: one launch for the whole program ------------------------------------------

    def _call_graph(self, cp, backend: DeviceBackend, args) -> list:
        """Replay a captured graph of every kernel. A graph bakes in its pointers, so inputs
        are copied into fixed buffers and outputs copied out of fixed ones; calls are
        serialized."""
        with self._lock:
            state = self._graphs.get(backend.device_id)
            if state is None:
                program = self.program
                staging = [cp.empty(b.shape, storage_dtype(b.dtype)) for b in program.inputs]
                arena = cp.empty((self.arena_bytes,), np.uint8)
                outputs = {b.id: cp.empty(b.shape, storage_dtype(b.dtype)) for b in program.outputs
                           if isinstance(b, Buffer)}
                self.const_arrays(backend, backend.device_id)  # uploads happen before capture
                stream = cp.cuda.Stream(non_blocking=True)
                with stream:
                    stream.begin_capture()
                    results = self.run_schedule(backend, staging, backend.device_id, arena, outputs)
                    graph = stream.end_capture()
                state = self._graphs[backend.device_id] = (staging, stream, graph, results)
            staging, stream, graph, results = state
            with stream:
                for dst, a, b in zip(staging, args, self.program.inputs):
                    dst[...] = self._device_input(cp, a, b)
                graph.launch(stream)
                copies = [r if isinstance(r, np.ndarray) else r.copy() for r in results]
            stream.synchronize()
            return copies


def _round_up(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _storage(array: np.ndarray, buf: Buffer) -> np.ndarray:
    array = np.ascontiguousarray(np.asarray(array, dtype=buf.dtype))
    return array.view(storage_dtype(buf.dtype)).reshape(buf.shape)


def _logical(array: np.ndarray, buf: Buffer) -> np.ndarray:
    """A host array in the buffer's own dtype (bfloat16 from its bits)."""
    return array.view(buf.dtype) if buf.dtype == BFLOAT16 else array


def _run_dot(xp, step: DotKernel, array_of) -> None:
    out = array_of(step.out).reshape(step.batch, step.m, step.n)
    if step.k == 0:
        out[...] = 0
        return
    lhs = array_of(step.lhs).reshape((step.batch, step.k, step.m) if step.lhs_transposed
                                     else (step.batch, step.m, step.k))
    rhs = array_of(step.rhs).reshape((step.batch, step.n, step.k) if step.rhs_transposed
                                     else (step.batch, step.k, step.n))
    if step.lhs_transposed:
        lhs = lhs.transpose(0, 2, 1)
    if step.rhs_transposed:
        rhs = rhs.transpose(0, 2, 1)
    xp.matmul(lhs, rhs, out=out)


def _is_device_array(cp, a) -> bool:
    return isinstance(a, cp.ndarray) or (not isinstance(a, np.ndarray) and (
        hasattr(a, "__cuda_array_interface__") or _dlpack_on_gpu(a)))


def _dlpack_on_gpu(a) -> bool:
    device = getattr(a, "__dlpack_device__", None)
    if device is None:
        return False
    try:
        return int(device()[0]) in (2, 3)  # kDLCUDA, kDLCUDAHost
    except Exception:
        return False


# =============================================================================================
# The backend entry point
# =============================================================================================


def compile_jaxpr(closed: ClosedJaxpr, devices=None, *, fuse: bool = True,
                  use_cuda_graph: bool = False, device_outputs: bool = False) -> CudaExecutable:
    """Fuse ``closed``, generate its CUDA C and return the executable. NVRTC runs on the
    first call on each device, so this works (and ``as_text`` shows the code) without a GPU.

    ``devices``: the first one's local id picks the GPU; by default the device of the
    arguments, else CuPy's current device. ``device_outputs``: results stay on the GPU (as
    CuPy arrays) even for host arguments, as jit wants."""
    program = run_passes("cuda", passes(fuse), closed)
    device_id = None
    if devices:
        device_id = int(getattr(devices[0], "local_id", 0))
    return CudaExecutable(program, device_id, use_cuda_graph, device_outputs)


def passes(fuse: bool = True) -> list[Pass]:
    """The cuda compiler, jaxpr to CUDA C, as named passes (see
    :mod:`functrans.backends.compiler.passes` for dumping them, and for disabling the
    optional ones by name)."""
    return [
        Pass("decompose", decompose_closed),  # e.g. convolutions as im2col + cuBLAS
        Pass("inline", fusion.flat_closed, required=True),
        Pass("consts_to_host", _consts_to_host, required=True),
        Pass("fuse", _fuse(fuse), off=_fuse(False)),
        native_steps.lowering_pass(codegen.TARGET),
        Pass("generate", codegen.generate, required=True),
    ]


def _fuse(fuse: bool):
    return lambda closed: codegen.fuse_program(closed.jaxpr, closed.consts, fuse=fuse)


def optional_passes() -> list:
    """The names that the config option ``disable_passes`` may list for this backend."""
    return [p.name for p in passes() if not p.required]


def _consts_to_host(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Constants as NumPy arrays: the planner copies them into the module's buffers."""
    return ClosedJaxpr(closed.jaxpr, [to_numpy(c) for c in closed.consts])
