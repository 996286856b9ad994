"""``jax._src.dispatch``: waiting for the side effects of dispatched computations."""
from __future__ import annotations

from functrans._api import effects_barrier


def wait_for_tokens() -> None:
    """Block until every effect (callback, debug print) already dispatched has run."""
    effects_barrier()


__all__ = ["wait_for_tokens"]
