"""The runtime's support objects made ahead on a thread of their own (pipeline.py,
machine_code.support_object): the compile goes on once the pool's text is built, and the
thread is never held up by a program compiling under the LLVM lock."""
from __future__ import annotations

import threading

import pytest

pytest.importorskip("llvmlite")

from functrans.backends.llvm import linker, machine_code  # noqa: E402


def _module(name):
    def build(triple):
        return f'target triple = "{triple}"\n\ndefine void @{name}() {{\n  ret void\n}}\n'
    build.__name__ = f"build_{name}"
    return build


def test_built_is_called_once_the_text_is_built_and_before_llvm_compiles_it(monkeypatch):
    label = f"functrans-test-ahead-{threading.get_ident()}"
    events = []
    real_parsed = machine_code.parsed
    monkeypatch.setattr(machine_code, "parsed",
                        lambda text: events.append("parsed") or real_parsed(text))
    build = _module("ft_test_ahead")
    obj = machine_code.support_object(label, build, built=lambda: events.append("built"))
    assert events == ["built", "parsed"]
    assert machine_code.support_object(label, build, built=lambda: events.append("again")) \
        == obj and events == ["built", "parsed"]  # made once per process
    assert linker.load(obj).address("ft_test_ahead")


def test_a_support_object_is_made_while_another_thread_holds_the_llvm_lock():
    machine_code.initialize()
    label = f"functrans-test-locked-{threading.get_ident()}"
    held, release, made = threading.Event(), threading.Event(), []

    def compiling():  # a program's parts run while their compile holds the lock
        with machine_code._llvm_lock:
            held.set()
            release.wait(60)
    holder = threading.Thread(target=compiling)
    holder.start()
    held.wait(60)
    maker = threading.Thread(target=lambda: made.append(
        machine_code.support_object(label, _module("ft_test_locked"))))
    try:
        maker.start()
        maker.join(20)
        assert made, "the support object waited for the lock"
    finally:
        release.set()
        holder.join()
        maker.join()
