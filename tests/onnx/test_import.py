"""dsl.load_onnx: standard ops against onnxruntime (eager == graph == onnxruntime),
custom-domain models against numpy, local functions, and every error case."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as H  # noqa: E402
from onnx import numpy_helper as NH  # noqa: E402

import dsl  # noqa: E402
import ops  # noqa: E402
from dsl import In, Out, f32  # noqa: E402

RNG = np.random.default_rng(21)
ONNX_OF = {np.dtype(np.float32): TP.FLOAT, np.dtype(np.int32): TP.INT32, np.dtype(np.int64): TP.INT64,
           np.dtype(np.uint8): TP.UINT8, np.dtype(np.int8): TP.INT8, np.dtype(np.float64): TP.DOUBLE}


def make_model(nodes, feeds, outputs, inits=(), opset=17, domains=(), functions=()):
    """A ModelProto: ``feeds`` name -> example array (inputs), ``outputs`` name -> numpy dtype."""
    inputs = [H.make_tensor_value_info(k, ONNX_OF[v.dtype], v.shape) for k, v in feeds.items()]
    outs = [H.make_tensor_value_info(o, ONNX_OF[np.dtype(dt)], None) for o, dt in outputs.items()]
    graph = H.make_graph(nodes, "test", inputs, outs, [NH.from_array(v, k) for k, v in inits])
    opsets = [H.make_opsetid("", opset)] + [H.make_opsetid(d, 1) for d in domains]
    model = H.make_model(graph, opset_imports=opsets, functions=list(functions))
    model.ir_version = 8
    return model


def ort_run(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


X34 = RNG.standard_normal((3, 4)).astype(np.float32)
X234 = RNG.standard_normal((2, 3, 4)).astype(np.float32)
IMG = RNG.standard_normal((1, 4, 6, 5)).astype(np.float32)
W_CONV = RNG.standard_normal((6, 2, 3, 3)).astype(np.float32)

# (id, op class, attrs, inputs fed, initializers (constant inputs), exact?)
CASES = [
    ("add", ops.Add, {}, {"a": X34, "b": X34[0]}, {}, True),
    ("mul_bcast", ops.Mul, {}, {"a": X234, "b": X234[:, :1]}, {}, True),
    ("sub_int", ops.Sub, {}, {"a": (X34 * 100).astype(np.int32), "b": (X34 * 50).astype(np.int32)}, {}, True),
    ("relu", ops.Relu, {}, {"x": X34}, {}, True),
    ("leakyrelu", ops.LeakyRelu, {"alpha": 0.2}, {"x": X34}, {}, True),
    ("sigmoid", ops.Sigmoid, {}, {"x": X34}, {}, False),
    ("tanh", ops.Tanh, {}, {"x": X34}, {}, False),
    ("gemm", ops.Gemm, {"alpha": 0.5, "beta": 2.0, "transA": 1, "transB": 1},
     {"a": X34}, {"b": RNG.standard_normal((5, 3)).astype(np.float32),
                  "c": RNG.standard_normal((4, 1)).astype(np.float32)}, False),
    ("matmul", ops.MatMul, {}, {"a": X234}, {"b": RNG.standard_normal((4, 5)).astype(np.float32)}, False),
    ("reshape", ops.Reshape, {}, {"x": X234}, {"shape": np.array([0, -1], np.int64)}, True),
    ("transpose", ops.Transpose, {"perm": [1, 2, 0]}, {"x": X234}, {}, True),
    ("identity", ops.Identity, {}, {"x": X34}, {}, True),
    ("conv", ops.Conv, {"pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2], "group": 2},
     {"x": IMG}, {"w": W_CONV, "b": RNG.standard_normal(6).astype(np.float32)}, False),
    ("conv_same_lower", ops.Conv, {"auto_pad": "SAME_LOWER", "strides": [2, 2], "group": 2},
     {"x": IMG}, {"w": W_CONV}, False),
    ("quantize_axis", ops.QuantizeLinear, {"axis": 1},
     {"x": X234 * 4}, {"s": np.array([0.1, 0.2, 0.3], np.float32), "z": np.array([-3, 0, 5], np.int8)}, True),
    ("dequantize", ops.DequantizeLinear, {},
     {"x": (X34 * 50 + 100).astype(np.uint8)}, {"s": np.array(0.05, np.float32), "z": np.array(7, np.uint8)}, True),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_standard_op_matches_onnxruntime(backend, case):
    _, op, attrs, feeds, inits, exact = case
    names = list(feeds) + list(inits)
    node = H.make_node(op.op_type, names, ["y"], name=f"{op.op_type}_node", **attrs)
    eager = op(*feeds.values(), *inits.values(), backend=backend, **attrs)
    model = make_model([node], feeds, {"y": eager.dtype}, inits=list(inits.items()), opset=21)
    (expected,) = ort_run(model, feeds)
    graph_out = dsl.load_onnx(model, backend=backend).run(feeds)["y"]
    assert graph_out.dtype == expected.dtype and graph_out.shape == expected.shape
    np.testing.assert_array_equal(graph_out, eager)
    if exact:
        np.testing.assert_array_equal(graph_out, expected)
    else:
        np.testing.assert_allclose(graph_out, expected, rtol=1e-5, atol=1e-5)


def test_symbolic_dims_and_a_chain_match_onnxruntime(backend):
    w = RNG.standard_normal((4, 3)).astype(np.float32)
    nodes = [H.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
             H.make_node("Constant", [], ["shape"], value=NH.from_array(np.array([-1, 2, 2], np.int64))),
             H.make_node("Reshape", ["g", "shape"], ["r"]),
             H.make_node("Sigmoid", ["r"], ["y"])]
    graph = H.make_graph(nodes, "chain", [H.make_tensor_value_info("x", TP.FLOAT, ["batch", 3])],
                         [H.make_tensor_value_info("y", TP.FLOAT, ["batch", 2, 2])],
                         [NH.from_array(w, "w"), NH.from_array(np.ones(4, np.float32), "b")])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 13)])
    model.ir_version = 8
    loaded = dsl.load_onnx(model.SerializeToString(), backend=backend)
    assert loaded.inputs["x"].shape == (None, 3)
    for n in (1, 3):
        xv = RNG.standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_allclose(loaded.run({"x": xv})["y"], ort_run(model, {"x": xv})[0], rtol=1e-5, atol=1e-6)


def test_load_from_path(tmp_path):
    model = make_model([H.make_node("Relu", ["x"], ["y"])], {"x": X34}, {"y": np.float32})
    path = tmp_path / "relu.onnx"
    onnx.save(model, str(path))
    for src in (str(path), path, path.read_bytes()):
        np.testing.assert_array_equal(dsl.load_onnx(src, backend="interpreter").run({"x": X34})["y"],
                                      np.maximum(X34, 0))


# --------------------------------------------------------------------------- custom domains

@dsl.kernel
def hard_sigmoid_kernel(x: In[f32], y: Out[f32], alpha: f32, beta: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = dsl.clamp(alpha * x.flat[i] + beta, 0.0, 1.0)


@dsl.op("HardSigmoid", domain="com.example.test")
class HardSigmoidTest(dsl.Op):
    alpha: float = 0.2
    beta: float = 0.5
    kernels = {"default": hard_sigmoid_kernel}

    def infer(self, x):
        return x.spec

    def verify(self, x):
        if x.dtype != dsl.f32:
            raise dsl.VerifyError(f"HardSigmoid takes f32, got {x.dtype}")


def test_custom_domain_model_against_numpy(backend):
    nodes = [H.make_node("HardSigmoid", ["x"], ["h"], domain="com.example.test", alpha=0.5, name="hs"),
             H.make_node("DataConvert", ["h"], ["q"], domain="com.opdsl", dtype="u8", scale=0.01, zero_point=3),
             H.make_node("DataConvert", ["h"], ["q2"], domain="com.opdsl", dtype=TP.INT8, scale=0.01),
             H.make_node("FullyConnected", ["h", "w"], ["fc"], domain="com.opdsl")]
    w = RNG.standard_normal((2, 4)).astype(np.float32)
    model = make_model(nodes, {"x": X34}, {"h": np.float32, "q": np.uint8, "q2": np.int8, "fc": np.float32}, inits=[("w", w)],
                       domains=("com.example.test", "com.opdsl"))
    out = dsl.load_onnx(model, backend=backend).run({"x": X34})
    h = np.clip(np.float32(0.5) * X34 + np.float32(0.5), 0, 1)
    np.testing.assert_allclose(out["h"], h, rtol=1e-6)
    np.testing.assert_array_equal(out["q"], np.clip(np.rint(h / np.float32(0.01)) + 3, 0, 255).astype(np.uint8))
    assert out["q2"].dtype == np.int8
    np.testing.assert_allclose(out["fc"], h @ w.T, rtol=1e-5, atol=1e-6)


def test_local_function_is_expanded_when_no_op_is_registered(backend):
    body = [H.make_node("Mul", ["a", "k"], ["t"]), H.make_node("LeakyRelu", ["t"], ["o"])]
    body[1].attribute.append(H.make_attribute_ref("alpha", TP.FLOAT))
    body[1].attribute[0].ref_attr_name = "slope"  # alpha = the caller's 'slope' attribute
    fn = H.make_function("com.example.fn", "ScaledLeaky", ["a", "k"], ["o"], body,
                         [H.make_opsetid("", 17)], attributes=["slope"])
    node = H.make_node("ScaledLeaky", ["x", "k"], ["y"], domain="com.example.fn", slope=0.3, name="call")
    model = make_model([node], {"x": X34}, {"y": np.float32}, inits=[("k", np.array(2.0, np.float32))],
                       domains=("com.example.fn",), functions=[fn])
    out = dsl.load_onnx(model, backend=backend).run({"x": X34})["y"]
    t = X34 * np.float32(2)
    np.testing.assert_array_equal(out, np.where(t >= 0, t, t * np.float32(0.3)))


def test_packages_accepts_imported_modules():
    model = make_model([H.make_node("HardSigmoid", ["x"], ["y"], domain="com.example.test")], {"x": X34}, {"y": np.float32},
                       domains=("com.example.test",))
    out = dsl.load_onnx(model, packages=[__import__(__name__)], backend="interpreter").run({"x": X34})["y"]
    np.testing.assert_allclose(out, np.clip(np.float32(0.2) * X34 + np.float32(0.5), 0, 1), rtol=1e-6)


# --------------------------------------------------------------------------- errors

def test_unknown_op_names_node_domain_type_and_known_ops():
    model = make_model([H.make_node("Relux", ["x"], ["y"], name="act1")], {"x": X34}, {"y": np.float32})
    with pytest.raises(dsl.OnnxImportError) as e:
        dsl.load_onnx(model)
    msg = str(e.value)
    assert "ai.onnx::Relux (opset 17): 1 node, first 'act1'" in msg and "closest known ops: " in msg and "Relu" in msg
    model = make_model([H.make_node("Swish", ["x"], ["y"], domain="com.nowhere", name="n7")], {"x": X34}, {"y": np.float32},
                       domains=("com.nowhere",))
    with pytest.raises(dsl.OnnxImportError, match=r"com.nowhere::Swish \(opset 1\): 1 node, first 'n7'; "):
        dsl.load_onnx(model)


def test_every_missing_op_of_the_model_is_reported_at_once():
    """Main graph, a local function's body and a graph attribute: one error lists them all."""
    body = [H.make_node("Frobnicate", ["a"], ["o"], domain="com.nowhere", name="inner")]
    fn = H.make_function("com.example.fn", "Wrapped", ["a"], ["o"], body,
                         [H.make_opsetid("", 17), H.make_opsetid("com.nowhere", 2)])
    sub = H.make_graph([H.make_node("Zork", ["x"], ["z"], name="in_branch")], "branch", [],
                       [H.make_tensor_value_info("z", TP.FLOAT, None)])
    nodes = [H.make_node("Relux", ["x"], ["a"], name="act1"),
             H.make_node("Relu", ["a"], ["b"], name="ok"),
             H.make_node("Relux", ["b"], ["c"], name="act2"),
             H.make_node("Wrapped", ["c"], ["d"], domain="com.example.fn", name="call"),
             H.make_node("Loopish", ["d"], ["y"], domain="com.nowhere", name="ctl", body=sub)]
    model = make_model(nodes, {"x": X34}, {"y": np.float32}, domains=("com.example.fn", "com.nowhere"),
                       functions=[fn])
    with pytest.raises(dsl.OnnxImportError) as e:
        dsl.load_onnx(model)
    msg = str(e.value)
    assert msg.startswith("the model uses 4 op type(s) that no registered op answers at the model's opset (5 node(s))")
    lines = msg.splitlines()[1:]
    assert [ln.strip().split("): ")[0] + ")" for ln in lines] == [
        "ai.onnx::Relux (opset 17)", "ai.onnx::Zork (opset 17)", "com.nowhere::Frobnicate (opset 2)",
        "com.nowhere::Loopish (opset 1)"]
    assert "2 nodes, first 'act1'" in lines[0]
    assert "1 node, first 'ctl/body/in_branch'" in lines[1]
    assert "1 node, first 'call/inner'" in lines[2]  # the function's own opset_import applies
    assert "1 node, first 'ctl'" in lines[3]
    assert [(m.label, m.opset, m.count, m.first_node) for m in e.value.missing] == [
        ("ai.onnx::Relux", 17, 2, "act1"), ("com.nowhere::Frobnicate", 2, 1, "call/inner"),
        ("com.nowhere::Loopish", 1, 1, "ctl"), ("ai.onnx::Zork", 17, 1, "ctl/body/in_branch")]


@dsl.op("Newish", domain="com.example.opsets", since=13)
class NewishTest(dsl.Op):
    alpha: float = 0.2
    beta: float = 0.5
    kernels = {"default": hard_sigmoid_kernel}

    def infer(self, x):
        return x.spec


def test_opset_and_domain_errors():
    model = make_model([H.make_node("Add", ["x", "x"], ["y"], name="old")], {"x": X34}, {"y": np.float32}, opset=5)
    with pytest.raises(dsl.OnnxImportError,
                       match=r"ai.onnx::Add \(opset 5\): 1 node, first 'old'; registered only for other opsets: "
                             r"AddV6 \[6, 6\], Add \[7, \.\.\.\]"):
        dsl.load_onnx(model)
    model = make_model([H.make_node("HardSigmoid", ["x"], ["y"], domain="com.example.test", name="hs")],
                       {"x": X34}, {"y": np.float32})
    with pytest.raises(dsl.OnnxImportError, match="domain 'com.example.test' has no opset_import entry"):
        dsl.load_onnx(model)


def test_an_op_registered_only_for_newer_opsets_names_the_ranges():
    """An opset-7 model using an op whose classes start at 13 (like Squeeze) lists the known ranges."""
    model = make_model([H.make_node("Newish", ["x"], ["y"], domain="com.example.opsets", name="sq")],
                       {"x": X34}, {"y": np.float32}, domains=("com.example.opsets",))
    model.opset_import[1].version = 7
    with pytest.raises(dsl.OnnxImportError) as e:
        dsl.load_onnx(model)
    assert "com.example.opsets::Newish (opset 7): 1 node, first 'sq'; registered only for other opsets: " \
           "NewishTest [13, ...]" in str(e.value)
    model.opset_import[1].version = 13
    out = dsl.load_onnx(model, backend="interpreter").run({"x": X34})["y"]
    np.testing.assert_allclose(out, np.clip(np.float32(0.2) * X34 + np.float32(0.5), 0, 1), rtol=1e-6)


def test_constant_forms_opdsl_cannot_hold_are_clear_errors():
    for attr, says in (("value_string", "'value_string' makes a string tensor, and opdsl has no string dtype"),
                       ("value_strings", "'value_strings' makes a string tensor")):
        node = H.make_node("Constant", [], ["c"], name="k", **{attr: "abc" if attr == "value_string" else ["a"]})
        model = make_model([node, H.make_node("Relu", ["x"], ["y"])], {"x": X34}, {"y": np.float32})
        with pytest.raises(dsl.OnnxImportError, match=r"'k' \(ai.onnx::Constant\): Constant attribute " + says):
            dsl.load_onnx(model)
    sparse = H.make_sparse_tensor(NH.from_array(np.array([1.0], np.float32), "v"),
                                  NH.from_array(np.array([2], np.int64), "i"), [4])
    node = H.make_node("Constant", [], ["c"], name="sp", sparse_value=sparse)
    model = make_model([node, H.make_node("Relu", ["x"], ["y"])], {"x": X34}, {"y": np.float32})
    with pytest.raises(dsl.OnnxImportError, match="'sparse_value' holds a sparse tensor.*store it dense"):
        dsl.load_onnx(model)
    node = H.make_node("Constant", [], ["c"], name="two", value_int=1, value_float=2.0)
    model = make_model([node, H.make_node("Relu", ["x"], ["y"])], {"x": X34}, {"y": np.float32})
    with pytest.raises(dsl.OnnxImportError, match="exactly one value attribute"):
        dsl.load_onnx(model)


def test_constant_scalar_and_list_forms():
    nodes = [H.make_node("Constant", [], ["k"], value_floats=[1.5, 2.0, -1.0, 0.5]),
             H.make_node("Mul", ["x", "k"], ["y"])]
    model = make_model(nodes, {"x": X34}, {"y": np.float32})
    out = dsl.load_onnx(model, backend="interpreter").run({"x": X34})["y"]
    np.testing.assert_array_equal(out, X34 * np.array([1.5, 2.0, -1.0, 0.5], np.float32))


def test_attribute_errors():
    model = make_model([H.make_node("Relu", ["x"], ["y"], name="r", slope=2.0)], {"x": X34}, {"y": np.float32})
    with pytest.raises(dsl.OnnxImportError, match=r"'r' \(ai.onnx::Relu\): attribute 'slope' is not supported"):
        dsl.load_onnx(model)
    model = make_model([H.make_node("Transpose", ["x"], ["y"], name="t", perm="abc")], {"x": X34}, {"y": np.float32})
    with pytest.raises(dsl.OnnxImportError, match="param 'perm' expects"):
        dsl.load_onnx(model)


def test_verify_errors_name_the_node():
    model = make_model([H.make_node("MatMul", ["x", "x"], ["y"], name="mm")], {"x": X34}, {"y": np.float32})
    with pytest.raises(dsl.OnnxImportError, match=r"'mm' \(ai.onnx::MatMul\).*inner dimensions differ"):
        dsl.load_onnx(model)


def test_malformed_models(tmp_path):
    with pytest.raises(dsl.OnnxImportError, match="not an ONNX model"):
        dsl.load_onnx(b"\x00garbage")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        dsl.load_onnx(str(tmp_path / "missing.onnx"))
    with pytest.raises(TypeError, match="path, bytes or an onnx.ModelProto"):
        dsl.load_onnx(42)
    with pytest.raises(dsl.OnnxImportError, match="has no graph"):
        dsl.load_onnx(onnx.ModelProto())
    model = make_model([H.make_node("Relu", ["nope"], ["y"], name="r")], {"x": X34}, {"y": np.float32})
    with pytest.raises(dsl.OnnxImportError, match="input 'nope' is not defined before this node"):
        dsl.load_onnx(model)
    model = make_model([H.make_node("Relu", ["x"], ["y"]), H.make_node("Tanh", ["x"], ["y"], name="t")],
                       {"x": X34}, {"y": np.float32})
    with pytest.raises(dsl.OnnxImportError, match="'y' is produced twice"):
        dsl.load_onnx(model)
    model = make_model([H.make_node("Relu", ["x"], ["y"])], {"x": X34}, {"z": np.float32})
    with pytest.raises(dsl.OnnxImportError, match="graph output 'z' is not produced"):
        dsl.load_onnx(model)
    graph = H.make_graph([H.make_node("Identity", ["s"], ["y"])], "g",
                         [H.make_tensor_value_info("s", TP.STRING, [2])], [H.make_tensor_value_info("y", TP.STRING, [2])])
    with pytest.raises(dsl.OnnxImportError, match="graph input 's': element type STRING is not supported"):
        dsl.load_onnx(H.make_model(graph, opset_imports=[H.make_opsetid("", 17)]))
    model = make_model([H.make_node("Relu", ["x"], ["y"])], {"x": X34}, {"y": np.float32})
    del model.opset_import[:]
    with pytest.raises(dsl.OnnxImportError, match="no opset_import"):
        dsl.load_onnx(model)


def test_declared_output_type_must_match():
    model = make_model([H.make_node("Relu", ["x"], ["y"])], {"x": X34}, {"y": np.int32})
    with pytest.raises(dsl.OnnxImportError, match="graph output 'y' is declared i32 but the ops compute f32"):
        dsl.load_onnx(model)


@dsl.composed("TwoOut", domain="com.example.test")
def two_out(x):
    return ops.Relu(x), ops.Tanh(x)


def test_trailing_outputs_may_be_left_out_but_not_added():
    model = make_model([H.make_node("TwoOut", ["x"], ["y"], domain="com.example.test")], {"x": X34},
                       {"y": np.float32}, domains=("com.example.test",))
    np.testing.assert_array_equal(dsl.load_onnx(model, backend="interpreter").run({"x": X34})["y"], np.maximum(X34, 0))
    model = make_model([H.make_node("TwoOut", ["x"], ["y", "", "z"], domain="com.example.test", name="t3")],
                       {"x": X34}, {"y": np.float32}, domains=("com.example.test",))
    with pytest.raises(dsl.OnnxImportError, match=r"'t3' .*the op produces 2 output\(s\), the node names 3"):
        dsl.load_onnx(model)
