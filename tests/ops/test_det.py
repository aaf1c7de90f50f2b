"""Det on every backend against np.linalg.det: batches, pivoting, singular matrices, dtypes, errors."""
import numpy as np
import pytest

import dsl
from ops.det import Det


def test_batched_determinants(backend):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    x[0, 0] = [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]  # needs row swaps: det 1
    x[0, 1, 3] = x[0, 1, 1] * 2  # singular
    got = Det(x, backend=backend)
    assert got.shape == (2, 3)
    np.testing.assert_allclose(got, np.linalg.det(x.astype(np.float64)), rtol=1e-4, atol=1e-5)
    assert got[0, 0] == 1 and abs(got[0, 1]) < 1e-5


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_dtypes(backend, dtype):
    x = np.array([[2, 1, 0], [1, 3, 1], [0, 1, 4]], dtype)
    np.testing.assert_allclose(Det(x, backend=backend), np.linalg.det(x.astype(np.float64)), rtol=1e-3)


def test_errors():
    with pytest.raises(dsl.VerifyError, match=r"Det input 'X' must be square matrices \(..., M, M\), got f32\[2,3\]"):
        Det(np.zeros((2, 3), np.float32))
    with pytest.raises(dsl.VerifyError, match="Det input 'X' has dtype i32; accepted: f16, bf16, f32, f64"):
        Det(np.zeros((2, 2), np.int32))
