"""The int8 GEMM on matrix tiles (``dsl.tile_*``: Intel AMX's ``tdpbusd`` where the CPU has it).

Same arithmetic and arguments as ops/gemm_int8.py's ``qgemm_packed`` (its docstring: zero points
folded into per-column sums, the u8 × i8 shifts, the requantizing epilogue), another inner loop:

* B is packed once per constant array by ``pack_b_int8`` with panels of 16 columns, which is
  exactly ``tdpbusd``'s B layout: a panel's K/4 rows of 16 words (4 consecutive k of a column per
  word) are its tiles, 16 rows (64 k) at a time; the columns are padded to a multiple of 32 (a
  2 × 2 block of C tiles always has two panels) and the array by 15 rows, so the last K block of
  the last panel may read past its K/4 rows: whatever it reads there meets zero bytes of A;
* the team packs A (4 bytes a word, shifted to u8, the rows padded to a multiple of 32 and K to
  a multiple of 64 with zeros; row sums by ``dot4`` against bytes of 1) and meets at one
  ``sync()``, unless the tiles can read A where it lies (``reads_a_in_place``: u8, M % 32 == 0,
  K % 64 == 0, B's zero points 0, as in the dynamically quantized transformer's MatMulInteger);
  then each thread takes 32 × 32 blocks of C in ``block_order``'s order (a product: row block
  by row block, each across its columns; a convolution: column block major): 4 C tiles, per 64 k
  two tiles of A and two of B, 4 ``tdpbusd``;
* the C tiles go through the thread's scratch row to the same epilogue as ``qgemm_packed``:
  + za·u[n] - rowsum[m]·zb[n], then bias, f32 multiplier, rint, zero point and clamp; exact i32
  sums of a whole block with A read in place and one zero point for A start at za·u[n] instead
  (a tile loaded with row stride 0) and are stored straight into y, where B fits in L2 K chunk
  by K chunk across the row's blocks (partial sums wait in y).

Taken where ``dsl.target`` has "amx" (``amx_usable``) and K is a multiple of 4 (A is read as
i32 words in place); elsewhere the ``dot4`` GEMM runs (the tile builtins would run, correctly,
on a per-thread tile file: far slower than ``dot4``).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

import dsl
from dsl import In, InOut, Out, f32, i32, i64
from dsl.runtime.cache_lines import line_aligned
from ops import packed_constants
from ops.gemm_int8 import FLOAT_OUT, THREADS, epilogue_args, pack_b_int8

Y = dsl.TypeVar("Y")
Z = dsl.TypeVar("Z")

PANEL = 16        # columns of a B tile (16 i32 of C a row)
BLOCK = 32        # rows and columns of C per step: 2 × 2 tiles
K_STEP = 64       # bytes of K per tdpbusd
K_CHUNK = 8       # K steps a direct block takes before the next block of its group (block_order)
ALL_OF_K = 1 << 30  # kchunk: no chunks
B_IN_L2 = 1 << 20   # B's bytes that stay in L2 beside A and C (every AMX CPU so far: 2 MB of L2 a core)


def amx_usable(backend: Optional[str]) -> bool:
    """Whether ``backend`` runs the tile builtins on AMX (numba, on a CPU and OS that allow it)."""
    return backend == "numba" and "amx" in dsl.target("numba").features


def fits(k: Optional[int]) -> bool:
    """Whether this GEMM takes a product of inner dimension ``k``: A is read as i32 words."""
    return k is not None and k % 4 == 0


@dsl.kernel(threads=THREADS)
def qgemm_amx(a: In[i32, 3], a_zp: In[Z, 2], bp: In[i32, 2], bu: In[i32, 2], bz: In[i32, 2],
              mult: In[f32, 2], bias: In[i32, 2], fbias: In[f32, 2], ascale: In[f32, 1], y: Out[Y, 3],
              yf: Out[f32, 3],
              ap: InOut[i32, 2], rows: InOut[i32, 2],
              flip: i32, per_row: i32, y_zp: f32, q_lo: f32, q_hi: f32, group: i32, kchunk: i32, cols_first: i32,
              MODE: dsl.const[i64], PACK: dsl.const[i64]):
    """y[t] = A[t]·B[t] with zero points (module docstring).  ``a`` is A's bytes as i32 words
    (batch, M, K/4); ``a_zp`` its zero point(s) (one or per row, A's dtype);
    ``flip`` 0x80808080 shifts i8 data to u8.  ``ap`` (batch·Mp, Kp/4) and ``rows`` (batch·Mp, 2)
    receive the packed A and (row sum, zero point).  bp/bu/bz/mult/bias/fbias/ascale and ``MODE``
    (0, 1 or ``FLOAT_OUT``) as for qgemm_packed; with ``FLOAT_OUT`` the result goes to ``yf`` and
    ``y`` is an unused i32 stand-in (the direct path's tile stores need an integer ``y``, and
    the language types both branches); otherwise ``yf`` is the stand-in.
    PACK = 0: the tiles read A in place (``reads_a_in_place``): no packing, no row sums, no sync.
    ``group``, ``kchunk``, ``cols_first``: the order of C's blocks (``block_order``)."""
    cw = dsl.scratch((THREADS, BLOCK * BLOCK), i32)  # this thread's 32 × 32 block of C
    tail_f = dsl.scratch((THREADS, PANEL), f32)      # a row's last columns, lane by lane
    tail_i = dsl.scratch((THREADS, PANEL), i32)
    out_f = MODE == FLOAT_OUT  # the f32 result goes to yf (y: a stand-in, for its tile stores' type)
    batch = yf.shape[0] if out_f else y.shape[0]
    m_rows = yf.shape[1] if out_f else y.shape[1]
    n = yf.shape[2] if out_f else y.shape[2]
    kw = a.shape[2]             # words of A a row (K/4)
    kp = ap.shape[1] if PACK == 1 else kw  # words of (packed) A a row (K rounded up to 64 bytes)
    k4 = kw                                 # rows of a B panel
    mp = ap.shape[0] // batch if PACK == 1 else m_rows
    ones = dsl.splat(0x01010101, 16, i32)
    flips = dsl.splat(flip, 16, i32)
    # ---- pack A: shifted to u8, zero past K and past M; row sums (bytes times 1) and zero points
    lo, hi = dsl.split(batch * mp if PACK == 1 else 0)
    for row in range(lo, hi):
        t = row // mp
        m = row - t * mp
        dst = row * kp
        s = i32(0)
        za = i32(0)
        q0 = 0
        if m < m_rows:
            src = (t * m_rows + m) * kw
            za = (i32(a_zp.flat[(t if a_zp.shape[0] > 1 else 0) * a_zp.shape[1] + (m if a_zp.shape[1] > 1 else 0)])
                  & 0xFF) ^ (flip & 0xFF)
            sv = dsl.splat(0, 16, i32)
            for q in range(0, kw - 15, 16):
                w = a.vload(src + q, 16) ^ flips
                ap.vstore(dst + q, w)
                sv = dsl.dot4(sv, w, ones)
            s = dsl.reduce_add(sv)
            q0 = kw - kw % 16
            for q in range(q0, kw):
                w1 = a.flat[src + q] ^ flip
                ap.flat[dst + q] = w1
                s = dsl.dot4(s, w1, 0x01010101)
            q0 = kw
        for q in range(q0, kp):
            ap.flat[dst + q] = 0
        rows.flat[2 * row] = s
        rows.flat[2 * row + 1] = za
    if PACK == 1:
        dsl.sync()
    # ---- 32 × 32 blocks of C: an item is a group of ``group`` column blocks of one row block (or,
    # ``cols_first``, one column block of each row block in turn, consecutive items sharing B panels)
    tid = dsl.thread_id()
    nblocks = bu.shape[1] // BLOCK
    mblocks = mp // BLOCK
    ngroups = (nblocks + group - 1) // group
    per_entry = ngroups * mblocks
    ksteps = kp // 16
    cb = tid * BLOCK * BLOCK
    lo, hi = dsl.split(batch * per_entry)
    for item in range(lo, hi):
        t = item // per_entry
        r = item - t * per_entry
        ib = r // ngroups
        jg = r - ib * ngroups
        if cols_first == 1:
            jg = r // mblocks
            ib = r - jg * mblocks
        tb = t if bp.shape[0] > 1 else 0
        pa = (t * mp + ib * BLOCK) * kp  # A's block: packed, or in place (then mp = M, kp = K/4)
        j_end = min(jg * group + group, nblocks)
        # exact sums of whole blocks with one zero point for A (and none for B) are direct: C starts
        # at za·u[n] (every row the same: a tile load of stride 0), the tiles store y directly, and
        # the group's blocks go through K together in chunks of ``kchunk`` steps (A's chunk stays
        # in L1 across the group), their partial sums kept in y
        direct_cols = jg * group  # blocks jg·group .. direct_cols - 1 are direct
        if PACK == 0 and MODE == 0:  # (a constant: other variants compile no direct pass)
            if a_zp.shape[1] == 1:
                direct_cols = max(jg * group, min(j_end, n // BLOCK))
            za0 = (i32(a_zp.flat[(t if a_zp.shape[0] > 1 else 0) * a_zp.shape[1]]) & 0xFF) ^ (flip & 0xFF)
            for kc in range(0, max(ksteps, 1) if direct_cols > jg * group else 0, kchunk):
                k_end = min(kc + kchunk, ksteps)
                for jb in range(jg * group, direct_cols):
                    pb = tb * bp.shape[1] + 2 * jb * k4 * PANEL
                    y0 = (t * m_rows + ib * BLOCK) * n + jb * BLOCK
                    if kc > 0:
                        dsl.tile_load(0, y, y0, n)
                        dsl.tile_load(1, y, y0 + PANEL, n)
                        dsl.tile_load(2, y, y0 + 16 * n, n)
                        dsl.tile_load(3, y, y0 + 16 * n + PANEL, n)
                    else:
                        cu0 = tb * bu.shape[1] + jb * BLOCK
                        cw.vstore(cb, za0 * bu.vload(cu0, 16))
                        cw.vstore(cb + PANEL, za0 * bu.vload(cu0 + PANEL, 16))
                        dsl.tile_load(0, cw, cb, 0)
                        dsl.tile_load(1, cw, cb + PANEL, 0)
                        dsl.tile_load(2, cw, cb, 0)
                        dsl.tile_load(3, cw, cb + PANEL, 0)
                    for kb in range(kc, k_end):
                        dsl.tile_load(4, a, pa + kb * 16, kp)
                        dsl.tile_load(5, a, pa + 16 * kp + kb * 16, kp)
                        dsl.tile_load(6, bp, pb + kb * 16 * PANEL, PANEL)
                        dsl.tile_load(7, bp, pb + k4 * PANEL + kb * 16 * PANEL, PANEL)
                        dsl.tile_dot_u8i8(0, 4, 6)
                        dsl.tile_dot_u8i8(1, 4, 7)
                        dsl.tile_dot_u8i8(2, 5, 6)
                        dsl.tile_dot_u8i8(3, 5, 7)
                    dsl.tile_store(0, y, y0, n)
                    dsl.tile_store(1, y, y0 + PANEL, n)
                    dsl.tile_store(2, y, y0 + 16 * n, n)
                    dsl.tile_store(3, y, y0 + 16 * n + PANEL, n)
        # the others: all of K, then the epilogue from this thread's scratch
        for jb in range(direct_cols, j_end):
            pb = tb * bp.shape[1] + 2 * jb * k4 * PANEL
            dsl.tile_zero(0)
            dsl.tile_zero(1)
            dsl.tile_zero(2)
            dsl.tile_zero(3)
            for kb in range(ksteps):
                if PACK == 1:
                    dsl.tile_load(4, ap, pa + kb * 16, kp)
                    dsl.tile_load(5, ap, pa + 16 * kp + kb * 16, kp)
                else:
                    dsl.tile_load(4, a, pa + kb * 16, kp)
                    dsl.tile_load(5, a, pa + 16 * kp + kb * 16, kp)
                dsl.tile_load(6, bp, pb + kb * 16 * PANEL, PANEL)
                dsl.tile_load(7, bp, pb + k4 * PANEL + kb * 16 * PANEL, PANEL)
                dsl.tile_dot_u8i8(0, 4, 6)
                dsl.tile_dot_u8i8(1, 4, 7)
                dsl.tile_dot_u8i8(2, 5, 6)
                dsl.tile_dot_u8i8(3, 5, 7)
            dsl.tile_store(0, cw, cb, BLOCK)
            dsl.tile_store(1, cw, cb + PANEL, BLOCK)
            dsl.tile_store(2, cw, cb + 16 * BLOCK, BLOCK)
            dsl.tile_store(3, cw, cb + 16 * BLOCK + PANEL, BLOCK)
            # ---- epilogue (as qgemm_packed's): zero-point terms, bias, requantization, store
            for i in range(BLOCK):
                m = ib * BLOCK + i
                if m < m_rows:
                    rs = i32(0)
                    za = i32(0)
                    if PACK == 1:
                        rs = rows.flat[2 * (t * mp + m)]
                        za = rows.flat[2 * (t * mp + m) + 1]
                    else:
                        za = (i32(a_zp.flat[(t if a_zp.shape[0] > 1 else 0) * a_zp.shape[1]
                                            + (m if a_zp.shape[1] > 1 else 0)]) & 0xFF) ^ (flip & 0xFF)
                    yrow = (t * m_rows + m) * n
                    for h in dsl.static_range(2):
                        n0 = jb * BLOCK + h * PANEL
                        if n0 < n:
                            cu = tb * bu.shape[1] + n0
                            acc_v = cw.vload(cb + i * BLOCK + h * PANEL, 16) + za * bu.vload(cu, 16) - rs * bz.vload(cu, 16)
                            if MODE == 1:
                                if per_row == 1:
                                    acc_v = acc_v + bias.flat[m if bias.shape[1] > 1 else 0]
                                    f = dsl.f32(acc_v) * mult.flat[m if mult.shape[1] > 1 else 0]
                                else:
                                    if bias.shape[1] > 1:
                                        acc_v = acc_v + bias.vload((tb if bias.shape[0] > 1 else 0) * bias.shape[1] + n0, 16)
                                    else:
                                        acc_v = acc_v + bias.flat[0]
                                    if mult.shape[1] > 1:
                                        f = dsl.f32(acc_v) * mult.vload((tb if mult.shape[0] > 1 else 0) * mult.shape[1] + n0, 16)
                                    else:
                                        f = dsl.f32(acc_v) * mult.flat[0]
                                f = dsl.clamp(dsl.rint(f) + y_zp, q_lo, q_hi)
                                if n0 + 16 <= n:
                                    y.vstore(yrow + n0, f)
                                else:  # the last columns: lanes through this thread's scratch row
                                    tail_f.vstore(dsl.thread_id() * 16, f)
                                    for cc in range(n - n0):
                                        y.flat[yrow + n0 + cc] = tail_f.flat[dsl.thread_id() * 16 + cc]
                            elif MODE == FLOAT_OUT:
                                if mult.shape[1] > 1:
                                    f = dsl.f32(acc_v) * (ascale.flat[0] * mult.vload((tb if mult.shape[0] > 1 else 0)
                                                                                      * mult.shape[1] + n0, 16))
                                else:
                                    f = dsl.f32(acc_v) * (ascale.flat[0] * mult.flat[0])
                                if fbias.shape[1] > 1:
                                    f = f + fbias.vload((tb if fbias.shape[0] > 1 else 0) * fbias.shape[1] + n0, 16)
                                else:
                                    f = f + fbias.flat[0]
                                if n0 + 16 <= n:
                                    yf.vstore(yrow + n0, f)
                                else:
                                    tail_f.vstore(dsl.thread_id() * 16, f)
                                    for cc in range(n - n0):
                                        yf.flat[yrow + n0 + cc] = tail_f.flat[dsl.thread_id() * 16 + cc]
                            else:
                                if n0 + 16 <= n:
                                    y.vstore(yrow + n0, acc_v)
                                else:
                                    tail_i.vstore(dsl.thread_id() * 16, acc_v)
                                    for cc in range(n - n0):
                                        y.flat[yrow + n0 + cc] = tail_i.flat[dsl.thread_id() * 16 + cc]


# --------------------------------------------------------------------------- host side

_STAND_IN_I32 = np.zeros((1, 1, 1), np.int32)    # qgemm_amx's y when the result is f32 (never written)
_STAND_IN_F32 = np.zeros((1, 1, 1), np.float32)  # its yf otherwise

def _pack_b(b3: np.ndarray, bzp2: np.ndarray, backend) -> tuple:
    bb, kk, n = b3.shape
    np_cols = -(-n // BLOCK) * BLOCK
    k4 = -(-kk // 4)
    bp = line_aligned((bb, np_cols * k4 + 15 * PANEL), np.int32, zero=True)  # + 15 rows: the last K block's overreach
    bu = np.empty((bb, np_cols), np.int32)
    bz = np.empty((bb, np_cols), np.int32)
    flip = 0x80 if b3.dtype == np.uint8 else 0
    pack_b_int8(np.ascontiguousarray(b3), np.ascontiguousarray(bzp2), bp, bu, bz, flip, NR=PANEL, backend=backend)
    return bp, bu, bz


def packed_b(b3: np.ndarray, bzp2: np.ndarray, backend) -> tuple:
    """(bp, bu, bz): B in tile panels, made once per constant B and zero point (as
    ops/gemm_int8.py's ``packed_b``), at every call for any other."""
    if not packed_constants.immutable(b3):
        return _pack_b(b3, bzp2, backend)
    key = ("gemm_int8_amx B",) + packed_constants.view_key(b3) + (bzp2.tobytes(), bzp2.shape, backend)
    return packed_constants.once_per_array(b3, key, lambda: _pack_b(b3, bzp2, backend))


def reads_a_in_place(a3: np.ndarray, bz: np.ndarray) -> bool:
    """Whether the tiles can read A where it lies: u8 (no shift), whole 32-row blocks and 64-byte
    K steps (no padding), and B's zero points all 0 after its shift (no row sums needed)."""
    _, m, kk = a3.shape
    return a3.dtype == np.uint8 and m % BLOCK == 0 and kk % K_STEP == 0 and not bz.any()


def qgemm_int8_amx(a3: np.ndarray, b3: np.ndarray, y3: np.ndarray, a_zp=None, b_zp=None, mult=None,
                   bias=None, y_zp: int = 0, q_lo=None, q_hi=None, backend=None, kernel=qgemm_amx,
                   per_row: bool = False, a_scale=None) -> None:
    """``ops.gemm_int8.qgemm_int8``'s product on matrix tiles (same arguments; K % 4 == 0)."""
    backend = backend or "numba"
    kk = a3.shape[2]
    if kk % 4:
        raise ValueError(f"qgemm_int8_amx: K = {kk} must be a multiple of 4 (A is read as i32 words)")
    zb = np.zeros(1, b3.dtype) if b_zp is None else np.asarray(b_zp, b3.dtype).reshape(-1)
    qgemm_amx_packed_b(a3, packed_b(b3, zb.reshape(1, -1), backend), y3, a_zp, mult, bias, y_zp, q_lo, q_hi,
                       backend, kernel, per_row, a_scale=a_scale)


def qgemm_amx_packed_b(a3: np.ndarray, packed: tuple, y3: np.ndarray, a_zp=None, mult=None, bias=None,
                       y_zp: int = 0, q_lo=None, q_hi=None, backend=None, kernel=qgemm_amx,
                       per_row: bool = False, row_sums_folded: bool = False, a_scale=None) -> None:
    """The tile GEMM of A (batch, M, K; K % 4 == 0) by B already packed: ``packed`` = (bp, bu, bz)
    in tile panels (``pack_b_int8`` with NR = PANEL, or an im2col packing of the same layout: the
    columns a multiple of BLOCK, bp 15 panel rows longer); ``kernel``: the launch (a plan's
    recorder stands in for it).  ``row_sums_folded``: u8 A of whole blocks (M % 32 == 0, K % 64 ==
    0) whose -rowsum[m]·zb term the caller has put into a per-row bias: the tiles read A in place
    whatever B's zero points."""
    backend = backend or "numba"
    batch, m, kk = a3.shape
    bp, bu, bz = packed
    flip = 0x80 if a3.dtype == np.int8 else 0
    za = np.zeros((1, 1), a3.dtype) if a_zp is None else np.asarray(a_zp, a3.dtype).reshape(1, -1)
    pack = not (reads_a_in_place(a3, bz) or row_sums_folded and reads_a_in_place(a3, bz[:, :0]))
    mp = -(-m // BLOCK) * BLOCK
    ap = line_aligned((batch * mp, -(-kk // K_STEP) * (K_STEP // 4)) if pack else (1, 1), np.int32, zero=True)
    rows = np.empty((batch * mp, 2) if pack else (1, 2), np.int32)
    mults, biases, fbiases, ascale, mode, lo, hi = epilogue_args(y3, mult, bias, q_lo, q_hi, per_row, m, bu.shape[1],
                                                                 a_scale)
    words = np.ascontiguousarray(a3).view(np.int32)
    y_int, y_float = (_STAND_IN_I32, y3) if mode == FLOAT_OUT else (y3, _STAND_IN_F32)
    group, kchunk, cols_first = block_order(batch, mp, bu.shape[1], 4 * bp.shape[1], per_row)
    kernel(words, za, bp, bu, bz, mults, biases, fbiases, ascale, y_int, y_float, ap, rows, -0x7F7F7F80 if flip else 0,
           int(per_row), float(y_zp), lo, hi, group, kchunk, cols_first, MODE=mode, PACK=int(pack), backend=backend)


def block_order(batch: int, mp: int, np_cols: int, b_bytes: int, per_row: bool) -> tuple:
    """(group, kchunk, cols_first) for qgemm_amx: a product takes its row blocks one at a time, each
    across all its column blocks (split into groups only so that every thread has an item).  Where
    B's panels (``b_bytes`` an entry) stay in L2 (B_IN_L2), direct blocks go through K in chunks of
    K_CHUNK steps, so A's chunk (32 rows × 512 bytes) stays in L1 while B streams from L2; a larger
    B streams from memory, better panel by panel, so all of K at once (32×4096×1024: chunks cost
    1.36x).  256×1024×1024, one thread: 0.74-0.88 of column block major (benchmarks/RESULTS.md,
    twentieth session).  A convolution (``per_row``: A is the weights, B the image) keeps column
    block major, one block an item, all of K at once, as measured in session 18."""
    nblocks = np_cols // BLOCK
    if per_row:
        return 1, ALL_OF_K, 1
    rows = batch * (mp // BLOCK)
    groups = min(nblocks, -(-THREADS // rows))
    return -(-nblocks // groups), K_CHUNK if b_bytes <= B_IN_L2 else ALL_OF_K, 0
