"""Ctrl-C in compiled code: a SIGINT counter that generated loops poll.

Python runs its signal handlers in the main thread, between bytecodes. While that thread is
inside a native call, a SIGINT only sets Python's pending flag, and KeyboardInterrupt comes
when the call returns — after the whole loop. So this module puts a small native handler in
front of Python's: it calls Python's handler (which sets that flag, as before), then adds one
to a process-wide counter (the first word of ``ft_interrupt_state``). Generated code (see
:mod:`codegen`, :mod:`control_flow`) reads the counter when a segment starts and compares it
at the back-edge of every ``while``/``scan`` loop and before every chunk of a parallel loop:
a load and a branch that is never taken. When it has moved, loops exit, the thread pool
stops handing out the chunks of its job, and the segment returns :data:`INTERRUPTED`; the
runtime then raises KeyboardInterrupt (:func:`settle`).

Design, and why:

* A counter, not a flag: each call compares with the value it started at, so nothing has to
  be reset after an interrupt, a SIGINT that came between two calls never stops the next
  one, and concurrent calls (pmap's device threads, user threads) all see the same one.
* Python's handler first, then the counter: a call that sees the counter move finds Python's
  flag already set, so on the main thread the runtime lets Python's own handler raise (no
  second KeyboardInterrupt a moment later).
* Only while Python's handler for SIGINT is ``signal.default_int_handler``: Ctrl-C then means
  KeyboardInterrupt. A handler of the user's (``signal.signal``) replaces ours — Python
  re-installs its own C handler — so compiled code runs to the end and the user's handler
  runs after it, as it always did. The native handler is installed once, lazily, and
  stays: it only ever passes the signal on. Whatever replaces it later (``signal.signal``,
  an event loop's handler, a notebook kernel re-setting the default for each cell) is
  noticed by :func:`install`, which a segment that polls asks for when it starts, at most
  every :data:`CHECK_TICKS` (it returns :data:`CHECK_HANDLER` before doing any work; the
  runtime checks and calls it again). So a call pays nothing for this but a cycle-counter
  read: the check (two system calls) is too slow for every call.
* Linux (x86-64, AArch64) only, where ``struct sigaction`` has the layout below; elsewhere
  compiled code still polls, but nothing moves the counter.

    >>> ensure_loaded()                            # doctest: +SKIP
    >>> status = segment(address)                  # doctest: +SKIP
    >>> if status: settle(status, segment, address)  # doctest: +SKIP
"""
from __future__ import annotations

import ctypes
import platform
import signal
import sys
import threading

import llvmlite.ir as ir

from functrans.backends.llvm import linker, machine_code

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
I8P = I8.as_pointer()

# The state block, which generated code links against: a cache line of its own (every
# polling thread reads it). Its words: the SIGINT counter; when a segment last asked for
# the handler to be checked (cycle-counter ticks); Python's handler, to pass the signal on
# to; whether that handler takes (signal, siginfo, context) (SA_SIGINFO) or the signal alone.
STATE_SYMBOL = "ft_interrupt_state"
STATE_TYPE = ir.ArrayType(I64, 8)
EPOCH, LAST_CHECK, _PREVIOUS, _PREVIOUS_SIGINFO = 0, 1, 2, 3
_HANDLER_SYMBOL = "ft_interrupt_handler"
_ADDRESS_SYMBOL = "ft_interrupt_state_address"

# What a segment returns besides 0: a SIGINT stopped it early; or, before doing anything,
# the handler is due a check (a handler replaced and restored since, by an event loop or a
# notebook cell, is covered again within about CHECK_TICKS: some 10 ms)
INTERRUPTED, CHECK_HANDLER = 1, 2
CHECK_TICKS = 1 << 25

_SUPPORTED = sys.platform.startswith("linux") and platform.machine() in (
    "x86_64", "AMD64", "aarch64", "arm64")
_SA_SIGINFO = 4  # Linux
_SIG_IGN = 1

_lock = threading.Lock()
_state: dict = {}


class _SigAction(ctypes.Structure):
    """Linux's ``struct sigaction`` (glibc and musl; x86-64 and AArch64)."""
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_uint64 * 16),
                ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]


def _build_module(triple: str) -> str:
    """The state block, ``ft_interrupt_state_address()`` and the handler."""
    m = ir.Module(name="functrans_interrupts")
    m.triple = triple
    state = ir.GlobalVariable(m, STATE_TYPE, "state")
    state.linkage = "internal"
    state.initializer = ir.Constant(STATE_TYPE, None)
    state.align = 64

    def word(b, k):
        return b.gep(state, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True)

    getter = ir.Function(m, ir.FunctionType(I8P, []), name=_ADDRESS_SYMBOL)
    b = ir.IRBuilder(getter.append_basic_block("entry"))
    b.ret(b.bitcast(state, I8P))

    # void handler(int signal, siginfo_t *info, void *context): async-signal-safe (loads,
    # one call, one atomic add)
    handler = ir.Function(m, ir.FunctionType(ir.VoidType(), [I32, I8P, I8P]), name=_HANDLER_SYMBOL)
    handler.attributes.add("nounwind")
    sig, info, context = handler.args
    b = ir.IRBuilder(handler.append_basic_block("entry"))
    chain, with_info, plain, count = (handler.append_basic_block(n) for n in
                                      ("chain", "with_info", "plain", "count"))
    previous = b.load_atomic(word(b, _PREVIOUS), "acquire", 8)
    b.cbranch(b.icmp_unsigned("!=", previous, ir.Constant(I64, 0)), chain, count)
    b.position_at_end(chain)
    takes_info = b.load_atomic(word(b, _PREVIOUS_SIGINFO), "monotonic", 8)
    b.cbranch(b.icmp_unsigned("!=", takes_info, ir.Constant(I64, 0)), with_info, plain)
    b.position_at_end(with_info)
    three = ir.FunctionType(ir.VoidType(), [I32, I8P, I8P]).as_pointer()
    b.call(b.inttoptr(previous, three), [sig, info, context])
    b.branch(count)
    b.position_at_end(plain)
    b.call(b.inttoptr(previous, ir.FunctionType(ir.VoidType(), [I32]).as_pointer()), [sig])
    b.branch(count)
    b.position_at_end(count)
    # after Python's handler: whoever sees the counter move finds Python's flag set
    b.atomic_rmw("add", word(b, EPOCH), ir.Constant(I64, 1), "seq_cst")
    b.ret_void()
    return str(m)


def ensure_loaded() -> None:
    """Load the handler and the state block (compiled once, then from the on-disk cache) and
    register ``ft_interrupt_state`` with the JIT linker. Installs nothing (see
    :func:`install`)."""
    with _lock:
        if _state:
            return
        loaded = linker.load(machine_code.support_object("functrans-interrupts", _build_module))
        loaded.keep()  # the handler stays installed until the process exits
        address = ctypes.CFUNCTYPE(ctypes.c_void_p)(loaded.address(_ADDRESS_SYMBOL))()
        linker.register_symbol(STATE_SYMBOL, address)
        _state.update(loaded=loaded, handler=loaded.address(_HANDLER_SYMBOL),
                      words=(ctypes.c_int64 * STATE_TYPE.count).from_address(address))


def epoch() -> int:
    """How many SIGINTs the native handler has seen (0 before it is loaded)."""
    return _state["words"][EPOCH] if _state else 0


def settle(status: int, segment, address: int) -> None:
    """After the native ``segment(address)`` returned ``status`` (not 0): check the handler
    and call it again (:data:`CHECK_HANDLER`: it has done nothing yet), or raise
    KeyboardInterrupt (:data:`INTERRUPTED`: its results are not to be used)."""
    while status == CHECK_HANDLER:
        install()
        status = segment(address)
    if status == INTERRUPTED:
        raise_interrupt()


def install() -> bool:
    """Put the native handler in front of Python's for SIGINT, if Python's handler is
    ``signal.default_int_handler`` and ours is not there yet. Returns whether ours is
    installed now. (Called from a thread other than the main one, a ``signal.signal`` on the
    main thread between the check and the installation, a window of microseconds, would be
    followed by ours: Ctrl-C would still stop compiled code, and then run that handler.)"""
    if not _SUPPORTED or not _state:
        return False
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return False  # the user's handler (or none): Ctrl-C is not a KeyboardInterrupt
    sigaction = _sigaction()
    current = _SigAction()
    if sigaction(signal.SIGINT, None, ctypes.byref(current)) != 0:
        return False
    ours = _state["handler"]
    if current.handler == ours:
        return True
    if current.handler in (None, _SIG_IGN):
        return False  # Python's C handler is not installed (an embedding application)
    words = _state["words"]
    words[_PREVIOUS_SIGINFO] = 1 if current.flags & _SA_SIGINFO else 0
    words[_PREVIOUS] = current.handler
    replacement = _SigAction.from_buffer_copy(current)  # its mask and flags (SA_ONSTACK...)
    replacement.handler = ours
    replacement.flags |= _SA_SIGINFO
    return sigaction(signal.SIGINT, ctypes.byref(replacement), None) == 0


_sigaction_function = []


def _sigaction():
    # through PyDLL: the call keeps the GIL (a system call of a microsecond gains nothing
    # from dropping it)
    if not _sigaction_function:
        function = ctypes.PyDLL(None).sigaction
        function.restype = ctypes.c_int
        function.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        _sigaction_function.append(function)
    return _sigaction_function[0]


def raise_interrupt() -> None:
    """Raise KeyboardInterrupt for a native call that a SIGINT stopped early. On the main
    thread Python's handler has the signal pending: it runs now (and raises), so the signal
    is not raised a second time later. Other threads' calls stop too: they raise here."""
    if threading.current_thread() is threading.main_thread():
        ctypes.pythonapi.PyErr_CheckSignals()
    raise KeyboardInterrupt
