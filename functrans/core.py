"""The core: the primal IR, primitives and ``bind``, traces, tracers and the trace stack.

Every array operation is a :class:`Primitive` applied with ``bind``. ``bind`` finds the
innermost active transform among its arguments (the *top trace*) and hands it the operation:
the eval trace computes it with the reference implementation; a staging trace records an
equation into a :class:`Jaxpr`; the jvp, batching and partial-evaluation traces apply the
primitive's rules and bind again one level down. Transforms nest because the trace stack
orders them.
"""
from __future__ import annotations

import itertools
import operator
import threading
from contextlib import contextmanager
from typing import Any, Callable, Sequence

import numpy as np

from functrans import _debug_checks, _dtypes, _float_mode
from functrans._source_info import SourceInfo, user_frame

# =============================================================================================
# Abstract values
# =============================================================================================


class ShapedArray:
    """The type of an array in the IR: shape, dtype and whether the dtype is weak."""

    __slots__ = ("shape", "dtype", "weak_type", "_sharding")
    array_abstraction_level = 1

    def __init__(self, shape, dtype, weak_type: bool = False, *, sharding=None, vma=None,
                 memory_space=None):
        # (``sharding``, ``vma``, ``memory_space``: JAX's keywords; a sharding given here is
        # what ``.sharding`` reports, the others carry nothing in functrans's IR)
        self.shape = tuple(map(int, shape))
        self.dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        self.weak_type = bool(weak_type)
        self._sharding = sharding

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

    def update(self, shape=None, dtype=None, weak_type=None, sharding=None,
               **kwargs) -> "ShapedArray":
        return ShapedArray(self.shape if shape is None else shape,
                           self.dtype if dtype is None else dtype,
                           self.weak_type if weak_type is None else weak_type,
                           sharding=self._sharding if sharding is None else sharding)

    def strip_weak_type(self) -> "ShapedArray":
        return self.update(weak_type=False) if self.weak_type else self

    def to_tangent_aval(self) -> "ShapedArray":
        """The type of this type's tangents: the same for inexact dtypes, float0 otherwise."""
        if _dtypes.is_inexact(self.dtype):
            return self
        return ShapedArray(self.shape, _dtypes.float0, self.weak_type)

    @property
    def sharding(self):
        """How values of this type are placed: over the current mesh, not split (the IR's
        types carry no placement; ``functrans.sharding`` registers the maker)."""
        if self._sharding is not None:
            return self._sharding
        if _aval_sharding is None:
            raise AttributeError("ShapedArray.sharding needs functrans.sharding")
        return _aval_sharding(self)

    def str_short(self, short_dtypes: bool = False) -> str:
        """The type as JAX prints it, ``float32[3,4]`` (``~`` marks a weak type);
        ``short_dtypes``: ``f32[3,4]``, as printed jaxprs show it."""
        dims = ",".join(str(d) for d in self.shape)
        if short_dtypes:
            return f"{_dtypes.short_name(self.dtype)}[{dims}]"
        return f"{'~' if self.weak_type else ''}{_dtypes.long_name(self.dtype)}[{dims}]"

    def __repr__(self):
        weak = ", weak_type=True" if self.weak_type else ""
        return f"ShapedArray({_dtypes.long_name(self.dtype)}[{','.join(map(str, self.shape))}]{weak})"

    __str__ = str_short

    def __eq__(self, other):
        return (type(self) is type(other) and self.shape == other.shape
                and self.dtype == other.dtype and self.weak_type == other.weak_type)

    def __hash__(self):
        return hash((self.shape, self.dtype, self.weak_type))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object (a 0-d array)")
        return self.shape[0]


# Made by functrans.sharding (a layer above), which registers it when it is imported.
_aval_sharding: Callable | None = None


def register_aval_sharding(make: Callable) -> None:
    """Register ``make(aval) -> Sharding``, what ``ShapedArray.sharding`` returns."""
    global _aval_sharding
    _aval_sharding = make


# The abstract value classes of extended dtypes (typed PRNG keys' key<fry>), by the dtype's
# kind: each is defined by the layer above that defines the dtype (functrans.random), which
# registers it when it is imported.
_extended_avals: dict = {}


def register_extended_aval(kind: type, make: Callable) -> None:
    """Register ``make(shape, dtype)``, the abstract value of an array of an extended dtype
    of ``kind`` (a subclass of ``functrans.dtypes.extended``)."""
    _extended_avals[kind] = make


def extended_aval(shape, dtype) -> ShapedArray:
    """The abstract value of an array of ``shape`` of the extended ``dtype``."""
    kind = _dtypes.extended_kind(dtype)
    make = _extended_avals.get(kind)
    if make is None:
        raise TypeError(f"no abstract value is registered for the extended dtype {dtype}")
    return make(shape, dtype)


def get_aval(x) -> ShapedArray:
    """The abstract value of a tracer, array, NumPy value or Python scalar."""
    if isinstance(x, Tracer):
        return x.aval
    aval = getattr(x, "aval", None)
    if aval is not None:
        return aval
    if _dtypes.is_python_scalar(x):  # a Python int must fit its dtype (else OverflowError)
        return ShapedArray((), _dtypes.weak_scalar_dtype(x), weak_type=type(x) is not bool)
    if isinstance(x, (np.ndarray, np.generic)):
        return ShapedArray(np.shape(x), _dtypes.canonicalize_dtype(x.dtype))
    if hasattr(x, "__jax_array__"):
        return get_aval(x.__jax_array__())
    raise TypeError(f"value of type {type(x).__name__} is not a valid array: {x!r}")


def canonicalize_shape(shape) -> tuple[int, ...]:
    """``shape`` (a dimension or a sequence of them) as a tuple of Python ints. A traced
    dimension raises ``TypeError``: shapes are fixed while a function is traced."""
    dims = shape if isinstance(shape, (tuple, list)) or np.ndim(shape) == 1 else (shape,)
    try:
        return tuple(operator.index(d) for d in dims)
    except TypeError:
        pass
    raise TypeError(f"Shapes must be 1D sequences of concrete values of integer type, got "
                    f"{tuple(dims)!r}. If using `jit`, try using `static_argnums` or applying "
                    "`jit` to smaller subfunctions.")


def valid_jaxtype(x) -> bool:
    try:
        get_aval(x)
        return True
    except TypeError:
        return False


# =============================================================================================
# The primal IR
# =============================================================================================

_var_counter = itertools.count()


class Var:
    """A variable of the IR, typed by an abstract value."""

    __slots__ = ("aval", "count", "suffix")

    def __init__(self, aval, suffix: str = ""):
        self.aval = aval
        self.count = next(_var_counter)
        self.suffix = suffix

    def __repr__(self):
        return f"Var({self.count}:{self.aval.str_short(short_dtypes=True)})"


class Literal:
    """A scalar constant written inline in an equation."""

    __slots__ = ("val", "aval")

    def __init__(self, val, aval):
        self.val = val
        self.aval = aval

    def __repr__(self):
        return f"Literal({self.val!r})"


class DropVar(Var):
    """An output nobody reads."""

    __slots__ = ()


class Eqn:
    """``outvars = primitive[params](*invars)``, with the user's source line."""

    __slots__ = ("primitive", "invars", "outvars", "params", "source_info")

    def __init__(self, primitive, invars, outvars, params, source_info=None):
        self.primitive = primitive
        self.invars = list(invars)
        self.outvars = list(outvars)
        self.params = dict(params)
        self.source_info = source_info

    def replace(self, **kwargs) -> "Eqn":
        fields = dict(primitive=self.primitive, invars=self.invars, outvars=self.outvars,
                      params=self.params, source_info=self.source_info)
        fields.update(kwargs)
        return Eqn(**fields)

    def __repr__(self):
        return f"Eqn({self.primitive.name}, {self.invars} -> {self.outvars})"


class Jaxpr:
    """A typed first-order program: ``{ lambda constvars ; invars . let eqns in outvars }``."""

    __slots__ = ("constvars", "invars", "outvars", "eqns", "__weakref__")

    def __init__(self, constvars, invars, outvars, eqns):
        self.constvars = list(constvars)
        self.invars = list(invars)
        self.outvars = list(outvars)
        self.eqns = list(eqns)

    in_avals = property(lambda self: [v.aval for v in self.invars])
    out_avals = property(lambda self: [v.aval for v in self.outvars])

    def pretty_print(self, source_info: bool = False) -> str:
        return _pp_jaxpr(self, _Namer(), 0, source_info)

    def __str__(self):
        return self.pretty_print()

    __repr__ = __str__


class ClosedJaxpr:
    """A :class:`Jaxpr` together with the values of its constvars."""

    __slots__ = ("jaxpr", "consts", "__weakref__")

    def __init__(self, jaxpr: Jaxpr, consts: Sequence):
        if len(consts) != len(jaxpr.constvars):
            raise ValueError("ClosedJaxpr needs one value per constvar")
        self.jaxpr = jaxpr
        self.consts = list(consts)

    in_avals = property(lambda self: self.jaxpr.in_avals)
    out_avals = property(lambda self: self.jaxpr.out_avals)
    eqns = property(lambda self: self.jaxpr.eqns)

    def pretty_print(self, source_info: bool = False) -> str:
        return self.jaxpr.pretty_print(source_info)

    def __call__(self, *args):
        return eval_jaxpr(self.jaxpr, self.consts, *args)

    def __str__(self):
        return self.pretty_print()

    __repr__ = __str__


# ---- printing ----------------------------------------------------------------------------------
# The layout of JAX 0.10's printed jaxprs: names a..z, ba, bb, ...; `_` for a result nobody
# reads; typed literals (`2.0:f32[]`); a jaxpr that fits in the line on one line; the params
# of an equation that holds jaxprs one per line.

_WIDTH = 80


class _Namer:
    def __init__(self):
        self.names: dict[int, str] = {}

    def __call__(self, v) -> str:
        if isinstance(v, Literal):
            return _pp_literal(v)
        if isinstance(v, DropVar):
            return "_"
        name = self.names.get(id(v))
        if name is None:
            name = self.names[id(v)] = _nth_name(len(self.names)) + v.suffix
        return name


def _nth_name(n: int) -> str:
    """Base 26 with a as zero, as JAX counts: a, ..., z, ba, bb, ..."""
    letters = ""
    while True:
        n, r = divmod(n, 26)
        letters = chr(ord("a") + r) + letters
        if not n:
            return letters


def _pp_literal(lit: Literal) -> str:
    val = np.asarray(lit.val)
    if val.dtype == np.bool_:
        text = "True" if val else "False"
    elif _dtypes.is_float(val.dtype):
        text = repr(float(val))
    else:
        text = str(val.item())
    return f"{text}:{lit.aval.str_short(short_dtypes=True)}"


def _holds_jaxpr(value) -> bool:
    if isinstance(value, (ClosedJaxpr, Jaxpr)):
        return True
    return isinstance(value, tuple) and bool(value) and \
        all(isinstance(v, (ClosedJaxpr, Jaxpr)) for v in value)


def _pp_param(value) -> str:
    if isinstance(value, np.dtype):
        return _dtypes.long_name(value)
    if isinstance(value, type) and issubclass(value, np.generic):
        return _dtypes.long_name(np.dtype(value))
    return str(value)


def _pp_eqn(eqn: Eqn, namer, used, indent: int, source_info: bool) -> list[str]:
    outs = " ".join(f"{namer(v) if id(v) in used else '_'}:"
                    f"{v.aval.str_short(short_dtypes=True)}" for v in eqn.outvars) or "()"
    shown = sorted((k, v) for k, v in eqn.params.items() if v is not None or k == "axes")
    pad = " " * indent
    if any(_holds_jaxpr(v) for _, v in shown):
        lines = [f"{pad}{outs} = {eqn.primitive.name}["]
        for k, v in shown:
            if isinstance(v, tuple) and _holds_jaxpr(v):
                lines.append(f"{pad}  {k}=(")
                for j in v:
                    lines += _pp_jaxpr_lines(_open(j), namer, indent + 4, source_info)
                lines.append(f"{pad}  )")
            elif _holds_jaxpr(v):
                body = _pp_jaxpr_lines(_open(v), namer, indent + 2, source_info)
                lines += [f"{pad}  {k}={body[0].lstrip()}"] + body[1:]
            else:
                lines.append(f"{pad}  {k}={_pp_param(v)}")
        lines.append(f"{pad}] " + " ".join(namer(v) for v in eqn.invars))
    else:
        params = ""
        if shown:
            params = "[" + " ".join(f"{k}={_pp_param(v)}" for k, v in shown) + "]"
        args = " ".join(namer(v) for v in eqn.invars)
        lines = [f"{pad}{outs} = {eqn.primitive.name}{params} {args}".rstrip()]
    if source_info and eqn.source_info is not None:
        lines[-1] += f"  # {eqn.source_info}"
    return lines


def _open(j) -> "Jaxpr":
    return j.jaxpr if isinstance(j, ClosedJaxpr) else j


def subjaxprs(eqn):
    """The programs an equation holds in its params (a called program, control-flow bodies,
    each branch of a ``cond``), as open Jaxprs in params order. ``eqn`` may also be a params
    dict."""
    params = eqn if isinstance(eqn, dict) else eqn.params
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, (Jaxpr, ClosedJaxpr)):
                yield _open(item)


def _pp_jaxpr_lines(jaxpr: Jaxpr, namer, indent: int, source_info: bool) -> list[str]:
    """The lines of ``jaxpr`` printed at ``indent`` (its equations at ``indent + 4``)."""
    used = {id(v) for e in jaxpr.eqns for v in e.invars} | {id(v) for v in jaxpr.outvars}

    def binders(vs):
        return " ".join(f"{namer(v)}:{v.aval.str_short(short_dtypes=True)}" for v in vs)

    pad = " " * indent
    head = f"{{ lambda {binders(jaxpr.constvars)}; {binders(jaxpr.invars)}. let"
    body = [_pp_eqn(e, namer, used, indent + 4, source_info) for e in jaxpr.eqns]
    outs = ", ".join(namer(v) for v in jaxpr.outvars)
    tail = f"in ({outs}{',' if len(jaxpr.outvars) == 1 else ''}) }}"
    if all(len(lines) == 1 for lines in body):
        flat = " ".join([head, "; ".join(lines[0].strip() for lines in body), tail])
        if indent + len(flat) <= _WIDTH:
            return [pad + flat]
    return [pad + head] + [line for lines in body for line in lines] + [f"{pad}  {tail}"]


def _pp_jaxpr(jaxpr: Jaxpr, namer, indent: int, source_info: bool) -> str:
    return "\n".join(_pp_jaxpr_lines(jaxpr, namer, indent, source_info)).lstrip()


# ---- type checking ---------------------------------------------------------------------------

class JaxprTypeError(TypeError):
    pass


def check_jaxpr(jaxpr: Jaxpr | ClosedJaxpr) -> None:
    """Check that ``jaxpr`` is well typed: every variable is bound once before use and each
    equation's outputs have the types its primitive's shape rule gives."""
    if isinstance(jaxpr, ClosedJaxpr):
        for v, c in zip(jaxpr.jaxpr.constvars, jaxpr.consts):
            aval = get_aval(c)
            if (aval.shape, aval.dtype) != (v.aval.shape, v.aval.dtype):
                raise JaxprTypeError(f"constant of type {aval} bound to {v.aval}")
        jaxpr = jaxpr.jaxpr
    env: set[int] = set()

    def write(v):
        if isinstance(v, DropVar):
            return
        if id(v) in env:
            raise JaxprTypeError(f"variable {v} bound twice")
        env.add(id(v))

    def read(v):
        if isinstance(v, Literal):
            return v.aval
        if id(v) not in env:
            raise JaxprTypeError(f"variable {v} used before it is bound")
        return v.aval

    for v in jaxpr.constvars + jaxpr.invars:
        write(v)
    for eqn in jaxpr.eqns:
        in_avals = [read(v) for v in eqn.invars]
        for sub in subjaxprs(eqn):
            check_jaxpr(sub)
        out_avals = eqn.primitive.abstract_eval_many(in_avals, eqn.params)
        if len(out_avals) != len(eqn.outvars):
            raise JaxprTypeError(f"{eqn.primitive.name}: {len(out_avals)} results for "
                                 f"{len(eqn.outvars)} output variables")
        for v, a in zip(eqn.outvars, out_avals):
            if not _avals_match(v.aval, a):
                raise JaxprTypeError(
                    f"{eqn.primitive.name}: output typed {v.aval} but its rule gives {a}")
            write(v)
    for v in jaxpr.outvars:
        read(v)


def _avals_match(declared, inferred) -> bool:
    return declared.shape == inferred.shape and declared.dtype == inferred.dtype


# =============================================================================================
# Primitives
# =============================================================================================


class Primitive:
    """An operation of the IR. Its rules live beside its declaration:

    ``impl``          reference implementation on NumPy values (the eager path and the oracle)
    ``abstract_eval`` shape/dtype rule: avals in, aval (or list of avals) out
    ``jvp``           ``(primals, tangents, **params) -> (primals_out, tangents_out)``
    ``transpose``     for linear primitives: ``(cotangent, *args, **params) -> cotangents``
    ``batch``         ``(args, dims, **params) -> (outs, out_dims)``
    ``lowerings``     backend name -> lowering function

    and what the transforms need to know about it:

    ``batch_needs_axis`` its batching rule takes the vmap's ``axis_data`` (higher-order
                         primitives that batch a body, collectives over a vmapped axis)
    ``is_collective``    it communicates over a named axis, so vmap runs its rule even when
                         no operand is batched (``psum(1, "i")`` is the axis size)
    """

    multiple_results = False

    def __init__(self, name: str, multiple_results: bool = False, *,
                 batch_needs_axis: bool = False, is_collective: bool = False):
        self.name = name
        self.multiple_results = multiple_results
        self.batch_needs_axis = batch_needs_axis
        self.is_collective = is_collective
        self.impl: Callable | None = None
        self.abstract_eval: Callable | None = None
        self.jvp: Callable | None = None
        self.transpose: Callable | None = None
        self.batch: Callable | None = None
        self.partial_eval: Callable | None = None
        self.dce: Callable | None = None
        self.effectful = False

    def __repr__(self):
        return self.name

    def bind(self, *args, **params):
        trace = find_top_trace(args)
        tracers = [trace.full_raise(a) for a in args]
        outs = trace.process_primitive(self, tracers, params)
        if self.multiple_results:
            return [full_lower(o) for o in outs]
        return full_lower(outs)

    def run_impl(self, *values, **params):
        """The reference implementation on NumPy values, with NumPy's floating-point warnings
        off: as in JAX, ``inf - inf`` or ``0 / 0`` is a NaN, not a RuntimeWarning; and with
        subnormal floats flushed to zero as on JAX's CPU backend (see :mod:`_float_mode`)."""
        with np.errstate(all="ignore"), _float_mode.flushing():
            return self.impl(*values, **params)

    # Decorators for the two rules every primitive has (as JAX's Primitive); the derivative
    # and batching rules are set as attributes (``p.jvp = ...``), side by side with these.
    def def_impl(self, f):
        self.impl = f
        return f

    def def_abstract_eval(self, f):
        self.abstract_eval = f
        return f

    def abstract_eval_many(self, avals, params) -> list:
        """Run the shape rule and always return a list of output avals."""
        if self.abstract_eval is None:
            raise NotImplementedError(f"primitive {self.name} has no shape rule")
        out = self.abstract_eval(*avals, **params)
        return list(out) if self.multiple_results else [out]


# =============================================================================================
# Traces and tracers
# =============================================================================================


class MainTrace:
    """One active transform on the trace stack. ``payload`` carries transform-wide data
    (a staging builder, a vmap axis name and size)."""

    __slots__ = ("level", "trace_type", "payload", "alive", "name", "__weakref__")

    def __init__(self, level: int, trace_type, payload=None, name: str = ""):
        self.level = level
        self.trace_type = trace_type
        self.payload = payload
        self.alive = True
        self.name = name or trace_type.__name__

    def __repr__(self):
        return f"MainTrace({self.level}, {self.name})"


class _TraceState(threading.local):
    def __init__(self):
        self.stack: list[MainTrace] = [MainTrace(0, EvalTrace)]
        self.dynamic: MainTrace = self.stack[0]
        self.axis_env: list = []
        # while eval_jaxpr re-binds an equation: its source line, given to what it stages
        self.source_info: SourceInfo | None = None


_state: _TraceState  # defined after EvalTrace


@contextmanager
def new_main(trace_type, payload=None, dynamic: bool = False, name: str = ""):
    """Push a transform onto the trace stack for the duration of the block."""
    level = len(_state.stack)
    main = MainTrace(level, trace_type, payload, name)
    _state.stack.append(main)
    previous_dynamic = _state.dynamic
    if dynamic:
        _state.dynamic = main
    try:
        yield main
    finally:
        main.alive = False
        _state.dynamic = previous_dynamic
        _state.stack.pop()


def trace_stack() -> list[MainTrace]:
    return list(_state.stack)


def is_staging() -> bool:
    """Whether this thread is staging a program (inside jit, make_jaxpr or a control-flow
    body): values made now become constants of the program, not transfers."""
    return _state.dynamic.level > 0


def with_errors_page(error_type: type, message: str) -> str:
    """``message`` followed by the section of the documentation's errors page that explains
    ``error_type`` (docs/errors.md, one section per class, as JAX's messages link to its
    errors page)."""
    page = f"docs/errors.md#{error_type.__name__.lower()}"
    if page in message:  # already there (an error rebuilt from its message, as unpickling does)
        return message
    note = f"See {page} in functrans's documentation for the causes and the fixes."
    return f"{message}\n\n{note}" if message else note


class JAXTypeError(TypeError):
    """The base of the tracer-misuse errors (``jax.errors.JAXTypeError``); each message ends
    with the section of the errors page that explains it."""

    def __init__(self, message: str = ""):
        super().__init__(with_errors_page(type(self), message))


class UnexpectedTracerError(JAXTypeError):
    pass


class ConcretizationTypeError(JAXTypeError):
    pass


class TracerBoolConversionError(ConcretizationTypeError):
    """``bool()`` of a traced value (a Python ``if``/``while``/``and``/``assert`` on it)."""


class TracerArrayConversionError(JAXTypeError):
    pass


class TracerIntegerConversionError(JAXTypeError):
    pass


def _leak_error(tracer) -> UnexpectedTracerError:
    main = tracer._trace.main
    return UnexpectedTracerError(
        f"a value traced by a {main.name} transform was used after that transform ended "
        f"(a leaked tracer of type {tracer.aval.str_short()}). This happens when a function "
        "stores an intermediate value in a global, a closure or an object attribute during "
        "jit/grad/vmap and it is read later. Return the value from the function instead.")


def find_top_trace(args) -> "Trace":
    top = _state.dynamic
    for x in args:
        if isinstance(x, Tracer):
            main = x._trace.main
            if main.level > top.level:
                top = main
            if not main.alive:
                raise _leak_error(x)
    return top.trace_type(top)


def full_lower(x):
    return x.full_lower() if isinstance(x, Tracer) else x


class Trace:
    """How one transform processes primitives. Subclasses give ``pure`` (a constant into the
    transform), ``lift`` (a lower-level tracer into it) and ``process_primitive``."""

    __slots__ = ("main", "level")

    def __init__(self, main: MainTrace):
        self.main = main
        self.level = main.level

    def full_raise(self, val) -> "Tracer":
        if not isinstance(val, Tracer):
            return self.pure(val)
        trace = val._trace
        if trace.main is self.main:
            return val
        if not trace.main.alive:
            raise _leak_error(val)
        if trace.level < self.level:
            return self.lift(val)
        raise UnexpectedTracerError(
            f"cannot lift a {trace.main.name} tracer at level {trace.level} into the "
            f"{self.main.name} transform at level {self.level}; a value escaped its transform")

    def pure(self, val):
        raise NotImplementedError

    def lift(self, val):
        raise NotImplementedError

    def process_primitive(self, primitive, tracers, params):
        raise NotImplementedError

    def process_custom_jvp_call(self, primitive, fun, jvp, tracers, params):
        raise NotImplementedError(f"{type(self).__name__} does not support custom_jvp")

    def process_custom_vjp_call(self, primitive, fun, fwd, bwd, tracers, params):
        raise NotImplementedError(f"{type(self).__name__} does not support custom_vjp")


class Tracer:
    """A value under a transform. Array operators, indexing and methods are installed on
    this class by ``functrans._array`` so traced code reads like NumPy code."""

    __slots__ = ("_trace", "__weakref__")
    __array_priority__ = 1000

    @property
    def aval(self):
        raise NotImplementedError

    def full_lower(self):
        return self

    # Concrete-value access: a transform that still knows the value returns it (jvp and
    # partial evaluation of known values); staging and batching cannot.
    def to_concrete_value(self):
        return None

    shape = property(lambda self: self.aval.shape)
    dtype = property(lambda self: self.aval.dtype)
    ndim = property(lambda self: self.aval.ndim)
    size = property(lambda self: self.aval.size)
    weak_type = property(lambda self: self.aval.weak_type)

    def __len__(self):
        return len(self.aval)

    def _concrete_or_error(self, what: str, fix: str, error=None):
        value = self.to_concrete_value()
        if value is None:
            raise (error or ConcretizationTypeError)(
                f"{what} of a traced value ({self.aval.str_short()}, traced by "
                f"{self._trace.main.name}): its value is not known while the function is "
                f"being transformed. {fix}")
        return value

    def __bool__(self):
        value = self._concrete_or_error(
            "bool() (a Python `if`, `while`, `and`/`or` or `assert`)",
            "Use functrans.lax.cond / lax.select / jnp.where for value-dependent branches, "
            "lax.while_loop for loops, or mark the argument static with "
            "jit(f, static_argnums=...) if it is a configuration value.",
            TracerBoolConversionError)
        return bool(np.asarray(value))

    def _scalar_conversion(self, kind):
        value = self._concrete_or_error(
            f"{kind}()",
            "Keep the value as an array (use jnp functions on it), or mark the argument "
            "static with jit(f, static_argnums=...) if it is a configuration value.")
        return getattr(np.asarray(value), "item")()

    def __float__(self):
        return float(self._scalar_conversion("float"))

    def __int__(self):
        return int(self._scalar_conversion("int"))

    def __complex__(self):
        return complex(self._scalar_conversion("complex"))

    def item(self, *args):
        return self._scalar_conversion(".item")

    def __index__(self):
        value = self.to_concrete_value()
        if value is None or not _dtypes.is_integer(self.aval.dtype):
            raise TracerIntegerConversionError(
                f"a traced {self.aval.str_short()} value was used as a Python integer "
                "(an index, a shape or a range bound). Use lax.dynamic_slice / "
                "lax.dynamic_index_in_dim for traced positions, or mark the argument static "
                "with jit(f, static_argnums=...).")
        return int(np.asarray(value))

    def __array__(self, dtype=None, copy=None):
        raise TracerArrayConversionError(
            f"a traced value ({self.aval.str_short()}, traced by {self._trace.main.name}) "
            "was converted to a NumPy array (np.asarray, np.array or a NumPy function). "
            "Inside transformed code, use functrans.numpy (jnp) functions instead, or move "
            "the NumPy computation outside the transformed function.")

    def tolist(self):
        return self.__array__()

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def __hash__(self):
        raise TypeError(f"unhashable type: traced array ({self.aval.str_short()}); use a "
                        "static argument for values that key dictionaries")

    def __setitem__(self, idx, value):
        raise TypeError("functrans arrays are immutable: `x[idx] = y` is not supported. "
                        "Use `x = x.at[idx].set(y)` to get an updated copy.")

    def _short_repr(self) -> str:
        """How the tracer prints (``print(x)`` inside a transform), as JAX prints it;
        each transform's tracer overrides this with its name and contents."""
        return f"{type(self).__name__}<{self.aval.str_short()}>"

    def __repr__(self):
        return self._short_repr()


# ---- the eval trace: run the reference implementation ---------------------------------------

class EvalTrace(Trace):
    """The bottom of the stack: primitives are computed right away."""

    def pure(self, val):
        return val

    lift = pure

    def process_primitive(self, primitive, args, params):
        return eval_primitive(primitive, args, params)

    def process_custom_jvp_call(self, primitive, fun, jvp, tracers, params):
        return fun(*tracers)

    def process_custom_vjp_call(self, primitive, fun, fwd, bwd, tracers, params):
        return fun(*tracers)


_state = _TraceState()


def to_numpy(x, aval=None) -> np.ndarray:
    """The NumPy value behind an eager value (Array, NumPy array or Python scalar).

    An Array gives its own (immutable) buffer; host data gives a private copy
    (:func:`host_copy`), so nothing computed from it (a result that views its input, a
    compiled program's output that is its input) can alias memory the caller may change."""
    value = getattr(x, "_value", None)
    if value is not None:
        return value
    if aval is None:
        aval = get_aval(x)
    if isinstance(x, np.ndarray):
        return host_copy(x, aval.dtype)
    if type(x) is int:
        return _dtypes.python_scalar_to_numpy(x, aval.dtype)
    return np.asarray(x, dtype=aval.dtype)


def constant_value(value, aval):
    """``value`` as a constant a staged program closes over: a NumPy array becomes an Array
    holding a copy (:func:`host_copy`), so the program keeps the values it was traced with
    whatever the caller later writes to that array or to its base (and running the program
    copies nothing more); Arrays (immutable) and scalars as they are."""
    if isinstance(value, np.ndarray):
        return wrap_array(host_copy(value, aval.dtype), aval)
    return value


def host_copy(value, dtype=None) -> np.ndarray:
    """A private, read-only copy of the host array ``value`` as ``dtype`` (default: its own)
    in native byte order: the buffer host data becomes when it enters the library (as JAX
    copies it to a device). The caller's array is left as it was (still writeable), and later
    writes to it, or to the array it is a view of, never reach the copy.

        >>> h = np.ones(2, ">f4")
        >>> c = host_copy(h)
        >>> c.dtype.isnative, c.flags.writeable, h.flags.writeable
        (True, False, True)
    """
    dtype = np.dtype(value.dtype if dtype is None else dtype)
    if not dtype.isnative:
        dtype = dtype.newbyteorder("=")
    copy = np.array(value, dtype=dtype, copy=True, order="C")
    copy.flags.writeable = False
    return copy


def _note_user_line(err: Exception, primitive) -> None:
    info = user_frame(3)
    if info is not None and hasattr(err, "add_note"):
        err.add_note(f"in primitive '{primitive.name}', called at {info.filename}:{info.lineno}"
                     f" ({info.function})")


def abstract_eval_checked(primitive, avals, params) -> list:
    """Shape rule with the user's line attached to any type error it raises."""
    try:
        return primitive.abstract_eval_many(avals, params)
    except (TypeError, ValueError) as err:
        _note_user_line(err, primitive)
        raise


# Runs one eager primitive where its arguments live when one of them is not on the host
# (an eager operation on GPU arrays runs on the GPU); registered by the layer that compiles.
_device_eval: Callable | None = None


def register_device_eval(evaluate: Callable) -> None:
    """Register ``evaluate(primitive, args, params)``, which computes an eager primitive one
    of whose arguments lives on a device other than the host (an Array whose ``_platform``
    is not ``"cpu"``) and returns its outputs, or ``NotImplemented`` to let the reference
    implementation run on host copies instead."""
    global _device_eval
    _device_eval = evaluate


def eval_primitive(primitive, args, params):
    """Compute ``primitive`` on eager values and wrap the results as Arrays."""
    for a in args:
        if getattr(a, "_platform", "cpu") != "cpu" and _device_eval is not None:
            out = _device_eval(primitive, args, params)
            if out is not NotImplemented:
                return out
            break
    avals = [get_aval(a) for a in args]
    out_avals = abstract_eval_checked(primitive, avals, params)
    if primitive.impl is None:
        raise NotImplementedError(f"primitive {primitive.name} has no reference implementation")
    values = [to_numpy(a, av) for a, av in zip(args, avals)]
    out = primitive.run_impl(*values, **params)
    outs = out if primitive.multiple_results else [out]
    wrapped = [wrap_array(o, a) for o, a in zip(outs, out_avals)]
    if _debug_checks.enabled():
        _debug_checks.check_eager_outputs(primitive, wrapped, _state.source_info)
    return wrapped if primitive.multiple_results else wrapped[0]


# The eager array type (functrans.Array), which registers itself: the core computes on
# NumPy buffers and hands results back in it, without depending on the module defining it.
_array_type: type | None = None


def register_array_type(array_type: type) -> None:
    """Register the class of eager results: ``array_type._from_buffer(buffer, weak_type)``
    wraps a fresh NumPy buffer without copying it."""
    global _array_type
    _array_type = array_type


def wrap_array(value, aval):
    """An eager result ``value`` (a NumPy buffer, or already an Array) as an Array of ``aval``."""
    if isinstance(value, _array_type):
        return value
    value = np.asarray(value)
    if value.dtype != aval.dtype:
        value = value.astype(aval.dtype)
    if value.shape != aval.shape:
        raise AssertionError(f"reference implementation returned shape {value.shape}, "
                             f"shape rule says {aval.shape}")
    # no copy: a result is fresh, or views its inputs, which are Arrays' buffers or private
    # copies of host data (to_numpy)
    return _array_type._from_buffer(value, aval.weak_type)


# Logs or refuses an implicit host-to-device transfer as the transfer guard in force says;
# registered by functrans._transfer_guard, which sits above the core and the primitives.
_implicit_transfer_check: Callable | None = None


def register_implicit_transfer_check(check: Callable) -> None:
    """Register ``check(aval)``, called before host data of ``aval`` becomes an Array that the
    program did not ask for (an implicit host-to-device transfer)."""
    global _implicit_transfer_check
    _implicit_transfer_check = check


def implicit_host_to_array(x, aval):
    """Host data ``x`` (a NumPy value, a Python scalar) as an Array of ``aval`` holding a
    private copy, as ``jnp.asarray`` makes one: an implicit transfer, which the registered
    transfer guard may log or refuse."""
    if _implicit_transfer_check is not None:
        _implicit_transfer_check(aval)
    return wrap_array(to_numpy(x, aval), aval)


# =============================================================================================
# Evaluating a jaxpr (by binding, so evaluation under a transform transforms it)
# =============================================================================================


def eval_jaxpr(jaxpr: Jaxpr, consts, *args):
    """Evaluate ``jaxpr`` by binding each equation's primitive in order."""
    env: dict[int, Any] = {}

    def read(v):
        return v.val if isinstance(v, Literal) else env[id(v)]

    for v, x in zip(jaxpr.constvars, consts):
        env[id(v)] = x
    if len(args) != len(jaxpr.invars):
        raise TypeError(f"jaxpr takes {len(jaxpr.invars)} arguments, got {len(args)}")
    for v, x in zip(jaxpr.invars, args):
        env[id(v)] = x
    state = _state
    for eqn in jaxpr.eqns:
        # Equations a transform stages for this one keep its line in the user's code.
        outer = state.source_info
        if eqn.source_info is not None:
            state.source_info = eqn.source_info
        try:
            outs = eqn.primitive.bind(*[read(v) for v in eqn.invars], **eqn.params)
        finally:
            state.source_info = outer
        if not eqn.primitive.multiple_results:
            outs = [outs]
        for v, x in zip(eqn.outvars, outs):
            env[id(v)] = x
    return [read(v) for v in jaxpr.outvars]


def eval_jaxpr_numpy(jaxpr: Jaxpr, consts, args) -> list:
    """Evaluate ``jaxpr`` with the primitives' reference implementations, NumPy buffers in
    and out (no tracing, no Arrays): the semantics every backend is tested against, and how
    a rule computes a sub-program on concrete values."""
    env: dict[int, object] = {}
    for v, c in zip(jaxpr.constvars, consts):
        env[id(v)] = c
    for v, a in zip(jaxpr.invars, args):
        env[id(v)] = a

    def read(v):
        return np.asarray(v.val, dtype=v.aval.dtype) if isinstance(v, Literal) else env[id(v)]

    for eqn in jaxpr.eqns:
        prim = eqn.primitive
        outs = prim.run_impl(*[read(v) for v in eqn.invars], **eqn.params)
        if not prim.multiple_results:
            outs = [outs]
        for v, o in zip(eqn.outvars, outs):
            o = np.asarray(o)
            if o.dtype != v.aval.dtype:
                o = o.astype(v.aval.dtype)
            env[id(v)] = o
    return [read(v) for v in jaxpr.outvars]


def current_source_info() -> SourceInfo | None:
    """The user's line for an equation being staged: the line of the equation being
    re-evaluated (by a transform of a staged program), else the innermost user frame."""
    return _state.source_info or user_frame(2)
