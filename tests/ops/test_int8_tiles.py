"""The int8 kernels' choices per target (ops/gemm_int8.py ``int8_tile``, ops/conv_int8_direct.py
``direct_tile`` and ``choose_products``) whatever CPU runs the tests: an AVX-512 VNNI CPU takes
the exact ``dot4`` (one ``vpdpbusd``) on 16-lane tiles, AVX-VNNI on 256 bits ``dot4`` on 8 lanes,
plain AVX2 its ``vpmaddwd`` workarounds on the AVX2 tile; and the AVX-512 tiles compile and give
numpy's results on any host (the interpreter runs the same checked kernel the CPU compiles: the
16-lane tiles once passed the unroll budget there and nowhere else)."""
import dataclasses

import numpy as np
import pytest

import dsl
from ops.conv_int8_direct import choose_products, conv_int8_direct, direct_tile, pack_lanes
from ops.gemm_int8 import Int8Tile, int8_tile, qgemm_int8, saturating_pairs_pay
from test_gemm_int8 import conv_exact, data, exact

AVX512_VNNI = frozenset({"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni"})
AVX_VNNI = frozenset({"avx", "avx2", "fma", "avxvnni"})
AVX2 = frozenset({"avx", "avx2", "fma"})
VNNI_NAMES = {"avx512f", "avx512bw", "avx512vl", "avx512vnni", "avxvnni"}


@pytest.fixture(params=("avx512_vnni", "avx_vnni", "avx2"))
def cpu(request, monkeypatch):
    """``dsl.target`` answering as an AVX-512 VNNI, an AVX-VNNI or a plain AVX2 CPU."""
    real = dsl.target("numba")
    features, bits = {"avx512_vnni": (AVX512_VNNI, 512), "avx_vnni": (AVX_VNNI, 256), "avx2": (AVX2, 256)}[request.param]
    fake = dataclasses.replace(real, backend="numba", features=frozenset(real.features - VNNI_NAMES) | features,
                               vector_bits=bits)
    monkeypatch.setattr(dsl, "target", lambda backend=None: fake)
    return request.param


def test_tiles_and_products_follow_the_target(cpu):
    gemm, direct = int8_tile("numba"), direct_tile("numba")
    exact_full_range = choose_products("numba", fits=False)
    if cpu == "avx512_vnni":
        assert (gemm, direct) == (Int8Tile(16, 6), Int8Tile(16, 8))
        assert exact_full_range == "dot4" and not saturating_pairs_pay("numba")
        assert choose_products("numba", fits=True) == "dot4"  # vpdpbusd: nothing to gain from vpmaddubsw
    elif cpu == "avx_vnni":
        assert gemm == direct == Int8Tile(8, 6)
        assert exact_full_range == "dot4" and not saturating_pairs_pay("numba")
    else:  # the AVX2 choices the Zen 3 sessions tuned, unchanged
        assert gemm == direct == Int8Tile(8, 4)
        assert exact_full_range == "dot2_i16" and choose_products("numba", fits=True) == "dot4_sat"
    # accumulators, the two loaded vectors and one broadcast fit the register file
    registers = 32 if cpu == "avx512_vnni" else 16
    assert 2 * direct.MR + 3 <= registers and 2 * gemm.MR + 3 <= registers


def test_the_image_packs_by_vectors_no_wider_than_its_rows():
    """ResNet's 14- and 7-pixel rows by 8 and 4 words with a 16-lane tile (word by word before);
    rows at least a tile's vector wide keep it (AVX2's 8 on 56 pixels)."""
    assert [pack_lanes(16, w) for w in (56, 16, 14, 8, 7, 3)] == [16, 16, 8, 8, 4, 4]
    assert [pack_lanes(8, w) for w in (56, 8, 7)] == [8, 8, 4]
    assert pack_lanes(4, 3) == 4


@pytest.mark.parametrize("wd", [11, 19])
def test_avx512_direct_tile_is_exact_on_any_host(wd):
    """The 16-lane, 8-row direct tile on the interpreter: a 3×3 padded window whose rows cross its
    32-position panels (11 columns: lane by lane; 19: the two picked vectors), 9 output channels
    (a row tile's tail), requantized to u8 and as i32."""
    x, w = data(np.uint8, (1, 5, 6, wd), 255), data(np.int8, (9, 5, 3, 3), -128)
    geom = [3, 3, 1, 1, 1, 1, 1, 1, 6, wd]
    want = conv_exact(x, w, 7, 0, (1, 1), (1, 1, 1, 1), (1, 1))
    y = np.zeros((1, 9, 6, wd), np.int32)
    conv_int8_direct(x, w, y, np.array([7], np.uint8), geom, backend="interpreter", tile=Int8Tile(16, 8))
    np.testing.assert_array_equal(y, want)
    yq = np.zeros((1, 9, 6, wd), np.uint8)
    conv_int8_direct(x, w, yq, np.array([7], np.uint8), geom, np.float32(1e-3), None, 128, backend="interpreter",
                     tile=Int8Tile(16, 8))
    np.testing.assert_array_equal(yq, np.clip(np.rint(want.astype(np.float32) * np.float32(1e-3)) + 128, 0, 255))


def test_avx512_gemm_tile_is_exact_on_any_host():
    """The 16-lane, 6-row GEMM tile on the interpreter, with row and column tails (13 × 40)."""
    a, b = data(np.uint8, (1, 13, 24), 255), data(np.int8, (1, 24, 40), -128)
    y = np.zeros((1, 13, 40), np.int32)
    qgemm_int8(a, b, y, np.array([3], np.uint8), np.array([0], np.int8), backend="interpreter", tile=Int8Tile(16, 6))
    np.testing.assert_array_equal(y[0], exact(a[0], b[0], 3, 0))
