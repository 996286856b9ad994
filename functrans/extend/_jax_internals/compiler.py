"""``jax._src.compiler``: functrans compiles programs with its own backends
(``functrans.backends``), not through XLA, so XLA's compile entry points
(``backend_compile``, ``compile_or_get_cached``) do not exist; using one raises
``AttributeError`` saying so."""
from __future__ import annotations


def __getattr__(name):
    raise AttributeError(
        f"jax._src.compiler.{name}: functrans does not compile through XLA (its programs go "
        f"to functrans.backends), so XLA's compiler hooks are not available")
