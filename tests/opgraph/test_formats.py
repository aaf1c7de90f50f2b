"""Formats: NCHWc16 layout, reorder kernels, format selection and reorder insertion."""
import numpy as np
import pytest

import dsl
from dsl.opgraph import formats as F, reorder
import oplayer_testops as L

RNG = np.random.default_rng(11)


def test_physical_shape_and_references():
    assert F.physical_shape((2, 20, 3, 5), "nchwc16") == (2, 2, 3, 5, 16)
    assert F.physical_shape((2, 16, 3, 5), "nchwc16") == (2, 1, 3, 5, 16)
    assert F.physical_shape((2, 3), "plain") == (2, 3)
    with pytest.raises(ValueError, match="4-D"):
        F.physical_shape((2, 3), "nchwc16")
    x = RNG.standard_normal((1, 20, 2, 3)).astype(np.float32)
    y = F.to_nchwc16_ref(x)
    assert y[0, 1, 1, 2, 3] == x[0, 19, 1, 2] and not y[0, 1, :, :, 4:].any()
    np.testing.assert_array_equal(F.to_plain_ref(y, 20), x)


@pytest.mark.parametrize("channels", [3, 16, 20])
def test_reorder_kernels(backend, channels):
    x = RNG.standard_normal((2, channels, 3, 4)).astype(np.float32)
    y = np.full(F.physical_shape(x.shape, "nchwc16"), 7.0, np.float32)
    reorder.plain_to_nchwc16(x, y, backend=backend)
    np.testing.assert_array_equal(y, F.to_nchwc16_ref(x))
    back = np.empty_like(x)
    reorder.nchwc16_to_plain(y, back, backend=backend)
    np.testing.assert_array_equal(back, x)
    y[...] = 5.0
    reorder.fix_padding(y, channels, backend)
    np.testing.assert_array_equal(y, F.to_nchwc16_ref(np.full_like(x, 5.0)))


def conv_chain(blocked=True):
    """Conv -> HardSigmoid -> Add(., conv) -> Conv -> {output, HardSigmoid -> LaneSum}."""
    g = dsl.Graph("convchain")
    x = g.input("x", (None, 20, 4, 5), dsl.f32)
    w1 = g.constant("w1", RNG.standard_normal((18, 20, 3, 3)).astype(np.float32) * 0.2)
    w2 = g.constant("w2", RNG.standard_normal((18, 18, 3, 3)).astype(np.float32) * 0.2)
    c = L.Conv3x3(x, w1, blocked=blocked)
    a = L.Add(L.HardSigmoid(c, alpha=0.3), c)
    c2 = L.Conv3x3(a, w2, blocked=blocked)
    g.output(c2, "y")
    g.output(L.LaneSum(L.HardSigmoid(c2)), "s")  # sums padding lanes: needs the zero invariant
    g.output(a, "a")
    return g


def conv_chain_ref(g, x):
    c = L.conv3x3_ref(x, g.constants["w1"])
    a = L.hard_sigmoid_ref(c, 0.3) + c
    c2 = L.conv3x3_ref(a, g.constants["w2"])
    return {"y": c2, "s": L.hard_sigmoid_ref(c2).sum(1, keepdims=True), "a": a}


def test_nchwc16_chain_equals_plain(backend):
    g = conv_chain()
    x = RNG.standard_normal((2, 20, 4, 5)).astype(np.float32)
    blocked = g.compile(backend=backend)
    plain = g.compile(backend=backend, formats="plain")
    assert plain.stats["reorders"] == 0
    assert all(n.outputs[0].spec.format == "plain" for n in plain.graph.nodes)
    # the elementwise ops followed the convs into nchwc16: only x in, y and a out are reordered
    assert blocked.stats["reorders"] == 3
    fmts = {n.name: n.outputs[0].spec.format for n in blocked.graph.nodes}
    assert [n.op_type for n in blocked.graph.nodes if fmts[n.name] == "plain"] == ["LaneSum", "Reorder", "Reorder"]
    rb, rp = blocked.run({"x": x}), plain.run({"x": x})
    ref = conv_chain_ref(g, x)
    for k in ("y", "s", "a"):
        np.testing.assert_allclose(rb[k], rp[k], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(rb[k], ref[k], rtol=1e-4, atol=1e-4)


def test_reorders_are_merged_cancelled_and_folded():
    g = dsl.Graph("merge")
    x = g.input("x", (1, 3, 2, 2), dsl.f32)
    w = g.constant("w", np.ones((3, 3, 3, 3), np.float32))
    c1 = L.Conv3x3(x, w)
    c2 = L.Conv3x3(x, w)                  # same x in blocks: one reorder serves both
    p1 = L.Conv3x3(c1, w, blocked=False)  # c1 back to plain ...
    p2 = L.Conv3x3(c1, w, blocked=False)  # ... once
    s = L.Add(c2, g.constant("k", np.full((1, 3, 2, 2), 0.5, np.float32)))  # constant blocked at compile time
    back = L.Conv3x3(L.Conv3x3(x, w, blocked=False), w)  # plain conv output into a blocked conv
    for name, t in dict(p1=p1, p2=p2, s=s, back=back).items():
        g.output(t, name)
    model = g.compile(backend="interpreter")
    reorders = [n for n in model.graph.nodes if n.op_type == "Reorder"]
    sources = sorted((n.inputs[0].name, n.op.to) for n in reorders)
    assert sources.count(("x", "nchwc16")) == 1
    assert len([s for s in sources if s[0] == c1.name]) == 1
    assert not any(n.inputs[0].name == "k" for n in reorders)
    assert any(name.startswith("k.nchwc16") for name in model.graph.constants)
    xv = RNG.standard_normal((1, 3, 2, 2)).astype(np.float32)
    res = model.run({"x": xv})
    wv = np.ones((3, 3, 3, 3), np.float32)
    c = L.conv3x3_ref(xv, wv)
    np.testing.assert_allclose(res["p1"], L.conv3x3_ref(c, wv), rtol=1e-5)
    np.testing.assert_allclose(res["p2"], res["p1"])
    np.testing.assert_allclose(res["s"], c + 0.5, rtol=1e-5)
    np.testing.assert_allclose(res["back"], L.conv3x3_ref(c, wv), rtol=1e-5)


def test_reorder_that_undoes_a_reorder_is_cancelled():
    g = dsl.Graph("cancel")
    x = g.input("x", (1, 4, 2, 2), dsl.f32)
    w = g.constant("w", np.ones((4, 4, 3, 3), np.float32))
    L.Conv3x3(x, w)
    g.output(L.Conv3x3(x, w), "y")
    g.output(L.LaneSum(x), "plain_use")  # x is plain anyway: no reorder back from x.nchwc16
    model = g.compile(backend="interpreter")
    assert model.stats["reorders"] == 2 and model.stats["removed"] == 1


def test_bad_select_format_answers_are_clear():
    class Wrong(dsl.Op):
        formats = ("plain",)
        kernels = {"default": lambda x, y: None}

        def infer(self, x):
            return x.spec

        def select_format(self, x):
            return ("nchwc16",), "plain"

    g = dsl.Graph("bad")
    g.output(Wrong(g.input("x", (1, 2, 3, 4), dsl.f32)), "y")
    with pytest.raises(ValueError, match=r"Wrong.select_format: format 'nchwc16' is not in the op's formats"):
        g.compile(backend="interpreter")

    class Short(Wrong):
        def select_format(self, x):
            return (), "plain"

    g = dsl.Graph("bad2")
    g.output(Short(g.input("x", (1, 2, 3, 4), dsl.f32)), "y")
    with pytest.raises(TypeError, match="returned 0 input formats for 1 inputs"):
        g.compile(backend="interpreter")


def test_library_conv_in_both_formats(backend):
    ops = pytest.importorskip("ops")
    if not hasattr(ops, "Conv"):
        pytest.skip("ops.Conv is not written yet")
    g = dsl.Graph("libconv")
    x = g.input("x", (None, 20, 5, 5), dsl.f32)
    w = g.constant("w", RNG.standard_normal((17, 20, 3, 3)).astype(np.float32) * 0.2)
    y = ops.Relu(ops.Conv(x, w, pads=[1, 1, 1, 1]))
    g.output(ops.Add(y, ops.Sigmoid(y)), "y")
    xv = RNG.standard_normal((2, 20, 5, 5)).astype(np.float32)
    auto = g.compile(backend=backend).run({"x": xv})["y"]
    plain = g.compile(backend=backend, formats="plain").run({"x": xv})["y"]
    np.testing.assert_allclose(auto, plain, rtol=1e-5, atol=1e-5)
    c = L.conv3x3_ref(xv, g.constants["w"])
    r = np.maximum(c, 0)
    np.testing.assert_allclose(plain, r + 1 / (1 + np.exp(-r)), rtol=1e-4, atol=1e-4)
