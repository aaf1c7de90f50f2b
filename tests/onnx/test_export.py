"""Graph.to_onnx: checker-clean models, custom domains with opset imports, composed ops as
FunctionProto, load -> export -> load giving the same results, onnxruntime on exports."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as H  # noqa: E402

import dsl  # noqa: E402
import ops  # noqa: E402
from dsl.opgraph import registry  # noqa: E402

RNG = np.random.default_rng(33)


@dsl.composed("RNNCellExport", domain="com.example.export")
def rnn_cell(x, w, b, h, r):
    out = ops.Tanh(ops.Add(ops.FullyConnected(x, w, b), ops.FullyConnected(h, r)))
    return out, ops.DataConvert(out, dtype=dsl.u8, scale=0.0036, zero_point=0)


@dsl.composed("ScaledTanh", domain="com.example.export")
def scaled_tanh(x, *, scale: float = 1.0):
    return ops.Tanh(ops.Mul(x, scale))


def rnn_graph():
    g = dsl.Graph("cell")
    x = g.input("x", (None, 3), dsl.f32)
    h = g.input("h", (None, 4), dsl.f32)
    w = g.constant("w", RNG.standard_normal((4, 3)).astype(np.float32) * 0.3)
    b = g.constant("b", RNG.standard_normal(4).astype(np.float32) * 0.3)
    r = g.constant("r", RNG.standard_normal((4, 4)).astype(np.float32) * 0.3)
    out, state = rnn_cell(x, w, b, h, r)
    g.output(scaled_tanh(out, scale=2.0), "out")
    g.output(state, "state")
    g.output(scaled_tanh(out, scale=0.5), "half")
    g.output(x, "x_again")  # an input as output: exported through Identity
    return g


FEEDS = {"x": RNG.standard_normal((2, 3)).astype(np.float32), "h": RNG.standard_normal((2, 4)).astype(np.float32)}


def test_export_is_checker_clean_with_domains_and_functions():
    model = rnn_graph().to_onnx()
    onnx.checker.check_model(model, full_check=True)
    opsets = {o.domain: o.version for o in model.opset_import}
    assert opsets[""] >= 13 and opsets["com.example.export"] == 1
    assert "com.opdsl" not in opsets  # the body's FullyConnected / DataConvert are written as standard ops
    types = [(n.domain, n.op_type) for n in model.graph.node]
    assert ("com.example.export", "RNNCellExport") in types and ("", "Identity") in types
    functions = {(f.domain, f.name): f for f in model.functions}
    body = [(n.domain, n.op_type) for n in functions[("com.example.export", "RNNCellExport")].node]
    assert body == [("", "Gemm"), ("", "Gemm"), ("", "Add"), ("", "Tanh"), ("", "Constant"), ("", "Constant"),
                    ("", "QuantizeLinear")]
    # two ScaledTanh nodes with different params: one function each
    assert ("com.example.export", "ScaledTanh") in functions and ("com.example.export", "ScaledTanh__1") in functions
    scale, zero_point = [onnx.numpy_helper.to_array(n.attribute[0].t)
                         for n in functions[("com.example.export", "RNNCellExport")].node[4:6]]
    assert scale == np.float32(0.0036) and zero_point.dtype == np.uint8 and zero_point == 0
    assert [i.name for i in model.graph.initializer] == ["w", "b", "r"]
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and dims[1].dim_value == 3


def test_load_export_load_gives_the_same_results(backend):
    g = rnn_graph()
    direct = g.compile(backend=backend).run(FEEDS)
    model = g.to_onnx()
    once = dsl.load_onnx(model.SerializeToString(), backend=backend).run(FEEDS)
    twice = dsl.load_onnx(dsl.onnx.to_graph(model).to_onnx(), backend=backend).run(FEEDS)
    for name in direct:
        np.testing.assert_array_equal(once[name], direct[name])
        np.testing.assert_array_equal(twice[name], direct[name])
    reloaded = dsl.onnx.to_graph(model)
    kinds = [n.op.op_type for n in reloaded.nodes]
    assert "RNNCellExport" in kinds and "ScaledTanh" in kinds  # registered composed ops come back as such


def test_unregistered_composed_op_is_expanded_from_its_function(backend):
    g = rnn_graph()
    direct = g.compile(backend=backend).run(FEEDS)
    model = g.to_onnx()
    cls = registry.lookup("com.example.export", "RNNCellExport")
    registry.unregister(cls)
    try:
        out = dsl.load_onnx(model, backend=backend).run(FEEDS)
    finally:
        registry.register(cls)
    for name in direct:
        np.testing.assert_array_equal(out[name], direct[name])


def test_standard_graph_export_runs_in_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    g = dsl.Graph("std")
    x = g.input("x", (None, 4, 5, 5), dsl.f32)
    w = g.constant("w", RNG.standard_normal((6, 2, 3, 3)).astype(np.float32))
    y = ops.Conv(x, w, pads=[1, 1, 1, 1], group=2, strides=[2, 1])
    y = ops.Reshape(ops.Sigmoid(y), g.constant("s", np.array([0, -1], np.int64)))
    y = ops.Gemm(y, g.constant("g", RNG.standard_normal((7, 90)).astype(np.float32)), transB=1, alpha=0.5)
    q = ops.QuantizeLinear(y, g.constant("qs", np.array(0.05, np.float32)), g.constant("qz", np.array(3, np.int8)))
    g.output(ops.LeakyRelu(ops.Transpose(y), alpha=0.3), "y")
    g.output(ops.DequantizeLinear(q, g.constant("ds", np.array(0.05, np.float32)),
                                  g.constant("dz", np.array(3, np.int8))), "dq")
    model = g.to_onnx()
    feeds = {"x": RNG.standard_normal((2, 4, 5, 5)).astype(np.float32)}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = dict(zip(["y", "dq"], sess.run(None, feeds)))
    got = g.compile(backend="numba").run(feeds)
    np.testing.assert_allclose(got["y"], expected["y"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got["dq"], expected["dq"], atol=0.051)  # a rounding tie may differ by one step


def test_imported_opsets_are_kept():
    node = H.make_node("Relu", ["x"], ["y"])
    graph = H.make_graph([node], "g", [H.make_tensor_value_info("x", TP.FLOAT, [2])],
                         [H.make_tensor_value_info("y", TP.FLOAT, [2])])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 14)])
    out = dsl.onnx.to_graph(model).to_onnx()
    assert {o.domain: o.version for o in out.opset_import}[""] == 14


def test_params_as_attributes():
    g = dsl.Graph("attrs")
    x = g.input("x", (2, 3), dsl.f32)
    g.output(ops.Transpose(ops.LeakyRelu(x)), "y")  # defaults are implied, not written
    g.output(ops.Transpose(x, perm=[1, 0]), "z")
    attrs = [(n.op_type, [(a.name, H.get_attribute_value(a)) for a in n.attribute]) for n in g.to_onnx().graph.node]
    assert attrs == [("LeakyRelu", []), ("Transpose", []), ("Transpose", [("perm", [1, 0])])]


def test_export_errors_are_clear():
    class Weird(dsl.Op):
        op_type = "Weird"
        domain = "com.example.export"
        payload: object = None

        def infer(self, x):
            return x.spec

        kernels = {"default": lambda x, y: None}

    g = dsl.Graph("weird")
    g.output(Weird(g.input("x", (2,), dsl.f32), payload={1: 2}), "y")
    with pytest.raises(TypeError, match="param 'payload' .* has no ONNX attribute form"):
        g.to_onnx()


def test_composed_function_runs_in_onnxruntime():
    """A composed op of standard ops is a FunctionProto onnxruntime can expand itself."""
    ort = pytest.importorskip("onnxruntime")
    g = dsl.Graph("fn")
    x = g.input("x", (None, 4), dsl.f32)
    g.output(scaled_tanh(x, scale=3.0), "y")
    model = g.to_onnx()
    assert [f.name for f in model.functions] == ["ScaledTanh"]
    xv = RNG.standard_normal((3, 4)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"x": xv})[0], np.tanh(xv * np.float32(3)), rtol=1e-6, atol=1e-6)


def test_ir_version_follows_the_opset():
    g = dsl.Graph("new")
    g.opset_imports[""] = 23
    g.output(ops.Relu(g.input("x", (2,), dsl.f32)), "y")
    model = g.to_onnx()
    assert model.ir_version >= 11 and model.opset_import[0].version == 23


def test_symbolic_dimension_names_survive_export_and_import():
    g = dsl.Graph("named")
    x = g.input("x", ("batch", 4), dsl.f32)
    g.output(ops.Relu(x), "y")
    proto = g.to_onnx()
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and dims[1].dim_value == 4
    back = dsl.onnx.to_graph(proto)
    assert back.inputs[0].dim_names == ("batch", None)
    assert back.to_onnx().graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
