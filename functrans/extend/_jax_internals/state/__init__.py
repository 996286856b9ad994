"""``jax._src.state``: mutable array references (see ``types``)."""
