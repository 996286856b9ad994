"""The target-independent compiler shared by every native backend.

A backend's driver runs these passes over a Jaxpr and then emits code for its target:
inlining and decomposition to the primitives the backends lower, fusion of elementwise
work into loop kernels (``fusion``), the small expression language those kernels are
written in (``exprs``) and buffer planning (``buffers``). Nothing here knows LLVM or CUDA;
``backends.llvm`` and ``backends.cuda`` import this package and never each other.
"""
