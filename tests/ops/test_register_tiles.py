"""Register tiles chosen per target (ops/register_tiles.py): the GEMM and convolution kernels pick
an AVX-512 tile (32 registers) or an AVX2 one (16) from ``dsl.target``, every chosen tile fits its
register file, and the AVX2 tiles give numpy's results on their edge shapes on every backend
whatever CPU runs the tests (the tiles are passed explicitly there)."""
import dataclasses

import numpy as np
import pytest

import dsl
from ops import conv_direct, conv_pointwise, conv_stem, conv_stem_pool, gemm_packed, register_tiles
from ops.conv_direct import DirectConfig
from test_conv_pointwise import pointwise_ref

AVX512 = frozenset({"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl"})
AVX2 = frozenset({"avx", "avx2", "fma"})


@pytest.fixture(params=("avx512", "avx2"))
def cpu(request, monkeypatch):
    """``dsl.target`` answering as an AVX-512 or an AVX2 CPU (the host's other facts kept)."""
    real = dsl.target("numba")
    features, bits = (AVX512, 512) if request.param == "avx512" else (AVX2, 256)
    fake = dataclasses.replace(real, features=frozenset(real.features - {"avx512f"}) | features,
                               vector_bits=bits)
    monkeypatch.setattr(dsl, "target", lambda backend=None: fake)
    return request.param


def test_tiles_follow_the_target(cpu):
    """AVX-512: the Xeon-tuned tiles; AVX2: half-width vectors, tiles of at most 16 registers."""
    gemm = gemm_packed.tile_config("numba")
    direct = conv_direct.direct_config("numba", 64)
    point = conv_pointwise.pointwise_config("numba")
    rows = conv_pointwise.row_tile("numba")
    stem = conv_stem.stem_config("numba")
    stem_pool = conv_stem_pool.stem_pool_config("numba")
    if cpu == "avx512":
        assert register_tiles.vector_registers(dsl.target("numba")) == 32
        assert (gemm.V, gemm.MR, gemm.KC) == (16, 8, 256)
        assert (direct.P, direct.NV, direct.V, direct.TG) == (6, 4, 16, 12)
        assert (point.P, point.NV, point.V) == (7, 2, 16)
        assert rows == (8, 3)
        assert (stem_pool.P, stem_pool.NV, stem_pool.V) == (6, 4, 16)
    else:
        assert register_tiles.vector_registers(dsl.target("numba")) == 16
        assert (gemm.V, gemm.MR, gemm.KC) == (8, 6, 512)
        assert (direct.P, direct.NV, direct.V, direct.TG) == (6, 2, 8, 8)
        assert (point.P, point.NV, point.V) == (6, 2, 8)
        assert rows == (4, 3)
        assert (stem_pool.P, stem_pool.NV, stem_pool.V) == (6, 2, 8)
    # accumulators + vectors loaded per step + one broadcast fit the register file
    assert register_tiles.fits(2 * gemm.MR, 2)
    assert register_tiles.fits(direct.P * direct.NV, direct.NV)
    assert register_tiles.fits(point.P * point.NV, point.NV)
    assert register_tiles.fits(rows[0] * rows[1], rows[1])
    assert register_tiles.fits(stem.R * stem.NO, stem.R)
    assert register_tiles.fits(stem_pool.P * stem_pool.NV, stem_pool.NV)
    assert point.OCT % rows[0] == 0


def test_pixel_pairs_only_where_they_fit(cpu, monkeypatch):
    """NCHWc16 stride-1 1×1 items of 2P pixels (2P·NV accumulators) on AVX-512 only: on AVX2
    the 24 accumulators spilled inside the FMA loop."""
    seen = []
    rec = lambda *args, **kwargs: seen.append(args[5].copy())  # noqa: E731  (geom)
    x = np.zeros((1, 1, 5, 6, 16), np.float32)
    w = np.zeros((32, 16, 1, 1), np.float32)
    y = np.zeros((1, 2, 5, 6, 16), np.float32)
    conv_pointwise.launch_conv_pointwise(rec, x, w, np.zeros(32, np.float32), y, None, (1, 1), True, "numba",
                                         0, 0.0, 0.0)
    assert seen[0][conv_pointwise.G_PAIR] == (1 if cpu == "avx512" else 0)


@pytest.mark.parametrize("n,c,h,wd,m,res", [
    (1, 20, 7, 7, 10, False),  # 49 pixels: two 24-pixel tiles and an overlapping one; 10 = 4 + 4 + 2 rows
    (2, 9, 4, 6, 16, True),    # one whole tile per image, a residual, every row group whole
])
def test_avx2_pixel_vector_tile_exact(backend, n, c, h, wd, m, res):
    """The AVX2 pixel-vector tile (4 output channels × 3 vectors of 8 pixels) on plain tensors:
    numpy's result, with bias and Relu (or a residual and no activation)."""
    rng = np.random.default_rng(29)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = (rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    z = rng.standard_normal((n, m, h, wd)).astype(np.float32) if res else None
    y = np.full((n, m, h, wd), np.nan, np.float32)
    conv_pointwise.launch_conv_pointwise(conv_pointwise.conv_pointwise, x, w, b, y, z, (1, 1), False, backend,
                                         0 if res else gemm_packed.ACT_RELU, 0.0, 0.0,
                                         DirectConfig(V=8, NV=2, P=6), row_shape=(4, 3))
    ref = pointwise_ref(x, w, b)
    ref = ref + z if res else np.maximum(ref, 0)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_row_tile_must_divide_a_weight_group():
    """6 rows would straddle two 16-channel groups of packed weights: refused, naming the tile."""
    x = np.zeros((1, 4, 5, 5), np.float32)
    w = np.zeros((8, 4, 1, 1), np.float32)
    with pytest.raises(ValueError, match="pixel-vector tile of 6 output channels: it must divide the 16"):
        conv_pointwise.launch_conv_pointwise(conv_pointwise.conv_pointwise, x, w, np.zeros(8, np.float32),
                                             np.zeros((1, 8, 5, 5), np.float32), None, (1, 1), False, "numba",
                                             0, 0.0, 0.0, DirectConfig(V=8, NV=2, P=6), row_shape=(6, 2))


def test_avx2_gemm_tile_exact(backend, monkeypatch):
    """The AVX2 GEMM tile (6 rows × 16 columns, K blocks of 512) on edges of all three: 13 rows
    (6 + 6 + 1), 37 columns (16 + 16 + 5), K = 600 (a block of 512 and one of 88), its tiles
    prefetching their rows of y as a big product's do (16 columns: a row's 3 prefetches overlap)."""
    monkeypatch.setattr(gemm_packed, "PREFETCH_Y_BYTES", 0)
    rng = np.random.default_rng(290)
    a = rng.standard_normal((1, 13, 600)).astype(np.float32)
    b = rng.standard_normal((1, 600, 37)).astype(np.float32)
    y = np.full((1, 13, 37), np.nan, np.float32)
    gemm_packed.packed_gemm(a, b, np.zeros((1, 1), np.float32), y, beta=0.0, backend=backend,
                            config=gemm_packed.TileConfig(V=8, MR=6, KC=512, MC=72, NC=1024))
    ref = a[0].astype(np.float64) @ b[0].astype(np.float64)
    np.testing.assert_allclose(y[0], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
