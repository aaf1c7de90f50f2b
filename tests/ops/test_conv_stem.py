"""The pixel-vector convolution for few input channels (ops/conv_stem.py) against a numpy
reference on every backend: 1-4 and 16 input channels, stride 1 and 2, dilation, asymmetric
pads, widths with a partial last vector, odd row counts (a partial row tile), batch, plain and
NCHWc16 output, the fused epilogues; other register tiles; Conv.select's choice; bad input."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph import formats as F
from dsl.opgraph.spec import TensorSpec
from ops.conv_fusion import FusedConv
from ops.conv_stem import StemConfig, conv_stem, launch_conv_stem, stem_config
from test_conv_direct import activation_ref, conv_ref

RNG = np.random.default_rng(11)

CASES = [  # (N, C, H, W, M, k, strides, dilations, pads)
    (1, 3, 9, 21, 20, 3, (2, 2), (1, 1), (0, 0, 0, 0)),    # squeezenet's stem: 3x3/2, no padding
    (1, 3, 17, 15, 40, 7, (2, 2), (1, 1), (3, 3, 3, 3)),   # resnet's stem: 7x7/2 pad 3
    (2, 1, 7, 19, 9, 3, (1, 1), (1, 1), (1, 1, 1, 1)),     # one channel, batch, 19 wide: a partial vector
    (1, 2, 8, 11, 5, 3, (1, 2), (2, 1), (2, 1, 2, 1)),     # dilation, mixed strides, M < the tile's channels
    (1, 4, 6, 9, 17, 2, (2, 2), (1, 2), (1, 0, 0, 1)),     # even kernel, asymmetric pads, column dilation
    (1, 16, 3, 50, 24, 3, (1, 1), (1, 1), (1, 1, 1, 1)),   # squeezenet's expand: 16 channels, 3x3 pad 1, wide
    (1, 3, 13, 42, 12, 5, (4, 4), (1, 1), (2, 2, 2, 1)),   # alexnet-like stride 4: four column phases
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"C{c[1]}M{c[4]}k{c[5]}s{c[6][0]}{c[6][1]}d{c[7][1]}")
def test_stem_conv_matches_numpy(backend, case):
    n, c, h, wd, m, k, s, d, p = case
    x = RNG.standard_normal((n, c, h, wd)).astype(np.float32)
    w = RNG.standard_normal((m, c, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    ref = conv_ref(x, w, b, s, d, p)
    y = np.empty(ref.shape, np.float32)  # the kernel itself, weights packed at the call
    launch_conv_stem(conv_stem, x, w, b, y, None, s, d, p[:2], False, backend, act=0, lo=0.0, hi=0.0)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    g = dsl.Graph("stem")
    xi = g.input("x", x.shape, dsl.f32)
    g.output(ops.Conv(xi, g.constant("w", w), g.constant("b", b), strides=s, dilations=d, pads=p), "y")
    model = g.compile(backend=backend)
    picked = "stem" if c <= 4 or ref.shape[3] >= 48 else "direct"  # FEW_CHANNELS, WIDE
    assert model.selected({"x": x}) == {nd.name: picked for nd in model.graph.nodes}
    for _ in range(2):  # the replayed run reads the same packed weights
        np.testing.assert_allclose(model.run({"x": x})["y"], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act, params", [("Relu", ()), ("Clip", (-0.5, 0.75)), ("LeakyRelu", (0.1,))])
def test_stem_fused_epilogue(backend, act, params):
    """FusedConv on the stem kernel: bias, then the residual Z, then the activation."""
    x = RNG.standard_normal((1, 3, 6, 18)).astype(np.float32)
    w = RNG.standard_normal((11, 3, 3, 3)).astype(np.float32) * 0.3
    b = RNG.standard_normal(11).astype(np.float32)
    z = RNG.standard_normal((1, 11, 6, 18)).astype(np.float32)
    y = FusedConv(x, w, b, z, pads=[1, 1, 1, 1], activation=act, activation_params=params, backend=backend)
    v = conv_ref(x, w, b, pads=(1, 1, 1, 1)) + z
    want = activation_ref(v, act, params)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_stem_writes_nchwc16(backend):
    """NCHWc16 output and residual; channels past M in the last block are 0 even when the
    activation would move 0 (Clip with a positive lower bound)."""
    x = RNG.standard_normal((1, 3, 7, 20)).astype(np.float32)
    w = RNG.standard_normal((21, 3, 3, 3)).astype(np.float32) * 0.3
    b = RNG.standard_normal(21).astype(np.float32)
    z = RNG.standard_normal((1, 21, 4, 10)).astype(np.float32)
    yb = np.full(F.physical_shape((1, 21, 4, 10), "nchwc16"), np.nan, np.float32)
    launch_conv_stem(conv_stem, x, w, b, yb, F.to_nchwc16_ref(z), (2, 2), (1, 1), (1, 1), True, backend,
                     act=2, lo=0.25, hi=1.5)
    want = np.clip(conv_ref(x, w, b, strides=(2, 2), pads=(1, 1, 1, 1)) + z, 0.25, 1.5)
    np.testing.assert_allclose(F.to_plain_ref(yb, 21), want, rtol=1e-4, atol=1e-4)
    assert (F.to_plain_ref(yb, 32)[:, 21:] == 0).all()


@pytest.mark.parametrize("cfg", [StemConfig(V=4, R=3, NO=5), StemConfig(V=8, R=1, NO=16), StemConfig(V=16, R=2, NO=12)],
                         ids=str)
def test_other_register_tiles(cfg):
    """Other tiles (narrow vectors, three rows over a 5-row output, one row, wider channel groups)
    compute the same."""
    x = RNG.standard_normal((1, 2, 10, 13)).astype(np.float32)
    w = RNG.standard_normal((13, 2, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(13).astype(np.float32)
    y = np.empty((1, 13, 5, 7), np.float32)
    launch_conv_stem(conv_stem, x, w, b, y, None, (2, 2), (1, 1), (1, 1), False, "interpreter", act=0, lo=0.0,
                     hi=0.0, cfg=cfg)
    np.testing.assert_allclose(y, conv_ref(x, w, b, strides=(2, 2), pads=(1, 1, 1, 1)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("band", [1, 2, 3, 50])
def test_work_items_of_several_row_tiles(backend, band):
    """Items of ``band`` row tiles (the last one short, rows past the image, 11 rows of 2-row
    tiles in 6 tiles), two images, a residual: the same output whatever the split."""
    x = RNG.standard_normal((2, 3, 21, 19)).astype(np.float32)
    w = RNG.standard_normal((10, 3, 5, 5)).astype(np.float32) * 0.3
    b = RNG.standard_normal(10).astype(np.float32)
    z = RNG.standard_normal((2, 10, 11, 10)).astype(np.float32)
    y = np.full((2, 10, 11, 10), np.nan, np.float32)
    launch_conv_stem(conv_stem, x, w, b, y, z, (2, 2), (1, 1), (2, 2), False, backend, act=1, lo=0.0, hi=0.0,
                     cfg=StemConfig(V=8, R=2, NO=4), band=band)
    want = np.maximum(conv_ref(x, w, b, strides=(2, 2), pads=(2, 2, 2, 2)) + z, 0)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_a_model_packs_its_constant_weights_once(monkeypatch):
    import ops.conv_stem as cs
    packs = []
    real = cs.pack_stem_weights
    monkeypatch.setattr(cs, "pack_stem_weights", lambda *a, **k: packs.append(1) or real(*a, **k))
    g = dsl.Graph("once")
    xi = g.input("x", (1, 3, 6, 6), dsl.f32)
    w = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32)
    g.output(ops.Conv(xi, g.constant("w", w), strides=[2, 2]), "y")
    model = g.compile(backend="interpreter")
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    for _ in range(3):
        np.testing.assert_allclose(model.run({"x": x})["y"], conv_ref(x, w, strides=(2, 2)), rtol=1e-4, atol=1e-4)
    assert len(packs) == 1


def test_select_picks_stem_for_plain_images_of_few_channels():
    """By measurement (benchmarks/RESULTS.md): <= 4 channels always, up to 32 on rows of >= 48
    output pixels; the direct kernel elsewhere."""
    def pick(c, width, m=64, k=3, backend="numba", **attrs):
        x, w = TensorSpec((1, c, 9, width), dsl.f32), TensorSpec((m, c, k, k), dsl.f32)
        return ops.Conv(pads=(1, 1, 1, 1), **attrs).select(x, w, backend=backend)
    for be in ("numba", "opencl", "interpreter"):
        assert pick(3, 224, backend=be) == pick(1, 7, backend=be) == "stem"
    assert pick(16, 55) == pick(32, 56) == pick(24, 112) == pick(3, 224, strides=(2, 2)) == "stem"
    assert pick(16, 28) == pick(32, 14) == pick(24, 90, strides=(2, 2)) == pick(33, 112) == "direct"
    xb = TensorSpec((1, 16, 55, 55), dsl.f32, format="nchwc16")
    assert ops.Conv(pads=(1, 1, 1, 1)).select(xb, TensorSpec((64, 16, 3, 3), dsl.f32), backend="numba") == "direct"
    x16, w1 = TensorSpec((1, 3, 55, 55), dsl.f32), TensorSpec((64, 3, 1, 1), dsl.f32)
    assert ops.Conv().select(x16, w1, backend="numba") == "pointwise"  # unpadded 1x1: ops/conv_pointwise.py
    xh, wh = TensorSpec((1, 3, 224, 224), dsl.f16), TensorSpec((64, 3, 7, 7), dsl.f16)
    assert ops.Conv(pads=(3, 3, 3, 3)).select(xh, wh, backend="numba") == "gemm"  # f16
    assert ops.Conv(group=3).select(TensorSpec((1, 3, 9, 9), dsl.f32), TensorSpec((3, 1, 3, 3), dsl.f32),
                                    backend="numba") not in ("stem", "direct")  # depthwise
    assert ops.Conv(pads=(1, 1, 1, 1)).select(TensorSpec((1, 16, 9, None), dsl.f32), TensorSpec((64, 16, 3, 3), dsl.f32),
                                              backend="numba") == "direct"  # width not known


def test_stem_launch_rejects_what_it_cannot_run():
    x = np.zeros((1, 2, 4, 4), np.float32)
    w = np.zeros((3, 2, 3, 3), np.float32)
    y = np.zeros((1, 3, 2, 2), np.float32)
    args = ((1, 1), (1, 1), (0, 0))
    with pytest.raises(ValueError, match=r"conv_stem computes f32; x is float64"):
        launch_conv_stem(conv_stem, x.astype(np.float64), w, None, y, None, *args, False, "interpreter", 0, 0, 0)
    with pytest.raises(ValueError, match=r"conv_stem takes one group: weights \(3, 1, 3, 3\) need C = 2"):
        launch_conv_stem(conv_stem, x, w[:, :1], None, y, None, *args, False, "interpreter", 0, 0, 0)
    with pytest.raises(ValueError, match=r"conv_stem reads plain \(N, C, H, W\) images; x has shape \(1, 1, 4, 4, 16\)"):
        launch_conv_stem(conv_stem, np.zeros((1, 1, 4, 4, 16), np.float32), w, None, y, None, *args, False,
                         "interpreter", 0, 0, 0)
    with pytest.raises(ValueError, match=r"y has shape \(1, 3, 2, 2\), expected NCHWc16"):
        launch_conv_stem(conv_stem, x, w, None, y, None, *args, True, "interpreter", 0, 0, 0)
    with pytest.raises(ValueError, match=r"conv_stem band=0: a work item needs at least one row tile"):
        launch_conv_stem(conv_stem, x, w, None, y, None, *args, False, "interpreter", 0, 0, 0, band=0)
    with pytest.raises(ValueError, match=r"StemConfig V=3: lanes must be 4, 8 or 16"):
        StemConfig(V=3)
    with pytest.raises(ValueError, match=r"StemConfig R=0, NO=8: the tile needs at least one row"):
        StemConfig(R=0)


@pytest.mark.parametrize("cores, images, tiles, band", [(2, 1, 38, 19), (1, 1, 38, 38), (8, 1, 38, 5), (2, 4, 38, 38),
                                                      (2, 1, 400, 100)])
def test_stem_band_gives_each_core_one_item(monkeypatch, cores, images, tiles, band):
    """One item a core (a whole image a core), halved while an item would copy more than
    MAX_ITEM_BYTES of input rows (here 10 KB a row tile: 400 tiles on 2 cores -> 200 -> 100)."""
    import dataclasses
    from ops.conv_stem import MAX_ITEM_BYTES, stem_band
    real = dsl.target("numba")
    monkeypatch.setattr(dsl, "target", lambda backend=None: dataclasses.replace(real, compute_units=cores))
    assert stem_band(images, tiles, lambda t: t * 10 * 1024) == band
    assert band * 10 * 1024 <= MAX_ITEM_BYTES or band == 38


@pytest.mark.parametrize("features, tile", [({"avx512f", "avx2"}, (16, 3, 8)), ({"avx2", "fma"}, (8, 2, 6))],
                         ids=["avx512", "avx2"])
def test_tile_per_kind_of_cpu(monkeypatch, features, tile):
    """AVX-512 (32 registers): 3 rows × 8 channels of 16 pixels; AVX2 (16): 2 × 6 of 8."""
    import dataclasses
    real = dsl.target("numba")
    monkeypatch.setattr(dsl, "target", lambda backend=None: dataclasses.replace(real, features=frozenset(features)))
    cfg = stem_config("numba")
    assert (cfg.V, cfg.R, cfg.NO) == tile
