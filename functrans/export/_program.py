"""A program (a closed :class:`~functrans.core.Jaxpr`) as JSON, and back.

The JSON form of a jaxpr::

    {"constvars": [{"var": 0, "aval": AVAL, "const": 0}, ...],   # const: index of its array
     "invars":    [{"var": 1, "aval": AVAL}, ...],
     "eqns":      [{"primitive": "add", "inputs": [1, LITERAL], "params": {...},
                    "outputs": [{"var": 2, "aval": AVAL} | {"drop": AVAL}]}, ...],
     "outvars":   [2, ...]}

``AVAL`` is ``{"shape": [4, 3], "dtype": "float32"}`` (plus ``"weak_type": true``); an
input is a variable number or ``{"literal": value, "dtype": ..., "weak_type": ...}``.
Variable numbers are unique in a document. Constants are not in the JSON: ``"const"`` is an
index into a list of arrays stored beside it (as safetensors tensors, see
:mod:`._container`). Parameters are encoded by type::

    int, bool, str, None, finite float  as themselves        tuple        [..]
    list          {"list": [..]}          non-finite float   {"float": "inf"}
    np.dtype      {"dtype": "float32"}    NumPy scalar       {"scalar": v, "dtype": ..}
    scalar type   {"scalar_type": "int32"}                   ShapedArray  {"aval": AVAL}
    ClosedJaxpr   {"closed_jaxpr": JAXPR (with consts)}      Jaxpr        {"jaxpr": JAXPR}
    named tuple   {"namedtuple": "GatherDimensionNumbers", "fields": [..]}
    enum member   {"enum": "GatherScatterMode", "name": "CLIP"}

Primitives and parameter classes are found by name in :mod:`._registry`. A parameter
holding a Python function (a callback, a custom differentiation rule) has no JSON form:
the encoder refuses it naming the primitive — except the calls that only carry rules for
differentiation (``custom_jvp_call``, ``custom_vjp_call``, ``remat``), which are written as
the equations of the function they call (an exported function is differentiated through
its exported VJP, see :mod:`._exported`).

A dimension-polymorphic program is a *template*: a number that depends on the dimension
variables is written ``{"$dim": "2*b + 1"}`` (``{"$fdim": ..}`` for a float), and
:func:`instantiate` replaces each by its value before decoding.

    >>> import functrans, functrans.numpy as jnp
    >>> closed = functrans.make_jaxpr(lambda x: jnp.sin(x) + x)(jnp.ones(3))
    >>> doc, consts = encode_closed_jaxpr(closed)
    >>> [e["primitive"] for e in doc["eqns"]]
    ['sin', 'add']
    >>> decode_closed_jaxpr(doc, consts).out_avals
    [ShapedArray(f32[3])]
"""
from __future__ import annotations

import enum
import math

import numpy as np

from functrans import _dtypes, core
from functrans.core import ClosedJaxpr, DropVar, Eqn, Jaxpr, Literal, ShapedArray, Var
from functrans.export import _registry
from functrans.export._dimensions import parse_dimension

# Calls whose only non-serializable parameters are rules for differentiation: written as
# the equations of the function they call; {primitive name: parameter holding it}.
_INLINED_CALLS = {"custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
                  "remat": "jaxpr"}


class UnserializableError(ValueError):
    """A program holds something the export format cannot carry (a Python callback)."""


# =============================================================================================
# Encoding
# =============================================================================================


def encode_closed_jaxpr(closed: ClosedJaxpr) -> tuple[dict, list]:
    """``closed`` as a JSON-able document and the list of its constant arrays (NumPy)."""
    encoder = _Encoder()
    return encoder.closed(closed), encoder.consts


def encode_aval(aval) -> dict:
    doc = {"shape": list(aval.shape), "dtype": _registry.dtype_name(aval.dtype)}
    if aval.weak_type:
        doc["weak_type"] = True
    return doc


def encode_float(x: float):
    x = float(x)
    if math.isfinite(x):
        return x
    return {"float": "nan" if math.isnan(x) else "inf" if x > 0 else "-inf"}


def _encode_scalar(value, dtype: np.dtype):
    if dtype == np.bool_:
        return bool(value)
    if dtype.kind in "iu":
        return int(value)
    if dtype.kind == "c":
        return [encode_float(np.real(value)), encode_float(np.imag(value))]
    if dtype == _dtypes.float0:  # no value
        return None
    return encode_float(value)  # a float (bfloat16's NumPy kind is "V")


class _Frame:
    """The jaxpr being written: its constvars (inlined calls of a closed jaxpr may add
    some) and equations."""

    def __init__(self, closed: bool):
        self.closed = closed
        self.constvars: list = []
        self.eqns: list = []


class _Encoder:
    def __init__(self):
        self.consts: list[np.ndarray] = []
        self._const_index: dict[int, int] = {}
        self._keep: list = []  # the constants whose ids key _const_index stay alive
        self._next_var = 0
        self._where: list[str] = []

    def closed(self, closed: ClosedJaxpr) -> dict:
        return self.jaxpr(closed.jaxpr, closed.consts)

    def jaxpr(self, jaxpr: Jaxpr, consts=None) -> dict:
        frame = _Frame(consts is not None)
        env: dict[int, object] = {}
        for k, v in enumerate(jaxpr.constvars):
            entry = self._binder(v, env)
            if consts is not None:
                entry["const"] = self._const(consts[k])
            frame.constvars.append(entry)
        invars = [self._binder(v, env) for v in jaxpr.invars]
        self._equations(jaxpr.eqns, env, frame)
        outvars = [self._atom(v, env) for v in jaxpr.outvars]
        return {"constvars": frame.constvars, "invars": invars, "eqns": frame.eqns,
                "outvars": outvars}

    def _binder(self, v: Var, env) -> dict:
        number = self._next_var
        self._next_var += 1
        env[id(v)] = number
        return {"var": number, "aval": encode_aval(v.aval)}

    def _const(self, value) -> int:
        index = self._const_index.get(id(value))
        if index is None:
            array = np.ascontiguousarray(core.to_numpy(value))
            index = self._const_index[id(value)] = len(self.consts)
            self.consts.append(array)
            self._keep.append(value)
        return index

    def _atom(self, v, env):
        if isinstance(v, Literal):
            dtype = np.dtype(v.aval.dtype)
            doc = {"literal": _encode_scalar(np.asarray(v.val)[()], dtype),
                   "dtype": _registry.dtype_name(dtype)}
            if v.aval.weak_type:
                doc["weak_type"] = True
            return doc
        return env[id(v)]

    def _equations(self, eqns, env, frame: _Frame):
        for eqn in eqns:
            name = eqn.primitive.name
            if name in _INLINED_CALLS:
                self._inline(eqn, env, frame)
                continue
            self._where.append(f"primitive '{name}'")
            inputs = [self._atom(v, env) for v in eqn.invars]
            # in key order, as a file lists them: numbering is the same after a round trip
            params = {k: self._param(k, eqn.params[k], name) for k in sorted(eqn.params)}
            outputs = []
            for v in eqn.outvars:
                if isinstance(v, DropVar):
                    outputs.append({"drop": encode_aval(v.aval)})
                else:
                    outputs.append(self._binder(v, env))
            frame.eqns.append({"primitive": name, "inputs": inputs, "params": params,
                               "outputs": outputs})
            self._where.pop()

    def _inline(self, eqn: Eqn, env, frame: _Frame):
        """The equations of the program a differentiation-rule call runs, in place of the
        call: its inputs are the call's, its outputs stand for the call's outputs."""
        closed = eqn.params[_INLINED_CALLS[eqn.primitive.name]]
        inner: dict[int, object] = {}
        if closed.consts and not frame.closed:
            raise UnserializableError(f"cannot export '{eqn.primitive.name}' with constants "
                                      "inside a jaxpr that has no constants of its own")
        for v, c in zip(closed.jaxpr.constvars, closed.consts):
            frame.constvars.append({**self._binder(v, inner), "const": self._const(c)})
        for v, outer in zip(closed.jaxpr.invars, eqn.invars):
            inner[id(v)] = self._atom(outer, env)
        self._equations(closed.jaxpr.eqns, inner, frame)
        for v, result in zip(eqn.outvars, closed.jaxpr.outvars):
            if not isinstance(v, DropVar):
                env[id(v)] = self._atom(result, inner)

    def _param(self, key: str, value, primitive: str):
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, enum.Enum):
            if not _registry.is_parameter_class(type(value)):
                raise self._unserializable(key, value, primitive)
            return {"enum": type(value).__name__, "name": value.name}
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            return encode_float(value)
        if isinstance(value, tuple) and hasattr(type(value), "_fields"):
            if not _registry.is_parameter_class(type(value)):
                raise self._unserializable(key, value, primitive)
            return {"namedtuple": type(value).__name__,
                    "fields": [self._param(key, v, primitive) for v in value]}
        if isinstance(value, tuple):
            return [self._param(key, v, primitive) for v in value]
        if isinstance(value, list):
            return {"list": [self._param(key, v, primitive) for v in value]}
        if isinstance(value, np.dtype):
            return {"dtype": _registry.dtype_name(value)}
        if isinstance(value, type) and issubclass(value, np.generic):
            return {"scalar_type": _registry.dtype_name(np.dtype(value))}
        if isinstance(value, np.generic):
            return {"scalar": _encode_scalar(value, value.dtype),
                    "dtype": _registry.dtype_name(value.dtype)}
        if isinstance(value, ClosedJaxpr):
            return {"closed_jaxpr": self.closed(value)}
        if isinstance(value, Jaxpr):
            return {"jaxpr": self.jaxpr(value)}
        if isinstance(value, ShapedArray):
            return {"aval": encode_aval(value)}
        raise self._unserializable(key, value, primitive)

    def _unserializable(self, key, value, primitive) -> UnserializableError:
        kind = "a Python callable" if callable(value) else f"a {type(value).__name__}"
        inside = " (inside " + ", ".join(self._where[:-1]) + ")" if len(self._where) > 1 else ""
        return UnserializableError(
            f"cannot export primitive '{primitive}'{inside}: its parameter '{key}' is {kind} "
            f"({value!r}), which a serialized program cannot carry. Host callbacks and "
            "functions that are not functrans primitives cannot be exported: compute that "
            "part outside the exported function.")


# =============================================================================================
# Templates: numbers that depend on dimension variables
# =============================================================================================


def instantiate(doc, dims: dict):
    """``doc`` with every ``{"$dim": expr}`` (``{"$fdim": expr}``) replaced by the value of
    ``expr`` (as a float) for the dimension variables ``dims``."""
    if isinstance(doc, list):
        return [instantiate(x, dims) for x in doc]
    if isinstance(doc, dict):
        if len(doc) == 1:
            if "$dim" in doc:
                return _dim_value(doc["$dim"], dims)
            if "$fdim" in doc:
                return float(_dim_value(doc["$fdim"], dims))
        return {k: instantiate(v, dims) for k, v in doc.items()}
    return doc


def _dim_value(text, dims) -> int:
    if not isinstance(text, str):
        raise ValueError(f"malformed dimension expression {text!r}")
    value = parse_dimension(text)
    return value if isinstance(value, int) else value.evaluate(dims)


def symbolic_value(doc):
    """A shape entry of a template as an int or a DimExpr."""
    if isinstance(doc, dict) and set(doc) == {"$dim"}:
        return parse_dimension(doc["$dim"])
    return _int(doc, "dimension")


# =============================================================================================
# Decoding
# =============================================================================================


def decode_closed_jaxpr(doc, consts: list) -> ClosedJaxpr:
    """The closed jaxpr ``doc`` (a document with no ``$dim`` left) whose constants are
    ``consts``. Every equation is checked with its primitive's shape rule. Anything that is
    not a well-formed, well-typed program raises ``ValueError``."""
    return _Decoder(consts).closed(doc)


def decode_aval(doc) -> ShapedArray:
    _expect(isinstance(doc, dict), "an abstract value must be an object", doc)
    shape = doc.get("shape")
    _expect(isinstance(shape, list), "an abstract value needs a shape list", doc)
    dims = [_int(d, "dimension") for d in shape]
    _expect(all(d >= 0 for d in dims), "negative dimension", doc)
    return ShapedArray(dims, _registry.dtype_from_name(doc.get("dtype")),
                       bool(doc.get("weak_type", False)))


def decode_float(doc) -> float:
    if isinstance(doc, dict):
        _expect(set(doc) == {"float"} and doc["float"] in ("nan", "inf", "-inf"),
                "malformed float", doc)
        return float(doc["float"])
    _expect(isinstance(doc, (int, float)) and not isinstance(doc, bool), "expected a number",
            doc)
    return float(doc)


def _decode_scalar(doc, dtype: np.dtype):
    if dtype == np.bool_:
        _expect(isinstance(doc, bool), "expected a boolean", doc)
        return np.bool_(doc)
    if dtype.kind in "iu":
        value = _int(doc, "integer")
        info = np.iinfo(dtype)
        _expect(info.min <= value <= info.max, f"integer out of range for {dtype}", doc)
        return dtype.type(value)
    if dtype.kind == "c":
        _expect(isinstance(doc, list) and len(doc) == 2, "expected [re, im]", doc)
        return dtype.type(complex(decode_float(doc[0]), decode_float(doc[1])))
    if dtype == _dtypes.float0:
        return np.zeros((), dtype)[()]
    return dtype.type(decode_float(doc))


def _int(doc, what: str) -> int:
    _expect(isinstance(doc, int) and not isinstance(doc, bool), f"expected an integer {what}",
            doc)
    return doc


def _expect(condition, message: str, doc=None):
    if not condition:
        shown = repr(doc)
        raise ValueError(f"malformed program: {message}" +
                         (f" (got {shown[:120]})" if doc is not None else ""))


class _Decoder:
    def __init__(self, consts: list):
        self.consts = consts
        self._where: list[str] = []

    def closed(self, doc) -> ClosedJaxpr:
        jaxpr, consts = self.jaxpr(doc, closed=True)
        return ClosedJaxpr(jaxpr, consts)

    def jaxpr(self, doc, closed: bool):
        _expect(isinstance(doc, dict), "a jaxpr must be an object", doc)
        env: dict[int, Var] = {}
        constvars, consts = [], []
        for entry in self._list(doc, "constvars"):
            v = self._bind(entry, env)
            if closed:
                index = _int(entry.get("const"), "constant index")
                _expect(0 <= index < len(self.consts), "constant index out of range", index)
                value = self.consts[index]
                _expect(value.shape == v.aval.shape and value.dtype == v.aval.dtype,
                        f"constant {index} is {value.dtype}{list(value.shape)} but its "
                        f"variable is typed {v.aval.str_short()}")
                consts.append(value)
            constvars.append(v)
        invars = [self._bind(entry, env) for entry in self._list(doc, "invars")]
        eqns = [self.eqn(k, entry, env) for k, entry in enumerate(self._list(doc, "eqns"))]
        outvars = [self._atom(a, env) for a in self._list(doc, "outvars")]
        return Jaxpr(constvars, invars, outvars, eqns), consts

    @staticmethod
    def _list(doc, key) -> list:
        value = doc.get(key)
        _expect(isinstance(value, list), f"a jaxpr needs a list of {key}", doc)
        return value

    def _bind(self, entry, env) -> Var:
        _expect(isinstance(entry, dict), "a variable must be an object", entry)
        number = _int(entry.get("var"), "variable number")
        _expect(number not in env, f"variable {number} bound twice")
        v = env[number] = Var(decode_aval(entry.get("aval")))
        return v

    def _atom(self, doc, env):
        if isinstance(doc, dict):
            dtype = _registry.dtype_from_name(doc.get("dtype"))
            _expect("literal" in doc, "an input must be a variable or a literal", doc)
            value = _decode_scalar(doc["literal"], dtype)
            return Literal(value, ShapedArray((), dtype, bool(doc.get("weak_type", False))))
        number = _int(doc, "variable number")
        _expect(number in env, f"variable {number} used before it is bound")
        return env[number]

    def eqn(self, k: int, doc, env) -> Eqn:
        _expect(isinstance(doc, dict), "an equation must be an object", doc)
        primitive = _registry.primitive(doc.get("primitive"))
        self._where.append(f"equation {k} ({primitive.name})")
        inputs = [self._atom(a, env) for a in self._list(doc, "inputs")]
        params_doc = doc.get("params")
        _expect(isinstance(params_doc, dict), "equation parameters must be an object", doc)
        params = {str(key): self.param(value) for key, value in params_doc.items()}
        try:
            # foreign parameters may be NaN: report the rule's error, without NumPy's warning
            with np.errstate(all="ignore"):
                out_avals = primitive.abstract_eval_many([x.aval for x in inputs], params)
        except Exception as err:  # noqa: BLE001 - a shape rule's error on foreign input
            raise ValueError(f"malformed program: {' in '.join(reversed(self._where))}: the "
                             f"shape rule rejects it: {type(err).__name__}: {err}") from None
        outputs_doc = self._list(doc, "outputs")
        _expect(len(outputs_doc) == len(out_avals),
                f"{primitive.name} has {len(out_avals)} results, the equation lists "
                f"{len(outputs_doc)}")
        outvars = []
        for entry, aval in zip(outputs_doc, out_avals):
            _expect(isinstance(entry, dict), "an output must be an object", entry)
            declared = decode_aval(entry.get("drop") if "drop" in entry else entry.get("aval"))
            _expect(declared.shape == aval.shape and declared.dtype == aval.dtype,
                    f"{primitive.name} gives {aval.str_short()}, the equation declares "
                    f"{declared.str_short()}")
            outvars.append(DropVar(declared) if "drop" in entry else self._bind(entry, env))
        self._where.pop()
        return Eqn(primitive, inputs, outvars, params)

    def param(self, doc):
        if doc is None or isinstance(doc, (bool, str, int, float)):
            return doc
        if isinstance(doc, list):
            return tuple(self.param(x) for x in doc)
        _expect(isinstance(doc, dict) and doc, "malformed parameter", doc)
        if "list" in doc:
            _expect(isinstance(doc["list"], list), "malformed list parameter", doc)
            return [self.param(x) for x in doc["list"]]
        if "float" in doc:
            return decode_float(doc)
        if "dtype" in doc and len(doc) == 1:
            return _registry.dtype_from_name(doc["dtype"])
        if "scalar_type" in doc:
            return _registry.dtype_from_name(doc["scalar_type"]).type
        if "scalar" in doc:
            return _decode_scalar(doc["scalar"], _registry.dtype_from_name(doc.get("dtype")))
        if "closed_jaxpr" in doc:
            return self.closed(doc["closed_jaxpr"])
        if "jaxpr" in doc:
            return self.jaxpr(doc["jaxpr"], closed=False)[0]
        if "aval" in doc:
            return decode_aval(doc["aval"])
        if "enum" in doc:
            cls = _registry.parameter_class(doc["enum"])
            _expect(_registry.is_enum(cls) and isinstance(doc.get("name"), str)
                    and doc["name"] in cls.__members__, "unknown enum member", doc)
            return cls[doc["name"]]
        if "namedtuple" in doc:
            cls = _registry.parameter_class(doc["namedtuple"])
            fields = doc.get("fields")
            _expect(not _registry.is_enum(cls) and isinstance(fields, list)
                    and len(fields) == len(cls._fields), "malformed named tuple", doc)
            return cls(*[self.param(x) for x in fields])
        raise ValueError(f"malformed program: unknown parameter encoding {sorted(doc)}")
