"""The inverse/hyperbolic trigonometric, rint, expm1, log1p and erfc builtins on every backend:
scalars in f32 and f64, SIMD lanes, and their edge values (domain errors give NaN, never raise)."""
import math

import numpy as np
import pytest

import dsl
from dsl import In, Out

T = dsl.TypeVar("T")

NAMES = ("rint", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "expm1", "log1p", "erfc")
REF = {"rint": np.rint, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
       "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
       "expm1": np.expm1, "log1p": np.log1p,
       "erfc": np.vectorize(math.erfc, otypes=[np.float64])}


@dsl.kernel
def math_rows(x: In[T], y: Out[T, 2]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        y[0, i] = dsl.rint(v)
        y[1, i] = dsl.tan(v)
        y[2, i] = dsl.asin(v)
        y[3, i] = dsl.acos(v)
        y[4, i] = dsl.atan(v)
        y[5, i] = dsl.sinh(v)
        y[6, i] = dsl.cosh(v)
        y[7, i] = dsl.asinh(v)
        y[8, i] = dsl.acosh(v)
        y[9, i] = dsl.atanh(v)
        y[10, i] = dsl.expm1(v)
        y[11, i] = dsl.log1p(v)
        y[12, i] = dsl.erfc(v)


VALUES = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 0.999, -1.0, 1.0, 3.0, -7.25, 1e-7, 90.0, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_math_builtins_match_numpy(backend, dtype):
    x = np.array(VALUES, dtype)
    y = np.zeros((len(NAMES), x.size), dtype)
    math_rows(x, y, backend=backend)
    with np.errstate(all="ignore"):
        for k, name in enumerate(NAMES):
            ref = REF[name](x)
            rtol = 1e-6 if dtype == np.float32 else 1e-13
            np.testing.assert_allclose(y[k], ref, rtol=rtol, atol=0, err_msg=name)
    assert np.signbit(y[0, 1]) and np.signbit(y[7, 1])  # rint(-0.0), asinh(-0.0) keep the sign


def test_rint_rounds_half_to_even(backend):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999998, 8388609.0], np.float32)
    y = np.zeros((len(NAMES), x.size), np.float32)
    math_rows(x, y, backend=backend)
    np.testing.assert_array_equal(y[0], [0, 2, 2, -0, -2, -2, 2, 8388609])


@dsl.kernel(threads=1)
def math_lanes(x: In[dsl.f32], y: Out[dsl.f32]):
    v = x.vload(0, 4)
    y.vstore(0, dsl.rint(v) + dsl.atan(v))
    y.vstore(4, dsl.asinh(v) + dsl.expm1(v) + dsl.log1p(v * v))
    y.vstore(8, dsl.sinh(v) - dsl.cosh(v) + dsl.tan(v * 0.25))


def test_math_builtins_on_simd_lanes(backend):
    x = np.array([0.5, -1.5, 2.0, 0.25], np.float32)
    y = np.zeros(12, np.float32)
    math_lanes(x, y, backend=backend)
    ref = np.concatenate([np.rint(x) + np.arctan(x), np.arcsinh(x) + np.expm1(x) + np.log1p(x * x),
                          np.sinh(x) - np.cosh(x) + np.tan(x * 0.25)])
    np.testing.assert_allclose(y, ref, rtol=2e-6, atol=1e-6)


def test_interpreter_faces_take_python_numbers():
    assert dsl.rint(2.5) == 2.0 and type(dsl.rint(2.5)) is float
    with np.errstate(all="ignore"):
        assert math.isnan(dsl.asin(2.0)) and dsl.atanh(np.float32(1)) == np.inf
    assert type(dsl.log1p(np.float32(1))) is np.float32 and type(dsl.acosh(np.int32(2))) is np.float64
