"""``functrans.scipy.cluster``: clustering helpers (as ``jax.scipy.cluster``)."""
from functrans.scipy.cluster import vq  # noqa: F401

__all__ = ["vq"]
