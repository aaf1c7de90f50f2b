"""examples/qaic_package: the guide's three ops on every backend against numpy."""
import numpy as np
import pytest

import dsl
import ops
from dsl.package import register_package

from tests.package.helpers import EXAMPLE


@pytest.fixture
def qaic():
    pkg = register_package(EXAMPLE)
    return {cls.op_type: cls for cls in pkg.ops}


def _hard_sigmoid(x):
    return np.clip(0.5 * x.astype(np.float32) + 0.2, 0.0, 1.0)


def _rms_norm(x, w):
    x, w = x.astype(np.float32), w.astype(np.float32)
    return w * x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-5)


@pytest.mark.parametrize("dtype, tol", [(np.float32, 1e-6), (np.float16, 1e-3)])
def test_custom_relu(qaic, backend, dtype, tol):
    x = np.linspace(-4, 4, 37).astype(dtype).reshape(37)
    y = qaic["CustomRelu"](x, backend=backend)
    assert y.dtype == dtype
    np.testing.assert_allclose(y.astype(np.float32), _hard_sigmoid(x), atol=tol)
    y = qaic["CustomRelu"](x, alpha=0.25, beta=0.5, backend=backend)
    np.testing.assert_allclose(y.astype(np.float32), np.clip(0.25 * x.astype(np.float32) + 0.5, 0, 1), atol=tol)


def test_custom_relu_opencl_variant_is_selected_per_dtype(qaic):
    op = qaic["CustomRelu"]()
    f16 = dsl.TensorSpec((4,), dsl.f16)
    assert op.select(dsl.TensorSpec((4,), dsl.f32), backend="opencl") == "custom_relu_f32"
    assert op.select(f16, backend="opencl") == "custom_relu_f16"
    assert op.select(f16, backend="numba") == "custom_relu"
    assert type(op.implementation([f16], "opencl")).__name__ == "RawOpenCL"


def test_custom_relu_rejects_other_dtypes(qaic):
    with pytest.raises(dsl.VerifyError, match=r"com.qaic.example::CustomRelu \(eager call\): input 'x' is i32\[3\]; "
                                              r"accepted dtypes: f32, f16 \(.*opdsl-package.yaml:\d+\)"):
        qaic["CustomRelu"](np.zeros(3, np.int32))
    with pytest.raises(dsl.VerifyError, match=r"input 'x' has rank 9 .*accepted: rank <= 8"):
        qaic["CustomRelu"](np.zeros((1,) * 9, np.float32))


@pytest.mark.parametrize("dtype, tol", [(np.float32, 1e-5), (np.float16, 2e-3)])
def test_rms_norm(qaic, backend, dtype, tol):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 8)).astype(dtype)
    w = rng.uniform(0.5, 1.5, 8).astype(dtype)
    y = qaic["RMSNorm"](x, w, backend=backend)
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_allclose(y.astype(np.float32), _rms_norm(x, w), rtol=tol, atol=tol)


def test_rms_norm_verify_hook(qaic):
    with pytest.raises(dsl.VerifyError, match=r"RMSNorm weight w f32\[5\] must have the length of x's last axis \(8\)"):
        qaic["RMSNorm"](np.ones((2, 8), np.float32), np.ones(5, np.float32))
    with pytest.raises(dsl.VerifyError, match=r"input 'w' has rank 2"):
        qaic["RMSNorm"](np.ones((2, 8), np.float32), np.ones((1, 8), np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint8, np.int32, np.int64])
def test_copy_every_dtype(qaic, backend, dtype):
    x = (np.arange(-20, 20) % 120).astype(dtype).reshape(5, 8)
    y = qaic["Copy"](x, backend=backend)
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("dtype, scale, offset", [(dsl.i8, 0.02, -127), (dsl.u8, 0.04, 128)])  # u8: -127 is out of range
def test_copy_keeps_the_quantization(qaic, dtype, scale, offset):
    spec = dsl.TensorSpec((2, 3), dtype, quant=(scale, offset))
    assert qaic["Copy"]().infer(spec).quant == dsl.Quant(scale, offset)


def test_copy_of_quantized_i8_in_a_graph(qaic, backend):
    g = dsl.Graph("copy")
    x = g.input("x", (None, 4), dsl.f32)
    q = qaic["Copy"](ops.DataConvert(x, dtype=dsl.i8, scale=0.02, zero_point=-127))
    assert q.spec.quant == dsl.Quant(0.02, -127)
    g.output(ops.DataConvert(q, dtype=dsl.f32, scale=0.02, zero_point=-127), "y")
    xv = np.linspace(0.0, 5.0, 8, dtype=np.float32).reshape(2, 4)  # offset -127: i8 covers [-0.02, 5.08]
    y = g.compile(backend=backend).run({"x": xv})["y"]
    np.testing.assert_allclose(y, xv, atol=0.01 + 1e-6)


def test_the_three_ops_chained_in_a_graph(qaic, backend):
    g = dsl.Graph("chain")
    x = g.input("x", (None, 16), dsl.f32)
    w = g.constant("w", np.linspace(0.5, 1.5, 16, dtype=np.float32))
    g.output(qaic["Copy"](qaic["RMSNorm"](qaic["CustomRelu"](x), w)), "y")
    xv = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    y = g.compile(backend=backend).run({"x": xv})["y"]
    np.testing.assert_allclose(y, _rms_norm(_hard_sigmoid(xv), np.linspace(0.5, 1.5, 16, dtype=np.float32)),
                               rtol=1e-5, atol=1e-6)


def test_rms_norm_runs_as_tiles_from_its_functions_hooks(qaic, backend):
    """functions.py's tiling/map_tiles (the guide's setTileConfig/mapTiles) cut RMSNorm's rows into
    tiles, one launch each; the result equals the untiled model's."""
    g = dsl.Graph("tiled")
    x = g.input("x", (2, 7, 16), dsl.f32)
    w = g.constant("w", np.linspace(0.5, 1.5, 16, dtype=np.float32))
    g.output(qaic["RMSNorm"](x, w), "y")
    xv = np.random.default_rng(4).standard_normal((2, 7, 16)).astype(np.float32)
    tiled = g.compile(backend=backend, tiling=3)
    untiled = g.compile(backend=backend, tiling=False)
    y = tiled.run({"x": xv})["y"]
    assert "tiles=3" in str(tiled) and "tiles=" not in str(untiled)
    np.testing.assert_array_equal(y, untiled.run({"x": xv})["y"])
    np.testing.assert_allclose(y, _rms_norm(xv, np.linspace(0.5, 1.5, 16, dtype=np.float32)), rtol=1e-5, atol=1e-6)
