"""LLVM's shared library mapped ahead, on a thread of its own, when a process finds its cache
directory new (it will load LLVM and compile), and not on a warm start."""
from __future__ import annotations

from llvm_setups import run_with_cache_dir


_COMPILE = """
    import threading, numpy as np
    import functrans, functrans.numpy as jnp
    started = []
    original = threading.Thread.start
    def start(thread):
        started.append(thread.name)
        original(thread)
    threading.Thread.start = start
    x = np.ones((4, 4), np.float32)
    print(np.asarray(functrans.jit(lambda x: jnp.exp(x).sum(axis=1))(x)).tolist())
    print("functrans-llvm-library" in started)
"""


def test_the_library_is_mapped_ahead_on_a_cold_cache_only(tmp_path):
    cold = run_with_cache_dir(_COMPILE, tmp_path).splitlines()
    warm = run_with_cache_dir(_COMPILE, tmp_path).splitlines()
    assert cold[1] == "True" and warm[1] == "False"
    assert cold[0] == warm[0]


def test_mapping_ahead_leaves_llvmlite_to_import_it(tmp_path):
    out = run_with_cache_dir("""
        import sys
        from functrans.backends.llvm import machine_code
        thread = machine_code.load_library_ahead()
        thread.join()
        maps = open("/proc/self/maps").read()
        print("libllvmlite" in maps, "llvmlite.binding" in sys.modules)
        import llvmlite.binding as llvm
        llvm.initialize_native_target()
        paths = {line.split()[-1] for line in open("/proc/self/maps") if "libllvmlite" in line}
        print(len(paths), machine_code.load_library_ahead())
    """, tmp_path).splitlines()
    assert out == ["True False", "1 None"]
