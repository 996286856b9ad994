"""``ad.defbilinear`` writes one rule set for mul, dot_general and conv_general_dilated:
the JVP is f(dx, y) + f(x, dy), each operand transposes with the other fixed, and
transposing in both at once is refused."""
from __future__ import annotations

import numpy as np
import pytest

from functrans.interpreters import ad
from functrans.primitives import convolution, dot, elementwise

CASES = [
    (elementwise.mul_p, (3,), (3,), {}),
    (dot.dot_general_p, (2, 3), (3, 4),
     dict(dimension_numbers=(((1,), (0,)), ((), ())), precision=None,
          preferred_element_type=None)),
    (convolution.conv_general_dilated_p, (1, 2, 5), (3, 2, 2),
     dict(window_strides=(1,), padding=((0, 0),), lhs_dilation=(1,), rhs_dilation=(1,),
          dimension_numbers=convolution.ConvDimensionNumbers((0, 1, 2), (0, 1, 2), (0, 1, 2)),
          feature_group_count=1, batch_group_count=1, precision=None,
          preferred_element_type=None)),
]


@pytest.mark.parametrize("primitive, x_shape, y_shape, params", CASES,
                         ids=lambda c: getattr(c, "name", ""))
def test_bilinear_rules(primitive, x_shape, y_shape, params):
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(s).astype(np.float32) for s in (x_shape, y_shape))
    dx, dy = (rng.standard_normal(s).astype(np.float32) for s in (x_shape, y_shape))
    bind = lambda a, b: np.asarray(primitive.bind(a, b, **params))  # noqa: E731
    out, tangent = primitive.jvp((x, y), (dx, dy), **params)
    np.testing.assert_allclose(np.asarray(tangent), bind(dx, y) + bind(x, dy), rtol=1e-5)
    ct = rng.standard_normal(np.shape(out)).astype(np.float32)
    x_aval, y_aval = (ad.UndefinedPrimal(ad.get_aval(v)) for v in (x, y))
    ct_x, none = primitive.transpose(ct, x_aval, y, **params)
    none2, ct_y = primitive.transpose(ct, x, y_aval, **params)
    assert none is None and none2 is None
    # <ct, f(dx, y)> = <f^T(ct), dx>, and likewise in y
    np.testing.assert_allclose(np.vdot(ct, bind(dx, y)), np.vdot(np.asarray(ct_x), dx), rtol=1e-4)
    np.testing.assert_allclose(np.vdot(ct, bind(x, dy)), np.vdot(np.asarray(ct_y), dy), rtol=1e-4)
    with pytest.raises(NotImplementedError, match=f"{primitive.name} is bilinear"):
        primitive.transpose(ct, x_aval, y_aval, **params)
