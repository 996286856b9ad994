"""Attention, flash-style: the matrix products around a row group run block by block.

Attention is ``softmax(mask(q @ kᵀ)) @ v``. Fusion leaves it as a batched product writing
the ``[batch, query, key]`` scores, a row group (see :mod:`row_fusion`) turning each row of
scores into probabilities, and a product reading them; its gradient as products writing and
reading score-sized buffers around another row group. Each such buffer is written to memory
whole by one step and read back by the next: 16 MiB each for 8 heads of 256 tokens at batch
8, far more than the caches hold.

The pass ``block_attention`` merges a row group with the products that produce its rows
(*producers*: a product whose output only the group reads) and the products that read rows
it writes or reads (*consumers*: a product whose left operand is such a buffer, as it is or
transposed) into one :class:`AttentionStep`. The step runs them block by block: for each
batch element and block of rows, the producers compute the block's rows into a tile sized
to stay in the L2 cache (``BLOCK_BYTES``), the group runs over those rows, and the consumers
multiply them while they are still in cache. A buffer only the step reads (the scores, the
gradient of the scores) is never in memory whole: only its tiles, one per chunk of work in
flight, live in the arena. A row group holds whole rows (it exists only where a row fits on
the stack), so a block needs no running maximum: each row's softmax is computed once, as
without blocking, and only the products' summation order differs.

Blocks skip work that cannot change the result (see :mod:`attention_code`):

* a producer computes only the columns whose value the group can use: where a ``select``
  with a condition known before the product (a causal mask, a sliding window, a padding
  mask read from an input) replaces it in every row of the block, it is left out;
* a consumer multiplies only the columns of its block that hold a nonzero, found at run
  time, provided the other operand is finite where the zeros are skipped (checked: else the
  block runs whole, so an inf or NaN there still turns the sum into the NaN it would be).

A consumer whose left operand is transposed (``pᵀ @ do``) sums over the rows of every
block: its blocks of one batch element run in order on one thread, each adding to the
output, and threads share the work by batch elements.

    >>> program = block_attention(program)                       # doctest: +SKIP
    >>> [s.describe() for s in program.steps if isinstance(s, AttentionStep)]  # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.fusion import (Buffer, DotKernel, LoopKernel, Program, Step,
                                                unique_buffers)
from functrans.backends.llvm import scalar_ops, thread_pool
from functrans.backends.llvm.row_fusion import RowGroup
from functrans.primitives import elementwise as ew

# A block's rows, in every tile and row buffer the step touches, take at most this many
# bytes, so that they stay in the L2 cache between the products and the group (the tiles of
# 64 rows of 256 float32 scores: 64 KiB each).
BLOCK_BYTES = 128 << 10
# Blocks of more rows than this are a multiple of it: BLAS kernels work on panels of rows.
BLOCK_ROW_MULTIPLE = 8
# An operand every block of a batch element reads again (the keys, the values, the output a
# transposed consumer adds to) is at most this large, or blocking would re-read it from
# memory (and re-pack it, inside BLAS) once per block: then the product stays whole.
SHARED_OPERAND_BYTES = 512 << 10
# Blocking starts where a buffer of the group's rows (rows x width) takes at least this
# many bytes: smaller ones stay in the cache from one step to the next anyway, and the
# blocks' many short BLAS calls would cost more than they save.
MIN_ROWS_BYTES = 1 << 20
# Chunks of work per thread: a thread that loses its core to another process holds up one
# chunk, not its whole share.
CHUNKS_PER_THREAD = 4


class AttentionStep(Step):
    """A row group and the products around it, run block by block (module docstring).

    ``producers`` are ``(DotKernel, tile, live)``: the product, the tile its block of rows
    goes to (``[chunks, block_rows, width]``) and the condition (a boolean expression of the
    group's row and column, or None: always) where the group can use its value.
    ``consumers`` are ``(DotKernel, rows)``: the product and the buffer its left operand's
    blocks are read from, a tile or the whole buffer. ``group`` addresses the tiles row by
    row (its ``tiled`` buffers)."""

    def __init__(self, group: RowGroup, producers: list, consumers: list, batch: int,
                 block_rows: int, chunks: int):
        self.group = group
        self.producers = producers
        self.consumers = consumers
        self.batch = batch
        self.rows_per_batch = group.shape[0] // batch
        self.width = group.shape[1]
        self.block_rows = block_rows
        self.blocks = -(-self.rows_per_batch // block_rows)
        self.chunks = chunks
        self.prims = tuple(dict.fromkeys(("dot_general",) + group.prims))

    @property
    def accumulates(self) -> bool:
        """Whether a consumer sums over the blocks (its left operand is transposed): then a
        unit of work is a batch element, else a block."""
        return any(dot.lhs_transposed for dot, _ in self.consumers)

    @property
    def units(self) -> int:
        return self.batch if self.accumulates else self.batch * self.blocks

    @property
    def tiles(self) -> list:
        return list(self.group.tiled)

    def reads(self):
        tiles = {t.id for t in self.group.tiled}
        written = tiles | {b.id for b in self.group.writes()}
        buffers = [x for dot, _, _ in self.producers for x in (dot.lhs, dot.rhs)]
        buffers += self.group.reads()
        for dot, rows in self.consumers:
            buffers += [rows, dot.rhs] + ([dot.out] if dot.accumulate else [])
        return [b for b in unique_buffers(buffers) if b.id not in written]

    def writes(self):
        return unique_buffers(self.group.tiled + self.group.writes() +
                              [dot.out for dot, _ in self.consumers])

    def describe(self):
        producers = "; ".join(f"{dot.describe()}{' where live' if live is not None else ''}"
                              f" -> tile %{tile.id}" for dot, tile, live in self.producers)
        consumers = "; ".join(f"{dot.describe()} (rows of %{rows.id})"
                              for dot, rows in self.consumers)
        return (f"attention[batch {self.batch} x {self.blocks} blocks of {self.block_rows} "
                f"rows, {self.chunks} chunks] producers [{producers}] "
                f"{self.group.describe()} consumers [{consumers}]")


# =============================================================================================
# The pass
# =============================================================================================


def block_attention(program: Program) -> Program:
    """``program`` with each row group that has producers or consumers (see the module
    docstring) merged with them into an :class:`AttentionStep`."""
    with E.lock:
        while _block_one(program):
            pass
    return program


def _block_one(program: Program) -> bool:
    """Merge the first row group that can be; whether one was."""
    readers: dict = {}
    writers: dict = {}
    for k, step in enumerate(program.steps):
        for b in step.reads():
            readers.setdefault(b.id, set()).add(k)
        for b in step.writes():
            writers.setdefault(b.id, set()).add(k)
    results = {b.id for b in program.outputs if isinstance(b, Buffer)}
    for g, step in enumerate(program.steps):
        if not isinstance(step, RowGroup) or step.tiled:
            continue
        found = _members(program.steps, g, readers, writers, results)
        if found is None:
            continue
        producers, consumers, batch = found
        members = {g} | {p for p, _ in producers} | {c for c, _, _ in consumers}
        blocked = _build(program, g, producers, consumers, batch, readers, results)
        if blocked is None:
            continue
        last = max(members)
        program.steps = [blocked if k == last else s for k, s in enumerate(program.steps)
                         if k not in members or k == last]
        return True
    return False


def _row_offsets(group: RowGroup) -> dict:
    """For every buffer the group reads or writes in memory: the set of index expressions it
    is addressed at."""
    inside = {b.id for b in group.internal}
    offsets: dict = {}
    for part in group.parts:
        values = [v for _, _, v in part.outputs] if isinstance(part, LoopKernel) else [part.value]
        for node in E.loads(values):
            buf, offset = node.args
            if buf.id not in inside:
                offsets.setdefault(buf.id, (buf, set()))[1].add(offset)
        stores = [(b, off) for b, off, _ in part.outputs] if isinstance(part, LoopKernel) \
            else [(part.out, part.out_offset)]
        for buf, offset in stores:
            if buf.id not in inside:
                offsets.setdefault(buf.id, (buf, set()))[1].add(offset)
    return offsets


def _float_product(dot) -> bool:
    return isinstance(dot, DotKernel) and dot.k > 0 and \
        dot.out.dtype in (np.float32, np.float64)


def _shared_bytes(dot, consumer: bool = False) -> int:
    """Bytes of what every block of a batch element reads again: the right operand (of a
    producer, or of a consumer whose left operand is as it is), or the output a transposed
    consumer adds each block to."""
    per_batch = dot.m * dot.n if consumer and dot.lhs_transposed else dot.k * dot.n
    return per_batch * dot.out.dtype.itemsize


def _members(steps, g: int, readers: dict, writers: dict, results: set):
    """``(producers, consumers, batch)`` of the row group ``steps[g]``: producers as
    ``(index, DotKernel)``, consumers as ``(index, DotKernel, row buffer)``, all of one
    batch; or None when it has neither."""
    group = steps[g]
    rows, width = group.shape
    flat = E.linearize([E.ivar(0, rows), E.ivar(1, width)], (rows, width))
    written = {b.id for b in group.writes()}
    row_buffers = {bid: buf for bid, (buf, offsets) in _row_offsets(group).items()
                   if offsets == {flat} and buf.size == rows * width}
    producers = []
    for bid, buf in row_buffers.items():
        sources = writers.get(bid, set())
        if bid in written or buf.kind != "temp" or bid in results or len(sources) != 1 \
                or readers.get(bid) != {g}:
            continue
        p, = sources
        dot = steps[p]
        if p < g and _float_product(dot) and not dot.accumulate and dot.n == width \
                and dot.batch * dot.m == rows:
            if _shared_bytes(dot) > SHARED_OPERAND_BYTES:
                return None  # the product stays whole, and the group reads its result
            producers.append((p, dot))
    consumers = []
    for bid, buf in row_buffers.items():
        for c in sorted(readers.get(bid, ())):
            dot = steps[c]
            if c == g or not _float_product(dot) or dot.lhs.id != bid or dot.rhs.id == bid \
                    or (bid in written and c < g):
                continue
            if dot.lhs_transposed:
                fits = dot.m == width and dot.batch * dot.k == rows
            else:
                fits = dot.k == width and dot.batch * dot.m == rows
            if fits and _shared_bytes(dot, consumer=True) <= SHARED_OPERAND_BYTES:
                consumers.append((c, dot, buf))
    if not producers and not consumers:
        return None
    batch = producers[0][1].batch if producers else \
        max({dot.batch for _, dot, _ in consumers},
            key=lambda n: sum(dot.batch == n for _, dot, _ in consumers))
    if any(dot.batch != batch for _, dot in producers):
        return None
    consumers = [c for c in consumers if c[1].batch == batch]
    return _in_order(steps, g, producers, consumers, batch)


def _in_order(steps, g: int, producers: list, consumers: list, batch: int):
    """The members that can run together where the last of them is: no member may read
    what a consumer writes, and each member that moves later must not pass a step that reads
    what it writes or writes what it reads or writes. The consumers after such a step are
    left out (those nearest the group are kept); None when a producer or the group cannot
    move, or no product is left."""
    group_writes = {b.id for b in steps[g].writes()}
    while True:
        members = {g: steps[g], **{p: dot for p, dot in producers},
                   **{c: dot for c, dot, _ in consumers}}
        read_by = {}
        for k, step in members.items():
            for b in step.reads():
                read_by.setdefault(b.id, set()).add(k)
        outs = {dot.out.id for _, dot, _ in consumers}
        kept = [(c, dot, rows) for c, dot, rows in consumers
                if read_by.get(dot.out.id, set()) <= {c} and dot.rhs.id not in outs | group_writes]
        if len(kept) != len(consumers):
            consumers = kept
            continue
        conflict = _first_conflict(steps, members)
        if conflict is None:
            return (producers, consumers, batch) if producers or consumers else None
        # the step in the way stays after the block: the consumers after it are left out
        _, passed = conflict
        kept = [c for c in consumers if c[0] < passed]
        if len(kept) == len(consumers):
            return None
        consumers = kept


def _first_conflict(steps, members: dict):
    """``(member, step)``: a member that, moved to where the last member is, would pass a
    step that reads what it writes or writes what it reads or writes; or None."""
    last = max(members)
    for i, step in sorted(members.items()):
        ins, outs = {b.id for b in step.reads()}, {b.id for b in step.writes()}
        for s in range(i + 1, last):
            if s in members:
                continue
            other_ins = {b.id for b in steps[s].reads()}
            other_outs = {b.id for b in steps[s].writes()}
            if outs & (other_ins | other_outs) or ins & other_outs:
                return i, s
    return None


def _build(program: Program, g: int, producers: list, consumers: list, batch: int,
           readers: dict, results: set):
    """The :class:`AttentionStep` of these members, or None when blocking them would not
    pay: the rows are few enough to stay in cache, or there is too little work to share
    among the threads."""
    steps = program.steps
    group = steps[g]
    rows, width = group.shape
    m = rows // batch
    itemsize = max(dot.out.dtype.itemsize for dot in
                   [dot for _, dot in producers] + [dot for _, dot, _ in consumers])
    if rows * width * itemsize < MIN_ROWS_BYTES:
        return None

    member_ids = {c for c, _, _ in consumers} | {g}
    tiled = {dot.out.id: dot.out for _, dot in producers}
    for buf in group.writes():
        if buf.id in results or buf.size != rows * width or buf.kind != "temp":
            continue
        if readers.get(buf.id, set()) <= member_ids and \
                any(rows_buf.id == buf.id for _, _, rows_buf in consumers):
            tiled[buf.id] = buf
    row_buffers = {b.id for b, offsets in _row_offsets(group).values()
                   if b.size == rows * width} | {r.id for _, _, r in consumers}
    row_bytes = width * itemsize * max(1, len(row_buffers | set(tiled)))
    block_rows = max(1, min(m, BLOCK_BYTES // row_bytes))
    if block_rows > BLOCK_ROW_MULTIPLE:
        block_rows -= block_rows % BLOCK_ROW_MULTIPLE
    threads = thread_pool.compiled_threads()
    blocks = -(-m // block_rows)
    accumulates = any(dot.lhs_transposed for _, dot, _ in consumers)
    units = batch if accumulates else batch * blocks
    if threads > 1 and units < threads:
        return None
    chunks = min(units, threads * CHUNKS_PER_THREAD) if threads > 1 else 1
    tiles = {bid: program.new_buffer((chunks, block_rows, width), buf.dtype, "temp")
             for bid, buf in tiled.items()}
    tiled_group = _with_tiles(group, tiles)
    step = AttentionStep(
        tiled_group,
        [(dot, tiles[dot.out.id], _live_condition(tiled_group, tiles[dot.out.id]))
         for _, dot in sorted(producers, key=lambda p: p[0])],
        [(dot, tiles.get(rows_buf.id, rows_buf))
         for _, dot, rows_buf in sorted(consumers, key=lambda c: c[0])],
        batch, block_rows, chunks)
    return step


def _with_tiles(group: RowGroup, tiles: dict) -> RowGroup:
    """``group`` with the buffers in ``tiles`` (id -> tile) read and written in their
    tiles, at the column within the row (see ``RowGroup.tiled``)."""
    rows, width = group.shape
    col = E.ivar(1, width)

    def rebuild(buf, offset):
        return E.load(tiles[buf.id], col) if buf.id in tiles else E.load(buf, offset)

    parts = []
    for part in group.parts:
        if isinstance(part, LoopKernel):
            values = E.substitute([v for _, _, v in part.outputs], {}, rebuild)
            parts.append(LoopKernel(part.shape, [
                (tiles[b.id], col, v) if b.id in tiles else (b, off, v)
                for (b, off, _), v in zip(part.outputs, values)], part.prims))
        else:
            value, = E.substitute([part.value], {}, rebuild)
            parts.append(type(part)(part.shape, part.reduced, part.monoid, value, part.out,
                                    part.out_offset, part.prims))
    return RowGroup(rows, width, parts, group.internal, tiled=list(tiles.values()))


# =============================================================================================
# Where a producer's value matters
# =============================================================================================


def _or(a, b):
    if a.kind == "const":
        return b if not bool(a.args[0]) else a
    if b.kind == "const":
        return a if not bool(b.args[0]) else b
    return a if a is b else E.op(ew.or_p, (), (a, b), np.bool_)


def _not(a):
    if a.kind == "const":
        return E.constant(not bool(a.args[0]), np.bool_)
    return E.op(ew.not_p, (), (a,), np.bool_)


def _live_condition(group: RowGroup, tile: Buffer):
    """A boolean expression of the group's row and column, true wherever the element of
    ``tile`` there can change what the group computes; None where that is every element.

    Every value a part stores or reduces matters. A two-way ``select`` passes its condition
    down to the case it picks; any other operation passes its own condition to its
    operands. Conditions are only used when they read nothing the step computes (no tile,
    no buffer the group writes) and need no exact-math fallback, so that the generated
    code can evaluate them before the products run."""
    true = E.constant(True, np.bool_)
    computed = {b.id for b in group.tiled} | {b.id for b in group.internal} | \
        {b.id for b in group.writes()}

    def known_before(pred) -> bool:
        return all(n.args[0].id not in computed for n in E.loads([pred])) and \
            not scalar_ops.needs_guard([pred])

    roots = group.values()
    condition = {root: true for root in roots}
    live = E.constant(False, np.bool_)
    for node in reversed(E.postorder(roots)):
        if isinstance(node, E.IndexExpr) or node not in condition:
            continue
        here = condition[node]
        if node.kind == "load":
            if node.args[0].id == tile.id:
                live = _or(live, here)
            continue
        operands = [c for c in E.children(node) if isinstance(c, E.ScalarExpr)]
        if node.kind == "op" and node.args[0] is ew.select_n_p and len(node.args[2]) == 3 \
                and node.args[2][0].dtype == np.bool_ and known_before(node.args[2][0]):
            pred, on_false, on_true = node.args[2]
            given = [(pred, here), (on_false, E.logical_and(here, _not(pred))),
                     (on_true, E.logical_and(here, pred))]
        else:
            given = [(c, here) for c in operands]
        for child, cond in given:
            condition[child] = _or(condition[child], cond) if child in condition else cond
    if live.kind == "const" and bool(live.args[0]):
        return None
    return live

