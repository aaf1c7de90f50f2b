"""ONNX DeformConv (opset 19+, 2-D): a convolution whose every kernel tap reads the image at
its regular position plus a learned (dh, dw) offset, bilinearly interpolated (zero outside
the image), optionally scaled by a mask, with groups and offset groups.

Offsets are (N, offset_group·kH·kW·2, oH, oW) laid out as (offset_group, kH, kW, (dh, dw));
the mask is (N, offset_group·kH·kW, oH, oW).  One output element per step, accumulated in
f64 so every float dtype shares the arithmetic.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

import dsl
from dsl import In, Out, bool_, f64, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS, require_dtype

T = dsl.TypeVar("T")


@dsl.kernel
def deform_conv_kernel(x: In[T, 4], w: In[T, 4], offset: In[T, 4], bias: In[T, 1], mask: In[T, 4], y: Out[T, 4],
                       group: i64, offset_group: i64, stride_h: i64, stride_w: i64, dil_h: i64, dil_w: i64,
                       pad_t: i64, pad_l: i64, has_bias: bool_, has_mask: bool_):
    """y[n, m, i, j] = bias[m] + Σ_{c, kh, kw} w[m, c, kh, kw] · mask · x̃[n, g·C/G + c](p + offset)."""
    m_out = y.shape[1]
    oh_n = y.shape[2]
    ow_n = y.shape[3]
    c_in = x.shape[1]
    ih_n = x.shape[2]
    iw_n = x.shape[3]
    cg = w.shape[1]
    kh_n = w.shape[2]
    kw_n = w.shape[3]
    mg = m_out // group
    c_per_og = c_in // offset_group
    lo, hi = dsl.split(y.size)
    for idx in range(lo, hi):
        j = idx % ow_n
        i = (idx // ow_n) % oh_n
        m = (idx // (ow_n * oh_n)) % m_out
        n = idx // (ow_n * oh_n * m_out)
        g = m // mg
        acc = f64(bias[m]) if has_bias else f64(0)
        for c in range(cg):
            ci = g * cg + c
            og = ci // c_per_og
            base = (n * c_in + ci) * ih_n * iw_n
            for kh in range(kh_n):
                for kw in range(kw_n):
                    tap = (og * kh_n + kh) * kw_n + kw
                    ph = f64(i * stride_h - pad_t + kh * dil_h) + f64(offset[n, 2 * tap, i, j])
                    pw = f64(j * stride_w - pad_l + kw * dil_w) + f64(offset[n, 2 * tap + 1, i, j])
                    h0 = i64(dsl.floor(ph))
                    w0 = i64(dsl.floor(pw))
                    th = ph - f64(h0)
                    tw = pw - f64(w0)
                    v = f64(0)
                    for dh in range(2):
                        hh = h0 + dh
                        if hh >= 0 and hh < ih_n:
                            wh = th if dh == 1 else 1 - th
                            for dw in range(2):
                                ww = w0 + dw
                                if ww >= 0 and ww < iw_n:
                                    wt = tw if dw == 1 else 1 - tw
                                    v += wh * wt * f64(x.flat[base + hh * iw_n + ww])
                    if has_mask:
                        v = v * f64(mask[n, tap, i, j])
                    acc += f64(w[m, c, kh, kw]) * v
        y[n, m, i, j] = acc


@dsl.op("DeformConv", since=19)
class DeformConv(dsl.Op):
    """X (N, C, H, W), W (M, C/group, kH, kW), offset, optional B (M,) and mask -> (N, M, oH, oW)."""
    dilations: Tuple[int, ...] = ()
    group: int = 1
    kernel_shape: Tuple[int, ...] = ()
    offset_group: int = 1
    pads: Tuple[int, ...] = ()
    strides: Tuple[int, ...] = ()
    kernels = {"default": deform_conv_kernel}

    def _geometry(self, w):
        k = tuple(self.kernel_shape) or tuple(w.shape[2:])
        d = tuple(self.dilations) or (1, 1)
        s = tuple(self.strides) or (1, 1)
        p = tuple(self.pads) or (0, 0, 0, 0)
        return k, d, s, p

    def _out(self, x, w):
        k, d, s, p = self._geometry(w)
        dims = []
        for a in range(2):
            size = x.shape[2 + a]
            if size is None or k[a] is None:
                dims.append(None)
            else:
                dims.append((size + p[a] + p[a + 2] - ((k[a] - 1) * d[a] + 1)) // s[a] + 1)
        return tuple(dims)

    def verify(self, x, w, offset, b=None, mask=None):
        require_dtype("DeformConv", x, FLOATS, "X")
        for name, t in (("W", w), ("offset", offset), ("B", b), ("mask", mask)):
            if t is not None and t.dtype != x.dtype:
                raise VerifyError(f"DeformConv {name} must have X's dtype {x.dtype}, got {t}")
        if x.ndim != 4 or w.ndim != 4:
            raise VerifyError(f"DeformConv supports 2-D images only: X (N, C, H, W) and W (M, C/group, kH, kW), "
                              f"got X {x} and W {w}")
        k, d, s, p = self._geometry(w)
        for name, v, n in (("kernel_shape", k, 2), ("dilations", d, 2), ("strides", s, 2), ("pads", p, 4)):
            if len(v) != n or any(e is not None and (e < 0 or (e == 0 and name != "pads")) for e in v):
                raise VerifyError(f"DeformConv {name} must be {n} {'non-negative' if name == 'pads' else 'positive'} "
                                  f"ints for a 2-D image, got {list(v)}")
        if tuple(self.kernel_shape) and None not in w.shape[2:] and tuple(self.kernel_shape) != tuple(w.shape[2:]):
            raise VerifyError(f"DeformConv kernel_shape {list(self.kernel_shape)} differs from W's {w.shape[2:]}")
        g, og = self.group, self.offset_group
        if g < 1 or og < 1:
            raise VerifyError(f"DeformConv group and offset_group must be >= 1, got {g} and {og}")
        c = x.shape[1]
        if c is not None and w.shape[1] is not None and c != w.shape[1] * g:
            raise VerifyError(f"DeformConv X has {c} channels but W {w} with group={g} needs {w.shape[1] * g}")
        if w.shape[0] is not None and w.shape[0] % g:
            raise VerifyError(f"DeformConv W's {w.shape[0]} output channels are not divisible by group={g}")
        if c is not None and c % og:
            raise VerifyError(f"DeformConv X's {c} channels are not divisible by offset_group={og}")
        taps = og * k[0] * k[1]
        out = self._out(x, w)
        want = (x.shape[0], 2 * taps) + out
        if offset.ndim != 4 or any(a is not None and e is not None and a != e for a, e in zip(offset.shape, want)):
            raise VerifyError(f"DeformConv offset must be (N, offset_group·kH·kW·2, oH, oW) = {want}, got {offset}")
        if mask is not None and (mask.ndim != 4 or any(a is not None and e is not None and a != e
                                                       for a, e in zip(mask.shape, (want[0], taps) + out))):
            raise VerifyError(f"DeformConv mask must be (N, offset_group·kH·kW, oH, oW) = {(want[0], taps) + out}, "
                              f"got {mask}")
        if b is not None and (b.ndim != 1 or None not in (b.shape[0], w.shape[0]) and b.shape[0] != w.shape[0]):
            raise VerifyError(f"DeformConv B must be (M,) = ({w.shape[0]},), got {b}")

    def infer(self, x, w, offset, b=None, mask=None):
        return TensorSpec((x.shape[0], w.shape[0]) + self._out(x, w), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, w, offset = inputs[:3]
        b = inputs[3] if len(inputs) > 3 else None
        mask = inputs[4] if len(inputs) > 4 else None
        _, d, s, p = self._geometry(w)
        one = np.zeros((1,), x.dtype)
        impl(x, w, offset, one if b is None else b, one.reshape(1, 1, 1, 1) if mask is None else mask, outputs[0],
             group=self.group, offset_group=self.offset_group, stride_h=s[0], stride_w=s[1], dil_h=d[0], dil_w=d[1],
             pad_t=p[0], pad_l=p[1], has_bias=b is not None, has_mask=mask is not None, backend=backend)
