"""Conv graph rewrites (ops/conv_fusion.py): BatchNormalization folding and the FusedConv
epilogue (residual Add, Relu / Clip / LeakyRelu), against onnxruntime, fused and unfused,
on every backend; plus the cases that must not fuse and the unfused BN and Clip ops."""
import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

import dsl
import ops
from dsl.opgraph import fusion
from ops.conv_fusion import FusedConv

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(11)
C = 4  # channels in and out: small, and the same for every model so kernels are shared
HW = 5


def conv_inits(prefix="", bias=True, channels=C, group=1):
    w = RNG.standard_normal((channels, channels // group, 3, 3)).astype(np.float32)
    out = [nh.from_array(w, prefix + "w")]
    if bias:
        out.append(nh.from_array(RNG.standard_normal(channels).astype(np.float32), prefix + "b"))
    return out


def bn_inits(prefix="", channels=C):
    values = {"scale": RNG.uniform(0.5, 2.0, channels), "beta": RNG.standard_normal(channels),
              "mean": RNG.standard_normal(channels), "var": RNG.uniform(0.2, 2.0, channels)}
    return [nh.from_array(v.astype(np.float32), prefix + k) for k, v in values.items()]


def conv(x, y, prefix="", bias=True, group=1):
    return h.make_node("Conv", [x, prefix + "w"] + ([prefix + "b"] if bias else []), [y], pads=[1, 1, 1, 1],
                       group=group)


def bn(x, y, prefix="", **attrs):
    return h.make_node("BatchNormalization", [x] + [prefix + k for k in ("scale", "beta", "mean", "var")], [y],
                       **attrs)


def model(nodes, inits, outputs=("y",), opset=15, batch=1, channels=C, extra_inputs=()):
    inputs = [h.make_tensor_value_info("x", TP.FLOAT, [batch, channels, HW, HW])] + list(extra_inputs)
    outs = [h.make_tensor_value_info(o, TP.FLOAT, None) for o in outputs]
    graph = h.make_graph(nodes, "fusion_test", inputs, outs, inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def check(proto, backend, fused_types, unfused_types, feeds=None):
    """Fused and unfused models both match onnxruntime; the fused graph has ``fused_types``."""
    feeds = feeds or {"x": RNG.standard_normal((1, C, HW, HW)).astype(np.float32)}
    ref = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    models = {}
    for fuse, types in ((True, fused_types), (False, unfused_types)):
        m = models[fuse] = dsl.load_onnx(proto, backend=backend, fuse=fuse)
        assert [n.op_type for n in m.graph.nodes] == types, f"fuse={fuse}"
        got = m.run(feeds)
        for name, r in zip([o.name for o in proto.graph.output], ref):
            # f32 sums of ~150 products: the absolute error scales with the output's magnitude (a value
            # near 0 by cancellation among values of 30 is off by ~1e-4 in onnxruntime's order or ours)
            atol = 1e-5 * max(10.0, float(np.abs(r).max()))
            np.testing.assert_allclose(got[name], r, rtol=1e-4, atol=atol, err_msg=f"fuse={fuse} output {name}")
    return models[True]


def test_conv_bn_folds_into_the_conv(backend):
    # a Conv without bias: the folded Conv gets one
    proto = model([conv("x", "c", bias=False), bn("c", "y", epsilon=1e-3)], conv_inits(bias=False) + bn_inits())
    check(proto, backend, ["Conv"], ["Conv", "BatchNormalization"])


@pytest.mark.parametrize("act", ["Relu", "LeakyRelu", "Clip11", "Clip6"])
def test_conv_activation_becomes_a_fused_conv(backend, act):
    inits, opset = conv_inits(), 15
    if act == "Relu":
        node = h.make_node("Relu", ["c"], ["y"])
    elif act == "LeakyRelu":
        node = h.make_node("LeakyRelu", ["c"], ["y"], alpha=0.2)
    elif act == "Clip11":
        inits += [nh.from_array(np.array(-0.5, np.float32), "lo"), nh.from_array(np.array(1.0, np.float32), "hi")]
        node = h.make_node("Clip", ["c", "lo", "hi"], ["y"])
    else:
        node, opset = h.make_node("Clip", ["c"], ["y"], min=0.0, max=6.0), 10
    proto = model([conv("x", "c"), node], inits, opset=opset)
    check(proto, backend, ["FusedConv"], ["Conv", "Clip" if act.startswith("Clip") else act])


def test_clip_with_only_a_max_fuses_unbounded_below(backend):
    inits = conv_inits() + [nh.from_array(np.array(0.25, np.float32), "hi")]
    proto = model([conv("x", "c"), h.make_node("Clip", ["c", "", "hi"], ["y"])], inits)
    m = check(proto, backend, ["FusedConv"], ["Conv", "Clip"])
    assert m.graph.nodes[0].op.activation_params == (-np.inf, 0.25)


def test_conv_bn_relu_is_one_node(backend):
    proto = model([conv("x", "c"), bn("c", "n"), h.make_node("Relu", ["n"], ["y"])], conv_inits() + bn_inits())
    m = check(proto, backend, ["FusedConv"], ["Conv", "BatchNormalization", "Relu"])
    assert m.stats["fused"] == 2 and m.graph.nodes[0].op.activation == "Relu"


def test_resnet_block_is_two_nodes(backend):
    """conv1 -> BN -> Relu -> conv2 -> BN -> Add(x) -> Relu, and a shortcut conv -> BN
    feeding a second Add: every Conv takes its BN, the Adds and Relus."""
    nodes = [conv("x", "c1", "a"), bn("c1", "n1", "a"), h.make_node("Relu", ["n1"], ["r1"]),
             conv("r1", "c2", "b"), bn("c2", "n2", "b"), h.make_node("Add", ["n2", "x"], ["s"]),
             h.make_node("Relu", ["s"], ["y"]),
             conv("y", "c3", "c"), bn("c3", "n3", "c"), conv("y", "c4", "d"),
             h.make_node("Add", ["c4", "n3"], ["s2"]), h.make_node("Relu", ["s2"], ["y2"])]
    inits = sum((conv_inits(p) + bn_inits(p) for p in "abc"), []) + conv_inits("d")
    proto = model(nodes, inits, outputs=("y", "y2"))
    m = check(proto, backend, ["FusedConv"] * 2 + ["Conv", "FusedConv"],
              ["Conv", "BatchNormalization", "Relu", "Conv", "BatchNormalization", "Add", "Relu",
               "Conv", "BatchNormalization", "Conv", "Add", "Relu"])
    residual = m.graph.nodes[1]
    assert residual.op.activation == "Relu" and residual.inputs[3].name == "x"


def test_two_input_sum_is_a_residual_too(backend):
    """The onnx zoo's resnet50 adds its shortcut with Sum: Conv -> Sum(z) -> Relu is one node;
    a three-input Sum stays a Sum."""
    proto = model([conv("x", "c"), h.make_node("Sum", ["c", "x"], ["s"]), h.make_node("Relu", ["s"], ["y"])],
                  conv_inits(), opset=9)
    m = check(proto, backend, ["FusedConv"], ["Conv", "Sum", "Relu"])
    assert m.graph.nodes[0].op.activation == "Relu" and m.graph.nodes[0].inputs[3].name == "x"
    proto = model([conv("x", "c"), h.make_node("Sum", ["c", "x", "x"], ["y"])], conv_inits(), opset=9)
    check(proto, backend, ["Conv", "Sum"], ["Conv", "Sum"])


def test_blocked_layout_residual_and_unfolded_bn(backend):
    """16 channels in 2 groups: the convs run on NCHWc16 (single-group ones run as a GEMM on
    plain tensors), with the residual in blocks too; a BN whose mean is an input cannot fold
    and runs blocked."""
    k = 16
    mean = h.make_tensor_value_info("mean_in", TP.FLOAT, [k])
    nodes = [conv("x", "c1", "a", group=2), bn("c1", "n1", "a"), h.make_node("Add", ["n1", "x"], ["s"]),
             h.make_node("Relu", ["s"], ["r"]), conv("r", "c2", "b", group=2),
             h.make_node("BatchNormalization", ["c2", "bscale", "bbeta", "mean_in", "bvar"], ["y"])]
    inits = (conv_inits("a", channels=k, group=2) + bn_inits("a", channels=k) + conv_inits("b", channels=k, group=2)
             + bn_inits("b", channels=k))
    proto = model(nodes, inits, channels=k, extra_inputs=[mean])
    feeds = {"x": RNG.standard_normal((1, k, HW, HW)).astype(np.float32),
             "mean_in": RNG.standard_normal(k).astype(np.float32)}
    m = check(proto, backend, ["Reorder", "FusedConv", "Conv", "BatchNormalization", "Reorder"],
              ["Reorder", "Conv", "BatchNormalization", "Add", "Relu", "Conv", "BatchNormalization", "Reorder"],
              feeds)
    assert m.graph.nodes[3].inputs[0].spec.format == "nchwc16"


def test_shared_conv_output_does_not_fuse(backend):
    nodes = [conv("x", "c"), h.make_node("Relu", ["c"], ["y"]), h.make_node("Tanh", ["c"], ["y2"])]
    proto = model(nodes, conv_inits(), outputs=("y", "y2"))
    check(proto, backend, ["Conv", "Relu", "Tanh"], ["Conv", "Relu", "Tanh"])
    # a Conv output that is also a graph output keeps its own node
    proto = model([conv("x", "c"), h.make_node("Relu", ["c"], ["y"])], conv_inits(), outputs=("y", "c"))
    check(proto, backend, ["Conv", "Relu"], ["Conv", "Relu"])


def test_bn_with_a_parameter_input_does_not_fold(backend):
    var = h.make_tensor_value_info("var_in", TP.FLOAT, [C])
    nodes = [conv("x", "c"), h.make_node("BatchNormalization", ["c", "scale", "beta", "mean", "var_in"], ["y"])]
    proto = model(nodes, conv_inits() + bn_inits()[:3], extra_inputs=[var])
    feeds = {"x": RNG.standard_normal((1, C, HW, HW)).astype(np.float32),
             "var_in": RNG.uniform(0.2, 2.0, C).astype(np.float32)}
    check(proto, backend, ["Conv", "BatchNormalization"], ["Conv", "BatchNormalization"], feeds)


def test_broadcast_add_and_add_of_itself_do_not_fuse():
    bias = nh.from_array(RNG.standard_normal((1, C, 1, 1)).astype(np.float32), "bias4")
    proto = model([conv("x", "c"), h.make_node("Add", ["c", "bias4"], ["y"])], conv_inits() + [bias])
    assert [n.op_type for n in dsl.load_onnx(proto, backend="interpreter").graph.nodes] == ["Conv", "Add"]
    proto = model([conv("x", "c"), h.make_node("Add", ["c", "c"], ["y"])], conv_inits())
    assert [n.op_type for n in dsl.load_onnx(proto, backend="interpreter").graph.nodes] == ["Conv", "Add"]


def test_dynamic_batch_residual_and_1d_conv():
    """A None batch fuses (both sides share it) and is checked when the model runs; a 1-D Conv
    takes its epilogue too."""
    proto = model([conv("x", "c"), h.make_node("Add", ["c", "x"], ["s"]), h.make_node("Relu", ["s"], ["y"])],
                  conv_inits(), batch="N")
    x = RNG.standard_normal((2, C, HW, HW)).astype(np.float32)
    check(proto, "numba", ["FusedConv"], ["Conv", "Add", "Relu"], {"x": x})
    w1 = nh.from_array(RNG.standard_normal((C, C, 3)).astype(np.float32), "w1")
    nodes = [h.make_node("Conv", ["x1", "w1"], ["c"], pads=[1, 1]), h.make_node("Add", ["x1", "c"], ["s"]),
             h.make_node("LeakyRelu", ["s"], ["y"], alpha=0.1)]
    graph = h.make_graph(nodes, "conv1d", [h.make_tensor_value_info("x1", TP.FLOAT, [1, C, 7])],
                         [h.make_tensor_value_info("y", TP.FLOAT, None)], [w1])
    proto = h.make_model(graph, opset_imports=[h.make_opsetid("", 15)])
    check(proto, "numba", ["FusedConv"], ["Conv", "Add", "LeakyRelu"],
          {"x1": RNG.standard_normal((1, C, 7)).astype(np.float32)})


def test_fusion_switches(monkeypatch):
    """Graph.compile(fuse=...) and OPDSL_NO_FUSION; the graph API fuses like ONNX import."""
    g = dsl.Graph("g")
    x = g.input("x", (1, C, HW, HW), dsl.f32)
    w = RNG.standard_normal((C, C, 3, 3)).astype(np.float32)
    g.output(ops.Clip(ops.Conv(x, w, pads=(1, 1, 1, 1)), np.float32(0.0), np.float32(0.5)), "y")
    assert [n.op_type for n in g.compile(backend="interpreter").graph.nodes] == ["FusedConv"]
    assert [n.op_type for n in g.compile(backend="interpreter", fuse=False).graph.nodes] == ["Conv", "Clip"]
    monkeypatch.setenv("OPDSL_NO_FUSION", "1")
    assert g.compile(backend="interpreter").stats["fused"] == 0
    assert g.compile(backend="interpreter", fuse=True).stats["fused"] == 1


def test_rules_match_exact_op_classes():
    """A Relu subclass (a user's own op) is not the built-in Relu: nothing is fused into it,
    and rules take only op classes."""
    class MyRelu(ops.Relu):
        pass

    g = dsl.Graph("g")
    x = g.input("x", (1, C, HW, HW), dsl.f32)
    g.output(MyRelu(ops.Conv(x, RNG.standard_normal((C, C, 3, 3)).astype(np.float32))), "y")
    assert [n.op_type for n in g.compile(backend="interpreter").graph.nodes] == ["Conv", "MyRelu"]
    with pytest.raises(TypeError, match="fusion_rule takes dsl.Op subclasses"):
        fusion.fusion_rule(ops.Conv, "Relu")


def test_fused_conv_op_eagerly(backend):
    """FusedConv as an op of its own: act(conv + z), against the unfused ops."""
    x = RNG.standard_normal((1, C, HW, HW)).astype(np.float32)
    w = RNG.standard_normal((C, C, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(C).astype(np.float32)
    z = RNG.standard_normal((1, C, HW, HW)).astype(np.float32)
    y = FusedConv(x, w, b, z, pads=(1, 1, 1, 1), activation="Clip", activation_params=(-1.0, 1.5),
                  backend=backend)
    ref = np.clip(ops.Conv(x, w, b, pads=(1, 1, 1, 1), backend="numba") + z, -1.0, 1.5)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(dsl.VerifyError, match="activation 'Gelu'"):
        FusedConv(x, w, b, activation="Gelu")
    with pytest.raises(dsl.VerifyError, match="takes 2 activation_params"):
        FusedConv(x, w, b, activation="Clip")
    with pytest.raises(dsl.VerifyError, match="Z .* must have the output's shape"):
        FusedConv(x, w, b, z[:, :, :3], pads=(1, 1, 1, 1))


def test_batch_norm_and_clip_ops(backend):
    """The unfused ops eagerly, against numpy: BN on a 3-D input; Clip with NaN, inf and
    lo > hi, on f32 and int32."""
    x = RNG.standard_normal((2, 3, 6)).astype(np.float32)
    s, b, m = (RNG.standard_normal(3).astype(np.float32) for _ in range(3))
    v = RNG.uniform(0.5, 2.0, 3).astype(np.float32)
    y = ops.BatchNormalization(x, s, b, m, v, epsilon=1e-2, backend=backend)
    ref = (x - m[:, None]) / np.sqrt(v[:, None] + np.float32(1e-2)) * s[:, None] + b[:, None]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    f = np.array([np.nan, -np.inf, -2.0, 0.5, 3.0, np.inf], np.float32)
    np.testing.assert_array_equal(ops.Clip(f, np.float32(-1), np.float32(2), backend=backend),
                                  [np.nan, -1, -1, 0.5, 2, 2])
    np.testing.assert_array_equal(ops.Clip(f, None, np.float32(0), backend=backend), [np.nan, -np.inf, -2, 0, 0, 0])
    np.testing.assert_array_equal(ops.Clip(f[2:], np.float32(3), np.float32(1), backend=backend), [1, 1, 1, 1])
    i = np.array([-5, 0, 7], np.int32)
    np.testing.assert_array_equal(ops.Clip(i, np.int32(-1), None, backend=backend), [-1, 0, 7])


def test_batch_norm_training_mode_is_an_error():
    proto = model([bn("x", "y", training_mode=1)], bn_inits())
    with pytest.raises(dsl.onnx.OnnxImportError, match="training_mode=1 is not supported"):
        dsl.load_onnx(proto, backend="interpreter")
