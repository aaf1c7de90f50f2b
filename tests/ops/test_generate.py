"""Range, ConstantOfShape, EyeLike, Trilu, Dropout, DepthToSpace and SpaceToDepth on every
backend against numpy."""
import numpy as np
import pytest

import dsl
import ops

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (0, 10, 3, np.int64), (10, 1, -2, np.int32), (5, 5, 1, np.int16), (1, 0, 1, np.int64),
    (0.5, 3.0, 0.25, np.float32), (2.0, -1.0, -0.7, np.float64), (1.0, 4.0, 0.5, np.float16)], ids=str)
def test_range(backend, start, limit, delta, dtype):
    args = [np.array(v, dtype) for v in (start, limit, delta)]
    want = np.arange(*args, dtype=dtype)
    got = ops.Range(*args, backend=backend)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_range_length_at_compile_and_run_time(backend):
    g = dsl.Graph("r")
    n = g.input("n", (), dsl.i64)
    y = ops.Range(g.constant("s", np.array(0, np.int64)), n, g.constant("d", np.array(2, np.int64)))
    assert y.shape == (None,)
    g.output(y, "y")
    model = g.compile(backend=backend)
    for limit in (7, 0, 3):
        np.testing.assert_array_equal(model.run({"n": np.array(limit, np.int64)})["y"], np.arange(0, limit, 2))
    c = dsl.Graph("c")
    y = ops.Range(*(c.constant(k, np.array(v, np.float32)) for k, v in (("a", 1), ("b", 2), ("d", 0.25))))
    assert y.shape == (4,)


@pytest.mark.parametrize("value", [None, np.array([7], np.int32), np.array([True]), np.array([1.5], np.float16)],
                         ids=["default", "i32", "bool", "f16"])
def test_constant_of_shape(backend, value):
    y = ops.ConstantOfShape(np.array([2, 3], np.int64), value=value, backend=backend)
    fill = np.zeros(1, np.float32) if value is None else value
    np.testing.assert_array_equal(y, np.full((2, 3), fill[0], fill.dtype))
    assert y.dtype == fill.dtype
    assert ops.ConstantOfShape(np.array([], np.int64), backend=backend).shape == ()
    assert ops.ConstantOfShape(np.array([0, 4], np.int64), backend=backend).shape == (0, 4)


@pytest.mark.parametrize("shape,k,dtype", [((3, 4), 0, None), ((4, 3), 1, dsl.i32), ((3, 3), -2, dsl.bool_),
                                           ((2, 5), 7, None)], ids=str)
def test_eyelike(backend, shape, k, dtype):
    x = np.zeros(shape, np.float32)
    y = ops.EyeLike(x, k=k, dtype=dtype, backend=backend)
    want = np.eye(*shape, k=k, dtype=(dtype or dsl.f32).np)
    assert y.dtype == want.dtype
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("k", [None, 0, 1, -1, 5, -5])
@pytest.mark.parametrize("upper", [0, 1])
def test_trilu(backend, k, upper):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    kk = 0 if k is None else k
    want = np.triu(x, kk) if upper else np.tril(x, kk)
    args = (x,) if k is None else (x, np.array(k, np.int64))
    np.testing.assert_array_equal(ops.Trilu(*args, upper=upper, backend=backend), want)
    xi = RNG.integers(-9, 9, (4, 4)).astype(np.int64)
    np.testing.assert_array_equal(ops.Trilu(xi, upper=upper, backend=backend), np.triu(xi) if upper else np.tril(xi))


def test_dropout(backend):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    y, mask = ops.Dropout(x, np.array(0.3, np.float32), np.array(False), backend=backend)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()
    y, mask = ops.DropoutV1(x, ratio=0.2, backend=backend)  # opsets 1-9: the mask has the data's dtype
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.float32 and (mask == 1).all()
    y, mask = ops.DropoutV10(x, ratio=0.2, backend=backend)  # opsets 10-11: a bool mask
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()


def test_opset_9_dropout_mask_exports_with_the_data_dtype(tmp_path):
    """A Dropout-7 model round-trips through opdsl's export and passes onnx's full check (the mask
    output's declared type is the data's, as opsets 1-9 say)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    node = helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.5)
    g = helper.make_graph([node], "d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("mask", TensorProto.FLOAT, [2, 3])])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 7)])
    model = dsl.load_onnx(proto, backend="interpreter")
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    out = model.run({"x": x})
    assert out["mask"].dtype == np.float32 and (out["mask"] == 1).all()
    onnx.checker.check_model(model.graph.to_onnx(), full_check=True)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_back(backend, mode):
    b = 2
    x = RNG.standard_normal((2, 8, 2, 3)).astype(np.float32)
    n, c, h, w = x.shape
    if mode == "DCR":
        want = x.reshape(n, b, b, c // 4, h, w).transpose(0, 3, 4, 1, 5, 2).reshape(n, c // 4, h * b, w * b)
    else:
        want = x.reshape(n, c // 4, b, b, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, c // 4, h * b, w * b)
    y = ops.DepthToSpace(x, blocksize=b, mode=mode, backend=backend)
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(ops.SpaceToDepth(y, blocksize=b, mode=mode, backend=backend), x)


def test_generate_errors():
    with pytest.raises(dsl.VerifyError, match="Range delta is 0"):
        ops.Range(np.int64(0), np.int64(3), np.int64(0))
    with pytest.raises(dsl.VerifyError, match="Range limit is i32.*need one dtype"):
        ops.Range(np.int64(0), np.int32(3), np.int64(1))
    with pytest.raises(dsl.VerifyError, match=r"ConstantOfShape shape \[2, -1\] has a negative dim"):
        ops.ConstantOfShape(np.array([2, -1], np.int64))
    with pytest.raises(dsl.VerifyError, match="EyeLike input must be 2-D"):
        ops.EyeLike(np.zeros(3, np.float32))
    with pytest.raises(dsl.VerifyError, match="training_mode is True: opdsl runs inference only"):
        ops.Dropout(np.zeros(3, np.float32), np.array(0.5, np.float32), np.array(True))
    with pytest.raises(dsl.VerifyError, match="DepthToSpace channels 6 .* not a multiple of blocksize² = 4"):
        ops.DepthToSpace(np.zeros((1, 6, 2, 2), np.float32), blocksize=2)
    with pytest.raises(dsl.VerifyError, match="SpaceToDepth width 3 .* not a multiple of blocksize 2"):
        ops.SpaceToDepth(np.zeros((1, 1, 2, 3), np.float32), blocksize=2)
    g = dsl.Graph("d")
    with pytest.raises(dsl.VerifyError, match="training_mode is not a constant"):
        ops.Dropout(g.input("x", (3,), dsl.f32), None, g.input("t", (), dsl.bool_))
