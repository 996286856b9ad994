"""Gaussian kernel density estimation (``jax.scipy.stats.gaussian_kde``).

The estimator is a pytree (its arrays are leaves), so it can be built inside ``jit``, passed
through ``vmap`` and differentiated with respect to the data::

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import gaussian_kde
    >>> kde = gaussian_kde(jnp.array([0.0, 1.0, 2.0, 4.0]))
    >>> kde.evaluate(jnp.array([1.0])).shape
    (1,)
"""
from __future__ import annotations

import numpy as np

from functrans import _api, _dtypes
from functrans import numpy as jnp
from functrans import random
from functrans.core import get_aval
from functrans.scipy import linalg, special
from functrans.tree_util import register_pytree_node_class

__all__ = ["gaussian_kde"]


def _is_complex(x) -> bool:
    return _dtypes.is_complex(get_aval(jnp.asarray(x)).dtype)


def _weighted_cov(data, weights):
    """np.cov(data, aweights=weights) for rows of variables (unbiased, ddof=1 correction)."""
    w_sum = jnp.sum(weights)
    mean = jnp.sum(data * weights, axis=1, keepdims=True) / w_sum
    centred = data - mean
    # With analytic weights the unbiased normaliser is sum(w) - sum(w^2) / sum(w).
    fact = w_sum - jnp.sum(weights * weights) / w_sum
    return (centred * weights) @ centred.T / fact


@register_pytree_node_class
class gaussian_kde:
    """Gaussian kernel density estimator, as :class:`scipy.stats.gaussian_kde`.

    Args:
      dataset: real data, shape ``(n,)`` or ``(d, n)`` (``d`` dimensions, ``n`` points).
      bw_method: ``"scott"`` (default), ``"silverman"``, a scalar bandwidth factor, or a
        callable taking the estimator and returning the factor.
      weights: optional weights of length ``n`` (normalised to sum to one).

    Attributes: ``dataset``, ``weights``, ``neff`` (effective sample size), ``covariance``
    (kernel covariance: data covariance times factor squared), ``inv_cov``, ``d``, ``n``.

    Example::

        >>> kde = gaussian_kde(jnp.array([[0., 1., 2.], [1., 0., 2.]]), bw_method="silverman")
        >>> kde.d, kde.n
        (2, 3)
    """
    __slots__ = ("neff", "dataset", "weights", "covariance", "inv_cov")

    def __init__(self, dataset, bw_method=None, weights=None):
        dataset = jnp.atleast_2d(jnp.asarray(dataset))
        if _is_complex(dataset):
            raise NotImplementedError("gaussian_kde does not support complex data")
        if not dataset.size > 1:
            raise ValueError("`dataset` input should have multiple elements.")
        d, n = dataset.shape
        if weights is not None:
            weights = jnp.atleast_1d(jnp.asarray(weights))
            dtype = jnp.result_type(dataset, weights, jnp.float32)
            if not _dtypes.is_inexact(jnp.result_type(dataset, weights)):
                dtype = jnp.result_type(jnp.float32)
            dataset, weights = dataset.astype(dtype), weights.astype(dtype)
            if weights.ndim != 1:
                raise ValueError("`weights` input should be one-dimensional.")
            if weights.shape[0] != n:
                raise ValueError("`weights` input should be of length n")
            weights = weights / jnp.sum(weights)
        else:
            if not _dtypes.is_inexact(dataset.dtype):
                dataset = dataset.astype(jnp.result_type(float))
            weights = jnp.full(n, 1.0 / n, dtype=dataset.dtype)
        self._set("dataset", dataset)
        self._set("weights", weights)
        neff = self._set("neff", 1 / jnp.sum(weights ** 2))

        # The bandwidth factor scales the weighted data covariance (SciPy's definition).
        if bw_method is None or (isinstance(bw_method, str) and bw_method == "scott"):
            factor = neff ** (-1.0 / (d + 4))
        elif isinstance(bw_method, str) and bw_method == "silverman":
            factor = (neff * (d + 2) / 4.0) ** (-1.0 / (d + 4))
        elif jnp.isscalar(bw_method) and not isinstance(bw_method, str):
            factor = bw_method
        elif callable(bw_method):
            factor = bw_method(self)
        else:
            raise ValueError("`bw_method` should be 'scott', 'silverman', a scalar, or a callable.")

        data_cov = _weighted_cov(dataset, weights)
        self._set("covariance", data_cov * factor ** 2)
        self._set("inv_cov", jnp.linalg.inv(data_cov) / factor ** 2)

    def _set(self, name, value):
        object.__setattr__(self, name, value)
        return value

    def tree_flatten(self):
        return (self.neff, self.dataset, self.weights, self.covariance, self.inv_cov), None

    @classmethod
    def tree_unflatten(cls, aux_data, children):
        del aux_data
        kde = cls.__new__(cls)
        for name, value in zip(cls.__slots__, children):
            kde._set(name, value)
        return kde

    @property
    def d(self):
        """Number of dimensions."""
        return self.dataset.shape[0]

    @property
    def n(self):
        """Number of data points."""
        return self.dataset.shape[1]

    def evaluate(self, points):
        """Density at ``points`` (shape ``(d, m)``, or ``(m,)`` when ``d == 1``); returns ``(m,)``.

        Example: ``gaussian_kde(jnp.array([0., 1.])).evaluate(jnp.array([0.5]))``.
        """
        return _kernel_sum(False, self.dataset, self.weights, self._reshape_points(points),
                           self.inv_cov)

    def __call__(self, points):
        return self.evaluate(points)

    def pdf(self, x):
        """Same as :meth:`evaluate`."""
        return self.evaluate(x)

    def logpdf(self, x):
        """Log density at ``x``, computed with logsumexp (accurate far in the tails)."""
        return _kernel_sum(True, self.dataset, self.weights, self._reshape_points(x),
                           self.inv_cov)

    def integrate_gaussian(self, mean, cov):
        """Integral of the density times the Gaussian ``N(mean, cov)``.

        Example: ``kde.integrate_gaussian(jnp.zeros(1), jnp.eye(1))`` for a 1-D ``kde``.
        """
        mean = jnp.atleast_1d(jnp.squeeze(jnp.asarray(mean)))
        cov = jnp.atleast_2d(jnp.asarray(cov))
        if mean.shape != (self.d,):
            raise ValueError(f"mean does not have dimension {self.d}")
        if cov.shape != (self.d, self.d):
            raise ValueError(f"covariance does not have dimension {self.d}")
        return _gaussian_overlap(self.covariance + cov, self.dataset, self.weights, mean)

    def integrate_box_1d(self, low, high):
        """Probability mass between the scalars ``low`` and ``high`` (1-D estimators only)."""
        if self.d != 1:
            raise ValueError("integrate_box_1d() only handles 1D pdfs")
        if np.ndim(low) != 0 or np.ndim(high) != 0:
            raise ValueError("the limits of integration in integrate_box_1d must be scalars")
        sigma = jnp.sqrt(self.covariance[0, 0])
        data = self.dataset[0]
        mass = special.ndtr((high - data) / sigma) - special.ndtr((low - data) / sigma)
        return jnp.sum(self.weights * mass)

    def integrate_kde(self, other):
        """Integral of the product of this density and ``other`` (another gaussian_kde)."""
        if other.d != self.d:
            raise ValueError("KDEs are not the same dimensionality")
        # The product of two Gaussian kernels integrates to a Gaussian in the difference of
        # their centres with the summed covariance; loop (vmap) over the smaller dataset.
        small, large = (self, other) if self.n < other.n else (other, self)
        cov = self.covariance + other.covariance
        per_point = _api.vmap(lambda m: _gaussian_overlap(cov, large.dataset, large.weights, m),
                              in_axes=1)(small.dataset)
        return jnp.sum(per_point * small.weights)

    def resample(self, key, shape=()):
        """Draw samples of shape ``(d, *shape)``: a data point (by weight) plus kernel noise.

        Example: ``kde.resample(functrans.random.key(0), (100,))``.
        """
        shape = tuple(shape)
        ind_key, eps_key = random.split(key)
        ind = random.choice(ind_key, self.n, shape=shape, p=self.weights)
        eps = random.multivariate_normal(eps_key, jnp.zeros(self.d, self.covariance.dtype),
                                         self.covariance, shape=shape,
                                         dtype=self.dataset.dtype)
        return self.dataset[:, ind] + jnp.moveaxis(eps, -1, 0)

    def integrate_box(self, low_bounds, high_bounds, maxpts=None):
        """Not supported (as in JAX): use :meth:`integrate_box_1d`."""
        raise NotImplementedError("gaussian_kde.integrate_box: only 1D box integrations are "
                                  "supported; use `integrate_box_1d`")

    def set_bandwidth(self, bw_method=None):
        """Not supported (as in JAX): build a new estimator with the new ``bw_method``."""
        raise NotImplementedError("gaussian_kde.set_bandwidth: dynamically changing the "
                                  "bandwidth method is not supported")

    def _reshape_points(self, points):
        points = jnp.asarray(points)
        if _is_complex(points):
            raise NotImplementedError("gaussian_kde does not support complex coordinates")
        points = jnp.atleast_2d(points)
        d, m = points.shape
        if d != self.d:
            if d == 1 and m == self.d:
                # One point of a d-dimensional estimator given as a flat vector.
                points = jnp.reshape(points, (self.d, 1))
            else:
                raise ValueError(f"points have dimension {d}, dataset has dimension {self.d}")
        return points


def _gaussian_overlap(cov, centres, weights, mean):
    """sum_i w_i N(mean; centres_i, cov), for centres of shape (d, n)."""
    d = cov.shape[0]
    chol = linalg.cho_factor(cov)
    norm = jnp.sqrt(2 * np.pi) ** d * jnp.prod(jnp.diag(chol[0]))
    diff = centres - mean[:, None]
    mahal = jnp.sum(diff * linalg.cho_solve(chol, diff), axis=0)
    return jnp.sum(jnp.exp(-0.5 * mahal) * weights) / norm


def _kernel_sum(in_log, dataset, weights, points, precision):
    """Weighted sum (or logsumexp) of Gaussian kernels at each column of ``points``."""
    dtype = jnp.result_type(dataset, weights, points, precision)
    if not _dtypes.is_inexact(dtype):
        dtype = jnp.result_type(float)
    dataset, weights, points, precision = (jnp.asarray(v).astype(dtype)
                                           for v in (dataset, weights, points, precision))
    d = dataset.shape[0]
    if points.shape[0] != d:
        raise ValueError("points and xi must have same trailing dim")
    if precision.shape != (d, d):
        raise ValueError("precision matrix must match data dims")
    # Whiten with the Cholesky factor of the precision so each kernel is exp(-|x - y|^2 / 2).
    white = jnp.linalg.cholesky(precision)
    data_w = dataset.T @ white            # (n, d)
    pts_w = points.T @ white              # (m, d)
    log_norm = jnp.sum(jnp.log(jnp.diag(white))) - 0.5 * d * np.log(2 * np.pi)
    sq = jnp.sum((pts_w[:, None, :] - data_w[None, :, :]) ** 2, axis=-1)   # (m, n)
    log_k = log_norm - 0.5 * sq
    if in_log:
        return special.logsumexp(log_k + jnp.log(weights)[None, :], axis=1)
    return jnp.sum(jnp.exp(log_k) * weights[None, :], axis=1)
