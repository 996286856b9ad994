"""``functrans.scipy.stats``: probability distributions (as ``jax.scipy.stats``).

Each distribution is a module of functions (``logpdf``, ``pdf``, ``cdf``, ``logcdf``,
``sf``, ``logsf``, ``ppf``, ``isf``; ``logpmf``/``pmf`` for discrete ones) taking SciPy's
parameters (``loc``, ``scale``, shapes) with SciPy's defaults::

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import norm
    >>> norm.logpdf(jnp.float32(0.0))
    Array(-0.9189385, dtype=float32)
"""
from functrans.scipy.stats import (bernoulli, beta, cauchy, chi2, expon, gamma, laplace,  # noqa: F401
                                   logistic, multivariate_normal, norm, poisson, t, truncnorm,
                                   uniform)

__all__ = ["bernoulli", "beta", "cauchy", "chi2", "expon", "gamma", "laplace", "logistic",
           "multivariate_normal", "norm", "poisson", "t", "truncnorm", "uniform"]
