"""Products and contractions: matmul, dot, vdot, inner, outer, tensordot, einsum, kron,
cross. Each contraction is one ``dot_general``; einsum contracts its operands pairwise,
greedily picking the pair whose result is smallest.
"""
from __future__ import annotations

import builtins
import functools
import operator
import string

import numpy as np

from functrans import _dtypes
from functrans._array import sharding_layer
from functrans.core import get_aval
from functrans.numpy._promotion import (broadcast_shapes, broadcast_to_shape, canonicalize_axis,
                                        check_arraylike, lax_fn, promote_dtypes, to_array)
from functrans.primitives import elementwise as lax
from functrans.primitives import reductions as lax_reductions
from functrans.primitives import structural
from functrans.numpy._shape import (broadcast_arrays, diagonal, moveaxis, ravel, slice_along_axis,
                                    stack)
from functrans.numpy._ufuncs import conjugate, multiply, subtract
from functrans.numpy._creation import asarray
from functrans.numpy._ufuncs import conj


def _takes_out_sharding(fn):
    """Add JAX's ``out_sharding=`` keyword: the result is split as it says."""
    @functools.wraps(fn)
    def wrapped(*args, out_sharding=None, **kwargs):
        out = fn(*args, **kwargs)
        if out_sharding is None:
            return out
        return sharding_layer.constrain(out, out_sharding)
    return wrapped


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """``lax.dot_general`` on promoted operands; booleans are contracted as integers and
    the result turned back into booleans (any true product)."""
    lhs, rhs = promote_dtypes(lhs, rhs)
    dtype = get_aval(lhs).dtype
    if _dtypes.is_bool(dtype):
        lhs = lax.convert_element_type(lhs, _dtypes.int32)
        rhs = lax.convert_element_type(rhs, _dtypes.int32)
        out = lax_fn("dot_general")(lhs, rhs, dimension_numbers, precision=precision)
        return lax.ne(out, lax._weak_full(0, get_aval(out)))
    if preferred_element_type is not None:
        preferred_element_type = _dtypes.canonicalize_dtype(preferred_element_type)
    return lax_fn("dot_general")(lhs, rhs, dimension_numbers, precision=precision,
                                 preferred_element_type=preferred_element_type)


@_takes_out_sharding
def matmul(a, b, *, precision=None, preferred_element_type=None):
    """Matrix product with NumPy's ``@`` rules: 1-D operands are promoted to matrices and
    the added axis removed; leading (batch) axes broadcast.

        >>> matmul(ones((2, 3)), ones((3, 4))).shape
        (2, 4)
    """
    check_arraylike("matmul", a, b)
    a, b = promote_dtypes(a, b)
    a_aval, b_aval = get_aval(a), get_aval(b)
    if a_aval.ndim == 0 or b_aval.ndim == 0:
        raise ValueError("matmul: operands must have at least one dimension (use multiply "
                         "for scalars)")
    a_vec, b_vec = a_aval.ndim == 1, b_aval.ndim == 1
    if a_vec:
        a = structural.reshape(a, (1,) + a_aval.shape)
    if b_vec:
        b = structural.reshape(b, b_aval.shape + (1,))
    a_shape, b_shape = get_aval(a).shape, get_aval(b).shape
    if a_shape[-1] != b_shape[-2]:
        raise TypeError(f"dot_general requires contracting dimensions to have the same shape, "
                        f"got ({a_shape[-1]},) and ({b_shape[-2]},): matmul of shapes "
                        f"{a_aval.shape} and {b_aval.shape}")
    a, b, dims, perm, batch = _matmul_dimensions(a, b, a_shape, b_shape)
    out = dot_general(a, b, dims, precision, preferred_element_type)
    if perm != tuple(range(len(perm))):
        out = structural.transpose(out, perm)
    nb = len(batch)
    if a_vec and b_vec:
        return structural.reshape(out, batch)
    if a_vec:
        return structural.squeeze(out, (nb,))
    if b_vec:
        return structural.squeeze(out, (nb + 1,))
    return out


def _matmul_dimensions(a, b, a_shape, b_shape):
    """How ``a @ b`` is one ``dot_general`` without copying an operand across the other's
    batch: a leading axis both operands have (same size) is a batch axis of the product; an
    axis only one operand has (absent or of size 1 in the other) stays a free axis of that
    operand, so ``(batch, seq, d) @ (d, n)`` is a single (batch * seq, d) x (d, n) product
    rather than ``batch`` products against copies of the weights. Returns the squeezed
    operands, the dimension numbers, the permutation that puts the result in NumPy's order,
    and the broadcast batch shape."""
    a_batch, b_batch = a_shape[:-2], b_shape[:-2]
    n = max(len(a_batch), len(b_batch))
    a_batch = (None,) * (n - len(a_batch)) + tuple(a_batch)
    b_batch = (None,) * (n - len(b_batch)) + tuple(b_batch)
    # size-1 axes that broadcast, squeezed away (numbered as the result's batch axes)
    a_dropped, b_dropped = [], []
    kinds = []  # per result batch axis: "batch", "a" or "b"
    for i, (x, y) in enumerate(zip(a_batch, b_batch)):
        if x is not None and y is not None and x == y:
            kinds.append("batch")
        elif y is None or y == 1:
            kinds.append("a")
            if y == 1:
                b_dropped.append(i)
        elif x is None or x == 1:
            kinds.append("b")
            if x == 1:
                a_dropped.append(i)
        else:
            raise ValueError(f"matmul: batch shapes {a_shape[:-2]} and {b_shape[:-2]} do not "
                             f"broadcast")
    # result axis i is axis i - offset of an operand (which lacks it when that is negative)
    a_offset, b_offset = n - (len(a_shape) - 2), n - (len(b_shape) - 2)
    if a_dropped:
        a = structural.squeeze(a, tuple(i - a_offset for i in a_dropped))
    if b_dropped:
        b = structural.squeeze(b, tuple(i - b_offset for i in b_dropped))
    # positions of the kept batch axes in the squeezed operands
    a_pos = [i for i in range(n) if a_batch[i] is not None and i not in a_dropped]
    b_pos = [i for i in range(n) if b_batch[i] is not None and i not in b_dropped]
    a_rank, b_rank = len(a_pos) + 2, len(b_pos) + 2
    dims = (((a_rank - 1,), (b_rank - 2,)),
            (tuple(a_pos.index(i) for i in range(n) if kinds[i] == "batch"),
             tuple(b_pos.index(i) for i in range(n) if kinds[i] == "batch")))
    # dot_general's result: batch axes, a's free axes (its batch-only axes, then rows),
    # then b's (its batch-only axes, then columns)
    order = ([i for i in range(n) if kinds[i] == "batch"] + [i for i in range(n) if kinds[i] == "a"]
             + ["rows"] + [i for i in range(n) if kinds[i] == "b"] + ["cols"])
    perm = tuple(order.index(i) for i in list(range(n)) + ["rows", "cols"])
    batch = broadcast_shapes(a_shape[:-2], b_shape[:-2])
    return a, b, dims, perm, batch


@_takes_out_sharding
def dot(a, b, *, precision=None, preferred_element_type=None):
    """NumPy's ``dot``: a sum product over the last axis of ``a`` and the second-to-last of
    ``b`` (the only axis of a 1-D ``b``); scalars multiply.

        >>> dot(array([1, 2]), array([3, 4]))
        Array(11, dtype=int32)
    """
    check_arraylike("dot", a, b)
    a, b = promote_dtypes(a, b)
    a_aval, b_aval = get_aval(a), get_aval(b)
    if a_aval.ndim == 0 or b_aval.ndim == 0:
        return multiply(a, b)
    b_axis = 0 if b_aval.ndim == 1 else b_aval.ndim - 2
    if a_aval.shape[-1] != b_aval.shape[b_axis]:
        raise TypeError(f"dot_general requires contracting dimensions to have the same shape, "
                        f"got ({a_aval.shape[-1]},) and ({b_aval.shape[b_axis]},): dot of "
                        f"shapes {a_aval.shape} and {b_aval.shape}")
    dims = (((a_aval.ndim - 1,), (b_axis,)), ((), ()))
    return dot_general(a, b, dims, precision, preferred_element_type)


def vdot(a, b, *, precision=None, preferred_element_type=None):
    """Dot product of the flattened arrays, conjugating the first."""
    a, b = promote_dtypes(a, b)
    return dot(conjugate(ravel(a)), ravel(b), precision=precision,
               preferred_element_type=preferred_element_type)


def vecdot(x1, x2, /, *, axis=-1, precision=None, preferred_element_type=None):
    """Dot product of vectors along ``axis`` (conjugating ``x1``), broadcasting the rest."""
    x1, x2 = promote_dtypes(x1, x2)
    x1 = moveaxis(x1, axis, -1)
    x2 = moveaxis(x2, axis, -1)
    return _vecdot(conjugate(x1), x2, precision, preferred_element_type)


def _vecdot(x1, x2, precision, preferred_element_type):
    s1, s2 = get_aval(x1).shape, get_aval(x2).shape
    if s1[-1] != s2[-1]:
        raise ValueError(f"vecdot: vector lengths differ: {s1} and {s2}")
    batch = broadcast_shapes(s1[:-1], s2[:-1])
    x1 = broadcast_to_shape(x1, batch + s1[-1:])
    x2 = broadcast_to_shape(x2, batch + s2[-1:])
    nb = len(batch)
    dims = (((nb,), (nb,)), (tuple(range(nb)), tuple(range(nb))))
    return dot_general(x1, x2, dims, precision, preferred_element_type)


def inner(a, b, *, precision=None, preferred_element_type=None):
    """Sum product over the last axes of ``a`` and ``b``."""
    check_arraylike("inner", a, b)
    a, b = promote_dtypes(a, b)
    a_aval, b_aval = get_aval(a), get_aval(b)
    if a_aval.ndim == 0 or b_aval.ndim == 0:
        return multiply(a, b)
    dims = (((a_aval.ndim - 1,), (b_aval.ndim - 1,)), ((), ()))
    return dot_general(a, b, dims, precision, preferred_element_type)


def outer(a, b, out=None):
    """Outer product of the flattened arrays: ``out[i, j] = a[i] * b[j]``."""
    a, b = ravel(to_array(a)), ravel(to_array(b))
    return multiply(structural.expand_dims(a, (1,)), structural.expand_dims(b, (0,)))


def tensordot(a, b, axes=2, *, precision=None, preferred_element_type=None):
    """Sum products over the given axes: ``axes=N`` pairs the last N axes of ``a`` with the
    first N of ``b``; a pair of sequences names them.

        >>> tensordot(ones((2, 3)), ones((3, 4)), axes=1).shape
        (2, 4)
    """
    check_arraylike("tensordot", a, b)
    a, b = promote_dtypes(a, b)
    na, nb = get_aval(a).ndim, get_aval(b).ndim
    if isinstance(axes, (int, np.integer)):
        axes = int(axes)
        if axes > builtins.min(na, nb) or axes < 0:
            raise ValueError(f"tensordot: axes={axes} is out of range for operands of rank "
                             f"{na} and {nb}")
        ax_a, ax_b = tuple(range(na - axes, na)), tuple(range(axes))
    else:
        ax_a, ax_b = axes
        ax_a = (ax_a,) if isinstance(ax_a, (int, np.integer)) else tuple(ax_a)
        ax_b = (ax_b,) if isinstance(ax_b, (int, np.integer)) else tuple(ax_b)
        if len(ax_a) != len(ax_b):
            raise ValueError("tensordot: the axes lists must have the same length")
        ax_a = tuple(canonicalize_axis(i, na) for i in ax_a)
        ax_b = tuple(canonicalize_axis(i, nb) for i in ax_b)
    return dot_general(a, b, ((ax_a, ax_b), ((), ())), precision, preferred_element_type)


def kron(a, b):
    """Kronecker product: blocks of ``b`` scaled by the elements of ``a``.

        >>> kron(eye(2), ones((2, 2))).shape
        (4, 4)
    """
    a, b = promote_dtypes(a, b)
    sa, sb = get_aval(a).shape, get_aval(b).shape
    nd = builtins.max(len(sa), len(sb))
    sa = (1,) * (nd - len(sa)) + sa
    sb = (1,) * (nd - len(sb)) + sb
    a = structural.reshape(a, tuple(x for s in sa for x in (s, 1)))
    b = structural.reshape(b, tuple(x for s in sb for x in (1, s)))
    return structural.reshape(multiply(a, b), tuple(x * y for x, y in zip(sa, sb)))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Cross product of 3-vectors (or the scalar z-component for 2-vectors) along the given
    axes, broadcasting the others."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = promote_dtypes(a, b)
    a = moveaxis(a, axisa, -1)
    b = moveaxis(b, axisb, -1)
    na, nb = get_aval(a).shape[-1], get_aval(b).shape[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError(f"cross: incompatible dimensions for cross product (dimension must "
                         f"be 2 or 3), got {na} and {nb}")

    def comp(x, i):
        n = get_aval(x).shape[-1]
        if i >= n:
            return None
        piece = slice_along_axis(x, get_aval(x).ndim - 1, i, i + 1)
        return structural.squeeze(piece, (get_aval(piece).ndim - 1,))

    a0, a1, a2 = (comp(a, i) for i in range(3))
    b0, b1, b2 = (comp(b, i) for i in range(3))
    if na == 2 and nb == 2:
        return subtract(multiply(a0, b1), multiply(a1, b0))

    def term(x, y, u, v):
        # x*y - u*v where a missing (2-D) component is zero
        first = multiply(x, y) if x is not None and y is not None else None
        second = multiply(u, v) if u is not None and v is not None else None
        if first is None:
            return lax.neg(second)
        return first if second is None else subtract(first, second)

    c0 = term(a1, b2, a2, b1)
    c1 = term(a2, b0, a0, b2)
    c2 = term(a0, b1, a1, b0)
    c0, c1, c2 = broadcast_arrays(c0, c1, c2)
    out = stack([c0, c1, c2], axis=-1)
    return moveaxis(out, -1, axisc)


# =============================================================================================
# einsum
# =============================================================================================

def _parse_einsum(subscripts: str, shapes):
    """Labels per operand and for the output, with each ``...`` expanded into labels of its
    own (aligned from the right, as broadcasting does)."""
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        inputs, output = subscripts.split("->")
        explicit = True
    else:
        inputs, output, explicit = subscripts, None, False
    terms = inputs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum: {len(terms)} operand subscripts but {len(shapes)} operands")
    ellipsis_ndim = 0
    parsed = []
    for term, shape in zip(terms, shapes):
        if "..." in term:
            before, after = term.split("...")
            n_ell = len(shape) - len(before) - len(after)
            if n_ell < 0:
                raise ValueError(f"einsum: subscripts {term!r} have more labels than the "
                                 f"operand's {len(shape)} dimensions")
            ellipsis_ndim = builtins.max(ellipsis_ndim, n_ell)
            parsed.append((list(before), n_ell, list(after)))
        else:
            if len(term) != len(shape):
                raise ValueError(f"einsum: subscripts {term!r} do not match an operand of "
                                 f"shape {tuple(shape)}")
            parsed.append((list(term), None, []))
    for before, _, after in parsed:
        for label in before + after:
            if label not in string.ascii_letters:
                raise ValueError(f"einsum: invalid subscript {label!r}")
    ell_labels = [("...", i) for i in range(ellipsis_ndim)]
    labels = []
    for before, n_ell, after in parsed:
        mid = [] if n_ell is None else ell_labels[ellipsis_ndim - n_ell:]
        labels.append(before + mid + after)
    if explicit:
        if "..." in output:
            before, after = output.split("...")
            out_labels = list(before) + ell_labels + list(after)
        else:
            out_labels = list(output)
    else:
        counts = {}
        for term in labels:
            for label in term:
                if not isinstance(label, tuple):
                    counts[label] = counts.get(label, 0) + 1
        out_labels = ell_labels + sorted(l for l, c in counts.items() if c == 1)
    all_in = {l for term in labels for l in term}
    for l in out_labels:
        if l not in all_in:
            raise ValueError(f"einsum: output subscript {l!r} does not appear in the inputs")
    if len(set(out_labels)) != len(out_labels):
        raise ValueError("einsum: output subscripts may not repeat")
    return labels, out_labels


def _sum_labels(x, labels, drop):
    axes = tuple(i for i, l in enumerate(labels) if l in drop)
    if not axes:
        return x, labels
    return lax_reductions.reduce_sum(x, axes), [l for l in labels if l not in drop]


def _sublists_to_subscripts(first, rest):
    """NumPy's other einsum form, ``einsum(a, [0, 1], b, [1, 2], [0, 2])``: operands each
    followed by a list of integer labels (``...`` allowed), then optionally the output's."""
    args = (first, *rest)
    output = None
    if len(args) % 2:  # an odd count: the last item is the output sublist
        output, args = args[-1], args[:-1]
    operands, sublists = list(args[0::2]), list(args[1::2])
    letters = string.ascii_letters

    def term(sublist):
        parts = []
        for label in sublist:
            if label is Ellipsis:
                parts.append("...")
            else:
                label = operator.index(label)
                if not 0 <= label < len(letters):
                    raise ValueError(f"einsum: subscript labels must be in [0, {len(letters)}), "
                                     f"got {label}")
                parts.append(letters[label])
        return "".join(parts)

    subscripts = ",".join(term(s) for s in sublists)
    if output is not None:
        subscripts += "->" + term(output)
    return subscripts, operands


@_takes_out_sharding
def einsum(subscripts, /, *operands, out=None, optimize="greedy", precision=None,
           preferred_element_type=None, _dot_general=None):
    """Einstein summation: ``einsum("ij,jk->ik", a, b)`` is a matrix product.

    Repeated labels within an operand take its diagonal; labels absent from the output are
    summed; ``...`` broadcasts. Operands are contracted two at a time, each contraction one
    ``dot_general``, choosing next the pair with the smallest result.

        >>> einsum("ij,j->i", ones((2, 3)), arange(3.0))
        Array([3., 3.], dtype=float32)
    """
    if out is not None:
        raise ValueError("einsum: the `out` argument is not supported")
    if not isinstance(subscripts, str):
        subscripts, operands = _sublists_to_subscripts(subscripts, operands)
    check_arraylike("einsum", *operands)
    operands = promote_dtypes(*operands)
    labels, out_labels = _parse_einsum(subscripts, [get_aval(o).shape for o in operands])
    terms = []
    for x, term in zip(operands, labels):
        term = list(term)
        # a label repeated within one operand selects that operand's diagonal
        while len(set(term)) != len(term):
            label = next(l for l in term if term.count(l) > 1)
            i = term.index(label)
            j = term.index(label, i + 1)
            x = diagonal(x, 0, i, j)
            term = [l for k, l in enumerate(term) if k not in (i, j)] + [label]
        terms.append((x, term))
    sizes = {}
    for x, term in terms:
        for l, s in zip(term, get_aval(x).shape):
            if sizes.get(l, 1) == 1:
                sizes[l] = s
            elif s not in (1, sizes[l]):
                raise ValueError(f"einsum: label {l!r} has sizes {sizes[l]} and {s}")
    # a length-1 axis facing a longer one broadcasts: drop it (summing one element)
    broadcast_terms = []
    for x, term in terms:
        shape = get_aval(x).shape
        drop = [i for i, (l, s) in enumerate(zip(term, shape)) if s == 1 and sizes[l] != 1]
        if drop:
            x = structural.squeeze(x, tuple(drop))
            term = [l for i, l in enumerate(term) if i not in drop]
        broadcast_terms.append((x, term))
    terms = broadcast_terms

    def labels_elsewhere(skip):
        found = set(out_labels)
        for k, (_, term) in enumerate(terms):
            if k not in skip:
                found.update(term)
        return found

    # labels only one operand has, and the output lacks, are summed before any contraction
    terms = [_sum_labels(x, term, set(term) - labels_elsewhere({k}))
             for k, (x, term) in enumerate(terms)]

    def result_labels(i, j):
        keep = labels_elsewhere({i, j})
        li, lj = terms[i][1], terms[j][1]
        shared = [l for l in li if l in lj]
        batch = [l for l in shared if l in keep]
        contract = [l for l in shared if l not in keep]
        free_i = [l for l in li if l not in shared]
        free_j = [l for l in lj if l not in shared]
        return batch, contract, free_i, free_j

    while len(terms) > 1:
        best = None
        for i in range(len(terms)):
            for j in range(i + 1, len(terms)):
                batch, _, free_i, free_j = result_labels(i, j)
                size = int(np.prod([sizes[l] for l in batch + free_i + free_j], dtype=np.int64))
                if best is None or size < best[0]:
                    best = (size, i, j)
        _, i, j = best
        batch, contract, free_i, free_j = result_labels(i, j)
        (x, lx), (y, ly) = terms[i], terms[j]
        dims = ((tuple(lx.index(l) for l in contract), tuple(ly.index(l) for l in contract)),
                (tuple(lx.index(l) for l in batch), tuple(ly.index(l) for l in batch)))
        if not contract and not batch and get_aval(x).ndim + get_aval(y).ndim == 0:
            z = lax.mul(x, y)
        else:
            z = (_dot_general or dot_general)(x, y, dims, precision, preferred_element_type)
        terms = [t for k, t in enumerate(terms) if k not in (i, j)]
        terms.append((z, batch + free_i + free_j))
    x, term = terms[0]
    x, term = _sum_labels(x, term, set(term) - set(out_labels))
    x = structural.transpose(x, tuple(term.index(l) for l in out_labels))
    if preferred_element_type is not None:
        x = lax.convert_element_type(x, preferred_element_type)
    return x


# =============================================================================================
# matvec, vecmat
# =============================================================================================

def matvec(x1, x2, /):
    """Batched matrix-vector product: ``x1`` of shape ``(..., m, n)`` times ``x2`` of shape
    ``(..., n)`` gives ``(..., m)`` (batch axes broadcast).

        >>> matvec(jnp.array([[1.0, 2.0], [3.0, 4.0]]), jnp.array([1.0, 1.0]))
        Array([3., 7.], dtype=float32)
    """
    x1, x2 = asarray(x1), asarray(x2)
    if x1.ndim < 2 or x2.ndim < 1:
        raise ValueError(f"jnp.matvec: needs a matrix (..., m, n) and a vector (..., n), got "
                         f"shapes {x1.shape} and {x2.shape}")
    if x1.shape[-1] != x2.shape[-1]:
        raise ValueError(f"jnp.matvec: the contracted sizes differ: x1 has shape {x1.shape} "
                         f"and x2 has shape {x2.shape}")
    return matmul(x1, x2[..., None])[..., 0]


def vecmat(x1, x2, /):
    """Batched vector-matrix product with the vector conjugated: ``conj(x1)`` of shape
    ``(..., n)`` times ``x2`` of shape ``(..., n, m)`` gives ``(..., m)``.

        >>> vecmat(jnp.array([1.0, 1.0]), jnp.array([[1.0, 2.0], [3.0, 4.0]]))
        Array([4., 6.], dtype=float32)
    """
    x1, x2 = asarray(x1), asarray(x2)
    if x1.ndim < 1 or x2.ndim < 2:
        raise ValueError(f"jnp.vecmat: needs a vector (..., n) and a matrix (..., n, m), got "
                         f"shapes {x1.shape} and {x2.shape}")
    if x1.shape[-1] != x2.shape[-2]:
        raise ValueError(f"jnp.vecmat: the contracted sizes differ: x1 has shape {x1.shape} "
                         f"and x2 has shape {x2.shape}")
    return matmul(conj(x1)[..., None, :], x2)[..., 0, :]


# =============================================================================================
# einsum_path
# =============================================================================================

def einsum_path(subscripts, *operands, optimize="greedy"):
    """The contraction order ``einsum`` would use, without computing anything: returns
    ``(path, description)`` as :func:`numpy.einsum_path` does (only operand shapes matter).

        >>> import functrans.numpy as jnp
        >>> path, _ = jnp.einsum_path("ij,jk,kl->il", jnp.ones((2, 3)), jnp.ones((3, 4)),
        ...                           jnp.ones((4, 5)))
        >>> path
        ['einsum_path', (1, 2), (0, 1)]
    """
    # zero-stride stand-ins: the path depends only on shapes, so nothing is allocated
    stand_ins = [np.broadcast_to(np.zeros((), dtype=np.float32), np.shape(op))
                 for op in operands]
    if optimize is True:
        optimize = "greedy"
    return np.einsum_path(subscripts, *stand_ins, optimize=optimize)
