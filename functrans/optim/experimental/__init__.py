"""``optim.experimental``: interfaces that may still change, as optax's
``optax.experimental``: :mod:`aggregating` (combining per-example gradients).

    >>> from functrans.optim.experimental import aggregating
    >>> aggregating.average_per_element_updates().init(None)
    EmptyState()
"""
from __future__ import annotations

from functrans.optim.experimental import aggregating

__all__ = ["aggregating"]
