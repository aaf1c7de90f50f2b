"""ai.onnx.ml ops on every backend against numpy references: Binarizer,
ArrayFeatureExtractor, LabelEncoder; errors (tree ensembles: test_tree_ensemble.py)."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(30)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_binarizer(backend, dtype):
    x = (RNG.standard_normal((3, 5)) * 4).astype(dtype)
    y = ops.Binarizer(x, threshold=0.5, backend=backend)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, (x > 0.5).astype(dtype))


def test_binarizer_nan_is_zero(backend):
    x = np.array([np.nan, 2.0, -1.0], np.float32)
    np.testing.assert_array_equal(ops.Binarizer(x, backend=backend), [0, 1, 0])


def test_array_feature_extractor(backend):
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    idx = np.array([4, 0, 4], np.int64)
    np.testing.assert_array_equal(ops.ArrayFeatureExtractor(x, idx, backend=backend), x[..., idx])
    v = np.arange(6, dtype=np.int64)                                   # 1-D: one row
    np.testing.assert_array_equal(ops.ArrayFeatureExtractor(v, np.array([[5], [1]]), backend=backend), [[5, 1]])
    g = dsl.Graph("afe")
    xi = g.input("x", (None, 5), dsl.f64)
    g.output(ops.ArrayFeatureExtractor(xi, np.array([3, 1], np.int64)), "z")
    xv = RNG.standard_normal((4, 5))
    np.testing.assert_array_equal(g.compile(backend=backend).run({"x": xv})["z"], xv[:, [3, 1]])


def test_errors():
    with pytest.raises(VerifyError, match=r"ArrayFeatureExtractor Y indices must lie in \[0, 5\)"):
        ops.ArrayFeatureExtractor(np.zeros((2, 5), np.float32), np.array([5], np.int64), backend="interpreter")
    with pytest.raises(VerifyError, match="Binarizer X has dtype u8; accepted: f32, f64, i64, i32"):
        ops.Binarizer(np.zeros(3, np.uint8), backend="interpreter")


def test_label_encoder(backend):
    x = np.array([[3, 7, 1], [7, 9, 3]], np.int64)
    y = ops.LabelEncoder(x, keys_int64s=(1, 3, 7), values_floats=(0.5, 1.5, 2.5), default_float=-1.0,
                         backend=backend)
    np.testing.assert_array_equal(y, np.array([[1.5, 2.5, 0.5], [2.5, -1.0, 1.5]], np.float32))
    xf = np.array([0.5, np.nan, 2.0], np.float32)               # a NaN key matches a NaN
    y = ops.LabelEncoder(xf, keys_floats=(np.nan, 0.5), values_int64s=(7, 8), default_int64=0, backend=backend)
    np.testing.assert_array_equal(y, [8, 7, 0])
    xi = np.array([2, 5], np.int16)
    y = ops.LabelEncoder(xi, keys_tensor=np.array([5, 2, 5], np.int16), values_tensor=np.array([1, 2, 3], np.int32),
                         default_tensor=np.array([9], np.int32), backend=backend)
    np.testing.assert_array_equal(y, np.array([2, 3], np.int32))   # the repeated key 5: the last one wins


def test_ml_errors():
    with pytest.raises(VerifyError, match="LabelEncoder keys_strings: string keys/values are not supported"):
        ops.LabelEncoder(np.zeros(2, np.int64), keys_strings=("a", "b"), values_int64s=(1, 2), backend="interpreter")
    with pytest.raises(VerifyError, match="LabelEncoder keys are float32, X is i64"):
        ops.LabelEncoder(np.zeros(2, np.int64), keys_floats=(1.0,), values_int64s=(1,), backend="interpreter")
