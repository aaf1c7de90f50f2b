"""The int8 GEMM: packed u8×i8 panels, ``dsl.dot4`` in a register tile, requantization fused.

``qgemm_packed`` computes, per batch entry t, the exact i32 product

    acc[m, n] = Σ_k (A[m, k] - za[m]) · (B[k, n] - zb[n])

and either stores it (MatMulInteger, ConvInteger) or requantizes it in the same pass
(QLinearMatMul, QLinearConv): y = clamp(rint(f32(acc + bias[n]) · mult[n]) + y_zp, lo, hi), in f32
as onnxruntime's MLAS does, with ``mult[n] = a_scale·b_scale[n]/y_scale`` per tensor or per
output channel and ``lo``/``hi`` the output type's range narrowed by a fused Relu/Clip.

The layout follows MLAS's QgemmU8S8 (facts only, no code):

* ``dot4`` multiplies unsigned bytes of A by signed bytes of B, so an i8 A is shifted to u8
  (+128, its zero point too) while it is packed, and a u8 B to i8 (-128, at weight packing);
  the differences A - za and B - zb do not change;
* B (weights) is packed once per constant array by ``pack_b_int8``: panels of NR = 2·V columns,
  each K/4 rows of NR i32 words (4 consecutive k of one column per word), zero-padded;
* the zero points never enter the inner loop: Σ (A - za)(B - zb) = Σ A·B - za·colsum(B)
  - zb·rowsum(A) + K·za·zb, so packing B keeps u[n] = K·zb[n] - colsum(B)[n] and packing A keeps
  rowsum(A)[m] and za[m]; the epilogue adds za[m]·u[n] - rowsum(A)[m]·zb[n];
* the team first packs A (every row: 4 bytes per i32 word, the row sum, the zero point), meets
  at one ``sync()``, then each thread takes a share of (column panel, row panel) tiles, column
  panel major, so consecutive tiles reuse a B panel from L1.  The micro-kernel keeps an MR × NR
  tile in 2·MR i32 vectors: per 4 k, two vector loads of B, MR broadcasts of an A word,
  2·MR ``dot4``.

Tiles come from the target (``int8_tile``): V = 16, MR = 6 with AVX-512; V = 8 and MR = 6 with
VNNI on 256 bits; V = 8, MR = 4 on plain AVX2, whose exact ``dot4`` (two ``vpmaddwd``) needs
registers for the widened halves.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

import dsl
from dsl import In, InOut, Out, f32, i32, i64
from ops import packed_constants

A = dsl.TypeVar("A")
B = dsl.TypeVar("B")
Y = dsl.TypeVar("Y")

THREADS = 4
MIN_MACS = 1 << 15  # below this many multiply-adds the scalar kernel is as fast
FLOAT_OUT = 2       # ``MODE`` of an f32 output: f32(sum)·mult + float bias


@dataclass(frozen=True)
class Int8Tile:
    """Register tile of the int8 GEMM: MR rows × 2·V i32 lanes (columns)."""

    V: int
    MR: int

    @property
    def NR(self) -> int:
        return 2 * self.V


def int8_tile(backend: str = "numba") -> Int8Tile:
    """The tile for ``backend``'s target (module docstring).  AVX-512 takes MR = 6: with
    ``vpdpbusd`` 6 and 7 rows ran alike (209 and 218 GMAC/s at 256×1024×1024, benchmarks/RESULTS.md),
    and 8 rows once passed the unroll budget (the tails now go through a scratch row)."""
    feats = dsl.target(backend).features
    if "avx512f" in feats and "avx512bw" in feats:
        return Int8Tile(V=16, MR=6)
    if "avxvnni" in feats or "avx512vnni" in feats and "avx512vl" in feats:
        return Int8Tile(V=8, MR=6)
    return Int8Tile(V=8, MR=4)


def saturating_pairs_pay(backend: str) -> bool:
    """Whether ``dsl.dot4_sat`` (``vpmaddubsw`` + ``vpmaddwd``: three instructions a vector) beats
    the exact ``dot4`` on ``backend``'s target: numba on AVX2 without VNNI, where ``dot4`` takes
    two ``vpmaddwd`` and the byte widening (about six); with VNNI ``dot4`` is one ``vpdpbusd``."""
    feats = dsl.target(backend).features
    return backend == "numba" and "avx2" in feats and "avxvnni" not in feats and "avx512vnni" not in feats


def pairs_fit_i16(words: np.ndarray) -> bool:
    """Whether ``dsl.dot4_sat`` equals ``dsl.dot4`` for every u8 operand against these signed
    bytes (i32 words of 4, bytes 0-1 and 2-3 a pair): in each pair the positive bytes sum to at
    most 128 and the negative ones to at least -128, so 255 times either stays inside i16.  7-bit
    weights always do; full-range ones rarely do (then the exact ``dot4`` runs)."""
    b = np.ascontiguousarray(words).view(np.int8).reshape(-1, 2).astype(np.int16)
    return bool((np.maximum(b, 0).sum(axis=1) <= 128).all() and (np.minimum(b, 0).sum(axis=1) >= -128).all())


def worth_packing(m, n, k) -> bool:
    known = [d for d in (m, n, k) if d is not None]
    return (m or 1) * (n or 1) * (k or 1) >= MIN_MACS and all(d >= 4 for d in known)


@dsl.kernel(threads=THREADS)
def pack_b_int8(b: In[B, 3], b_zp: In[B, 2], bp: Out[i32, 2], bu: Out[i32, 2], bz: Out[i32, 2],
                flip: i32, NR: dsl.const[i64]):
    """B (bb, K, N) as qgemm_packed reads it: per entry, panels of NR columns, each K/4 rows of NR
    words (byte j of a word: row 4·q + j, shifted to i8 by ``flip`` = 0x80 for u8 data); with
    bu[n] = K·zb[n] - colsum[n] and bz[n] = zb[n] (shifted alike), zero past N."""
    kk = b.shape[1]
    n = b.shape[2]
    k4 = (kk + 3) // 4
    np_cols = bu.shape[1]
    lo, hi = dsl.split(b.shape[0] * np_cols, grid=True)
    for item in range(lo, hi):
        t = item // np_cols
        col = item - t * np_cols
        panel = col // NR
        c = col - panel * NR
        dst = t * bp.shape[1] + panel * k4 * NR + c
        s = i32(0)
        zb = i32(0)
        if col < n:
            zi = (i32(b_zp.flat[(t if b_zp.shape[0] > 1 else 0) * b_zp.shape[1] + (col if b_zp.shape[1] > 1 else 0)])
                  & 0xFF) ^ flip
            zb = zi - ((zi & 0x80) << 1)
        for q in range(k4):
            w = i32(0)
            if col < n:
                for j in dsl.static_range(4):
                    k = 4 * q + j
                    if k < kk:
                        v = (i32(b.flat[(t * kk + k) * n + col]) & 0xFF) ^ flip
                        s += v - ((v & 0x80) << 1)
                        w = w | (v << (8 * j))
            bp.flat[dst + q * NR] = w
        bu.flat[t * np_cols + col] = i32(kk) * zb - s if col < n else i32(0)
        bz.flat[t * np_cols + col] = zb


@dsl.kernel(threads=THREADS)
def qgemm_packed(a: In[A, 3], a_zp: In[A, 2], bp: In[i32, 2], bu: In[i32, 2], bz: In[i32, 2],
                 mult: In[f32, 2], bias: In[i32, 2], fbias: In[f32, 2], ascale: In[f32, 1], y: Out[Y, 3],
                 ap: InOut[i32, 2],
                 rows: InOut[i32, 2], flip: i32, per_row: i32, y_zp: f32, q_lo: f32, q_hi: f32,
                 MODE: dsl.const[i64], V: dsl.const[i64], MR: dsl.const[i64], SAT: dsl.const[i64]):
    """y[t] = A[t]·B[t] with zero points (module docstring); ``ap`` (batch·Mp, K/4) and ``rows``
    (batch·Mp, 2) are the packed A and its (row sum, zero point), Mp = M rounded up to MR.
    bp/bu/bz/mult/bias have one row per B entry (or one for all); mult and bias are per column, or
    per row of A with per_row = 1 (a convolution's output channels), size 1: per tensor.
    ``MODE``: 0 stores the i32 sums, 1 requantizes them, 2 (``FLOAT_OUT``) stores the f32
    f32(sum)·f32(ascale·mult[n]) + fbias[n] (MatMulIntegerToFloat, the dynamically quantized
    MatMul: ``ascale``, A's scale, is read here, so a recorded plan takes it from its buffer); a
    constant, so each variant compiles one epilogue (three unrolled MR × 2 times cost 60 % more).
    SAT = 1: the products run on ``dsl.dot4_sat``, chosen by the host where B's bytes keep it
    exact (``pairs_fit_i16``)."""
    tail_f = dsl.scratch((THREADS, V), f32)  # a row's last columns, lane by lane (no V-fold unrolling)
    tail_i = dsl.scratch((THREADS, V), i32)
    batch = y.shape[0]
    m_rows = y.shape[1]
    n = y.shape[2]
    kk = a.shape[2]
    k4 = (kk + 3) // 4
    mp = ap.shape[0] // batch
    NR = 2 * V
    # ---- pack A: 4 bytes per word (shifted to u8 by flip = 0x80 for i8 data), row sums, zero points
    lo, hi = dsl.split(batch * mp)
    for row in range(lo, hi):
        t = row // mp
        m = row - t * mp
        s = i32(0)
        za = i32(0)
        dst = row * k4
        if m < m_rows:
            src = (t * m_rows + m) * kk
            za = (i32(a_zp.flat[(t if a_zp.shape[0] > 1 else 0) * a_zp.shape[1] + (m if a_zp.shape[1] > 1 else 0)])
                  & 0xFF) ^ flip
            for q in range(kk // 4):
                w = i32(0)
                for j in dsl.static_range(4):
                    v = (i32(a.flat[src + 4 * q + j]) & 0xFF) ^ flip
                    s += v
                    w = w | (v << (8 * j))
                ap.flat[dst + q] = w
            if kk % 4 != 0:
                w = i32(0)
                for j in dsl.static_range(4):
                    k = (kk // 4) * 4 + j
                    if k < kk:
                        v = (i32(a.flat[src + k]) & 0xFF) ^ flip
                        s += v
                        w = w | (v << (8 * j))
                ap.flat[dst + k4 - 1] = w
        else:
            for q in range(k4):
                ap.flat[dst + q] = i32(0)
        rows.flat[2 * row] = s
        rows.flat[2 * row + 1] = za
    dsl.sync()
    # ---- tiles: column panel major, so a thread's consecutive tiles share a B panel
    npan = bu.shape[1] // NR
    mpan = mp // MR
    per_entry = npan * mpan
    lo, hi = dsl.split(batch * per_entry)
    for item in range(lo, hi):
        t = item // per_entry
        r = item - t * per_entry
        jp = r // mpan
        ip = r - jp * mpan
        tb = t if bp.shape[0] > 1 else 0
        pb = tb * bp.shape[1] + jp * k4 * NR
        pa = (t * mp + ip * MR) * k4
        acc = dsl.local((2 * MR,), dsl.simd(i32, V))
        for q in range(k4):
            b0 = bp.vload(pb + q * NR, V)
            b1 = bp.vload(pb + q * NR + V, V)
            for i in dsl.static_range(MR):
                av = dsl.splat(ap.flat[pa + i * k4 + q], V)
                if SAT == 1:
                    acc[2 * i] = dsl.dot4_sat(acc[2 * i], av, b0)
                    acc[2 * i + 1] = dsl.dot4_sat(acc[2 * i + 1], av, b1)
                else:
                    acc[2 * i] = dsl.dot4(acc[2 * i], av, b0)
                    acc[2 * i + 1] = dsl.dot4(acc[2 * i + 1], av, b1)
        # ---- epilogue: zero-point terms, bias, requantization, store
        for i in dsl.static_range(MR):
            m = ip * MR + i
            if m < m_rows:
                rs = rows.flat[2 * (t * mp + m)]
                za = rows.flat[2 * (t * mp + m) + 1]
                yrow = (t * m_rows + m) * n
                for h in dsl.static_range(2):
                    n0 = jp * NR + h * V
                    if n0 < n:
                        cu = tb * bu.shape[1] + n0
                        acc_v = acc[2 * i + h] + za * bu.vload(cu, V) - rs * bz.vload(cu, V)
                        if MODE == 1:
                            if per_row == 1:
                                acc_v = acc_v + bias.flat[m if bias.shape[1] > 1 else 0]
                                f = dsl.f32(acc_v) * mult.flat[m if mult.shape[1] > 1 else 0]
                            else:
                                if bias.shape[1] > 1:
                                    acc_v = acc_v + bias.vload((tb if bias.shape[0] > 1 else 0) * bias.shape[1] + n0, V)
                                else:
                                    acc_v = acc_v + bias.flat[0]
                                if mult.shape[1] > 1:
                                    f = dsl.f32(acc_v) * mult.vload((tb if mult.shape[0] > 1 else 0) * mult.shape[1] + n0, V)
                                else:
                                    f = dsl.f32(acc_v) * mult.flat[0]
                            f = dsl.clamp(dsl.rint(f) + y_zp, q_lo, q_hi)
                            if n0 + V <= n:
                                y.vstore(yrow + n0, f)
                            else:  # the last columns: lanes through this thread's scratch row
                                tail_f.vstore(dsl.thread_id() * V, f)
                                for cc in range(n - n0):
                                    y.flat[yrow + n0 + cc] = tail_f.flat[dsl.thread_id() * V + cc]
                        elif MODE == FLOAT_OUT:
                            if mult.shape[1] > 1:
                                f = dsl.f32(acc_v) * (ascale.flat[0] * mult.vload((tb if mult.shape[0] > 1 else 0)
                                                                                  * mult.shape[1] + n0, V))
                            else:
                                f = dsl.f32(acc_v) * (ascale.flat[0] * mult.flat[0])
                            if fbias.shape[1] > 1:
                                f = f + fbias.vload((tb if fbias.shape[0] > 1 else 0) * fbias.shape[1] + n0, V)
                            else:
                                f = f + fbias.flat[0]
                            if n0 + V <= n:
                                y.vstore(yrow + n0, f)
                            else:
                                tail_f.vstore(dsl.thread_id() * V, f)
                                for cc in range(n - n0):
                                    y.flat[yrow + n0 + cc] = tail_f.flat[dsl.thread_id() * V + cc]
                        else:
                            if n0 + V <= n:
                                y.vstore(yrow + n0, acc_v)
                            else:
                                tail_i.vstore(dsl.thread_id() * V, acc_v)
                                for cc in range(n - n0):
                                    y.flat[yrow + n0 + cc] = tail_i.flat[dsl.thread_id() * V + cc]


# --------------------------------------------------------------------------- host side

def _pack_b(b3: np.ndarray, bzp2: np.ndarray, tile: Int8Tile, backend) -> tuple:
    bb, kk, n = b3.shape
    np_cols = -(-n // tile.NR) * tile.NR
    bp = np.empty((bb, np_cols * -(-kk // 4)), np.int32)
    bu = np.empty((bb, np_cols), np.int32)
    bz = np.empty((bb, np_cols), np.int32)
    flip = 0x80 if b3.dtype == np.uint8 else 0
    pack_b_int8(np.ascontiguousarray(b3), np.ascontiguousarray(bzp2), bp, bu, bz, flip, NR=tile.NR, backend=backend)
    return bp, bu, bz, pairs_fit_i16(bp)


def packed_b(b3: np.ndarray, bzp2: np.ndarray, tile: Int8Tile, backend) -> tuple:
    """(bp, bu, bz, fits) of ``pack_b_int8`` (``fits``: ``pairs_fit_i16`` of bp): made once per
    constant B and zero point (kept while the array lives; the zero point's values are part of
    the key), at every call for any other."""
    if not packed_constants.immutable(b3):
        return _pack_b(b3, bzp2, tile, backend)
    key = ("gemm_int8 B",) + packed_constants.view_key(b3) + (bzp2.tobytes(), bzp2.shape, tile, backend)
    return packed_constants.once_per_array(b3, key, lambda: _pack_b(b3, bzp2, tile, backend))


def output_range(dtype, q_lo=None, q_hi=None) -> tuple:
    """(lo, hi) a requantized output is clamped to: ``dtype``'s range, narrowed by a fused
    Relu/Clip's ``q_lo``/``q_hi`` (None: not narrowed)."""
    info = np.iinfo(dtype)
    lo = float(info.min) if q_lo is None else max(float(info.min), float(q_lo))
    hi = float(info.max) if q_hi is None else min(float(info.max), float(q_hi))
    return lo, hi


def epilogue_args(y3: np.ndarray, mult, bias, q_lo, q_hi, per_row: bool, m: int, np_cols: int,
                  a_scale=None) -> tuple:
    """What an int8 GEMM's epilogue reads, shared by the dot4 and tile GEMMs: (mult, i32 bias,
    f32 bias) as ``_per_column`` vectors (per row when ``per_row``), A's scale (a one-element
    view, 1 if None), the epilogue's ``MODE`` (0: i32 sums, 1: requantized, ``FLOAT_OUT`` for an
    f32 ``y3``: f32(sum)·f32(a_scale·mult) + the f32 bias), and the output range narrowed by a
    fused Relu/Clip (lo, hi)."""
    to_float = y3.dtype == np.float32
    mode = FLOAT_OUT if to_float else int(mult is not None)
    lo, hi = output_range(y3.dtype, q_lo, q_hi) if mode == 1 else (0.0, 0.0)
    width = m if per_row else y3.shape[2]
    cols = m if per_row else np_cols
    return (_per_column(mult, width, cols, np.float32, 1.0),
            _per_column(None if to_float else bias, width, cols, np.int32, 0),
            _per_column(bias if to_float else None, width, cols, np.float32, 0.0),
            _ONE if a_scale is None else np.asarray(a_scale, np.float32).reshape(1), mode, lo, hi)


_ONE = np.ones(1, np.float32)  # A's scale where the epilogue does not read it


def _per_column(x: Optional[np.ndarray], n: int, np_cols: int, dtype, default) -> np.ndarray:
    """A per-tensor, per-column (or per-row) vector as the kernel reads it: (1, 1), or (1, np_cols)
    zero-padded past n."""
    if x is None:
        return np.full((1, 1), default, dtype)
    x = np.asarray(x, dtype).reshape(-1)
    if x.size == 1:
        return x.reshape(1, 1)
    out = np.zeros((1, np_cols), dtype)
    out[0, :n] = x
    return out


def qgemm_int8(a3: np.ndarray, b3: np.ndarray, y3: np.ndarray, a_zp=None, b_zp=None, mult=None,
               bias=None, y_zp: int = 0, q_lo=None, q_hi=None, backend=None, kernel=qgemm_packed,
               tile: Optional[Int8Tile] = None, per_row: bool = False, packed=None, saturating=None,
               a_scale=None) -> None:
    """y3 (batch, M, N) = a3 (batch, M, K) · b3 (1|batch, K, N) with zero points ``a_zp`` (scalar or
    per row, M), ``b_zp`` (scalar or per column, N); with ``mult`` (scalar or per column, f32)
    the sums (plus ``bias``, i32 per column) are requantized to y3's dtype around ``y_zp`` and
    clamped to [q_lo, q_hi] (default: the type's range); an f32 y3 receives f32(sum)·f32(a_scale·mult)
    + bias (f32, per column or per tensor; ``a_scale`` one value: MatMulIntegerToFloat); ``per_row``:
    mult and bias are per row
    (M) instead.  ``kernel`` is what to launch (a graph's recorder stands in for it); ``tile``
    overrides the target's; ``packed`` is B already packed as (bp, bu, bz) (ops/conv_int8.py);
    ``saturating``: run the products on ``dsl.dot4_sat`` (None: where it pays and B's bytes keep it
    exact; never on a ``packed`` B, an image; True forces it, for tests)."""
    backend = backend or "numba"
    tile = tile or int8_tile(backend)
    batch, m, kk = a3.shape
    if packed is None:
        zb = np.zeros(1, b3.dtype) if b_zp is None else np.asarray(b_zp, b3.dtype).reshape(-1)
        bp, bu, bz, fits = packed_b(b3, zb.reshape(1, -1), tile, backend)
    else:
        (bp, bu, bz), fits = packed, False
    sat = (fits and saturating_pairs_pay(backend)) if saturating is None else bool(saturating)
    za = np.zeros((1, 1), a3.dtype) if a_zp is None else np.asarray(a_zp, a3.dtype).reshape(1, -1)
    mp = -(-m // tile.MR) * tile.MR
    ap = np.empty((batch * mp, -(-kk // 4)), np.int32)
    rows = np.empty((batch * mp, 2), np.int32)
    mults, biases, fbiases, ascale, mode, lo, hi = epilogue_args(y3, mult, bias, q_lo, q_hi, per_row, m, bu.shape[1],
                                                                 a_scale)
    kernel(np.ascontiguousarray(a3), za, bp, bu, bz, mults, biases, fbiases, ascale, y3, ap, rows,
           0x80 if a3.dtype == np.int8 else 0, int(per_row), float(y_zp), lo, hi, MODE=mode, V=tile.V, MR=tile.MR,
           SAT=int(sat), backend=backend)
