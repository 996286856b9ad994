"""pmap on GPUs: every member's buffers on its own GPU, the program's segments run by the cuda
backend, and the collectives between them carried by NCCL.

``functrans.pmap`` finds this module by its name (``functrans.backends.<backend>.pmap_support``)
when its devices are GPUs, and asks :func:`pmap_placement` for a :class:`GpuPlacement`: the
object that puts a member's inputs on its GPU, runs a compiled segment there, and computes a
collective for every member at the rendezvous (the last device thread to arrive issues one
grouped NCCL call for all local GPUs).

The collective → NCCL translation (:func:`nccl_supports`, :func:`run_collective`) is written
against any array module and any group object with NCCL's semantics, so it is tested on the
CPU with NumPy and a simulated group (tests/test_cuda_pmap.py) as well as on GPUs:

- ``psum``/``pmax``/``pmin``: one all-reduce of the flattened operand (complex sums as sums of
  their real and imaginary parts; ``pmax``/``pmin`` of floats also all-reduce a NaN mask, so a
  NaN on any member gives NaN as ``np.maximum`` does, whatever NCCL's own rule);
- ``all_gather``: an all-gather of the operand's bytes, then the stacked axis moved to
  ``all_gather_dimension`` (merged into it when ``tiled``);
- ``psum_scatter``: the scattered dimension moved to the front and split into one row per
  member, then a reduce-scatter;
- ``all_to_all``: the split axis moved to the front (one row per destination), the rows
  exchanged as bytes, then the source axis moved to ``concat_axis``;
- ``ppermute``: NCCL sends and receives of the operand's bytes.

Moving data as bytes makes ``all_gather``, ``all_to_all`` and ``ppermute`` exact for every
dtype (bool, bfloat16, complex, int16, ...). Reductions over dtypes NCCL cannot reduce
(bfloat16, int16, uint16, bool sums), empty operands and collectives with
``axis_index_groups`` return None from
:meth:`GpuPlacement.collective`, and pmap computes them on host copies instead (the
primitive's reference ``group_impl``): slower, never different numbers. Without NCCL (a CuPy
built without it), every collective takes that path.

    >>> import functrans, numpy as np                            # doctest: +SKIP
    >>> gpus = functrans.devices("gpu")                          # doctest: +SKIP
    >>> f = functrans.pmap(lambda v: functrans.lax.psum(v, "i"), "i",
    ...                    devices=gpus)                         # doctest: +SKIP
    >>> y = f(np.ones((len(gpus), 3), np.float32))               # doctest: +SKIP
    >>> type(y.addressable_shards[0].data).__name__              # doctest: +SKIP
    'GpuArray'
"""
from __future__ import annotations

import contextlib
import logging
import threading

import numpy as np

from functrans import core, distributed
from functrans._array import is_concrete_array
from functrans.backends.cuda import arrays, nccl, runtime
from functrans.backends.cuda.nccl import NCCL_TYPE_NAMES
from functrans.backends.cuda.scalar_ops import storage_dtype
from functrans.primitives import collectives

logger = logging.getLogger("functrans.pmap")

# =============================================================================================
# The plan: a collective's params -> NCCL calls (any array module, any NCCL-like group)
# =============================================================================================

_REDUCE_OPS = {collectives.psum_p: "sum", collectives.pmax_p: "max", collectives.pmin_p: "min"}
_MOVES_BYTES = (collectives.all_gather_p, collectives.all_to_all_p, collectives.ppermute_p)
# callers that hold only a collective's name (a test, a log line) name it so
_BY_NAME = {p.name: p for p in collectives.COLLECTIVES}


def _collective(primitive):
    return _BY_NAME.get(primitive) if isinstance(primitive, str) else primitive


def _sum_dtype(dtype: np.dtype):
    """The dtype NCCL sums ``dtype`` as (complex: its real parts), or None if it cannot."""
    if dtype.kind == "c":
        dtype = np.dtype(f"f{dtype.itemsize // 2}")
    if dtype.kind == "b" or dtype not in NCCL_TYPE_NAMES:
        return None
    return dtype


def nccl_supports(primitive, dtype, size: int) -> bool:
    """Whether the collective ``primitive`` (or its name) on an operand of ``dtype`` with
    ``size`` elements is done by :func:`run_collective`; if not, pmap computes it on host
    copies."""
    primitive, dtype = _collective(primitive), np.dtype(dtype)
    if size == 0:
        return False
    if primitive in _MOVES_BYTES:
        return True
    if primitive in (collectives.psum_p, collectives.reduce_scatter_p):
        return _sum_dtype(dtype) is not None
    if primitive in (collectives.pmax_p, collectives.pmin_p):
        return dtype in NCCL_TYPE_NAMES  # bool as uint8: max/min of 0/1 bytes are or/and
    return False


def run_collective(primitive, params: dict, arrays: list, group, xp,
                   on_member=lambda member: contextlib.nullcontext()) -> list:
    """Every local member's result of the collective ``primitive`` (or its name) with
    ``params`` (the primitive's own), given each local member's operand ``arrays[m]`` (one dtype and shape,
    the dtype as stored: bfloat16 as uint16 bits).

    ``group`` has NCCL's collectives over ``group.size`` ranks (a :class:`nccl.DeviceGroup`);
    local member ``m`` is ``group.ranks[m]``, which is its index along the pmap axis.
    ``xp`` is the array module of ``arrays`` and ``on_member(m)`` a context in which member
    ``m``'s arrays may be operated on (its CUDA device). The caller has checked
    :func:`nccl_supports`."""
    name = primitive if isinstance(primitive, str) else primitive.name
    primitive = _collective(primitive)
    if params.get("axis_index_groups") is not None:
        raise NotImplementedError(f"pmap {name}: no NCCL plan for axis_index_groups; the "
                                  "collective runs on host copies instead")
    n = group.size
    size = params.get("axis_size")
    if size is not None and size != n:
        raise ValueError(f"pmap {name}: the axis has size {size} but the NCCL group has {n} "
                         "ranks")
    dtype, shape = arrays[0].dtype, arrays[0].shape

    def each(fn, *columns):
        out = []
        for m, items in enumerate(zip(*columns)):
            with on_member(m):
                out.append(fn(*items))
        return out

    if primitive in _REDUCE_OPS:
        return _all_reduce(xp, arrays, group, _REDUCE_OPS[primitive], each)

    if primitive is collectives.all_gather_p:
        d, tiled = params["all_gather_dimension"], params["tiled"]
        gathered = group.all_gather(each(lambda a: _bytes(xp, a), arrays))

        def unpack(g):
            out = xp.moveaxis(g.view(dtype).reshape((n,) + shape), 0, d)
            if tiled:  # member-major along d: concatenation in member order
                out = out.reshape(shape[:d] + (n * shape[d],) + shape[d + 1:])
            return xp.ascontiguousarray(out)
        return each(unpack, gathered)

    if primitive is collectives.reduce_scatter_p:
        d, tiled = params["scatter_dimension"], params["tiled"]
        # Row j of (n, -1) is piece j of the total along d: np.split's pieces, in order.
        moved_shape = (shape[d] // n,) + shape[:d] + shape[d + 1:]
        rows = each(lambda a: xp.ascontiguousarray(xp.moveaxis(a, d, 0)).reshape(n, -1), arrays)
        sums = _sum(xp, rows, group, "reduce_scatter", each)

        def unpack(s):
            if not tiled:  # the piece's length-1 dimension d is dropped
                return s.reshape(moved_shape[1:])
            return xp.ascontiguousarray(xp.moveaxis(s.reshape(moved_shape), 0, d))
        return each(unpack, sums)

    if primitive is collectives.all_to_all_p:
        s, c, tiled = params["split_axis"], params["concat_axis"], params["tiled"]
        rest = shape[:s] + shape[s + 1:]
        chunk = shape[s] // n
        # Row j (the chunk for member j) is x's split axis, moved to the front, cut n ways.
        rows = each(lambda a: _bytes(xp, xp.moveaxis(a, s, 0), n), arrays)
        received = group.all_to_all(rows)  # received[i] is member i's chunk for this member

        def unpack(r):
            if not tiled:
                return xp.ascontiguousarray(xp.moveaxis(r.view(dtype).reshape((n,) + rest), 0, c))
            chunks = xp.moveaxis(r.view(dtype).reshape((n, chunk) + rest), 1, s + 1)
            joined = xp.moveaxis(chunks, 0, c)  # then merged with axis c: member-major
            piece = chunks.shape[1:]
            return joined.reshape(piece[:c] + (n * piece[c],) + piece[c + 1:])
        return each(unpack, received)

    if primitive is collectives.ppermute_p:
        moved = group.permute(each(lambda a: _bytes(xp, a), arrays), params["perm"])
        return each(lambda b: b.view(dtype).reshape(shape), moved)

    raise NotImplementedError(f"pmap: no NCCL plan for the collective {name}")


def _bytes(xp, a, rows: int | None = None):
    """``a``'s bytes, C order, as uint8 of shape (-1,) or (rows, -1)."""
    a = xp.ascontiguousarray(a)
    return a.reshape((-1,) if rows is None else (rows, -1)).view(xp.uint8)


def _sum(xp, arrays, group, collective: str, each):
    """``group.all_reduce`` / ``group.reduce_scatter`` with op sum; complex operands as their
    interleaved real and imaginary parts (the sum of each part is the part of the sum)."""
    dtype = arrays[0].dtype
    real = _sum_dtype(np.dtype(dtype))
    if real != dtype:
        arrays = each(lambda a: a.view(real), arrays)
    outs = getattr(group, collective)(arrays, "sum")
    return outs if real == dtype else each(lambda o: o.view(dtype), outs)


def _all_reduce(xp, arrays, group, op: str, each):
    dtype, shape = arrays[0].dtype, arrays[0].shape
    flat = each(lambda a: xp.ascontiguousarray(a).reshape(-1), arrays)
    if op == "sum":
        outs = _sum(xp, flat, group, "all_reduce", each)
    elif dtype == np.bool_:
        outs = each(lambda o: o.view(xp.bool_),
                    group.all_reduce(each(lambda a: a.view(xp.uint8), flat), op))
    else:
        outs = group.all_reduce(flat, op)
        if dtype.kind == "f":
            # np.maximum/np.minimum propagate NaN; make the result agree whatever NCCL does.
            masks = group.all_reduce(each(lambda a: xp.isnan(a).view(xp.uint8), flat), "max")
            outs = each(lambda o, m: xp.where(m.view(xp.bool_), xp.asarray(np.nan, dtype), o),
                        outs, masks)
    return each(lambda o: o.reshape(shape), outs)


# =============================================================================================
# GPU placement: what pmap asks of the devices
# =============================================================================================

_groups: dict = {}
_groups_lock = threading.Lock()
_warned_no_nccl = False


def device_group(local_ids):
    """The NCCL group of these local GPUs (rank ``i`` is ``local_ids[i]``), made once; across
    every process's GPUs when ``functrans.distributed`` runs several processes. None when NCCL
    cannot be loaded (collectives then run on host copies)."""
    global _warned_no_nccl
    key = (tuple(int(i) for i in local_ids), distributed.process_count())
    with _groups_lock:
        if key in _groups:
            return _groups[key]
        try:
            if distributed.process_count() == 1:
                group = nccl.DeviceGroup.single_process(key[0])
            else:
                # Process p's GPUs are global ranks p*n .. p*n+n-1: pmap's member indices.
                group = nccl.DeviceGroup.from_mpi(list(key[0]))
        except RuntimeError as err:  # CuPy without NCCL: correct, slower collectives
            if not _warned_no_nccl:
                logger.warning("pmap on GPUs: NCCL is unavailable (%s); collectives run on "
                               "host copies", err)
                _warned_no_nccl = True
            group = None
        _groups[key] = group
        return group


def _cupy():
    cp = runtime.cupy_module()
    if cp is None:
        raise RuntimeError("pmap over GPU devices needs CuPy: pip install functrans[cuda]")
    return cp


def _wait_for_current_stream(cp) -> None:
    """Work on the legacy default stream (CuPy's default) is ordered across host threads on a
    device; any other stream is waited for, so that the thread issuing the NCCL calls and the
    member threads see each other's results."""
    stream = cp.cuda.get_current_stream()
    if stream.ptr != 0:
        stream.synchronize()


class GpuPlacement:
    """pmap's buffers on GPUs: member ``m``'s values are :class:`GpuArray`s on
    ``devices[m]`` (host NumPy arrays only for literals and ``axis_index``)."""

    def __init__(self, devices):
        self.devices = list(devices)
        for d in self.devices:
            if not isinstance(d, arrays.GpuDevice):
                raise TypeError(f"pmap: {d!r} is not a GPU device")
            if d.process_index != distributed.process_index():
                raise ValueError(f"pmap: {d!r} belongs to process {d.process_index}; a process "
                                 "runs only its own GPUs")
        self.local_ids = [int(d.local_id) for d in self.devices]
        if len(set(self.local_ids)) != len(self.local_ids):
            raise ValueError(f"pmap: a GPU is listed twice in devices={self.devices}")
        self._gpu_array = arrays.GpuArray
        self._cp = _cupy()
        self._group = None

    def _on(self, member: int):
        return self._cp.cuda.Device(self.local_ids[member])

    def _wrap(self, member: int, buffer, dtype, weak_type: bool):
        return self._gpu_array(buffer, dtype, weak_type, self.devices[member])

    # ---- before a call -------------------------------------------------------------------

    def prepare(self, needs_collectives: bool) -> None:
        """Make the NCCL group before the device threads start: under MPI every process
        makes it at the same point of the same program."""
        if needs_collectives and self._group is None:
            self._group = device_group(self.local_ids)

    # ---- member values -----------------------------------------------------------------

    def put(self, member: int, x, aval=None):
        """``x`` as a value of ``member``: a GpuArray on its GPU (no copy when it is there)."""
        if isinstance(x, self._gpu_array):
            if int(x.device_buffer.device.id) == self.local_ids[member]:
                return x
            # on another GPU: through the host, simple and always right
            return self._upload(member, x._value, x.weak_type)
        if is_concrete_array(x):
            return self._upload(member, x._value, x.weak_type)
        if not isinstance(x, np.ndarray):
            x = core.to_numpy(x, aval)
        return self._upload(member, x, False if aval is None else aval.weak_type)

    def _upload(self, member: int, host, weak_type: bool):
        host = np.asarray(host)
        # np.ascontiguousarray gives a 0-d array one dimension: the reshape keeps its shape
        contiguous = np.ascontiguousarray(host).reshape(host.shape)
        with self._on(member):
            buffer = self._cp.asarray(contiguous.view(storage_dtype(host.dtype)))
        return self._wrap(member, buffer, host.dtype, weak_type)

    def to_host(self, member: int, x) -> np.ndarray:
        if is_concrete_array(x):
            with self._on(member):
                return x._value
        return np.asarray(x)

    def run_segment(self, member: int, executable, args: list, out_avals) -> list:
        buffers = [a.device_buffer if isinstance(a, self._gpu_array) else a for a in args]
        with self._on(member):
            outs = executable(*buffers)
        return [o if isinstance(o, np.ndarray) else self._wrap(member, o, a.dtype, a.weak_type)
                for o, a in zip(outs, out_avals)]

    def exchange_value(self, member: int, x):
        """What member ``member`` hands to the rendezvous: its operand, on its GPU."""
        x = self.put(member, x)
        with self._on(member):
            _wait_for_current_stream(self._cp)
        return x

    def collective_result(self, member: int, x, aval):
        if isinstance(x, np.ndarray) or not is_concrete_array(x):  # axis_index: host int32
            return np.asarray(x, dtype=aval.dtype)
        return x

    def output_shard(self, member: int, x, aval):
        """An output of member ``member`` as a GpuArray on its GPU."""
        if not isinstance(x, self._gpu_array):
            x = self.put(member, np.asarray(x, dtype=aval.dtype))
        if x.weak_type != aval.weak_type or x.device_buffer.device.id != self.local_ids[member]:
            x = self._wrap(member, self.put(member, x).device_buffer, aval.dtype, aval.weak_type)
        return x

    # ---- the collective, computed by the last thread to arrive ---------------------------

    def collective(self, primitive, params: dict, values: list, process_offset: int):
        """Every local member's result through NCCL, or None when NCCL cannot compute it (pmap
        then computes it on host copies)."""
        first = values[0]
        if self._group is None or not nccl_supports(primitive, first.dtype, first.size):
            return None
        if params.get("axis_index_groups") is not None:
            # One NCCL communicator spans every member; a grouped collective is computed on
            # host copies, one group at a time (the primitive's group_impl).
            return None
        cp = self._cp
        outs = run_collective(primitive, params, [v.device_buffer for v in values],
                              self._group, cp, self._on)
        for m in range(len(outs)):
            with self._on(m):
                _wait_for_current_stream(cp)
        return [self._wrap(m, o, first.dtype, first.weak_type) for m, o in enumerate(outs)]


def pmap_placement(devices) -> GpuPlacement:
    """What ``functrans.pmap`` calls for a device list of GPUs."""
    return GpuPlacement(devices)


__all__ = ["GpuPlacement", "device_group", "nccl_supports", "pmap_placement", "run_collective"]
