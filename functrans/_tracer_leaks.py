"""The tracer leak checker (``jax_check_tracer_leaks``; ``functrans.checking_leaks()``).

A tracer *leaks* when something outside a transform (a global list, a closure, an object
attribute) still refers to it after the transform's trace ends. Using it later raises
:class:`~functrans.errors.UnexpectedTracerError` anyway, but far from the line that leaked it;
with the checker on, each transform looks for its tracers as soon as its trace ends and
raises there, naming each leaked tracer, where it was created when that is known, and the
chain of references that keeps it alive.

The check runs only when the option is on: each transform, once its trace has ended and its
own references are dropped, calls :func:`check` with a weak reference to its
:class:`~functrans.core.MainTrace`. If that is already gone no tracer of it can exist;
otherwise a garbage collection and ``gc.get_referrers`` find the tracers still alive. It is
meant for debugging: the collection makes every trace slower.
"""
from __future__ import annotations

import gc
import types

from functrans._config import config
from functrans.core import ClosedJaxpr, Eqn, Jaxpr, Trace, Tracer, UnexpectedTracerError


def enabled() -> bool:
    return bool(config.check_tracer_leaks)


def check(main_ref) -> None:
    """Raise UnexpectedTracerError if tracers of the ended trace ``main_ref()`` (a weak
    reference: the caller holds no other) are still referred to from outside it."""
    if main_ref() is None:
        return
    gc.collect()  # what only cycles keep alive can never reach user code
    main = main_ref()
    if main is None:
        return
    tracers = _live_tracers(main)
    if tracers:
        raise UnexpectedTracerError(_message(main, tracers))


def _live_tracers(main) -> list:
    traces = [r for r in gc.get_referrers(main) if isinstance(r, Trace)]
    candidates = [r for r in gc.get_referrers(*traces)
                  if isinstance(r, Tracer) and r._trace.main is main]
    # the transform's own bookkeeping (a staging builder's tracer list) refers to every
    # tracer it made; only a reference from anywhere else is a leak
    internal = {id(traces), id(candidates)} | _payload_containers(main.payload)
    return [t for t in candidates if _held_from_outside(t, internal)]


# Staged programs (an equation's params: a custom_jvp rule, a nested jit's closed-over
# constants) may keep tracers of the trace that staged them; that is the library's own
# reference, not the user's. Another tracer's reference is judged with that tracer.
_OWNED = (Eqn, Jaxpr, ClosedJaxpr, Tracer)


def _held_from_outside(tracer, internal, limit: int = 10_000) -> bool:
    """Whether a chain of references from outside reaches ``tracer``: walk the referrers
    upwards, not past a staged program or another tracer, until something that nothing
    else refers to (a module, a running frame's local) is found."""
    seen, frontier = {id(tracer)}, [tracer]
    own = {id(seen), id(frontier)}  # this walk's lists refer to what they hold
    while frontier and len(seen) < limit:
        obj = frontier.pop()
        referrers = gc.get_referrers(obj)
        own.add(id(referrers))
        others = [r for r in referrers if id(r) not in own]
        own.add(id(others))
        if all(isinstance(r, types.FrameType) for r in others):
            return True  # a root: only a running frame's locals (or nothing seen) hold it
        parents = [r for r in others if id(r) not in internal
                   and not isinstance(r, (types.FrameType, *_OWNED))]
        own.add(id(parents))
        for parent in parents:
            if isinstance(parent, types.ModuleType):
                return True
            if id(parent) not in seen:
                seen.add(id(parent))
                frontier.append(parent)
    return False


def _payload_containers(payload) -> set[int]:
    if payload is None or not hasattr(payload, "__dict__"):
        return set()
    return {id(payload), id(vars(payload))} | {id(v) for v in vars(payload).values()}


def _message(main, tracers) -> str:
    parts = [f"{t!r}{_origin(main, t)}{_why_alive(t, tracers)}" for t in tracers]
    return (f"Leaked trace {main.trace_type.__name__} (of the {main.name} transformation). "
            "Leaked tracer(s):\n\n" + "\n\n".join(parts) + "\n\nA transformed function kept "
            "a reference to an intermediate value (in a global, a closure or an object "
            "attribute) after the transformation ended. Return the value from the function "
            "instead.")


def _origin(main, tracer) -> str:
    """Where ``tracer`` was created, when its trace recorded it (staged equations keep the
    user's line; tracers of other transforms record nothing)."""
    info = None
    builder = main.payload
    var = getattr(builder, "tracer_to_var", {}).get(id(tracer))
    if var is not None:
        if any(var is v for v in getattr(builder, "constvars", ())):
            return "\nIt holds a constant the traced function closed over."
        eqn = next((e for e in builder.eqns if any(var is v for v in e.outvars)), None)
        if eqn is None:
            return "\nIt is an argument of the traced function."
        info = eqn.source_info
    recipe = getattr(tracer, "recipe", None)
    if info is None and recipe is not None:
        info = getattr(recipe, "source_info", None)
    if info is None:
        return ""
    return f"\nIt was created on line {info.filename}:{info.lineno} ({info.function})."


def _why_alive(tracer, ignore, max_steps: int = 8) -> str:
    """The chain of references from ``tracer`` out to a module (or as far as it goes)."""
    skip = {id(ignore)}
    lines, child, seen = [], tracer, set()
    for _ in range(max_steps):
        if id(child) in seen or isinstance(child, types.ModuleType):
            break
        seen.add(id(child))
        parents = [r for r in gc.get_referrers(child)
                   if id(r) not in skip and not isinstance(r, types.FrameType)]
        skip.add(id(parents))  # the list just made refers to child too
        if not parents:
            break
        parent = parents[0]
        if isinstance(parent, dict) and not isinstance(child, dict):
            owner = _dict_owner(parent, skip)
            if owner is not None:  # a module's or an object's namespace: name the owner
                parent = owner
        elif isinstance(parent, types.CellType):
            holder = next((r for r in gc.get_referrers(parent) if isinstance(r, tuple)), None)
            function = holder and next((r for r in gc.get_referrers(holder)
                                        if isinstance(r, types.FunctionType)), None)
            if function is not None:
                parent = function
        lines.append(f"<{type(child).__name__} {id(child)}> is referred to by "
                     f"{_describe(parent, child)}")
        child = parent
    return "\n" + "\n".join(lines) if lines else ""


def _dict_owner(namespace: dict, skip):
    for r in gc.get_referrers(namespace):
        if id(r) in skip:
            continue
        if isinstance(r, types.ModuleType) or getattr(r, "__dict__", None) is namespace:
            return r
    return None


def _describe(container, child) -> str:
    name = f"<{type(container).__name__} {id(container)}>"
    if isinstance(container, types.ModuleType):
        keys = [k for k, v in vars(container).items() if v is child]
        return f"{container.__name__}.{keys[0]}" if keys else container.__name__
    if isinstance(container, types.FunctionType):
        cells = container.__closure__ or ()
        names = [n for n, c in zip(container.__code__.co_freevars, cells)
                 if _cell_holds(c, child)]
        if names:
            return f"{name} ({container.__name__}) closed-over variable {names[0]}"
    if isinstance(container, (list, tuple)):
        indices = [i for i, v in enumerate(container) if v is child]
        if indices:
            return f"{name}[{indices[0]}]"
    if isinstance(container, dict):
        keys = [k for k, v in container.items() if v is child]
        if keys:
            return f"{name}[{keys[0]!r}]"
    namespace = getattr(container, "__dict__", None)
    if isinstance(namespace, dict):
        keys = [k for k, v in namespace.items() if v is child]
        if keys:
            return f"{name}.{keys[0]}"
    return name


def _cell_holds(cell, value) -> bool:
    try:
        return cell.cell_contents is value
    except ValueError:  # an empty cell
        return False
