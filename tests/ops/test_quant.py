"""DataConvert, QuantizeLinear and DequantizeLinear on every backend against numpy (formulas: ops/quant.py)."""
import ml_dtypes
import numpy as np
import pytest

import dsl
import ops

RNG = np.random.default_rng(9)


def quant_ref(x, scale, zp, dtype):
    info = np.iinfo(dtype)
    return np.clip(np.rint(x / scale) + zp, info.min, info.max).astype(dtype)


def test_data_convert_quantize_dequantize(backend):
    x = (RNG.standard_normal(60) * 3).astype(np.float32)
    x[:8] = [0.25, 0.75, 1.25, -0.25, -0.75, 1000.0, -1000.0, 0.0]  # ties round to even; saturation
    q = ops.DataConvert(x, dtype=dsl.u8, scale=0.5, zero_point=128, backend=backend)
    assert q.dtype == np.uint8
    np.testing.assert_array_equal(q, quant_ref(x, np.float32(0.5), 128, np.uint8))
    q8 = ops.DataConvert(x, dtype=dsl.i8, scale=0.5, zero_point=-3, backend=backend)
    np.testing.assert_array_equal(q8, quant_ref(x, np.float32(0.5), -3, np.int8))
    d = ops.DataConvert(q8, dtype=dsl.f32, scale=0.5, zero_point=-3, backend=backend)
    np.testing.assert_array_equal(d, (q8.astype(np.float32) + 3) * np.float32(0.5))


def test_data_convert_rnn_cell_state_golden(backend):
    out = np.array([.781534, .771447, .830002, .749713, .711524, .74155, .77355, .717427], np.float32)
    state = ops.DataConvert(out, dtype=dsl.u8, scale=0.0036, zero_point=0, backend=backend)
    assert state.tolist() == [217, 214, 231, 208, 198, 206, 215, 199]


def test_data_convert_casts(backend):
    x = (RNG.standard_normal((3, 7)) * 100).astype(np.float32)
    h = ops.DataConvert(x, dtype=dsl.f16, backend=backend)
    np.testing.assert_array_equal(h, x.astype(np.float16))
    bf = ops.DataConvert(x, dtype=dsl.bf16, backend=backend)
    assert bf.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(bf.view(np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))
    back = ops.DataConvert(h, dtype=dsl.f32, backend=backend)
    np.testing.assert_array_equal(back, h.astype(np.float32))
    np.testing.assert_array_equal(ops.DataConvert(x, dtype=dsl.i32, backend=backend), x.astype(np.int32))
    np.testing.assert_array_equal(ops.DataConvert(x, dtype=dsl.f64, backend=backend), x.astype(np.float64))


def test_data_convert_quantized_tensors_in_a_graph(backend):
    """The quantized tensor carries (scale, zero point) in its spec; DataConvert back to float
    reads it from the input specs its run() is given, or takes explicit ones."""
    g = dsl.Graph("qdq")
    x = g.input("x", (None, 4), dsl.f32)
    q = ops.DataConvert(x, dtype=dsl.u8, scale=0.1, zero_point=10)
    assert q.spec.quant == dsl.Quant(0.1, 10) and q.spec.quant[:2] == (0.1, 10)
    g.output(ops.DataConvert(q, dtype=dsl.f32), "y")
    g.output(ops.DataConvert(q, dtype=dsl.f32, scale=0.2, zero_point=0), "y2")
    xv = RNG.uniform(-1, 10, (3, 4)).astype(np.float32)
    qv = quant_ref(xv, np.float32(0.1), 10, np.uint8)
    got = g.compile(backend=backend).run({"x": xv})
    np.testing.assert_allclose(got["y"], (qv.astype(np.float32) - 10) * np.float32(0.1), rtol=1e-6)
    np.testing.assert_allclose(got["y2"], qv.astype(np.float32) * np.float32(0.2), rtol=1e-6)


def test_data_convert_per_axis_input_needs_explicit_scale():
    g = dsl.Graph("qdq")
    q = g.input("q", (2, 3), dsl.i8, quant=dsl.Quant((0.1, 0.2), (0, 1), axis=0))
    with pytest.raises(dsl.VerifyError, match=r"DataConvert dequantizes per tensor; input i8\[2,3\] is "
                                              r"quantized per axis .*along axis 0"):
        ops.DataConvert(q, dtype=dsl.f32)


@pytest.mark.parametrize("qtype", [np.uint8, np.int8, np.int16])
def test_quantize_dequantize_linear_per_tensor_and_axis(backend, qtype):
    x = (RNG.standard_normal((2, 3, 4)) * 4).astype(np.float32)
    info = np.iinfo(qtype)
    scale = np.array([0.05, 0.1, 0.2], np.float32)
    zp = RNG.integers(max(info.min, -20), min(info.max, 20), 3).astype(qtype)
    y = ops.QuantizeLinear(x, scale, zp, axis=1, backend=backend)
    assert y.dtype == qtype
    np.testing.assert_array_equal(y, quant_ref(x, scale[:, None], zp[:, None], qtype))
    dq = ops.DequantizeLinear(y, scale, zp, axis=1, backend=backend)
    np.testing.assert_array_equal(dq, (y.astype(np.float32) - zp[:, None]) * scale[:, None])
    s0 = np.float32(0.07)
    y0 = ops.QuantizeLinear(x, s0, np.array(zp[0]), backend=backend)  # scalar scale and zero point
    np.testing.assert_array_equal(y0, quant_ref(x, s0, zp[0], qtype))
    ylast = ops.QuantizeLinear(x, np.full(4, 0.3, np.float32), np.zeros(4, qtype), axis=-1, backend=backend)
    np.testing.assert_array_equal(ylast, quant_ref(x, np.float32(0.3), 0, qtype))


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
def test_per_tensor_quantize_dequantize_kernels(backend, qtype):
    """One scale and zero point: the elementwise kernels (select "per_tensor"), with ties to even,
    saturation on both sides and a length that is no multiple of a vector."""
    from dsl.opgraph.spec import TensorSpec
    s, z = np.float32(0.5), np.array(3 if qtype == np.int8 else 130, qtype)
    x = np.concatenate([np.arange(-4, 4, 0.25), [1e6, -1e6, 0.25, 0.75, -0.25]]).astype(np.float32)  # k/2 ties
    specs = [TensorSpec.of(a) for a in (x, np.asarray(s), z)]
    assert ops.QuantizeLinear().select(*specs, backend=backend) == "per_tensor"
    y = ops.QuantizeLinear(x, s, z, backend=backend)
    np.testing.assert_array_equal(y, quant_ref(x, s, z, qtype))
    assert ops.DequantizeLinear().select(*[TensorSpec.of(a) for a in (y, np.asarray(s), z)], backend=backend) == "per_tensor"
    np.testing.assert_array_equal(ops.DequantizeLinear(y, s, z, backend=backend),
                                  (y.astype(np.float32) - np.float32(z)) * s)
    acc = RNG.integers(-3000, 3000, 37).astype(np.int32)  # i32 data, as a bias is quantized
    np.testing.assert_array_equal(ops.DequantizeLinear(acc, np.float32(0.01), backend=backend),
                                  acc.astype(np.float32) * np.float32(0.01))


def test_quantize_linear_defaults_blocked_and_f16(backend):
    x = (RNG.standard_normal((2, 3, 5)) * 4).astype(np.float32)
    y = ops.QuantizeLinear(x, np.float32(0.1), backend=backend)  # no zero point: u8, zero point 0
    np.testing.assert_array_equal(y, quant_ref(x, np.float32(0.1), 0, np.uint8))
    scale = RNG.uniform(0.05, 0.2, (2, 3, 2)).astype(np.float32)  # blocks of 3 along axis 2 (last is short)
    zp = RNG.integers(-5, 5, (2, 3, 2)).astype(np.int8)
    yb = ops.QuantizeLinear(x, scale, zp, axis=2, block_size=3, backend=backend)
    full_s, full_z = np.repeat(scale, 3, axis=2)[:, :, :5], np.repeat(zp, 3, axis=2)[:, :, :5]
    np.testing.assert_array_equal(yb, quant_ref(x, full_s, full_z, np.int8))
    db = ops.DequantizeLinear(yb, scale, zp, axis=2, block_size=3, backend=backend)
    np.testing.assert_array_equal(db, (yb.astype(np.float32) - full_z) * full_s)
    dh = ops.DequantizeLinear(yb, scale.astype(np.float16), zp, axis=2, block_size=3, backend=backend)
    assert dh.dtype == np.float16
    np.testing.assert_array_equal(dh, ((yb.astype(np.float32) - full_z) * full_s.astype(np.float16)).astype(np.float16))


def test_eager_equals_graph(backend):
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    scale = np.array([0.1, 0.2, 0.3], np.float32)
    g = dsl.Graph("q")
    xi = g.input("x", (None, 3), dsl.f32)
    q = ops.QuantizeLinear(xi, g.constant("s", scale), g.constant("z", np.array([1, 2, 3], np.int8)), axis=1)
    g.output(ops.DequantizeLinear(q, g.constant("s2", scale), g.constant("z2", np.array([1, 2, 3], np.int8)),
                                  axis=1), "y")
    eager = ops.DequantizeLinear(ops.QuantizeLinear(x, scale, np.array([1, 2, 3], np.int8), backend=backend),
                                 scale, np.array([1, 2, 3], np.int8), backend=backend)
    np.testing.assert_array_equal(g.compile(backend=backend).run({"x": x})["y"], eager)


def test_errors_name_the_problem():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(dsl.VerifyError, match="per-axis scale f32\\[4\\] needs 3 entries"):
        ops.QuantizeLinear(x, np.ones(4, np.float32), axis=1)
    with pytest.raises(dsl.VerifyError, match="zero point .* must have the scale's shape"):
        ops.QuantizeLinear(x, np.ones(3, np.float32), np.zeros(2, np.uint8))
    with pytest.raises(dsl.VerifyError, match="axis 5 is out of range"):
        ops.QuantizeLinear(x, np.ones(3, np.float32), axis=5)
    with pytest.raises(dsl.VerifyError, match="output type i32 is not supported"):
        ops.QuantizeLinear(x, np.float32(1), np.int32(0))
    with pytest.raises(dsl.VerifyError, match="scale must be a float tensor"):
        ops.QuantizeLinear(x, np.int32(1))
    with pytest.raises(dsl.VerifyError, match="blocked scale"):
        ops.QuantizeLinear(x, np.ones((2, 3), np.float32), axis=1, block_size=2)
    with pytest.raises(dsl.VerifyError, match="DequantizeLinear input must be one of"):
        ops.DequantizeLinear(x, np.float32(1))
    with pytest.raises(dsl.VerifyError, match="zero point .* must have the input's dtype u8"):
        ops.DequantizeLinear(x.astype(np.uint8), np.float32(1), np.int8(0))
    with pytest.raises(dsl.VerifyError, match="DataConvert scale must be a positive finite float"):
        ops.DataConvert(x, dtype=dsl.u8, scale=0.0)
    with pytest.raises(dsl.VerifyError, match="zero_point 300 is outside the range of u8"):
        ops.DataConvert(x, dtype=dsl.u8, scale=1.0, zero_point=300)
    with pytest.raises(TypeError, match="DataConvert param 'dtype' expects dsl.DType"):
        ops.DataConvert(x, dtype="complex")
