"""``cholesky`` and ``triangular_solve`` through LAPACK and BLAS, called from generated code.

Both are steps of their own: copy the operand into the output, then one library call per
matrix of the batch (``potrf``, ``trsm``: SciPy's LAPACK/BLAS, registered as
``ft_spotrf``... like the GEMMs). Our matrices are row-major, so LAPACK and BLAS, which are
column-major, see every matrix transposed:

* ``cholesky``: the row-major lower triangle is LAPACK's upper one, so ``potrf('U')``
  factors it as ``Uᵀ U``, which read row-major is ``L Lᵀ`` with ``L`` in the lower
  triangle; the other triangle is then zeroed. A matrix that is not positive definite
  becomes NaNs, as in the reference.
* ``triangular_solve``: solving ``op(A) X = B`` row-major is solving ``Xᵀ op(A)ᵀ = Bᵀ``
  column-major, so the side flips, the triangle flips, and ``op(A)ᵀ`` is A's column-major
  view itself (or its transpose).

Complex, float16 and bfloat16 matrices stay in NumPy.

    >>> step = lower_linalg(fallback_step)     # doctest: +SKIP
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from functrans.backends.compiler.fusion import Buffer, FallbackStep, Step, unique_buffers
from functrans.backends.llvm.ir_builder import I8, I8P, I32, I64, emits
from functrans.primitives import linalg

I32P = I32.as_pointer()
F32, F64 = ir.FloatType(), ir.DoubleType()
PRIMITIVES = (linalg.cholesky_p, linalg.triangular_solve_p)


def _float_type(dtype):
    return F32 if np.dtype(dtype) == np.float32 else F64


def _prefix(dtype):
    return "s" if np.dtype(dtype) == np.float32 else "d"


class _MatrixStep(Step):
    def reads(self):
        return unique_buffers(self.inputs)

    def writes(self):
        return [self.out]

    @staticmethod
    def by_reference(mb, b, ty, value):
        """A stack slot holding ``value``: Fortran takes every argument by reference."""
        slot = mb.entry_alloca(b, ty)
        b.store(ir.Constant(ty, value), slot)
        return slot


class CholeskyStep(_MatrixStep):
    def __init__(self, operand: Buffer, out: Buffer):
        self.prims = ("cholesky",)
        self.inputs, self.out = [operand], out
        self.n = operand.shape[-1]
        self.batch = int(np.prod(operand.shape[:-2], dtype=np.int64))

    def describe(self):
        return f"cholesky (LAPACK potrf) {self.inputs[0]!r} -> {self.out!r}"

    def emit(self, mb, b: ir.IRBuilder, pointer, table):
        n, dtype = self.n, self.out.dtype
        if self.batch * n == 0:
            return
        out = pointer(self.out)
        if self.inputs[0].id != self.out.id:
            mb.memcpy(b, out, pointer(self.inputs[0]), self.out.nbytes)
        ty = _float_type(dtype)
        potrf = mb.math.declare(f"ft_{_prefix(dtype)}potrf", ir.VoidType(),
                                [I8P, I32P, ty.as_pointer(), I32P, I32P])
        upper = self.by_reference(mb, b, I8, ord("U"))
        size = self.by_reference(mb, b, I32, n)
        info = mb.entry_alloca(b, I32)
        nan = ir.Constant(ty, float("nan"))

        def matrix(bi):
            a = b.gep(out, [b.mul(bi, ir.Constant(I64, n * n))], inbounds=True)
            b.store(ir.Constant(I32, 0), info)
            b.call(potrf, [upper, size, a, size, info])
            failed = b.icmp_signed("!=", b.load(info), ir.Constant(I32, 0))

            def element(idx):  # zero above the diagonal; everything NaN if it failed
                i, j = idx
                at = b.gep(a, [b.add(b.mul(i, ir.Constant(I64, n)), j)], inbounds=True)
                above = b.icmp_signed(">", j, i)
                kept = b.select(above, ir.Constant(ty, 0.0), b.load(at))
                b.store(b.select(failed, nan, kept), at)
            mb.loop_nest(b, [n, n], element)
        mb.loop(b, self.batch, matrix, name="matrix")


class TriangularSolveStep(_MatrixStep):
    def __init__(self, a: Buffer, rhs: Buffer, out: Buffer, params: dict):
        self.prims = ("triangular_solve",)
        self.inputs, self.out = [a, rhs], out
        self.params = dict(params)
        self.k = a.shape[-1]
        self.rows, self.cols = rhs.shape[-2], rhs.shape[-1]
        self.batch = int(np.prod(rhs.shape[:-2], dtype=np.int64))

    def describe(self):
        flags = ", ".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"triangular_solve (BLAS trsm; {flags}) {self.inputs} -> {self.out!r}"

    def emit(self, mb, b: ir.IRBuilder, pointer, table):
        a_buf, rhs_buf = self.inputs
        k, rows, cols, dtype = self.k, self.rows, self.cols, self.out.dtype
        if self.batch * rows * cols == 0:
            return
        out = pointer(self.out)
        if rhs_buf.id != self.out.id:
            mb.memcpy(b, out, pointer(rhs_buf), self.out.nbytes)
        a_ptr = pointer(a_buf)
        ty = _float_type(dtype)
        trsm = mb.math.declare(f"ft_{_prefix(dtype)}trsm", ir.VoidType(),
                               [I8P, I8P, I8P, I8P, I32P, I32P, ty.as_pointer(), ty.as_pointer(),
                                I32P, ty.as_pointer(), I32P])
        p = self.params
        ref = lambda t, v: self.by_reference(mb, b, t, v)  # noqa: E731
        args = [ref(I8, ord("R" if p["left_side"] else "L")),
                ref(I8, ord("U" if p["lower"] else "L")),
                ref(I8, ord("T" if p["transpose_a"] else "N")),
                ref(I8, ord("U" if p["unit_diagonal"] else "N")),
                ref(I32, cols), ref(I32, rows), ref(ty, 1.0)]
        lda, ldb = ref(I32, max(1, k)), ref(I32, max(1, cols))

        def matrix(bi):
            a = b.gep(a_ptr, [b.mul(bi, ir.Constant(I64, k * k))], inbounds=True)
            x = b.gep(out, [b.mul(bi, ir.Constant(I64, rows * cols))], inbounds=True)
            b.call(trsm, args + [a, lda, x, ldb])
        mb.loop(b, self.batch, matrix, name="matrix")


for _step_type in (CholeskyStep, TriangularSolveStep):
    emits(_step_type)(_step_type.emit)


def lower_linalg(step: FallbackStep, program=None, target=None,
                 in_body: bool = False):
    """A native step for a ``cholesky`` or ``triangular_solve`` fallback step, or None."""
    eqn = step.eqn
    if eqn.primitive not in PRIMITIVES or step.outputs[0] is None:
        return None
    if not all(isinstance(x, Buffer) and x.is_array for x in step.inputs):
        return None
    if any(x.dtype not in (np.float32, np.float64) for x in step.inputs):
        return None
    if eqn.primitive is linalg.cholesky_p:
        return CholeskyStep(step.inputs[0], step.outputs[0])
    return TriangularSolveStep(step.inputs[0], step.inputs[1], step.outputs[0], eqn.params)
