"""@dsl.composed: eager and graph use, inlining, params, nesting, the TIM-VX RNNCell goldens."""
import numpy as np
import pytest

import dsl
from dsl.opgraph import registry
import oplayer_testops as L

DOMAIN = "com.example.composed"

# TIM-VX rnn_cell_test.cc, shape_3_2_4_float: input 3, batch 2, units 4, zero state
X = np.array([[0.12609188, 0.46347019, 0.89598465],
              [0.35867718, 0.36897406, 0.73463392]], np.float32)
W = np.array([[0.12609188, 0.46347019, 0.89598465],
              [0.35867718, 0.36897406, 0.73463392],
              [0.12609188, 0.46347019, 0.89598465],
              [0.35867718, 0.36897406, 0.73463392]], np.float32)
R = np.array([[-0.31930989, 0.37613347, 0.27901134, 0.36137494],
              [-1.36916667, 0.38031587, 0.21580373, 0.27072677],
              [1.01580888, 0.14943552, 1.15465137, 0.09784451],
              [-1.02702999, 1.39296314, 0.15785322, 0.21931258]], np.float32)
B = np.array([0.01580888, 0.14943552, 0.15465137, 0.09784451], np.float32)
OUT_GOLDEN = np.array([0.781534, 0.771447, 0.830002, 0.749713, 0.711524, 0.74155, 0.77355, 0.717427],
                      np.float32).reshape(2, 4)
STATE_GOLDEN = np.array([217, 214, 231, 208, 198, 206, 215, 199], np.uint8).reshape(2, 4)


def _library():
    """The ops/ library when it has every op RNNCell needs, else the test ops."""
    try:
        import ops
        if all(hasattr(ops, n) for n in ("FullyConnected", "Add", "Tanh", "DataConvert")):
            return ops
    except ImportError:
        pass
    return L


LIB = _library()


@dsl.composed("RNNCell", domain=DOMAIN)
def rnn_cell(x, w, b, h, r):
    """TIM-VX RNNCell: out = tanh(x·wᵀ + b + h·rᵀ); state = out quantized to u8."""
    out = LIB.Tanh(LIB.Add(LIB.FullyConnected(x, w, b), LIB.FullyConnected(h, r)))
    return out, LIB.DataConvert(out, dtype=dsl.u8, scale=0.0036, zero_point=0)


def rnn_ref(x, w, b, h, r):
    out = np.tanh(x.astype(np.float64) @ w.T + b + h.astype(np.float64) @ r.T).astype(np.float32)
    return out, L.quantize_ref(out, 0.0036)


def rnn_graph(batch=None):
    g = dsl.Graph("cell")
    x = g.input("x", (batch, 3), dsl.f32)
    h = g.input("h", (batch, 4), dsl.f32)
    out, state = rnn_cell(x, g.constant("w", W), g.constant("b", B), h, g.constant("r", R))
    g.output(out, "out")
    g.output(state, "state")
    return g


def test_rnn_cell_goldens_eager_and_graph(backend):
    h0 = np.zeros((2, 4), np.float32)
    out, state = rnn_cell(X, W, B, h0, R, backend=backend)
    np.testing.assert_allclose(out, OUT_GOLDEN, atol=1e-5)
    np.testing.assert_array_equal(state, STATE_GOLDEN)
    model = rnn_graph().compile(backend=backend)
    res = model.run({"x": X, "h": h0})
    np.testing.assert_allclose(res["out"], OUT_GOLDEN, atol=1e-5)
    np.testing.assert_array_equal(res["state"], STATE_GOLDEN)
    assert res["state"].dtype == np.uint8
    # a non-zero state, fed back for a few steps, eager == graph == numpy
    h = np.random.default_rng(3).uniform(-1, 1, (2, 4)).astype(np.float32)
    for _ in range(3):
        ref_out, ref_state = rnn_ref(X, W, B, h, R)
        res = model.run({"x": X, "h": h})
        e_out, e_state = rnn_cell(X, W, B, h, R, backend=backend)
        np.testing.assert_allclose(res["out"], ref_out, atol=1e-5)
        np.testing.assert_allclose(e_out, res["out"], atol=1e-6)
        assert np.abs(res["state"].astype(int) - ref_state).max() <= 1  # rounding at .5 boundaries
        np.testing.assert_array_equal(e_state, res["state"])
        h = res["out"]


def test_composed_node_keeps_its_subgraph_and_is_inlined():
    g = rnn_graph(batch=2)
    (node,) = g.nodes
    assert node.op_type == "RNNCell" and node.domain == DOMAIN
    assert type(node.op).composed and node.subgraph is not None
    assert [n.op_type for n in node.subgraph.nodes] == ["FullyConnected", "FullyConnected", "Add", "Tanh",
                                                        "DataConvert"]
    assert [t.name for t in node.subgraph.inputs] == ["x", "w", "b", "h", "r"]
    assert g.tensors["state"].spec == dsl.TensorSpec((2, 4), dsl.u8, quant=g.tensors["state"].spec.quant)
    assert "(composed: 5 nodes)" in str(g)
    model = g.compile(backend="interpreter", fuse=False)  # one node per body node
    names = [n.name for n in model.graph.nodes]
    assert len(names) == 5 and all(n.startswith(node.name + "/") for n in names)
    assert not any(n.subgraph for n in model.graph.nodes)
    fn = node.op.function_graph([dsl.f32] * 5, [2, 2, 1, 2, 2])
    assert fn.inputs[0].spec.shape == (None, None) and fn.outputs[1].spec.dtype == dsl.u8
    assert registry.lookup(DOMAIN, "RNNCell") is rnn_cell


# --------------------------------------------------------------------------- params, nesting, optional inputs

@dsl.composed("Gate", domain=DOMAIN)
def gate(x, bias=None, *, alpha: float = 0.2):
    y = L.HardSigmoid(x, alpha=alpha)
    return y if bias is None else L.Add(y, bias)


@dsl.composed("TwoGates", domain=DOMAIN)
def two_gates(x, scale=0.5):
    first = gate(x, alpha=scale)
    return gate(first, x, alpha=scale * 2), first


def test_params_nesting_and_optional_inputs(backend):
    assert list(gate.param_table()) == ["alpha"] and gate.tensor_args == ("x", "bias")
    assert list(two_gates.param_table()) == ["scale"] and two_gates.tensor_args == ("x",)
    x = np.random.default_rng(5).standard_normal((2, 5)).astype(np.float32)
    first = L.hard_sigmoid_ref(x, 0.25)
    ref = L.hard_sigmoid_ref(first, 0.5) + x
    e_out, e_first = two_gates(x, scale=0.25, backend=backend)
    np.testing.assert_allclose(e_out, ref, rtol=1e-6)
    g = dsl.Graph("nested")
    xi = g.input("x", (None, 5), dsl.f32)
    out, f = two_gates(xi, scale=0.25)
    g.output(out, "out")
    g.output(f, "first")
    model = g.compile(backend=backend)
    res = model.run({"x": x})
    np.testing.assert_array_equal(res["out"], e_out)
    np.testing.assert_array_equal(res["first"], e_first)
    assert [n.op_type for n in model.graph.nodes] == ["HardSigmoid", "HardSigmoid", "Add"]
    assert gate(alpha=1) == gate(alpha=1.0) and gate(alpha=1) != gate(alpha=2)


def test_composed_errors():
    with pytest.raises(TypeError, match="Gate has no param 'alhpa'.*did you mean alpha"):
        gate(np.zeros(2, np.float32), alhpa=1.0)
    with pytest.raises(TypeError, match="takes 1 to 2 inputs \\(x, bias=None\\), got 3"):
        gate(np.zeros(2, np.float32), np.zeros(2, np.float32), np.zeros(2, np.float32))

    @dsl.composed("Bad", domain=DOMAIN)
    def bad(x):
        return 3

    try:
        g = dsl.Graph("g")
        with pytest.raises(TypeError, match="output 0 is int"):
            bad(g.input("x", (2,), dsl.f32))
    finally:
        registry.unregister(bad)
    with pytest.raises(dsl.VerifyError, match="Gate.*HardSigmoid takes f32"):
        gate(dsl.Graph("h").input("x", (2,), dsl.i32))
    with pytest.raises(TypeError, match="\\*args"):
        dsl.composed("Star")(lambda *xs: xs)


def test_format_inference_runs_inside_composed_ops():
    @dsl.composed("ConvBlock", domain=DOMAIN)
    def conv_block(x, w):
        c = L.Conv3x3(x, w)
        return L.LaneSum(L.HardSigmoid(c)), c

    try:
        rng = np.random.default_rng(2)
        xv = rng.standard_normal((1, 5, 3, 4)).astype(np.float32)
        wv = rng.standard_normal((6, 5, 3, 3)).astype(np.float32)
        g = dsl.Graph("blk")
        s, c = conv_block(g.input("x", (None, 5, 3, 4), dsl.f32), g.constant("w", wv))
        g.output(s, "s")
        g.output(c, "c")
        model = g.compile(backend="interpreter")
        assert model.stats["reorders"] == 2  # x into blocks, c back to plain
        blocked = [n for n in model.graph.nodes if n.outputs[0].spec.format == "nchwc16"]
        assert {n.op_type for n in blocked} == {"Reorder", "Conv3x3", "HardSigmoid"}
        res = model.run({"x": xv})
        c_ref = L.conv3x3_ref(xv, wv)
        np.testing.assert_allclose(res["c"], c_ref, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(res["s"], L.hard_sigmoid_ref(c_ref).sum(1, keepdims=True), rtol=1e-4)
    finally:
        registry.unregister(conv_block)
