"""``export``, ``Exported`` and ``deserialize``: functions as data, runnable without their
Python source.

``export(jit(f))(*specs)`` traces ``f`` at the given shapes and dtypes and keeps its program
(the jaxpr) as a JSON document plus constant arrays (see :mod:`._program`); with symbolic
dimensions, as a template traced at a few sizes (see :mod:`._polymorphism`).
``Exported.call`` binds the dimension variables from the arguments' shapes, decodes the
program for those sizes (once per sizes), and runs it under ``jit``: on the local backend,
staged into an enclosing ``jit``, batched by ``vmap``. Reverse-mode differentiation goes
through the function's exported VJP (as in JAX): computed from the original function while
it is at hand, or read back from a file serialized with ``vjp_order >= 1``.

    >>> import functrans, functrans.numpy as jnp, numpy as np
    >>> from functrans import export
    >>> exp = export.export(functrans.jit(jnp.sin))(np.arange(4, dtype=np.float32))
    >>> exp.in_avals
    (ShapedArray(f32[4]),)
    >>> back = export.deserialize(exp.serialize())
    >>> back.call(np.zeros(4, np.float32))
    Array([0., 0., 0., 0.], dtype=float32)
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Callable, Sequence

import numpy as np

from functrans import _backends, _dtypes, core, tree_util
from functrans._api import ShapeDtypeStruct, vjp
from functrans._custom_derivatives import custom_vjp
from functrans._config import config
from functrans._jit import JitWrapped, _fast_signature, jit
from functrans.core import Tracer
from functrans.export import (_container, _dimensions, _polymorphism, _program, _pytrees,
                              _registry)
from functrans.export._dimensions import aval_with_shape, is_symbolic_dim
from functrans.version import __version__

_KNOWN_PLATFORMS = ("cpu", "cuda", "rocm", "tpu")  # JAX's names
_PLATFORMS = {"cpu": "cpu", "cuda": "gpu", "rocm": "gpu"}  # where each runs here
_MAX_SPECIALIZATIONS = 64


def default_export_platform() -> str:
    """The platform ``export`` targets when none is named: ``'cpu'`` or ``'cuda'``.

        >>> default_export_platform() in ("cpu", "cuda")
        True
    """
    return "cuda" if _backends.default_platform() == "gpu" else "cpu"


class DisabledSafetyCheck:
    """A safety check that ``export`` skips (``jax.export.DisabledSafetyCheck``). functrans's
    export has one: ``platform()``, calling an export on a platform it was not exported for."""

    def __init__(self, _impl: str):
        self._impl = _impl

    @classmethod
    def platform(cls) -> "DisabledSafetyCheck":
        return cls("platform")

    def __eq__(self, other):
        return isinstance(other, DisabledSafetyCheck) and self._impl == other._impl

    def __hash__(self):
        return hash(self._impl)

    def __repr__(self):
        return f"DisabledSafetyCheck.{self._impl}()"


@dataclasses.dataclass(frozen=True, eq=False)
class Exported:
    """A function lowered to functrans's IR, independent of its Python source.

    Attributes (as ``jax.export.Exported``): ``fun_name``; ``in_tree``, the structure of
    ``(args, kwargs)``; ``in_avals``, the flat input types (shapes may hold symbolic
    dimensions); ``out_tree`` and ``out_avals``; ``platforms``; ``nr_devices`` (1);
    ``ordered_effects`` and ``unordered_effects`` (none); ``disabled_safety_checks``.
    """

    fun_name: str
    in_tree: tree_util.PyTreeDef
    in_avals: tuple
    out_tree: tree_util.PyTreeDef
    out_avals: tuple
    platforms: tuple[str, ...]
    nr_devices: int = 1
    ordered_effects: tuple = ()
    unordered_effects: tuple = ()
    disabled_safety_checks: Sequence[DisabledSafetyCheck] = ()
    # the program: a template document (see _program), its constants, the dimension
    # variables it is polymorphic in; and how to get the exported VJP
    _program: dict = dataclasses.field(default=None, repr=False)
    _consts: list = dataclasses.field(default=None, repr=False)
    _dim_vars: tuple = dataclasses.field(default=(), repr=False)
    _get_vjp: Callable[["Exported"], "Exported"] | None = dataclasses.field(
        default=None, repr=False)
    # the names of the function's positional parameters (for C headers)
    _arg_names: tuple = dataclasses.field(default=(), repr=False)

    def __post_init__(self):
        object.__setattr__(self, "_specializations", {})
        object.__setattr__(self, "_solved", {})  # argument signature -> dimension values
        # (positional arguments' signature, default backend) -> specialization, for calls
        # whose arguments were checked before
        object.__setattr__(self, "_fast", {})
        object.__setattr__(self, "_vjp_cache", [])
        object.__setattr__(self, "_lock", threading.Lock())

    def __str__(self):
        return f"Exported(fun_name={self.fun_name}, ...)"

    def has_vjp(self) -> bool:
        """Whether this Exported can be differentiated (its VJP is known)."""
        return self._get_vjp is not None

    def vjp(self) -> "Exported":
        """The exported VJP: takes the primal arguments (flat) and a cotangent per output
        (flat), returns a cotangent per argument (flat). ``ValueError`` if not available."""
        if self._get_vjp is None:
            raise ValueError(f"No VJP is available for '{self.fun_name}': it was deserialized "
                             "from bytes serialized with vjp_order=0 (or fewer orders than "
                             "this derivative needs); serialize it with vjp_order=1 or more "
                             "to differentiate it")
        with self._lock:
            if not self._vjp_cache:
                self._vjp_cache.append(self._get_vjp(self))
            return self._vjp_cache[0]

    def serialize(self, vjp_order: int = 0) -> bytearray:
        """The bytes of this function (and of ``vjp_order`` orders of its VJP, so that
        ``grad`` works that many times through the deserialized function).

            >>> import functrans, functrans.numpy as jnp
            >>> exp = export(functrans.jit(jnp.tanh))(jnp.zeros(2))
            >>> back = deserialize(exp.serialize(vjp_order=1))
            >>> functrans.grad(lambda x: back.call(x).sum())(jnp.zeros(2))
            Array([1., 1.], dtype=float32)
        """
        if not isinstance(vjp_order, int) or vjp_order < 0:
            raise ValueError(f"vjp_order must be a non-negative integer, got {vjp_order!r}")
        chain = [self]
        for _ in range(vjp_order):
            chain.append(chain[-1].vjp())
        arrays, index = [], {}
        documents = [_document(e, arrays, index) for e in chain]
        return _container.pack({"exported": documents, "functrans_version": _version()},
                               arrays)

    def call(self, *args, **kwargs):
        """Run the exported function on ``args``/``kwargs`` (the pytree structure, dtypes
        and shapes it was exported for; symbolic dimensions take any positive size).
        Works eagerly and inside ``jit``, ``vmap`` and ``grad`` (through the VJP).

            >>> import functrans, functrans.numpy as jnp
            >>> exp = export(functrans.jit(lambda x, y: x @ y))(jnp.ones((2, 3)), jnp.ones(3))
            >>> functrans.jit(lambda y: exp.call(jnp.eye(2, 3), y) + 1)(jnp.arange(3.0))
            Array([1., 2.], dtype=float32)
        """
        if not kwargs:  # a signature seen before: straight to its compiled program
            fast = _fast_signature(args)
            if fast is not None:
                found = self._fast.get((fast[0], config.default_backend))
                if found is not None:
                    return self.out_tree.unflatten(found.call(fast[1]))
        leaves, in_tree = tree_util.tree_flatten((args, kwargs))
        if in_tree != self.in_tree:
            raise ValueError(
                "The invocation args and kwargs must have the same pytree structure as when "
                f"the function '{self.fun_name}' was exported, but they differ: called with "
                f"{in_tree}, exported with {self.in_tree}")
        self._check_platform(leaves)
        specialization = self._specialization(self._dimensions(leaves))
        if not kwargs and fast is not None:
            if len(self._fast) >= 4 * _MAX_SPECIALIZATIONS:
                self._fast.clear()
            self._fast[(fast[0], config.default_backend)] = specialization
        return self.out_tree.unflatten(specialization.call(leaves))

    def as_text(self) -> str:
        """The stored program, printed (a polymorphic one at its first sample sizes)."""
        dims = {v: p for v, p in _polymorphism.sample_points(list(self._dim_vars))[0].items()}
        return str(self._decode(dims))

    # ---- calling -----------------------------------------------------------------------------

    def _check_platform(self, leaves):
        if DisabledSafetyCheck.platform() in self.disabled_safety_checks:
            return
        here = "gpu" if any(getattr(x, "_platform", "cpu") == "gpu" for x in leaves) \
            else _backends.default_platform()
        if not any(_PLATFORMS.get(p) == here for p in self.platforms):
            raise ValueError(f"Function '{self.fun_name}' was exported for platforms "
                             f"'{self.platforms}' but it is used on "
                             f"'{('cuda' if here == 'gpu' else 'cpu',)}'.")

    def _dimensions(self, leaves) -> tuple:
        """The values of the dimension variables for arguments ``leaves`` (remembered per
        argument signature); ``ValueError`` naming the argument whose dtype or shape does
        not match."""
        try:
            signature = tuple((x.shape, x.dtype) for x in leaves)
            found = self._solved.get(signature)
        except (AttributeError, TypeError):  # Python scalars, lists: the full check
            signature = found = None
        if found is not None:
            return found
        names = _pytrees.flat_names(self.in_tree)
        shapes = []
        for x, aval, name in zip(leaves, self.in_avals, names):
            try:
                given = core.get_aval(x)
            except TypeError:
                raise TypeError(f"Argument {name} of type {type(x).__name__} is not an "
                                "array") from None
            if given.dtype != aval.dtype:
                raise ValueError(f"Dtype mismatch for {name}: expected {aval.dtype} and "
                                 f"called with {given.dtype}")
            shapes.append(given.shape)
        values = _dimensions.solve_dimensions([a.shape for a in self.in_avals], shapes, names)
        key = tuple(values[v] for v in self._dim_vars)
        if signature is not None:
            if len(self._solved) >= 4 * _MAX_SPECIALIZATIONS:
                self._solved.clear()
            self._solved[signature] = key
        return key

    def _decode(self, dims: dict):
        document = _program.instantiate(self._program, dims) if self._dim_vars else self._program
        return _program.decode_closed_jaxpr(document, self._consts)

    def _specialization(self, key: tuple) -> "_Specialization":
        found = self._specializations.get(key)
        if found is None:
            with self._lock:
                found = self._specializations.get(key)
                if found is None:
                    if len(self._specializations) >= _MAX_SPECIALIZATIONS:
                        self._specializations.pop(next(iter(self._specializations)))
                    dims = dict(zip(self._dim_vars, key))
                    try:
                        closed = self._decode(dims)
                    except ValueError as err:  # e.g. a size b - 5 at b = 2
                        raise ValueError(
                            f"'{self.fun_name}' cannot run at "
                            f"{_polymorphism.describe_point(dims)}: its program for those "
                            f"sizes is not valid ({err})") from None
                    found = self._specializations[key] = _Specialization(self, closed)
        return found


class _Specialization:
    """The program of an Exported at one set of sizes: compiled once (by ``jit``), and
    wrapped so that reverse-mode differentiation uses the exported VJP."""

    def __init__(self, exported: Exported, closed: core.ClosedJaxpr):
        self.closed = closed
        self.in_avals = closed.in_avals

        def program(*leaves):
            return core.eval_jaxpr(closed.jaxpr, closed.consts, *leaves)
        program.__name__ = program.__qualname__ = exported.fun_name
        self.jitted = jit(program)
        differentiable = custom_vjp(lambda *leaves: self.jitted(*leaves))

        def forward(*leaves):
            return self.jitted(*leaves), leaves

        def backward(leaves, cotangents):
            cts = exported.vjp().call(*leaves, *cotangents)
            return tuple(ct if np.issubdtype(a.dtype, np.inexact) else None
                         for ct, a in zip(cts, self.in_avals))

        differentiable.defvjp(forward, backward)
        self.differentiable = differentiable

    def call(self, leaves) -> list:
        if core._state.dynamic.level == 0 and not any(isinstance(x, Tracer) for x in leaves):
            return self.jitted(*leaves)
        return self.differentiable(*leaves)


# =============================================================================================
# export
# =============================================================================================


def export(fun_jit: JitWrapped, *, platforms: Sequence[str] | None = None,
           disabled_checks: Sequence[DisabledSafetyCheck] = ()) -> Callable[..., Exported]:
    """Export a jitted function: ``export(jit(f))(*args, **kwargs)`` with arrays or
    ``ShapeDtypeStruct``s (shapes may hold symbolic dimensions from :func:`symbolic_shape`)
    traces ``f`` and returns an :class:`Exported`. ``platforms``: where the export may run
    (``'cpu'``, ``'cuda'``; by default :func:`default_export_platform`).

        >>> import functrans, functrans.numpy as jnp
        >>> from functrans import export as ex
        >>> spec = functrans.ShapeDtypeStruct(ex.symbolic_shape("b, 3"), jnp.float32)
        >>> exp = ex.export(functrans.jit(lambda x: x.sum(axis=1)))(spec)
        >>> exp.out_avals
        (ShapedArray(f32[b]),)
        >>> exp.call(jnp.ones((2, 3)))
        Array([3., 3.], dtype=float32)
    """
    if not isinstance(fun_jit, JitWrapped):
        raise ValueError(f"Function to be exported must be the result of `jit` but is: "
                         f"{fun_jit}")
    if platforms is None:
        platforms = (default_export_platform(),)
    platforms = tuple(platforms)
    for p in platforms:
        if p not in _KNOWN_PLATFORMS:
            raise ValueError(f"export: unknown platform {p!r}; use 'cpu' or 'cuda'")
    for check in disabled_checks:
        if not isinstance(check, DisabledSafetyCheck):
            raise ValueError(f"export: disabled_checks takes DisabledSafetyCheck values, got "
                             f"{check!r}")

    def do_export(*args_specs, **kwargs_specs) -> Exported:
        return _export(fun_jit, platforms, tuple(disabled_checks), args_specs, kwargs_specs)
    return do_export


def _spec_of(x):
    """(shape, dtype) of an argument specification: a ShapeDtypeStruct or an array."""
    if isinstance(x, ShapeDtypeStruct):
        return x.shape, x.dtype
    shape = getattr(x, "shape", None)
    if shape is not None and any(is_symbolic_dim(d) for d in shape):
        return tuple(shape), np.dtype(x.dtype)
    aval = core.get_aval(x)
    return aval.shape, aval.dtype


def _export(fun_jit: JitWrapped, platforms, disabled, args, kwargs) -> Exported:
    statics, dyn_args, dyn_kwargs = fun_jit._split(args, kwargs)
    leaves, in_tree = tree_util.tree_flatten((tuple(dyn_args), dyn_kwargs))
    specs = [_spec_of(x) for x in leaves]
    in_avals = tuple(aval_with_shape(shape, dtype) for shape, dtype in specs)
    variables = sorted({v for shape, _ in specs for d in shape if is_symbolic_dim(d)
                        for v in d.variables})
    name = getattr(fun_jit, "__name__", "fun")

    def lower(point: dict):
        concrete = [ShapeDtypeStruct([d.evaluate(point) if is_symbolic_dim(d) else int(d)
                                      for d in shape], dtype) for shape, dtype in specs]
        call_args, call_kwargs = _with_statics(fun_jit, statics,
                                               *tree_util.tree_unflatten(in_tree, concrete))
        lowered = fun_jit.lower(*call_args, **call_kwargs)
        return lowered.closed, lowered.out_tree

    if not variables:
        closed, out_tree = lower({})
        template, consts = _program.encode_closed_jaxpr(closed)
    else:
        points = _polymorphism.sample_points(variables)
        traced = []
        for point in points:
            try:
                traced.append(lower(point))
            except Exception as err:
                if hasattr(err, "add_note"):
                    err.add_note(f"while tracing {name} for a dimension-polymorphic export, "
                                 f"at {_polymorphism.describe_point(point)}")
                raise
        out_tree = traced[0][1]
        if any(t != out_tree for _, t in traced):
            raise _polymorphism.PolymorphismError(
                f"the output structure of {name} depends on the dimension variables")
        encoded = [_program.encode_closed_jaxpr(closed) for closed, _ in traced]
        template, consts = _polymorphism.generalize(
            [doc for doc, _ in encoded], [c for _, c in encoded], points, variables)
    out_avals = _template_avals(template["outvars"], template)
    primal = _PrimalFunction(fun_jit, statics, in_tree)
    positional = getattr(fun_jit, "_positional", [])
    static_positions = {k for k, _ in statics if isinstance(k, int)}
    arg_names = tuple(positional[i] if i < len(positional) else f"arg{i}"
                      for i in range(len(args)) if i not in static_positions)
    return Exported(name, in_tree, in_avals, out_tree, out_avals, platforms,
                    disabled_safety_checks=disabled, _program=template, _consts=consts,
                    _dim_vars=tuple(variables), _get_vjp=primal.export_vjp,
                    _arg_names=arg_names)


def _with_statics(fun_jit: JitWrapped, statics, dyn_args, dyn_kwargs):
    """The positional and keyword arguments of a call, with the static ones put back."""
    positional = {k: s.value for k, s in statics if isinstance(k, int)}
    keywords = {k: s.value for k, s in statics if isinstance(k, str)}
    it = iter(dyn_args)
    args = [positional[i] if i in positional else next(it)
            for i in range(len(dyn_args) + len(positional))]
    return args, {**dyn_kwargs, **keywords}


def _template_avals(outvars: list, template: dict) -> tuple:
    """The (symbolic) types of a template's results."""
    binders = {}

    def collect(doc):
        if isinstance(doc, dict):
            if "var" in doc and "aval" in doc:
                binders[doc["var"]] = doc["aval"]
            for v in doc.values():
                collect(v)
        elif isinstance(doc, list):
            for v in doc:
                collect(v)
    collect({k: template[k] for k in ("constvars", "invars", "eqns")})
    avals = []
    for atom in outvars:
        doc = binders[atom] if isinstance(atom, int) else \
            {"shape": [], "dtype": atom["dtype"], "weak_type": atom.get("weak_type", False)}
        avals.append(aval_with_shape([_program.symbolic_value(d) for d in doc["shape"]],
                                     _registry.dtype_from_name(doc["dtype"]),
                                     doc.get("weak_type", False)))
    return tuple(avals)


class _PrimalFunction:
    """The original function of an export, kept to export its VJP on demand (with its
    custom differentiation rules, which the serialized program does not carry)."""

    def __init__(self, fun_jit, statics, in_tree):
        self.fun_jit, self.statics, self.in_tree = fun_jit, statics, in_tree

    def flat(self, *leaves):
        args, kwargs = tree_util.tree_unflatten(self.in_tree, leaves)
        call_args, call_kwargs = _with_statics(self.fun_jit, self.statics, list(args), kwargs)
        return tree_util.tree_leaves(self.fun_jit(*call_args, **call_kwargs))

    def export_vjp(self, primal: Exported) -> Exported:
        n = len(primal.in_avals)

        def vjp_flat(*args):
            _, pullback = vjp(self.flat, *args[:n])
            return tuple(pullback(list(args[n:])))
        vjp_flat.__name__ = f"vjp_{primal.fun_name}"
        specs = [ShapeDtypeStruct(a.shape, a.dtype) for a in primal.in_avals]
        specs += [ShapeDtypeStruct(a.shape, _tangent_dtype(a.dtype)) for a in primal.out_avals]
        return export(jit(vjp_flat), platforms=primal.platforms,
                      disabled_checks=primal.disabled_safety_checks)(*specs)


def _tangent_dtype(dtype):
    return dtype if _dtypes.is_inexact(dtype) else _dtypes.float0


# =============================================================================================
# serialize / deserialize
# =============================================================================================


def _version() -> str:
    return __version__


def _document(e: Exported, arrays: list, index: dict) -> dict:
    """``e`` as JSON; its constants are appended to ``arrays`` (identical ones once)."""
    positions = []
    for c in e._consts:
        key = (c.dtype.str, c.shape, c.tobytes())
        if key not in index:
            index[key] = len(arrays)
            arrays.append(c)
        positions.append(index[key])
    return {
        "fun_name": e.fun_name,
        "in_tree": _pytrees.encode_tree(e.in_tree),
        "out_tree": _pytrees.encode_tree(e.out_tree),
        "in_avals": [_symbolic_aval(a) for a in e.in_avals],
        "out_avals": [_symbolic_aval(a) for a in e.out_avals],
        "platforms": list(e.platforms),
        "disabled_checks": [c._impl for c in e.disabled_safety_checks],
        "dim_vars": list(e._dim_vars),
        "arg_names": list(e._arg_names),
        "program": e._program,
        "consts": positions,
    }


def _symbolic_aval(aval) -> dict:
    doc = {"shape": [{"$dim": str(d)} if is_symbolic_dim(d) else int(d) for d in aval.shape],
           "dtype": _registry.dtype_name(aval.dtype)}
    if aval.weak_type:
        doc["weak_type"] = True
    return doc


def deserialize(blob: bytes | bytearray) -> Exported:
    """The :class:`Exported` that ``Exported.serialize`` wrote to ``blob``. Raises
    ``ValueError`` for bytes that are not a serialized Exported, are truncated or
    corrupted, or come from a newer format version.

        >>> import functrans, functrans.numpy as jnp
        >>> blob = export(functrans.jit(jnp.cos))(jnp.zeros(2)).serialize()
        >>> deserialize(blob).call(jnp.zeros(2))
        Array([1., 1.], dtype=float32)
    """
    document, arrays = _container.unpack(blob)
    try:
        return _read_chain(document, arrays)
    except ValueError:
        raise
    except Exception as err:  # noqa: BLE001 - any surprise in foreign data is a ValueError
        raise ValueError(f"corrupted serialized Exported ({type(err).__name__}: {err})") \
            from None


def _read_chain(document: dict, arrays: list) -> Exported:
    chain = document.get("exported")
    if not (isinstance(chain, list) and chain):
        raise ValueError("corrupted serialized Exported: no exported function in it")
    result = None
    for doc in reversed(chain):  # each VJP first, so that its primal can point at it
        result = _read_one(doc, arrays, result)
    return result


def _read_one(doc, arrays: list, vjp: Exported | None) -> Exported:
    if not isinstance(doc, dict):
        raise ValueError("corrupted serialized Exported: an entry is not an object")
    dim_vars = doc.get("dim_vars")
    if not (isinstance(dim_vars, list) and all(isinstance(v, str) and v.isidentifier()
                                               for v in dim_vars)):
        raise ValueError(f"corrupted serialized Exported: dimension variables {dim_vars!r}")
    positions = doc.get("consts")
    if not (isinstance(positions, list) and all(isinstance(k, int) and 0 <= k < len(arrays)
                                                for k in positions)):
        raise ValueError("corrupted serialized Exported: constant references out of range")
    checks = doc.get("disabled_checks", [])
    if checks not in ([], ["platform"]):
        raise ValueError(f"corrupted serialized Exported: disabled checks {checks!r}")
    platforms = doc.get("platforms")
    if not (isinstance(platforms, list) and platforms
            and all(p in _KNOWN_PLATFORMS for p in platforms)):
        raise ValueError(f"corrupted serialized Exported: platforms {platforms!r}")
    fun_name = doc.get("fun_name")
    if not isinstance(fun_name, str):
        raise ValueError("corrupted serialized Exported: no function name")
    in_avals = tuple(_read_aval(a) for a in _listed(doc, "in_avals"))
    out_avals = tuple(_read_aval(a) for a in _listed(doc, "out_avals"))
    in_tree, out_tree = _pytrees.decode_tree(doc.get("in_tree")), \
        _pytrees.decode_tree(doc.get("out_tree"))
    if in_tree.num_leaves != len(in_avals) or out_tree.num_leaves != len(out_avals):
        raise ValueError("corrupted serialized Exported: the argument or result structure "
                         "does not match the number of types")
    declared = {v for a in in_avals for d in a.shape if is_symbolic_dim(d) for v in d.variables}
    if declared != set(dim_vars):
        raise ValueError("corrupted serialized Exported: the dimension variables do not "
                         "match the argument shapes")
    arg_names = doc.get("arg_names", [])
    if not (isinstance(arg_names, list) and all(isinstance(n, str) for n in arg_names)):
        raise ValueError(f"corrupted serialized Exported: argument names {arg_names!r}")
    program = doc.get("program")
    if not isinstance(program, dict):
        raise ValueError("corrupted serialized Exported: no program")
    result = Exported(fun_name, in_tree, in_avals, out_tree, out_avals, tuple(platforms),
                      disabled_safety_checks=tuple(DisabledSafetyCheck(c) for c in checks),
                      _program=program, _consts=[arrays[k] for k in positions],
                      _dim_vars=tuple(dim_vars),
                      _get_vjp=None if vjp is None else (lambda _: vjp),
                      _arg_names=tuple(arg_names))
    if vjp is not None:
        result._vjp_cache.append(vjp)
    # the program must decode (with symbolic sizes at sample values) and match the declared
    # types: a malformed one fails here rather than at the first call
    closed = result._decode(_polymorphism.sample_points(list(result._dim_vars))[0])
    _check_signature(result, closed)
    return result


def _listed(doc, key) -> list:
    value = doc.get(key)
    if not isinstance(value, list):
        raise ValueError(f"corrupted serialized Exported: no {key} list")
    return value


def _read_aval(doc):
    if not (isinstance(doc, dict) and isinstance(doc.get("shape"), list)):
        raise ValueError(f"corrupted serialized Exported: abstract value {str(doc)[:60]}")
    shape = [_program.symbolic_value(d) for d in doc["shape"]]
    if any(not is_symbolic_dim(d) and d < 0 for d in shape):
        raise ValueError("corrupted serialized Exported: negative dimension")
    return aval_with_shape(shape, _registry.dtype_from_name(doc.get("dtype")),
                           doc.get("weak_type", False) is True)


def _check_signature(e: Exported, closed: core.ClosedJaxpr):
    """The program's inputs and results have the types the Exported declares (at the
    sample sizes of its dimension variables)."""
    dims = _polymorphism.sample_points(list(e._dim_vars))[0]

    def concrete(aval):
        return tuple(d.evaluate(dims) if is_symbolic_dim(d) else d for d in aval.shape), \
            aval.dtype
    for declared, actual, what in ((e.in_avals, closed.in_avals, "argument"),
                                   (e.out_avals, closed.out_avals, "result")):
        if len(declared) != len(actual) or any(
                concrete(d) != (a.shape, a.dtype) for d, a in zip(declared, actual)):
            raise ValueError(f"corrupted serialized Exported: the program's {what} types "
                             "differ from the declared ones")
