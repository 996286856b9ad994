"""``jax.extend.linear_util``: functions wrapped for transformation (``WrappedFun``), with the
transformations stacked on them applied when ``call_wrapped`` runs.

``wrap_init(f)`` wraps ``f``; ``@transformation`` / ``@transformation_with_aux`` define a
generator that runs around the wrapped call (it receives the arguments, yields them to the
inner function, gets its results back and yields the final ones); ``store`` carries
auxiliary results out.
"""
from __future__ import annotations

import functools
from typing import Callable

__all__ = ["WrappedFun", "wrap_init", "transformation", "transformation2",
           "transformation_with_aux", "transformation_with_aux2", "Store", "cache",
           "merge_linear_aux", "DebugInfo"]


class StoreException(Exception):
    pass


class Store:
    """A box written once by a transformation, read after the call."""

    __slots__ = ("_val",)
    _EMPTY = object()

    def __init__(self):
        self._val = Store._EMPTY

    def store(self, val):
        if self._val is not Store._EMPTY:
            raise StoreException("Store occupied")
        self._val = val

    def reset(self):
        self._val = Store._EMPTY

    @property
    def val(self):
        if self._val is Store._EMPTY:
            raise StoreException("Store empty")
        return self._val

    def __nonzero__(self):
        return self._val is not Store._EMPTY

    __bool__ = __nonzero__


class DebugInfo:
    """What a traced function is called and where its arguments come from."""

    def __init__(self, traced_for: str = "", func_src_info: str | None = None,
                 arg_names=(), result_paths=None):
        self.traced_for = traced_for
        self.func_src_info = func_src_info
        self.arg_names = tuple(arg_names)
        self.result_paths = result_paths

    def safe_arg_names(self, expected: int):
        names = self.arg_names
        return names if len(names) == expected else ("",) * expected

    def replace_func_name(self, name):
        return DebugInfo(self.traced_for, name, self.arg_names, self.result_paths)


class WrappedFun:
    """``f`` with a stack of transformations to run around it, and static parameters."""

    def __init__(self, f: Callable, transforms: tuple, stores: tuple, params: tuple,
                 debug_info=None):
        self.f = f
        self.transforms = transforms
        self.stores = stores
        self.params = params
        self.debug_info = debug_info

    @property
    def __name__(self):
        return getattr(self.f, "__name__", "<unnamed wrapped function>")

    def wrap(self, gen, gen_static_args, out_store) -> "WrappedFun":
        return WrappedFun(self.f, ((gen, gen_static_args),) + self.transforms,
                          (out_store,) + self.stores, self.params, self.debug_info)

    def populate_stores(self, stores):
        for self_store, other_store in zip(self.stores, stores):
            if self_store is not None:
                self_store.store(other_store.val)

    def call_wrapped(self, *args, **kwargs):
        """Run the transformations' generators around ``f``, outermost first."""
        stack = []
        for (gen, gen_static_args), out_store in zip(self.transforms, self.stores):
            gen = gen(*(gen_static_args + tuple(args)), **kwargs)
            args, kwargs = next(gen)
            stack.append((gen, out_store))
        ans = self.f(*args, **dict(self.params, **kwargs))
        for gen, out_store in reversed(stack):
            try:
                ans = gen.send(ans)
            except StopIteration as stop:
                ans = stop.value
            if out_store is not None:
                ans, side = ans
                out_store.store(side)
        return ans

    def __repr__(self):
        return f"Wrapped function:\n{self.f}\n transforms: {len(self.transforms)}"

    def __eq__(self, other):
        return (isinstance(other, WrappedFun) and self.f == other.f
                and self.transforms == other.transforms and self.params == other.params)

    def __hash__(self):
        return hash((self.f, self.transforms, self.params))


def wrap_init(f: Callable, params=None, *, debug_info=None) -> WrappedFun:
    """Wrap ``f`` (called with ``params`` as extra keyword arguments)."""
    params = () if params is None else tuple(sorted(dict(params).items()))
    return WrappedFun(f, (), (), params, debug_info)


def transformation(gen, fun: WrappedFun | None = None, *gen_static_args) -> WrappedFun:
    """Stack generator ``gen`` on ``fun``: ``gen(*static, *args)`` yields ``(args, kwargs)``
    for the inner call and is sent its result, then yields the final result."""
    if fun is None:  # used as a decorator: apply later to (fun, *static)
        return functools.partial(transformation, gen)
    return fun.wrap(gen, gen_static_args, None)


def transformation_with_aux(gen, fun: WrappedFun | None = None, *gen_static_args):
    """As :func:`transformation`, where ``gen``'s final yield is ``(result, aux)``; returns
    the wrapped function and a thunk giving ``aux`` once it has run."""
    if fun is None:
        return functools.partial(transformation_with_aux, gen)
    out_store = Store()
    return fun.wrap(gen, gen_static_args, out_store), (lambda: out_store.val)


def transformation2(gen, fun: WrappedFun | None = None, *gen_static_args) -> WrappedFun:
    """Stack ``gen(inner, *static, *args, **kwargs)`` (a plain function that calls
    ``inner``) on ``fun``."""
    if fun is None:
        return functools.partial(transformation2, gen)
    inner_fun = fun

    def call(*args, **kwargs):
        return gen(inner_fun.call_wrapped, *gen_static_args, *args, **kwargs)

    return WrappedFun(call, (), (), (), fun.debug_info)


def transformation_with_aux2(gen, fun: WrappedFun | None = None, *gen_static_args,
                             use_eq_store=False):
    """As :func:`transformation2`; ``gen(inner, store, *static, *args)`` puts its auxiliary
    result in ``store``."""
    if fun is None:
        return functools.partial(transformation_with_aux2, gen, use_eq_store=use_eq_store)
    out_store = Store()
    inner_fun = fun

    def call(*args, **kwargs):
        return gen(inner_fun.call_wrapped, out_store, *gen_static_args, *args, **kwargs)

    return WrappedFun(call, (), (), (), fun.debug_info), (lambda: out_store.val)


def merge_linear_aux(aux1, aux2):
    """The auxiliary result of whichever of two branches ran."""
    try:
        out1 = aux1()
    except StoreException:
        return False, aux2()
    return True, out1


def cache(call: Callable, *, explain=None):
    """Memoize ``call(fun: WrappedFun, *args)`` on the wrapped function and arguments."""
    memo: dict = {}

    @functools.wraps(call)
    def memoized(fun: WrappedFun, *args):
        key = (fun, args)
        try:
            return memo[key]
        except KeyError:
            ans = memo[key] = call(fun, *args)
            return ans
        except TypeError:  # unhashable arguments: no memo
            return call(fun, *args)

    memoized.cache_clear = memo.clear
    return memoized
