"""Strided int8 convolutions (ResNet's 3×3/2 and 7×7/2 stem, squeezenet's 3×3/2 stem) on the
direct kernel (ops/conv_int8_direct.py) through a space-to-depth rewrite, instead of the im2col
GEMM.

With kh = s·a + p and kw = s·b + q (0 ≤ p, q < s), a stride-s convolution is

    y[m, oh, ow] = Σ x'[(c, p, q), oh + a, ow + b] · w'[m, (c, p, q), a, b]

a stride-1, unpadded convolution with C·s² channels and a ceil(k/s)² kernel of

    x'[n, (c·s + p)·s + q, i, j] = x[n, c, s·i + p - pad_top, s·j + q - pad_left]   (zero point outside)
    w'[m, (c·s + p)·s + q, a, b] = w[m, c, s·a + p, s·b + q]   (the weights' zero point past k)

so the direct kernel reads x' in place as it reads any image.  A tap past the kernel holds the
weights' zero point, so it adds nothing.  ``space_to_depth`` writes x' (one pass over the
image, its size: ``taps_to_channels_int8`` with an s × s window of stride s, whose taps are the
(p, q) phases); w' is made once per constant weight array.  The products grow by
(s·ceil(k/s) / k)² (16/9 for 3×3/2, 64/49 for 7×7/2), which the direct kernel's speed over the
im2col packing repays when the image has few channels (ops/conv_int8.py STRIDED_MAX_CHANNELS).
"""
from __future__ import annotations

import numpy as np

import dsl
from dsl import In, Out, i64
from ops import packed_constants
from ops.conv_int8_direct import MAX_TAPS, conv_int8_direct, launched
from ops.gemm_int8 import THREADS

X = dsl.TypeVar("X")
TAPS_GAIN = 1.5  # products saved that repay the taps image's extra bytes (see choose_layout)


@dsl.kernel(threads=THREADS)
def taps_to_channels_int8(x: In[X, 4], x_zp: In[X, 1], xt: Out[X, 4], geom: dsl.Vec[i64, 5]):
    """xt (N, C·KH·KW, OH, OW)[n, (c·KH + i)·KW + j, oh, ow] = x[n, c, s·oh + i - pt, s·ow + j - pl],
    the zero point where that is outside x; geom = (KH, KW, s, pt, pl): every window tap a
    channel, so the convolution is a 1×1 one on xt."""
    cn = x.shape[1]
    hh = x.shape[2]
    ww = x.shape[3]
    ct = xt.shape[1]
    oh_n = xt.shape[2]
    ow_n = xt.shape[3]
    kh_n = geom[0]
    kw_n = geom[1]
    s = geom[2]
    pt = geom[3]
    pl = geom[4]
    z = x_zp.flat[0]
    lo, hi = dsl.split(xt.shape[0] * ct * oh_n, grid=True)
    for row in range(lo, hi):
        oh = row % oh_n
        r = row // oh_n
        ch = r % ct
        n = r // ct
        c = ch // (kh_n * kw_n)
        i = (ch // kw_n) % kh_n
        j = ch % kw_n
        ih = s * oh + i - pt
        dst = row * ow_n
        if ih < 0 or ih >= hh:
            for ow in range(ow_n):
                xt.flat[dst + ow] = z
        else:
            src = ((n * cn + c) * hh + ih) * ww + j - pl
            # columns whose tap is inside the row: [a, b); the zero point on either side
            a = min(ow_n, max(0, (pl - j + s - 1) // s))
            b = max(a, min(ow_n, (ww - 1 - j + pl) // s + 1))
            for ow in range(a):
                xt.flat[dst + ow] = z
            for ow in range(a, b):
                xt.flat[dst + ow] = x.flat[src + s * ow]
            for ow in range(b, ow_n):
                xt.flat[dst + ow] = z


def space_to_depth(x, xz, xs, s: int, pt: int, pl: int, backend, launch=None) -> None:
    """xs (N, C·s·s, Hs, Ws)[n, (c·s + p)·s + q, i, j] = x[n, c, s·i + p - pt, s·j + q - pl], the
    zero point xz where that is outside x: ``taps_to_channels_int8`` of an s × s window, stride s."""
    launched(taps_to_channels_int8, launch)(np.ascontiguousarray(x), xz, xs, np.asarray([s, s, s, pt, pl], np.int64),
                                            backend=backend)


def strided_geometry_ok(geom) -> bool:
    """A strided convolution (equal strides 2 to 4) without dilation, whose space-to-depth kernel
    has at most MAX_TAPS taps (ops/conv_int8_direct.py) (geom as pack_im2col_int8's:
    KH, KW, strides, pads begin, dilations, OH, OW)."""
    kh, kw, sh, sw, _, _, dh, dw = (int(g) for g in geom[:8])
    return (dh == 1 and dw == 1 and sh == sw and 2 <= sh <= 4 and kh > 1 and kw > 1
            and -(-kh // sh) * -(-kw // sh) <= MAX_TAPS)


def _depth_weights(w: np.ndarray, w_zp, s: int) -> np.ndarray:
    m, c, kh, kw = w.shape
    ka, kb = -(-kh // s), -(-kw // s)
    zw = np.zeros(1, w.dtype) if w_zp is None else np.asarray(w_zp, w.dtype).reshape(-1)
    full = np.empty((m, c, ka * s, kb * s), w.dtype)
    full[...] = zw.reshape(-1, 1, 1, 1) if zw.size > 1 else zw[0]
    full[:, :, :kh, :kw] = w
    out = full.reshape(m, c, ka, s, kb, s).transpose(0, 1, 3, 5, 2, 4).reshape(m, c * s * s, ka, kb).copy()
    out.flags.writeable = False  # a constant: the direct kernel packs it once
    return out


def depth_weights(w: np.ndarray, w_zp, s: int) -> np.ndarray:
    """w' (M, C·s·s, ceil(KH/s), ceil(KW/s)) of the module docstring: made once per constant array."""
    if not packed_constants.immutable(w):
        return _depth_weights(w, w_zp, s)
    zkey = None if w_zp is None else tuple(np.asarray(w_zp).reshape(-1).tolist())
    key = ("conv_int8_strided W", s, zkey) + packed_constants.view_key(w)
    return packed_constants.once_per_array(w, key, lambda: _depth_weights(w, w_zp, s))


LAYOUTS = ("depth", "taps")


def choose_layout(c: int, kh: int, kw: int, s: int) -> str:
    """"taps" (every window tap a channel: C·KH·KW products per output, rounded up to 4) where it
    multiplies fewer than space-to-depth's C·s²·ceil(KH/s)·ceil(KW/s) by TAPS_GAIN, else "depth":
    the taps image is KH·KW/s² times the input, space-to-depth's its size."""
    taps = -(-c * kh * kw // 4) * 4
    depth = -(-c * s * s // 4) * 4 * -(-kh // s) * -(-kw // s)
    return "taps" if taps * TAPS_GAIN <= depth else "depth"


def _tap_weights(w: np.ndarray) -> np.ndarray:
    out = np.ascontiguousarray(w).reshape(w.shape[0], -1, 1, 1).copy()
    out.flags.writeable = False  # a constant: the direct kernel packs it once
    return out


def tap_weights(w: np.ndarray) -> np.ndarray:
    """w (M, C, KH, KW) as the 1×1 weights (M, C·KH·KW, 1, 1) of ``taps_to_channels_int8``'s
    image: made once per constant array."""
    if not packed_constants.immutable(w):
        return _tap_weights(w)
    return packed_constants.once_per_array(w, ("conv_int8_strided taps",) + packed_constants.view_key(w),
                                           lambda: _tap_weights(w))


def conv_int8_strided(x, w, y, x_zp, w_zp, geom, mult=None, bias=None, y_zp=0, q_lo=None, q_hi=None,
                      backend=None, launch=None, post=None, arithmetic="exact", layout=None) -> None:
    """conv_int8_direct's contract for a strided convolution (``strided_geometry_ok``): x
    rearranged by ``space_to_depth`` (``layout="depth"``) or ``taps_to_channels_int8``
    (``"taps"``; None: ``choose_layout``), then the direct kernel's stride-1 unpadded convolution
    (``post``: its second requantization, ``arithmetic``: "exact" or "saturating", as
    conv_int8_direct takes them)."""
    if not strided_geometry_ok(geom):
        raise ValueError(f"conv_int8_strided takes equal strides 2 to 4 with a kernel wider than 1 and no dilation "
                         f"(geom KH, KW, strides, pads, dilations = {list(geom[:8])}): use ops.conv_int8.conv_int8")
    backend = backend or "numba"
    kh, kw, s, _, pt, pl = (int(g) for g in geom[:6])
    oh, ow = y.shape[2:]
    layout = layout or choose_layout(x.shape[1], kh, kw, s)
    if layout not in LAYOUTS:
        raise ValueError(f"conv_int8_strided: layout={layout!r} is not one of {', '.join(LAYOUTS)} (or None: "
                         f"``choose_layout``)")
    if layout == "taps":
        xt = np.empty((x.shape[0], x.shape[1] * kh * kw, oh, ow), x.dtype)
        xz = np.zeros(1, x.dtype) if x_zp is None else np.asarray(x_zp, x.dtype).reshape(1)
        launched(taps_to_channels_int8, launch)(np.ascontiguousarray(x), xz, xt,
                                                np.asarray([kh, kw, s, pt, pl], np.int64), backend=backend)
        conv_int8_direct(xt, tap_weights(w), y, xz, [1, 1, 1, 1, 0, 0, 1, 1, oh, ow], mult, bias, y_zp, q_lo, q_hi,
                         backend=backend, w_zp=w_zp, launch=launch, post=post, arithmetic=arithmetic)
        return
    wd = depth_weights(w, w_zp, s)
    ka, kb = wd.shape[2:]
    xs = np.empty((x.shape[0], x.shape[1] * s * s, oh + ka - 1, ow + kb - 1), x.dtype)
    xz = np.zeros(1, x.dtype) if x_zp is None else np.asarray(x_zp, x.dtype).reshape(1)
    space_to_depth(x, xz, xs, s, pt, pl, backend, launch)
    conv_int8_direct(xs, wd, y, xz, [ka, kb, 1, 1, 0, 0, 1, 1, oh, ow], mult, bias, y_zp, q_lo, q_hi,
                     backend=backend, w_zp=w_zp, launch=launch, post=post, arithmetic=arithmetic)
