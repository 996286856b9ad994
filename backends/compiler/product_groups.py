"""Independent matrix products run side by side: a :class:`ProductGroup` step, and finding
products that a schedule can move next to each other.

A backend that splits each large product into one block per thread pays for the split in
every block: each packs the operand the blocks share again, and the threads meet at the
end of every product. Products that do not depend on each other (the backward pass of a
dense layer: the weights' gradient ``hᵀ g`` and the input's ``g Wᵀ``) can instead run
whole, one per thread, at once. :func:`group_products` moves such products together into
one step; which products are worth it (their sizes, the thread count) is the backend's
call (its ``eligible``).

A product's output can be initialized by a copy (``C = w``, then ``C += alpha a b``: an
SGD update folded into the product by ``fuse_dot_epilogues``); the group then holds the
copy too, so that the thread running the product also makes its copy, and the copy's pass
stays beside the product that reads it.

    >>> program = group_products(program, eligible, size=2)    # doctest: +SKIP
"""
from __future__ import annotations

import math

from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.fusion import Buffer, DotKernel, FallbackStep, LoopKernel, Step


class ProductGroup(Step):
    """Matrix products, each run whole by one thread, at the same time. ``copies[k]``: the
    buffer copied into ``products[k].out`` before that product adds onto it, or None.

    When the memory of one product's output is that of a buffer another product reads (a
    donated input reused for an output: the runtime decides it per call), the products run
    one after another in their order, as the schedule had them."""

    prims = ("dot_general",)

    def __init__(self, products: list, copies: list):
        self.products = list(products)
        self.copies = list(copies)

    def reads(self):
        seen, out = set(), []
        for product, copy in zip(self.products, self.copies):
            operands = [product.lhs, product.rhs] + (
                [copy] if copy is not None else [product.out] if product.accumulate else [])
            for b in operands:
                if b.id not in seen:
                    seen.add(b.id)
                    out.append(b)
        return out

    def writes(self):
        return [product.out for product in self.products]

    def results(self):
        return self.writes()

    def describe(self):
        parts = [(f"copy {copy!r} -> {p.out!r}; " if copy is not None else "") + p.describe()
                 for p, copy in zip(self.products, self.copies)]
        return "side by side [" + " | ".join(parts) + "]"


def copied_buffer(step, out: Buffer):
    """The buffer ``step`` copies whole into ``out`` (a loop ``out[i] = src[i]`` over every
    element of ``out``, ``src`` of its shape and dtype), or None."""
    if not isinstance(step, LoopKernel) or len(step.outputs) != 1:
        return None
    buffer, offset, value = step.outputs[0]
    if buffer.id != out.id or math.prod(step.shape) != out.size:
        return None
    if not (isinstance(value, E.ScalarExpr) and value.kind == "load"):
        return None
    src, at = value.args
    if not isinstance(src, Buffer) or at is not offset or src.id == out.id \
            or src.shape != out.shape or src.dtype != out.dtype:
        return None
    return src


def _ids(buffers) -> set:
    return {b.id for b in buffers if isinstance(b, Buffer)}


def _may_hold(out: Buffer, program) -> set:
    """Ids of the inputs whose memory a program output may be at run time (a donated input
    of its shape and dtype: see the llvm backend's ``donation``)."""
    if out.kind != "output":
        return set()
    return {b.id for b in program.inputs
            if isinstance(b, Buffer) and b.shape == out.shape and b.dtype == out.dtype}


def group_products(program, eligible, size: int):
    """``program`` with groups of ``size`` products that ``eligible(product, first)`` (a
    product and the group's first) accepts moved together into a :class:`ProductGroup`,
    each later one (with the copy that initializes its output) up to the group's first.
    A product moves only past native steps that neither write what it or its copy reads
    nor read or write what it writes, or the inputs its output may be at run time."""
    if size < 2:
        return program
    steps = list(program.steps)
    k = 0
    while k < len(steps):
        first = steps[k]
        if not (isinstance(first, DotKernel) and eligible(first, first)):
            k += 1
            continue
        members, moved = [(first, None)], set()
        reads, writes = _ids(first.reads()), _ids(first.writes())
        for j in range(k + 1, len(steps)):
            if len(members) == size or isinstance(steps[j], FallbackStep):
                break
            product = steps[j]
            if not (isinstance(product, DotKernel) and eligible(product, first)):
                continue
            found = _movable(steps, k, j, product, moved, program)
            if found is None:
                continue
            copy_at, copy = found
            operands = _ids([product.lhs, product.rhs] + ([copy] if copy is not None else []))
            if operands & writes or product.out.id in reads | writes:
                continue  # it depends on a member, or a member on it
            members.append((product, copy))
            moved.update({j} if copy_at is None else {j, copy_at})
            reads |= operands
            writes.add(product.out.id)
        if len(members) < size:
            k += 1
            continue
        group = ProductGroup([p for p, _ in members], [c for _, c in members])
        steps = steps[:k] + [group] + [s for j, s in enumerate(steps) if j > k and j not in moved]
        k += 1
    program.steps = steps
    return program


def _movable(steps, k: int, j: int, product: DotKernel, moved: set, program):
    """Whether product ``steps[j]`` can move up to ``steps[k]``, past the steps between
    that stay: ``(index, buffer)`` of the copy that initializes its output and moves with
    it (``(None, None)``: none), or None when it cannot."""
    copy_at = copy = None
    if product.accumulate:
        writers = [i for i in range(j) if product.out.id in _ids(steps[i].writes())]
        if len(writers) != 1 or writers[0] <= k or writers[0] in moved:
            return None
        copy_at = writers[0]
        copy = copied_buffer(steps[copy_at], product.out)
        if copy is None:
            return None
    operands = _ids([product.lhs, product.rhs] + ([copy] if copy is not None else []))
    written = {product.out.id} | _may_hold(product.out, program)
    for i in range(k + 1, j):
        if i in moved or i == copy_at:
            continue
        step = steps[i]
        if isinstance(step, FallbackStep) or _ids(step.writes()) & operands \
                or (_ids(step.reads()) | _ids(step.writes())) & written:
            return None
    return copy_at, copy
