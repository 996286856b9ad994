"""Indexing: ``x[idx]`` and ``x.at[idx].op(v)`` lowered to slicing, gather and scatter."""
from __future__ import annotations


def getitem(x, idx, mode=None, fill_value=None):
    raise NotImplementedError("indexing is not implemented yet")


def scatter_update(x, idx, values, op, mode=None):
    raise NotImplementedError("indexed updates are not implemented yet")
