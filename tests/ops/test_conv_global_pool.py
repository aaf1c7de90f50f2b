"""A 1×1 convolution and the GlobalAveragePool reading it as one op (ops/conv_global_pool.py,
FusedConvGlobalPool on ops/conv_pointwise.py's pooled epilogue) against numpy on every backend:
plain and NCHWc16 x, stride 1 and 2, pair items with an overlapping last item, a lone last
pixel, output channels past a whole group, a batch; AVX-512's and AVX2's tiles; the rewrite
in a graph, where it must not fire (read twice, a residual, a 3x3 window); the export through
onnxruntime; bad input."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph import formats as F
from ops import conv_pointwise as pw
from ops.conv_global_pool import FusedConvGlobalPool
from ops.conv_pointwise import conv_pointwise, launch_conv_pointwise
from ops.gemm_packed import ACT_LEAKY_RELU, ACT_RELU
from test_conv_direct import activation_ref
from test_conv_pointwise import data, pointwise_ref

RNG = np.random.default_rng(29)

CASES = [  # (N, C, H, W, M, stride, x format)
    (1, 40, 13, 13, 40, 1, "nchwc16"),  # squeezenet's head in small: pair items, the last one overlapping
    (2, 20, 7, 7, 33, 1, "plain"),      # batch, plain pair items or 7-pixel tiles, one channel past a group
    (1, 17, 9, 8, 16, 2, "plain"),      # stride 2 read in place
    (2, 24, 9, 7, 50, 2, "nchwc16"),    # strided NCHWc16: gathered first
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"C{c[1]}M{c[4]}s{c[5]}{c[6]}")
@pytest.mark.parametrize("act, params", [("Relu", ()), ("LeakyRelu", (0.1,))])
def test_pooled_launch_matches_numpy(backend, case, act, params):
    n, c, h, wd, m, s, fmt = case
    x, w, b = data(n, c, h, wd, m)
    want = activation_ref(pointwise_ref(x, w, b, (s, s)), act, params).mean(axis=(2, 3), keepdims=True)
    y = np.full((n, m, 1, 1), np.nan, np.float32)
    code = {"Relu": ACT_RELU, "LeakyRelu": ACT_LEAKY_RELU}[act]
    launch_conv_pointwise(conv_pointwise, F.to_nchwc16_ref(x) if fmt == "nchwc16" else x, w, b, y, None, (s, s),
                          fmt == "nchwc16", backend, code, *(params + (0.0, 0.0))[:2], pooled=True)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def test_pooled_launch_on_avx2_tiles(backend):
    """AVX2's 6-pixel × 16-channel tile: 13×13 = 169 pixels as 14 items of 12 and a lone pixel."""
    x, w, b = data(1, 20, 13, 13, 24)
    y = np.full((1, 24, 1, 1), np.nan, np.float32)
    launch_conv_pointwise(conv_pointwise, F.to_nchwc16_ref(x), w, b, y, None, (1, 1), True, backend, ACT_RELU,
                          0.0, 0.0, cfg=pw.DirectConfig(V=8, NV=2, P=6), row_shape=(4, 3), pooled=True)
    np.testing.assert_allclose(y, np.maximum(pointwise_ref(x, w, b), 0).mean(axis=(2, 3), keepdims=True),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("act, params", [("", ()), ("Clip", (-0.25, 0.5))])
def test_fused_conv_global_pool_op(backend, act, params):
    """The op on its own: no activation (negative means) and Clip, no bias."""
    x, w, _ = data(1, 19, 6, 5, 21)
    y = FusedConvGlobalPool(x, w, activation=act, activation_params=params, backend=backend)
    v = pointwise_ref(x, w)
    want = (activation_ref(v, act, params) if act else v).mean(axis=(2, 3), keepdims=True)
    assert y.shape == (1, 21, 1, 1)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def _head_graph(shared=False, residual=False, kernel=1):
    """x (1, 32, 13, 13) -> squeeze-like 1x1 Conv -> Relu -> 1x1 Conv 32->40 -> Relu -> GlobalAveragePool."""
    g = dsl.Graph("head")
    xi = g.input("x", (1, 32, 13, 13), dsl.f32)
    w1 = (RNG.standard_normal((32, 32, 1, 1)) / 6).astype(np.float32)
    w2 = (RNG.standard_normal((40, 32, kernel, kernel)) / 6).astype(np.float32)
    b2 = RNG.standard_normal(40).astype(np.float32)
    h = ops.Relu(ops.Conv(xi, g.constant("w1", w1)))
    conv = ops.Conv(h, g.constant("w2", w2), g.constant("b2", b2), pads=[kernel // 2] * 4)
    if residual:
        conv = ops.Add(conv, ops.Conv(h, g.constant("w3", w2[:, :, :1, :1].copy())))
    r = ops.Relu(conv)
    g.output(ops.GlobalAveragePool(r), "y")
    if shared:
        g.output(r, "r")
    return g, (w1, w2, b2)


def _head_ref(x, w1, w2, b2):
    h = np.maximum(pointwise_ref(x, w1), 0)
    return np.maximum(pointwise_ref(h, w2, b2), 0).mean(axis=(2, 3), keepdims=True)


def test_conv_relu_global_pool_becomes_one_node(backend):
    g, consts = _head_graph()
    model = g.compile(backend=backend)
    assert [nd.op_type for nd in model.graph.nodes] == ["FusedConv", "FusedConvGlobalPool"]
    x = RNG.standard_normal((1, 32, 13, 13)).astype(np.float32)
    np.testing.assert_allclose(model.run({"x": x})["y"], _head_ref(x, *consts), rtol=1e-4, atol=1e-5)


def test_fused_node_exports_as_conv_relu_global_pool():
    """The compiled FusedConvGlobalPool writes back as standard Conv, Relu and GlobalAveragePool
    that onnxruntime runs to opdsl's result."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    g, _ = _head_graph()
    model = g.compile(backend="numba")
    exported = model.graph.to_onnx()
    onnx.checker.check_model(exported, full_check=True)
    assert [(n.domain, n.op_type) for n in exported.graph.node if n.op_type != "Constant"][-3:] == \
        [("", "Conv"), ("", "Relu"), ("", "GlobalAveragePool")]
    x = RNG.standard_normal((1, 32, 13, 13)).astype(np.float32)
    sess = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], model.run({"x": x})["y"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("how", ["shared", "residual", "3x3"])
def test_where_it_does_not_fuse(how):
    """The activation read twice, a residual before the pool (ResNet's head) and a 3x3 window
    keep the GlobalAveragePool; the results stay numpy's."""
    g, (w1, w2, b2) = _head_graph(shared=how == "shared", residual=how == "residual", kernel=3 if how == "3x3" else 1)
    model = g.compile(backend="interpreter")
    kinds = [nd.op_type for nd in model.graph.nodes]
    assert "FusedConvGlobalPool" not in kinds and "GlobalAveragePool" in kinds
    if how == "shared":
        x = RNG.standard_normal((1, 32, 13, 13)).astype(np.float32)
        np.testing.assert_allclose(model.run({"x": x})["y"], _head_ref(x, w1, w2, b2), rtol=1e-4, atol=1e-5)


def test_bad_input_is_named():
    x = np.zeros((1, 3, 8, 8), np.float32)
    with pytest.raises(dsl.VerifyError, match="FusedConvGlobalPool takes f32 .* unpadded 1x1 window"):
        FusedConvGlobalPool(x, np.zeros((4, 3, 3, 3), np.float32), backend="interpreter")
    with pytest.raises(dsl.VerifyError, match="FusedConvGlobalPool takes f32"):
        FusedConvGlobalPool(x.astype(np.float64), np.zeros((4, 3, 1, 1)), backend="interpreter")
    with pytest.raises(ValueError, match=r"pooled output must be plain \(1, 4, 1, 1\)"):
        launch_conv_pointwise(conv_pointwise, x, np.zeros((4, 3, 1, 1), np.float32), None,
                              np.zeros((1, 4, 8, 8), np.float32), None, (1, 1), False, "interpreter", 0, 0.0, 0.0,
                              pooled=True)
