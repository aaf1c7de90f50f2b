"""The fast GEMM: packed panels and a register-tiled SIMD micro-kernel, in the DSL (BLIS's loops).

``gemm_packed`` computes y[t] = alpha·A[t]·B[t] + beta·C for f32, f16 and bf16 data (f32
arithmetic).  One team works on one batch entry at a time; its threads form a tm × tn grid over
the MR-row and NR-column panels of y (``thread_grid``) and never wait for each other: there is no
``sync()``, so a thread the OS deschedules delays only its own share.  Batches that spread evenly
over the cores go by whole entries instead (``whole_entries``: every thread takes its own
entries, so small products are neither split nor packed twice).  Each thread runs BLIS's loops
over its share:

* ``jb`` over blocks of NC columns, ``pc`` over blocks of KC of the inner dimension: the
  thread packs B[pc:pc+KC, its columns] into column panels of NR = 2·V floats (``bp``), so the
  micro-kernel reads B contiguously and from cache; constant weights (``packed_b``) come packed
  once by ``pack_b_panels`` in the same panel order, as MLAS packs B at session start; whole
  entries with f32 A take blocks of one panel (packed, used while in L1, then the next: a block
  of all an attention head's panels fills the L1 before the first tile; RESULTS.md, bq4);
* ``ib`` over blocks of MC rows: for f16/bf16 data the thread packs A[rows, pc:pc+KC] into
  row panels of MR f32 (``ap``: converted once); f32 A is read in place, MR row streams
  (packing it costs ~40 % at 256³ and saves nothing the L1 does not);
* the micro-kernel keeps an MR × NR tile of y in 2·MR SIMD registers (``dsl.local`` of
  ``dsl.simd(f32, V)``): per k it loads two vectors of B and broadcasts MR values of A,
  2·MR fused multiply-adds for 2 + MR loads.

Packing reads A and B through strides, so transposes cost nothing but the pack, and
zero-pads the ragged panels, so the micro-kernel has no edge cases; only the store of an
edge tile goes through a scratch row.  K blocks after the first add into y; alpha and beta are
applied by a final pass only when they are not 1 and 0.  Tile sizes come from the target
(``tile_config``): V = 16 lanes and MR = 8 on AVX-512 (16 of 32 vector registers hold the
tile), V = 8 and MR = 6 on AVX2 (12 of 16, ``ops/register_tiles.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import dsl
from dsl import In, InOut, Out, f32, i32, i64
from dsl.runtime.cache_lines import line_aligned
from ops import packed_constants, register_tiles

T = dsl.TypeVar("T")
PACKED_TYPES = (dsl.f32, dsl.f16, dsl.bf16)
MIN_MACS = 1 << 18  # below this many multiply-adds packing costs more than it saves
THREADS = 4
NR_MAX = 32  # widest register tile row (2 × 16 lanes)
MAX_TEAMS = 64  # batch entries run one per team, up to this many teams
WHOLE_MAX_MACS = 1 << 23  # batch entries up to this many multiply-adds go one per thread

# epilogue activations (the kernel's ``act``)
ACT_NONE = 0
ACT_RELU = 1
ACT_CLIP = 2         # act_lo, act_hi: the bounds
ACT_LEAKY_RELU = 3   # act_lo: alpha


def worth_packing(m, n, k) -> bool:
    """Whether an (m × k)·(k × n) product is big enough for the packed kernel; an unknown
    dimension (a dynamic batch) counts as 1, so big weights pick it whatever the batch."""
    known = [d for d in (m, n) if d is not None]
    macs = (m or 1) * (n or 1) * (k or 1)
    return macs >= MIN_MACS and all(d >= 8 for d in known)


@dataclass(frozen=True)
class TileConfig:
    """Register tile (MR rows × 2·V lanes) and cache blocks (KC, MC, NC) of one target."""

    V: int
    MR: int
    KC: int
    MC: int
    NC: int

    @property
    def NR(self) -> int:
        return 2 * self.V


def tile_config(backend: str = "numba") -> TileConfig:
    """The tile for ``backend``'s target: 512-bit vectors where AVX-512 is, else 256-bit, MR
    rows as many as leave registers for the two B vectors and a broadcast.  KC: a B panel
    (KC × NR floats) of 32 KB; on AVX-512 half that measured best on the Xeon (NR = 32), on
    an AVX2 Zen 3 KC = 512 ran 1024³ ~10 % faster than 256 on one core (RESULTS.md, issue 29).
    MC: row blocks of 64 on AVX-512 (8 tiles per B panel) ran 1024³ 1-4 % and 2048³ 8-12 %
    faster than 192 on the Xeon, 256³ and BERT's shapes alike (fewer 4 KB-strided rows of A and
    y per block, presumably: no counters to confirm; RESULTS.md, issue 29, twentieth session)."""
    t = dsl.target(backend)
    if "avx512f" in t.features:
        return TileConfig(V=16, MR=8, KC=256, MC=64, NC=2048)
    mr = max(1, min(8, (register_tiles.vector_registers(t) - 3) // 2))
    return TileConfig(V=8, MR=mr, KC=512, MC=12 * mr, NC=1024)


@dsl.func
def activation(v, act, lo, hi):
    """The epilogue activation (ACT_*) of a value or a SIMD value; NaN stays NaN."""
    if act == ACT_RELU:
        return dsl.where(v <= 0, 0.0, v)
    if act == ACT_CLIP:
        c = dsl.where(v < lo, lo, v)
        return dsl.where(c > hi, hi, c)  # lo > hi gives hi, as ONNX Clip
    if act == ACT_LEAKY_RELU:
        return dsl.where(v >= 0, v, v * lo)
    return v


@dsl.kernel(threads=THREADS)
def gemm_packed(a: In[T, 3], b: In[T, 3], c: In[T, 2], res: In[T, 3], y: Out[T, 3],
                ap: InOut[f32, 2], bp: InOut[f32, 2], geom: dsl.Vec[i64, 11], tn: i64, whole: i32, b_ready: i32,
                im2col: i32, trans_a: i32, trans_b: i32, alpha: f32, beta: f32, add_res: i32, act: i32, act_lo: f32,
                act_hi: f32, prefetch_y: i32, V: dsl.const[i64], MR: dsl.const[i64], KC: dsl.const[i64], MC: dsl.const[i64],
                NC: dsl.const[i64], PACK_A: dsl.const[i64]):
    """y[t] = act(alpha·A[t]·B[t] + beta·C + res[t]) (res only if add_res); ``ap``/``bp`` are per-thread
    packing buffers (MC·KC, KC·NC).  With im2col = 1, B[t] is the implicit im2col matrix of image
    b[t] (C, H·W) for the convolution ``geom`` = (H, W, KH, KW, sh, sw, ph, pw, dh, dw, OW).  With
    b_ready = 1, bp is B already packed by ``pack_b_panels`` (one B for every t).  With whole = 1
    every thread of the grid takes whole batch entries (tn is 1) instead of a team sharing one.
    With prefetch_y = 1 each tile prefetches its rows of y before its K loop (``prefetches_y``)."""
    m = y.shape[1]
    n = y.shape[2]
    kd = a.shape[1] if trans_a == 1 else a.shape[2]
    sai = 1 if trans_a == 1 else a.shape[2]
    sak = a.shape[2] if trans_a == 1 else 1
    sbk = 1 if trans_b == 1 else b.shape[2]
    sbj = b.shape[2] if trans_b == 1 else 1
    sab = a.shape[1] * a.shape[2] if a.shape[0] > 1 else 0
    sbb = b.shape[1] * b.shape[2] if b.shape[0] > 1 else 0
    sci = c.shape[1] if c.shape[0] > 1 else 0
    scj = 1 if c.shape[1] > 1 else 0
    NR = 2 * V
    edge = dsl.scratch((THREADS, NR_MAX), f32)
    tid = dsl.thread_id()
    team = dsl.tile_id()
    own = team * THREADS + tid  # this thread's packing buffers
    ab = own * ap.shape[1]
    bb = own * bp.shape[1]
    npan = (n + NR - 1) // NR
    mpan = (m + MR - 1) // MR
    tm = THREADS // tn  # the team's threads form a tm × tn grid over the row and column panels
    jt = tid % tn
    it = tid // tn
    t_lo = team  # team t_lo takes batch entries t_lo, t_lo + teams, ...
    t_hi = y.shape[0]
    t_step = dsl.num_tiles()
    if whole == 1:  # this thread takes a contiguous share of the batch entries, all their panels
        tm = 1
        it = 0
        workers = dsl.num_tiles() * THREADS
        t_lo = y.shape[0] * own // workers
        t_hi = y.shape[0] * (own + 1) // workers
        t_step = 1
    jp_lo = npan * jt // tn
    jp_hi = npan * (jt + 1) // tn
    ip_lo = mpan * it // tm
    ip_hi = mpan * (it + 1) // tm
    ncp = NC // NR
    if whole == 1 and PACK_A == 0 and b_ready == 0:
        ncp = 1  # pack one B panel, run its tiles while it is in L1, then the next (A is read in place)
    mcp = MC // MR
    # anything to apply at the last K block besides the sums (a plain MatMul: nothing): one test
    # per stored vector instead of four (alpha, beta, residual, activation: ~5 % at K = 64)
    epilogue = alpha != 1 or beta != 0 or add_res == 1 or act != ACT_NONE
    for t in range(t_lo, t_hi, t_step):
        for jb in range(jp_lo, jp_hi, ncp):
            jn = min(ncp, jp_hi - jb)
            for pc in range(0, kd, KC):
                kc = min(KC, kd - pc)
                last = pc + kc == kd  # the epilogue is applied while storing the last K block
                # pack B[pc:pc+kc, this thread's columns] into jn panels of kc rows × NR (unless
                # pack_b_panels did it once for constant weights: then no jp is packed here)
                for jp in range(jb, jb + jn * (1 - b_ready)):
                    j0 = jp * NR
                    dst = bb + (jp - jb) * kc * NR
                    if im2col == 1:  # B(kk, p) = x[ci, oh·sh - ph + kh·dh, ow·sw - pw + kw·dw], 0 outside
                        hw = geom[0] * geom[1]
                        khw = geom[2] * geom[3]
                        for k in range(kc):
                            kk = pc + k
                            base = t * sbb + (kk // khw) * hw
                            ih0 = ((kk % khw) // geom[3]) * geom[8] - geom[6]
                            iw0 = (kk % geom[3]) * geom[9] - geom[7]
                            oh = j0 // geom[10]
                            ow = j0 % geom[10]
                            ih = oh * geom[4] + ih0
                            iw = ow * geom[5] + iw0
                            if geom[5] == 1 and ow + NR <= geom[10] and j0 + NR <= n and ih >= 0 and \
                                    ih < geom[0] and iw >= 0 and iw + NR <= geom[1]:
                                # the panel is one stretch of one input row (stride 1, no padding)
                                src = base + ih * geom[1] + iw
                                bp.vstore(dst + k * NR, b.vload(src, V))
                                bp.vstore(dst + k * NR + V, b.vload(src + V, V))
                                continue
                            # the panel crosses output rows or the padding: copy it run by run,
                            # one run per output row, zeros where the window leaves the image
                            d = dst + k * NR
                            col = 0
                            while col < NR:
                                run = min(NR - col, geom[10] - ow, n - j0 - col)
                                if run <= 0:  # past the last pixel: zero the panel's tail
                                    for q in range(col, NR):
                                        bp.flat[d + q] = f32(0)
                                    col = NR
                                else:
                                    ih = oh * geom[4] + ih0
                                    iw = ow * geom[5] + iw0  # input column of the run's first pixel
                                    c_lo = run
                                    c_hi = run
                                    if ih >= 0 and ih < geom[0]:
                                        c_lo = min(run, max(0, (geom[5] - 1 - iw) // geom[5]))
                                        c_hi = max(c_lo, min(run, (geom[1] - iw + geom[5] - 1) // geom[5]))
                                    for q in range(c_lo):
                                        bp.flat[d + col + q] = f32(0)
                                    src = base + ih * geom[1] + iw
                                    if geom[5] == 1:
                                        for q in range(c_lo, c_hi):
                                            bp.flat[d + col + q] = b.flat[src + q]
                                    else:
                                        for q in range(c_lo, c_hi):
                                            bp.flat[d + col + q] = b.flat[src + q * geom[5]]
                                    for q in range(c_hi, run):
                                        bp.flat[d + col + q] = f32(0)
                                    col += run
                                    ow = 0
                                    oh += 1
                    else:
                        src = t * sbb + pc * sbk + j0 * sbj
                        if sbj == 1 and j0 + NR <= n:
                            for k in range(kc):
                                bp.vstore(dst + k * NR, b.vload(src + k * sbk, V))
                                bp.vstore(dst + k * NR + V, b.vload(src + k * sbk + V, V))
                        else:
                            for k in range(kc):
                                for col in range(NR):
                                    v = f32(0)
                                    if j0 + col < n:
                                        v = b.flat[src + k * sbk + col * sbj]
                                    bp.flat[dst + k * NR + col] = v
                for ib in range(ip_lo, ip_hi, mcp):
                    imn = min(mcp, ip_hi - ib)
                    # pack A[rows of panels ib.., pc:pc+kc] into imn panels of kc columns × MR (f16/bf16
                    # data: converted once here; f32 is read in place, a row of A per register row)
                    if PACK_A == 1:
                        for ip in range(ib, ib + imn):
                            i0 = ip * MR
                            dst = ab + (ip - ib) * kc * MR
                            src = t * sab + i0 * sai + pc * sak
                            for r in dsl.static_range(MR):
                                if i0 + r < m:
                                    for k in range(kc):
                                        ap.flat[dst + k * MR + r] = a.flat[src + r * sai + k * sak]
                                else:
                                    for k in range(kc):
                                        ap.flat[dst + k * MR + r] = f32(0)
                    # the MR × NR tiles of this block, B panel outermost (it stays in L1)
                    for tile in range(jn * imn):
                        jp = jb + tile // imn
                        ip = ib + tile % imn
                        acc = dsl.local((MR, 2), dsl.simd(f32, V))
                        i0 = ip * MR
                        j0 = jp * NR
                        if prefetch_y == 1:  # the tile of y this K block adds into, stored after the
                            # k loop: its lines (one 4 KB page a row at n = 1024, in L3 between K
                            # blocks) arrive during the loop
                            for r in dsl.static_range(MR):
                                at = (t * m + min(i0 + r, m - 1)) * n + j0
                                dsl.prefetch(y, at)
                                dsl.prefetch(y, at + V)
                                dsl.prefetch(y, at + NR - 1)
                        pb = bb + (jp - jb) * kc * NR
                        if b_ready == 1:  # pack_b_panels' layout: K blocks of npan panels of kc × NR
                            pb = pc * npan * NR + jp * kc * NR
                        if PACK_A == 1:
                            pa = ab + (ip - ib) * kc * MR
                            for k in range(kc):
                                b0 = bp.vload(pb + k * NR, V)
                                b1 = bp.vload(pb + k * NR + V, V)
                                for r in dsl.static_range(MR):
                                    av = dsl.splat(ap.flat[pa + k * MR + r], V)
                                    acc[r, 0] = dsl.fma(av, b0, acc[r, 0])
                                    acc[r, 1] = dsl.fma(av, b1, acc[r, 1])
                        else:  # rows past m repeat the last row; their results are not stored
                            rows = dsl.local((MR,), i64)
                            for r in dsl.static_range(MR):
                                rows[r] = t * sab + min(i0 + r, m - 1) * sai + pc * sak
                            for k in range(kc):
                                b0 = bp.vload(pb + k * NR, V)
                                b1 = bp.vload(pb + k * NR + V, V)
                                for r in dsl.static_range(MR):
                                    av = dsl.splat(a.flat[rows[r] + k * sak], V)
                                    acc[r, 0] = dsl.fma(av, b0, acc[r, 0])
                                    acc[r, 1] = dsl.fma(av, b1, acc[r, 1])
                        full = j0 + NR <= n
                        for r in dsl.static_range(MR):
                            i = i0 + r
                            if i < m:
                                row = (t * m + i) * n + j0
                                if full:
                                    for h in dsl.static_range(2):
                                        at = row + h * V
                                        vec = acc[r, h]
                                        if pc != 0:
                                            vec = vec + y.vload(at, V)
                                        if last and epilogue:
                                            vec = vec * alpha
                                            if beta != 0:
                                                if scj == 1:
                                                    vec = vec + beta * c.vload(i * sci + j0 + h * V, V)
                                                else:
                                                    vec = vec + beta * c.flat[i * sci]
                                            if add_res == 1:
                                                vec = vec + res.vload(at, V)
                                            vec = activation(vec, act, act_lo, act_hi)
                                        y.vstore(at, vec)
                                else:  # an edge tile: through this thread's row of ``edge``
                                    for h in dsl.static_range(2):
                                        edge.vstore(tid * NR_MAX + h * V, acc[r, h])
                                    for col in range(n - j0):
                                        v = edge[tid, col]
                                        if pc != 0:
                                            v += y.flat[row + col]
                                        if last:
                                            v = alpha * v + beta * c.flat[i * sci + (j0 + col) * scj]
                                            if add_res == 1:
                                                v += res.flat[row + col]
                                            v = activation(v, act, act_lo, act_hi)
                                        y.flat[row + col] = v


@dsl.kernel(threads=THREADS)
def pack_b_panels(b: In[T, 2], bp: Out[f32, 1], trans_b: i32, KC: dsl.const[i64], NR: dsl.const[i64]):
    """B (or Bᵀ) as gemm_packed's micro-kernel reads it, once for constant weights: for each
    block of KC rows, its column panels of NR (zero-padded past n), each kc × NR row-major."""
    kd = b.shape[1] if trans_b == 1 else b.shape[0]
    n = b.shape[0] if trans_b == 1 else b.shape[1]
    sbk = 1 if trans_b == 1 else b.shape[1]
    sbj = b.shape[1] if trans_b == 1 else 1
    npan = (n + NR - 1) // NR
    kblocks = (kd + KC - 1) // KC
    lo, hi = dsl.split(kblocks * npan, grid=True)
    for item in range(lo, hi):
        pc = (item // npan) * KC
        jp = item % npan
        kc = min(KC, kd - pc)
        dst = pc * npan * NR + jp * kc * NR
        for k in range(kc):
            for col in range(NR):
                v = f32(0)
                if jp * NR + col < n:
                    v = b.flat[(pc + k) * sbk + (jp * NR + col) * sbj]
                bp.flat[dst + k * NR + col] = v


PREFETCH_Y_BYTES = 1 << 19  # outputs above this are not in a 512 KB L2 (Zen 3's) when a tile stores


def prefetches_y(m: int, n: int) -> bool:
    """Whether tiles should prefetch their rows of y: only where y is too big to be in L2 when
    a tile stores (or adds into) it: the lines then come during the tile's K loop instead of
    stalling the stores (1024³ +4-17 % on one core, nineteenth session; one K block too, where
    y is only written: 1024×128·128×1024 +15-25 %, 256×64·64×3136 +3-30 %, twentieth).  The
    prefetches of a small product, whose y stays in cache, cost 3-10 % at K = 64 (RESULTS.md,
    issue 29)."""
    return m * n * 4 > PREFETCH_Y_BYTES


def thread_grid(m: int, n: int, cfg: TileConfig, b_ready: bool = False) -> tuple:
    """(tm, tn): how a team's threads split the row and column panels of one product.  Each
    thread packs the B panels of its columns, so a split of the rows packs the same panels in
    several threads; packing a panel (an implicit im2col one above all) costs about as much as
    two tiles.  The split with the least work for the busiest thread (tiles + 2 × packed panels,
    no packing when B came packed)."""
    mpan, npan = -(-m // cfg.MR), -(-n // cfg.NR)
    splits = [(THREADS // tn, tn) for tn in range(THREADS, 0, -1) if THREADS % tn == 0]
    pack = 0 if b_ready else 2
    return min(splits, key=lambda g: (-(-mpan // g[0]) * -(-npan // g[1]) + pack * -(-npan // g[1]), -g[1]))


def whole_entries(batch: int, cores: int, macs: int = 0) -> bool:
    """Whether threads should take whole batch entries (no B panel packed twice, no split of a
    small product) rather than a team sharing each entry: when the entries spread evenly over
    the cores, or are so many that one more per core hardly matters, and each entry (``macs``
    multiply-adds) is small (a big one, a batched convolution's image, keeps its team split and
    its threads' B blocks small)."""
    return batch > 1 and (batch % cores == 0 or batch >= 4 * cores) and macs <= WHOLE_MAX_MACS


def workspace(teams: int, cfg: TileConfig, k: int, m: int, n: int, pack_a: bool = True, whole: bool = False,
              b_ready: bool = False):
    """Per-thread packing buffers for this problem: a thread's share of the panels, at most one
    cache block (MC × KC of A, KC × NC of B); no B buffer when B came packed."""
    tm, tn = (1, 1) if whole else thread_grid(m, n, cfg, b_ready)
    kc = min(cfg.KC, k)
    mc = min(cfg.MC, -(-(-(-m // cfg.MR)) // tm) * cfg.MR) if pack_a else 1
    nc = 1 if b_ready else min(cfg.NC, -(-(-(-n // cfg.NR)) // tn) * cfg.NR)
    threads = teams * THREADS
    ap = lined(threads, mc * kc) if pack_a else np.empty((threads, mc * kc), np.float32)  # f32 A: unused
    return ap, lined(threads, kc * nc), tn


LINED_MIN = 1 << 16  # floats (256 KB): smaller buffers skip the ~3 µs of lining up, a cost to an
# eager launch of a small product where no gain was measured (4x128x64x128: 0.97-1.04 of before)


def lined(rows: int, cols: int) -> np.ndarray:
    """An empty (rows, cols) f32 packing buffer, on a cache line from ``LINED_MIN`` floats up."""
    return line_aligned((rows, cols), np.float32, min_bytes=4 * LINED_MIN)


NO_GEOMETRY = np.zeros(11, np.int64)
def packed_b(b: np.ndarray, trans_b: int, cfg: TileConfig, backend) -> np.ndarray:
    """B (2-D) packed by ``pack_b_panels`` as a (1, K·panels·NR) array, made once per constant
    array and config (kept while the array lives) and at every call for any other."""
    def pack():
        kd, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
        bp = lined(1, kd * -(-n // cfg.NR) * cfg.NR)
        pack_b_panels(b, bp.reshape(-1), trans_b, KC=cfg.KC, NR=cfg.NR, backend=backend)
        return bp
    return packed_constants.once_per_array(b, ("gemm_packed B",) + packed_constants.view_key(b) + (trans_b, cfg),
                                           pack)


def packed_gemm(a, b, c, y, trans_a: int = 0, trans_b: int = 0, alpha=1.0, beta=1.0, backend=None,
                kernel=gemm_packed, config=None, res=None, act: int = ACT_NONE, act_lo: float = 0.0,
                act_hi: float = 0.0, geometry=None, cores=None, pack_a=None, prefetch_y=None):
    """``gemm_kernel``'s interface on the packed kernel: 3-D a, b (size-1 batch broadcast), 2-D c.
    ``kernel`` is what to launch (a graph's recorder stands in for it while a model is built);
    ``config`` overrides the target's TileConfig (tests use tiny blocks to reach every loop);
    ``res``/``act`` are the epilogue; ``geometry`` (11 ints) makes B the im2col matrix of image b;
    ``cores`` overrides the target's core count (which decides how batch entries are shared);
    ``pack_a``/``prefetch_y`` override the kernel's own choices (benchmarks compare them).
    A constant B (graph weights: read-only all the way down) shared by the batch is packed once."""
    cfg = config or tile_config(backend or "numba")
    k = a.shape[1] if trans_a else a.shape[2]
    batch = y.shape[0]
    whole = whole_entries(batch, cores or dsl.target(backend or "numba").compute_units, y.shape[1] * y.shape[2] * k)
    teams = max(1, min(-(-batch // THREADS) if whole else batch, MAX_TEAMS))
    if pack_a is None:
        pack_a = a.dtype != np.float32
    b_ready = geometry is None and b.shape[0] == 1 and packed_constants.immutable(b)
    if prefetch_y is None:
        prefetch_y = prefetches_y(y.shape[1], y.shape[2])
    ap, bp, tn = workspace(teams, cfg, k, y.shape[1], y.shape[2], pack_a, whole, b_ready)
    if b_ready:
        bp = packed_b(b[0], trans_b, cfg, backend)
    add_res = res is not None
    if res is None:  # never read: any array of y's rank and dtype
        res = np.zeros((1, 1, 1), y.dtype)
    kernel(a, b, c, res, y, ap, bp, NO_GEOMETRY if geometry is None else np.asarray(geometry, np.int64), tn,
           whole=int(whole), b_ready=int(b_ready), im2col=int(geometry is not None), trans_a=trans_a,
           trans_b=trans_b, alpha=float(alpha), beta=float(beta), add_res=int(add_res), act=act,
           act_lo=float(act_lo), act_hi=float(act_hi), prefetch_y=int(prefetch_y),
           V=cfg.V, MR=cfg.MR, KC=cfg.KC, MC=cfg.MC, NC=cfg.NC,
           PACK_A=int(pack_a), backend=backend, grid=teams)
