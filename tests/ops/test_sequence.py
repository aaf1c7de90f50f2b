"""Sequences and optionals (ops/sequence.py, ops/optional.py, dsl/opgraph/host_values.py) on every
backend against numpy: graphs built in Python and loaded from onnx.helper models, feeds and outputs
as lists / None, export round trips, and the errors for wrong kinds, dtypes and positions."""
import ml_dtypes
import numpy as np
import pytest

import dsl
import ops

RNG = np.random.default_rng(3)
F32 = dsl.f32


def _arr(shape, dtype=np.float32):
    if np.dtype(dtype) == np.bool_:
        return RNG.integers(0, 2, shape).astype(bool)
    return (RNG.standard_normal(shape) * 10).astype(dtype)


def _same_list(got, want):
    assert isinstance(got, list) and len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


# --------------------------------------------------------------------------- Python API graphs

def test_graph_edits_a_fed_sequence(backend):
    """Insert / erase / at / length on a sequence input; the output sequence is a new list."""
    g = dsl.Graph("edit")
    s = g.input("s", dsl.SequenceSpec(F32, (None, 3)))
    x = g.input("x", (2, 3), F32)
    pos = g.constant("pos", np.array(1, np.int64))
    s2 = ops.SequenceInsert()(s, x, pos)
    s3 = ops.SequenceErase()(s2, g.constant("first", np.array(0, np.int64)))
    g.output(s3, "edited")
    g.output(ops.SequenceLength()(s2), "n")
    g.output(ops.SequenceAt()(s2, g.constant("last", np.array(-1, np.int64))), "last_item")
    m = g.compile(backend=backend)
    assert isinstance(m.inputs["s"], dsl.SequenceSpec) and str(m.inputs["s"]) == "seq(f32[?,3])"
    items = [_arr((1, 3)), _arr((4, 3))]
    xv = _arr((2, 3))
    out = m.run({"s": items, "x": xv})
    _same_list(out["edited"], [xv, items[1]])
    assert out["n"].dtype == np.int64 and int(out["n"]) == 3
    np.testing.assert_array_equal(out["last_item"], items[1])
    out["edited"][0][...] = 0  # the caller owns what it gets back
    assert not np.array_equal(xv, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, ml_dtypes.bfloat16])
def test_split_then_concat_round_trips(backend, dtype):
    """SplitToSequence then ConcatFromSequence give the input back; each part is a copy."""
    x = _arr((3, 7), dtype)
    dt = dsl.lang.types.from_numpy(np.dtype(dtype))
    g = dsl.Graph("split_concat")
    t = g.input("x", (3, None), dt)
    parts = ops.SplitToSequence(axis=1)(t, g.constant("split", np.array(3, np.int64)))
    g.output(parts, "parts")
    g.output(ops.ConcatFromSequence(axis=-1)(parts), "joined")
    out = g.compile(backend=backend).run({"x": x})
    _same_list(out["parts"], [x[:, :3], x[:, 3:6], x[:, 6:]])
    np.testing.assert_array_equal(out["joined"], x)


def test_split_to_sequence_variants(backend):
    x = _arr((2, 3, 4))
    split = ops.SplitToSequence(axis=-1)(x, np.array([1, 3], np.int64), backend=backend)
    _same_list(split, [x[..., :1], x[..., 1:]])
    keep = ops.SplitToSequence(axis=1)(x, backend=backend)
    _same_list(keep, [x[:, k:k + 1] for k in range(3)])
    drop = ops.SplitToSequence(axis=1, keepdims=0)(x, backend=backend)
    _same_list(drop, [x[:, k] for k in range(3)])


def test_concat_from_sequence_new_axis(backend):
    items = [_arr((2, 3)) for _ in range(4)]
    for axis in (0, 1, 2, -1):
        got = ops.ConcatFromSequence(axis=axis, new_axis=1)(items, backend=backend)
        np.testing.assert_array_equal(got, np.stack(items, axis=axis))
    got = ops.ConcatFromSequence(axis=0)([_arr((1, 3)), _arr((3, 3))], backend=backend)
    assert got.shape == (4, 3)


def test_eager_construct_and_empty():
    a, b = _arr((2,)), _arr((5,))
    seq = ops.SequenceConstruct()(a, b)
    assert isinstance(seq, list) and seq[0] is a and seq[1] is b
    assert ops.SequenceEmpty(dtype=dsl.i32)() == []
    assert int(ops.SequenceLength()(seq)) == 2


def test_graph_with_sequences_keeps_tensor_math(backend):
    """Tensor ops around host ops still run their kernels (Add on a SequenceAt result)."""
    g = dsl.Graph("mixed")
    x, y = g.input("x", (2, 2), F32), g.input("y", (2, 2), F32)
    seq = ops.SequenceConstruct()(x, y)
    g.output(ops.Add()(ops.SequenceAt()(seq, g.constant("one", np.array(1, np.int32))), x), "z")
    xv, yv = _arr((2, 2)), _arr((2, 2))
    np.testing.assert_array_equal(g.compile(backend=backend).run({"x": xv, "y": yv})["z"], yv + xv)


def test_optionals_in_a_graph(backend):
    g = dsl.Graph("opt")
    o = g.input("o", dsl.OptionalSpec(dsl.TensorSpec((2,), F32)))
    g.output(ops.OptionalHasElement()(o), "has")
    g.output(ops.Identity()(o), "same")
    m = g.compile(backend=backend)
    v = _arr((2,))
    out = m.run({"o": v})
    assert bool(out["has"]) and out["same"] is not v
    np.testing.assert_array_equal(out["same"], v)
    out = m.run({"o": None})
    assert not bool(out["has"]) and out["same"] is None


# --------------------------------------------------------------------------- ONNX models

def _model(nodes, inputs, outputs, opset=18):
    import onnx
    from onnx import helper
    graph = helper.make_graph(nodes, "m", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _seq_type(elem=None, shape=None):
    from onnx import TensorProto, helper
    return helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem or TensorProto.FLOAT, shape))


def test_onnx_sequence_map_with_a_body(backend):
    """SequenceMap's body (Add of an element and a captured tensor) runs per element."""
    from onnx import TensorProto, helper
    body = helper.make_graph([helper.make_node("Add", ["e", "b"], ["r"])], "body",
                             [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["n"]),
                              helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n"])],
                             [helper.make_tensor_value_info("r", TensorProto.FLOAT, ["n"])])
    model = _model([helper.make_node("SequenceMap", ["xs", "b"], ["ys"], body=body)],
                   [helper.make_value_info("xs", _seq_type(shape=["n"])),
                    helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n"])],
                   [helper.make_value_info("ys", _seq_type(shape=["n"]))])
    m = dsl.load_onnx(model, backend=backend)
    xs, b = [_arr((3,)), _arr((3,))], _arr((3,))
    _same_list(m.run({"xs": xs, "b": b})["ys"], [x + b for x in xs])
    assert m.run({"xs": [], "b": b})["ys"] == []


def test_onnx_optional_of_a_sequence(backend):
    from onnx import TensorProto, helper
    seq_t = _seq_type(TensorProto.INT64, [None])
    model = _model([helper.make_node("Optional", [], ["empty"], type=seq_t),
                    helper.make_node("OptionalHasElement", ["empty"], ["has_empty"]),
                    helper.make_node("Optional", ["xs"], ["full"]),
                    helper.make_node("OptionalGetElement", ["full"], ["back"])],
                   [helper.make_value_info("xs", seq_t)],
                   [helper.make_tensor_value_info("has_empty", TensorProto.BOOL, []),
                    helper.make_value_info("back", seq_t)])
    m = dsl.load_onnx(model, backend=backend)
    xs = [np.arange(3, dtype=np.int64), np.arange(1, dtype=np.int64)]
    out = m.run({"xs": xs})
    assert not bool(out["has_empty"])
    _same_list(out["back"], xs)


def test_export_round_trip(backend):
    """to_onnx writes sequence and optional types, the type attribute and SequenceEmpty's dtype."""
    import onnx
    g = dsl.Graph("rt")
    s = g.input("s", dsl.SequenceSpec(dsl.i32, (2,)))
    x = g.input("x", (2,), dsl.i32)
    grown = ops.SequenceInsert()(ops.SequenceInsert()(ops.SequenceEmpty(dtype=dsl.i32)(graph=g), x), x)
    g.output(ops.ConcatFromSequence(axis=0, new_axis=1)(s), "stacked")
    g.output(grown, "grown")
    g.output(ops.Optional(type=dsl.TensorSpec((2,), dsl.i32))(graph=g), "nothing")
    proto = g.to_onnx()
    assert proto.graph.input[0].type.HasField("sequence_type")
    assert proto.graph.output[2].type.HasField("optional_type")
    m = dsl.load_onnx(proto.SerializeToString(), backend=backend)
    items = [np.array([1, 2], np.int32), np.array([3, 4], np.int32)]
    xv = np.array([5, 6], np.int32)
    out = m.run({"s": items, "x": xv})
    np.testing.assert_array_equal(out["stacked"], np.stack(items))
    _same_list(out["grown"], [xv, xv])
    assert out["nothing"] is None
    assert onnx.load_model_from_string(proto.SerializeToString()).graph.output[1].type.HasField("sequence_type")


# --------------------------------------------------------------------------- errors

def _seq_model():
    g = dsl.Graph("kinds")
    s = g.input("s", dsl.SequenceSpec(F32, (2,)))
    x = g.input("x", (2,), F32)
    g.output(ops.SequenceLength()(s), "n")
    g.output(ops.Identity()(x), "y")
    return g.compile(backend="interpreter")


def test_feed_kind_errors():
    m = _seq_model()
    ok = {"s": [_arr((2,))], "x": _arr((2,))}
    assert int(m.run(ok)["n"]) == 1
    with pytest.raises(TypeError, match=r"input 's' is declared seq\(f32\[2\]\): pass a list of numpy float32"):
        m.run({**ok, "s": _arr((2,))})
    with pytest.raises(TypeError, match=r"input 'x' is a tensor \(f32\[2\]\): pass a numpy array, got a list"):
        m.run({**ok, "x": [_arr((2,))]})
    with pytest.raises(TypeError, match=r"input 'x' is a tensor .* got None"):
        m.run({**ok, "x": None})
    with pytest.raises(TypeError, match=r"input 's' element 0 has dtype int64, expected f32"):
        m.run({**ok, "s": [np.zeros(2, np.int64)]})
    with pytest.raises(ValueError, match=r"input 's' element 1 has shape \(3,\), expected elements of f32\[2\]"):
        m.run({**ok, "s": [_arr((2,)), _arr((3,))]})
    with pytest.raises(TypeError, match=r"input 's' element 0: expected a numpy array, got float"):
        m.run({**ok, "s": [1.0]})


def test_a_sequence_value_has_no_shape_of_its_own():
    g = dsl.Graph("shapes")
    s = g.input("s", dsl.SequenceSpec(F32, (2,)))
    with pytest.raises(AttributeError, match=r"graph value 's' is a sequence \(seq\(f32\[2\]\)\), which has no shape"):
        s.shape
    with pytest.raises(AttributeError, match="which has no ndim"):
        s.ndim
    assert s.spec.elem_shape == (2,)


def test_op_errors():
    g = dsl.Graph("bad")
    s = g.input("s", dsl.SequenceSpec(F32, (2,)))
    with pytest.raises(dsl.VerifyError, match=r"Add .*input 0 is a sequence \(seq\(f32\[2\]\)\); Add takes tensors"):
        ops.Add()(s, g.input("x", (2,), F32))
    with pytest.raises(dsl.VerifyError, match=r"SequenceInsert: input 'tensor' is i64\[2\], but the sequence holds f32"):
        ops.SequenceInsert()(s, g.input("i", (2,), dsl.i64))
    with pytest.raises(dsl.VerifyError, match=r"SequenceAt input 'input_sequence' must be a sequence, got a tensor"):
        ops.SequenceAt()(g.input("t", (2,), F32), g.constant("p", np.array(0, np.int64)))
    with pytest.raises(dsl.VerifyError, match=r"SequenceAt input 'position' must be a scalar i32 or i64"):
        ops.SequenceAt()(s, g.constant("pf", np.array(0.0, np.float32)))
    with pytest.raises(dsl.VerifyError, match=r"SequenceAt position 2 is out of range for a sequence of 2 tensors; "
                                              r"accepted: -2..1"):
        ops.SequenceAt()([_arr((2,)), _arr((2,))], np.array(2, np.int64))
    with pytest.raises(dsl.VerifyError, match=r"ConcatFromSequence of an empty sequence"):
        ops.ConcatFromSequence(axis=0).run_host([[]], "interpreter")
    with pytest.raises(dsl.VerifyError, match=r"ConcatFromSequence axis 3 is out of range for rank 2"):
        ops.ConcatFromSequence(axis=3, new_axis=1)(s)
    with pytest.raises(dsl.VerifyError, match=r"SplitToSequence sizes \[1, 1\] must be >= 0 and add up to the axis "
                                              r"length 3"):
        ops.SplitToSequence()(_arr((3,)), np.array([1, 1], np.int64))
    with pytest.raises(dsl.VerifyError, match=r"OptionalGetElement of an empty optional"):
        ops.OptionalGetElement().run_host([None], "interpreter")
    with pytest.raises(dsl.VerifyError, match=r"Optional without an input needs its 'type' attribute"):
        ops.Optional()()


def test_onnx_declared_kinds_are_checked():
    from onnx import TensorProto, helper
    model = _model([helper.make_node("SequenceConstruct", ["x"], ["s"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                   [helper.make_tensor_value_info("s", TensorProto.FLOAT, [2])])
    with pytest.raises(dsl.OnnxImportError, match=r"graph output 's' is declared a tensor, but the ops compute a "
                                                  r"sequence \(seq\(f32\[2\]\)\)"):
        dsl.load_onnx(model, backend="interpreter")
    seq_of_seq = helper.make_sequence_type_proto(_seq_type())
    bad = helper.make_model(helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "m", [helper.make_value_info("x", seq_of_seq)],
        [helper.make_value_info("y", seq_of_seq)]), opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(dsl.OnnxImportError, match=r"graph input 'x': a sequence of sequence_type is not supported; "
                                                  r"accepted: tensor, sequence\(tensor\)"):
        dsl.load_onnx(bad, backend="interpreter")


def test_profile_and_pickle_of_a_sequence_model():
    """Models with sequences profile node by node and survive pickling (specs included)."""
    import pickle
    g = dsl.Graph("prof")
    x = g.input("x", (4, 2), F32)
    parts = ops.SplitToSequence(axis=0, keepdims=0)(x)
    g.output(ops.SequenceLength()(parts), "n")
    g.output(parts, "parts")
    m = g.compile(backend="interpreter")
    xv = _arr((4, 2))
    rows = {r.op_type: r for r in m.profile({"x": xv}, repeat=2).rows}
    assert rows["SplitToSequence"].shape == ("seq[4]",) and rows["SequenceLength"].shape == ()
    again = pickle.loads(pickle.dumps(m))
    assert again.outputs["parts"] == dsl.SequenceSpec(F32, (2,))
    _same_list(again.run({"x": xv})["parts"], list(xv))


def test_loop_carries_a_sequence_but_scans_only_tensors(backend):
    """A Loop body grows a carried sequence (each step's tensor computed by Mul); a sequence as a
    scan output is refused."""
    from dsl.opgraph.body import Body
    body = dsl.Graph("grow")
    body.input("i", (), dsl.i64)
    cond = body.input("cond", (), dsl.bool_)
    acc = body.input("acc", dsl.SequenceSpec(F32, (2,)))
    x = body.input("x", (2,), F32)
    body.output(cond, "cond_out")
    body.output(ops.SequenceInsert()(acc, ops.Mul()(x, x)), "acc_out")
    g = dsl.Graph("loop")
    xs = g.input("x", (2,), F32)
    start = ops.SequenceConstruct()(xs)
    from ops.control_flow import Loop
    g.output(Loop(body=Body(body, n_formal=3))(g.constant("M", np.array(2, np.int64)), None, start, xs), "acc")
    xv = _arr((2,))
    _same_list(g.compile(backend=backend).run({"x": xv})["acc"], [xv, xv * xv, xv * xv])

    bad = dsl.Graph("scan_seq")
    bad.input("i", (), dsl.i64)
    c = bad.input("cond", (), dsl.bool_)
    y = bad.input("y", (2,), F32)
    bad.output(c, "c")
    bad.output(ops.SequenceConstruct()(y), "s")
    with pytest.raises(dsl.VerifyError, match=r"Loop scan output 0 is a sequence \(seq\(f32\[2\]\)\); scan outputs"):
        Loop(body=Body(bad, n_formal=2))(np.array(1, np.int64), np.array(True), xv)


def test_empty_sequence_in_a_graph(backend):
    """SequenceEmpty is known empty at build time: the first insert gives the element shape."""
    g = dsl.Graph("empty")
    x = g.input("x", (2,), dsl.i64)
    empty = ops.SequenceEmpty(dtype=dsl.i64)(graph=g)
    grown = ops.SequenceInsert()(empty, x)
    assert grown.spec == dsl.SequenceSpec(dsl.i64, (2,))
    g.output(ops.SequenceLength()(grown), "n")
    g.output(ops.Identity()(empty), "s")
    out = g.compile(backend=backend).run({"x": np.arange(2, dtype=np.int64)})
    assert int(out["n"]) == 1 and out["s"] == []
