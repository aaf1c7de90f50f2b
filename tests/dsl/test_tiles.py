"""dsl.tile_*: matrix tile registers (Intel AMX where the CPU and OS allow, a per-thread tile file
elsewhere) on every backend against numpy (docs/language.md, "Matrix tiles"): u8 255 × i8 -128
extremes, i32 wrap-around, odd strides and offsets, i32 tiles loaded and stored, every numba
lowering this CPU can run, and the typing errors."""
import runpy

import numpy as np
import pytest

import dsl
from dsl import In, InOut, Out, i8, i32, u8
from tests.dsl.kernel_errors import assert_compile_error

RNG = np.random.default_rng(18)


@dsl.kernel(threads=2)
def tile_matmul(a: In[u8], b: In[i8], c0: In[i32], c: Out[i32], k_steps: i32, lda: i32, a_off: i32, ldc: i32):
    """Thread t: C[16, 16] rows of block t = C0 + A[16, 64·k_steps] · B (B packed in tdpbusd rows of
    64 bytes, k_steps·16 of them); A at a_off, lda elements a row; C and C0 ldc elements a row."""
    t = dsl.thread_id()
    dsl.tile_load(3, c0, t * 16 * ldc, ldc)
    for kk in range(k_steps):
        dsl.tile_load(4, a, a_off + t * 16 * lda + kk * 64, lda)
        dsl.tile_load(6, b, kk * 16 * 64, 64)
        dsl.tile_dot_u8i8(3, 4, 6)
    dsl.tile_store(3, c, t * 16 * ldc, ldc)


@dsl.kernel(threads=1)
def tile_bytes(src: In[i8], dst: InOut[i8], ints: InOut[i32]):
    """A zeroed tile, and bytes through a tile: i8 in, i8 and i32 out (the same 64 bytes a row)."""
    dsl.tile_zero(7)
    dsl.tile_store(7, ints, 0, 16)
    dsl.tile_load(0, src, 5, 70)
    dsl.tile_store(0, dst, 3, 65)
    dsl.tile_store(0, ints, 16 * 16, 17)


def pack_b(bk: np.ndarray) -> np.ndarray:
    """B[K, 16] (i8) as tdpbusd tile rows: row k//4 holds, for each column n, bytes k..k+3."""
    k = bk.shape[0]
    return bk.reshape(k // 4, 4, 16).transpose(0, 2, 1).reshape(-1).copy()


def test_tile_dot_matches_numpy_with_extremes_wrap_and_odd_strides(backend):
    k_steps, lda, a_off, ldc = 2, 131, 5, 19   # odd row strides and offset: unaligned rows
    a = RNG.integers(0, 256, a_off + 32 * lda).astype(np.uint8)
    bk = RNG.integers(-128, 128, (64 * k_steps, 16)).astype(np.int8)
    am = np.lib.stride_tricks.as_strided(a[a_off:], (32, 64 * k_steps), (lda, 1))
    am[:3] = 255                         # u8 255 ...
    bk[:, :2] = -128                     # ... times i8 -128: -4.2M per row, far outside i16
    bk[:, 15] = 127
    c0 = RNG.integers(-1000, 1000, 32 * ldc).astype(np.int32)
    c0m = np.lib.stride_tricks.as_strided(c0, (32, 16), (4 * ldc, 4))
    c0m[0, 0] = np.iinfo(np.int32).min   # + a negative dot: wraps to a large positive
    c0m[1, 15] = np.iinfo(np.int32).max  # + a positive dot: wraps negative
    want = c0m.astype(np.int64) + am.astype(np.int64) @ bk.astype(np.int64)
    want = ((want + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)
    assert want[0, 0] > 0 and want[1, 15] < 0
    c = np.full(32 * ldc, 7, np.int32)
    tile_matmul(a, pack_b(bk), c0, c, k_steps, lda, a_off, ldc, backend=backend)
    got = np.lib.stride_tricks.as_strided(c, (32, 16), (4 * ldc, 4))
    np.testing.assert_array_equal(got, want)
    gaps = np.ones(32 * ldc, bool)
    for r in range(32):
        gaps[r * ldc:r * ldc + 16] = False
    assert (c[gaps] == 7).all()  # only 16 i32 a row are written


def test_tiles_move_bytes_as_they_lie_in_memory(backend):
    src = RNG.integers(-128, 128, 5 + 15 * 70 + 64).astype(np.int8)
    dst = np.zeros(3 + 15 * 65 + 64, np.int8)
    ints = np.full(16 * 16 + 15 * 17 + 16, 9, np.int32)
    tile_bytes(src, dst, ints, backend=backend)
    rows = np.stack([src[5 + 70 * r:5 + 70 * r + 64] for r in range(16)])
    np.testing.assert_array_equal(np.stack([dst[3 + 65 * r:3 + 65 * r + 64] for r in range(16)]), rows)
    assert (ints[:256] == 0).all()
    got = np.stack([ints[256 + 17 * r:256 + 17 * r + 16] for r in range(16)])
    np.testing.assert_array_equal(got, rows.view(np.int32))  # little-endian: 4 bytes a lane


def test_numba_runs_amx_where_the_target_has_it():
    src = tile_matmul.source("numba")
    want = "amx" if "amx" in dsl.target("numba").features else "portable"
    call = "tl.amx_dot_u8i8(3, 4, 6)" if want == "amx" else "tl.portable_dot_u8i8(_tilefile, 3, 4, 6)"
    assert call in src
    assert ("tl.amx_config()" in src) == (want == "amx")


def test_every_runnable_numba_lowering_is_exact():
    """The AMX intrinsics (where this CPU and OS run them: the asm has tdpbusd) and the portable
    loops, called directly, agree with numpy."""
    numba = pytest.importorskip("numba")
    from backends.numba import tiles as tl
    a = RNG.integers(0, 256, (16, 64)).astype(np.uint8)
    a[0] = 255
    bk = RNG.integers(-128, 128, (64, 16)).astype(np.int8)
    bk[:, 0] = -128
    want = a.astype(np.int32) @ bk.astype(np.int32)

    @numba.njit
    def portable(a, b, c):
        f = tl.portable_file()
        tl.portable_zero(f, 0)
        tl.portable_load(f, 1, a, 0, 64)
        tl.portable_load(f, 2, b, 0, 64)
        tl.portable_dot_u8i8(f, 0, 1, 2)
        tl.portable_store(f, 0, c, 0, 16)
    c = np.zeros(256, np.int32)
    portable(a.ravel(), pack_b(bk), c)
    np.testing.assert_array_equal(c.reshape(16, 16), want)
    if "amx" not in dsl.target("numba").features:
        pytest.skip("this CPU or OS gives no AMX: only the portable lowering runs here")

    @numba.njit
    def amx(a, b, c):
        tl.amx_config()
        tl.amx_zero(0)
        tl.amx_load(1, a, 0, 64)
        tl.amx_load(2, b, 0, 64)
        tl.amx_dot_u8i8(0, 1, 2)
        tl.amx_store(0, c, 0, 16)
        tl.amx_release()
    c = np.zeros(256, np.int32)
    amx(a.ravel(), pack_b(bk), c)
    np.testing.assert_array_equal(c.reshape(16, 16), want)
    asm = next(iter(amx.inspect_asm().values()))
    assert "tdpbusd" in asm and "ldtilecfg" in asm and "tileloadd" in asm


def test_amx_lowering_choice():
    from backends.numba.tiles import lowering
    assert lowering({"amx", "amx-int8", "amx-tile"}) == "amx"
    assert lowering({"amx-int8", "amx-tile", "avx512f"}) == "portable"  # the OS did not grant the tile data
    assert lowering({"avx2"}) == "portable"


def test_opencl_source_keeps_a_private_tile_file():
    src = tile_matmul.source("opencl")
    assert "opdsl_tilefile[8192]" in src and "tile_dot_u8i8" in src


@pytest.mark.parametrize("call, words", [
    ("dsl.tile_zero(8)", ["tile_zero", "0..7", "8"]),
    ("dsl.tile_zero(n)", ["tile_zero", "literal", "run time"]),
    ("dsl.tile_load(0, x, 0, 64)", ["tile_load", "'x'", "f32", "1-byte or 4-byte"]),
    ("dsl.tile_load(0, a, 0.5, 64)", ["tile_load", "offset", "integer"]),
    ("dsl.tile_store(0, a, 0, 64)", ["writing to 'a'"]),
    ("dsl.tile_dot_u8i8(0, 1)", ["tile_dot_u8i8", "3 argument"]),
    ("dsl.tile_load(0, n, 0, 64)", ["tile_load", "must be a tensor"]),
    ("y[0] = dsl.tile_zero(0)", ["tile_zero", "statement"]),
])
def test_tile_errors_name_the_call_and_what_it_takes(call, words, tmp_path):
    src = f'''
import dsl
from dsl import In, Out, f32, i32, u8
@dsl.kernel(threads=1)
def bad(a: In[u8], x: In[f32], y: Out[i32], n: i32):
    {call}
'''
    assert_compile_error(tmp_path, "bad_tiles.py", src, 6, words)


def test_interpreter_names_a_tile_row_out_of_range():
    c = np.zeros(16 * 16, np.int32)
    with pytest.raises(dsl.LaunchError, match=r"tile_load.*reach elements"):
        tile_matmul(np.zeros(100, np.uint8), np.zeros(1024, np.int8), c, c.copy(), 1, 64, 0, 16,
                    backend="interpreter")


def test_numba_portable_lowering_runs_a_whole_kernel(tmp_path, monkeypatch):
    """A CPU without AMX (an AVX2 machine, CI) compiles the same kernel to the tile file loops."""
    from backends.numba.tile_codegen import TileGen
    monkeypatch.setattr(TileGen, "tile_lowering", lambda self: "portable")
    path = tmp_path / "portable_tiles.py"
    path.write_text('''
import dsl
from dsl import In, Out, i8, i32, u8
@dsl.kernel(threads=1)
def one_tile(a: In[u8], b: In[i8], c: Out[i32]):
    dsl.tile_zero(2)
    dsl.tile_load(0, a, 0, 64)
    dsl.tile_load(1, b, 0, 64)
    dsl.tile_dot_u8i8(2, 0, 1)
    dsl.tile_store(2, c, 0, 16)
''')
    one_tile = runpy.run_path(str(path))["one_tile"]
    assert "tl.portable_dot_u8i8" in one_tile.source("numba")
    a = RNG.integers(0, 256, (16, 64)).astype(np.uint8)
    bk = RNG.integers(-128, 128, (64, 16)).astype(np.int8)
    c = np.zeros(256, np.int32)
    one_tile(a.ravel(), pack_b(bk), c, backend="numba")
    np.testing.assert_array_equal(c.reshape(16, 16), a.astype(np.int32) @ bk.astype(np.int32))
