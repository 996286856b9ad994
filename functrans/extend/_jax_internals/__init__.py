"""What JAX libraries import from JAX's private ``jax._src`` package, when they run on
functrans (``functrans.install_as_jax``): ``jax._src.X`` is this package's ``X`` unless
``functrans._as_jax`` maps it to a functrans module of its own (``jax._src.core`` is
``functrans.extend.core``, ``jax._src.dtypes`` is ``functrans.dtypes``, ...).

Only what those libraries use is here, each as a real implementation over functrans.
"""
