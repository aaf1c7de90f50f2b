"""The 1×1 convolution (ops/conv_pointwise.py) against numpy on every backend: plain and NCHWc16
in and out, stride 1 and 2, odd pixel counts, channel counts that are not multiples of 16,
the fused epilogues with a residual; the format planner keeping a conv chain blocked."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph import formats as F
from dsl.opgraph.spec import TensorSpec
from ops.conv_fusion import FusedConv
from ops import conv_pointwise as pw
from ops.conv_pointwise import conv_pointwise, launch_conv_pointwise
from test_conv_direct import activation_ref

RNG = np.random.default_rng(11)


def pointwise_ref(x, w, b=None, strides=(1, 1)):
    """f64 numpy 1×1 convolution of NCHW ``x``: every s-th pixel of every s-th row."""
    xs = x[:, :, ::strides[0], ::strides[1]].astype(np.float64)
    y = np.einsum("nchw,mc->nmhw", xs, w[:, :, 0, 0].astype(np.float64))
    return y if b is None else y + b[None, :, None, None]


def data(n, c, h, wd, m):
    x = RNG.standard_normal((n, c, h, wd)).astype(np.float32)
    w = (RNG.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    return x, w, b


CASES = [  # (N, C, H, W, M, stride)
    (1, 20, 5, 7, 33, 1),   # 35 pixels (5 tiles of 7), M past two blocks, C a block and a bit
    (2, 17, 9, 8, 16, 2),   # batch, stride 2 over odd rows: 5x4 output
    (1, 3, 4, 5, 5, 2),     # fewer than 16 channels in and out
    (1, 48, 3, 3, 40, 1),   # 9 pixels: a full tile and a partial one, three input blocks
    (1, 20, 7, 9, 21, 1),   # plain: the pixel-vector tile, 63 pixels (a tile of 48 and an overlapping one)
    (2, 9, 8, 6, 10, 1),    # plain: batch, exactly one pixel-vector tile per image, 10 = 8 + 2 rows
    (2, 40, 9, 15, 64, 2),  # two oc groups × images × 5 rows × (7 + 1)-pixel tiles: the item counters carry
    (3, 16, 8, 8, 20, 1),   # plain: 3 row groups × 2 pixel tiles × 3 images: the row tile's counters carry
    (2, 24, 9, 3, 20, 2),   # stride 2 onto 5x2 outputs: a tile of the flattened image wraps 2-3 rows
    (1, 20, 5, 7, 130, 1),  # plain x gathered into NCHWc16 (M >= GATHER_PLAIN_MIN_M), lanes past C zero
    (2, 33, 7, 6, 128, 2),  # plain x strided: gathered, batch of two, three input blocks
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"C{c[1]}M{c[4]}s{c[5]}")
@pytest.mark.parametrize("fmt_in, fmt_out", [("plain", "plain"), ("nchwc16", "nchwc16"), ("plain", "nchwc16"),
                                             ("nchwc16", "plain")])
def test_pointwise_matches_numpy(backend, case, fmt_in, fmt_out):
    n, c, h, wd, m, s = case
    y = check_pointwise(backend, case, fmt_in, fmt_out)
    oh, ow = (h - 1) // s + 1, (wd - 1) // s + 1
    if fmt_out == "nchwc16":  # NCHWc16 padding channels are written as zeros
        assert (F.to_plain_ref(y, F.physical_shape((n, m, oh, ow), "nchwc16")[1] * 16)[:, m:] == 0).all()


def check_pointwise(backend, case, fmt_in, fmt_out):
    """Launch the 1×1 kernel on ``case`` (n, c, h, w, m, stride) with x and y in the given formats
    (y starts as NaN), compare it with numpy, and return y as stored."""
    n, c, h, wd, m, s = case
    x, w, b = data(n, c, h, wd, m)
    oh, ow = (h - 1) // s + 1, (wd - 1) // s + 1
    xi = F.to_nchwc16_ref(x) if fmt_in == "nchwc16" else x
    y = np.full(F.physical_shape((n, m, oh, ow), fmt_out), np.nan, np.float32)
    launch_conv_pointwise(conv_pointwise, xi, w, b, y, None, (s, s), fmt_in == "nchwc16", backend, 0, 0.0, 0.0)
    got = F.to_plain_ref(y, m) if fmt_out == "nchwc16" else y
    np.testing.assert_allclose(got, pointwise_ref(x, w, b, (s, s)), rtol=1e-4, atol=1e-4)
    return y


@pytest.mark.parametrize("act, params", [("Relu", ()), ("Clip", (0.25, 1.5)), ("LeakyRelu", (0.1,))])
def test_pointwise_fused_epilogue_with_residual(backend, act, params):
    """FusedConv on the 1×1 kernel: bias, then the residual Z, then the activation; eager
    (plain) and in a graph whose blocked output the planner turns plain for the graph output."""
    x, w, b = data(1, 18, 6, 5, 21)
    z = RNG.standard_normal((1, 21, 3, 3)).astype(np.float32)
    v = pointwise_ref(x, w, b, (2, 2)) + z
    want = activation_ref(v, act, params)
    y = FusedConv(x, w, b, z, strides=[2, 2], activation=act, activation_params=params, backend=backend)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    # stride 1 on plain tensors: the pixel-vector tile's two epilogues (whole and overlapping tile)
    x1, w1, b1 = data(1, 5, 10, 5, 11)
    z1 = RNG.standard_normal((1, 11, 10, 5)).astype(np.float32)
    v1 = pointwise_ref(x1, w1, b1) + z1
    want1 = {"Relu": lambda: np.maximum(v1, 0), "Clip": lambda: np.clip(v1, *params),
             "LeakyRelu": lambda: np.where(v1 >= 0, v1, params[0] * v1)}[act]()
    y1 = FusedConv(x1, w1, b1, z1, activation=act, activation_params=params, backend=backend)
    np.testing.assert_allclose(y1, want1, rtol=1e-4, atol=1e-4)
    zb = F.to_nchwc16_ref(z)
    yb = np.full(zb.shape, np.nan, np.float32)
    code = {"Relu": 1, "Clip": 2, "LeakyRelu": 3}[act]
    from ops.conv_fusion import ACTIVATIONS
    assert ACTIVATIONS[act][0] == code
    lo, hi = (tuple(params) + (0.0, 0.0))[:2]
    launch_conv_pointwise(conv_pointwise, F.to_nchwc16_ref(x), w, b, yb, zb, (2, 2), True, backend, code, lo, hi)
    np.testing.assert_allclose(F.to_plain_ref(yb, 21), want, rtol=1e-4, atol=1e-4)
    assert (F.to_plain_ref(yb, 32)[:, 21:] == 0).all()  # even under Clip(0.25, ...)


def epilogue_ref(v, act, params):
    """activation_ref, with "" for no activation."""
    return v if act == "" else activation_ref(v, act, params)


@pytest.mark.parametrize("act, params", [("Relu", ()), ("Clip", (-0.5, 0.75)), ("", ())])
@pytest.mark.parametrize("m", [40, 48])
def test_pointwise_blocked_whole_tiles_with_residual(backend, act, params, m):
    """NCHWc16 in and out: the first 32 channels take the whole-tile epilogue (14 pixels = 2
    tiles of 7; Relu: stored from the registers), the 15th pixel's partial tile and the
    last block the general one; the second group of 32 holds one stored vector (48 = 32 + 16
    channels: only it is summed) or a block and a half (40); bias, residual and activation agree
    on every path."""
    x, w, b = data(1, 24, 3, 5, m)
    z = RNG.standard_normal((1, m, 3, 5)).astype(np.float32)
    want = epilogue_ref(pointwise_ref(x, w, b) + z, act, params)
    yb = np.full(F.physical_shape((1, m, 3, 5), "nchwc16"), np.nan, np.float32)
    code = {"Relu": 1, "Clip": 2, "": 0}[act]
    lo, hi = (tuple(params) + (0.0, 0.0))[:2]
    launch_conv_pointwise(conv_pointwise, F.to_nchwc16_ref(x), w, b, yb, F.to_nchwc16_ref(z), (1, 1), True, backend,
                          code, lo, hi)
    np.testing.assert_allclose(F.to_plain_ref(yb, m), want, rtol=1e-4, atol=1e-4)
    assert (F.to_plain_ref(yb, 48)[:, m:] == 0).all()
    # plain y without a residual (the channel tile's transposing lane stores)
    yp = np.full((1, m, 3, 5), np.nan, np.float32)
    launch_conv_pointwise(conv_pointwise, F.to_nchwc16_ref(x), w, b, yp, None, (1, 1), True, backend, code, lo, hi)
    np.testing.assert_allclose(yp, epilogue_ref(pointwise_ref(x, w, b), act, params), rtol=1e-4, atol=1e-4)


def test_conv_chain_stays_blocked(backend):
    """1×1 -> 3×3 -> 1×1 + residual (a ResNet bottleneck) -> Relu -> GlobalAveragePool: the
    first 1×1 conv turns the plain input blocked, every later op reads NCHWc16, and the pool
    writes its plain output itself: no reorder anywhere."""
    x, w1, b1 = data(1, 8, 7, 7, 16)
    w3 = (RNG.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32)
    _, w2, b2 = data(1, 16, 1, 1, 32)
    _, ws, bs = data(1, 8, 1, 1, 32)
    g = dsl.Graph("bottleneck")
    xi = g.input("x", x.shape, dsl.f32)
    a = ops.Relu(ops.Conv(xi, g.constant("w1", w1), g.constant("b1", b1)))
    a = ops.Relu(ops.Conv(a, g.constant("w3", w3), pads=[1, 1, 1, 1]))
    short = ops.Conv(xi, g.constant("ws", ws), g.constant("bs", bs))
    y = ops.Relu(ops.Add(ops.Conv(a, g.constant("w2", w2), g.constant("b2", b2)), short))
    g.output(ops.GlobalAveragePool(y), "y")
    model = g.compile(backend=backend)
    assert model.stats["reorders"] == 0
    kernels = model.selected({"x": x})
    assert sorted(kernels.values()).count("pointwise") == 3
    r = np.maximum(pointwise_ref(x, w1, b1), 0)
    r3 = np.zeros((1, 16, 7, 7))
    rp = np.pad(r, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for i in range(3):
        for j in range(3):
            r3 += np.einsum("nchw,mc->nmhw", rp[:, :, i:i + 7, j:j + 7], w3[:, :, i, j].astype(np.float64))
    r3 = np.maximum(r3, 0).astype(np.float32)
    want = np.maximum(pointwise_ref(r3, w2, b2) + pointwise_ref(x, ws, bs), 0).mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(model.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


def test_gathered_inputs_in_a_model(backend):
    """A plain input of 20 channels into 130 (gathered into NCHWc16 first: a last group of 2 channels
    has no plain pair items), then a stride-2 1×1 on that NCHWc16 tensor (its pixels gathered): the
    model's plan replays both gathers, right on a second input too."""
    x, w1, b1 = data(1, 20, 9, 7, 130)
    _, w2, b2 = data(1, 130, 1, 1, 16)
    g = dsl.Graph("gathers")
    xi = g.input("x", x.shape, dsl.f32)
    a = ops.Relu(ops.Conv(xi, g.constant("w1", w1), g.constant("b1", b1)))
    g.output(ops.Conv(a, g.constant("w2", w2), g.constant("b2", b2), strides=[2, 2]), "y")
    model = g.compile(backend=backend)
    assert sorted(model.selected({"x": x}).values()) == ["pointwise", "pointwise"]
    model.run({"x": x})
    plan = next(iter(model._plans.values())).first
    assert [hi - lo for n, lo, hi in plan.spans if n.op_type in ("Conv", "FusedConv")] == [2, 2]  # gather, conv
    for xv in (x, RNG.standard_normal(x.shape).astype(np.float32)):
        a_ref = np.maximum(pointwise_ref(xv, w1, b1), 0)
        np.testing.assert_allclose(model.run({"x": xv})["y"], pointwise_ref(a_ref, w2, b2, (2, 2)),
                                   rtol=1e-4, atol=1e-4)

def test_single_conv_writes_plain_output():
    """A 1×1 conv whose output is the graph output writes plain itself: no reorder at all."""
    x, w, b = data(1, 20, 4, 4, 32)
    g = dsl.Graph("one")
    xi = g.input("x", x.shape, dsl.f32)
    g.output(ops.Conv(xi, g.constant("w", w), g.constant("b", b)), "y")
    model = g.compile(backend="interpreter")
    assert model.stats["reorders"] == 0
    np.testing.assert_allclose(model.run({"x": x})["y"], pointwise_ref(x, w, b), rtol=1e-4, atol=1e-4)


def test_fused_residual_output_stays_plain(backend):
    """Relu(Conv 1×1 + z) as the graph output: the FusedConv and its residual z stay plain
    (select_plain_format), so nothing is reordered."""
    x, w, b = data(1, 20, 4, 6, 24)
    z = RNG.standard_normal((1, 24, 4, 6)).astype(np.float32)
    g = dsl.Graph("residual")
    xi, zi = g.input("x", x.shape, dsl.f32), g.input("z", z.shape, dsl.f32)
    g.output(ops.Relu(ops.Add(ops.Conv(xi, g.constant("w", w), g.constant("b", b)), zi)), "y")
    model = g.compile(backend=backend)
    assert model.stats["reorders"] == 0 and list(model.selected({"x": x, "z": z}).values()) == ["pointwise"]
    np.testing.assert_allclose(model.run({"x": x, "z": z})["y"], np.maximum(pointwise_ref(x, w, b) + z, 0),
                               rtol=1e-4, atol=1e-4)


def test_select_and_formats_for_pointwise():
    x = TensorSpec((1, 64, 56, 56), dsl.f32)
    w1, w3 = TensorSpec((256, 64, 1, 1), dsl.f32), TensorSpec((64, 64, 3, 3), dsl.f32)
    assert ops.Conv().select(x, w1, backend="numba") == "pointwise"
    assert ops.Conv(strides=(2, 2)).select(x, w1, backend="opencl") == "pointwise"
    assert ops.Conv(pads=(1, 1, 1, 1)).select(x, w3, backend="numba") == "direct"
    assert ops.Conv(pads=(1, 1, 1, 1)).select(x, w1, backend="numba") != "pointwise"  # padded 1x1
    assert ops.Conv().select(TensorSpec((1, 64, 56, 56), dsl.f16), TensorSpec((256, 64, 1, 1), dsl.f16),
                             backend="numba") == "gemm"
    assert ops.Conv().select_format(x, w1) == (("plain", "plain"), "nchwc16")
    assert ops.Conv().select_format(x, TensorSpec((8, 64, 1, 1), dsl.f32)) == (("plain", "plain"), "plain")
    xb = x.with_(format="nchwc16")
    assert ops.Conv().select_format(xb, w1, None) == (("nchwc16", "plain", None), "nchwc16")
    assert ops.Conv().select_plain_format(xb, w1) == (("nchwc16", "plain"), "plain")
    assert ops.Conv(pads=(1, 1, 1, 1)).select_plain_format(x, w3) is None


def test_pointwise_launch_rejects_what_it_cannot_run():
    x = np.zeros((1, 2, 4, 4), np.float32)
    w = np.zeros((3, 2, 1, 1), np.float32)
    y = np.zeros((1, 3, 4, 4), np.float32)
    with pytest.raises(ValueError, match=r"conv_pointwise computes f32; x is float64"):
        launch_conv_pointwise(conv_pointwise, x.astype(np.float64), w, None, y, None, (1, 1), False,
                              "interpreter", 0, 0, 0)
    with pytest.raises(ValueError, match=r"conv_pointwise takes 1×1 weights \(M, C, 1, 1\), got \(3, 2, 3, 3\)"):
        launch_conv_pointwise(conv_pointwise, x, np.zeros((3, 2, 3, 3), np.float32), None, y, None, (1, 1), False,
                              "interpreter", 0, 0, 0)
    with pytest.raises(ValueError, match=r"conv_pointwise takes one group: weights \(3, 1, 1, 1\) .* 2 channels"):
        launch_conv_pointwise(conv_pointwise, x, w[:, :1], None, y, None, (1, 1), False, "interpreter", 0, 0, 0)
    with pytest.raises(ValueError, match=r"conv_pointwise output 4x4 does not match input 4x4 with strides \(2, 2\)"):
        launch_conv_pointwise(conv_pointwise, x, w, None, y, None, (2, 2), False, "interpreter", 0, 0, 0)


@pytest.mark.parametrize("blocked", [False, True])
def test_pointwise_launch_passes_a_plain_int_grid(blocked):
    """Kernel.__call__'s fast path takes only a Python int grid; a numpy one (from the geometry
    array's arithmetic) re-binds every argument, ~60 us per eager launch."""
    seen = []
    x, w, b = data(1, 16, 7, 7, 16)
    xi = F.to_nchwc16_ref(x) if blocked else x
    y = np.zeros(F.physical_shape((1, 16, 7, 7), "nchwc16" if blocked else "plain"), np.float32)
    launch_conv_pointwise(lambda *a, **kw: seen.append(kw["grid"]), xi, w, b, y, None, (1, 1), blocked, "numba",
                          0, 0.0, 0.0)
    assert [type(g) for g in seen] == [int]


@pytest.mark.parametrize("c, m, fmt_in, fmt_out, s, gathers", [
    (20, 16, "nchwc16", "nchwc16", 2, True),   # strided NCHWc16
    (20, 16, "nchwc16", "nchwc16", 1, False),  # already consecutive
    (20, 128, "plain", "plain", 2, True),      # strided plain
    (20, 128, "plain", "nchwc16", 1, "no pairs"),  # plain into NCHWc16 (ResNet's projection after the stem):
    # read in place by plain pair items where the target has them (AVX-512), else gathered
    (20, 130, "plain", "nchwc16", 1, True),    # the same with a last group of 2 channels: no plain pairs
    (20, 16, "plain", "nchwc16", 1, False),    # too few output channels to pay for the copy
    (20, 128, "plain", "plain", 1, False),     # plain to plain: the pixel-vector tile reads x in place
    (12, 128, "plain", "nchwc16", 2, False),   # fewer than 16 input channels: read in place
])
def test_pixels_are_gathered_first_when_they_are_not_consecutive(c, m, fmt_in, fmt_out, s, gathers):
    """gather_pixels: a first launch copies x's pixels into a compact NCHWc16 image that the
    convolution then reads at stride 1; x already NCHWc16 at stride 1, plain x of few channels or
    for few output channels, plain x at stride 1 on a target with pair items, or plain to plain, run
    the one launch."""
    seen = []
    x, w, b = data(1, c, 9, 7, m)
    xi = F.to_nchwc16_ref(x) if fmt_in == "nchwc16" else x
    oh, ow = (9 - 1) // s + 1, (7 - 1) // s + 1
    y = np.zeros(F.physical_shape((1, m, oh, ow), fmt_out), np.float32)
    consts = []  # each launch's compile-time constants

    def record(*a, **kw):
        seen.append(a)
        consts.append({k: kw.get(k) for k in ("V", "NV", "P", "RR", "RNV", "PAIRS")})
    launch_conv_pointwise(record, xi, w, b, y, None, (s, s), fmt_in == "nchwc16", "numba", 0, 0.0, 0.0)
    if gathers == "no pairs":
        gathers = consts[-1]["PAIRS"] == 0
        assert seen[-1][5][pw.G_PAIR] == (0 if gathers else pw.PAIR_PLAIN)
    assert [int(a[5][pw.G_GATHER]) for a in seen] == ([1, 0] if gathers else [0])
    assert all(k == consts[-1] for k in consts)  # the gather shares the convolution's specialization
    if gathers:  # the gather writes (N, C/16, OH, OW, 16), the convolution reads it at stride 1
        assert seen[0][4].size == seen[1][0].size == 2 * oh * ow * 16
        np.testing.assert_array_equal(seen[1][5][[pw.G_STEP_COL, pw.G_OUT_W, pw.G_SXP]], (1, oh * ow, 16))

def test_fire_module_concat_stays_blocked(backend):
    """SqueezeNet's fire module: squeeze 1×1 -> expand 1×1 and 3×3 -> Concat (16-aligned
    blocks) -> MaxPool, all NCHWc16; only the graph output is reordered."""
    x, ws, bs = data(1, 8, 6, 6, 16)
    _, we1, be1 = data(1, 16, 1, 1, 16)
    we3 = (RNG.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32)
    g = dsl.Graph("fire")
    xi = g.input("x", x.shape, dsl.f32)
    s = ops.Relu(ops.Conv(xi, g.constant("ws", ws), g.constant("bs", bs)))
    e1 = ops.Relu(ops.Conv(s, g.constant("we1", we1), g.constant("be1", be1)))
    e3 = ops.Relu(ops.Conv(s, g.constant("we3", we3), pads=[1, 1, 1, 1]))
    g.output(ops.MaxPool(ops.Concat(e1, e3, axis=1), kernel_shape=[2, 2], strides=[2, 2])[0], "y")
    model = g.compile(backend=backend)
    assert model.stats["reorders"] == 1
    r = np.maximum(pointwise_ref(x, ws, bs), 0)
    r1 = np.maximum(pointwise_ref(r.astype(np.float32), we1, be1), 0)
    rp = np.pad(r, ((0, 0), (0, 0), (1, 1), (1, 1)))
    r3 = sum(np.einsum("nchw,mc->nmhw", rp[:, :, i:i + 6, j:j + 6], we3[:, :, i, j].astype(np.float64))
             for i in range(3) for j in range(3))
    cat = np.concatenate([r1, np.maximum(r3, 0)], axis=1)
    want = cat.reshape(1, 32, 3, 2, 3, 2).max(axis=(3, 5))
    np.testing.assert_allclose(model.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


def test_concat_formats():
    blocked = TensorSpec((1, 32, 5, 5), dsl.f32).with_(format="nchwc16")
    odd = TensorSpec((1, 24, 5, 5), dsl.f32).with_(format="nchwc16")
    assert ops.Concat(axis=1).select_format(blocked, odd) == (("nchwc16", "nchwc16"), "nchwc16")
    assert ops.Concat(axis=1).select_format(odd, blocked) == (("plain", "plain"), "plain")  # 24: not whole blocks
    assert ops.Concat(axis=2).select_format(blocked, blocked) == (("plain", "plain"), "plain")
    assert ops.Concat(axis=1).select_format(blocked, TensorSpec((1, 32, 5, 5), dsl.f32)) == \
        (("plain", "plain"), "plain")


def test_resnet_head_pools_blocked(backend):
    """ResNet's last AveragePool (the whole 7×7 image) runs on the blocked tensor the 1×1 conv
    wrote, and writes the pooled (N, C, 1, 1) result plain for Flatten: no reorder."""
    x, w, b = data(1, 24, 7, 7, 40)
    g = dsl.Graph("head")
    xi = g.input("x", x.shape, dsl.f32)
    y = ops.AveragePool(ops.Relu(ops.Conv(xi, g.constant("w", w), g.constant("b", b))), kernel_shape=[7, 7])
    g.output(ops.Flatten(y), "y")
    model = g.compile(backend=backend)
    assert model.stats["reorders"] == 0 and "global_blocked" in model.selected({"x": x}).values()
    want = np.maximum(pointwise_ref(x, w, b), 0).mean(axis=(2, 3))
    np.testing.assert_allclose(model.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("with_mask", [False, True])
def test_dropout_between_blocked_convs_needs_no_reorder(backend, with_mask):
    """Dropout keeps its input's NCHWc16 format (squeezenet: Concat -> Dropout -> 1×1 head),
    and its mask stays plain."""
    x, w1, b1 = data(1, 8, 5, 5, 16)
    _, w2, b2 = data(1, 8, 1, 1, 16)
    _, w3, b3 = data(1, 32, 1, 1, 24)
    g = dsl.Graph("dropout")
    xi = g.input("x", x.shape, dsl.f32)
    e1 = ops.Relu(ops.Conv(xi, g.constant("w1", w1), g.constant("b1", b1)))
    e2 = ops.Relu(ops.Conv(xi, g.constant("w2", w2), g.constant("b2", b2)))
    y, mask = ops.Dropout(ops.Concat(e1, e2, axis=1))
    g.output(ops.Conv(y, g.constant("w3", w3), g.constant("b3", b3)), "y")
    if with_mask:
        g.output(mask, "mask")
    model = g.compile(backend=backend)
    assert model.stats["reorders"] == 0
    out = model.run({"x": x})
    cat = np.concatenate([np.maximum(pointwise_ref(x, w, b), 0) for w, b in ((w1, b1), (w2, b2))], axis=1)
    np.testing.assert_allclose(out["y"], pointwise_ref(cat.astype(np.float32), w3, b3), rtol=1e-4, atol=1e-4)
    if with_mask:
        assert out["mask"].shape == (1, 32, 5, 5) and out["mask"].dtype == np.bool_ and out["mask"].all()


@pytest.mark.parametrize("act", [0, 1])
@pytest.mark.parametrize("m", [16, 40, 48, 64])
def test_pointwise_blocked_pixel_pairs(backend, act, m):
    """NCHWc16 in and out, stride 1: items of 2P pixels (30 = two whole ones, then 2 pixels on the
    P-pixel tile on AVX-512), the one-vector groups (16, 48), Relu and no activation stored from
    the registers (a -inf bias stays -inf without one, a NaN stays NaN) and the scratch epilogue
    (the partial block of 40)."""
    x, w, b = data(1, 40, 5, 6, m)
    b[1], b[2] = -np.inf, np.nan
    with np.errstate(invalid="ignore"):
        want = pointwise_ref(x, w, b)
    if act == 1:
        want = np.maximum(want, 0)
    yb = np.full(F.physical_shape((1, m, 5, 6), "nchwc16"), np.nan, np.float32)
    launch_conv_pointwise(conv_pointwise, F.to_nchwc16_ref(x), w, b, yb, None, (1, 1), True, backend, act, 0.0, 0.0)
    np.testing.assert_allclose(F.to_plain_ref(yb, m), want, rtol=1e-4, atol=1e-4)
    assert (F.to_plain_ref(yb, 64)[:, m:] == 0).all()


@pytest.mark.parametrize("fmt_out", ["plain", "nchwc16"])
@pytest.mark.parametrize("m, res", [(64, False), (56, True)])
def test_pointwise_plain_pixel_pairs(backend, monkeypatch, fmt_out, m, res):
    """Plain x, stride 1, too few pixels for the pixel-vector tile: items of 2P consecutive pixels
    of each channel row on AVX-512 (30 = two whole items, then 2 pixels on the P-pixel tile; 25 =
    a whole item and one overlapping it by 3), with a batch of two, a last group of 24 channels
    (56), a residual and Relu, and the next group's weight prefetches forced on."""
    monkeypatch.setattr(pw, "PREFETCH_MIN_BYTES", 0)
    for h, wd in ((5, 6), (5, 5)):
        x, w, b = data(2, 40, h, wd, m)
        z = RNG.standard_normal((2, m, h, wd)).astype(np.float32)
        want = np.maximum(pointwise_ref(x, w, b) + (z if res else 0), 0)
        y = np.full(F.physical_shape((2, m, h, wd), fmt_out), np.nan, np.float32)
        zi = None if not res else F.to_nchwc16_ref(z) if fmt_out == "nchwc16" else z
        launch_conv_pointwise(conv_pointwise, x, w, b, y, zi, (1, 1), False, backend, 1, 0.0, 0.0)
        np.testing.assert_allclose(F.to_plain_ref(y, m) if fmt_out == "nchwc16" else y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt_in, fmt_out, m", [("nchwc16", "nchwc16", 48), ("nchwc16", "plain", 40),
                                                ("plain", "nchwc16", 130)])
def test_pointwise_lone_last_pixels(backend, fmt_in, fmt_out, m):
    """A 7×7 image (49 pixels: whole tiles and a last one of 1 on AVX2's 6-pixel tile, or three
    pair items and a 7-pixel tile on AVX-512) and a 5×4 one (20 = 3 × 6 + 2): the last pixels are summed
    one at a time (``narrow``), over 37 input channels (a partial block, not a multiple of 4)."""
    for h, wd in ((7, 7), (5, 4)):
        x, w, b = data(1, 37, h, wd, m)
        xi = F.to_nchwc16_ref(x) if fmt_in == "nchwc16" else x
        y = np.full(F.physical_shape((1, m, h, wd), fmt_out), np.nan, np.float32)
        launch_conv_pointwise(conv_pointwise, xi, w, b, y, None, (1, 1), fmt_in == "nchwc16", backend, 0, 0.0, 0.0)
        got = F.to_plain_ref(y, m) if fmt_out == "nchwc16" else y
        np.testing.assert_allclose(got, pointwise_ref(x, w, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("grid", [1, 3, 5])
def test_pointwise_any_number_of_teams(backend, monkeypatch, grid):
    """The work split's grid is a cost choice (ops/work_split.py): every grid gives the same
    result, the workers' item ranges starting mid-row, mid-image and mid-group (NCHWc16 pairs,
    the 7-pixel tile and the pixel-vector tile)."""
    monkeypatch.setattr(pw.work_split, "worker_grid", lambda *a, **k: grid)  # numba's grid
    monkeypatch.setattr(pw, "balanced_grid", lambda *a, **k: grid)  # OpenCL's (and the gather's)
    for *case, fmt in ((2, 40, 5, 9, 48, 1, "nchwc16"), (2, 24, 9, 3, 20, 2, "nchwc16"),
                       (3, 16, 8, 8, 20, 1, "plain")):
        check_pointwise(backend, tuple(case), fmt, fmt)


def test_residual_buffer_takes_the_pointwise_output(backend):
    """FusedConv on the 1×1 kernel writes its output over the residual's buffer where the
    residual dies at it (numba: ``Op.free_inplace``), but not when the residual is also its
    image; results as numpy's on every backend, run after run."""
    x, w1, b1 = data(1, 16, 9, 9, 32)
    _, w2, b2 = data(1, 32, 1, 1, 32)
    _, w3, b3 = data(1, 32, 1, 1, 32)
    g = dsl.Graph("residuals")
    xi = g.input("x", x.shape, dsl.f32)
    a = ops.Relu(ops.Conv(xi, g.constant("w1", w1), g.constant("b1", b1)))
    c = ops.Relu(ops.Conv(a, g.constant("w3", w3), g.constant("b3", b3)))
    d = ops.Relu(ops.Add(ops.Conv(c, g.constant("w2", w2), g.constant("b2", b2)), a))  # a dies here
    e = ops.Relu(ops.Add(ops.Conv(d, g.constant("w4", w2), g.constant("b4", b2)), d))  # d: image and residual
    g.output(ops.GlobalAveragePool(e), "y")
    model = g.compile(backend=backend)
    ra = np.maximum(pointwise_ref(x, w1, b1), 0)
    rc = np.maximum(pointwise_ref(ra, w3, b3), 0)
    rd = np.maximum(pointwise_ref(rc, w2, b2) + ra, 0)
    want = np.maximum(pointwise_ref(rd, w2, b2) + rd, 0).mean(axis=(2, 3), keepdims=True)
    for _ in range(2):
        np.testing.assert_allclose(model.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    assert sorted(model.selected({"x": x}).values()).count("pointwise") == 4
    assert len(model.memory_plan().inplace) == (1 if backend == "numba" else 0)


@pytest.mark.parametrize("tile", ["target", "avx2"])
@pytest.mark.parametrize("n, c, h, wd, m, fmt_in", [(2, 40, 7, 7, 80, "nchwc16"), (1, 150, 5, 9, 48, "nchwc16"),
                                                    (1, 150, 5, 9, 56, "plain")])
def test_pointwise_prefetches_change_nothing(backend, monkeypatch, tile, n, c, h, wd, m, fmt_in):
    """Every prefetch (``prefetch_mode``) forced on for small layers with a residual: the next oc
    group's weights, the next input block's pixel lines (NCHWc16 x; plain x: the rows 16
    channels ahead), past x's end from the last block, and the next pair item's y lines (past y's
    end from the last item). numpy's result, with pair items, a 7-pixel
    tile, three oc groups (the last group prefetches past the weights) and a batch of two; 150
    input channels (a last block of 6) on 45 pixels (pairs, an overlapping pair and a 3-pixel tile)
    into 48 outputs (a one-vector last group) or, from plain x, 56 (plain pairs); AVX-512's two
    weight lines per input channel and AVX2's one (its tile passed explicitly)."""
    monkeypatch.setattr(pw, "PREFETCH_MIN_BYTES", 0)
    monkeypatch.setattr(pw, "PREFETCH_X_MIN_C", 0)
    monkeypatch.setattr(pw, "PREFETCH_Y_MAX_C", 1 << 20)
    assert pw.prefetch_mode(c, m) == pw.PF_WEIGHTS | pw.PF_X | pw.PF_Y
    cfg, rows = (None, None) if tile == "target" else (pw.DirectConfig(V=8, NV=2, P=6), (4, 3))
    x, w, b = data(n, c, h, wd, m)
    z = RNG.standard_normal((n, m, h, wd)).astype(np.float32)
    yb = np.full(F.physical_shape((n, m, h, wd), "nchwc16"), np.nan, np.float32)
    blocked = fmt_in == "nchwc16"
    launch_conv_pointwise(conv_pointwise, F.to_nchwc16_ref(x) if blocked else x, w, b, yb, F.to_nchwc16_ref(z), (1, 1),
                          blocked, backend, 1, 0.0, 0.0, cfg=cfg, row_shape=rows)
    np.testing.assert_allclose(F.to_plain_ref(yb, m), np.maximum(pointwise_ref(x, w, b) + z, 0), rtol=1e-4, atol=1e-4)


def test_prefetch_mode_by_layer():
    """The next block's x lines from 128 input channels, the next item's y lines up to 128, the next
    group's weights from 256 KB of them: ResNet-50's 64→256 the y lines, 128→512 all three,
    1024→256 x and weights."""
    assert pw.prefetch_mode(64, 256) == pw.PF_Y
    assert pw.prefetch_mode(128, 512) == pw.PF_X | pw.PF_Y | pw.PF_WEIGHTS
    assert pw.prefetch_mode(128, 32) == pw.PF_X | pw.PF_Y
    assert pw.prefetch_mode(1024, 256) == pw.PF_X | pw.PF_WEIGHTS
    assert pw.prefetch_mode(64, 1024) == pw.PF_Y | pw.PF_WEIGHTS
