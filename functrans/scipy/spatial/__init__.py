"""``functrans.scipy.spatial``: spatial transformations (as ``jax.scipy.spatial``).

    >>> from functrans.scipy.spatial.transform import Rotation
    >>> Rotation.identity().as_matrix().shape
    (3, 3)
"""
from functrans.scipy.spatial import transform  # noqa: F401

__all__ = ["transform"]
