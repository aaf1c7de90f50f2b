"""Exported function bodies are standard ONNX where a standard op exists (FullyConnected ->
Gemm / MatMul, DataConvert -> QuantizeLinear / DequantizeLinear / Cast, FusedConv -> Conv +
Add + activation), so onnxruntime runs exported composed ops; ai.onnx dtype attributes
(Cast's ``to``) are element type codes.  Every export passes ``onnx.checker`` with
``full_check`` and is compared with opdsl on every backend."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import dsl  # noqa: E402
import ops  # noqa: E402

RNG = np.random.default_rng(11)
DOMAIN = "com.example.standard"


@dsl.composed("RNNCellStd", domain=DOMAIN)
def rnn_cell(x, w, b, h, r):
    """TIM-VX RNNCell: out = tanh(x·wᵀ + b + h·rᵀ), state = out quantized to u8."""
    out = ops.Tanh(ops.Add(ops.FullyConnected(x, w, b), ops.FullyConnected(h, r)))
    return out, ops.DataConvert(out, dtype=dsl.u8, scale=0.0036, zero_point=0)


@dsl.composed("ConvertAll", domain=DOMAIN)
def convert_all(x, q):
    """Every DataConvert mode: quantize (f16 input, i8 and i16), dequantize (to f32 with the guide's
    u8 offset -127, outside u8; to f16 with an offset in range), cast."""
    return (ops.DataConvert(ops.DataConvert(x, dtype=dsl.f16), dtype=dsl.i8, scale=0.05, zero_point=-3),
            ops.DataConvert(x, dtype=dsl.i16, scale=0.001, zero_point=7),
            ops.DataConvert(q, dtype=dsl.f32, scale=0.02, zero_point=-127),
            ops.DataConvert(q, dtype=dsl.f16, scale=0.02, zero_point=128),
            ops.DataConvert(x, dtype=dsl.i32))


@dsl.composed("DequantOwn", domain=DOMAIN)
def dequant_own(q):
    """DataConvert without scale= dequantizes with its input's own quantization."""
    return ops.DataConvert(q, dtype=dsl.f32)


@dsl.composed("Dense3d", domain=DOMAIN)
def dense3d(x, w, b, xi, wi):
    """FullyConnected on 3-D input (MatMul path) with bias, and on int32 without."""
    return ops.FullyConnected(x, w, b), ops.FullyConnected(xi, wi)


@dsl.composed("ConvBlock", domain=DOMAIN)
def conv_block(x, w, b, z):
    return (ops.FusedConv(x, w, b, z, activation="Relu", pads=[1, 1, 1, 1]),
            ops.FusedConv(x, w, b, activation="Clip", activation_params=(-0.5, 0.5), pads=[1, 1, 1, 1]),
            ops.FusedConv(x, w, activation="LeakyRelu", activation_params=(0.1,), pads=[1, 1, 1, 1]),
            ops.FusedConv(x, w, b, z, pads=[1, 1, 1, 1]))


def _export_run(g, feeds):
    """The checker-clean export, its function bodies' (domain, op_type)s and onnxruntime's outputs."""
    model = g.to_onnx()
    onnx.checker.check_model(model, full_check=True)
    bodies = {f.name: [(n.domain, n.op_type) for n in f.node] for f in model.functions}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return model, bodies, dict(zip(names, sess.run(None, feeds)))


def test_rnn_cell_runs_in_onnxruntime(backend):
    g = dsl.Graph("cell")
    x = g.input("x", (None, 3), dsl.f32)
    h = g.input("h", (None, 4), dsl.f32)
    w = g.constant("w", RNG.standard_normal((4, 3)).astype(np.float32) * 0.5)
    b = g.constant("b", RNG.standard_normal(4).astype(np.float32) * 0.5)
    r = g.constant("r", RNG.standard_normal((4, 4)).astype(np.float32) * 0.5)
    out, state = rnn_cell(x, w, b, h, r)
    g.output(out, "out")
    g.output(state, "state")
    feeds = {"x": RNG.standard_normal((5, 3)).astype(np.float32), "h": RNG.standard_normal((5, 4)).astype(np.float32)}
    model, bodies, theirs = _export_run(g, feeds)
    assert bodies["RNNCellStd"] == [("", "Gemm"), ("", "Gemm"), ("", "Add"), ("", "Tanh"), ("", "Constant"),
                                    ("", "Constant"), ("", "QuantizeLinear")]
    ours = g.compile(backend=backend).run(feeds)
    np.testing.assert_allclose(ours["out"], theirs["out"], rtol=1e-5, atol=1e-6)
    assert theirs["state"].dtype == np.uint8
    assert np.abs(ours["state"].astype(int) - theirs["state"].astype(int)).max() <= 1  # a tie may round apart
    # the lowered body is what opdsl runs when the composed op is not registered
    reloaded = dsl.load_onnx(model, backend=backend).run(feeds)
    np.testing.assert_array_equal(reloaded["state"], ours["state"])


def test_every_data_convert_mode(backend):
    g = dsl.Graph("convert")
    x = g.input("x", (None,), dsl.f32)
    q = g.input("q", (None,), dsl.u8)
    for name, t in zip(("q8", "q16", "dq32", "dq16", "cast"), convert_all(x, q)):
        g.output(t, name)
    feeds = {"x": np.linspace(-5, 5, 41).astype(np.float32) + np.float32(0.013),
             "q": np.arange(0, 256, 5).astype(np.uint8)}
    _, bodies, theirs = _export_run(g, feeds)
    kinds = {t for _, t in bodies["ConvertAll"]}
    assert kinds == {"Cast", "Constant", "QuantizeLinear", "DequantizeLinear", "Sub", "Mul"}
    ours = g.compile(backend=backend).run(feeds)
    for name in ("q8", "q16", "dq32", "dq16", "cast"):
        assert ours[name].dtype == theirs[name].dtype, name
        np.testing.assert_allclose(ours[name].astype(np.float64), theirs[name].astype(np.float64),
                                   rtol=1e-3, atol=1e-6, err_msg=name)


def test_fully_connected_matmul_forms(backend):
    g = dsl.Graph("dense")
    x = g.input("x", (2, None, 3), dsl.f32)
    xi = g.input("xi", (None, 3), dsl.i32)
    w = g.constant("w", RNG.standard_normal((4, 3)).astype(np.float32))
    b = g.constant("b", RNG.standard_normal(4).astype(np.float32))
    wi = g.constant("wi", RNG.integers(-5, 5, (2, 3)).astype(np.int32))
    y, yi = dense3d(x, w, b, xi, wi)
    g.output(y, "y")
    g.output(yi, "yi")
    feeds = {"x": RNG.standard_normal((2, 5, 3)).astype(np.float32),
             "xi": RNG.integers(-9, 9, (6, 3)).astype(np.int32)}
    _, bodies, theirs = _export_run(g, feeds)
    assert [t for _, t in bodies["Dense3d"]] == ["Transpose", "MatMul", "Add", "Transpose", "MatMul"]
    ours = g.compile(backend=backend).run(feeds)
    np.testing.assert_allclose(ours["y"], theirs["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ours["yi"], theirs["yi"])
    np.testing.assert_array_equal(ours["yi"], feeds["xi"] @ g.constants["wi"].T)


def test_fused_conv_as_conv_add_activation(backend):
    g = dsl.Graph("convs")
    x = g.input("x", (1, 2, 5, 5), dsl.f32)
    w = g.constant("w", RNG.standard_normal((3, 2, 3, 3)).astype(np.float32) * 0.3)
    b = g.constant("b", RNG.standard_normal(3).astype(np.float32) * 0.3)
    z = g.input("z", (1, 3, 5, 5), dsl.f32)
    for k, t in enumerate(conv_block(x, w, b, z)):
        g.output(t, f"y{k}")
    feeds = {"x": RNG.standard_normal((1, 2, 5, 5)).astype(np.float32),
             "z": RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)}
    _, bodies, theirs = _export_run(g, feeds)
    kinds = [t for _, t in bodies["ConvBlock"]]
    assert kinds == ["Conv", "Add", "Relu", "Conv", "Constant", "Constant", "Clip", "Conv", "LeakyRelu",
                     "Conv", "Add"]
    ours = g.compile(backend=backend).run(feeds)
    for k in range(4):
        np.testing.assert_allclose(ours[f"y{k}"], theirs[f"y{k}"], rtol=1e-4, atol=1e-5)


def test_cast_to_is_an_element_type_code(backend):
    g = dsl.Graph("cast")
    x = g.input("x", (None, 3), dsl.f32)
    g.output(ops.Cast(x, to=dsl.f16), "h")
    g.output(ops.Cast(x, to=dsl.i64), "i")
    model = g.to_onnx()
    to = [onnx.helper.get_attribute_value(n.attribute[0]) for n in model.graph.node]
    assert to == [onnx.TensorProto.FLOAT16, onnx.TensorProto.INT64]
    feeds = {"x": (RNG.standard_normal((4, 3)) * 9).astype(np.float32)}
    _, _, theirs = _export_run(g, feeds)
    back = dsl.load_onnx(model, backend=backend).run(feeds)  # the code reads back as the dtype
    for name in ("h", "i"):
        assert back[name].dtype == theirs[name].dtype
        np.testing.assert_array_equal(back[name], theirs[name])


def test_unexpressible_in_the_opset_stays_custom():
    g = dsl.Graph("old")
    g.opset_imports[""] = 19  # QuantizeLinear to i16 needs opset 21
    x = g.input("x", (3,), dsl.f32)
    y, = convert_all(x, g.input("q", (3,), dsl.u8))[1:2]
    g.output(y, "y")
    model = g.to_onnx()
    onnx.checker.check_model(model, full_check=True)
    body = [(n.domain, n.op_type) for n in model.functions[0].node]
    assert ("com.opdsl", "DataConvert") in body and ("", "QuantizeLinear") in body
    assert {o.domain: o.version for o in model.opset_import}["com.opdsl"] == 1


def test_scalar_constants_stay_scalars():
    """A 0-d constant (a per-tensor scale) is exported 0-d, in the graph and in function bodies:
    a 1-element 1-D scale would be per-axis to a strict runtime."""
    g = dsl.Graph("scalars")
    x = g.input("x", (2, 4), dsl.f32)
    s = g.constant("s", np.array(0.5, np.float32))
    g.output(ops.Mul(x, s), "y")
    g.output(rnn_cell(x, g.constant("w", np.eye(4, dtype=np.float32)),
                      g.constant("b", np.zeros(4, np.float32)), x, g.constant("r", np.eye(4, dtype=np.float32)))[1],
             "state")
    model = g.to_onnx()
    assert [list(t.dims) for t in model.graph.initializer if t.name == "s"] == [[]]
    consts = [n for f in model.functions for n in f.node if n.op_type == "Constant"]
    assert consts and all(list(n.attribute[0].t.dims) == [] for n in consts)


def test_data_convert_with_the_inputs_own_quantization(backend):
    """Without scale= a DataConvert to float dequantizes with its input's quantization, which a
    function body (shared by every node of that op) cannot know: it stays a com.opdsl node."""
    g = dsl.Graph("dequant_own")
    q = g.input("q", (None,), dsl.u8, quant=dsl.Quant(0.5, 3))
    g.output(dequant_own(q), "y")
    feeds = {"q": np.arange(0, 256, 7).astype(np.uint8)}
    model = g.to_onnx()
    onnx.checker.check_model(model, full_check=True)
    body = {f.name: [(n.domain, n.op_type) for n in f.node] for f in model.functions}["DequantOwn"]
    assert body == [("com.opdsl", "DataConvert")]
    ours = g.compile(backend=backend).run(feeds)
    np.testing.assert_array_equal(ours["y"], (feeds["q"].astype(np.float32) - 3) * 0.5)
