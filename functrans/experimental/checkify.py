"""``checkify``: functional error checking (``jax.experimental.checkify``).

``checkify(f)`` returns a function that gives ``(error, out)``: the checks ``f`` makes with
:func:`check` (and, if asked, automatic checks for NaNs produced, integer division by zero
and out-of-bounds indices) become a value, :class:`Error`, threaded through the program
instead of raised. The checked function can be jitted, vmapped and differentiated; the error
comes out as an ordinary pytree of arrays.

    >>> import functrans, functrans.numpy as jnp
    >>> from functrans.experimental import checkify
    >>> def f(x):
    ...     checkify.check(x > 0, "x must be positive, got {}", x)
    ...     return jnp.log(x)
    >>> err, y = functrans.jit(checkify.checkify(f))(-1.0)
    >>> err.get()
    'x must be positive, got -1.0 (`check` failed)'

How it works: ``f`` is traced to a program; the program is then evaluated equation by
equation (under whatever transforms surround the call), with the error state (a failed flag,
the code of the first failing check, and every check's payload) carried along. Programs
called inside (``jit``, custom derivatives, ``cond``) are checked inside too, and the bodies
of ``scan`` and ``while_loop`` carry the error through their iterations (the first failing
iteration's error wins). A check in the condition of a ``while_loop`` raises
``NotImplementedError``.
"""
from __future__ import annotations

import threading

import numpy as np

import functrans.numpy as jnp
from functrans import _dtypes, core, lax, tree_util
from functrans.core import get_aval
from functrans.interpreters.staging import trace_to_jaxpr_dynamic
from functrans.primitives.checks import (DivisionByZeroError, FailedCheckError,  # noqa: F401
                                         JaxException, JaxRuntimeError, NaNError, OOBError,
                                         check_p, make_exception)

__all__ = ["Error", "ErrorCategory", "JaxException", "JaxRuntimeError", "FailedCheckError",
           "NaNError",
           "DivisionByZeroError", "OOBError", "user_checks", "nan_checks", "index_checks",
           "div_checks", "float_checks", "automatic_checks", "all_checks", "check",
           "check_error", "checkify", "debug_check"]


# the kinds of error (JAX's ErrorCategory is the type of these classes)
ErrorCategory = type


user_checks = frozenset({FailedCheckError})
nan_checks = frozenset({NaNError})
index_checks = frozenset({OOBError})
div_checks = frozenset({DivisionByZeroError})
float_checks = nan_checks | div_checks
automatic_checks = float_checks | index_checks
all_checks = automatic_checks | user_checks


# =============================================================================================
# The error value
# =============================================================================================


class Error:
    """The outcome of a checkified function: whether a check failed, which one first, and
    the values its message is formatted with. A pytree (its arrays are its leaves), so it can
    be returned from ``jit`` and ``vmap``."""

    def __init__(self, failed, code, payload, messages):
        self._failed = failed
        self._code = code
        self._payload = list(payload)
        self._messages = tuple(messages)

    def _failures(self):
        """[(index of the example or None, exception)] of the failing entries."""
        failed = np.asarray(self._failed)
        if not failed.any():
            return []
        code = np.asarray(self._code)
        payload = [np.asarray(p) for p in self._payload]
        if failed.ndim == 0:
            return [(None, make_exception(self._messages, int(code), payload))]
        return [(index if len(index) > 1 else index[0],
                 make_exception(self._messages, int(code[index]), [p[index] for p in payload]))
                for index in zip(*np.nonzero(failed))]

    def get(self) -> str | None:
        """The message of the first failing check, or None when every check held. Under
        ``vmap`` the message names each failing example (``at mapped index i: ...``)."""
        exception = self.get_exception()
        return None if exception is None else str(exception)

    def get_exception(self) -> JaxException | None:
        """The error as an exception of its category (``FailedCheckError``, ``NaNError``,
        ...), or None."""
        failures = self._failures()
        if not failures:
            return None
        if failures[0][0] is None:
            return failures[0][1]
        return BatchedError({index: exception for index, exception in failures})

    def throw(self) -> None:
        """Raise ``JaxRuntimeError`` with the error's message if a check failed."""
        exception = self.get_exception()
        if exception is not None:
            raise JaxRuntimeError(str(exception)) from exception

    def __repr__(self):
        try:
            return f"Error({self.get()})"
        except (core.ConcretizationTypeError, TypeError):
            return "Error(<traced>)"

    __str__ = __repr__


class BatchedError(JaxException):
    """The errors of a vmapped check, by example index."""

    def __init__(self, error_mapping: dict):
        super().__init__(error_mapping)
        self.error_mapping = error_mapping

    def __str__(self):
        return "\n".join(f"at mapped index {index}: {exception}"
                         for index, exception in self.error_mapping.items())


tree_util.register_pytree_node(
    Error,
    lambda e: ((e._failed, e._code, *e._payload), e._messages),
    lambda messages, leaves: Error(leaves[0], leaves[1], leaves[2:], messages))


# =============================================================================================
# check, check_error
# =============================================================================================

_state = threading.local()


def _checkifying() -> bool:
    return getattr(_state, "depth", 0) > 0


def _is_traced(values) -> bool:
    return any(isinstance(v, core.Tracer) for v in values)


def _bind_check(pred, code, payload, messages):
    pred = jnp.asarray(pred)
    if pred.ndim:
        pred = jnp.all(pred)
    values = [pred, *payload]
    if _is_traced(values) and not _checkifying():
        raise ValueError(
            "Cannot abstractly evaluate a checkify.check which was not functionalized. "
            "This probably means you tried to stage (jit/scan/pmap/...) a `check` without "
            "functionalizing it through `checkify.checkify`.")
    check_p.bind(pred.astype(bool), jnp.asarray(code, jnp.int32),
                 *[jnp.asarray(p) for p in payload], messages=tuple(messages))


def check(pred, msg: str, *fmt_args, **fmt_kwargs) -> None:
    """Check that ``pred`` (a boolean, or an array whose elements must all be true) holds;
    otherwise ``msg.format(*fmt_args, **fmt_kwargs)`` is the error. Eagerly, a failing check
    raises ``JaxRuntimeError``; inside :func:`checkify` it becomes the function's error;
    staged (``jit``) outside ``checkify`` it is a ``ValueError`` at trace time, as in JAX.

    The format arguments may be arrays (their values appear in the message).
    """
    fmt_kwargs.pop("debug", None)
    if not isinstance(msg, str):
        raise TypeError(f"check: the message must be a str, got {type(msg).__name__}")
    leaves, treedef = tree_util.tree_flatten((fmt_args, fmt_kwargs))
    _bind_check(pred, 0, leaves, ((FailedCheckError, msg, treedef),))


def debug_check(pred, msg: str, *fmt_args, **fmt_kwargs) -> None:
    """:func:`check` that is dropped (not an error) when staged outside ``checkify``."""
    values = [pred, *fmt_args, *fmt_kwargs.values()]
    if _is_traced(values) and not _checkifying():
        return
    check(pred, msg, *fmt_args, **fmt_kwargs)


def check_error(error: Error) -> None:
    """Raise ``error`` if it failed (eagerly), or re-introduce it as a check (inside
    ``checkify``), so an error returned by an inner checkified function is not lost."""
    if not isinstance(error, Error):
        raise TypeError(f"check_error takes a checkify.Error, got {type(error).__name__}")
    if not error._messages:
        return
    values = [error._failed, error._code, *error._payload]
    if not _is_traced(values):
        error.throw()
        return
    failed = jnp.asarray(error._failed)
    code, payload = error._code, error._payload
    if failed.ndim:  # a batched error: the first failing example's
        first = jnp.argmax(failed.reshape(-1))
        code = jnp.asarray(code).reshape(-1)[first]
        payload = [jnp.asarray(p).reshape((-1,) + jnp.shape(p)[failed.ndim:])[first]
                   for p in payload]
    _bind_check(~jnp.any(failed), code, payload, error._messages)


# =============================================================================================
# The transform
# =============================================================================================


class _ErrorState:
    """The error while evaluating: messages found so far (static), the failed flag and code,
    and every message's payload."""

    def __init__(self, errors):
        self.errors = frozenset(errors)
        self.failed = np.bool_(False)
        self.code = np.int32(0)
        self.messages: list = []
        self.payload: list = []

    def add(self, pred, code, payload, messages):
        """Record a check: ``messages[code]`` failed unless ``pred``; the first failure wins."""
        first_new = len(self.messages)
        self.messages.extend(messages)
        self.payload.extend(payload)
        newly = jnp.logical_and(jnp.logical_not(pred), jnp.logical_not(self.failed))
        self.code = jnp.where(newly, jnp.asarray(code, jnp.int32) + first_new, self.code)
        self.failed = jnp.logical_or(self.failed, newly)

    def error(self) -> Error:
        return Error(self.failed, self.code, self.payload, self.messages)


def _holds_check(jaxpr) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive is check_p:
            return True
        if any(_holds_check(sub) for sub in core.subjaxprs(eqn)):
            return True
    return False


_NO_ARGS = tree_util.tree_structure(((), {}))
_ONE_ARG = tree_util.tree_structure(((0,), {}))


def _automatic_checks(state: _ErrorState, eqn, invals, outvals):
    name = eqn.primitive.name
    if NaNError in state.errors:
        float_outs = [o for o in outvals if _dtypes.is_inexact(get_aval(o).dtype)]
        if float_outs:
            produced = jnp.any(jnp.stack([jnp.any(jnp.isnan(o)) for o in float_outs]))
            had = [jnp.any(jnp.isnan(i)) for i in invals
                   if _dtypes.is_inexact(get_aval(i).dtype)]
            if had:
                produced = jnp.logical_and(produced, jnp.logical_not(jnp.any(jnp.stack(had))))
            state.add(jnp.logical_not(produced), 0, [],
                      ((NaNError, f"nan generated by primitive: {name}.", _NO_ARGS),))
    if DivisionByZeroError in state.errors and name == "div":  # any dtype, as JAX
        state.add(jnp.all(invals[1] != 0), 0, [],
                  ((DivisionByZeroError, "division by zero", _NO_ARGS),))
    if OOBError in state.errors and name == "gather":
        _gather_bounds_check(state, eqn, invals)
    if OOBError in state.errors and name in ("dynamic_slice", "dynamic_update_slice"):
        _dynamic_slice_bounds_check(state, eqn, invals)


def _gather_bounds_check(state, eqn, invals):
    operand, indices = invals[0], invals[1]
    dnums = eqn.params["dimension_numbers"]
    sizes = eqn.params["slice_sizes"]
    shape = get_aval(operand).shape
    for position, axis in enumerate(dnums.start_index_map):
        index = jnp.asarray(indices)[..., position]
        limit = shape[axis] - sizes[axis]
        bad = jnp.logical_or(index < 0, index > limit)
        first = jnp.argmax(bad.reshape(-1)) if bad.ndim else 0
        value = index.reshape(-1)[first] if index.ndim else index
        state.add(jnp.logical_not(jnp.any(bad)), 0, [value],
                  ((OOBError, f"out-of-bounds indexing for array of shape {shape}: index "
                              f"{{0}} is out of bounds for axis {axis} with size "
                              f"{shape[axis]}. ", _ONE_ARG),))


def _dynamic_slice_bounds_check(state, eqn, invals):
    operand = invals[0]
    shape = get_aval(operand).shape
    if eqn.primitive.name == "dynamic_slice":
        starts, sizes = invals[1:], eqn.params["slice_sizes"]
    else:
        starts, sizes = invals[2:], get_aval(invals[1]).shape
    for axis, (start, size) in enumerate(zip(starts, sizes)):
        bad = jnp.logical_or(start < 0, start + size > shape[axis])
        state.add(jnp.logical_not(bad), 0, [start],
                  ((OOBError, f"out-of-bounds indexing for array of shape {shape}: index "
                              f"{{0}} is out of bounds for axis {axis} with size "
                              f"{shape[axis]}. ", _ONE_ARG),))


def _eval_checked(jaxpr: core.Jaxpr, consts, args, state: _ErrorState) -> list:
    env = {}

    def read(v):
        return v.val if isinstance(v, core.Literal) else env[v]

    for var, value in zip(jaxpr.constvars, consts):
        env[var] = value
    for var, value in zip(jaxpr.invars, args):
        env[var] = value
    automatic = bool(state.errors - user_checks)
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        if eqn.primitive is check_p:
            pred, code, *payload = invals
            state.add(pred, code, payload, eqn.params["messages"])
            continue
        subs = list(core.subjaxprs(eqn))
        if subs and (automatic or any(_holds_check(s) for s in subs)):
            outvals = _eval_checked_call(eqn, invals, state)
        else:
            outvals = eqn.primitive.bind(*invals, **eqn.params)
            if not eqn.primitive.multiple_results:
                outvals = [outvals]
            if automatic:
                _automatic_checks(state, eqn, invals, outvals)
        for var, value in zip(eqn.outvars, outvals):
            env[var] = value
    return [read(v) for v in jaxpr.outvars]


def _eval_closed(closed, args, state):
    if isinstance(closed, core.ClosedJaxpr):
        return _eval_checked(closed.jaxpr, closed.consts, args, state)
    return _eval_checked(closed, [], args, state)


def _eval_checked_call(eqn, invals, state: _ErrorState) -> list:
    name = eqn.primitive.name
    params = eqn.params
    if name == "jit" or name.startswith("pjit"):
        return _eval_closed(params["jaxpr"], invals, state)
    if name in ("custom_jvp_call", "custom_vjp_call"):
        # checked along the primal computation; derivatives use the rules as written
        jaxpr = params.get("call_jaxpr") or params.get("fun_jaxpr")
        return _eval_closed(jaxpr, invals, state)
    if name == "cond":
        return _eval_checked_cond(params["branches"], invals[0], invals[1:], state)
    if name == "remat":  # checked along the primal computation, as a call
        return _eval_closed(params["jaxpr"], invals, state)
    if name == "scan":
        return _eval_checked_scan(params, invals, state)
    if name == "while":
        return _eval_checked_while(params, invals, state)
    raise NotImplementedError(
        f"checkify: checks inside `{name}` (the body of a loop or another higher-order "
        f"primitive) are not supported; move the check outside the loop, or check its "
        f"result")


def _loop_error_layout(body, fixed, loop_avals, state):
    """The messages a loop body adds, and the types of their payload, found by tracing the
    checked body once (``fixed``: the values the body closes over, ``loop_avals``: the types
    of what varies per iteration)."""
    probe = _ErrorState(state.errors)
    trace_to_jaxpr_dynamic(lambda *xs: _eval_closed(body, [*fixed, *xs], probe),
                           list(loop_avals))
    return list(probe.messages), [get_aval(p) for p in probe.payload]


def _no_loop_error(payload_avals):
    return (jnp.asarray(False), jnp.asarray(0, jnp.int32),
            [jnp.zeros(a.shape, a.dtype) for a in payload_avals])


def _merge_loop_error(error, local: _ErrorState):
    """The loop's error so far, updated with this iteration's: the first failure wins."""
    failed, code, payload = error
    newly = jnp.logical_and(jnp.logical_not(failed), local.failed)
    code = jnp.where(newly, jnp.asarray(local.code, jnp.int32), code)
    payload = [jnp.where(newly, new, old) for new, old in zip(local.payload, payload)]
    return jnp.logical_or(failed, local.failed), code, payload


def _eval_checked_scan(params, invals, state: _ErrorState) -> list:
    n_consts, n_carry = params["num_consts"], params["num_carry"]
    consts = invals[:n_consts]
    init, xs = invals[n_consts:n_consts + n_carry], invals[n_consts + n_carry:]
    body = params["jaxpr"]
    x_avals = [get_aval(x).update(shape=get_aval(x).shape[1:]) for x in xs]
    messages, payload_avals = _loop_error_layout(
        body, consts, [get_aval(c) for c in init] + x_avals, state)

    def step(carry, x):
        values, error = carry
        local = _ErrorState(state.errors)
        outs = _eval_closed(body, [*consts, *values, *x], local)
        return (outs[:n_carry], _merge_loop_error(error, local)), outs[n_carry:]

    (values, (failed, code, payload)), ys = lax.scan(
        step, (list(init), _no_loop_error(payload_avals)), list(xs),
        length=params["length"], reverse=params["reverse"])
    if messages:
        state.add(~failed, code, payload, messages)
    return [*values, *ys]


def _eval_checked_while(params, invals, state: _ErrorState) -> list:
    cond_n, body_n = params["cond_nconsts"], params["body_nconsts"]
    cond_consts, body_consts = invals[:cond_n], invals[cond_n:cond_n + body_n]
    init = invals[cond_n + body_n:]
    if _holds_check(params["cond_jaxpr"].jaxpr):
        raise NotImplementedError("checkify: checks in the condition of a while_loop are not "
                                  "supported; check inside its body instead")
    body = params["body_jaxpr"]
    messages, payload_avals = _loop_error_layout(body, body_consts,
                                                 [get_aval(c) for c in init], state)

    def cond_fun(carry):
        values, _ = carry
        return core.eval_jaxpr(params["cond_jaxpr"].jaxpr, params["cond_jaxpr"].consts,
                               *cond_consts, *values)[0]

    def body_fun(carry):
        values, error = carry
        local = _ErrorState(state.errors)
        outs = _eval_closed(body, [*body_consts, *values], local)
        return outs, _merge_loop_error(error, local)

    values, (failed, code, payload) = lax.while_loop(
        cond_fun, body_fun, (list(init), _no_loop_error(payload_avals)))
    if messages:
        state.add(~failed, code, payload, messages)
    return list(values)


def _eval_checked_cond(branches, index, operands, state: _ErrorState) -> list:
    """Each branch checked on its own; the outer state gains every branch's messages, the
    taken branch's outcome selected with ``switch``."""
    layouts = []
    for branch in branches:  # the messages (and payload avals) each branch would add
        probe = _ErrorState(state.errors)
        closed = core.ClosedJaxpr(*trace_to_jaxpr_dynamic(
            lambda *xs, b=branch, s=probe: _eval_closed(b, xs, s), [get_aval(o) for o in
                                                                   operands]))
        del closed
        layouts.append((list(probe.messages), [get_aval(p) for p in probe.payload]))

    def run(k):
        def branch_fn(*xs):
            local = _ErrorState(state.errors)
            outs = _eval_closed(branches[k], xs, local)
            payload = []
            offset = 0
            for j, (_, avals) in enumerate(layouts):
                if j == k:
                    payload.extend(jnp.asarray(p) for p in local.payload)
                else:
                    payload.extend(jnp.zeros(a.shape, a.dtype) for a in avals)
                offset += len(layouts[j][0])
            code = jnp.asarray(local.code, jnp.int32) + sum(
                len(layouts[j][0]) for j in range(k))
            return [*outs, jnp.asarray(local.failed), code, *payload]
        return branch_fn

    results = lax.switch(index, [run(k) for k in range(len(branches))], *operands)
    n_out = len(results) - 2 - sum(len(avals) for _, avals in layouts)
    outs, failed, code, payload = (results[:n_out], results[n_out], results[n_out + 1],
                                   results[n_out + 2:])
    messages = [m for msgs, _ in layouts for m in msgs]
    if messages:
        state.add(jnp.logical_not(failed), code, payload, messages)
    return list(outs)


def checkify(f, errors=user_checks):
    """Functionalize the checks of ``f``: ``checkify(f)(*args)`` returns ``(error, out)``
    where ``out`` is ``f(*args)`` and ``error`` an :class:`Error` (``error.get()`` is None
    when every check held). ``errors`` is the set of categories checked: ``user_checks``
    (the default: :func:`check` calls), ``nan_checks``, ``div_checks``, ``index_checks``,
    ``float_checks``, ``automatic_checks``, ``all_checks``, or a union of them.

        >>> import functrans.numpy as jnp
        >>> err, y = checkify(lambda x: x / x, errors=nan_checks)(jnp.zeros(2))
        >>> err.get()
        'nan generated by primitive: div.'
    """
    errors = frozenset(errors)
    unknown = [e for e in errors if not (isinstance(e, type) and issubclass(e, JaxException))]
    if unknown:
        raise TypeError(f"checkify: errors must be checkify error categories, got {unknown}")

    def checked(*args, **kwargs):
        leaves, in_tree = tree_util.tree_flatten((args, kwargs))
        out_tree_cell = []

        def flat(*flat_args):
            a, k = tree_util.tree_unflatten(in_tree, flat_args)
            out_leaves, out_tree = tree_util.tree_flatten(f(*a, **k))
            out_tree_cell.append(out_tree)
            return out_leaves

        _state.depth = getattr(_state, "depth", 0) + 1
        try:
            jaxpr, consts = trace_to_jaxpr_dynamic(flat, [get_aval(x) for x in leaves])
        finally:
            _state.depth -= 1
        state = _ErrorState(errors)
        _state.depth += 1
        try:
            outs = _eval_checked(jaxpr, consts, leaves, state)
        finally:
            _state.depth -= 1
        return state.error(), tree_util.tree_unflatten(out_tree_cell[0], outs)

    try:
        import functools
        return functools.wraps(f)(checked)
    except (AttributeError, TypeError):
        return checked
