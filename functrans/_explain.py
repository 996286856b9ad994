"""Why did ``jit`` trace again? Compare a new call signature with the cached ones and log
what changed: shapes, dtypes, weak types, pytree structure, static arguments."""
from __future__ import annotations

import logging

from functrans import tree_util
from functrans._source_info import user_frame

logger = logging.getLogger("functrans")


def _describe_leaves(in_tree):
    args_tree = tree_util.tree_unflatten(in_tree, list(range(in_tree.num_leaves)))
    paths = []
    for path, _ in tree_util.tree_flatten_with_path(args_tree)[0]:
        paths.append(_path_name(path))
    return paths


def _path_name(path) -> str:
    # path[0] is the (args, kwargs) tuple index; path[1] the argument position or keyword
    if not path:
        return "args"
    head, rest = path[0], path[1:]
    if getattr(head, "idx", None) == 0 and rest:
        return f"args[{rest[0].idx}]" + tree_util.keystr(rest[1:])
    if rest:
        return f"kwargs[{rest[0].key!r}]" + tree_util.keystr(rest[1:])
    return tree_util.keystr(path)


def differences(new_key, old_key) -> list[str]:
    """Human-readable differences between two cache keys (in_tree, avals, statics,
    backend)."""
    new_tree, new_avals, new_statics, new_backend = new_key
    old_tree, old_avals, old_statics, old_backend = old_key
    reasons = []
    if new_backend != old_backend:
        reasons.append(f"the arguments moved to another device: the backend was "
                       f"{old_backend or 'the default'}, now {new_backend or 'the default'}")
    if new_tree != old_tree:
        reasons.append(f"the pytree structure of the arguments changed: was {old_tree}, "
                       f"now {new_tree}")
    else:
        names = _describe_leaves(new_tree)
        for name, a, b in zip(names, new_avals, old_avals):
            if a.shape != b.shape:
                reasons.append(f"{name}: shape changed from {b.shape} to {a.shape}")
            if a.dtype != b.dtype:
                reasons.append(f"{name}: dtype changed from {b.dtype.name} to {a.dtype.name}")
            if a.weak_type != b.weak_type:
                reasons.append(f"{name}: weak type changed from {b.weak_type} to {a.weak_type} "
                               "(a Python scalar vs an array of the same dtype)")
    old_static = {k: s.value for k, s in old_statics}
    for k, s in new_statics:
        if k in old_static and old_static[k] != s.value:
            reasons.append(f"static argument {k!r} changed from {old_static[k]!r} to {s.value!r}")
        elif k not in old_static:
            reasons.append(f"static argument {k!r} is new")
    return reasons


def explain_cache_miss(jitted, key, old_keys) -> str:
    """Log (and return) why ``jitted`` is tracing again for ``key``."""
    candidates = list(old_keys)
    best = min(candidates, key=lambda old: len(differences(key, old)))
    reasons = differences(key, best) or ["a closed-over value or global changed"]
    info = user_frame(2)
    where = f" at {info.filename}:{info.lineno}" if info else ""
    name = getattr(jitted, "__name__", "function")
    message = (f"TRACING CACHE MISS for {name}{where} ({len(candidates)} earlier signatures): "
               + "; ".join(reasons))
    logger.warning(message)
    return message
