"""How an elementwise kernel's loop is vectorized: how many vectors each iteration
computes side by side (LLVM's interleave count) and how wide they are, chosen per kernel
from what it computes and from the target CPU's features.

Most elementwise loops are a few operations per element and wait on memory: one vector
per iteration, of the width LLVM picks for the CPU, is as fast as anything, and compiles
to the least code (see :meth:`ModuleIR.single_vector_loop`). A loop that calls the inline
float32 math of :mod:`vector_math` (tanh, exp, log, ...) is different: each element is a
chain of dozens of dependent floating-point instructions (tanh's division alone takes
over ten cycles), so the loop is bound by the vector units, not by memory. Such a *long
chain*, when the loop is long enough for it to matter, gets

* several vectors per iteration, whose independent chains the core overlaps: as many as
  the vector registers hold (4 with the 16 of AVX2, 8 with the 32 of AVX-512);
* on AVX-512 targets, 512-bit vectors (LLVM's tuning for Intel's AVX-512 cores prefers
  256 bits, for the clock speed of code that mixes vector widths; a loop of nothing but
  vector arithmetic does twice the work per instruction).

Measured on the 8-op benchmark chain (4M float32, tanh and exp), one thread, on an Intel
Xeon (family 6 model 167, AVX-512), CPU time: 4.2-5.0 ms with one 256-bit vector per
iteration, 3.0-3.2 with four, 3.2-3.3 with one 512-bit vector, 2.5-2.9 with four and
2.2-2.7 with eight 512-bit vectors (see ``docs/performance.md``).

A *narrow* kernel is the opposite case: its innermost loop runs over a handful of
elements (the 10 logits of a classifier's rows), in a kernel too small to take
microseconds. Vectorizing such a loop buys one or two vector iterations, while LLVM spends
about 2.4 ms per loop building its masked or remainder form (the MLP step's softmax row
group, seven 10-column loops: 17 ms of its 85 ms of LLVM); its loops stay scalar (see
:func:`narrow`).

    >>> interleave_count(step), vector_width(step), narrow(step)      # doctest: +SKIP
    (8, 512, False)
"""
from __future__ import annotations

import math

from functrans.backends.compiler.fusion import LoopKernel, unique_buffers
from functrans.backends.llvm import scalar_ops, targets

# Below this many elements a loop runs for microseconds: the several times larger code of
# an interleaved 512-bit loop (about 18 ms more of LLVM for the benchmark chain's kernel)
# would not pay for itself over the calls of a typical program.
LONG_CHAIN_MIN_ELEMENTS = 1 << 16

# A kernel's innermost loops stay scalar when they cover fewer than NARROW_ROW_BYTES (two
# 256-bit vectors: 16 float32 elements, 8 float64) and the whole kernel at most
# NARROW_MAX_ELEMENTS elements: scalar, such a kernel costs at most a few microseconds
# more per call, against about 2.4 ms of LLVM per loop saved once.
NARROW_ROW_BYTES = 64
NARROW_MAX_ELEMENTS = 1 << 12


def long_chain(step) -> bool:
    """Whether ``step`` is an elementwise loop over at least LONG_CHAIN_MIN_ELEMENTS
    elements whose values call inline float32 math (see the module docstring)."""
    if not isinstance(step, LoopKernel) or not step.shape:
        return False
    if math.prod(step.shape) < LONG_CHAIN_MIN_ELEMENTS:
        return False
    return scalar_ops.calls_inline_math([value for _, _, value in step.outputs])


def interleave_count(step) -> int:
    """Vectors each iteration of ``step``'s innermost loop computes side by side: one, or
    for a long chain a quarter as many as the vector registers (the rest hold the
    polynomials' coefficients and the intermediate values)."""
    return targets.current().vector_registers // 4 if long_chain(step) else 1


def vector_width(step) -> int | None:
    """The vector width in bits LLVM is asked to prefer for ``step``'s function, or None
    for its own choice for the target CPU."""
    return 512 if long_chain(step) and targets.current().has_avx512 else None


def narrow(step, values) -> bool:
    """Whether the innermost loops of ``step`` computing ``values`` (a row group's loop
    over the row, a loop's or a reduction's last dimension) are left unvectorized: fewer
    than NARROW_ROW_BYTES of the kernel's widest element type, in a kernel of at most
    NARROW_MAX_ELEMENTS elements, and no inline float32 math among ``values`` (a chain of
    dozens of instructions per element, which vectors do take several times faster)."""
    shape = getattr(step, "shape", None)
    if not shape or math.prod(shape) > NARROW_MAX_ELEMENTS:
        return False
    buffers = unique_buffers(step.writes() + step.reads())
    itemsize = max((b.dtype.itemsize for b in buffers), default=1)
    return shape[-1] * itemsize < NARROW_ROW_BYTES and \
        not scalar_ops.calls_inline_math(values)
