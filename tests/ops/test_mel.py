"""MelWeightMatrix on every backend against a numpy reference (filter edges on the mel
scale, triangles peaking at 1), output dtypes, use with a spectrum; errors."""
import math

import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError


def reference(bins, n, rate, low, high):
    mel = lambda f: 2595 * math.log1p(f / 700) / math.log(10)  # noqa: E731
    step = (mel(high) - mel(low)) / (bins + 2)
    edges = [int(np.floor((n + 1) * 700 * math.expm1((k * step + mel(low)) / 2595 * math.log(10)) / rate))
             for k in range(bins + 2)]
    out = np.zeros((n // 2 + 1, bins))
    for i in range(bins):
        left, center, right = edges[i:i + 3]
        for j in range(n // 2 + 1):
            if j == center:
                out[j, i] = 1
            elif left <= j < center:
                out[j, i] = (j - left) / (center - left)
            elif center < j < right:
                out[j, i] = (right - j) / (right - center)
    return out


def args(bins, n, rate, low, high, int_dtype=np.int64, float_dtype=np.float32):
    return (np.array(bins, int_dtype), np.array(n, int_dtype), np.array(rate, int_dtype),
            np.array(low, float_dtype), np.array(high, float_dtype))


@pytest.mark.parametrize("bins,n,rate,low,high", [(8, 64, 16000, 20.0, 8000.0), (5, 33, 8000, 300.0, 3000.0)])
def test_matrix(backend, bins, n, rate, low, high):
    y = ops.MelWeightMatrix(*args(bins, n, rate, low, high), backend=backend)
    assert y.shape == (n // 2 + 1, bins) and y.dtype == np.float32
    np.testing.assert_allclose(y, reference(bins, n, rate, low, high), rtol=1e-6, atol=1e-7)


def test_output_dtype_and_graph(backend):
    y = ops.MelWeightMatrix(*args(4, 32, 4000, 0.0, 2000.0, np.int32, np.float64), output_datatype=11,
                            backend=backend)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, reference(4, 32, 4000, 0.0, 2000.0), rtol=1e-12)
    # a spectrum times the matrix, the matrix's inputs graph constants (folded at compile)
    g = dsl.Graph("mel")
    s = g.input("spectrum", (3, 17), dsl.f32)
    g.output(ops.MatMul(s, ops.MelWeightMatrix(*args(4, 32, 4000, 0.0, 2000.0))), "mel")
    spec = np.random.default_rng(0).random((3, 17)).astype(np.float32)
    got = g.compile(backend=backend).run({"spectrum": spec})["mel"]
    np.testing.assert_allclose(got, spec @ reference(4, 32, 4000, 0.0, 2000.0), rtol=1e-5)


def test_errors():
    with pytest.raises(VerifyError, match="num_mel_bins must be > 0, got 0"):
        ops.MelWeightMatrix(*args(0, 32, 4000, 0.0, 2000.0), backend="interpreter")
    with pytest.raises(VerifyError, match="lower_edge_hertz must be a scalar of"):
        ops.MelWeightMatrix(*args(4, 32, 4000, 0.0, 2000.0)[:3], np.array(0, np.int64), np.array(1.0, np.float32),
                            backend="interpreter")
    with pytest.raises(VerifyError, match="output_datatype 8 is not a numeric opdsl dtype"):
        ops.MelWeightMatrix(*args(4, 32, 4000, 0.0, 2000.0), output_datatype=8, backend="interpreter")
