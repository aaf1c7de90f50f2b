"""Int8 convolutions on the matrix tile GEMM (ops/conv_int8_amx.py): its packings (1×1
pointwise, stride-1 over the padded width, a stem through space-to-depth, 1×1/2 through a
subsampled copy, im2col) and the implicit GEMM of stride-1 k×k convolutions
(ops/conv_int8_implicit.py) on every backend against numpy, with i8/u8
images, per-channel weight zero points, the requantizing path whose weight row sums are folded
into the bias, and the ops' choice (tiles only where the target runs AMX) and a planned model
against onnxruntime where it does."""
import dataclasses

import numpy as np
import pytest

import dsl
import ops
from ops.conv_int8_amx import conv_int8_amx
from ops.conv_int8_implicit import implicit_ok
from ops.gemm_int8_amx import amx_usable
from test_gemm_int8 import _model, data, requantized

RNG = np.random.default_rng(29)


def exact_conv(x, w, zx, zw, stride, pad):
    """Σ (x - zx)(w - zw[m]) in i64 over the taps, the padding being the zero point (adds 0)."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xs = np.pad(x.astype(np.int64) - int(np.asarray(zx).reshape(-1)[0]), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ws = w.astype(np.int64) - np.asarray(zw, np.int64).reshape(-1, 1, 1, 1)
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    y = np.zeros((n, m, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xs[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            y += np.einsum("nchw,mc->nmhw", patch, ws[:, :, i, j])
    return y


GEOMETRIES = [  # (C, H, M, k, stride, pad): pointwise, stride 1 padded (shifted), a stem (space-to-depth
    (20, 6, 37, 1, 1, 0),  # then shifted), strided on more than 16 channels (im2col)
    (7, 9, 33, 3, 1, 1),
    (3, 11, 35, 7, 2, 3),
    (17, 7, 33, 3, 2, 1),
    (8, 18, 32, 1, 2, 0),  # 1×1/2 with 81 output pixels: a subsampled copy, then pointwise
    (8, 5, 32, 1, 1, 1),  # 1×1 padded: the zero-point border, then im2col (its B panels were left unpacked)
]


def _geom(k, stride, pad, oh):
    return [k, k, stride, stride, pad, pad, 1, 1, oh, oh]


# OpenCL compiles each specialization in ~10 s: the default run keeps one OpenCL geometry
@pytest.mark.parametrize("backend, shape", [
    pytest.param(b, g, marks=[pytest.mark.slow] if b == "opencl" and i else [])
    for i, g in enumerate(GEOMETRIES) for b in ("interpreter", "numba", "opencl")], indirect=["backend"])
def test_tile_convolution_is_exact_on_every_backend(backend, shape):
    c, h, m, k, stride, pad = shape
    for xdt in (np.uint8, np.int8):
        x = data(xdt, (2, c, h, h), np.iinfo(xdt).max)  # two images, a corner at the type's end
        w = data(np.int8, (m, c, k, k), -128)
        zx, zw = np.array([np.iinfo(xdt).min + 3], xdt), data(np.int8, (m,))
        want = exact_conv(x, w, zx, zw, stride, pad)
        y = np.zeros(want.shape, np.int32)
        conv_int8_amx(x, w, y, zx, zw, _geom(k, stride, pad, want.shape[2]), backend=backend)
        np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("backend", ["interpreter", "numba", pytest.param("opencl", marks=pytest.mark.slow)],
                         indirect=True)
@pytest.mark.parametrize("k", [1, 3])
def test_tile_convolution_requantizes_with_folded_row_sums(backend, k):
    """M % 32 == 0 and C·k·k % 64 == 0: the weights' row sums times x's zero point join the bias
    and the tiles read the weights in place; a per-channel scale, bias and a clamp (fused Relu)."""
    c, h, m = 64, 5, 32
    x, w = data(np.uint8, (1, c, h, h), 255), data(np.int8, (m, c, k, k), -128)
    zx, zw = np.array([131], np.uint8), np.zeros(1, np.int8)
    mult = RNG.uniform(1e-5, 1e-4, m).astype(np.float32)
    bias = RNG.integers(-50000, 50000, m).astype(np.int32)
    acc = exact_conv(x, w, zx, zw, 1, k // 2)
    y = np.zeros(acc.shape, np.uint8)
    conv_int8_amx(x, w, y, zx, zw, _geom(k, 1, k // 2, h), mult, bias, 100, backend=backend, clamp=(100, 250))
    want = requantized(acc.transpose(0, 2, 3, 1), mult, bias, 100, np.uint8, 100, 250).transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(y, want)


IMPLICIT = [  # (C, H, W, M, kh, kw, stride, pad): channels past a 64-byte step, rows of 16 pixels and more
    (8, 6, 5, 20, 3, 3, 1, 1),  # (vector packing) and narrower, M past 32-channel blocks, unpadded and
    (68, 5, 18, 33, 3, 3, 1, 0),  # non-square kernels, strides 2 and 3 (row planes)
    (4, 7, 17, 32, 2, 3, 1, 1),
    (8, 9, 20, 17, 3, 3, 2, 1),
    (4, 11, 17, 33, 5, 5, 3, 2),
]


@pytest.mark.parametrize("backend, shape", [
    pytest.param(b, g, marks=[pytest.mark.slow] if b == "opencl" and i else [])
    for i, g in enumerate(IMPLICIT) for b in ("interpreter", "numba", "opencl")], indirect=["backend"])
def test_implicit_convolution_is_exact_on_every_backend(backend, shape):
    """i8 and u8 images (zero points at the type's ends), i8 weights of zero point 0 and u8 ones
    of zero point 128 (0 once shifted): the implicit GEMM, i32 out, two images."""
    c, h, wd, m, kh, kw, st, pad = shape
    for xdt, wdt, zw in ((np.uint8, np.int8, np.zeros(m, np.int8)), (np.int8, np.uint8, np.array([128], np.uint8))):
        x = data(xdt, (2, c, h, wd), np.iinfo(xdt).max)
        w = data(wdt, (m, c, kh, kw), np.iinfo(wdt).min)
        zx = np.array([np.iinfo(xdt).min + 3], xdt)
        geom = [kh, kw, st, st, pad, pad, 1, 1, (h + 2 * pad - kh) // st + 1, (wd + 2 * pad - kw) // st + 1]
        assert implicit_ok(x, w, zw, geom)
        want = _exact(x, w, zx, zw, kh, kw, st, pad)
        y = np.zeros(want.shape, np.int32)
        conv_int8_amx(x, w, y, zx, zw, geom, backend=backend, implicit=True)
        np.testing.assert_array_equal(y, want)


def _exact(x, w, zx, zw, kh, kw, st, pad):
    """Σ (x - zx)(w - zw) over a kh × kw window, stride st, the padding the zero point."""
    xs = np.pad(x.astype(np.int64) - int(np.asarray(zx).reshape(-1)[0]), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ws = w.astype(np.int64) - np.asarray(zw, np.int64).reshape(-1, 1, 1, 1)
    oh, ow = (xs.shape[2] - kh) // st + 1, (xs.shape[3] - kw) // st + 1
    return sum(np.einsum("nchw,mc->nmhw", xs[:, :, i:i + st * oh:st, j:j + st * ow:st], ws[:, :, i, j])
               for i in range(kh) for j in range(kw))


@pytest.mark.parametrize("backend", ["interpreter", "numba", pytest.param("opencl", marks=pytest.mark.slow)],
                         indirect=True)
def test_implicit_convolution_requantizes(backend):
    """Per-channel scales and bias, x's zero point folded with the weight sums, a clamp (fused
    Relu), u8 out, then i8 out; a weights' zero point that is not 0 takes the shifted packing instead, and
    asking the implicit GEMM for it is an error naming what it takes."""
    c, h, m = 64, 6, 48
    x, w = data(np.uint8, (1, c, h, h), 255), data(np.int8, (m, c, 3, 3), -128)
    zx, zw = np.array([131], np.uint8), np.zeros(m, np.int8)
    mult = RNG.uniform(1e-5, 1e-4, m).astype(np.float32)
    bias = RNG.integers(-50000, 50000, m).astype(np.int32)
    geom = _geom(3, 1, 1, h)
    want = requantized(exact_conv(x, w, zx, zw, 1, 1).transpose(0, 2, 3, 1), mult, bias, 100, np.uint8, 100,
                       250).transpose(0, 3, 1, 2)
    y = np.zeros(want.shape, np.uint8)
    conv_int8_amx(x, w, y, zx, zw, geom, mult, bias, 100, backend=backend, clamp=(100, 250), implicit=True)
    np.testing.assert_array_equal(y, want)
    acc = exact_conv(x, w, zx, zw, 1, 1).transpose(0, 2, 3, 1)  # i8 out, the type's own range
    y8 = np.zeros(y.shape, np.int8)
    conv_int8_amx(x, w, y8, zx, zw, geom, mult, bias, -3, backend=backend, implicit=True)
    np.testing.assert_array_equal(y8, requantized(acc, mult, bias, -3, np.int8).transpose(0, 3, 1, 2))
    zw1 = np.full(m, 2, np.int8)
    assert not implicit_ok(x, w, zw1, geom)
    with pytest.raises(ValueError, match="zero point is 0.*implicit=None"):
        conv_int8_amx(x, w, y, zx, zw1, geom, mult, bias, 100, backend=backend, implicit=True)


def _specs(*xs):
    from dsl.opgraph.spec import TensorSpec
    return [TensorSpec.of(x) for x in xs]


def test_convolutions_take_the_tiles_only_where_amx_runs(monkeypatch):
    x, w = data(np.uint8, (1, 128, 6, 6)), data(np.int8, (64, 128, 3, 3))
    zx, zw = np.array(1, np.uint8), np.array(0, np.int8)
    conv = ops.ConvInteger(pads=[1, 1, 1, 1])
    assert conv.select(*_specs(x, w, zx, zw), backend="numba") == ("amx" if amx_usable("numba") else "packed")
    shallow = data(np.uint8, (1, 64, 6, 6)), data(np.int8, (64, 64, 1, 1))  # the VNNI kernel is faster there
    assert conv.select(*_specs(*shallow, zx, zw), backend="numba") == "packed"
    # ... but not than the implicit GEMM on a stride-1 3×3 of 64 channels
    implicit = data(np.uint8, (1, 64, 6, 6)), data(np.int8, (64, 64, 3, 3))
    assert conv.select(*_specs(*implicit, zx, zw), backend="numba") == ("amx" if amx_usable("numba") else "packed")
    strided = data(np.uint8, (1, 32, 6, 6)), data(np.int8, (64, 32, 3, 3))  # 32 channels: only strided ones
    assert ops.ConvInteger(pads=[1, 1, 1, 1], strides=[2, 2]).select(*_specs(*strided, zx, zw), backend="numba") == \
        ("amx" if amx_usable("numba") else "packed")
    assert conv.select(*_specs(*strided, zx, zw), backend="numba") == "packed"
    assert conv.select(*_specs(x, w, zx, zw), backend="opencl") == "packed"
    grouped = ops.ConvInteger(group=2)
    assert grouped.select(*_specs(x, data(np.int8, (64, 64, 3, 3)), zx, zw), backend="numba") == "default"
    real = dsl.target
    for dropped in ({"amx"}, {"amx", "amx-tile", "amx-int8", "avx512f", "avx512vnni", "avx512bw"}):  # AVX2 too
        def fake(backend=None, dropped=dropped):
            t = real(backend)
            return dataclasses.replace(t, features=t.features - dropped)
        monkeypatch.setattr(dsl, "target", fake)
        assert conv.select(*_specs(x, w, zx, zw), backend="numba") == "packed"


@pytest.mark.skipif(not amx_usable("numba"), reason="this CPU or OS gives no AMX: convolutions take VNNI/dot4")
def test_quantized_convolution_model_on_tiles_matches_onnxruntime():
    """QLinearConv 1×1, 3×3 padded, then 3×3/2 (per-channel scales, bias; the 3×3 ones on the
    implicit GEMM), planned, against onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    c, h, m = 128, 7, 128
    inits = {"sx": np.array(0.02, np.float32), "zx": np.array(120, np.uint8),
             "w1": data(np.int8, (m, c, 1, 1)), "sw1": RNG.uniform(0.001, 0.01, m).astype(np.float32),
             "zw1": np.zeros(m, np.int8), "b1": RNG.integers(-3000, 3000, m).astype(np.int32),
             "w3": data(np.int8, (m, m, 3, 3)), "sw3": RNG.uniform(0.001, 0.01, m).astype(np.float32),
             "zw3": np.zeros(m, np.int8), "b3": RNG.integers(-3000, 3000, m).astype(np.int32),
             "sy": np.array(0.3, np.float32), "zy": np.array(110, np.uint8)}
    nodes = [helper.make_node("QLinearConv", ["x", "sx", "zx", "w1", "sw1", "zw1", "sy", "zy", "b1"], ["y1"]),
             helper.make_node("QLinearConv", ["y1", "sy", "zy", "w3", "sw3", "zw3", "sy", "zy", "b3"], ["y3"],
                              pads=[1, 1, 1, 1]),
             helper.make_node("QLinearConv", ["y3", "sy", "zy", "w3", "sw3", "zw3", "sy", "zy", "b3"], ["y"],
                              pads=[1, 1, 1, 1], strides=[2, 2])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, c, h, h])],
                   [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, m, 4, 4])], inits)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = dsl.load_onnx(model, backend="numba")
    x = data(np.uint8, (1, c, h, h), 255)
    np.testing.assert_array_equal(compiled.run({"x": x})["y"], session.run(None, {"x": x})[0])
    assert set(compiled.selected({"x": x}).values()) == {"amx"}
    assert "3 of 3 nodes planned" in str(compiled)
