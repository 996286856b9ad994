"""``jit``: stage once per signature, compile with a backend, call the cached executable.

Under another transform a jitted function is one ``jit`` equation holding its closed jaxpr;
the rules below (jvp, transpose, batching, partial evaluation) transform that jaxpr and bind
``jit`` again, so compiled code stays compiled through ``grad`` and ``vmap``.
"""
from __future__ import annotations

import functools
import inspect
import logging
import sys
import textwrap
import threading
import time
import weakref
from typing import Callable, NamedTuple

import numpy as np

from functrans import (_api, _array, _backends, _debug_checks, _debug_rerun, _transfer_guard,
                       core, profiler, tree_util)
from functrans._api import ShapeDtypeStruct
from functrans import _collector, _cost_analysis, _explain
from functrans._array import Array, is_concrete_array
from functrans._array import delete as _array_delete
from functrans._caches import LRUCache, WeakKeyLRUCache, insert_plain
from functrans._config import check_target_cpu, config
from functrans._traceback_util import filter_error
from functrans.core import ClosedJaxpr, Primitive, Tracer, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters import partial_eval as pe
from functrans.interpreters.staging import flat_array_outputs, trace_to_jaxpr_dynamic
from functrans.interpreters.inline import inline_calls

logger = logging.getLogger("functrans")

jit_p = Primitive("jit", multiple_results=True)

# Compiled executables by closed jaxpr (held weakly: an entry goes with its program), then by
# backend name; at most config.executable_cache_max_entries programs, the least recently
# compiled or called through here evicted first.
_executables = WeakKeyLRUCache("executable_cache_max_entries")

# Set by functrans.sharding (which builds on this module): runs calls whose arguments are
# split over a mesh, or that have in_shardings/out_shardings, as partitioned programs, and
# compiles programs holding shard_map regions or sharding constraints.
partitioner = None


def compile_closed(closed: ClosedJaxpr, backend: str | None, compiler_options=None):
    """The executable of ``closed`` for ``backend`` with ``compiler_options`` (None, or the
    sorted (name, value) pairs :func:`compiler_options_key` makes), compiled on first need."""
    per_jaxpr = _executables.get(closed)
    if per_jaxpr is None:
        per_jaxpr = {}
        _executables.insert(closed, per_jaxpr)
    key = backend if compiler_options is None else (backend, compiler_options)
    executable = per_jaxpr.get(key)
    if executable is None and partitioner is not None and partitioner.holds_regions(closed):
        executable = per_jaxpr[key] = partitioner.compile(closed)
    if executable is None:
        be = _backends.get_backend(backend)
        start = time.perf_counter()
        executable = be.compile(pe.dce_closed_jaxpr(inline_calls(closed)), None,
                                compiler_options)
        profiler.record(f"compile {_jaxpr_name(closed)}", "compilation", int(start * 1e9),
                        time.perf_counter_ns(), {"backend": be.name})
        if config.log_compiles:
            logger.warning("compiled %s with backend %s in %.1f ms", _jaxpr_name(closed),
                           be.name, 1e3 * (time.perf_counter() - start))
        per_jaxpr[key] = executable
    return executable


# The compiler options jit takes, with the check of their values. (A backend that does not
# take one refuses it when it compiles: only the llvm backend compiles for a target CPU.)
_COMPILER_OPTIONS = {
    "target_cpu": lambda value: check_target_cpu(value, "jit: compiler_options['target_cpu']"),
}


def compiler_options_key(compiler_options) -> tuple | None:
    """``compiler_options`` (a mapping, or None) checked and made hashable: its sorted
    (name, value) pairs, or None when it holds none."""
    if not compiler_options:
        return None
    if not hasattr(compiler_options, "items"):
        raise TypeError(f"jit: compiler_options is a dict of option names to values, got "
                        f"{type(compiler_options).__name__}")
    for name, value in compiler_options.items():
        check = _COMPILER_OPTIONS.get(name)
        if check is None:
            raise ValueError(f"jit: compiler_options has {name!r}, which functrans's "
                             f"compilers do not take; they take "
                             f"{', '.join(map(repr, _COMPILER_OPTIONS))}")
        check(value)
    return tuple(sorted(compiler_options.items()))


def _jaxpr_name(closed) -> str:
    return f"a program of {len(closed.eqns)} equations"


@jit_p.def_impl
def _jit_impl(*args, jaxpr: ClosedJaxpr, name: str, backend=None, donated_invars=(),
              compiler_options=None):
    executable = compile_closed(jaxpr, backend, compiler_options)
    if getattr(executable, "takes_device_buffers", False):  # results as (GPU) arrays
        return _call_executable(executable, args, jaxpr.in_avals, jaxpr.out_avals)
    return executable(*args)


@jit_p.def_abstract_eval
def _jit_abstract_eval(*avals, jaxpr: ClosedJaxpr, name: str, backend=None, donated_invars=(),
                       compiler_options=None):
    return jaxpr.out_avals


def _jit_jvp(primals, tangents, *, jaxpr, name, backend=None, donated_invars=(),
             compiler_options=None):
    nonzeros = [not isinstance(t, ad.Zero) for t in tangents]
    jvp_closed, out_nonzeros = ad.jvp_jaxpr(jaxpr, nonzeros, instantiate=False)
    nz_tangents = [t for t in tangents if not isinstance(t, ad.Zero)]
    outs = jit_p.bind(*primals, *nz_tangents, jaxpr=jvp_closed, name=f"jvp({name})",
                      backend=backend, donated_invars=(), compiler_options=compiler_options)
    num_out = len(jaxpr.out_avals)
    primals_out, nz_tangents_out = outs[:num_out], iter(outs[num_out:])
    tangents_out = [next(nz_tangents_out) if nz else ad.Zero(ad.tangent_aval(a))
                    for a, nz in zip(jaxpr.out_avals, out_nonzeros)]
    return primals_out, tangents_out


def _jit_transpose(cts, *args, jaxpr, name, backend=None, donated_invars=(),
                   compiler_options=None):
    undefined = [ad.is_undefined_primal(a) for a in args]
    defined_args = [a for a in args if not ad.is_undefined_primal(a)]
    ct_nonzero = [not isinstance(ct, ad.Zero) for ct in cts]

    def transposed(*flat):
        residuals, cts_in = flat[:len(defined_args)], iter(flat[len(defined_args):])
        res_iter = iter(residuals)
        primals = [ad.UndefinedPrimal(a.aval) if u else next(res_iter) for a, u in zip(args, undefined)]
        cts_full = [next(cts_in) if nz else ad.Zero(ad.tangent_aval(av))
                    for av, nz in zip(jaxpr.out_avals, ct_nonzero)]
        cts_out = ad.backward_pass(jaxpr.jaxpr, jaxpr.consts, primals, cts_full)
        return [ad.instantiate_zeros(ct) for ct, u in zip(cts_out, undefined) if u]

    res_avals = [get_aval(a) for a in defined_args]
    ct_avals = [ad.tangent_aval(av) for av, nz in zip(jaxpr.out_avals, ct_nonzero) if nz]
    t_jaxpr, t_consts = trace_to_jaxpr_dynamic(transposed, res_avals + ct_avals)
    outs = jit_p.bind(*defined_args, *[ct for ct in cts if not isinstance(ct, ad.Zero)],
                      jaxpr=ClosedJaxpr(t_jaxpr, t_consts), name=f"transpose({name})",
                      backend=backend, donated_invars=(), compiler_options=compiler_options)
    outs = iter(outs)
    return [next(outs) if u else None for u in undefined]


def _jit_batch(vals, dims, *, jaxpr, name, backend=None, donated_invars=(), axis_data=None,
               compiler_options=None):
    size = batching.batch_size_of(vals, dims)
    # the vmap's axis name reaches the body, so collectives over it inside jit resolve
    batched, out_dims = batching.batch_jaxpr(
        jaxpr, size, dims, False, axis_name=axis_data.name if axis_data else None,
        spmd_axis_name=axis_data.spmd_name if axis_data else None)
    outs = jit_p.bind(*vals, jaxpr=batched, name=name, backend=backend, donated_invars=(),
                      compiler_options=compiler_options)
    return outs, out_dims


def _jit_partial_eval(trace, tracers, *, jaxpr, name, backend=None, donated_invars=(),
                      compiler_options=None):
    unknowns = [not t.pval.is_known() for t in tracers]
    known_jaxpr, unknown_jaxpr, out_unknowns, num_res = pe.partial_eval_jaxpr(
        jaxpr, unknowns, instantiate=False)
    known_vals = [t.pval.get_known() for t in tracers if t.pval.is_known()]
    known_outs = jit_p.bind(*known_vals, jaxpr=known_jaxpr, name=name, backend=backend,
                            donated_invars=(), compiler_options=compiler_options)
    num_known_out = len(known_outs) - num_res
    known_out_vals, residuals = known_outs[:num_known_out], known_outs[num_known_out:]
    res_tracers = [trace.instantiate_const(trace.pure(r)) for r in residuals]
    unknown_tracers = [trace.instantiate_const(t) for t in tracers if not t.pval.is_known()]
    unknown_outs = trace.default_process_primitive(
        jit_p, res_tracers + unknown_tracers,
        dict(jaxpr=unknown_jaxpr, name=name, backend=backend, donated_invars=(),
             compiler_options=compiler_options))
    known_iter, unknown_iter = iter(known_out_vals), iter(unknown_outs)
    return [next(unknown_iter) if uk else next(known_iter) for uk in out_unknowns]


jit_p.jvp = _jit_jvp
jit_p.transpose = _jit_transpose
jit_p.batch = _jit_batch
jit_p.batch_needs_axis = True
jit_p.partial_eval = _jit_partial_eval


# =============================================================================================
# The user-facing wrapper
# =============================================================================================


def _normalize_argnums(fun, static_argnums, static_argnames):
    # as JAX: when both are given they are taken as they are; when one is given the other
    # is inferred from the signature
    infer_nums = static_argnums is None or static_argnames is None
    infer_names = infer_nums
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    static_argnums = tuple(static_argnums or ())
    static_argnames = tuple(static_argnames or ())
    try:
        sig = inspect.signature(fun)
        params = list(sig.parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for n in static_argnums if infer_names else ():
        if 0 <= n < len(positional) and positional[n] not in static_argnames:
            static_argnames += (positional[n],)
    for name in static_argnames if infer_nums else ():
        if name in positional:
            i = positional.index(name)
            if i not in static_argnums:
                static_argnums += (i,)
    return static_argnums, static_argnames, positional


def _hoist_traced_consts(closed: ClosedJaxpr) -> tuple[ClosedJaxpr, list]:
    """``closed`` with its traced constants (values of an enclosing trace the function
    closed over, e.g. ``x`` in ``jit(lambda x: jit(lambda y: x + y)(1.))``) turned into
    leading inputs, and those values: a compiled program can only hold concrete constants."""
    traced = [isinstance(c, Tracer) for c in closed.consts]
    if not any(traced):
        return closed, []
    jaxpr = closed.jaxpr
    hoisted = [v for v, t in zip(jaxpr.constvars, traced) if t]
    kept = [v for v, t in zip(jaxpr.constvars, traced) if not t]
    new = core.Jaxpr(kept, hoisted + jaxpr.invars, jaxpr.outvars, jaxpr.eqns)
    return (ClosedJaxpr(new, [c for c, t in zip(closed.consts, traced) if not t]),
            [c for c, t in zip(closed.consts, traced) if t])


class _CacheEntry:
    __slots__ = ("closed", "out_tree", "executable", "backend")

    def __init__(self, closed, out_tree, backend):
        self.closed = closed
        self.out_tree = out_tree
        self.executable = None
        self.backend = backend


class _HashableStatic:
    """Wraps a static argument for the cache key, with a clear error if it is unhashable."""

    __slots__ = ("value",)

    def __init__(self, value, where):
        try:
            hash(value)
        except TypeError:
            raise ValueError(f"static argument {where} must be hashable, got "
                             f"{type(value).__name__}: {value!r}") from None
        self.value = value

    def __hash__(self):
        return hash(self.value)

    def __eq__(self, other):
        return type(self.value) is type(other.value) and self.value == other.value


class ArgInfo:
    """One argument of a staged function: its type, and whether it is donated (as
    ``jax.stages.ArgInfo``)."""

    __slots__ = ("_aval", "donated")

    def __init__(self, aval, donated: bool):
        self._aval = aval
        self.donated = donated

    shape = property(lambda self: self._aval.shape)
    dtype = property(lambda self: self._aval.dtype)

    def __repr__(self):
        return f"ArgInfo(_aval={self._aval!r}, donated={self.donated})"


class _Stage:
    """What every stage of a jitted function knows: its signature (``in_tree`` of
    (positional, keyword) non-static arguments), the staged program and the names and
    donation of its arguments."""

    def cost_analysis(self) -> dict:
        """The program's flops, transcendentals and bytes accessed, counted on its jaxpr
        (see ``functrans._cost_analysis``)."""
        return _cost_analysis.cost_analysis(self.closed)

    def __init__(self, closed: ClosedJaxpr, in_tree, out_tree, backend, arg_names=(),
                 donated=frozenset(), compiler_options=None):
        self.closed = closed
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.backend = backend
        self._arg_names = arg_names
        self._donated = donated  # positions among the argument leaves
        self._compiler_options = compiler_options  # see compiler_options_key

    @property
    def in_avals(self):
        return tree_util.tree_unflatten(self.in_tree, self.closed.in_avals)

    @property
    def out_avals(self):
        return tree_util.tree_unflatten(self.out_tree, self.closed.out_avals)

    @property
    def args_info(self):
        return tree_util.tree_unflatten(self.in_tree, [
            ArgInfo(a, k in self._donated) for k, a in enumerate(self.closed.in_avals)])

    @property
    def out_info(self):
        return tree_util.tree_unflatten(self.out_tree, [
            ShapeDtypeStruct(a.shape, a.dtype, a.weak_type) for a in self.closed.out_avals])

    @property
    def donate_argnums(self) -> tuple:
        positions = {_leaf_position(self.in_tree, k) for k in self._donated}
        return tuple(sorted(p for p in positions if p is not None))


def _leaf_position(in_tree, leaf: int):
    """The positional argument (index) that leaf ``leaf`` of an (args, kwargs) tree is in;
    None for a keyword argument."""
    args_tree = tree_util.tree_unflatten(in_tree, list(range(in_tree.num_leaves)))
    for i, arg in enumerate(args_tree[0]):
        if leaf in tree_util.tree_leaves(arg):
            return i
    return None


class Traced(_Stage):
    """The result of ``jitted.trace(*args)``: the function staged to a program (``.jaxpr``)
    for those arguments' types, ready to lower."""

    def __init__(self, closed, in_tree, out_tree, backend, arg_names=(), donated=frozenset(),
                 fun_name="fun", compiler_options=None):
        super().__init__(closed, in_tree, out_tree, backend, arg_names, donated,
                         compiler_options)
        self.fun_name = fun_name

    @property
    def jaxpr(self) -> ClosedJaxpr:
        return self.closed

    def lower(self) -> "Lowered":
        return Lowered(self.closed, self.in_tree, self.out_tree, self.backend, self._arg_names,
                       self._donated, self._compiler_options)


class Lowered(_Stage):
    """The result of ``jitted.lower(*args)``: the staged program, ready to compile."""

    def as_text(self, dialect: str | None = None) -> str:
        text = "# jaxpr\n" + self.closed.pretty_print()
        executable = self.compile()._executable
        extra = getattr(executable, "as_text", None)
        if extra is not None and dialect != "jaxpr":
            text += "\n# compiled (" + _backends.get_backend(self.backend).name + ")\n" + extra()
        return text

    def compile(self, compiler_options: dict | None = None) -> "Compiled":
        """The compiled program; ``compiler_options`` (as jit's) add to or replace those
        given to jit."""
        options = dict(self._compiler_options or ())
        options.update(compiler_options or {})
        options = compiler_options_key(options)
        return Compiled(compile_closed(self.closed, self.backend, options), self.in_tree,
                        self.out_tree, self.closed, self._arg_names, self._donated,
                        self.backend, options)

    def jaxpr(self) -> ClosedJaxpr:
        return self.closed


class Compiled(_Stage):
    """A compiled program for one argument signature: ``jitted.lower(*args).compile()``.
    It is called with the lowered function's non-static arguments; their pytree structure,
    shapes and dtypes must be the lowered ones (a Python scalar may stand for an array of
    shape ``()`` of its kind), else it raises ``TypeError`` as JAX does."""

    def __init__(self, executable, in_tree, out_tree, closed, arg_names=(),
                 donated=frozenset(), backend=None, compiler_options=None):
        super().__init__(closed, in_tree, out_tree, backend, arg_names, donated,
                         compiler_options)
        self._executable = executable

    def __call__(self, *args, **kwargs):
        leaves, in_tree = tree_util.tree_flatten((list(args), kwargs))
        if in_tree != self.in_tree:
            raise TypeError("Function compiled with input pytree does not match the input "
                            f"pytree it was called with: compiled for {self.in_tree}, "
                            f"called with {in_tree}")
        buffers = _checked_arguments(leaves, self.closed.in_avals, self.in_tree,
                                     self._arg_names)
        outs = _call_executable(self._executable, buffers, self.closed.in_avals,
                                self.closed.out_avals)
        return self.out_tree.unflatten(outs)

    call = __call__

    def as_text(self) -> str:
        extra = getattr(self._executable, "as_text", None)
        return extra() if extra else str(self.closed)

    def cost_analysis(self) -> dict | None:
        """What one call computes, from the compiler's schedule: ``{"flops",
        "transcendentals", "bytes accessed"}`` (see ``functrans.backends.compiler.cost``);
        None when the backend does not say.

            >>> import functrans, functrans.numpy as jnp
            >>> f = functrans.jit(lambda a, b: a @ b)
            >>> f.lower(jnp.ones((4, 8)), jnp.ones((8, 2))).compile().cost_analysis()["flops"]
            128.0
        """
        analysis = getattr(self._executable, "cost_analysis", None)
        return analysis() if analysis is not None else None

    def memory_analysis(self) -> "CompiledMemoryStats | None":
        """The memory one call uses, from the compiler's buffer plan: arguments, outputs,
        constants, scratch (``temp_size_in_bytes``) and object code; None when the backend
        does not say."""
        analysis = getattr(self._executable, "memory_analysis", None)
        return CompiledMemoryStats(**analysis()) if analysis is not None else None


class CompiledMemoryStats(NamedTuple):
    """:meth:`Compiled.memory_analysis`'s answer, in bytes, under the field names JAX's
    has. No argument buffer is aliased by an output unless donated (``alias_size_in_bytes``
    counts none), and nothing lives in host memory apart from the device's."""
    argument_size_in_bytes: int
    output_size_in_bytes: int
    temp_size_in_bytes: int
    constant_size_in_bytes: int
    generated_code_size_in_bytes: int
    alias_size_in_bytes: int = 0
    host_argument_size_in_bytes: int = 0
    host_output_size_in_bytes: int = 0
    host_temp_size_in_bytes: int = 0
    host_alias_size_in_bytes: int = 0
    host_generated_code_size_in_bytes: int = 0


def _checked_arguments(leaves, avals, in_tree, arg_names) -> list:
    """``leaves`` as buffers for a program compiled for ``avals``; ``TypeError`` listing
    every argument whose shape or dtype differs (each named by its pytree path)."""
    buffers, mismatches = [], []
    for k, (x, aval) in enumerate(zip(leaves, avals)):
        if isinstance(x, np.ndarray) and not x.dtype.isnative:
            x = x.astype(x.dtype.newbyteorder("="))  # same values, in this machine's order
        try:
            given = get_aval(x)
        except TypeError:
            given = None
        if given is None or given.shape != aval.shape or given.dtype != aval.dtype:
            mismatches.append((k, given))
        buffers.append(x)
    if mismatches:
        names = _argument_names(in_tree, arg_names)
        lines = [f"Argument '{names[k]}' compiled with {avals[k].strip_weak_type().str_short()}"
                 " and called with " + (given.strip_weak_type().str_short() if given is not None
                                        else f"a {type(leaves[k]).__name__}")
                 for k, given in mismatches]
        raise TypeError("Argument types differ from the types for which this computation was "
                        "compiled. Perhaps you are calling the compiled executable with a "
                        "different enable_x64 mode than when it was AOT compiled? The "
                        "mismatches are:\n" + "\n".join(lines))
    return buffers


def _argument_names(in_tree, arg_names) -> list[str]:
    """A name per leaf of ``in_tree`` (an (args, kwargs) tree): the parameter's name, or
    ``args[i]`` past the named ones, followed by the path inside the argument."""
    args_tree = tree_util.tree_unflatten(in_tree, [None] * in_tree.num_leaves)
    names = []
    for path, _ in tree_util.tree_flatten_with_path(
            args_tree, is_leaf=lambda x: x is None)[0]:
        head, rest = path[1], path[2:]
        if getattr(path[0], "idx", 1) == 0:  # positional
            i = head.idx
            name = arg_names[i] if i < len(arg_names) else f"args[{i}]"
        else:
            name = str(head.key)
        names.append(name + tree_util.keystr(rest))
    return names


# The caches of jitted functions, per function (weakly: a function that is collected takes
# its caches with it) and per jit options, so that ``jit(f)(x)`` written inside a loop, or
# two ``jit(f)`` of one ``f``, trace and compile ``f`` once per signature, as in JAX.
_function_caches: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_function_caches_lock = threading.Lock()


def _caches_for(fun, options) -> tuple[dict, LRUCache]:
    """The (fast path, signature) caches of ``fun`` jitted with ``options``; new ones for a
    callable that cannot be weakly referenced or hashed (each of its jits then has its own)."""
    try:
        with _function_caches_lock:
            per_options = _function_caches.setdefault(fun, {})
            caches = per_options.get(options)
            if caches is None:
                fast: dict = {}
                caches = per_options[options] = (fast, LRUCache("jit_cache_max_entries",
                                                                plain=fast))
            return caches
    except TypeError:  # unhashable options or a callable without weak references
        fast = {}
        return fast, LRUCache("jit_cache_max_entries", plain=fast)


class JitWrapped:
    """A jitted function. Calling it traces once per signature and runs compiled code."""

    def __init__(self, fun: Callable, static_argnums=None, static_argnames=None, donate_argnums=(),
                 backend=None, shardings=None, compiler_options=None):
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._static_argnums, self._static_argnames, self._positional = _normalize_argnums(
            fun, static_argnums, static_argnames)
        if isinstance(donate_argnums, int):
            donate_argnums = (donate_argnums,)
        self._donate_argnums = tuple(donate_argnums or ())
        self._backend = backend
        self._shardings = shardings  # (in_shardings, out_shardings) or None
        self._compiler_options = compiler_options  # see compiler_options_key
        # Per signature, least recently called first, at most config.jit_cache_max_entries:
        # the traced program and executable, and the fast path's runner (in a plain dict,
        # whose lookup is the cheapest; see _caches.insert_plain). Shared by every jit of
        # the same function with the same options (see _caches_for).
        self._fast_cache, self._cache = _caches_for(
            fun, (self._static_argnums, self._static_argnames, self._donate_argnums, backend,
                  shardings, compiler_options))
        self._fast_eligible = not self._static_argnums and not self._static_argnames and \
            shardings is None

    def __get__(self, instance, owner):
        if instance is None:
            return self
        return functools.partial(self, instance)

    @property
    def __signature__(self):
        """The wrapped function's signature (``inspect.signature`` of a jitted function,
        also with ``follow_wrapped=False``)."""
        return inspect.signature(self._fun)

    def _split(self, args, kwargs):
        statics = []
        dyn_args = []
        for i, a in enumerate(args):
            if i in self._static_argnums:
                statics.append((i, _HashableStatic(a, f"{i}")))
            else:
                dyn_args.append(a)
        dyn_kwargs = {}
        for k, v in kwargs.items():
            if k in self._static_argnames:
                statics.append((k, _HashableStatic(v, repr(k))))
            else:
                dyn_kwargs[k] = v
        return tuple(statics), dyn_args, dyn_kwargs

    def _call_with_statics(self, statics, dyn_args, dyn_kwargs):
        static_pos = {k: s.value for k, s in statics if isinstance(k, int)}
        static_kw = {k: s.value for k, s in statics if isinstance(k, str)}
        it = iter(dyn_args)
        args = [static_pos[i] if i in static_pos else next(it)
                for i in range(len(dyn_args) + len(static_pos))]
        return self._fun(*args, **dyn_kwargs, **static_kw)

    def _trace(self, statics, dyn_args, dyn_kwargs, in_tree, avals):
        out_tree_cell = []

        def flat_fun(*flat):
            args, kwargs = tree_util.tree_unflatten(in_tree, flat)
            out = self._call_with_statics(statics, args, kwargs)
            leaves, out_tree = flat_array_outputs("jit: the function", out)
            out_tree_cell.append(out_tree)
            return leaves

        start = time.perf_counter()
        with _collector.paused():  # see functrans._collector
            jaxpr, consts = trace_to_jaxpr_dynamic(flat_fun, avals)
        profiler.record(f"trace {getattr(self._fun, '__name__', 'fun')}", "tracing",
                        int(start * 1e9), time.perf_counter_ns())
        if config.log_compiles:
            logger.warning("traced %s in %.1f ms", getattr(self._fun, "__name__", "fun"),
                           1e3 * (time.perf_counter() - start))
        return ClosedJaxpr(jaxpr, consts), out_tree_cell[0]

    def _signature(self, args, kwargs):
        if config.disable_jit:
            return None
        statics, dyn_args, dyn_kwargs = self._split(args, kwargs)
        leaves, in_tree = tree_util.tree_flatten((dyn_args, dyn_kwargs))
        avals = tuple(get_aval(x) for x in leaves)
        return statics, dyn_args, dyn_kwargs, leaves, in_tree, avals

    def _backend_for(self, leaves) -> str | None:
        """The backend named at jit, else the GPU's when an argument lives on a GPU."""
        if self._backend is None:
            for x in leaves:
                if type(x) is not Array and getattr(x, "_platform", "cpu") == "gpu":
                    return "cuda"
        return self._backend

    def _get_entry(self, statics, dyn_args, dyn_kwargs, in_tree, avals, backend=None):
        key = (in_tree, avals, statics, backend)
        entry = self._cache.lookup(key)
        if entry is None:
            if config.explain_cache_misses and self._cache:
                _explain.explain_cache_miss(self, key, self._cache.keys())
            closed, out_tree = self._trace(statics, dyn_args, dyn_kwargs, in_tree, avals)
            entry = _CacheEntry(closed, out_tree, backend)
            if not any(isinstance(c, Tracer) for c in closed.consts):
                self._cache.insert(key, entry)
        return entry

    # whether a fast-path hit marks its signature as the most recently called (see
    # _JitWrappedSignatures)
    _keeps_recency = False

    def __call__(self, *args, **kwargs):
        # A public entry point filtering its errors' tracebacks as api_boundary does, inline.
        # Fast path: positional arguments whose signature ran before, at top level. For
        # Arrays only, the usual call, it calls no helper before the runner: after a call
        # whose data went through the caches (a batch-1 forward streams megabytes of weights),
        # each Python frame on the way costs microseconds.
        try:
            if not kwargs and self._fast_eligible:
                key = []
                for a in args:
                    if type(a) is not Array:
                        signature = _tree_signature(args)
                        break
                    # no local name for the buffer: a donated one must be referenced by its
                    # Array alone when the call judges its ownership (_exclusively_owned)
                    key.append((a._value.shape, a._value.dtype, a.weak_type))
                else:  # the key _fast_signature makes
                    signature = (tuple(key), args)
                if signature is not None:
                    fast = self._fast_cache
                    run = fast.get(signature[0])
                    # flags that need the full call path: eager mode, checks, a profile
                    values = config._values
                    if run is not None and core._state.dynamic.level == 0 and not (
                            values["disable_jit"] or values["debug_nans"]
                            or values["debug_infs"] or profiler.is_tracing()):
                        if self._keeps_recency:
                            try:
                                fast[signature[0]] = fast.pop(signature[0])  # last: most recent
                            except KeyError:  # evicted by another thread in between
                                pass
                        return run(signature[1])
            return self._call(args, kwargs)
        except Exception as err:
            filter_error(err)
            raise

    def _call(self, args, kwargs):
        """A call that the fast path did not serve: trace or look up, compile, run."""
        if config.disable_jit:
            return self._fun(*args, **kwargs)
        statics, dyn_args, dyn_kwargs, leaves, in_tree, avals = self._signature(args, kwargs)
        entry = self._get_entry(statics, dyn_args, dyn_kwargs, in_tree, avals,
                                self._backend_for(leaves))
        closed = entry.closed
        # a function closing over a traced value (of vmap, grad, ...) binds jit_p to that trace
        eager = (core._state.dynamic.level == 0
                 and not any(isinstance(x, Tracer) for x in leaves)
                 and not any(isinstance(c, Tracer) for c in closed.consts))
        if eager and partitioner is not None and (self._shardings is not None or
                                                  partitioner.wants(leaves)):
            outs = partitioner.call(self._shardings, entry, leaves, in_tree)
            if outs is not None:
                return entry.out_tree.unflatten(outs)
        if eager:
            if _transfer_guard.switch.on:
                _check_host_arguments(leaves, avals, entry.backend)
            if entry.executable is None:
                entry.executable = compile_closed(closed, entry.backend, self._compiler_options)
            start = time.perf_counter_ns()
            if self._donate_argnums and hasattr(entry.executable, "call_donating"):
                outs = self._call_donating(entry.executable, args, kwargs, leaves, avals,
                                           closed.out_avals)
            else:
                outs = _call_executable(entry.executable, leaves, avals, closed.out_avals)
            if profiler.is_tracing():
                profiler.record(getattr(self._fun, "__name__", "fun"), "jit call", start,
                                time.perf_counter_ns(), {"backend": entry.backend or "default"})
            if _debug_checks.enabled():
                _debug_rerun.check_compiled_outputs(closed, leaves, outs)
            if self._fast_eligible and not kwargs:
                signature = _fast_signature(args)
                if signature is not None:
                    run = _fast_runner(entry, self._donated_leaves(args))
                    if run is not None:
                        insert_plain(self._fast_cache, signature[0], run,
                                     "jit_cache_max_entries")
                        if len(self._fast_cache) > 1:
                            self.__class__ = _JitWrappedSignatures
            self._delete_donated(args, outs)
        else:
            closed, captured = _hoist_traced_consts(closed)
            outs = jit_p.bind(*captured, *leaves, jaxpr=closed,
                              name=getattr(self._fun, "__name__", "fun"),
                              backend=entry.backend, donated_invars=(),
                              compiler_options=self._compiler_options)
        return entry.out_tree.unflatten(outs)

    def _donated_leaves(self, args) -> list:
        """Positions, among the leaves of the non-static ``args``, of the donated
        arguments' leaves."""
        positions, position = [], 0
        for i, arg in enumerate(args):
            if i in self._static_argnums:
                continue
            count = len(tree_util.tree_leaves(arg))
            if i in self._donate_argnums:
                positions.extend(range(position, position + count))
            position += count
        return positions

    def _delete_donated(self, args, outs) -> None:
        """Donated Array arguments are consumed by the call: mark them deleted (their
        buffers may now hold results, which are new Arrays)."""
        if not self._donate_argnums:
            return
        for i in self._donate_argnums:
            if i >= len(args):
                continue
            for leaf in tree_util.tree_leaves(args[i]):
                if type(leaf) is Array and not leaf.is_deleted():
                    _array.delete(leaf)

    def _call_donating(self, executable, args, kwargs, leaves, avals, out_avals) -> list:
        """Run ``executable`` giving it the donated arguments' buffers that nothing else
        holds: a NumPy array owned by its Array alone (not a view, not obtained with
        ``np.asarray`` by the caller, not shared with another Array). Others are copied
        as usual by not being donated."""
        donated = _donatable(leaves, self._donated_leaves(args))
        buffers = [core.to_numpy(x, a) for x, a in zip(leaves, avals)]
        try:
            outs = executable.call_donating(buffers, donated)
        except KeyboardInterrupt:
            # Ctrl-C stopped it part-way: a donated buffer may hold part of a result, so the
            # donated Arrays are consumed as by a call that finished
            self._delete_donated(args, None)
            raise
        return [core.wrap_array(o, a) for o, a in zip(outs, out_avals)]

    def trace(self, *args, **kwargs) -> Traced:
        """Stage the function for these arguments' types (``jitted.trace(x).jaxpr``);
        ``.lower()`` and ``.lower().compile()`` go on from there."""
        if config.disable_jit:
            raise ValueError("jit(...).trace is not available while jit is disabled")
        statics, dyn_args, dyn_kwargs, leaves, in_tree, avals = self._signature(args, kwargs)
        backend = self._backend_for(leaves)
        entry = self._get_entry(statics, dyn_args, dyn_kwargs, in_tree, avals, backend)
        names = [self._positional[i] if i < len(self._positional) else f"args[{i}]"
                 for i in range(len(args)) if i not in self._static_argnums]
        return Traced(entry.closed, in_tree, entry.out_tree, backend, names,
                      frozenset(self._donated_leaves(args)), getattr(self._fun, "__name__", "fun"),
                      self._compiler_options)

    def lower(self, *args, **kwargs) -> Lowered:
        return self.trace(*args, **kwargs).lower()

    def eval_shape(self, *args, **kwargs):
        return _api.eval_shape(self, *args, **kwargs)

    def clear_cache(self):
        self._cache.clear()
        self._fast_cache.clear()

    def _cache_size(self) -> int:
        return len(self._cache)


class _JitWrappedSignatures(JitWrapped):
    """A :class:`JitWrapped` whose fast path holds several signatures: a hit also marks its
    signature as the most recently called, for the cache's eviction order. The class is
    switched when a second signature is cached, so that a function called with one
    signature (the usual case) pays only the check of ``_keeps_recency`` for it."""

    _keeps_recency = True


# ---- eager operations on device arrays ---------------------------------------------------------

# One-equation jitted programs for eager operations on GPU arrays, by primitive and parameters.
_device_ops = LRUCache("executable_cache_max_entries")


def _eval_on_device(primitive, args, params):
    """An eager ``primitive`` on arguments of which one lives on a GPU: a jitted one-equation
    program, cached per primitive and parameters (jit then compiles it for the GPU, once
    per signature), so eager code on GPU arrays stays on the GPU. Primitives whose
    parameters hold programs or functions run on the host instead."""
    try:
        key = (primitive, tuple(sorted(params.items())))
        hash(key)
    except TypeError:
        return NotImplemented
    if any(_holds_code(v) for v in params.values()):
        return NotImplemented
    run = _device_ops.lookup(key)
    if run is None:
        def one_op(*xs):
            return primitive.bind(*xs, **params)
        one_op.__name__ = primitive.name
        run = JitWrapped(one_op)
        _device_ops.insert(key, run)
    return run(*args)


def _holds_code(value) -> bool:
    if isinstance(value, (tuple, list)):
        return any(_holds_code(v) for v in value)
    return isinstance(value, (ClosedJaxpr, core.Jaxpr, functools.partial)) or \
        inspect.isfunction(value) or inspect.ismethod(value) or inspect.isbuiltin(value)


core.register_device_eval(_eval_on_device)


def _fast_signature(args):
    """``(key, leaves)`` for positional arguments that are Arrays (on a CPU or a GPU), None,
    or lists, tuples, dicts and registered pytree nodes (typed key arrays among them) of
    them; None for anything else. ``key`` encodes the tree
    in preorder (each container with its length or sorted keys, so it is unambiguous) and
    each leaf's shape, dtype and weak type; ``leaves`` (a sequence) are in ``tree_flatten``'s
    order."""
    key = []
    for a in args:  # the usual call, Arrays only, without the walk's frame (JitWrapped's
        if type(a) is not Array:  # __call__ makes the same key inline)
            return _tree_signature(args)
        key.append((a._value.shape, a._value.dtype, a.weak_type))
    return tuple(key), args


def _tree_signature(args):
    """:func:`_fast_signature` of arguments that are not all Arrays: the walk."""
    key, leaves = [], []
    return (tuple(key), leaves) if _signature_walk(args, key, leaves) else None


def _signature_walk(items, key, leaves) -> bool:
    for a in items:
        t = type(a)
        if t is Array:
            value = a._value
            key.append((value.shape, value.dtype, a.weak_type))
            leaves.append(a)
        elif t is list or t is tuple:
            key.append((t, len(a)))
            if not _signature_walk(a, key, leaves):
                return False
        elif t is dict:
            try:
                names = sorted(a)
            except TypeError:
                return False
            key.append((dict, tuple(names)))
            if not _signature_walk([a[k] for k in names], key, leaves):
                return False
        elif a is None:
            key.append(None)
        elif t in _pytree_nodes:
            # a registered container (a typed key array, a dataclass): keyed by its type and
            # auxiliary data, as its treedef compares, then its children
            children, aux = _pytree_nodes[t].flatten(a)
            try:
                key.append((t, aux))
                hash(key[-1])
            except TypeError:
                return False
            if not _signature_walk(children, key, leaves):
                return False
        elif getattr(a, "_platform", "cpu") == "gpu":
            key.append((a.shape, a.dtype, a.weak_type, "gpu"))
            leaves.append(a)
        else:
            return False
    return True


_pytree_nodes = tree_util._registry


def _exclusively_owned(leaf) -> bool:
    """Whether ``leaf`` is an Array whose NumPy buffer is referenced by it alone (so a call
    may write results into it once the Array is deleted)."""
    if type(leaf) is not Array:
        return False
    value = leaf._value
    if type(value) is not np.ndarray or not _backends.sole_user_of_memory(value):
        return False
    del value  # counted the same way as the calibration below: no reference held here
    return _references_to_buffer(leaf) <= _SOLE_OWNER_REFERENCES


def _donatable(leaves, positions) -> frozenset:
    """The donated leaf positions whose buffers a call may reuse: exclusively owned (see
    :func:`_exclusively_owned`), and not also passed at another position (the program
    would read it there while writing a result into it)."""
    ids = [id(x._value) if type(x) is Array else id(x) for x in leaves]
    return frozenset([k for k in positions
                      if ids.count(ids[k]) == 1 and _exclusively_owned(leaves[k])])


def _references_to_buffer(leaf) -> int:
    value = leaf._value
    return sys.getrefcount(value)


# What _references_to_buffer says of a buffer only its Array holds, measured rather than
# assumed: how many references the interpreter itself counts differs between versions.
_SOLE_OWNER_REFERENCES = _references_to_buffer(Array._from_buffer(np.empty(1, np.float32)))


def _on_gpu(x) -> bool:
    return type(x) is not Array and getattr(x, "_platform", "cpu") == "gpu"


def _call_executable(executable, leaves, avals, out_avals) -> list:
    """Run a compiled program on eager values; returns functrans arrays. A backend that
    takes device buffers gets GPU arrays' buffers as they are, and wraps its own results."""
    if hasattr(executable, "call_arrays"):  # a partitioned program places its arguments
        return executable.call_arrays(leaves)
    if getattr(executable, "takes_device_buffers", False):
        outs = executable(*[x.device_buffer if _on_gpu(x) else core.to_numpy(x, a)
                            for x, a in zip(leaves, avals)])
        return executable.wrap_outputs(outs, out_avals)
    outs = executable(*[core.to_numpy(x, a) for x, a in zip(leaves, avals)])
    return [core.wrap_array(o, a) for o, a in zip(outs, out_avals)]


def _check_host_arguments(leaves, avals, backend) -> None:
    """Host data (NumPy arrays, Python scalars) passed to a jitted call is an implicit
    host-to-device transfer, for the transfer guards."""
    for leaf, aval in zip(leaves, avals):
        if not is_concrete_array(leaf) and not _on_gpu(leaf):
            _transfer_guard.check("host_to_device", False,
                                  lambda: _transfer_guard.describe_host_to_device(aval, None))


# The most leaves a fast runner names one by one (see _fast_runner).
_UNPACKED_MAX_LEAVES = 32


def _fast_runner(entry: _CacheEntry, donated=()):
    """A call of ``entry``'s executable on the leaves of its arguments (see
    :func:`_fast_signature`), with outputs wrapped directly; None when the call needs the
    full path. ``donated``: positions of donated leaves, whose buffers the call may reuse
    when nothing else holds them (see ``JitWrapped._call_donating``); their Arrays are
    deleted."""
    executable = entry.executable
    out_weak = [a.weak_type for a in entry.closed.out_avals]
    new_array = Array._from_buffer
    out_tree = entry.out_tree
    single = out_tree.kind == "leaf"

    if hasattr(executable, "call_arrays"):  # a partitioned program
        call_arrays = executable.call_arrays
        return lambda args: out_tree.unflatten(call_arrays(args))

    device = getattr(executable, "takes_device_buffers", False)
    build = _output_builder_source(out_tree, out_weak)
    if donated and (device or not hasattr(executable, "call_donating") or build is None):
        return None

    if device:
        wrap, out_avals = executable.wrap_outputs, entry.closed.out_avals

        def run_device(args):
            outs = wrap(executable(*[a._value if type(a) is Array else a.device_buffer
                                     for a in args]), out_avals)
            return outs[0] if single else out_tree.unflatten(outs)

        return run_device

    if build is not None:  # straight-line code: a call returns in a few µs
        # a backend may give a call specialized to the signature, with the same checks
        call = getattr(executable, "call_specialized", executable)
        namespace = {"executable": executable, "call": call, "new": new_array,
                     "donated": tuple(donated), "donatable": _donatable, "Array": Array,
                     "delete": _array_delete}
        if donated:  # ownership is judged before the list of buffers adds references
            # the donated Arrays are deleted, also after a call that Ctrl-C stopped part-way
            # (a donated buffer may then hold part of a result)
            delete = "for k in donated:\n    if type(args[k]) is Array:\n        delete(args[k])\n"
            body = ("    given = donatable(args, donated)\n"
                    "    try:\n"
                    "        o = executable.call_donating([a._value for a in args], given)\n"
                    "    except KeyboardInterrupt:\n"
                    + textwrap.indent(delete, " " * 8) + "        raise\n"
                    + textwrap.indent(delete, " " * 4))
        elif len(entry.closed.in_avals) <= _UNPACKED_MAX_LEAVES:
            # the leaves unpacked by name (which checks their count) rather than by a list
            # comprehension, a frame of its own per call
            names = [f"a{i}" for i in range(len(entry.closed.in_avals))]
            body = (f"    [{', '.join(names)}] = args\n"
                    f"    o = call({', '.join(n + '._value' for n in names)})\n")
        else:
            body = "    o = call(*[a._value for a in args])\n"
        exec(f"def run(args):\n{body}    return {build}\n", namespace)
        return namespace.pop("run")  # not left in its own globals: no cycle to outlive it

    def run(args):
        outs = executable(*[a._value for a in args])
        if single:
            return new_array(outs[0], out_weak[0])
        return out_tree.unflatten([new_array(o, w) for o, w in zip(outs, out_weak)])

    return run


def _output_builder_source(out_tree, out_weak) -> str | None:
    """A Python expression building the result tree ``out_tree`` from ``o`` (the list of
    output buffers) with ``new(buffer, weak_type)``; None when the tree has a node other
    than a list, tuple, dict with str or int keys, or None."""
    counter = iter(range(len(out_weak)))

    def build(node):
        kind = node.kind
        if kind == "leaf":
            i = next(counter)
            return f"new(o[{i}], {bool(out_weak[i])})"
        if kind == "none":
            return "None"
        children = [build(c) for c in node.children]
        if any(c is None for c in children):
            return None
        if kind == "list":
            return "[" + ", ".join(children) + "]"
        if kind == "tuple":
            return "(" + "".join(c + ", " for c in children) + ")"
        if kind == "dict" and all(type(k) in (str, int) for k in node.aux):
            return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(node.aux, children)) + "}"
        return None

    if out_tree.num_leaves != len(out_weak) or out_tree.num_nodes > 1000:
        return None
    return build(out_tree)


def jit(fun: Callable | None = None, /, *, in_shardings=None, out_shardings=None,
        static_argnums=None, static_argnames=None, donate_argnums=None, donate_argnames=None,
        keep_unused: bool = False, device=None, backend: str | None = None,
        inline: bool = False, compiler_options: dict | None = None):
    """Compile ``fun``: trace it once per argument signature (pytree structure, shapes,
    dtypes, static argument values) and run the compiled program on later calls.

    ``device`` or ``backend`` pick where it runs (by default where its arguments are);
    ``donate_argnums``/``donate_argnames`` let the program reuse those arguments' buffers;
    ``keep_unused`` and ``inline`` are accepted (unused arguments are always kept, and a
    jitted function called under another ``jit`` is one equation either way).
    ``compiler_options`` holds the llvm backend's ``{"target_cpu": name}``: the CPU the
    code is compiled for, ``"native"``, ``"x86-64-v2"``, ``"x86-64-v3"`` or ``"x86-64-v4"``
    (default ``config.llvm_cpu``; see docs/compiler.md); any other option is a ValueError.

    Called with arguments split over a mesh (``device_put(x, NamedSharding(...))``), or
    given ``in_shardings``/``out_shardings`` (shardings, or pytree prefixes of the
    positional arguments and of the outputs), the program is partitioned over the mesh:
    every device runs its share with the collectives it needs, and the results are split
    as the sharding propagation decided (or as ``out_shardings`` say); see docs/sharding.md.

        >>> import functrans, functrans.numpy as jnp
        >>> f = functrans.jit(lambda x: jnp.sin(x) * 2)
        >>> f(jnp.zeros(3))
        Array([0., 0., 0.], dtype=float32)
    """
    options = dict(in_shardings=in_shardings, out_shardings=out_shardings,
                   static_argnums=static_argnums, static_argnames=static_argnames,
                   donate_argnums=donate_argnums, donate_argnames=donate_argnames,
                   keep_unused=keep_unused, device=device, backend=backend, inline=inline,
                   compiler_options=compiler_options)
    if fun is None:
        return functools.partial(jit, **options)
    compiler_options = compiler_options_key(compiler_options)
    if device is not None:
        if backend is not None:
            raise ValueError("jit: pass device or backend, not both")
        backend = "cuda" if getattr(device, "platform", "cpu") == "gpu" else "cpu"
    _check_argnums(fun, "static_argnums", static_argnums)
    _check_argnames(fun, "static_argnames", static_argnames)
    _check_argnums(fun, "donate_argnums", donate_argnums)
    donate_argnums = _donated_positions(fun, donate_argnums, donate_argnames)
    shardings = None if in_shardings is None and out_shardings is None else \
        (in_shardings, out_shardings)
    if shardings is not None and partitioner is not None:
        partitioner.check(shardings)
    return JitWrapped(fun, static_argnums, static_argnames, donate_argnums, backend, shardings,
                      compiler_options)


def _check_argnums(fun, option: str, argnums) -> None:
    """Refuse, when ``jit`` is called, positions that ``fun`` has no parameter for (a
    function with ``*args`` takes any); a signature that cannot be read is not checked."""
    argnums = (argnums,) if isinstance(argnums, int) else tuple(argnums or ())
    try:
        params = inspect.signature(fun).parameters.values()
    except (TypeError, ValueError):
        return
    if not argnums or any(p.kind is p.VAR_POSITIONAL for p in params):
        return
    count = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    if max(argnums) >= count or min(argnums) < -count:
        raise ValueError(f"Jitted function has {option}={argnums}, but only accepts {count} "
                         f"positional arguments.")


def _check_argnames(fun, option: str, argnames) -> None:
    """Refuse, when ``jit`` is called, names that are no keyword parameter of ``fun`` (a
    function with ``**kwargs`` takes any name that is not positional-only)."""
    argnames = {argnames} if isinstance(argnames, str) else set(argnames or ())
    try:
        params = inspect.signature(fun).parameters
    except (TypeError, ValueError):
        return
    positional_only = {n for n, p in params.items() if p.kind is p.POSITIONAL_ONLY}
    if argnames & positional_only:
        raise ValueError(f"Jitted function has invalid argnames {argnames & positional_only} "
                         f"in {option}. These are positional-only")
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    keywords = {n for n, p in params.items()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if argnames - keywords:
        raise ValueError(f"Jitted function has invalid argnames {argnames - keywords} in "
                         f"{option}. Function does not take these args.")


def _donated_positions(fun, donate_argnums, donate_argnames) -> tuple:
    """``donate_argnums`` with the positions of the parameters named in ``donate_argnames``."""
    if isinstance(donate_argnums, int):
        donate_argnums = (donate_argnums,)
    positions = tuple(donate_argnums or ())
    if donate_argnames:
        names = (donate_argnames,) if isinstance(donate_argnames, str) else tuple(donate_argnames)
        _, _, positional = _normalize_argnums(fun, (), ())
        for name in names:
            if name not in positional:
                raise ValueError(f"jit: donate_argnames names {name!r}, which is not a "
                                 f"positional parameter of {getattr(fun, '__name__', fun)}")
            positions += (positional.index(name),)
    return positions
