"""If, Loop and Scan on every backend against numpy references: a counted loop, a while-loop
with a condition, Scan cumulative sums (axes, directions, opset 8 batches), If with an
outer-scope value and branches of different shapes, an If nested in a Loop, the Python API
(a dsl.Graph as the body) and the import errors."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as oh  # noqa: E402

import dsl  # noqa: E402
from dsl.onnx.load import OnnxImportError  # noqa: E402
from dsl.opgraph.body import Body  # noqa: E402
from ops.control_flow import Loop, Scan  # noqa: E402
from ops.elementwise import Add, Mul  # noqa: E402

F = TP.FLOAT


def vi(name, elem, shape):
    return oh.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, opset=17, initializers=()):
    g = oh.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])


def body(nodes, inputs, outputs, name="body"):
    return oh.make_graph(nodes, name, inputs, outputs)


# --------------------------------------------------------------------------- Loop

def counted_loop():
    """x += a (a from the outer graph) M times; every step's x is a scan output."""
    b = body([oh.make_node("Add", ["x_in", "a"], ["x_out"]), oh.make_node("Identity", ["c_in"], ["c_out"]),
              oh.make_node("Identity", ["x_out"], ["x_step"])],
             [vi("i", TP.INT64, []), vi("c_in", TP.BOOL, []), vi("x_in", F, [3])],
             [vi("c_out", TP.BOOL, []), vi("x_out", F, [3]), vi("x_step", F, [3])])
    loop = oh.make_node("Loop", ["M", "", "x0"], ["x_final", "xs"], body=b)
    return model([loop], [vi("M", TP.INT64, []), vi("x0", F, [3]), vi("a", F, [3])],
                 [vi("x_final", F, [3]), vi("xs", F, [None, 3])])


@pytest.mark.parametrize("trips", [4, 0])
def test_counted_loop(backend, trips):
    m = dsl.load_onnx(counted_loop(), backend=backend)
    x0 = np.array([1, 2, 3], np.float32)
    a = np.array([0.5, -1, 2], np.float32)
    out = m.run({"M": np.array(trips, np.int64), "x0": x0, "a": a})
    np.testing.assert_allclose(out["x_final"], x0 + trips * a)
    np.testing.assert_allclose(out["xs"], np.array([x0 + (k + 1) * a for k in range(trips)]).reshape(trips, 3))
    body = next(n.op.body for n in m.graph.nodes if n.op_type == "Loop")
    assert list(body._models) == ([backend] if trips else [])  # compiled once, on first use


def test_while_loop_with_condition(backend):
    """No trip count: s doubles while s < limit (an outer value); the iteration number is summed too."""
    b = body([oh.make_node("Add", ["s_in", "s_in"], ["s_out"]), oh.make_node("Less", ["s_out", "limit"], ["c_out"]),
              oh.make_node("Add", ["n_in", "i"], ["n_out"])],
             [vi("i", TP.INT64, []), vi("c_in", TP.BOOL, []), vi("s_in", F, []), vi("n_in", TP.INT64, [])],
             [vi("c_out", TP.BOOL, []), vi("s_out", F, []), vi("n_out", TP.INT64, [])])
    loop = oh.make_node("Loop", ["", "c0", "s0", "n0"], ["s", "n"], body=b)
    m = dsl.load_onnx(model([loop], [vi("c0", TP.BOOL, []), vi("s0", F, []), vi("n0", TP.INT64, []),
                                     vi("limit", F, [])], [vi("s", F, []), vi("n", TP.INT64, [])]), backend=backend)
    for s0, limit, start in [(1.5, 100.0, True), (1.0, 0.5, True), (3.0, 100.0, False)]:
        s, n, i = np.float32(s0), 0, 0
        keep = start
        while keep:
            s, n = np.float32(s * 2), n + i
            keep, i = bool(s < limit), i + 1
        out = m.run({"c0": np.array(start), "s0": np.array(s0, np.float32), "n0": np.array(0, np.int64),
                     "limit": np.array(limit, np.float32)})
        assert out["s"] == s and out["n"] == n


def test_loop_carried_value_that_grows(backend):
    """A carried value whose shape changes between iterations (Concat grows it) gets None dims."""
    b = body([oh.make_node("Concat", ["x_in", "one"], ["x_out"], axis=0), oh.make_node("Identity", ["c"], ["c_out"])],
             [vi("i", TP.INT64, []), vi("c", TP.BOOL, []), vi("x_in", F, [None])],
             [vi("c_out", TP.BOOL, []), vi("x_out", F, [None])])
    loop = oh.make_node("Loop", ["M", "", "x0"], ["x"], body=b)
    one = oh.make_tensor("one", F, [1], [1.0])
    m = dsl.load_onnx(model([loop], [vi("M", TP.INT64, []), vi("x0", F, [2])], [vi("x", F, [None])],
                            initializers=[one]), backend=backend)
    assert m.outputs["x"].shape == (None,)
    out = m.run({"M": np.array(3, np.int64), "x0": np.array([5, 6], np.float32)})["x"]
    np.testing.assert_array_equal(out, [5, 6, 1, 1, 1])


# --------------------------------------------------------------------------- Scan

def cumsum_body():
    return body([oh.make_node("Add", ["s_in", "x_t"], ["s_out"]), oh.make_node("Identity", ["s_out"], ["y_t"])],
                [vi("s_in", F, [2]), vi("x_t", F, [2])], [vi("s_out", F, [2]), vi("y_t", F, [2])])


def test_scan_cumulative_sum(backend):
    scan = oh.make_node("Scan", ["s0", "x"], ["s", "y"], body=cumsum_body(), num_scan_inputs=1)
    m = dsl.load_onnx(model([scan], [vi("s0", F, [2]), vi("x", F, [5, 2])], [vi("s", F, [2]), vi("y", F, [5, 2])]),
                      backend=backend)
    assert m.outputs["y"].shape == (5, 2)  # known from the input shapes: the model is planned
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    s0 = np.array([1, -1], np.float32)
    out = m.run({"s0": s0, "x": x})
    np.testing.assert_allclose(out["y"], s0 + np.cumsum(x, axis=0))
    np.testing.assert_allclose(out["s"], s0 + x.sum(0))


def test_scan_axes_and_directions(backend):
    """Scan along axis 1 of the input, reversed; outputs stacked along axis 1, reversed back."""
    scan = oh.make_node("Scan", ["s0", "x"], ["s", "y"], body=cumsum_body(), num_scan_inputs=1,
                        scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[-1],
                        scan_output_directions=[1])
    m = dsl.load_onnx(model([scan], [vi("s0", F, [2]), vi("x", F, [2, 4])], [vi("s", F, [2]), vi("y", F, [2, 4])]),
                      backend=backend)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = m.run({"s0": np.zeros(2, np.float32), "x": x})
    # reversed scan: step t sees column 3-t; stacking reversed puts step t at column 3-t
    np.testing.assert_allclose(out["y"], np.cumsum(x[:, ::-1], axis=1)[:, ::-1])
    np.testing.assert_allclose(out["s"], x.sum(1))


def test_scan_opset8_batches_and_sequence_lens(backend):
    scan = oh.make_node("Scan", ["lens", "s0", "x"], ["s", "y"], body=cumsum_body(), num_scan_inputs=1)
    m = dsl.load_onnx(model([scan], [vi("lens", TP.INT64, [2]), vi("s0", F, [2, 2]), vi("x", F, [2, 3, 2])],
                            [vi("s", F, [2, 2]), vi("y", F, [2, 3, 2])], opset=8), backend=backend)
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    out = m.run({"lens": np.array([3, 2], np.int64), "s0": np.ones((2, 2), np.float32), "x": x})
    want = 1 + np.cumsum(x, axis=1)
    want[1, 2] = 0  # past batch entry 1's length
    np.testing.assert_allclose(out["y"], want)
    np.testing.assert_allclose(out["s"], [1 + x[0].sum(0), 1 + x[1, :2].sum(0)])


# --------------------------------------------------------------------------- If

def test_if_with_outer_scope_value_and_branch_shapes(backend):
    """then: x + y (both outer values); else: a constant of another shape."""
    then = body([oh.make_node("Add", ["x", "y"], ["r"])], [], [vi("r", F, [3])], "then")
    other = body([oh.make_node("Constant", [], ["r2"], value=oh.make_tensor("v", F, [2], [7, 8]))], [],
                 [vi("r2", F, [2])], "else")
    node = oh.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other)
    m = dsl.load_onnx(model([node], [vi("c", TP.BOOL, []), vi("x", F, [3]), vi("y", F, [3])], [vi("out", F, [None])]),
                      backend=backend)
    assert m.outputs["out"].shape == (None,)
    x, y = np.array([1, 2, 3], np.float32), np.array([10, 20, 30], np.float32)
    np.testing.assert_allclose(m.run({"c": np.array(True), "x": x, "y": y})["out"], x + y)
    np.testing.assert_allclose(m.run({"c": np.array(False), "x": x, "y": y})["out"], [7, 8])


def nested_loop_model():
    """Each iteration: flag ? x + 1 : x * 2, then flag = not flag; the If reads the Loop body's x."""
    then = body([oh.make_node("Add", ["x_in", "one"], ["t"])], [], [vi("t", F, [2])], "then")
    other = body([oh.make_node("Mul", ["x_in", "two"], ["e"])], [], [vi("e", F, [2])], "else")
    b = body([oh.make_node("If", ["f_in"], ["x_out"], then_branch=then, else_branch=other),
              oh.make_node("Not", ["f_in"], ["f_out"]), oh.make_node("Identity", ["c"], ["c_out"])],
             [vi("i", TP.INT64, []), vi("c", TP.BOOL, []), vi("x_in", F, [2]), vi("f_in", TP.BOOL, [])],
             [vi("c_out", TP.BOOL, []), vi("x_out", F, [2]), vi("f_out", TP.BOOL, [])])
    loop = oh.make_node("Loop", ["M", "", "x0", "f0"], ["x", "f"], body=b)
    inits = [oh.make_tensor("one", F, [], [1.0]), oh.make_tensor("two", F, [], [2.0])]
    return model([loop], [vi("M", TP.INT64, []), vi("x0", F, [2]), vi("f0", TP.BOOL, [])],
                 [vi("x", F, [2]), vi("f", TP.BOOL, [])], initializers=inits)


def test_if_nested_in_loop(backend):
    m = dsl.load_onnx(nested_loop_model(), backend=backend)
    x0 = np.array([1, -3], np.float32)
    x, f = x0.copy(), True
    for _ in range(5):
        x, f = (x + 1 if f else x * 2), not f
    out = m.run({"M": np.array(5, np.int64), "x0": x0, "f0": np.array(True)})
    np.testing.assert_allclose(out["x"], x)
    assert bool(out["f"]) == f


# --------------------------------------------------------------------------- the Python API

def test_python_api_body_graph(backend):
    """A dsl.Graph as a Loop body, applied eagerly and in a graph."""
    g = dsl.Graph("body")
    g.input("i", (), dsl.i64)
    c = g.input("c", (), dsl.bool_)
    x = g.input("x", (3,), dsl.f32)
    y = Mul(x, x)
    g.output(c, "c_out")
    g.output(y, "x_out")
    loop = Loop(body=Body(g, 3))
    x0 = np.array([1.0, 1.5, -1.1], np.float32)
    got = loop(np.array(2, np.int64), np.array(True), x0, backend=backend)
    np.testing.assert_allclose(got, x0 ** 4, rtol=1e-6)

    outer = dsl.Graph("outer")
    xs = outer.input("xs", (4, 3), dsl.f32)
    s = outer.input("s", (3,), dsl.f32)
    sg = dsl.Graph("scan_body")
    st, xt = sg.input("st", (3,), dsl.f32), sg.input("xt", (3,), dsl.f32)
    sg.output(Add(st, xt), "st_out")
    final = Scan(s, xs, body=Body(sg, 2), num_scan_inputs=1)
    outer.output(final, "total")
    xv = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = outer.compile(backend=backend).run({"xs": xv, "s": np.zeros(3, np.float32)})
    np.testing.assert_allclose(out["total"], xv.sum(0))


# --------------------------------------------------------------------------- errors

def test_body_with_wrong_number_of_outputs():
    b = body([oh.make_node("Identity", ["c_in"], ["c_out"])],
             [vi("i", TP.INT64, []), vi("c_in", TP.BOOL, []), vi("x_in", F, [3])], [vi("c_out", TP.BOOL, [])])
    loop = oh.make_node("Loop", ["M", "", "x0"], ["x"], body=b, name="my_loop")
    with pytest.raises(OnnxImportError, match=r"my_loop.*Loop body must give \(condition, 1 carried values"):
        dsl.load_onnx(model([loop], [vi("M", TP.INT64, []), vi("x0", F, [3])], [vi("x", F, [3])]))


def test_body_declaring_wrong_number_of_inputs():
    b = body([oh.make_node("Identity", ["c_in"], ["c_out"])], [vi("c_in", TP.BOOL, [])], [vi("c_out", TP.BOOL, [])])
    loop = oh.make_node("Loop", ["M", ""], [], body=b, name="short")
    with pytest.raises(OnnxImportError, match=r"body 'body' of node 'short'.*declares 1 inputs; Loop passes it 2"):
        dsl.load_onnx(model([loop], [vi("M", TP.INT64, [])], []))


def test_missing_outer_scope_name():
    then = body([oh.make_node("Add", ["x", "nowhere"], ["r"])], [], [vi("r", F, [3])], "then")
    other = body([oh.make_node("Identity", ["x"], ["r2"])], [], [vi("r2", F, [3])], "else")
    node = oh.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other, name="branchy")
    with pytest.raises(OnnxImportError, match=r"body 'then_branch' of node 'branchy'.*input 'nowhere' is not defined"):
        dsl.load_onnx(model([node], [vi("c", TP.BOOL, []), vi("x", F, [3])], [vi("out", F, [3])]))


def test_bad_params_and_inputs():
    g = dsl.Graph("b")
    s, x = g.input("s", (2,), dsl.f32), g.input("x", (2,), dsl.f32)
    g.output(Add(s, x), "s_out")
    with pytest.raises(dsl.VerifyError, match="scan_input_directions must be 0 .forward. or 1 .reverse., got 2"):
        Scan(np.zeros(2, np.float32), np.zeros((3, 2), np.float32), body=Body(g, 2), num_scan_inputs=1,
             scan_input_directions=(2,))
    with pytest.raises(dsl.VerifyError, match="Loop input 'cond' must be bool"):
        Loop(body=Body(g, 2))(np.array(1, np.int64), np.array(1, np.int64), np.zeros(2, np.float32))


# --------------------------------------------------------------------------- export

def test_export_round_trip(backend):
    """Loop (with an If inside reading outer values) and Scan written back to ONNX: the bodies
    become graph attributes reading captured values by name, and load again to the same results."""
    from dsl.onnx.load import to_graph
    x0 = np.array([1, -3], np.float32)
    for proto, feeds in [
        (nested_loop_model(), {"M": np.array(5, np.int64), "x0": x0, "f0": np.array(True)}),
        (counted_loop(), {"M": np.array(3, np.int64), "x0": np.ones(3, np.float32), "a": np.full(3, 2, np.float32)}),
        (model([oh.make_node("Scan", ["s0", "x"], ["s", "y"], body=cumsum_body(), num_scan_inputs=1,
                             scan_input_directions=[1])],
               [vi("s0", F, [2]), vi("x", F, [3, 2])], [vi("s", F, [2]), vi("y", F, [3, 2])]),
         {"s0": np.zeros(2, np.float32), "x": np.arange(6, dtype=np.float32).reshape(3, 2)}),
    ]:
        exported = to_graph(proto).to_onnx()  # onnx.checker validates the bodies too
        assert any(a.type == a.GRAPH for node in exported.graph.node for a in node.attribute)
        want = dsl.load_onnx(proto, backend=backend).run(feeds)
        got = dsl.load_onnx(exported, backend=backend).run(feeds)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


def test_if_known_condition_builds_only_the_branch_that_runs(backend):
    """A condition known at load (from shapes): the other branch is never built, so one that
    could not even import (here it reads an undefined name) does not stop the model."""
    then = body([oh.make_node("Add", ["x", "x"], ["r"])], [], [vi("r", F, [3])], "then")
    broken = body([oh.make_node("Add", ["x", "nowhere"], ["r2"])], [], [vi("r2", F, [3])], "else")
    nodes = [oh.make_node("Size", ["x"], ["n"]), oh.make_node("Equal", ["n", "three"], ["c"]),
             oh.make_node("If", ["c"], ["out"], then_branch=then, else_branch=broken)]
    m = dsl.load_onnx(model(nodes, [vi("x", F, [3])], [vi("out", F, [3])],
                            initializers=[oh.make_tensor("three", TP.INT64, [], [3])]), backend=backend)
    x = np.array([1, 2, 3], np.float32)
    np.testing.assert_allclose(m.run({"x": x})["out"], 2 * x)


def test_if_branches_of_different_ranks(backend):
    then = body([oh.make_node("ReduceSum", ["x"], ["r"], keepdims=0)], [], [vi("r", F, [])], "then")
    other = body([oh.make_node("Identity", ["x"], ["r2"])], [], [vi("r2", F, [3])], "else")
    node = oh.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other)
    m = dsl.load_onnx(model([node], [vi("c", TP.BOOL, []), vi("x", F, [3])], [vi("out", F, None)], opset=13),
                      backend=backend)
    assert m.outputs["out"].shape == (None,)  # the larger rank, every dim unknown: inferred again when run
    x = np.array([1, 2, 3], np.float32)
    assert m.run({"c": np.array(True), "x": x})["out"].shape == ()
    np.testing.assert_allclose(m.run({"c": np.array(True), "x": x})["out"], 6)
    np.testing.assert_allclose(m.run({"c": np.array(False), "x": x})["out"], x)


# --------------------------------------------------------------------------- compile options

def fusable_loop():
    """x = tanh(x * a + 0.5) * 0.9 per iteration (a fusable chain), inside an If on the iteration
    parity that adds the same chain's value to x or subtracts it: options must reach nested bodies."""
    half, nine = oh.make_tensor("half", F, [], [0.5]), oh.make_tensor("nine", F, [], [0.9])
    chain = [oh.make_node("Mul", ["x_in", "a"], ["m"]), oh.make_node("Add", ["m", "half"], ["h"]),
             oh.make_node("Tanh", ["h"], ["th"]), oh.make_node("Mul", ["th", "nine"], ["v"])]
    then = body([oh.make_node("Add", ["x_in", "v"], ["t0"]), oh.make_node("Sigmoid", ["t0"], ["t1"]),
                 oh.make_node("Mul", ["t1", "v"], ["t"])], [], [vi("t", F, [2, 3])], "then")
    other = body([oh.make_node("Sub", ["x_in", "v"], ["e0"]), oh.make_node("Exp", ["e0"], ["e1"]),
                  oh.make_node("Mul", ["e1", "half"], ["e"])], [], [vi("e", F, [2, 3])], "else")
    b = body(chain + [oh.make_node("Mod", ["i", "two"], ["r"]), oh.make_node("Equal", ["r", "zero"], ["even"]),
                      oh.make_node("If", ["even"], ["x_out"], then_branch=then, else_branch=other),
                      oh.make_node("Identity", ["c"], ["c_out"])],
             [vi("i", TP.INT64, []), vi("c", TP.BOOL, []), vi("x_in", F, [2, 3])],
             [vi("c_out", TP.BOOL, []), vi("x_out", F, [2, 3])])
    loop = oh.make_node("Loop", ["M", "", "x0"], ["x"], body=b)
    inits = [half, nine, oh.make_tensor("two", TP.INT64, [], [2]), oh.make_tensor("zero", TP.INT64, [], [0])]
    return model([loop], [vi("M", TP.INT64, []), vi("x0", F, [2, 3]), vi("a", F, [3])], [vi("x", F, [2, 3])],
                 initializers=inits)


def fusable_loop_reference(x, a, trips):
    x = x.astype(np.float64)
    for i in range(trips):
        v = np.tanh(x * a + 0.5) * 0.9
        x = 1 / (1 + np.exp(-(x + v))) * v if i % 2 == 0 else np.exp(x - v) * 0.5
    return x


def _body_models(model, backend):
    """The compiled models of the Loop's body and of its If's two branches, after a run."""
    loop = next(n.op for n in model.graph.nodes if n.op_type == "Loop")
    inner = loop.body.model(backend)
    branch = next(n.op for n in inner.graph.nodes if n.op_type == "If")
    return loop.body, inner, [b.model(backend) for b in (branch.then_branch, branch.else_branch)
                              if backend in b._models]


def test_loop_body_fuses_like_the_graph(backend):
    """A fusable chain in a Loop body (and in an If inside it) is fused when the graph is, and
    left alone with fuse=False; both give the same results, which match numpy."""
    feeds = {"M": np.array(4, np.int64), "x0": RNG_CF.standard_normal((2, 3)).astype(np.float32),
             "a": RNG_CF.standard_normal(3).astype(np.float32)}
    want = fusable_loop_reference(feeds["x0"], feeds["a"], 4)
    results = {}
    for fuse in (True, False):
        m = dsl.load_onnx(fusable_loop(), backend=backend, fuse=fuse)
        results[fuse] = m.run(feeds)["x"]
        np.testing.assert_allclose(results[fuse], want, rtol=1e-5, atol=1e-6)
        loop_body, inner, branches = _body_models(m, backend)
        assert loop_body.options["fuse"] is fuse
        ops_run = [n.op_type for n in inner.graph.nodes] + [n.op_type for b in branches for n in b.graph.nodes]
        assert ("FusedElementwise" in ops_run) is fuse, ops_run
        assert len(branches) == 2 and all(b.stats["fused"] == (2 if fuse else 0) for b in branches)
    np.testing.assert_allclose(results[True], results[False], rtol=1e-6, atol=1e-7)


def test_formats_and_tiling_reach_the_bodies():
    m = dsl.load_onnx(fusable_loop(), backend="interpreter", formats="plain", tiling=False)
    feeds = {"M": np.array(2, np.int64), "x0": np.ones((2, 3), np.float32), "a": np.ones(3, np.float32)}
    m.run(feeds)
    loop_body, inner, branches = _body_models(m, "interpreter")
    assert {k: loop_body.options[k] for k in ("formats", "tiling")} == {"formats": "plain", "tiling": False}
    assert all(b.tiling == 0 for b in [inner] + branches)
    # the loaded graph's own body is not changed by compiling it
    from dsl.onnx.load import to_graph
    g = to_graph(fusable_loop())
    g.compile(backend="interpreter", fuse=False)
    assert next(n.op for n in g.nodes if n.op_type == "Loop").body.options == {}


def test_body_options_survive_pickling_and_bad_options_are_refused():
    import pickle
    g = dsl.Graph("b")
    s, x = g.input("s", (2,), dsl.f32), g.input("x", (2,), dsl.f32)
    g.output(Add(s, x), "s_out")
    b = Body(g, 2).with_options(fuse=False, formats="plain")
    again = pickle.loads(pickle.dumps(b))
    assert again.options == {"fuse": False, "formats": "plain"} and "fuse=False" in repr(again)
    with pytest.raises(ValueError, match=r"body 'b': unknown compile option\(s\) fusion; accepted: fuse, formats"):
        Body(g, 2, options={"fusion": True})


RNG_CF = np.random.default_rng(31)


def test_compiled_loop_exports_and_runs_in_onnxruntime(backend):
    """The compiled graph's Loop writes its bodies (the loaded graphs, not their fused models) as
    graph attributes; onnxruntime runs the export to opdsl's results."""
    ort = pytest.importorskip("onnxruntime")
    import onnx
    m = dsl.load_onnx(fusable_loop(), backend=backend)
    exported = m.graph.to_onnx()
    onnx.checker.check_model(exported, full_check=True)
    feeds = {"M": np.array(3, np.int64), "x0": RNG_CF.standard_normal((2, 3)).astype(np.float32),
             "a": RNG_CF.standard_normal(3).astype(np.float32)}
    sess = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"])
    (theirs,) = sess.run(None, feeds)
    np.testing.assert_allclose(m.run(feeds)["x"], theirs, rtol=1e-5, atol=1e-6)
