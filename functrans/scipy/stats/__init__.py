"""``functrans.scipy.stats``: probability distributions (as ``jax.scipy.stats``).

Each distribution is a module of functions (``logpdf``, ``pdf``, ``cdf``, ``logcdf``,
``sf``, ``logsf``, ``ppf``, ``isf``; ``logpmf``/``pmf`` for discrete ones) taking SciPy's
parameters (``loc``, ``scale``, shapes) with SciPy's defaults::

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import norm
    >>> norm.logpdf(jnp.float32(0.0))
    Array(-0.9189385, dtype=float32)
"""
from functrans.scipy.stats import (bernoulli, beta, betabinom, binom, cauchy, chi2,  # noqa: F401
                                   dirichlet, expon, gamma, gennorm, geom, gumbel_l, gumbel_r,
                                   laplace, logistic, multinomial, multivariate_normal, nbinom,
                                   norm, pareto, poisson, t, truncnorm, uniform, vonmises,
                                   wrapcauchy)
from functrans.scipy.stats._descriptive import ModeResult, mode, rankdata, sem  # noqa: F401
from functrans.scipy.stats._kde import gaussian_kde  # noqa: F401

__all__ = ["bernoulli", "beta", "betabinom", "binom", "cauchy", "chi2", "dirichlet", "expon",
           "gamma", "gennorm", "geom", "gumbel_l", "gumbel_r", "laplace", "logistic",
           "multinomial", "multivariate_normal", "nbinom", "norm", "pareto", "poisson", "t",
           "truncnorm", "uniform", "vonmises", "wrapcauchy", "gaussian_kde", "mode", "rankdata",
           "sem"]
