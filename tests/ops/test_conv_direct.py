"""The direct SIMD convolution (ops/conv_direct.py) against a numpy reference on every backend:
odd sizes, padding, stride 2, dilation, channel counts that are not multiples of 16, batch,
1-D, plain and NCHWc16 layouts, the fused epilogues; weights packed once per constant; the
kernel choice of Conv.select."""
import dataclasses

import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph import formats as F
from dsl.opgraph.spec import TensorSpec
from ops import conv_direct as cd
from ops.conv_direct import (PHASE_PAD, THREADS, DirectConfig, balanced_grid, conv_direct, direct_config,
                              launch_conv_direct, packed_weights, prefetch_stride)
from ops.conv_fusion import FusedConv

RNG = np.random.default_rng(7)


def conv_ref(x, w, b=None, strides=(1, 1), dil=(1, 1), pads=(0, 0, 0, 0)):
    """f64 numpy convolution, 2-D NCHW, one group: a sum over the window of channel products."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (h + pads[0] + pads[2] - (kh - 1) * dil[0] - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - (kw - 1) * dil[1] - 1) // strides[1] + 1
    y = np.zeros((n, m, oh, ow))
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i * dil[0]:i * dil[0] + strides[0] * (oh - 1) + 1:strides[0],
                     j * dil[1]:j * dil[1] + strides[1] * (ow - 1) + 1:strides[1]]
            y += np.einsum("nchw,mc->nmhw", win, w[:, :, i, j].astype(np.float64))
    return y if b is None else y + b[None, :, None, None]


def activation_ref(v, act: str, params):
    """numpy reference of the conv epilogue's activations (Relu, Clip, LeakyRelu)."""
    return {"Relu": lambda: np.maximum(v, 0), "Clip": lambda: np.clip(v, *params),
            "LeakyRelu": lambda: np.where(v >= 0, v, params[0] * v)}[act]()


CASES = [  # (N, C, H, W, M, k, strides, dilations, pads)
    (1, 3, 9, 11, 20, 3, (1, 1), (1, 1), (1, 1, 1, 1)),    # odd image, M past one block
    (2, 5, 10, 9, 33, 3, (2, 2), (1, 1), (1, 0, 2, 1)),    # batch, stride 2, asymmetric pads, two oc groups
    (1, 18, 6, 7, 16, 3, (1, 2), (2, 1), (2, 1, 2, 1)),    # dilation, a partial second input block
    (1, 4, 5, 5, 8, 2, (2, 2), (1, 1), (0, 0, 0, 0)),      # 2x2 stride 2: no padding copy, M < 16
    (1, 3, 17, 15, 40, 7, (2, 2), (1, 1), (3, 3, 3, 3)),   # the stem: 3 channels, 7x7 stride 2, a 9x8 image
    (1, 16, 7, 7, 32, 3, (1, 1), (1, 1), (1, 1, 1, 1)),    # 7x7 image, one full input block: 7 tiles of 7
    (1, 5, 14, 14, 64, 3, (1, 1), (1, 1), (1, 1, 1, 1)),   # 33 tiles of 6: groups of even size (3 x 11 or 5 x 7)
    (1, 20, 7, 7, 64, 3, (1, 1), (1, 1), (1, 1, 1, 1)),   # 49 = 8 tiles of 6 + a one-pixel tail; a partial block
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"C{c[1]}M{c[4]}k{c[5]}s{c[6][0]}{c[6][1]}")
def test_direct_conv_matches_numpy(backend, case):
    n, c, h, wd, m, k, s, d, p = case
    x = RNG.standard_normal((n, c, h, wd)).astype(np.float32)
    w = RNG.standard_normal((m, c, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    ref = conv_ref(x, w, b, s, d, p)
    # the kernel itself, writable weights packed at the call (Conv.select runs plain images of
    # <= 4 channels on ops/conv_stem.py)
    y = np.empty(ref.shape, np.float32)
    launch_conv_direct(conv_direct, x, w, b, y, None, s, d, p[:2], False, backend, act=0, lo=0.0, hi=0.0)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    # graph: constant weights, packed once
    g = dsl.Graph("direct")
    xi = g.input("x", x.shape, dsl.f32)
    g.output(ops.Conv(xi, g.constant("w", w), g.constant("b", b), strides=s, dilations=d, pads=p), "y")
    model = g.compile(backend=backend)
    assert model.selected({"x": x}) == {n.name: "stem" if c <= 4 else "direct" for n in model.graph.nodes}
    for _ in range(2):  # the replayed run reads the same packed weights
        np.testing.assert_allclose(model.run({"x": x})["y"], ref, rtol=1e-4, atol=1e-4)


def test_direct_conv_1d_and_no_bias(backend):
    x = RNG.standard_normal((2, 3, 13)).astype(np.float32)
    w = RNG.standard_normal((17, 3, 3)).astype(np.float32)
    y = ops.Conv(x, w, pads=[2, 1], strides=[2], backend=backend)
    ref = conv_ref(x[:, :, None], w[:, :, None], pads=(0, 2, 0, 1), strides=(1, 2))[:, :, 0]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act, params", [("Relu", ()), ("Clip", (-0.5, 0.75)), ("LeakyRelu", (0.1,))])
def test_direct_conv_fused_epilogue(backend, act, params):
    """FusedConv on the direct kernel: bias, then the residual Z, then the activation."""
    x = RNG.standard_normal((1, 17, 7, 8)).astype(np.float32)
    w = RNG.standard_normal((19, 17, 3, 3)).astype(np.float32) * 0.3
    b = RNG.standard_normal(19).astype(np.float32)
    z = RNG.standard_normal((1, 19, 7, 8)).astype(np.float32)
    y = FusedConv(x, w, b, z, pads=[1, 1, 1, 1], activation=act, activation_params=params, backend=backend)
    v = conv_ref(x, w, b, pads=(1, 1, 1, 1)) + z
    want = activation_ref(v, act, params)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_plain_output_of_several_tile_groups_with_a_residual(backend):
    """Plain y written one run per channel over a whole group of tiles: two images, 10×11
    pixels (several groups, a last partial tile), 70 channels (a partial last group), a residual
    and Relu; and without them."""
    x = RNG.standard_normal((2, 16, 10, 11)).astype(np.float32)
    w = RNG.standard_normal((70, 16, 3, 3)).astype(np.float32) * 0.2
    b = RNG.standard_normal(70).astype(np.float32)
    z = RNG.standard_normal((2, 70, 10, 11)).astype(np.float32)
    v = conv_ref(x, w, b, pads=(1, 1, 1, 1))
    for res, act, want in ((z, 1, np.maximum(v + z, 0)), (None, 0, v)):
        y = np.full(v.shape, np.nan, np.float32)
        launch_conv_direct(conv_direct, x, w, b, y, res, (1, 1), (1, 1), (1, 1), False, backend,
                           act=act, lo=0.0, hi=0.0, cfg=DirectConfig(V=16, NV=4, P=6, TG=3))
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act, lo, hi", [(2, 0.25, 1.5), (1, 0.0, 0.0), (0, 0.0, 0.0)], ids=["Clip", "Relu", "none"])
def test_direct_conv_on_nchwc16_arrays(backend, act, lo, hi):
    """Blocked input, output and residual; channels past M in the last block are written as 0
    even when the activation would move 0 (Clip with a positive lower bound).  Relu stores the
    first group's whole tiles from the registers, the rest (and Clip, none) go via scratch."""
    x = RNG.standard_normal((1, 20, 5, 6)).astype(np.float32)
    w = RNG.standard_normal((21, 20, 3, 3)).astype(np.float32) * 0.2
    b = RNG.standard_normal(21).astype(np.float32)
    z = RNG.standard_normal((1, 21, 5, 6)).astype(np.float32)
    yb = np.full(F.physical_shape((1, 21, 5, 6), "nchwc16"), np.nan, np.float32)
    launch_conv_direct(conv_direct, F.to_nchwc16_ref(x), w, b, yb, F.to_nchwc16_ref(z), (1, 1), (1, 1), (1, 1),
                       True, backend, act=act, lo=lo, hi=hi)
    v = conv_ref(x, w, b, pads=(1, 1, 1, 1)) + z
    want = {2: lambda: np.clip(v, lo, hi), 1: lambda: np.maximum(v, 0), 0: lambda: v}[act]()
    np.testing.assert_allclose(F.to_plain_ref(yb, 21), want, rtol=1e-4, atol=1e-4)
    assert (F.to_plain_ref(yb, 32)[:, 21:] == 0).all()


def test_balanced_grid_gives_every_os_thread_a_share():
    """dsl.split(items, grid=True) gives each worker ceil(items / workers) items and the parallel
    entry hands each OS thread a contiguous half of the workers: the grid must not leave the
    second half idle (squeezenet's 55-pixel expand, 110 items, ran on one core at grid 27)."""
    for items in list(range(1, 600)) + [1000, 4097, 20000]:
        grid = balanced_grid(items)
        workers = grid * THREADS
        chunk = -(-items // workers)
        assert 1 <= grid <= 64 and chunk == -(-items // (64 * THREADS))
        first = min(items, (workers // 2) * chunk)
        assert items - first >= first - 4 * chunk, (items, grid)
    assert balanced_grid(110) == 28 and -(-110 // (27 * THREADS)) == 2  # was grid 27: chunk 2


def test_padding_copy_launch_is_small_and_result_right(backend):
    """A padded plain image is copied first; the copy passes neither y nor the weights, bias and
    residual (1-element placeholders), so a small image's copy stays under the serial-launch
    size, and the convolution after it reads the copy.  A padded NCHWc16 image is read in place
    (one launch, its border pixels in tiles of their own) unless that needs a quarter more tiles
    (small images: 7×7 is 13 tiles in regions, 9 flat)."""
    x = RNG.standard_normal((1, 16, 11, 13)).astype(np.float32)
    w = RNG.standard_normal((32, 16, 3, 3)).astype(np.float32) * 0.2
    b = RNG.standard_normal(32).astype(np.float32)
    calls = []

    def impl(*args, **kw):
        calls.append((kw["phase"], args[4].size, kw["grid"], [a.size for a in args[1:4]]))
        conv_direct(*args, **kw)
    y = np.empty((1, 32, 11, 13), np.float32)
    launch_conv_direct(impl, x, w, b, y, None, (1, 1), (1, 1), (1, 1), False, backend, act=0, lo=0.0, hi=0.0)
    assert [(ph, size) for ph, size, _, _ in calls] == [(PHASE_PAD, 1), (1, y.size)]
    assert calls[0][3] == [1, 1, 1]  # w, bias, res
    cfg = direct_config(backend, 32)
    assert calls[1][2] == balanced_grid(-(-(11 * 13) // (cfg.P * cfg.TG)) * -(-32 // cfg.OCT))
    want = conv_ref(x, w, b, pads=(1, 1, 1, 1))
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    for hw, phases in (((14, 16), [1]), ((7, 7), [PHASE_PAD, 1])):
        calls.clear()
        x = RNG.standard_normal((1, 16) + hw).astype(np.float32)
        yb = np.empty(F.physical_shape((1, 32) + hw, "nchwc16"), np.float32)
        launch_conv_direct(impl, F.to_nchwc16_ref(x), w, b, yb, None, (1, 1), (1, 1), (1, 1), True, backend,
                           act=0, lo=0.0, hi=0.0)
        assert [ph for ph, _, _, _ in calls] == phases, hw
        np.testing.assert_allclose(F.to_plain_ref(yb, 32), conv_ref(x, w, b, pads=(1, 1, 1, 1)), rtol=1e-4,
                                   atol=1e-4)


@pytest.mark.parametrize("strides, dil, pads", [((1, 1), (1, 1), (2, 0, 1, 3)), ((2, 2), (1, 2), (1, 2, 1, 2)),
                                                ((1, 2), (1, 1), (3, 1, 3, 0))], ids=["asym", "s2d2", "wide"])
def test_nchwc16_border_tiles(backend, strides, dil, pads):
    """An NCHWc16 image read in place with uneven, wide padding (rows whose every tap is in the
    padding: bias only), strides and dilation: the border regions' tiles skip the taps outside
    the image and store their pixels where they belong; two images, a residual, Relu."""
    x = RNG.standard_normal((2, 20, 6, 7)).astype(np.float32)
    w = RNG.standard_normal((64, 20, 3, 3)).astype(np.float32) * 0.2
    b = RNG.standard_normal(64).astype(np.float32)
    want = conv_ref(x, w, b, strides=strides, dil=dil, pads=pads)
    z = RNG.standard_normal(want.shape).astype(np.float32)
    yb = np.full(F.physical_shape(want.shape, "nchwc16"), np.nan, np.float32)
    launch_conv_direct(conv_direct, F.to_nchwc16_ref(x), w, b, yb, F.to_nchwc16_ref(z), strides, dil, pads[:2],
                       True, backend, act=1, lo=0.0, hi=0.0)
    np.testing.assert_allclose(F.to_plain_ref(yb, 64), np.maximum(want + z, 0), rtol=1e-4, atol=1e-4)


def test_blocked_chain_needs_no_reorder_between_convs(backend):
    """A depthwise Conv produces NCHWc16; the one-group Conv after it reads that directly."""
    g = dsl.Graph("chain")
    xi = g.input("x", (1, 16, 6, 6), dsl.f32)
    dw = g.constant("dw", RNG.standard_normal((16, 1, 3, 3)).astype(np.float32))
    pw = g.constant("pw", RNG.standard_normal((24, 16, 3, 3)).astype(np.float32) * 0.2)
    mid = ops.Conv(xi, dw, pads=[1, 1, 1, 1], group=16)
    g.output(ops.Relu(ops.Conv(mid, pw, pads=[1, 1, 1, 1])), "y")
    model = g.compile(backend=backend)
    text = str(model)
    assert "impl=direct" in text and model.stats["reorders"] == 2  # into the depthwise conv, out of the graph
    x = RNG.standard_normal((1, 16, 6, 6)).astype(np.float32)
    m = np.zeros((1, 16, 6, 6))
    for ch in range(16):
        m[:, ch:ch + 1] = conv_ref(x[:, ch:ch + 1], dw.value[ch:ch + 1], pads=(1, 1, 1, 1))
    want = np.maximum(conv_ref(m.astype(np.float32), pw.value, pads=(1, 1, 1, 1)), 0)
    np.testing.assert_allclose(model.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cfg", [DirectConfig(V=4, NV=2, P=3, TG=2), DirectConfig(V=8, NV=1, P=5),
                                 DirectConfig(V=16, NV=2, P=14), DirectConfig(V=16, NV=4, P=6),
                                 DirectConfig(V=4, NV=2, P=3, TG=2, U=2), DirectConfig(V=16, NV=4, P=6, U=8)], ids=str)
def test_other_register_tiles(cfg):
    """Tiles of other targets (narrower vectors, one vector per group, several groups of tiles
    whose partial sums wait between input-channel blocks, U channels a step over the full
    first block and one at a time over the partial second) compute the same."""
    x = RNG.standard_normal((1, 18, 6, 7)).astype(np.float32)
    w = RNG.standard_normal((11, 18, 3, 2)).astype(np.float32)
    b = RNG.standard_normal(11).astype(np.float32)
    y = np.empty((1, 11, 3, 7), np.float32)
    launch_conv_direct(conv_direct, x, w, b, y, None, (2, 1), (1, 2), (1, 1), False, "interpreter",
                       act=0, lo=0.0, hi=0.0, cfg=cfg)
    np.testing.assert_allclose(y, conv_ref(x, w, b, strides=(2, 1), dil=(1, 2), pads=(1, 1, 0, 1)),
                               rtol=1e-4, atol=1e-4)


def test_constant_weights_are_packed_once():
    cfg = DirectConfig(V=16, NV=2, P=14)
    w = RNG.standard_normal((20, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(20).astype(np.float32)
    fresh = packed_weights(w, b, cfg, "interpreter")
    assert packed_weights(w, b, cfg, "interpreter")[0] is not fresh[0]  # writable: packed again
    w.setflags(write=False)
    b.setflags(write=False)
    once = packed_weights(w, b, cfg, "interpreter")
    assert packed_weights(w, b, cfg, "interpreter")[0] is once[0]
    np.testing.assert_array_equal(once[0], fresh[0])
    # [group][ic block][kh][kw][16 ic][32 oc]: zeros past C and M
    wp = once[0].reshape(1, 1, 3, 3, 16, 32)
    np.testing.assert_array_equal(wp[0, 0, 1, 2, :3, :20], w[:, :, 1, 2].T)
    assert not wp[0, 0, :, :, 3:].any() and not wp[..., 20:].any()
    np.testing.assert_array_equal(once[1][:20], b)
    assert not once[1][20:].any()


def test_select_picks_direct_by_shape_dtype_and_backend():
    x = TensorSpec((1, 64, 56, 56), dsl.f32)
    w3, w1 = TensorSpec((64, 64, 3, 3), dsl.f32), TensorSpec((64, 64, 1, 1), dsl.f32)
    assert ops.Conv(pads=(1, 1, 1, 1)).select(x, w3, backend="numba") == "direct"
    assert ops.Conv().select(x, w1, backend="numba") == "pointwise"     # unpadded 1x1: ops/conv_pointwise.py
    assert ops.Conv(strides=(2, 2)).select(x, w1, backend="numba") == "pointwise"
    assert ops.Conv(strides=(2, 2), pads=(1, 1, 1, 1)).select(x, w3, backend="numba") == "direct"
    assert ops.Conv(pads=(1, 1, 1, 1)).select(x, w1, backend="opencl") == "direct"  # padded 1x1
    xh, wh = TensorSpec((1, 64, 56, 56), dsl.f16), TensorSpec((64, 64, 3, 3), dsl.f16)
    assert ops.Conv(pads=(1, 1, 1, 1)).select(xh, wh, backend="numba") == "gemm"  # f16 keeps the GEMM
    wg = TensorSpec((64, 2, 3, 3), dsl.f32)
    assert ops.Conv(group=32).select(x, wg, backend="numba") != "direct"        # grouped: own kernel


def test_direct_launch_rejects_what_it_cannot_run():
    x = np.zeros((1, 2, 4, 4))
    w = np.zeros((3, 2, 3, 3))
    y = np.zeros((1, 3, 2, 2))
    with pytest.raises(ValueError, match=r"conv_direct computes f32.*float64"):
        launch_conv_direct(conv_direct, x, w, None, y, None, (1, 1), (1, 1), (0, 0), False, "interpreter", 0, 0, 0)
    with pytest.raises(ValueError, match=r"conv_direct takes one group: weights \(3, 1, 3, 3\) .* 2 input channels"):
        launch_conv_direct(conv_direct, x.astype(np.float32), w[:, :1].astype(np.float32), None,
                           y.astype(np.float32), None, (1, 1), (1, 1), (0, 0), False, "interpreter", 0, 0, 0)
    with pytest.raises(ValueError, match=r"DirectConfig V=3: lanes must be 2, 4, 8 or 16"):
        DirectConfig(V=3, NV=2, P=4)
    with pytest.raises(dsl.VerifyError, match="FusedConv Z .* must have the output's shape"):
        FusedConv(np.zeros((1, 2, 4, 4), np.float32), np.zeros((3, 2, 3, 3), np.float32), None,
                  np.zeros((1, 3, 3, 3), np.float32))


def test_a_model_packs_its_constant_weights_once(monkeypatch):
    """Building the model (run() is recorded twice) and running it pack the weights once."""
    import ops.conv_direct as cd
    packs = []
    real = cd.pack_conv_weights
    monkeypatch.setattr(cd, "pack_conv_weights", lambda *a, **k: packs.append(1) or real(*a, **k))
    g = dsl.Graph("once")
    xi = g.input("x", (1, 17, 6, 6), dsl.f32)
    w = RNG.standard_normal((8, 17, 3, 3)).astype(np.float32)
    g.output(ops.Relu(ops.Conv(xi, g.constant("w", w), pads=[1, 1, 1, 1])), "y")
    model = g.compile(backend="interpreter")
    x = RNG.standard_normal((1, 17, 6, 6)).astype(np.float32)
    for _ in range(3):
        np.testing.assert_allclose(model.run({"x": x})["y"], np.maximum(conv_ref(x, w, pads=(1, 1, 1, 1)), 0),
                                   rtol=1e-4, atol=1e-4)
    assert len(packs) == 1


def test_avx512_tile_is_seven_pixels_by_two_vectors():
    """7 pixels × 32 channels with AVX-512 (ResNet's widths 112/56/28/14/7 tile exactly, the
    pixel offsets stay in registers), 4 channels a step of the unrolled walk; 6 × 16 with
    narrower vectors, one channel a step (AVX2's loop as it was)."""
    cfg = direct_config("numba")
    if "avx512f" in dsl.target("numba").features:
        assert (cfg.P, cfg.NV, cfg.V, cfg.U) == (7, 2, 16, 4)
        assert direct_config("numba", 64).U == 4
    else:
        assert (cfg.P, cfg.NV, cfg.V, cfg.U) == (6, 2, 8, 1)


def test_unrolled_walk_takes_a_divisor_of_the_block():
    with pytest.raises(ValueError, match=r"DirectConfig U=3.*1, 2, 4 or 8"):
        DirectConfig(V=16, NV=4, P=6, U=3)


def test_blocked_full_blocks_64_channels(backend):
    """NCHWc16 input of two full blocks (the kw taps run as one loop) into 64 output channels
    (the 6 px × 64 ch tile on AVX-512), dilation 1 and 2 (2: tap by tap), the full blocks walked
    4 channels a step on every backend (AVX-512's own tile does; the tiles that keep one channel
    a step by default, AVX2's and OpenCL's, are given U = 4 here)."""
    x = RNG.standard_normal((1, 32, 7, 9)).astype(np.float32)
    w = RNG.standard_normal((64, 32, 3, 3)).astype(np.float32) * 0.2
    b = RNG.standard_normal(64).astype(np.float32)
    cfg = direct_config(backend, 64)
    if cfg.U == 1:
        cfg = dataclasses.replace(cfg, U=4)
    for dil in (1, 2):
        oh, ow = 7 + 2 - 2 * dil, 9 + 2 - 2 * dil
        yb = np.empty(F.physical_shape((1, 64, oh, ow), "nchwc16"), np.float32)
        launch_conv_direct(conv_direct, F.to_nchwc16_ref(x), w, b, yb, None, (1, 1), (dil, dil), (1, 1), True,
                           backend, act=1, lo=0.0, hi=0.0, cfg=cfg)
        want = np.maximum(conv_ref(x, w, b, dil=(dil, dil), pads=(1, 1, 1, 1)), 0)
        np.testing.assert_allclose(F.to_plain_ref(yb, 64), want, rtol=1e-4, atol=1e-4)


def test_prefetching_walk_keeps_results(backend, monkeypatch):
    """The unrolled walk prefetching the next block's weights (and, after a group's last block,
    the next item's group: past the array for the last) changes no result: three full blocks,
    two 64-channel groups or more, two tile groups, a residual; ``pf`` is two lines a step from
    PREFETCH_MIN_BYTES of packed weights on, 0 below."""
    assert prefetch_stride(cd.PREFETCH_MIN_BYTES) == 32 and prefetch_stride(cd.PREFETCH_MIN_BYTES - 1) == 0
    monkeypatch.setattr(cd, "PREFETCH_MIN_BYTES", 0)
    x = RNG.standard_normal((1, 48, 12, 13)).astype(np.float32)
    w = RNG.standard_normal((128, 48, 3, 3)).astype(np.float32) * 0.2
    b = RNG.standard_normal(128).astype(np.float32)
    z = RNG.standard_normal((1, 128, 12, 13)).astype(np.float32)
    cfg = direct_config(backend, 128)  # read in place: 31 tiles in border regions at P = 6, three groups
    if cfg.U == 1:
        cfg = dataclasses.replace(cfg, U=4)
    strides = []

    def impl(*args, **kw):
        strides.append(kw["pf"])
        conv_direct(*args, **kw)
    yb = np.full(F.physical_shape((1, 128, 12, 13), "nchwc16"), np.nan, np.float32)
    launch_conv_direct(impl, F.to_nchwc16_ref(x), w, b, yb, F.to_nchwc16_ref(z), (1, 1), (1, 1), (1, 1), True,
                       backend, act=1, lo=0.0, hi=0.0, cfg=cfg)
    assert strides == [32]  # one launch: no padding copy
    want = np.maximum(conv_ref(x, w, b, pads=(1, 1, 1, 1)) + z, 0)
    np.testing.assert_allclose(F.to_plain_ref(yb, 128), want, rtol=1e-4, atol=1e-4)
