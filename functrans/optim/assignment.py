"""``optim.assignment``: the linear assignment problem (match rows to columns at minimum
total cost), as optax's ``optax.assignment``, in ``lax`` loops so it jits and vmaps.

    >>> import functrans.numpy as jnp
    >>> from functrans.optim import assignment
    >>> cost = jnp.array([[4.0, 1.0, 3.0], [2.0, 0.0, 5.0], [3.0, 2.0, 2.0]])
    >>> rows, cols = assignment.hungarian_algorithm(cost)
    >>> rows, cols, float(cost[rows, cols].sum())
    (Array([1, 0, 2], dtype=int32), Array([0, 1, 2], dtype=int32), 5.0)
"""
from __future__ import annotations

import functools

from functrans import lax
from functrans import numpy as jnp
from functrans.tree_util import tree_map

__all__ = ["hungarian_algorithm", "base_hungarian_algorithm"]


def _empty():
    return jnp.zeros(0, int), jnp.zeros(0, int)


# =============================================================================================
# Hungarian method with potentials (Kuhn-Munkres, O(n^2 m))
# =============================================================================================

def _masked_argmin(array, mask):
    return jnp.argmin(jnp.where(mask, array, jnp.inf))


def hungarian_algorithm(cost_matrix):
    """The minimum-cost assignment of the rows of ``cost_matrix`` to its columns (each
    matched at most once; all of the smaller side is matched), by the Hungarian method
    with row and column potentials. Returns ``(row_indices, column_indices)``, with
    ``cost_matrix[row_indices, column_indices].sum()`` minimal.

        >>> import functrans.numpy as jnp
        >>> hungarian_algorithm(jnp.array([[1.0, 5.0], [0.0, 9.0], [3.0, 2.0]]))
        (Array([2, 1], dtype=int32), Array([1, 0], dtype=int32))
    """
    cost_matrix = jnp.asarray(cost_matrix)
    if cost_matrix.shape[0] == 0 or cost_matrix.shape[1] == 0:
        return _empty()
    # rows are added one at a time, so there must not be more rows than columns
    transpose = cost_matrix.shape[0] > cost_matrix.shape[1]
    if transpose:
        cost_matrix = cost_matrix.T
    rows, cols = cost_matrix.shape

    def add_row(carry, row):
        # parent[c] is the (1-based) row matched to column c; column 0 is a virtual start
        u, v, parent = carry
        parent = parent.at[0].set(row + 1)

        def grow(state):
            # Dijkstra-like step: extend the alternating tree by the cheapest free column
            u, v, used, minv, path, col = state
            used = used.at[col].set(True)
            free = ~used[1:]
            current = parent[col]
            reduced = cost_matrix[current - 1, :] - u[current] - v[1:]
            reduced = jnp.where(free, reduced, jnp.inf)
            path = jnp.where(reduced < minv, col, path)
            minv = jnp.where(reduced < minv, reduced, minv)
            col = _masked_argmin(minv, free) + 1
            delta = minv.min(where=free, initial=jnp.inf)
            # rows in the tree gain delta; unused ones go to the spare slot rows + 1
            u = u.at[jnp.where(used, parent, rows + 1)].add(delta)
            v = jnp.where(used, v - delta, v)
            minv = jnp.where(free, minv - delta, minv)
            return u, v, used, minv, path, col

        state = (u, v, jnp.zeros(cols + 1, bool), jnp.full(cols, jnp.inf),
                 jnp.zeros(cols, int), 0)
        u, v, _, _, path, col = lax.while_loop(lambda s: parent[s[-1]] != 0, grow, state)

        def flip(state):
            # walk back along the path, re-matching each column to its predecessor's row
            parent, old_col = state
            new_col = path[old_col - 1]
            return parent.at[old_col].set(parent[new_col]), new_col

        parent, _ = lax.while_loop(lambda s: s[1] != 0, flip, (parent, col))
        return (u, v, parent), None

    carry = (jnp.zeros(rows + 2), jnp.zeros(cols + 1), jnp.zeros(cols + 1, int))
    (_, _, parent), _ = lax.scan(add_row, carry, jnp.arange(rows))
    if rows == cols:
        parent, indices = parent[1:], jnp.arange(rows)
    else:
        parent, indices = lax.top_k(parent[1:], rows)   # the matched columns, unmatched are 0
    parent = parent - 1
    if transpose:
        return indices, parent
    return parent, indices


# =============================================================================================
# Shortest augmenting paths (Jonker-Volgenant style, as scipy's linear_sum_assignment)
# =============================================================================================

def _relax_column(it, val):
    """Relax the path cost of the ``it``-th remaining column through row ``i``."""
    remaining, min_value, costs, i, u, v, shortest_path_costs, path, lowest, row4col, index = val
    j = remaining[it]
    r = min_value + costs[i, j] - u[i] - v[j]
    path = path.at[j].set(jnp.where(r < shortest_path_costs[j], i, path[j]))
    shortest_path_costs = shortest_path_costs.at[j].min(r)
    # prefer the cheapest column, and among equals a free one
    better = (shortest_path_costs[j] < lowest) | ((shortest_path_costs[j] == lowest)
                                                  & (row4col[j] == -1))
    index = jnp.where(better, it, index)
    lowest = jnp.minimum(lowest, shortest_path_costs[j])
    return remaining, min_value, costs, i, u, v, shortest_path_costs, path, lowest, row4col, index


def _visit_column(val):
    """Move the chosen column out of ``remaining``; a free column ends the path (sink)."""
    remaining, index, row4col, sink, i, sc, num_remaining = val
    j = remaining[index]
    free = row4col[j] == -1
    sink = jnp.where(free, j, sink)
    i = jnp.where(free, i, row4col[j])
    sc = sc.at[j].set(True)
    num_remaining = num_remaining - 1
    remaining = remaining.at[index].set(remaining[num_remaining])
    return remaining, sink, i, sc, num_remaining


def _augmenting_path_step(val):
    (costs, u, v, path, row4col, current_row, min_value, num_remaining, remaining, sr, sc,
     shortest_path_costs, sink) = val
    sr = sr.at[current_row].set(True)
    init = (remaining, min_value, costs, current_row, u, v, shortest_path_costs, path, jnp.inf,
            row4col, -1)
    (remaining, _, costs, current_row, u, v, shortest_path_costs, path, lowest, row4col,
     index) = lax.fori_loop(0, num_remaining, _relax_column, init)
    min_value = lowest
    sink = jnp.where(min_value == jnp.inf, -1, sink)   # infeasible: stop with no sink
    state = (remaining, index, row4col, sink, current_row, sc, num_remaining)
    remaining, sink, current_row, sc, num_remaining = tree_map(
        functools.partial(jnp.where, sink == -1), _visit_column(state),
        (remaining, sink, current_row, sc, num_remaining))
    return (costs, u, v, path, row4col, current_row, min_value, num_remaining, remaining, sr,
            sc, shortest_path_costs, sink)


def _find_augmenting_path(costs, u, v, path, row4col, current_row):
    init = (costs, u, v, path, row4col, current_row, 0, costs.shape[1],
            jnp.arange(costs.shape[1])[::-1], jnp.zeros(costs.shape[0], bool),
            jnp.zeros(costs.shape[1], bool), jnp.full(costs.shape[1], jnp.inf), -1)
    out = lax.while_loop(lambda val: val[-1] == -1, _augmenting_path_step, init)
    _, _, _, path, _, _, min_value, _, _, sr, sc, shortest_path_costs, sink = out
    return sink, min_value, sr, sc, shortest_path_costs, path


def _assign_row(current_row, val):
    costs, u, v, path, row4col, col4row = val
    sink, min_value, sr, sc, shortest_path_costs, path = _find_augmenting_path(
        costs, u, v, path, row4col, current_row)
    # update the dual variables so reduced costs stay non-negative
    u = u.at[current_row].add(min_value)
    others = sr & (jnp.arange(costs.shape[0]) != current_row)
    u = jnp.where(others, u + min_value - shortest_path_costs[col4row], u)
    v = jnp.where(sc, v + shortest_path_costs - min_value, v)

    def augment(carry):
        sink, row4col, col4row, _ = carry
        i = path[sink]
        row4col = row4col.at[sink].set(i)
        col4row, sink = col4row.at[i].set(sink), col4row[i]
        return sink, row4col, col4row, i == current_row

    _, row4col, col4row, _ = lax.while_loop(lambda val: ~val[-1], augment,
                                            (sink, row4col, col4row, False))
    return costs, u, v, path, row4col, col4row


def base_hungarian_algorithm(cost_matrix):
    """The minimum-cost assignment (see :func:`hungarian_algorithm`) by successive shortest
    augmenting paths, the algorithm of ``scipy.optimize.linear_sum_assignment``.

        >>> import functrans.numpy as jnp
        >>> base_hungarian_algorithm(jnp.array([[1.0, 5.0], [0.0, 9.0], [3.0, 2.0]]))
        (Array([1, 2], dtype=int32, weak_type=True), Array([0, 1], dtype=int32))
    """
    cost_matrix = jnp.asarray(cost_matrix)
    if cost_matrix.shape[0] == 0 or cost_matrix.shape[1] == 0:
        return _empty()
    transpose = cost_matrix.shape[1] < cost_matrix.shape[0]
    if transpose:
        cost_matrix = cost_matrix.T
    cost_matrix = cost_matrix.astype(float)
    rows, cols = cost_matrix.shape
    init = (cost_matrix, jnp.zeros(rows, cost_matrix.dtype), jnp.zeros(cols, cost_matrix.dtype),
            jnp.full(cols, -1), jnp.full(cols, -1), jnp.full(rows, -1))
    _, _, _, _, _, col4row = lax.fori_loop(0, rows, _assign_row, init)
    if transpose:
        order = col4row.argsort()
        return col4row[order], order
    return jnp.arange(rows), col4row
