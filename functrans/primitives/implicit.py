"""Operations defined by an equation rather than a formula: roots and linear solves whose
derivatives come from implicit differentiation.

* :func:`custom_root` returns ``solve(f, initial_guess)`` and differentiates it through the
  implicit function theorem: at a root ``f(x*, θ) = 0``, so
  ``dx* = -(∂f/∂x)⁻¹ (∂f/∂θ dθ)``, where the inverse is applied by the user's
  ``tangent_solve``. The solver itself is never differentiated.
* :func:`custom_linear_solve` returns ``solve(matvec, b)``; ``x = A⁻¹ b`` gives
  ``dx = A⁻¹ (db - dA x)`` (forward mode through ``solve``) and the transpose
  ``b̄ = A⁻ᵀ x̄`` (reverse mode through ``transpose_solve``). Because reverse mode must
  transpose the solve without looking inside it, this one is a primitive, ``linear_solve``,
  whose operands are the closed-over values of the user's functions followed by ``b``.

The user's functions are staged to jaxprs first and the values they close over become
explicit operands, so derivatives with respect to those values (the matrix entries inside
``matvec``, the parameters inside ``f``) flow through these rules, also under ``jit``.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from functrans import core, tree_util
from functrans.core import ClosedJaxpr, Primitive, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters.staging import closed_over_consts_as_args, trace_to_jaxpr_dynamic
from functrans.primitives import elementwise, structural
from functrans.primitives.custom_calls import custom_jvp_call_p

__all__ = ["custom_linear_solve", "custom_root"]


# =============================================================================================
# Shared helpers: user functions staged with their closed-over values made explicit
# =============================================================================================


def _closure_convert(fun: Callable, in_avals) -> tuple[ClosedJaxpr, list]:
    """Stage ``fun`` (flat in, flat out) to a jaxpr whose closed-over values are leading
    inputs; returns the jaxpr and those values (possibly tracers of enclosing transforms)."""
    jaxpr, consts = trace_to_jaxpr_dynamic(fun, list(in_avals))
    return closed_over_consts_as_args(ClosedJaxpr(jaxpr, consts))


def _eval(closed: ClosedJaxpr, *args) -> list:
    return core.eval_jaxpr(closed.jaxpr, closed.consts, *args)


def _tree_checked(name: str, what: str, out, expected_tree, expected_avals):
    """The leaves of ``out``, after checking it has the structure and types of the input."""
    leaves, tree = tree_util.tree_flatten(out)
    if tree != expected_tree:
        raise TypeError(f"{name}: {what} must return the same structure as its input "
                        f"({expected_tree}), got {tree}")
    for leaf, aval in zip(leaves, expected_avals):
        got = get_aval(leaf)
        if got.shape != aval.shape or got.dtype != aval.dtype:
            raise TypeError(f"{name}: {what} returned {got.str_short()} where "
                            f"{aval.str_short()} was expected")
    return leaves


def _split(seq, lengths):
    out, start = [], 0
    for n in lengths:
        out.append(list(seq[start:start + n]))
        start += n
    out.append(list(seq[start:]))
    return out


def _tangent_or_zero(t, x):
    """A tangent as :func:`ad.jvp_flat` takes it: symbolic zero where there is nothing."""
    if isinstance(t, ad.Zero) or ad.tangent_aval(get_aval(x)).dtype != get_aval(x).dtype:
        return ad.Zero(ad.tangent_aval(get_aval(x)))
    return t


def _zero_tangents(values):
    return [ad.zeros_like_aval(ad.tangent_aval(get_aval(v))) for v in values]


# =============================================================================================
# custom_root
# =============================================================================================


def custom_root(f: Callable, initial_guess, solve: Callable, tangent_solve: Callable,
                has_aux: bool = False):
    """Find a root of ``f`` with ``solve(f, initial_guess)``, differentiated implicitly.

    Derivatives with respect to values ``f`` closes over treat the result as the exact root
    ``x*`` of ``f`` (``f(x*) = 0``): the tangent is ``-tangent_solve(g, ∂f/∂θ · dθ)`` where
    ``g`` is ``f`` linearized in ``x`` at ``x*``. ``tangent_solve(g, y)`` must return ``x``
    with ``g(x) = y`` (for a scalar, ``lambda g, y: y / g(1.0)``). Nothing is differentiated
    through ``solve`` or ``initial_guess``. With ``has_aux``, ``solve`` returns
    ``(root, aux)`` and so does this function; ``aux`` has zero derivative.

    Example::

        def sqrt(a):
            newton = lambda f, x: lax.fori_loop(
                0, 20, lambda _, x: x - f(x) / grad(f)(x), x)
            return lax.custom_root(lambda x: x * x - a, 1.0, newton,
                                   lambda g, y: y / g(1.0))
        grad(sqrt)(4.0)   # 0.25 = 1 / (2 sqrt(4))
    """
    guess_leaves, guess_tree = tree_util.tree_flatten(initial_guess)
    guess_leaves = [structural.as_array(x) for x in guess_leaves]
    guess_avals = [get_aval(x) for x in guess_leaves]
    tangent_avals = [ad.tangent_aval(a) for a in guess_avals]
    n = len(guess_leaves)

    def user_f(x):
        return f(x)

    def f_flat(*xs):
        return _tree_checked("custom_root", "f", f(tree_util.tree_unflatten(guess_tree, xs)),
                             guess_tree, guess_avals)

    aux_tree_cell = []

    def solve_flat(*xs):
        out = solve(user_f, tree_util.tree_unflatten(guess_tree, xs))
        if has_aux:
            out, aux = out
        else:
            aux = None
        root = _tree_checked("custom_root", "solve", out, guess_tree, guess_avals)
        aux_leaves, aux_tree = tree_util.tree_flatten(aux)
        aux_tree_cell.append(aux_tree)
        return root + [structural.as_array(a) for a in aux_leaves]

    def linearize_and_solve_flat(*args):
        x, rhs = tree_util.tree_unflatten(guess_tree, args[:n]), args[n:]
        _, f_linear = ad.linearize_tree(user_f, x)
        out = tangent_solve(f_linear, tree_util.tree_unflatten(guess_tree, rhs))
        return _tree_checked("custom_root", "tangent_solve", out, guess_tree, tangent_avals)

    f_jaxpr, f_consts = _closure_convert(f_flat, guess_avals)
    solve_jaxpr, solve_consts = _closure_convert(solve_flat, guess_avals)
    lin_jaxpr, lin_consts = _closure_convert(linearize_and_solve_flat,
                                             guess_avals + tangent_avals)
    aux_tree = aux_tree_cell[-1]
    lengths = (len(f_consts), len(solve_consts), len(lin_consts))

    # The root is a call with a custom JVP (custom_jvp_call): the solver runs as it is, and
    # only the implicit-function rule below is differentiated.
    def root_fun(*args):
        _, s_consts, _, guess = _split(args, lengths)
        return _eval(solve_jaxpr, *s_consts, *guess)

    def root_call(*args):
        return custom_jvp_call_p.bind_call(root_fun, root_jvp, list(args), {})

    def root_jvp(primals, tangents):
        # every tangent arrives as a value, symbolic zeros instantiated (as custom_jvp's
        # rules receive them)
        tangents = [ad.instantiate_zeros(t) for t in tangents]
        outs = root_call(*primals)
        root, aux = list(outs[:n]), list(outs[n:])
        fc, _, lc, _ = _split(primals, lengths)
        fc_dot = [_tangent_or_zero(t, c) for t, c in zip(tangents[:lengths[0]], fc)]
        # ∂f/∂θ · dθ at the root: f's jvp in its closed-over values with x held at x*
        _, rhs = ad.jvp_flat(lambda *c: _eval(f_jaxpr, *c, *root), fc, fc_dot)
        rhs = [ad.instantiate_zeros(t) for t in rhs]
        root_dot = _eval(lin_jaxpr, *lc, *root, *rhs)
        root_dot = [elementwise.neg(t) for t in root_dot]
        return list(outs), root_dot + _zero_tangents(aux)

    outs = root_call(*f_consts, *solve_consts, *lin_consts, *guess_leaves)
    root = tree_util.tree_unflatten(guess_tree, list(outs[:n]))
    if has_aux:
        return root, tree_util.tree_unflatten(aux_tree, list(outs[n:]))
    return root


# =============================================================================================
# custom_linear_solve: the linear_solve primitive
# =============================================================================================


class LinearSolveJaxprs(NamedTuple):
    """The user's functions, each staged with its closed-over values as leading inputs:
    ``matvec(x) = A x``, ``vecmat(y) = Aᵀ y``, ``solve(b) = A⁻¹ b (, aux)``,
    ``transpose_solve(b) = A⁻ᵀ b (, aux)``. ``vecmat`` and ``transpose_solve`` are None
    when no transpose solve was given (reverse mode is then unavailable)."""
    matvec: ClosedJaxpr
    vecmat: ClosedJaxpr | None
    solve: ClosedJaxpr
    transpose_solve: ClosedJaxpr | None


linear_solve_p = Primitive("linear_solve", multiple_results=True)


@linear_solve_p.def_abstract_eval
def _linear_solve_abstract_eval(*avals, const_lengths, jaxprs):
    b_avals = avals[sum(const_lengths):]
    outs = jaxprs.solve.out_avals
    for x, b in zip(outs, b_avals):
        if x.shape != b.shape or x.dtype != b.dtype:
            raise TypeError(f"linear_solve: solve returned {x.str_short()} for a right-hand "
                            f"side {b.str_short()}; they must have the same type")
    return list(outs)


@linear_solve_p.def_impl
def _linear_solve_impl(*args, const_lengths, jaxprs):
    _, _, solve_consts, _, b = _split(args, const_lengths)
    closed = jaxprs.solve
    return core.eval_jaxpr_numpy(closed.jaxpr, [core.to_numpy(c) for c in closed.consts],
                            list(solve_consts) + list(b))


def _linear_solve_jvp(primals, tangents, *, const_lengths, jaxprs):
    # x = A⁻¹ b  ⇒  dx = A⁻¹ (db - dA x); the tangents of the solvers' own closed-over values
    # do not matter, since a correct solver's answer depends on A and b only.
    outs = linear_solve_p.bind(*primals, const_lengths=const_lengths, jaxprs=jaxprs)
    matvec_consts = _split(primals, const_lengths)[0]
    matvec_dots = _split(tangents, const_lengths)[0]
    b_dot = _split(tangents, const_lengths)[4]
    n = len(b_dot)
    x, aux = outs[:n], outs[n:]
    rhs = list(b_dot)
    dots = [_tangent_or_zero(t, c) for t, c in zip(matvec_dots, matvec_consts)]
    if not all(isinstance(t, ad.Zero) for t in dots):
        _, dA_x = ad.jvp_flat(lambda *c: _eval(jaxprs.matvec, *c, *x), matvec_consts, dots)
        rhs = [r if isinstance(d, ad.Zero) else
               (elementwise.neg(d) if isinstance(r, ad.Zero) else elementwise.sub(r, d))
               for r, d in zip(rhs, dA_x)]
    if all(isinstance(r, ad.Zero) for r in rhs):
        x_dot = [ad.Zero(ad.tangent_aval(get_aval(v))) for v in x]
    else:
        consts = primals[:sum(const_lengths)]
        x_dot = linear_solve_p.bind(*consts, *[ad.instantiate_zeros(r) for r in rhs],
                                    const_lengths=const_lengths, jaxprs=jaxprs)[:n]
    return outs, list(x_dot) + [ad.Zero(ad.tangent_aval(get_aval(a))) for a in aux]


def _linear_solve_transpose(cts, *args, const_lengths, jaxprs):
    if jaxprs.transpose_solve is None:
        raise TypeError("custom_linear_solve: reverse-mode differentiation needs "
                        "transpose_solve (or symmetric=True)")
    num_consts = sum(const_lengths)
    if any(ad.is_undefined_primal(c) for c in args[:num_consts]):
        raise NotImplementedError("custom_linear_solve: transposing with respect to the "
                                  "values matvec or solve close over is not supported; it is "
                                  "linear in b only")
    matvec_c, vecmat_c, solve_c, tsolve_c, b = _split(args, const_lengths)
    n = len(b)
    cts_x = [ad.instantiate_zeros(ct) for ct in cts[:n]]
    if all(isinstance(ct, ad.Zero) for ct in cts[:n]):
        return [None] * num_consts + [ad.Zero(a.aval) for a in b]
    # b̄ = A⁻ᵀ x̄: the same primitive with the roles of A and Aᵀ exchanged
    swapped = LinearSolveJaxprs(jaxprs.vecmat, jaxprs.matvec, jaxprs.transpose_solve,
                                jaxprs.solve)
    lengths = (const_lengths[1], const_lengths[0], const_lengths[3], const_lengths[2])
    ct_b = linear_solve_p.bind(*vecmat_c, *matvec_c, *tsolve_c, *solve_c, *cts_x,
                               const_lengths=lengths, jaxprs=swapped)[:n]
    return [None] * num_consts + list(ct_b)


def _linear_solve_batch(vals, dims, *, const_lengths, jaxprs):
    # Every batched operand goes to axis 0 and the right-hand side (so the solution) is
    # batched whenever anything is: a batched matrix makes every solution differ.
    size = batching.batch_size_of(vals, dims)
    vals = [batching.moveaxis(v, d, 0) if d is not None else v for v, d in zip(vals, dims)]
    dims = [0 if d is not None else None for d in dims]
    groups = _split(list(zip(vals, dims)), const_lengths)
    b = [batching.bdim_at_front(v, d, size) for v, d in groups[4]]
    n = len(b)

    def batch(closed, consts):
        if closed is None:
            return None
        batched, _ = batching.batch_jaxpr(closed, size, [d for _, d in consts] + [0] * n, True)
        return batched

    new = LinearSolveJaxprs(*(batch(j, g) for j, g in zip(jaxprs, groups[:4])))
    consts = [v for g in groups[:4] for v, _ in g]
    outs = linear_solve_p.bind(*consts, *b, const_lengths=const_lengths, jaxprs=new)
    return outs, [0] * len(outs)


linear_solve_p.jvp = _linear_solve_jvp
linear_solve_p.transpose = _linear_solve_transpose
linear_solve_p.batch = _linear_solve_batch


def custom_linear_solve(matvec: Callable, b, solve: Callable, transpose_solve=None,
                        symmetric: bool = False, has_aux: bool = False):
    """Solve ``matvec(x) = b`` with ``solve(matvec, b)``, with derivatives by implicit
    differentiation rather than through the solver's iterations.

    ``matvec`` must be linear; ``b`` may be a pytree of arrays (the solution has its
    structure). Forward mode solves ``A dx = db - dA x`` with ``solve``; reverse mode solves
    ``Aᵀ b̄ = x̄`` with ``transpose_solve(vecmat, x̄)``, or with ``solve`` when
    ``symmetric``. With ``has_aux`` the solvers return ``(x, aux)`` and so does this.

    Example::

        a = jnp.array([[4.0, 1.0], [1.0, 3.0]])
        x = lax.custom_linear_solve(lambda v: a @ v, jnp.array([1.0, 2.0]),
                                    lambda mv, b: jnp.linalg.solve(a, b), symmetric=True)
    """
    b_leaves, b_tree = tree_util.tree_flatten(b)
    b_leaves = [structural.as_array(x) for x in b_leaves]
    b_avals = [get_aval(x) for x in b_leaves]

    def tree(xs):
        return tree_util.tree_unflatten(b_tree, list(xs))

    def matvec_flat(*xs):
        return _tree_checked("custom_linear_solve", "matvec", matvec(tree(xs)), b_tree, b_avals)

    def vecmat(y):
        # matvec is linear, so its transpose is its VJP at any point (zero here)
        zeros = tree([ad.zeros_like_aval(a) for a in b_avals])
        _, pullback = ad.vjp_tree(matvec, zeros)
        return pullback(y)[0]

    def solver_flat(solver, operator, what):
        def fun(*bs):
            out = solver(operator, tree(bs))
            aux_leaves = []
            if has_aux:
                out, aux = out
                aux_leaves = [structural.as_array(a) for a in tree_util.tree_leaves(aux)]
                aux_trees.append(tree_util.tree_structure(aux))
            return _tree_checked("custom_linear_solve", what, out, b_tree, b_avals) + aux_leaves
        return fun

    aux_trees: list = []
    matvec_jaxpr, matvec_consts = _closure_convert(matvec_flat, b_avals)
    solve_jaxpr, solve_consts = _closure_convert(solver_flat(solve, matvec, "solve"), b_avals)
    solve_aux_tree = aux_trees[-1] if has_aux else None
    if symmetric:
        vecmat_jaxpr, vecmat_consts = matvec_jaxpr, matvec_consts
        tsolve_jaxpr, tsolve_consts = solve_jaxpr, solve_consts
    elif transpose_solve is not None:
        vecmat_jaxpr, vecmat_consts = _closure_convert(
            lambda *ys: _tree_checked("custom_linear_solve", "vecmat", vecmat(tree(ys)),
                                      b_tree, b_avals), b_avals)
        tsolve_jaxpr, tsolve_consts = _closure_convert(
            solver_flat(transpose_solve, vecmat, "transpose_solve"), b_avals)
    else:
        vecmat_jaxpr = tsolve_jaxpr = None
        vecmat_consts, tsolve_consts = [], []
    jaxprs = LinearSolveJaxprs(matvec_jaxpr, vecmat_jaxpr, solve_jaxpr, tsolve_jaxpr)
    const_lengths = (len(matvec_consts), len(vecmat_consts), len(solve_consts),
                     len(tsolve_consts))
    outs = linear_solve_p.bind(*matvec_consts, *vecmat_consts, *solve_consts, *tsolve_consts,
                               *b_leaves, const_lengths=const_lengths, jaxprs=jaxprs)
    x = tree(outs[:len(b_leaves)])
    if has_aux:
        return x, tree_util.tree_unflatten(solve_aux_tree, list(outs[len(b_leaves):]))
    return x
