"""A QDQ-quantized ONNX model (QuantizeLinear / DequantizeLinear around Conv and MatMul, as
onnxruntime.quantization writes): the quantization travels through the loaded graph, the
compiler turns DQ -> Conv/MatMul -> Q into QLinearConv / QLinearMatMul (i32 sums), and the
results match onnxruntime and the float QDQ computation (ops/qdq_fusion.py)."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as H  # noqa: E402
from onnx import numpy_helper as NH  # noqa: E402

import dsl  # noqa: E402
import ops  # noqa: E402
from ops.quant_conv import QLinearConv  # noqa: E402
from ops.quant_matmul import QLinearMatMul  # noqa: E402

RNG = np.random.default_rng(11)
SX, ZX = 0.05, 128          # input x: u8
SY, ZY = 0.08, 100          # conv output: u8
SO, ZO = 0.1, -5            # matmul output: i8


def qdq_model(per_channel: bool = True, bias_as_dq: bool = False):
    """x f32 (2,3,6,6) -> Q/DQ -> Conv (i8 weights, per channel) -> Q -> MaxPool -> Reshape
    -> DQ -> MatMul (i8 weights) -> Q -> DQ -> y f32 (2, 5)."""
    w = RNG.integers(-60, 60, (4, 3, 3, 3)).astype(np.int8)
    ws = (RNG.uniform(0.002, 0.01, 4) if per_channel else np.array(0.005)).astype(np.float32)
    bias = RNG.uniform(-0.5, 0.5, 4).astype(np.float32)
    w2 = RNG.integers(-100, 100, (16, 5)).astype(np.int8)
    inits = {"sx": np.array(SX, np.float32), "zx": np.array(ZX, np.uint8),
             "w": w, "ws": ws, "wz": np.zeros(ws.shape, np.int8),
             "sy": np.array(SY, np.float32), "zy": np.array(ZY, np.uint8),
             "w2": w2, "w2s": np.array(0.01, np.float32), "w2z": np.array(0, np.int8),
             "so": np.array(SO, np.float32), "zo": np.array(ZO, np.int8),
             "shape": np.array([2, 16], np.int64)}
    nodes = [H.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             H.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             H.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0)]
    if bias_as_dq:
        bscale = (np.float32(SX) * ws.reshape(-1)).astype(np.float32)
        inits["bq"] = np.rint(bias / bscale).astype(np.int32)
        inits["bs"] = bscale if per_channel else bscale.reshape(())
        nodes.append(H.make_node("DequantizeLinear", ["bq", "bs"], ["b"], axis=0))
    else:
        inits["b"] = bias
    nodes += [H.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]),
              H.make_node("QuantizeLinear", ["c", "sy", "zy"], ["cq"]),
              H.make_node("MaxPool", ["cq"], ["p"], kernel_shape=[3, 3], strides=[3, 3]),
              H.make_node("Reshape", ["p", "shape"], ["r"]),
              H.make_node("DequantizeLinear", ["r", "sy", "zy"], ["rd"]),
              H.make_node("DequantizeLinear", ["w2", "w2s", "w2z"], ["w2d"]),
              H.make_node("MatMul", ["rd", "w2d"], ["m"]),
              H.make_node("QuantizeLinear", ["m", "so", "zo"], ["mq"]),
              H.make_node("DequantizeLinear", ["mq", "so", "zo"], ["y"])]
    graph = H.make_graph(nodes, "qdq", [H.make_tensor_value_info("x", TP.FLOAT, (2, 3, 6, 6))],
                         [H.make_tensor_value_info("y", TP.FLOAT, None)],
                         [NH.from_array(v, k) for k, v in inits.items()])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def f32_quant(scale, zero_point):
    """The Quant of an f32 scale constant: the scale is the f32 value, as a Python float."""
    return dsl.Quant(float(np.float32(scale)), zero_point)


def ort_run(model, x, optimize: bool):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    if not optimize:  # the float QDQ computation, exactly as written
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def test_quantization_travels_through_a_loaded_qdq_graph():
    g = dsl.onnx.to_graph(qdq_model())
    t = g.tensors
    assert t["xq"].spec.quant == f32_quant(SX, ZX)
    assert t["cq"].spec.quant == f32_quant(SY, ZY)
    assert t["p"].spec.quant == f32_quant(SY, ZY)  # MaxPool moves data
    assert t["r"].spec.quant == f32_quant(SY, ZY)  # so does Reshape
    assert t["mq"].spec.quant == f32_quant(SO, ZO)
    assert t["xd"].spec.quant is None and t["y"].spec.quant is None  # float tensors
    # the i8 weights read by a DequantizeLinear carry its quantization (per output channel)
    ws = tuple(float(v) for v in NH.to_array(next(i for i in qdq_model().graph.initializer if i.name == "ws")))
    assert t["w"].spec.quant.axis == 0 and len(t["w"].spec.quant.scale) == 4
    assert t["w2"].spec.quant == f32_quant(0.01, 0)
    assert len(ws) == 4


@pytest.mark.parametrize("per_channel,bias_as_dq", [(True, False), (False, True)])
def test_qdq_conv_and_matmul_run_as_integer_ops(backend, per_channel, bias_as_dq):
    model = qdq_model(per_channel, bias_as_dq)
    m = dsl.load_onnx(model, backend=backend)
    kinds = [type(n.op) for n in m.graph.nodes]
    assert QLinearConv in kinds and QLinearMatMul in kinds
    assert ops.Conv not in kinds and ops.MatMul not in kinds
    assert kinds.count(ops.DequantizeLinear) == 1  # only the model output's DQ is left
    x = RNG.uniform(-3, 3, (2, 3, 6, 6)).astype(np.float32)
    y = m.run({"x": x})["y"]
    # onnxruntime's optimizer makes the same integer nodes: the same results
    np.testing.assert_array_equal(y, ort_run(model, x, optimize=True))
    # the float QDQ computation may round an intermediate value the other way: one step apart at most
    steps = np.rint((y - ort_run(model, x, optimize=False)) / np.float32(SO))
    assert np.abs(steps).max() <= 1
    if backend != "interpreter":
        return  # (the float graph's Conv and MatMul kernels would cost compiles for no new check)
    floaty = dsl.load_onnx(model, backend=backend, fuse=False)  # the float QDQ graph, run by opdsl
    assert ops.Conv in [type(n.op) for n in floaty.graph.nodes]
    steps = np.rint((y - floaty.run({"x": x})["y"]) / np.float32(SO))
    assert np.abs(steps).max() <= 1


def test_qdq_rewrite_leaves_unsupported_patterns_in_float():
    """A per-axis quantized output (not expressible by QLinearMatMul) keeps the float MatMul."""
    g = dsl.Graph("qdq")
    a = g.input("a", (2, 4), dsl.u8)
    ad = ops.DequantizeLinear(a, g.constant("sa", np.float32(0.1)), g.constant("za", np.uint8(3)))
    b = g.constant("b", RNG.integers(-9, 9, (4, 3)).astype(np.int8))
    bd = ops.DequantizeLinear(b, g.constant("sb", np.float32(0.2)))
    m = ops.MatMul(ad, bd)
    g.output(ops.QuantizeLinear(m, g.constant("so", np.array([0.1, 0.2], np.float32)),
                                g.constant("zo", np.zeros(2, np.int8)), axis=0), "y")
    model = g.compile(backend="interpreter")
    assert ops.MatMul in [type(n.op) for n in model.graph.nodes]
    av = RNG.integers(0, 255, (2, 4)).astype(np.uint8)
    ref = (av.astype(np.float32) - 3) * np.float32(0.1) @ (b.value.astype(np.float32) * np.float32(0.2))
    want = np.clip(np.rint(ref / np.array([[0.1], [0.2]], np.float32)), -128, 127).astype(np.int8)
    assert np.abs(model.run({"a": av})["y"].astype(int) - want).max() <= 1
