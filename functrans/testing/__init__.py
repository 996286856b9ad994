"""Testing tools for functrans itself: the differential fuzzer of the compiler.

- :mod:`functrans.testing.programs`: random programs over every primitive family, as
  hypothesis strategies (shared operands, transposes, several products or reductions of
  one buffer, results used twice, loop and branch bodies, integer and boolean values);
- :mod:`functrans.testing.fuzz`: each program checked four ways (jit against the reference
  interpreter, vmap against a loop, gradients against numerical differences, a jit sharded
  over four CPU devices), a mismatch bisected to the compiler pass that causes it; run as
  ``python -m functrans.testing.fuzz --programs N --seed S``.

Both need hypothesis (``pip install functrans[test]``).
"""
