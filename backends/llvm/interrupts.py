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

from functrans.backends.llvm import linker, machine_code
from functrans.backends.llvm.native_abi import (  # noqa: F401 (what generated code uses)
    ADDRESS_SYMBOL, CHECK_HANDLER, CHECK_TICKS, EPOCH, HANDLER_SYMBOL, INTERRUPTED,
    LAST_CHECK, PREVIOUS, PREVIOUS_SIGINFO, STATE_SYMBOL, STATE_WORDS)

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


def _handler_code(triple: str) -> str:
    # deferred: start-up time (llvmlite.ir, which a warm start never needs: the handler's
    # object comes from the on-disk cache)
    from functrans.backends.llvm import support_code
    return support_code.interrupt_handler_module(triple)


def handler_object() -> bytes:
    """The handler's and the state block's machine code (made once per process, see
    :func:`machine_code.support_object`)."""
    return machine_code.support_object("functrans-interrupts", _handler_code)


def ensure_loaded() -> None:
    """Load the handler and the state block (compiled once, then from the on-disk cache) and
    register ``ft_interrupt_state`` with the JIT linker. Installs nothing (see
    :func:`install`)."""
    with _lock:
        if _state:
            return
        loaded = linker.load(handler_object())
        loaded.keep()  # the handler stays installed until the process exits
        address = ctypes.CFUNCTYPE(ctypes.c_void_p)(loaded.address(ADDRESS_SYMBOL))()
        linker.register_symbol(STATE_SYMBOL, address)
        _state.update(loaded=loaded, handler=loaded.address(HANDLER_SYMBOL),
                      words=(ctypes.c_int64 * STATE_WORDS).from_address(address))


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
    words[PREVIOUS_SIGINFO] = 1 if current.flags & _SA_SIGINFO else 0
    words[PREVIOUS] = current.handler
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
