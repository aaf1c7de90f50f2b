"""ConvTranspose (ONNX, 1-D to 3-D images): strides, pads, dilations, group, output_padding,
output_shape, auto_pad.

The transpose of a convolution scatters each input element over a window of the output;
``conv_transpose_kernel`` computes it as a gather instead, so that every output element is
written once by one thread and no atomics are needed: output position o along an axis
receives input i through tap k exactly when o + pad_begin - k·dilation = i·stride.  The
kernel works on (N, C, D, H, W) views (1-D and 2-D images get leading axes of size 1) and
sums in f32 (f64 for f64 data).
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

import dsl
from dsl import In, Out, i64, f16, bf16, f32, f64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import require_dtype, same_dtype
from ops.matmul import grid_for
from ops.nn import ConvAttributes

T = dsl.TypeVar("T")
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dsl.kernel
def conv_transpose_kernel(x: In[T, 5], w: In[T, 5], bias: In[T, 1], y: Out[T, 5], group: i64,
                          s: dsl.Vec[i64, 3], d: dsl.Vec[i64, 3], pb: dsl.Vec[i64, 3], st: dsl.Vec[i64, 3]):
    """y[n, m, o] = bias[m] + Σ x[n, g·C/G + c, i] · w[g·C/G + c, m mod M/G, k] over the channels c
    of m's group g and the taps k with o + pb - k·d = i·s (per spatial axis)."""
    c_in = x.shape[1]
    id_n = x.shape[2]
    ih_n = x.shape[3]
    iw_n = x.shape[4]
    m_out = y.shape[1]
    od_n = y.shape[2]
    oh_n = y.shape[3]
    ow_n = y.shape[4]
    mg = w.shape[1]
    kd_n = w.shape[2]
    kh_n = w.shape[3]
    kw_n = w.shape[4]
    cg = c_in // group
    taps = kd_n * kh_n * kw_n
    lo, hi = dsl.split(y.size, grid=True)
    for e in range(lo, hi):
        ow = e % ow_n
        r = e // ow_n
        oh = r % oh_n
        r = r // oh_n
        od = r % od_n
        r = r // od_n
        m = r % m_out
        nb = r // m_out
        c0 = (m // mg) * cg
        acc = 0.0
        # per axis the taps k with 0 <= t - k·d < in·s, t = o + pb, stepping through those
        # with (t - k·d) divisible by s: the first found by a scan, then every st-th
        td = od + pb[0]
        kd_lo = max(0, (td - (id_n - 1) * s[0] + d[0] - 1) // d[0])
        kd_hi = min(kd_n, td // d[0] + 1)
        while kd_lo < kd_hi and (td - kd_lo * d[0]) % s[0] != 0:
            kd_lo += 1
        th = oh + pb[1]
        kh_lo = max(0, (th - (ih_n - 1) * s[1] + d[1] - 1) // d[1])
        kh_hi = min(kh_n, th // d[1] + 1)
        while kh_lo < kh_hi and (th - kh_lo * d[1]) % s[1] != 0:
            kh_lo += 1
        tw = ow + pb[2]
        kw_lo = max(0, (tw - (iw_n - 1) * s[2] + d[2] - 1) // d[2])
        kw_hi = min(kw_n, tw // d[2] + 1)
        while kw_lo < kw_hi and (tw - kw_lo * d[2]) % s[2] != 0:
            kw_lo += 1
        for kd in range(kd_lo, kd_hi, st[0]):
            for kh in range(kh_lo, kh_hi, st[1]):
                for kw in range(kw_lo, kw_hi, st[2]):
                    px = (((nb * c_in + c0) * id_n + (td - kd * d[0]) // s[0]) * ih_n
                          + (th - kh * d[1]) // s[1]) * iw_n + (tw - kw * d[2]) // s[2]
                    pw = (c0 * mg + m % mg) * taps + (kd * kh_n + kh) * kw_n + kw
                    for c in range(cg):
                        acc += x.flat[px + c * id_n * ih_n * iw_n] * w.flat[pw + c * mg * taps]
        y.flat[e] = acc + bias.flat[m]


def transpose_geometry(in_sp, k, strides, dil, pads, out_pad, output_shape, auto_pad: str):
    """(output dims, begin pads) per spatial axis, ONNX rules; None dims stay None."""
    rank = len(k)
    out, begin = [], []
    for a in range(rank):
        i, s, span, op = in_sp[a], strides[a], (k[a] - 1) * dil[a] + 1, out_pad[a]
        full = None if i is None else s * (i - 1) + op + span  # output size without padding
        if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = output_shape[a] if output_shape is not None else (None if i is None else i * s)
            if o is None or full is None:
                out.append(o)
                begin.append(None)
                continue
            total = full - o
            begin.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
            out.append(o)
            continue
        pb, pe = (0, 0) if auto_pad == "VALID" else (pads[a], pads[a + rank])
        begin.append(pb)
        if full is None:
            out.append(None)
            continue
        if full - pb - pe < 0:
            raise VerifyError(f"ConvTranspose pads ({pb}, {pe}) remove more than the {full} output elements "
                              f"along spatial axis {a}")
        out.append(full - pb - pe)
    return tuple(out), tuple(begin)


@dsl.op("ConvTranspose", since=1, until=21)
class ConvTransposeV1(ConvAttributes):
    """ONNX ConvTranspose: X (N, C, spatial...), W (C, M/group, kernel...), B (M,) -> (N, M, spatial...)."""

    output_padding: Optional[Tuple[int, ...]] = None
    output_shape: Optional[Tuple[int, ...]] = None
    kernels = {"default": conv_transpose_kernel}
    DTYPES = (f16, f32, f64)

    def _attrs(self, w):
        rank = w.ndim - 2
        k, strides, dil, pads = super()._attrs(w)
        out_pad = tuple(self.output_padding) if self.output_padding else (0,) * rank
        shape = None
        if self.output_shape:  # some exporters include the N and C dims
            shape = tuple(self.output_shape)[-rank:] if len(self.output_shape) == rank + 2 else tuple(self.output_shape)
        return k, strides, dil, pads, out_pad, shape

    def verify(self, x, w, b=None):
        same_dtype("ConvTranspose", x, w, b)
        require_dtype("ConvTranspose", x, self.DTYPES)
        if x.ndim not in (3, 4, 5):
            raise VerifyError(f"ConvTranspose supports 1-D to 3-D images: input must be (N, C, W), (N, C, H, W) "
                              f"or (N, C, D, H, W), got {x}")
        if w.ndim != x.ndim:
            raise VerifyError(f"ConvTranspose weights {w} must have the input's rank {x.ndim} (C, M/group, kernel...)")
        rank = x.ndim - 2
        k, strides, dil, pads, out_pad, shape = self._attrs(w)
        for name, v, n in (("kernel_shape", k, rank), ("strides", strides, rank), ("dilations", dil, rank),
                           ("pads", pads, 2 * rank), ("output_padding", out_pad, rank),
                           ("output_shape", shape or (0,) * rank, rank)):
            if len(v) != n:
                raise VerifyError(f"ConvTranspose {name} {list(v)} needs {n} values for a {rank}-D input {x}")
        if any(v is not None and v < 1 for v in strides + dil):
            raise VerifyError(f"ConvTranspose strides {list(strides)} and dilations {list(dil)} must be >= 1")
        if any(v < 0 for v in pads + out_pad):
            raise VerifyError(f"ConvTranspose pads {list(pads)} and output_padding {list(out_pad)} must be >= 0")
        if self.auto_pad not in AUTO_PADS:
            raise VerifyError(f"ConvTranspose auto_pad {self.auto_pad!r}; accepted: {', '.join(AUTO_PADS)}")
        if self.group < 1:
            raise VerifyError(f"ConvTranspose group must be >= 1, got {self.group}")
        if self.kernel_shape and any(a is not None and a != c for a, c in zip(w.shape[2:], k)):
            raise VerifyError(f"ConvTranspose kernel_shape {list(k)} disagrees with weights {w}")
        c = x.shape[1]
        if c is not None and w.shape[0] is not None and c != w.shape[0]:
            raise VerifyError(f"ConvTranspose input has {c} channels but weights {w} expect {w.shape[0]} "
                              f"(weights are (C, M/group, kernel...))")
        if c is not None and c % self.group:
            raise VerifyError(f"ConvTranspose input channels {c} are not divisible by group={self.group}")
        m = None if w.shape[1] is None else w.shape[1] * self.group
        if b is not None and (b.ndim != 1 or (b.shape[0] is not None and m is not None and b.shape[0] != m)):
            raise VerifyError(f"ConvTranspose bias must have shape (M,) = ({m},), got {b}")
        transpose_geometry(x.shape[2:], k, strides, dil, pads, out_pad, shape, self.auto_pad)

    def infer(self, x, w, b=None):
        k, strides, dil, pads, out_pad, shape = self._attrs(w)
        out, _ = transpose_geometry(x.shape[2:], k, strides, dil, pads, out_pad, shape, self.auto_pad)
        m = None if w.shape[1] is None else w.shape[1] * self.group
        return TensorSpec((x.shape[0], m) + out, x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, w = inputs[0], inputs[1]
        y = outputs[0]
        b = inputs[2] if len(inputs) > 2 and inputs[2] is not None else np.zeros(y.shape[1], y.dtype)
        spec = TensorSpec(w.shape, dsl.lang.types.from_numpy(w.dtype))
        k, strides, dil, pads, out_pad, shape = self._attrs(spec)
        _, begin = transpose_geometry(x.shape[2:], k, strides, dil, pads, out_pad, shape, self.auto_pad)
        lead = 5 - x.ndim  # leading spatial axes of size 1
        view = lambda t: t.reshape(t.shape[:2] + (1,) * lead + t.shape[2:])  # noqa: E731
        pad3 = lambda v, fill: (fill,) * lead + tuple(v)  # noqa: E731
        grid = grid_for(y.size * x.shape[1] // self.group * int(np.prod(w.shape[2:])))
        steps = tuple(sv // math.gcd(sv, dv) for sv, dv in zip(strides, dil))  # taps between matches
        impl(view(x), view(w), b, view(y), self.group, pad3(strides, 1), pad3(dil, 1), pad3(begin, 0),
             pad3(steps, 1), backend=backend, grid=grid)


@dsl.op("ConvTranspose", since=22)
class ConvTranspose(ConvTransposeV1):
    """ConvTranspose of bf16 too (opset 22+)."""
    DTYPES = (f16, bf16, f32, f64)
