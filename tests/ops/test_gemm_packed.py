"""The packed SIMD GEMM (ops/gemm_packed.py) against numpy, on every backend.

Tiny tile and cache blocks (V=4, MR=3, KC=4, MC=6, NC=16) make small problems run every loop
of the kernel: several column, K and row blocks, ragged panels and edge tiles; the numba
cases then run the target's own tile at sizes past one K block, and the ops that select it."""
import numpy as np
import pytest

import dsl
import ops
from ops import gemm_packed
from ops.gemm_packed import TileConfig, packed_gemm, tile_config

RNG = np.random.default_rng(5)
TINY = TileConfig(V=4, MR=3, KC=4, MC=6, NC=16)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def reference(a, b, c, trans_a, trans_b, alpha, beta):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if trans_a:
        a64 = a64.transpose(0, 2, 1)
    if trans_b:
        b64 = b64.transpose(0, 2, 1)
    return alpha * np.matmul(a64, b64) + beta * c.astype(np.float64)


CASES = [  # (batch a, batch b, m, k, n, trans_a, trans_b, alpha, beta, c shape)
    (1, 1, 7, 9, 21, 0, 0, 1.0, 0.0, (1, 1)),
    (2, 1, 8, 5, 17, 0, 1, 1.0, 0.0, (1, 1)),      # b broadcast over the batch, B transposed
    (1, 3, 13, 11, 8, 1, 0, 2.0, 0.5, (1, 8)),     # a broadcast, A transposed, alpha/beta, row C
    (1, 1, 6, 12, 16, 1, 1, 1.0, 1.0, (6, 1)),     # both transposed, column C, exact panels
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"-t{c[5]}{c[6]}")
def test_packed_gemm_every_loop(backend, case):
    check_case(backend, case)


def check_case(backend, case):
    """One CASES row through packed_gemm on the TINY blocking, against numpy (y starts as NaN)."""
    ba, bb, m, k, n, ta, tb, alpha, beta, cshape = case
    a = rand(ba, k, m) if ta else rand(ba, m, k)
    b = rand(bb, n, k) if tb else rand(bb, k, n)
    c = rand(*cshape)
    y = np.full((max(ba, bb), m, n), np.nan, np.float32)
    packed_gemm(a, b, c, y, trans_a=ta, trans_b=tb, alpha=alpha, beta=beta, backend=backend, config=TINY)
    np.testing.assert_allclose(y, reference(a, b, c, ta, tb, alpha, beta), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", CASES[:3], ids=lambda c: "x".join(map(str, c[:5])) + f"-t{c[5]}{c[6]}")
def test_prefetching_y_changes_no_result(backend, case, monkeypatch):
    """Tiles that prefetch their rows of y (rows past m clamped) give the same products."""
    monkeypatch.setattr(gemm_packed, "PREFETCH_Y_BYTES", 0)
    m, n = case[2], case[4]
    assert gemm_packed.prefetches_y(m, n)
    check_case(backend, case)


def test_y_is_prefetched_only_when_big():
    assert gemm_packed.prefetches_y(1024, 1024)     # 4 MB: 1024³, or one K block (only stored)
    assert not gemm_packed.prefetches_y(128, 256)   # 128 KB of y stays in L2
    assert not gemm_packed.prefetches_y(256, 512)   # 512 KB: not over the bound


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_packed_gemm_half_storage(backend, dtype):
    """f16/bf16 data is packed as f32 and accumulated in f32; y rounds once per K block."""
    npt = dsl.f16.np if dtype == "f16" else dsl.bf16.np
    # f16 on numba takes the target's tile, the specialization an f16 Conv compiles
    # (test_nn's test_conv_f64_f16_and_no_bias): one ~30 s cold compile for both; K past one KC
    # block keeps the rounding per K block in play. bf16 and the other backends run every loop
    # with the tiny blocks.
    cfg = tile_config(backend) if backend == "numba" and dtype == "f16" else TINY
    k = cfg.KC + 44 if cfg is not TINY else 7
    a, b = rand(1, 9, k).astype(npt), rand(1, k, 10).astype(npt)
    y = np.zeros((1, 9, 10), npt)
    packed_gemm(a, b, np.zeros((1, 1), npt), y, backend=backend, config=cfg)
    ref = reference(a.astype(np.float32), b.astype(np.float32), np.zeros((1, 1)), 0, 0, 1.0, 0.0)
    tol = 1e-2 if dtype == "f16" else 5e-2
    np.testing.assert_allclose(y.astype(np.float32), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("prefetching_y", [False, True])
def test_target_tile_past_one_k_block(monkeypatch, prefetching_y):
    """The numba target's own tile (16 or 8 lanes) with K over one KC block and ragged edges,
    also with every tile prefetching its rows of y (what 1024³ runs)."""
    if prefetching_y:
        monkeypatch.setattr(gemm_packed, "PREFETCH_Y_BYTES", 0)
    cfg = tile_config("numba")
    m, k, n = 3 * cfg.MR + 1, cfg.KC + 37, 2 * cfg.NR + 5
    a, b = rand(1, m, k), rand(1, k, n)
    y = np.empty((1, m, n), np.float32)
    packed_gemm(a, b, np.zeros((1, 1), np.float32), y, backend="numba")
    np.testing.assert_allclose(y, reference(a, b, np.zeros((1, 1)), 0, 0, 1.0, 0.0), rtol=1e-4, atol=1e-3)


def test_packing_buffers_start_on_a_cache_line():
    """Big packing buffers and a big constant B's panels start on a 64-byte line (numpy starts
    large arrays 16 bytes past one), so each thread's rows and each panel's vectors do too."""
    cfg = tile_config("numba")
    ap, bp, _ = gemm_packed.workspace(1, cfg, 1024, 1024, 1024, pack_a=True)
    for buf in (ap, bp):
        assert buf.ctypes.data % 64 == 0 and buf.dtype == np.float32 and buf.flags.c_contiguous
        assert buf.strides[0] % 64 == 0 and buf.flags.writeable
    assert gemm_packed.lined(3, 7).shape == (3, 7)  # small: plain numpy, no lining up
    b = frozen(rand(600, 200))
    assert gemm_packed.packed_b(b, 0, cfg, "numba").ctypes.data % 64 == 0


def test_ops_select_the_packed_kernel_on_numba():
    """MatMul, Gemm and FullyConnected pick it for big float products, eager and in a graph."""
    a, w = rand(2, 70, 96), rand(96, 64)
    spec = dsl.TensorSpec((2, 70, 96), dsl.f32), dsl.TensorSpec((96, 64), dsl.f32)
    assert ops.MatMul().select(*spec, backend="numba") == "packed"
    assert ops.MatMul().select(*spec, backend="interpreter") == "default"
    assert ops.MatMul().select(dsl.TensorSpec((4, 3), dsl.f32), dsl.TensorSpec((3, 4), dsl.f32),
                               backend="numba") == "default"
    np.testing.assert_allclose(ops.MatMul(a, w, backend="numba"), a @ w, rtol=1e-4, atol=1e-3)
    c = rand(64)
    np.testing.assert_allclose(ops.Gemm(a[0], w, c, alpha=0.5, beta=2.0, backend="numba"), 0.5 * a[0] @ w + 2.0 * c,
                               rtol=1e-4, atol=1e-3)
    g = dsl.Graph("fc")
    x = g.input("x", (None, 96), dsl.f32)
    g.output(ops.FullyConnected(x, g.constant("w", w.T.copy()), g.constant("b", w[0].copy())), "y")
    out = g.compile(backend="numba").run({"x": a[0]})["y"]
    np.testing.assert_allclose(out, a[0] @ w + w[0], rtol=1e-4, atol=1e-3)


def im2col(x, k, stride, pad, dil):
    """(C·KH·KW, OH·OW) columns of image x (C, H, W), zero padding; pad = (top, left, bottom, right)."""
    c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    span = [(k[a] - 1) * dil[a] + 1 for a in range(2)]
    oh = (h + pad[0] + pad[2] - span[0]) // stride[0] + 1
    ow = (w + pad[1] + pad[3] - span[1]) // stride[1] + 1
    cols = np.empty((c, k[0], k[1], oh, ow), x.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            cols[:, i, j] = xp[:, i * dil[0]:i * dil[0] + stride[0] * oh:stride[0],
                               j * dil[1]:j * dil[1] + stride[1] * ow:stride[1]][:, :oh, :ow]
    return cols.reshape(c * k[0] * k[1], oh * ow), oh, ow


IM2COL_CASES = [  # (C, H, W, M, kernel, stride, pads (t, l, b, r), dilation)
    (2, 5, 7, 5, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),   # panels cross output rows and the padding
    (3, 9, 8, 4, (3, 2), (2, 2), (0, 1, 1, 0), (1, 1)),   # stride 2, asymmetric pads
    (1, 8, 9, 3, (2, 3), (1, 2), (2, 0, 0, 3), (2, 2)),   # dilation, pads wider than a window
    (2, 6, 6, 7, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),   # 1x1: B is the image itself
]


@pytest.mark.parametrize("case", IM2COL_CASES, ids=lambda c: f"k{c[4][0]}{c[4][1]}-s{c[5][0]}{c[5][1]}-d{c[7][0]}")
def test_packed_gemm_implicit_im2col(backend, case):
    """With a geometry B is gathered from the image while it is packed (convolution as GEMM)."""
    check_im2col(backend, case)


@pytest.mark.parametrize("case", IM2COL_CASES[:2], ids=lambda c: f"k{c[4][0]}{c[4][1]}-s{c[5][0]}{c[5][1]}")
def test_implicit_im2col_prefetching_y(backend, case):
    """The same with every tile prefetching its rows of y (a convolution's big output)."""
    check_im2col(backend, case, prefetch_y=True)


def check_im2col(backend, case, prefetch_y=None):
    ch, h, w, m, k, s, pads, d = case
    x = rand(1, ch, h * w)
    cols, oh, ow = im2col(x.reshape(ch, h, w), k, s, pads, d)
    a = rand(1, m, ch * k[0] * k[1])
    y = np.full((1, m, oh * ow), np.nan, np.float32)
    geometry = (h, w, k[0], k[1], s[0], s[1], pads[0], pads[1], d[0], d[1], ow)
    packed_gemm(a, x, np.zeros((1, 1), np.float32), y, beta=0.0, backend=backend, config=TINY, geometry=geometry,
                prefetch_y=prefetch_y)
    np.testing.assert_allclose(y[0], a[0].astype(np.float64) @ cols, rtol=1e-4, atol=1e-4)


def frozen(x):
    """x as an immutable array (a read-only view of read-only bytes), as graph weights are."""
    return np.frombuffer(x.tobytes(), x.dtype).reshape(x.shape)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_constant_b_is_packed_once(backend, trans_b, monkeypatch):
    """An immutable B shared by the batch is packed by pack_b_panels once per array and config,
    then read in place by every launch; the products match numpy."""
    import ops.gemm_packed as gp
    packs = []
    real = gp.pack_b_panels
    monkeypatch.setattr(gp, "pack_b_panels", lambda *a, **k: (packs.append(1), real(*a, **k)))
    a, c = rand(2, 7, 9), rand(1, 21)
    b = frozen(rand(1, 21, 9) if trans_b else rand(1, 9, 21))
    want = reference(a, b, c, 0, trans_b, 1.0, 0.5)
    for _ in range(2):
        y = np.full((2, 7, 21), np.nan, np.float32)
        packed_gemm(a, b, c, y, trans_b=trans_b, beta=0.5, backend=backend, config=TINY)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    assert len(packs) == 1


def test_writable_b_behind_a_read_only_view_is_packed_every_call(backend):
    """A read-only view of a writable array may change under it: it is never cached."""
    from ops.packed_constants import immutable as _immutable
    base = rand(1, 9, 10)
    view = base.view()
    view.flags.writeable = False
    assert not _immutable(view) and _immutable(frozen(base))
    a, c = rand(1, 6, 9), np.zeros((1, 1), np.float32)
    y = np.empty((1, 6, 10), np.float32)
    for scale in (1.0, -2.0):
        base *= scale
        packed_gemm(a, view, c, y, backend=backend, config=TINY)
        np.testing.assert_allclose(y, reference(a, base, c, 0, 0, 1.0, 0.0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch, cores", [(4, 2), (6, 4), (3, 2)], ids=["whole-even", "whole-uneven", "shared"])
def test_batched_products_whole_entries_per_thread(backend, batch, cores):
    """Batches that spread evenly over the cores give each thread whole entries (more entries
    than threads and fewer: some threads idle); others share each entry's panels in a team."""
    from ops.gemm_packed import whole_entries
    assert whole_entries(batch, cores) == (batch % cores == 0)
    a, b, c = rand(batch, 13, 11), rand(batch, 11, 10), rand(13, 1)
    y = np.full((batch, 13, 10), np.nan, np.float32)
    packed_gemm(a, b, c, y, beta=1.0, backend=backend, config=TINY, cores=cores)
    np.testing.assert_allclose(y, reference(a, b, c, 0, 0, 1.0, 1.0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_whole_entries_pack_one_panel_at_a_time(backend, trans_b):
    """Whole entries with f32 A pack and use one B panel at a time: several ragged panels, K
    blocks that add into y, a B broadcast over the batch (packed by every thread that needs it)."""
    a, c = rand(4, 10, 9), np.zeros((1, 1), np.float32)
    b = rand(1, 19, 9) if trans_b else rand(1, 9, 19)
    y = np.full((4, 10, 19), np.nan, np.float32)
    packed_gemm(a, b, c, y, trans_b=trans_b, beta=0.0, backend=backend, config=TINY, cores=2)
    np.testing.assert_allclose(y, reference(a, b, c, 0, trans_b, 1.0, 0.0), rtol=1e-4, atol=1e-4)


def test_whole_entries_rule():
    from ops.gemm_packed import whole_entries
    assert not whole_entries(1, 2) and whole_entries(12, 2) and whole_entries(4, 2)
    assert not whole_entries(5, 2) and whole_entries(9, 2) and not whole_entries(7, 4)
    assert whole_entries(12, 2, 128 * 128 * 64) and not whole_entries(2, 2, 64 * 3136 * 256)  # a conv's image


def test_model_weights_packed_at_plan_time():
    """In a compiled model the Linear layers' weights (constants) are packed while the plan is
    recorded; runs with new inputs reuse them and match numpy (MatMul + Add -> FusedMatMul)."""
    w, bias = rand(96, 80), rand(80)
    g = dsl.Graph("linear")
    x = g.input("x", (2, 40, 96), dsl.f32)
    g.output(ops.Add(ops.MatMul(x, g.constant("w", w)), g.constant("bias", bias)), "y")
    model = g.compile(backend="numba")
    for seed in (1, 2):
        xv = np.random.default_rng(seed).standard_normal((2, 40, 96)).astype(np.float32)
        np.testing.assert_allclose(model.run({"x": xv})["y"], xv @ w + bias, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("m, k, n", [(256, 256, 256), (40, 96, 80)], ids=["big", "small"])
def test_model_plan_keeps_the_packing_buffers_on_a_cache_line(m, k, n):
    """A model's plan gives each buffer a launch writes (here B's packing buffer) its own scratch
    copy: it starts on a 64-byte line too, so the panels' vectors do not straddle two lines, small
    buffers included (an eager launch lines up only those of 256 KB or more)."""
    g = dsl.Graph("matmul")
    a = g.input("a", (1, m, k), dsl.f32)
    b = g.input("b", (1, k, n), dsl.f32)
    g.output(ops.MatMul(a, b), "y")
    model = g.compile(backend="numba")
    av, bv = rand(1, m, k), rand(1, k, n)
    np.testing.assert_allclose(model.run({"a": av, "b": bv})["y"], av @ bv, rtol=1e-4, atol=1e-3)
    seen = 0
    for plan in model._plans.values():
        for launcher, (values, _grid) in plan.first.steps:
            names = [p.name for p in launcher.kernel_ir.params]
            if "bp" in names:
                assert values[names.index("bp")].ctypes.data % 64 == 0
                seen += 1
    assert seen == 1
    from dsl.opgraph.launch_plan import ScratchPool
    pool = ScratchPool()
    for i, nbytes in enumerate((1000, 1 << 16, 1 << 18, 262148, 1 << 20, 4 << 20)):
        buf = pool.get(i, ((nbytes,), np.dtype(np.uint8), None), None)
        assert buf.ctypes.data % 64 == 0 and buf.shape == (nbytes,) and not buf.any()
