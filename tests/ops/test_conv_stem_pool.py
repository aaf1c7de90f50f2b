"""The stem convolution fused with the MaxPool after it (ops/conv_stem_pool.py, FusedConvPool)
against numpy conv + activation + maxpool on every backend: strides, kernels, conv and pool
pads, ceil_mode, odd sizes, channels not a multiple of 16, bands of 1-3 pooled rows, plain and
NCHWc16 output; the rewrite in a graph and where it must not fire; bad input."""
import dataclasses

import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph import formats as F
from ops.conv_fusion import FusedConvPool
from ops.conv_stem_pool import PoolWindow, StemPoolConfig, conv_stem_pool, launch_conv_stem_pool, stem_band
from ops.pool import pool_geometry
from test_conv_direct import activation_ref, conv_ref

RNG = np.random.default_rng(5)


def max_pool_ref(v, k, s, pads, ceil_mode):
    """MaxPool over the last two axes with -inf padding (ONNX semantics)."""
    out, begin, _ = pool_geometry(v.shape[2:], k, s, (1, 1), pads, "NOTSET", ceil_mode)
    y = np.empty(v.shape[:2] + out, v.dtype)
    for i in range(out[0]):
        r0 = i * s[0] - begin[0]
        for j in range(out[1]):
            c0 = j * s[1] - begin[1]
            y[:, :, i, j] = v[:, :, max(0, r0):r0 + k[0], max(0, c0):c0 + k[1]].max(axis=(2, 3))
    return y


CASES = [  # (N, C, H, W, M, conv k, conv strides, conv pads, pool k, pool strides, pool pads, ceil, band)
    (1, 3, 23, 29, 19, 3, (2, 2), (0, 0, 0, 0), (3, 3), (2, 2), (0, 0, 0, 0), 0, 2),  # squeezenet's pair
    (2, 2, 17, 20, 10, 3, (1, 1), (1, 1, 1, 1), (2, 3), (2, 2), (1, 0, 1, 1), 1, 3),  # batch, pool pads, ceil
    (1, 3, 30, 25, 8, 7, (2, 2), (3, 3, 3, 3), (3, 3), (2, 2), (1, 1, 1, 1), 0, 1),   # resnet's stem + pool
    (1, 1, 12, 37, 17, 2, (1, 2), (0, 1, 0, 0), (3, 2), (1, 3), (0, 0, 0, 0), 1, 2),  # mixed strides, ceil
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"M{c[4]}k{c[5]}s{c[6][1]}p{c[8][0]}{c[8][1]}c{c[11]}")
def test_stem_pool_matches_numpy(backend, case):
    n, c, h, wd, m, k, s, p, pk, ps, pp, ceil, band = case
    x = RNG.standard_normal((n, c, h, wd)).astype(np.float32)
    w = RNG.standard_normal((m, c, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    conv = np.maximum(conv_ref(x, w, b, s, (1, 1), p), 0)
    ref = max_pool_ref(conv, pk, ps, pp, ceil)
    _, begin, _ = pool_geometry(conv.shape[2:], pk, ps, (1, 1), pp, "NOTSET", ceil)
    y = np.empty(ref.shape, np.float32)
    launch_conv_stem_pool(conv_stem_pool, x, w, b, y, s, (1, 1), p[:2], conv.shape[2:],
                          PoolWindow(pk, ps, begin, ref.shape[2:]), backend, 1, 0.0, 0.0, band=band)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", [CASES[0][:4] + (32,) + CASES[0][5:], CASES[2][:4] + (16,) + CASES[2][5:]],
                         ids=["squeezenet", "resnet"])
def test_stem_pool_writes_nchwc16(backend, case):
    """NCHWc16 output (N, M/16, PH, PW, 16): each channel's pooled pixels 16 floats apart."""
    n, c, h, wd, m, k, s, p, pk, ps, pp, ceil, band = case
    x = RNG.standard_normal((n, c, h, wd)).astype(np.float32)
    w = RNG.standard_normal((m, c, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    ref = max_pool_ref(np.maximum(conv_ref(x, w, b, s, (1, 1), p), 0), pk, ps, pp, ceil)
    conv_hw = ((h + p[0] + p[2] - k) // s[0] + 1, (wd + p[1] + p[3] - k) // s[1] + 1)
    _, begin, _ = pool_geometry(conv_hw, pk, ps, (1, 1), pp, "NOTSET", ceil)
    y = np.full((n, m // 16) + ref.shape[2:] + (16,), np.nan, np.float32)
    launch_conv_stem_pool(conv_stem_pool, x, w, b, y, s, (1, 1), p[:2], conv_hw,
                          PoolWindow(pk, ps, begin, ref.shape[2:]), backend, 1, 0.0, 0.0, band=band)
    np.testing.assert_allclose(F.to_plain_ref(y, m), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cores, images, rows, band", [(2, 1, 55, 28), (2, 8, 30, 30), (1, 1, 30, 30),
                                                     (1, 1, 56, 32), (8, 1, 56, 7), (64, 1, 55, 4),
                                                     (64, 1, 3, 3)])
def test_stem_band_gives_each_core_one_item(monkeypatch, cores, images, rows, band):
    """Bands of pooled rows: one work item a core from ``dsl.target``'s cores, never fewer than
    MIN_BAND rows (each band computes a stem row again) unless the image has fewer, never more
    than MAX_BAND (each worker copies its band's input rows)."""
    real = dsl.target("numba")
    monkeypatch.setattr(dsl, "target", lambda backend=None: dataclasses.replace(real, compute_units=cores))
    assert stem_band(images, rows) == band


@pytest.mark.parametrize("blocked", [True, False], ids=["nchwc16", "plain"])
def test_stem_pool_narrow_tiles(backend, blocked):
    """AVX2's tile shape (8-lane vectors: two per NCHWc16 block) and an odd pixel count, with
    48 channels in groups of 16 and a 2-row pool stride-1 (three windows open at once)."""
    n, c, h, wd, m, k = 1, 3, 19, 23, 48, 3
    x = RNG.standard_normal((n, c, h, wd)).astype(np.float32)
    w = RNG.standard_normal((m, c, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    conv = np.maximum(conv_ref(x, w, b, (1, 2), (1, 1), (1, 0, 1, 0)), 0)
    ref = max_pool_ref(conv, (3, 2), (1, 2), (0, 0, 0, 0), 0)
    y = np.full((n, m // 16) + ref.shape[2:] + (16,) if blocked else ref.shape, np.nan, np.float32)
    launch_conv_stem_pool(conv_stem_pool, x, w, b, y, (1, 2), (1, 1), (1, 0), conv.shape[2:],
                          PoolWindow((3, 2), (1, 2), (0, 0), ref.shape[2:]), backend, 1, 0.0, 0.0,
                          cfg=StemPoolConfig(V=8, P=5, NV=2), band=4)
    np.testing.assert_allclose(F.to_plain_ref(y, m) if blocked else y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act, params", [("", ()), ("Clip", (-0.5, 0.75))])
def test_fused_conv_pool_op(backend, act, params):
    """The op on its own: no activation (negative maxima) and Clip, no bias, dilated conv."""
    x = RNG.standard_normal((1, 3, 14, 19)).astype(np.float32)
    w = RNG.standard_normal((5, 3, 3, 3)).astype(np.float32)
    y = FusedConvPool(x, w, dilations=[2, 1], activation=act, activation_params=params,
                      pool_kernel_shape=[3, 3], pool_strides=[2, 2], pool_ceil_mode=1, backend=backend)
    v = activation_ref(conv_ref(x, w, np.zeros(5, np.float32), (1, 1), (2, 1), (0, 0, 0, 0)), act, params) \
        if act else conv_ref(x, w, np.zeros(5, np.float32), (1, 1), (2, 1), (0, 0, 0, 0))
    np.testing.assert_allclose(y, max_pool_ref(v, (3, 3), (2, 2), (0, 0, 0, 0), 1), rtol=1e-4, atol=1e-4)


def _stem_graph(shared: bool):
    g = dsl.Graph("stem_pool")
    xi = g.input("x", (1, 3, 21, 26), dsl.f32)
    w = RNG.standard_normal((24, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(24).astype(np.float32)
    r = ops.Relu(ops.Conv(xi, g.constant("w", w), g.constant("b", b), strides=[2, 2]))
    g.output(ops.MaxPool(r, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)[0], "y")
    if shared:  # the activation read twice: the stem's output must reach memory
        g.output(r, "r")
    return g, w, b


def test_conv_relu_maxpool_becomes_one_node(backend):
    g, w, b = _stem_graph(shared=False)
    model = g.compile(backend=backend)
    assert [nd.op_type for nd in model.graph.nodes] == ["FusedConvPool"]
    x = RNG.standard_normal((1, 3, 21, 26)).astype(np.float32)
    want = max_pool_ref(np.maximum(conv_ref(x, w, b, (2, 2)), 0), (3, 3), (2, 2), (0, 0, 0, 0), 1)
    np.testing.assert_allclose(model.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


def test_fused_node_exports_as_conv_relu_maxpool(backend):
    """The compiled graph's FusedConvPool writes back as standard Conv, Relu and MaxPool
    (ceil_mode kept) that onnxruntime runs to opdsl's result."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    g, _, _ = _stem_graph(shared=False)
    model = g.compile(backend=backend)
    exported = model.graph.to_onnx()
    onnx.checker.check_model(exported, full_check=True)
    assert [(n.domain, n.op_type) for n in exported.graph.node if n.op_type != "Constant"] == \
        [("", "Conv"), ("", "Relu"), ("", "MaxPool")]
    x = RNG.standard_normal((1, 3, 21, 26)).astype(np.float32)
    sess = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], model.run({"x": x})["y"], rtol=1e-4, atol=1e-4)


def test_stem_pool_feeds_a_1x1_convolution_nchwc16(backend):
    """Stem -> Relu -> MaxPool -> 1x1 Conv: the fused node writes NCHWc16 (32 channels) for the
    1x1 convolution to read; the result equals numpy's."""
    g = dsl.Graph("stem_1x1")
    xi = g.input("x", (1, 3, 21, 26), dsl.f32)
    w = RNG.standard_normal((32, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(32).astype(np.float32)
    w2 = RNG.standard_normal((20, 32, 1, 1)).astype(np.float32)
    r = ops.Relu(ops.Conv(xi, g.constant("w", w), g.constant("b", b), strides=[2, 2]))
    pooled = ops.MaxPool(r, kernel_shape=[3, 3], strides=[2, 2])[0]
    g.output(ops.Conv(pooled, g.constant("w2", w2)), "y")
    model = g.compile(backend=backend)
    stem = model.graph.nodes[0]
    assert stem.op_type == "FusedConvPool" and stem.outputs[0].spec.format == "nchwc16"
    x = RNG.standard_normal((1, 3, 21, 26)).astype(np.float32)
    p = max_pool_ref(np.maximum(conv_ref(x, w, b, (2, 2)), 0), (3, 3), (2, 2), (0, 0, 0, 0), 0)
    want = np.einsum("oc,nchw->nohw", w2[:, :, 0, 0], p)
    np.testing.assert_allclose(model.run({"x": x})["y"], want, rtol=1e-4, atol=1e-3)


def test_read_twice_does_not_fuse():
    g, w, b = _stem_graph(shared=True)
    model = g.compile(backend="interpreter")
    assert [nd.op_type for nd in model.graph.nodes] == ["FusedConv", "MaxPool"]
    x = RNG.standard_normal((1, 3, 21, 26)).astype(np.float32)
    out = model.run({"x": x})
    r = np.maximum(conv_ref(x, w, b, (2, 2)), 0)
    np.testing.assert_allclose(out["r"], r, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["y"], max_pool_ref(r, (3, 3), (2, 2), (0, 0, 0, 0), 1), rtol=1e-4, atol=1e-4)


def test_dilated_pool_and_wide_images_do_not_fuse():
    """A dilated MaxPool, and a 32-channel image 20 pixels wide (conv_direct's), stay two nodes."""
    g = dsl.Graph("no")
    xi = g.input("x", (1, 3, 20, 20), dsl.f32)
    g.output(ops.MaxPool(ops.Conv(xi, g.constant("w", np.ones((4, 3, 3, 3), np.float32))),
                         kernel_shape=[2, 2], dilations=[2, 2])[0], "y")
    yi = g.input("z", (1, 32, 20, 20), dsl.f32)
    g.output(ops.MaxPool(ops.Conv(yi, g.constant("v", np.ones((4, 32, 3, 3), np.float32))),
                         kernel_shape=[2, 2])[0], "y2")
    assert "FusedConvPool" not in [nd.op_type for nd in g.compile(backend="interpreter").graph.nodes]


def test_bad_input_is_named():
    x = np.zeros((1, 3, 8, 8), np.float32)
    w = np.zeros((4, 3, 3, 3), np.float32)
    with pytest.raises(dsl.VerifyError, match=r"FusedConvPool pool_kernel_shape \[3\] needs 2 values"):
        FusedConvPool(x, w, pool_kernel_shape=[3], backend="interpreter")
    with pytest.raises(dsl.VerifyError, match="FusedConvPool takes f32"):
        FusedConvPool(x.astype(np.float64), w.astype(np.float64), pool_kernel_shape=[2, 2], backend="interpreter")
    with pytest.raises(dsl.VerifyError, match="pooling window of span 7"):
        FusedConvPool(x, w, pool_kernel_shape=[7, 7], backend="interpreter")
    with pytest.raises(dsl.VerifyError, match="pool_auto_pad 'SAME'"):
        FusedConvPool(x, w, pool_kernel_shape=[2, 2], pool_auto_pad="SAME", backend="interpreter")
    with pytest.raises(ValueError, match="NCHWc16 output needs M a multiple of 16, M = 4"):
        launch_conv_stem_pool(conv_stem_pool, x, w, None, np.zeros((1, 0, 3, 3, 16), np.float32), (1, 1),
                              (1, 1), (0, 0), (6, 6), PoolWindow((2, 2), (2, 2), (0, 0), (3, 3)), "interpreter", 0,
                              0.0, 0.0)
    with pytest.raises(ValueError, match="band=0"):
        launch_conv_stem_pool(conv_stem_pool, x, w, None, np.zeros((1, 4, 3, 3), np.float32), (1, 1), (1, 1),
                              (0, 0), (6, 6), PoolWindow((2, 2), (2, 2), (0, 0), (3, 3)), "interpreter", 0, 0.0,
                              0.0, band=0)
