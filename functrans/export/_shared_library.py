"""``to_shared_library``: an Exported as a standalone ``.so`` and C header.

The library holds native code only (no Python, no functrans at run time): each entry point
is a C function taking a pointer per input, a pointer per output and an optional
workspace. The native compilation is the CPU backend's (registered with
``functrans._backends.register_shared_library_builder``); see ``docs/export.md`` for the
C side.

    >>> import functrans, functrans.numpy as jnp
    >>> from functrans import export
    >>> exp = export.export(functrans.jit(lambda x: jnp.tanh(x) * 2))(jnp.ones(4))
    >>> paths = export.to_shared_library(exp, "/tmp/doc_tanh")   # doctest: +SKIP
    >>> paths.header                                               # doctest: +SKIP
    '/tmp/doc_tanh.h'
"""
from __future__ import annotations

import os
import re
from typing import Mapping, NamedTuple

from functrans import _backends, tree_util
from functrans._config import check_target_cpu
from functrans.export._dimensions import is_symbolic_dim
from functrans.export._exported import Exported
from functrans.export._pytrees import flat_names


class SharedLibrary(NamedTuple):
    """Where :func:`to_shared_library` wrote the library and its header."""

    library: str
    header: str


def to_shared_library(exported: Exported | Mapping[str, Exported], path: str, *,
                      dimensions: Mapping[str, int] | None = None,
                      target_cpu: str | None = None) -> SharedLibrary:
    """Compile ``exported`` into ``<path>.so`` and ``<path>.h``.

    One Exported gives one C function named after the file (``model`` for
    ``"out/model"``); a mapping ``{name: Exported}`` gives one function per entry. Each
    takes ``const T *`` per input (in the order of ``in_avals``), ``T *`` per output,
    ``void *workspace`` and ``size_t workspace_size`` (NULL and 0, or a buffer of at least
    ``<name>_workspace_size()`` bytes: a smaller one returns error 4), returns 0 or an
    error code, and is thread-safe. A dimension-polymorphic export is compiled for the sizes in
    ``dimensions`` (``{"b": 32}``). ``target_cpu`` is the CPU the machine code is for:
    ``"native"`` (this machine's), or ``"x86-64-v2"``, ``"x86-64-v3"`` (AVX2) or
    ``"x86-64-v4"`` (AVX-512) for a library that runs on every CPU of that level (default
    ``config.llvm_cpu``, ``FUNCTRANS_LLVM_CPU``). Raises ``NotImplementedError`` naming the
    primitives of a program that needs NumPy steps, ``RuntimeError`` without a C compiler,
    ``ValueError`` for an unknown ``target_cpu``.

    Every name in the header is a C identifier made from a Python name (``params['w1']``
    -> ``params_w1``; other characters become ``_``); a name that would clash with a C
    keyword, a name of the C library or another name of the library gets a suffix
    (``int`` -> ``int_2``). No other text of the Exported is written into C.

        >>> import functrans, functrans.numpy as jnp
        >>> exp = functrans.export.export(functrans.jit(jnp.tanh))(jnp.ones(4))  # doctest: +SKIP
        >>> to_shared_library(exp, "build/tanh").header             # doctest: +SKIP
        '.../build/tanh.h'
    """
    library = os.path.basename(os.fspath(path))
    if target_cpu is not None:
        check_target_cpu(target_cpu, "to_shared_library: target_cpu")
    if isinstance(exported, Exported):
        named = [(library, exported)]
    elif isinstance(exported, Mapping) and exported and \
            all(isinstance(e, Exported) for e in exported.values()):
        named = [(str(k), e) for k, e in exported.items()]
    else:
        raise TypeError("to_shared_library takes an Exported or a mapping of names to "
                        f"Exported, got {type(exported).__name__}")
    entries = [_entry(name, e, dict(dimensions or {})) for name, e in named]
    build = _backends.shared_library_builder("cpu")
    so_path, header_path = build(entries, os.fspath(path), library, target_cpu=target_cpu)
    return SharedLibrary(so_path, header_path)


def _entry(name: str, exported: Exported, dimensions: dict) -> dict:
    if "cpu" not in exported.platforms:
        raise ValueError(f"to_shared_library: '{exported.fun_name}' was exported for "
                         f"platforms {exported.platforms}, not 'cpu'")
    missing = [v for v in exported._dim_vars if v not in dimensions]
    if missing:
        shapes = ", ".join(str(a) for a in exported.in_avals
                           if any(is_symbolic_dim(d) for d in a.shape))
        raise ValueError(f"to_shared_library: '{exported.fun_name}' is polymorphic in "
                         f"{missing} ({shapes}); a library has fixed shapes: pass "
                         f"dimensions={{{', '.join(repr(v) + ': ...' for v in missing)}}}")
    values = {}
    for v in exported._dim_vars:
        value = dimensions[v]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"to_shared_library: dimension {v!r} must be a positive "
                             f"integer, got {value!r}")
        values[v] = value
    closed = exported._decode(values)
    # all names are text here: the backend makes C identifiers of them (they may come from
    # a serialized file, and are never written into C as they are)
    return {"name": name, "closed": closed,
            "input_names": [_input_name(n, exported._arg_names)
                            for n in _leaf_names(exported.in_tree)],
            "output_names": _output_names(exported.out_tree),
            "function_name": exported.fun_name, "sizes": values}


def _leaf_names(tree) -> list[str]:
    return flat_names(tree)


def _input_name(flat_name: str, arg_names) -> str:
    """``args[0]['w1']`` -> ``params['w1']`` (the parameter's name, else ``arg0``);
    ``kwargs['scale']`` -> ``scale``."""
    def positional(match):
        i = int(match.group(1))
        return arg_names[i] if i < len(arg_names) else f"arg{i}"
    name = re.sub(r"^args\[(\d+)\]", positional, flat_name)
    return re.sub(r"^kwargs\[['\"]?([^'\"\]]*)['\"]?\]", r"\1", name)


def _output_names(tree) -> list[str]:
    leaves = tree_util.tree_unflatten(tree, [None] * tree.num_leaves)
    paths = [p for p, _ in tree_util.tree_flatten_with_path(
        leaves, is_leaf=lambda x: x is None)[0]]
    if len(paths) == 1 and not paths[0]:
        return ["out"]
    return ["out" + tree_util.keystr(p) for p in paths]
