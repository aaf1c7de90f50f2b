"""The graph of a compiled model exports to standard ONNX (dsl/onnx/lower.py and the lowerings beside the ops):
FusedMatMul -> MatMul + Add, FusedElementwise -> its elementwise ops, FusedConv -> Conv + Add +
activation, Reorder -> Identity.  Every export passes ``onnx.checker`` with ``full_check``,
onnxruntime runs it, and its outputs match opdsl's run of the compiled model on every backend."""
import collections

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dsl  # noqa: E402
import ops  # noqa: E402
from benchmarks.models import bert_layer_model  # noqa: E402
from dsl.lang.expr_tree import ProgramBuilder  # noqa: E402

RNG = np.random.default_rng(23)


def _export_run(graph, feeds):
    """(exported model, Counter of its (domain, op_type)s, onnxruntime's outputs by name)."""
    model = graph.to_onnx()
    onnx.checker.check_model(model, full_check=True)
    kinds = collections.Counter((n.domain, n.op_type) for n in model.graph.node)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return model, kinds, dict(zip(names, sess.run(None, feeds)))


def _custom(kinds):
    return sorted(t for (d, t) in kinds if d)


def test_bert_layer_compiled_export_runs_in_onnxruntime(backend):
    proto = bert_layer_model(seq=16, d_model=32, heads=2, ff=64)
    model = dsl.load_onnx(proto, backend=backend)
    compiled = collections.Counter(n.op_type for n in model.graph.nodes)
    # six linears and the scores (scaled by 1/4, masked: alpha and C); the GELU chain
    assert compiled["FusedMatMul"] == 7 and compiled["FusedElementwise"] == 1
    feeds = {"x": RNG.standard_normal((1, 16, 32)).astype(np.float32)}
    _, kinds, theirs = _export_run(model.graph, feeds)
    assert _custom(kinds) == []
    assert kinds[("", "Erf")] == 1 and kinds[("", "MatMul")] == 8
    np.testing.assert_allclose(model.run(feeds)["y"], theirs["y"], rtol=1e-4, atol=1e-5)


def _conv_block(opset):
    """Conv -> BN -> Relu, a depthwise conv (16 channels: blocked format, so Reorders), a 1x1 conv
    added to the first block's output -> Relu, then SiLU, LeakyRelu and Clip: every compiled op."""
    c = 16
    w = RNG.standard_normal((c, 3, 3, 3)).astype(np.float32) * 0.3
    b = RNG.standard_normal(c).astype(np.float32) * 0.1
    bn = [RNG.random(c).astype(np.float32) + 0.5 for _ in range(4)]
    wd = RNG.standard_normal((c, 1, 3, 3)).astype(np.float32) * 0.3
    w1 = RNG.standard_normal((c, c, 1, 1)).astype(np.float32) * 0.3
    clip = ([helper.make_node("Clip", ["lr"], ["y"], min=-0.5, max=1.5)] if opset < 11 else
            [helper.make_node("Clip", ["lr", "lo", "hi"], ["y"])])
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c0", "s", "bb", "m", "v"], ["n0"]),
             helper.make_node("Relu", ["n0"], ["r0"]),
             helper.make_node("Conv", ["r0", "wd"], ["d0"], pads=[1, 1, 1, 1], group=c),
             helper.make_node("Relu", ["d0"], ["r1"]),
             helper.make_node("Conv", ["r1", "w1"], ["c1"]),
             helper.make_node("Add", ["c1", "r0"], ["a"]),
             helper.make_node("Relu", ["a"], ["r2"]),
             helper.make_node("Sigmoid", ["r2"], ["sg"]),
             helper.make_node("Mul", ["r2", "sg"], ["silu"]),
             helper.make_node("Add", ["silu", "d0"], ["sd"]),
             helper.make_node("LeakyRelu", ["sd"], ["lr"], alpha=0.2)] + clip
    inits = [numpy_helper.from_array(a, n) for a, n in zip([w, b, *bn, wd, w1], ["w", "b", "s", "bb", "m", "v",
                                                                                  "wd", "w1"])]
    if opset >= 11:
        inits += [numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
                  numpy_helper.from_array(np.array(1.5, np.float32), "hi")]
    g = helper.make_graph(nodes, "conv_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 6, 6])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("opset", [9, 17])
def test_conv_bn_relu_add_compiled_export_runs_in_onnxruntime(backend, opset):
    model = dsl.load_onnx(_conv_block(opset), backend=backend)
    compiled = collections.Counter(n.op_type for n in model.graph.nodes)
    assert compiled["FusedConv"] == 2 and compiled["FusedElementwise"] >= 1, compiled
    feeds = {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    exported, kinds, theirs = _export_run(model.graph, feeds)
    assert _custom(kinds) == []
    assert kinds[("", "Conv")] == 3 and kinds[("", "Sigmoid")] == 1 and kinds[("", "LeakyRelu")] == 1
    assert [o.version for o in exported.opset_import if o.domain == ""] == [opset]
    np.testing.assert_allclose(model.run(feeds)["y"], theirs["y"], rtol=1e-4, atol=1e-5)


def test_blocked_formats_export_as_identity():
    model = dsl.load_onnx(_conv_block(17), backend="interpreter")
    reorders = [n for n in model.graph.nodes if n.op_type == "Reorder"]
    assert reorders  # the depthwise conv runs blocked (nchwc16)
    exported = model.graph.to_onnx()
    names = {n.name for n in exported.graph.node if n.op_type == "Identity"}
    assert all(any(m.startswith(r.name) for m in names) for r in reorders)


def _every_fusable(g, x, x16, z, cond):
    """A chain of every op the elementwise fusion pass takes, with broadcasting and f16 in and out
    (few distinct constants: each is an input of the fused node, which takes at most 12)."""
    one, half = g.constant("one", np.float32(1.0)), g.constant("half", np.float32(0.5))
    t = ops.Add(x, z)                                    # z broadcasts along rows
    t = ops.Sub(ops.Mul(t, half), ops.Div(t, one))
    t = ops.Max(t, ops.Neg(ops.Abs(t)))
    t = ops.Min(t, ops.Reciprocal(ops.Add(ops.Abs(t), one)))
    t = ops.Add(ops.Sqrt(ops.Abs(t)), ops.Exp(ops.Neg(ops.Abs(t))))
    t = ops.Add(ops.Log(ops.Add(t, one)), ops.Erf(t))
    t = ops.Mul(ops.Tanh(t), ops.Add(ops.Sin(t), ops.Cos(t)))
    t = ops.Add(ops.Add(ops.Floor(ops.Div(t, half)), ops.Ceil(t)), ops.Round(ops.Mul(t, half)))
    t = ops.Pow(ops.Add(ops.Abs(t), half), half)
    t = ops.Relu(ops.Sub(t, one))
    t = ops.LeakyRelu(ops.Sub(t, half), alpha=0.1)
    t = ops.Sigmoid(ops.Mul(t, ops.Cast(x16, to=dsl.f32)))
    t = ops.Clip(t, g.constant("lo", np.float32(0.2)), g.constant("hi", np.float32(0.9)))
    t = ops.Where(cond, t, ops.Neg(t))
    return ops.Cast(t, to=dsl.f16)


def test_every_fused_op_exports(backend):
    g = dsl.Graph("all_fusable")
    ins = (g.input("x", (3, 8), dsl.f32), g.input("x16", (3, 8), dsl.f16), g.input("z", (8,), dsl.f32),
           g.input("cond", (3, 8), dsl.bool_))
    g.output(_every_fusable(g, *ins), "y")
    model = g.compile(backend=backend)
    assert [n.op_type for n in model.graph.nodes] == ["FusedElementwise"]
    feeds = {"x": RNG.standard_normal((3, 8)).astype(np.float32), "x16": RNG.standard_normal((3, 8)).astype(np.float16),
             "z": RNG.standard_normal(8).astype(np.float32), "cond": RNG.random((3, 8)) > 0.3}
    _, kinds, theirs = _export_run(model.graph, feeds)
    assert _custom(kinds) == []
    for op in ("Relu", "LeakyRelu", "Sigmoid", "Max", "Min", "Reciprocal", "Round", "Pow", "Where"):
        assert kinds[("", op)] >= 1, op
    ours = model.run(feeds)["y"]
    assert ours.dtype == theirs["y"].dtype == np.float16
    unfused = g.compile(backend="interpreter", fuse=False).run(feeds)["y"]  # op by op, no compile cost
    np.testing.assert_allclose(theirs["y"].astype(np.float32), unfused.astype(np.float32), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(ours.astype(np.float32), theirs["y"].astype(np.float32), rtol=2e-3, atol=2e-3)


def test_f64_and_f32_mix_keeps_the_program_types(backend):
    """A program over f64 and f32 inputs computes in f64 and stores f32, as the kernel does."""
    g = dsl.Graph("mix")
    a, b = g.input("a", (5,), dsl.f64), g.input("b", (5,), dsl.f32)
    g.output(ops.Cast(ops.Mul(ops.Exp(a), ops.Cast(ops.Sqrt(b), to=dsl.f64)), to=dsl.f32), "y")
    model = g.compile(backend=backend)
    assert [n.op_type for n in model.graph.nodes] == ["FusedElementwise"]
    feeds = {"a": RNG.standard_normal(5), "b": RNG.random(5).astype(np.float32)}
    _, kinds, theirs = _export_run(model.graph, feeds)
    assert theirs["y"].dtype == np.float32 and ("", "Cast") in kinds
    want = (np.exp(feeds["a"]) * np.sqrt(feeds["b"]).astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(theirs["y"], want, rtol=1e-6)
    np.testing.assert_allclose(model.run(feeds)["y"], want, rtol=1e-6)


@pytest.mark.parametrize("opset", [9, 17])
def test_hand_built_program_is_written_step_by_step(opset):
    """A program built as data (dsl/lang/expr_tree.py) is written one standard node per step:
    Clip with a literal bound and an absent one (an attribute before opset 11, an input after),
    LeakyRelu with its alpha, Where on a bool input, a Cast to f64 and a literal in f64."""
    g = dsl.Graph("program")
    g.opset_imports[""] = opset
    x, y, c = g.input("x", (2, 4), dsl.f32), g.input("y", (4,), dsl.f32), g.input("c", (2, 4), dsl.bool_)
    b = ProgramBuilder()
    t0 = b.call("Clip", b.input(0), None, b.const(0.5))
    t1 = b.call("LeakyRelu", b.call("Sub", t0, b.input(1)), alpha=0.25)
    t2 = b.call("Where", b.input(2), t1, b.call("Neg", t1))
    b.call("Mul", b.call("Cast", t2, dtype="f64"), b.const(3.0), dtype="f64")
    g.output(ops.FusedElementwise(x, y, c, program=b.program(), dtype="f64"), "z")
    feeds = {"x": RNG.standard_normal((2, 4)).astype(np.float32), "y": RNG.standard_normal(4).astype(np.float32),
             "c": RNG.random((2, 4)) > 0.5}
    model, kinds, theirs = _export_run(g, feeds)
    assert {"Clip", "Sub", "LeakyRelu", "Neg", "Where", "Cast", "Mul"} == {t for _, t in kinds} - {"Constant"}
    clip = next(n for n in model.graph.node if n.op_type == "Clip")
    assert ([a.name for a in clip.attribute], len(clip.input)) == ((["max"], 1) if opset < 11 else ([], 3))
    s = np.minimum(feeds["x"], np.float32(0.5)) - feeds["y"]
    t1 = np.where(s >= 0, s, s * np.float32(0.25))
    want = np.where(feeds["c"], t1, -t1).astype(np.float64) * 3
    np.testing.assert_allclose(theirs["z"], want, rtol=1e-6)
    np.testing.assert_allclose(g.compile(backend="interpreter").run(feeds)["z"], want, rtol=1e-6)


def test_program_the_opset_cannot_express_stays_custom():
    """Round is opset 11: at opset 9 the fused node stays com.opdsl (still checker-clean);
    the FusedMatMul beside it is lowered."""
    g = dsl.Graph("old")
    g.opset_imports[""] = 9
    x = g.input("x", (2, 3), dsl.f32)
    w = g.constant("w", RNG.standard_normal((3, 4)).astype(np.float32))
    h = ops.Add(ops.MatMul(x, w), g.constant("b", np.ones(4, np.float32)))
    g.output(ops.Round(ops.Mul(ops.Exp(h), np.float32(2))), "y")
    model = g.compile(backend="interpreter")
    assert sorted(n.op_type for n in model.graph.nodes) == ["FusedElementwise", "FusedMatMul"]
    exported = model.graph.to_onnx()
    onnx.checker.check_model(exported, full_check=True)
    kinds = [(n.domain, n.op_type) for n in exported.graph.node]
    assert kinds == [("", "MatMul"), ("", "Add"), ("com.opdsl", "FusedElementwise")]
    model.graph.opset_imports[""] = 11
    kinds = [(n.domain, n.op_type) for n in model.graph.to_onnx().graph.node]
    assert ("com.opdsl", "FusedElementwise") not in kinds and ("", "Round") in kinds


def test_user_ops_keep_their_node_in_a_graph():
    """FullyConnected is a user's op: in a graph it stays com.opdsl (load_onnx maps it back);
    only in a function body is it written as Gemm."""
    g = dsl.Graph("fc")
    x = g.input("x", (2, 3), dsl.f32)
    g.output(ops.FullyConnected(x, g.constant("w", np.ones((4, 3), np.float32))), "y")
    kinds = [(n.domain, n.op_type) for n in g.to_onnx().graph.node]
    assert kinds == [("com.opdsl", "FullyConnected")]


def _recurrent_graph(cell, layout, **attrs):
    """One cell op over a run-time sequence length with lengths and an initial state, every
    output read: (graph, feeds)."""
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[cell]
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    hidden, inp, batch, steps = 3, 4, 2, 5
    g = dsl.Graph(cell.lower())
    x = g.input("x", (batch, None, inp) if layout else (None, batch, inp), dsl.f32)
    w = g.constant("w", RNG.standard_normal((dirs, gates * hidden, inp)).astype(np.float32) * 0.5)
    r = g.constant("r", RNG.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32) * 0.5)
    b = g.constant("b", RNG.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32) * 0.1)
    lens = g.input("lens", (batch,), dsl.i32)
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    h0 = g.input("h0", state, dsl.f32)
    outs = getattr(ops, cell)(x, w, r, b, lens, h0, hidden_size=hidden, layout=layout, **attrs)
    for k, t in enumerate(outs):
        g.output(t, f"y{k}")
    shape = (batch, steps, inp) if layout else (steps, batch, inp)
    return g, {"x": RNG.standard_normal(shape).astype(np.float32), "lens": np.array([5, 3], np.int32),
               "h0": RNG.standard_normal(state).astype(np.float32)}


@pytest.mark.parametrize("cell, layout, attrs", [
    ("LSTM", 0, {"direction": "bidirectional"}),
    ("GRU", 1, {"linear_before_reset": 1, "clip": 2.0}),
    ("RNN", 0, {"direction": "reverse", "activations": ("Relu",)}),
])
def test_recurrent_scan_exports_as_its_cell_op(backend, cell, layout, attrs):
    """The time loop an inlined RNN/GRU/LSTM leaves (com.opdsl::RecurrentScan, after the input
    projection's MatMul) is written as that cell op over the projection, with a 0/1 W."""
    g, feeds = _recurrent_graph(cell, layout, **attrs)
    model = g.compile(backend=backend)
    assert "RecurrentScan" in {n.op_type for n in model.graph.nodes}
    _, kinds, theirs = _export_run(model.graph, feeds)
    assert _custom(kinds) == [] and kinds[("", cell)] == 1
    ours = model.run(feeds)
    for name in ours:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-4, atol=1e-5, err_msg=name)


def _with_outputs(proto, names):
    """``proto`` with tensors ``names`` as extra graph outputs (float, shape left to the runtime)."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    out.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    return out


@pytest.mark.slow
def test_light_shufflenet_compiled_export_matches_the_original():
    """A real CNN (grouped convs in blocked format, BN folded, residual Sums, Relus): the export of
    its compiled graph gives onnxruntime the shipped output, and every intermediate tensor the
    compiled graph kept (each fused conv's output) equals onnxruntime's run of the original model
    (the light models' weights make the final softmax uniform, so the output alone says little)."""
    from onnx.backend.test.runner import Runner
    from test_light_models import light_case
    proto, feeds, expected, rtol, atol = light_case("shufflenet")
    model = dsl.load_onnx(proto, backend="numba")
    assert {"FusedConv", "Reorder"} <= {n.op_type for n in model.graph.nodes}
    exported, kinds, theirs = _export_run(model.graph, feeds)
    assert _custom(kinds) == []
    Runner.assert_similar_outputs(expected, [theirs[o.name] for o in proto.graph.output], rtol=rtol, atol=atol)
    original = {o for n in proto.graph.node for o in n.output}
    kept = [t.name for n in model.graph.nodes if n.op_type == "FusedConv" for t in n.outputs if t.name in original]
    assert len(kept) >= 20
    runs = []
    for p in (_with_outputs(proto, kept), _with_outputs(exported, kept)):
        sess = ort.InferenceSession(p.SerializeToString(), providers=["CPUExecutionProvider"])
        runs.append(dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds))))
    for name in kept:
        want = runs[0][name]
        assert np.abs(want).max() > 0, name
        np.testing.assert_allclose(runs[1][name], want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()), err_msg=name)
