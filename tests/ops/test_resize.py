"""Resize / Upsample (ops/resize.py) on every backend against onnx's reference implementation:
modes, coordinate transformations, nearest modes, cubic options, antialias, axes, policies,
roi extrapolation, integer data, opsets, errors."""
import numpy as np
import pytest

import dsl
import ops
from ops.resize import Resize10, Resize13, Upsample7

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

RNG = np.random.default_rng(11)


def resize_model(x, opset=19, roi=None, scales=None, sizes=None, **attrs):
    feeds = {"X": x}
    names = ["X", "", "", ""]
    for k, (name, v) in enumerate((("roi", roi), ("scales", scales), ("sizes", sizes)), start=1):
        if v is not None:
            names[k] = name
            feeds[name] = v
    while names[-1] == "":
        names.pop()
    node = helper.make_node("Resize", names, ["Y"], **attrs)
    vi = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()]
    g = helper.make_graph([node], "g", vi, [helper.make_tensor_value_info("Y", helper.np_dtype_to_tensor_dtype(x.dtype), None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), feeds


def check(backend, x, rtol=1e-5, atol=1e-5, **kw):
    model, feeds = resize_model(x, **kw)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = dsl.load_onnx(model, backend=backend).run(feeds)["Y"]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


X = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)
UP = np.array([1, 1, 2.0, 1.5], np.float32)
DOWN = np.array([1, 1, 0.6, 0.5], np.float32)


@pytest.mark.parametrize("ctm", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"])
def test_resize_modes_and_transforms(backend, ctm):
    for scales in (UP, DOWN):
        for nm in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
            check(backend, X, scales=scales, mode="nearest", nearest_mode=nm, coordinate_transformation_mode=ctm)
        check(backend, X, scales=scales, mode="linear", coordinate_transformation_mode=ctm)
        check(backend, X, scales=scales, mode="cubic", coordinate_transformation_mode=ctm)


def test_resize_cubic_options_antialias_and_sizes(backend):
    check(backend, X, scales=DOWN, mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)
    check(backend, X, scales=DOWN, mode="cubic", antialias=1)
    check(backend, X, scales=DOWN, mode="linear", antialias=1)
    check(backend, X, sizes=np.array([1, 2, 3, 9], np.int64), mode="linear")
    for policy in ("not_larger", "not_smaller"):
        check(backend, X, sizes=np.array([3, 4], np.int64), mode="nearest", axes=[2, 3], keep_aspect_ratio_policy=policy)
    check(backend, X, scales=np.array([2.0, 1.5], np.float32), mode="linear", axes=[3, 2])


def test_resize_tf_crop_and_resize_and_int_data(backend):
    roi = np.array([0, 0, 0.2, 0.3, 1, 1, 0.9, 1.2], np.float32)
    check(backend, X, roi=roi, sizes=np.array([1, 2, 3, 4], np.int64), mode="linear",
          coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=5.0)
    xi = RNG.integers(0, 255, (1, 1, 4, 4)).astype(np.uint8)
    check(backend, xi, scales=np.array([1, 1, 1.5, 1.7], np.float32), mode="cubic", atol=0)  # round, saturate


def test_resize_half_pixel_symmetric(backend):
    # ONNX's test_resize_downsample_scales_linear_half_pixel_symmetric
    x = np.array([[[[1, 2, 3, 4]]]], np.float32)
    y = ops.Resize(x, None, np.array([1, 1, 1, 0.6], np.float32), mode="linear",
                   coordinate_transformation_mode="half_pixel_symmetric", backend=backend)
    np.testing.assert_allclose(y, [[[[1.6666666, 3.3333333]]]], rtol=1e-6)


def test_resize10_and_upsample(backend):
    x = RNG.standard_normal((1, 1, 2, 3)).astype(np.float32)
    y = Resize10(x, np.array([1, 1, 2, 2], np.float32), mode="nearest", backend=backend)
    np.testing.assert_array_equal(y, x.repeat(2, axis=2).repeat(2, axis=3))
    y = Upsample7(x, scales=[1.0, 1.0, 2.0, 3.0], backend=backend)
    np.testing.assert_array_equal(y, x.repeat(2, axis=2).repeat(3, axis=3))
    y = ops.Upsample(x, np.array([1, 1, 1, 2], np.float32), mode="linear", backend=backend)
    want = np.empty((1, 1, 2, 6), np.float32)
    for j in range(6):  # asymmetric: source j / 2, clamped at the edge
        s = j / 2
        a, f = int(np.floor(s)), s - np.floor(s)
        want[..., j] = x[..., a] * (1 - f) + x[..., min(a + 1, 2)] * f
    np.testing.assert_allclose(y, want, rtol=1e-6)


def test_resize_errors():
    with pytest.raises(dsl.VerifyError, match="Resize mode 'bicubic' is not accepted"):
        ops.Resize(X, None, UP, mode="bicubic")
    with pytest.raises(dsl.VerifyError, match="exactly one of scales and sizes"):
        ops.Resize(X, None, UP, np.array([1, 1, 2, 2], np.int64))
    with pytest.raises(dsl.VerifyError, match="scales has 3 values; expected one per resized axis"):
        ops.Resize(X, None, np.array([1, 2, 2], np.float32))
    with pytest.raises(dsl.VerifyError, match="coordinate_transformation_mode 'half_pixel_symmetric' is not "
                                              "accepted at opset 13"):
        Resize13(X, None, UP, coordinate_transformation_mode="half_pixel_symmetric")
    with pytest.raises(dsl.VerifyError, match="needs the roi input"):
        ops.Resize(X, None, UP, coordinate_transformation_mode="tf_crop_and_resize")
