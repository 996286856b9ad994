"""Compiled code runs with subnormal floats flushed to zero, as XLA's CPU runtime does.

With the config option ``flush_denormals`` on (the default; see
:mod:`functrans._float_mode` for what JAX computes and why), every exported segment
function is a small entry that sets FTZ and DAZ (MXCSR bits 15 and 6) on the calling
thread, calls the segment's code (an internal function) and puts the caller's two bits
back before it returns. Every way out of a segment (the end, a SIGINT that stops its loops,
the early return that asks for the SIGINT handler's check) is a return from that inner
function, so none can leave the caller's mode changed; nothing unwinds through generated
code. BLAS called from generated code runs on the calling thread or on a pool thread (the
products hold OpenBLAS to one thread: see :mod:`thread_pool`), so it computes in the same
mode. The thread pool gives its workers the mode of the thread that started the job
(:func:`publish`, :func:`adopt`), whatever it is, so a chunk computes the same on any thread.

LLVM is told too (:func:`mark_functions`): every function of such a module carries
``"denormal-fp-math"="preserve-sign,preserve-sign"``, so that its optimizer folds
constants and rewrites comparisons for the mode the code runs in. Without it, LLVM turns
``x == 0 or not isfinite(x)`` into a test of the bits that calls a subnormal nonzero,
while the hardware's comparison (and NumPy's, eagerly) calls it zero; and it folds the
product of two constants into a subnormal that the same product computed at run time
would flush. (XLA does not tell LLVM: JAX's ``frexp`` of a subnormal, which makes that
comparison, returns ``(0.5, -149)`` where functrans's returns the subnormal and 0.)

The bits exist on x86 only; elsewhere the code is unchanged and the option does nothing.

    >>> entry = flushing_entry(module, "ft_segment_0", inner)   # doctest: +SKIP
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from functrans import _float_mode

if TYPE_CHECKING:
    import llvmlite.ir as ir

FLUSH_BITS = _float_mode.FLUSH_BITS


def _llvm_ir():
    # deferred: start-up time. The functions below build IR; a warm start (programs read
    # from the disk cache) asks this module only whether code flushes, and never loads
    # llvmlite.ir.
    import llvmlite.ir
    return llvmlite.ir


def supported(triple: str) -> bool:
    """Whether code for ``triple`` has the MXCSR register."""
    return triple.startswith(("x86_64", "i386", "i686"))


def flushes() -> bool:
    """Whether code generated now sets the flush bits (the config option, on a host that
    has them). Part of the compilation cache key."""
    return _float_mode.supported() and _float_mode.enabled()


def _intrinsic(module: ir.Module, name: str) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        ir = _llvm_ir()
        pointer = ir.IntType(8).as_pointer()
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [pointer]), name=name)
    return fn


def read(b: ir.IRBuilder, slot) -> ir.Value:
    """MXCSR (an i32), through ``slot`` (an i32 stack slot)."""
    b.call(_intrinsic(b.module, "llvm.x86.sse.stmxcsr"),
           [b.bitcast(slot, _llvm_ir().IntType(8).as_pointer())])
    return b.load(slot)


def write(b: ir.IRBuilder, slot, value) -> None:
    """Set MXCSR to ``value`` (an i32), through ``slot``."""
    b.store(value, slot)
    b.call(_intrinsic(b.module, "llvm.x86.sse.ldmxcsr"),
           [b.bitcast(slot, _llvm_ir().IntType(8).as_pointer())])


def flushing_entry(module: ir.Module, name: str, inner: ir.Function) -> ir.Function:
    """The exported function ``name``, of ``inner``'s type: it sets FTZ and DAZ, returns
    what ``inner`` returns, and restores the caller's FTZ and DAZ bits (the rest of MXCSR,
    such as the exception flags the computation raised, stays as the computation left it).
    ``inner`` becomes internal and is never inlined into the entry, so LLVM cannot move its
    arithmetic across the mode switches."""
    ir = _llvm_ir()
    i32 = ir.IntType(32)
    inner.linkage = "internal"
    inner.attributes.add("noinline")
    entry = ir.Function(module, inner.function_type, name=name)
    entry.attributes.add("nounwind")
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    slot = b.alloca(i32)
    caller = read(b, slot)
    write(b, slot, b.or_(caller, ir.Constant(i32, FLUSH_BITS)))
    result = b.call(inner, list(entry.args))
    now = read(b, slot)
    keep = b.and_(now, ir.Constant(i32, ~FLUSH_BITS))
    write(b, slot, b.or_(keep, b.and_(caller, ir.Constant(i32, FLUSH_BITS))))
    if isinstance(inner.function_type.return_type, ir.VoidType):
        b.ret_void()
    else:
        b.ret(result)
    return entry


_DEFINE = re.compile(r"^(define [^\n]*)$", re.MULTILINE)
ATTRIBUTE = '"denormal-fp-math"="preserve-sign,preserve-sign"'


def mark_functions(ir_text: str) -> str:
    """``ir_text`` (llvmlite's printing: a function's attributes end its ``define`` line)
    with every function defined in it marked as running with subnormals flushed."""
    return _DEFINE.sub(lambda m: f"{m.group(1)} {ATTRIBUTE}", ir_text)
