"""dsl.Graph and dsl.Model: graph mode, passes, memory plan, feeds, display."""
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import dsl
import ops
import oplayer_testops as L

RNG = np.random.default_rng(7)


def chain_graph(depth=3):
    """x -> (HardSigmoid -> Add(., prev)) * depth, plus a dead branch and a folded constant."""
    g = dsl.Graph("chain")
    x = g.input("x", (None, 6), dsl.f32)
    bias = L.HardSigmoid(g.constant("c", np.full((1, 6), 2.0, np.float32)))  # folded at compile time
    h = x
    for _ in range(depth):
        h = L.Add(L.HardSigmoid(h, alpha=0.3), h)
    L.Tanh(h)  # dead: no output depends on it
    g.output(h, "y")
    g.output(bias, "bias")
    return g


def chain_ref(x, depth=3):
    h = x
    for _ in range(depth):
        h = L.hard_sigmoid_ref(h, 0.3) + h
    return h


def test_eager_equals_graph(backend):
    x = RNG.standard_normal((5, 6)).astype(np.float32)
    eager = x
    for _ in range(3):
        eager = L.Add(L.HardSigmoid(eager, alpha=0.3, backend=backend), eager, backend=backend)
    model = chain_graph().compile(backend=backend)
    out = model.run({"x": x})
    np.testing.assert_array_equal(out["y"], eager)
    np.testing.assert_allclose(out["y"], chain_ref(x), rtol=1e-6)
    np.testing.assert_allclose(out["bias"], L.hard_sigmoid_ref(np.full((1, 6), 2.0, np.float32)))
    # a second batch size plans again; the first plan's results are not overwritten
    x2 = RNG.standard_normal((2, 6)).astype(np.float32)
    out2 = model.run({"x": x2})
    np.testing.assert_allclose(out2["y"], chain_ref(x2), rtol=1e-6)
    np.testing.assert_allclose(out["y"], chain_ref(x), rtol=1e-6)
    # zero batch: every node's output is empty, nothing launches
    assert model.run({"x": np.zeros((0, 6), np.float32)})["y"].shape == (0, 6)


def test_passes_fold_remove_and_plan_memory(monkeypatch):
    monkeypatch.setenv("OPDSL_INPLACE_ALL", "1")  # the smallest arena; the default plan: tests/opgraph/test_inplace_plan.py
    model = chain_graph(depth=4).compile(backend="interpreter")
    assert model.stats["folded"] == 1 and model.stats["removed"] == 1
    assert all(n.op_type != "Tanh" for n in model.graph.nodes)
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    first = model.run({"x": x})["y"]
    kept = first.copy()
    second = model.run({"x": x + 1})["y"]
    assert first is not second
    np.testing.assert_array_equal(first, kept)  # outputs are fresh arrays, never arena views
    mem = model.memory_plan()
    assert mem.arena_bytes < mem.naive_bytes
    assert len(mem.sizes) <= 2 and mem.inplace  # Add writes into its dying HardSigmoid input
    text = str(model)
    assert "in-place" in text and "impl=default" in text and "folded=1" in text


def test_static_shapes_plan_at_compile_time():
    g = dsl.Graph("static")
    x = g.input("x", (2, 3), dsl.f32)
    g.output(L.HardSigmoid(L.HardSigmoid(x)), "y")
    model = g.compile(backend="interpreter")
    assert model.memory_plan() is not None  # planned before any run
    np.testing.assert_allclose(model.run({"x": np.ones((2, 3), np.float32)})["y"],
                               L.hard_sigmoid_ref(L.hard_sigmoid_ref(np.ones((2, 3), np.float32))))


def test_unfoldable_ops_stay():
    g = dsl.Graph("noise")
    c = g.constant("c", np.zeros(3, np.float32))
    g.output(L.Noise(c), "y")
    model = g.compile(backend="interpreter")
    assert model.stats["folded"] == 0
    a, b = model.run({})["y"], model.run({})["y"]
    assert not np.array_equal(a, b)


def test_feed_errors_name_the_input():
    model = chain_graph().compile(backend="interpreter")
    good = np.zeros((2, 6), np.float32)
    with pytest.raises(ValueError, match=r"missing input 'x' \(f32\[\?,6\]\)"):
        model.run({})
    with pytest.raises(ValueError, match="unknown input 'xx'.*did you mean 'x'"):
        model.run({"x": good, "xx": good})
    with pytest.raises(TypeError, match=r"input 'x' has dtype float64, expected f32"):
        model.run({"x": good.astype(np.float64)})
    with pytest.raises(ValueError, match=r"input 'x' has shape \(2, 5\), expected \(\?, 6\): dim 1 is 5"):
        model.run({"x": np.zeros((2, 5), np.float32)})
    with pytest.raises(ValueError, match="rank 1, expected rank 2"):
        model.run({"x": np.zeros(6, np.float32)})
    with pytest.raises(TypeError, match="dict of input name"):
        model.run([good])
    # non-contiguous feeds are accepted
    np.testing.assert_allclose(model.run({"x": np.zeros((6, 2), np.float32).T})["y"], chain_ref(good))


def test_graph_build_errors():
    g = dsl.Graph("g")
    x = g.input("x", (None, 3), dsl.f32)
    with pytest.raises(ValueError, match="already exists"):
        g.input("x", (3,), dsl.f32)
    with pytest.raises(dsl.VerifyError, match=r"node 'HardSigmoid_\d+'\): HardSigmoid takes f32, got i32"):
        L.HardSigmoid(g.input("k", (3,), dsl.i32))
    other = dsl.Graph("other")
    y = other.input("y", (None, 3), dsl.f32)
    with pytest.raises(ValueError, match="different graphs"):
        L.Add(x, y)
    with pytest.raises(ValueError, match="belongs to graph 'other'"):
        g.output(y)
    with pytest.raises(ValueError, match="has no outputs"):
        g.compile(backend="interpreter")
    g.output(L.HardSigmoid(x), "out")
    with pytest.raises(ValueError, match="already has an output named 'out'"):
        g.output(x, "out")
    with pytest.raises(ValueError, match="unknown backend 'cuda'"):
        g.compile(backend="cuda")
    with pytest.raises(TypeError, match="symbolic"):
        np.asarray(x)
    with pytest.raises(ValueError, match="'auto' or 'plain'"):
        g.compile(backend="interpreter", formats="blocked")


def test_outputs_that_are_inputs_or_repeated():
    g = dsl.Graph("ids")
    x = g.input("x", (2,), dsl.f32)
    h = L.HardSigmoid(x)
    g.output(h, "a")
    g.output(h, "b")   # the same tensor twice: a copy
    g.output(x, "x_again")  # an input as output: a copy
    c = g.constant("k", np.arange(2, dtype=np.float32))
    g.output(c, "k_out")
    out = g.compile(backend="interpreter").run({"x": np.array([0.0, 5.0], np.float32)})
    np.testing.assert_allclose(out["a"], [0.5, 1.0])
    np.testing.assert_array_equal(out["a"], out["b"])
    np.testing.assert_array_equal(out["x_again"], [0.0, 5.0])
    np.testing.assert_array_equal(out["k_out"], [0.0, 1.0])
    out["k_out"][0] = 9  # caller-owned copy, the constant is untouched
    assert g.constants["k"][0] == 0


def test_an_identity_onto_an_output_is_dropped(backend):
    """An imported graph's Identity onto a graph output (the BERT layer's last node): the node it
    copies writes the output itself, also when later nodes read that tensor; an Identity of a
    graph input, or of a tensor that is already an output, stays a copy."""
    g = dsl.Graph("ids")
    x = g.input("x", (3, 4), dsl.f32)
    h = L.HardSigmoid(x)
    g.output(ops.Identity(h), "y")
    g.output(L.Tanh(h), "z")  # h is read after the Identity too
    g.output(ops.Identity(x), "x_copy")
    g.output(ops.Identity(g.outputs[0]), "y_copy")
    model = g.compile(backend=backend)
    kinds = [(n.op_type, n.inputs[0].kind) for n in model.graph.nodes if n.op_type == "Identity"]
    assert kinds == [("Identity", "input"), ("Identity", "node")]
    assert model.graph.outputs[0].producer.op_type == "HardSigmoid"
    xv = RNG.standard_normal((3, 4)).astype(np.float32)
    out = model.run({"x": xv})
    want = L.hard_sigmoid_ref(xv)
    np.testing.assert_allclose(out["y"], want, rtol=1e-6)
    np.testing.assert_allclose(out["z"], np.tanh(want), rtol=1e-5)
    np.testing.assert_array_equal(out["x_copy"], xv)
    np.testing.assert_array_equal(out["y_copy"], out["y"])
    assert [n.op_type for n in g.nodes].count("Identity") == 3  # the user's graph is not changed

def test_multi_output_node_and_unused_output(backend):
    g = dsl.Graph("mm")
    x = g.input("x", (None, 4), dsl.f32)
    lo, hi = L.MinMax(x, alpha=3.0)
    g.output(L.HardSigmoid(hi), "y")  # lo is never read, but the kernel still writes it
    xv = RNG.standard_normal((3, 4)).astype(np.float32)
    out = g.compile(backend=backend).run({"x": xv})
    np.testing.assert_allclose(out["y"], L.hard_sigmoid_ref(np.maximum(3 * xv, 0)), rtol=1e-6)


def test_value_dependent_shapes_run_node_by_node():
    g = dsl.Graph("reshape")
    x = g.input("x", (None, 6), dsl.f32)
    s = g.input("s", (2,), dsl.i64)
    g.output(L.HardSigmoid(L.Reshape(x, s)), "y")
    g.output(L.Reshape(x, g.constant("minus1", np.array([-1], np.int64))), "flat")
    model = g.compile(backend="interpreter")
    assert model.outputs["y"].shape == (None, None)
    xv = RNG.standard_normal((2, 6)).astype(np.float32)
    for shape in ([3, 4], [6, 2]):
        out = model.run({"x": xv, "s": np.array(shape, np.int64)})
        np.testing.assert_allclose(out["y"], L.hard_sigmoid_ref(xv.reshape(shape)), rtol=1e-6)
        np.testing.assert_array_equal(out["flat"], xv.reshape(-1))


def test_printing_and_svg():
    g = chain_graph(depth=2)
    text = str(g)
    assert text.startswith("graph chain(x: f32[?,6]) -> (y: f32[?,6], bias: f32[1,6])")
    assert "const c: f32[1,6]" in text
    assert "com.opdsl.test::HardSigmoid[alpha=0.3, beta=0.5](x)  # f32[?,6]" in text
    svg = g._repr_svg_()
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    assert len(root.findall(f".//{ns}rect")) == len(g.nodes)
    labels = [t.text for t in root.findall(f".//{ns}text")]
    assert "x: f32[?,6]" in labels and "y: f32[?,6]" in labels
    assert "<svg" in g._repr_html_() and "graph chain" in g._repr_html_()
    assert "3 inputs" not in repr(g) and "nodes" in repr(g)


def test_user_graph_is_not_changed_by_compile():
    g = chain_graph()
    before = str(g)
    g.compile(backend="interpreter")
    assert str(g) == before


def test_declared_plans_are_bound_once_other_runs_called_each_time():
    class TwiceCopy(dsl.Op):
        """run() does numpy work on its output after the kernel, and declares no plan: run() each time."""
        kernels = {"default": L.copy_k}

        def infer(self, x):
            return x.spec

        def run(self, impl, inputs, outputs, backend):
            impl(inputs[0], outputs[0], backend=backend)
            outputs[0] *= 2

    g = dsl.Graph("cap")
    x = g.input("x", (2, 3), dsl.f32)
    w = g.constant("w", np.eye(3, dtype=np.float32))
    g.output(L.FullyConnected(TwiceCopy(L.HardSigmoid(x)), w), "y")
    model = g.compile(backend="interpreter")
    assert "3 steps, 2 of 3 nodes planned" in str(model)
    for shift in (0.0, 1.0):
        xv = RNG.standard_normal((2, 3)).astype(np.float32) + shift
        np.testing.assert_allclose(model.run({"x": xv})["y"], 2 * L.hard_sigmoid_ref(xv), rtol=1e-6)


def test_a_bug_in_a_planned_launch_is_raised_not_hidden(monkeypatch):
    from dsl.runtime.kernel import Kernel
    real_prepare, calls = Kernel.prepare, []

    def prepare_failing_once(self, *args, **kwargs):  # a bug only the planned launch hits
        calls.append(self)
        if len(calls) == 1:
            raise RuntimeError("bug in a launch")
        return real_prepare(self, *args, **kwargs)

    monkeypatch.setattr(Kernel, "prepare", prepare_failing_once)
    g = dsl.Graph("bug")
    g.output(L.HardSigmoid(g.input("x", (2, 3), dsl.f32)), "y")
    with pytest.raises(RuntimeError, match="bug in a launch"):  # bound when the shapes are known
        g.compile(backend="interpreter").run({"x": np.zeros((2, 3), np.float32)})
    assert len(calls) == 1  # raised by the planned launch, not a fallback to the slow path


def test_runs_reading_input_values_are_called_each_run():
    class AddFirst(dsl.Op):
        """Adds the first element of its second input, read in run(): value-dependent."""
        kernels = {"default": L.hard_sigmoid_k}

        def infer(self, x, k):
            return x.spec

        def run(self, impl, inputs, outputs, backend):
            impl(inputs[0], outputs[0], alpha=1.0, beta=float(inputs[1].flat[0]), backend=backend)

    g = dsl.Graph("values")
    x = g.input("x", (3,), dsl.f32)
    k = g.input("k", (1,), dsl.f32)
    g.output(AddFirst(x, k), "y")
    model = g.compile(backend="interpreter")
    xv = np.array([-0.5, 0.0, 0.25], np.float32)
    for kv in (0.1, 0.5):
        np.testing.assert_allclose(model.run({"x": xv, "k": np.array([kv], np.float32)})["y"],
                                   np.clip(xv + kv, 0, 1), rtol=1e-6)
    assert "0 of 1 nodes planned" in str(model)


def test_values_computed_by_infer_fold_and_feed_shape_inference():
    class ShapeOf(dsl.Op):
        def infer(self, x):
            value = np.array(x.shape, np.int64) if x.known else None
            return dsl.TensorSpec((x.ndim,), dsl.i64, value=value)

        def run(self, impl, inputs, outputs, backend):
            outputs[0][...] = inputs[0].shape

        kernels = {"default": None}

    g = dsl.Graph("shapes")
    x = g.input("x", (2, 6), dsl.f32)
    y = L.Reshape(L.HardSigmoid(x), ShapeOf(g.constant("t", np.zeros((3, 4), np.float32))))
    assert y.shape == (3, 4)  # known while building the graph
    passthrough = L.HardSigmoid(g.constant("c", np.ones(2, np.float32)))
    assert passthrough.spec.value is None  # x.spec does not carry the input's content
    g.output(y, "y")
    g.output(passthrough, "p")
    model = g.compile(backend="interpreter")
    assert model.stats["folded"] == 2 and model.memory_plan() is not None
    xv = RNG.standard_normal((2, 6)).astype(np.float32)
    out = model.run({"x": xv})
    np.testing.assert_allclose(out["y"], L.hard_sigmoid_ref(xv).reshape(3, 4), rtol=1e-6)
    np.testing.assert_allclose(out["p"], L.hard_sigmoid_ref(np.ones(2, np.float32)))


def test_graph_copy_is_independent():
    g = chain_graph(depth=1)
    c = g.copy()
    assert str(c) == str(g)
    c.output(L.Tanh(c.tensors["y"]), "z")
    assert "z" not in g.tensors and len(c.nodes) == len(g.nodes) + 1
    xv = RNG.standard_normal((2, 6)).astype(np.float32)
    out = c.compile(backend="interpreter").run({"x": xv})
    np.testing.assert_allclose(out["z"], np.tanh(chain_ref(xv, 1)), rtol=1e-5)


def test_zero_input_op_in_graph_mode():
    class Iota(dsl.Op):
        n: int = 3
        kernels = {"default": lambda y: y.__setitem__(Ellipsis, np.arange(y.size))}

        def infer(self):
            return dsl.TensorSpec((self.n,), dsl.f32)

    np.testing.assert_array_equal(Iota(n=4)(), [0, 1, 2, 3])
    g = dsl.Graph("iota")
    g.output(L.HardSigmoid(Iota(n=4)(graph=g)), "y")
    out = g.compile(backend="interpreter", fold=False).run({})
    np.testing.assert_allclose(out["y"], L.hard_sigmoid_ref(np.arange(4, dtype=np.float32)))


def test_named_run_time_dimensions_must_agree():
    g = dsl.Graph("named")
    x = g.input("x", ("batch", 3), dsl.f32)
    h = g.input("h", ("batch", 3), dsl.f32)
    g.output(ops.Add(x, h), "y")
    model = g.compile(backend="interpreter")
    ones = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(model.run({"x": ones, "h": ones})["y"], 2 * ones)
    with pytest.raises(ValueError, match="inputs 'x' and 'h' disagree on dimension 'batch': 2 vs 4"):
        model.run({"x": ones, "h": np.ones((4, 3), np.float32)})
