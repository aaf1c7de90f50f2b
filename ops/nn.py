"""Convolution (ONNX Conv, 1-D, 2-D and 3-D): pads, strides, dilations, group, auto_pad.

Two kernels, one per data format (PPL.NN): ``conv_nchw`` on plain tensors and
``conv_nchwc16`` on channel-blocked ones (N, C/16, H, W, 16), chosen by the graph
compiler through ``Conv.select_format``; weights and bias stay plain.  Every thread
of a grid of teams sized to the job takes a contiguous share of output rows and
accumulates a row in its own line of a workspace (f32, or f64 for f64 data, so
f16/bf16 sums are not rounded at every step).  Window bounds are clipped to the
image once per row and weight, so the inner loops carry no padding tests.
``conv_nchw`` works on (N, C, D, H, W): 2-D images run with D = 1 and 1-D ones with
D = H = 1; the blocked kernel and the GEMM path (ops/gemm_packed.py) take 1-D and 2-D
images only, so a 3-D convolution always runs ``conv_nchw``.  One-group f32 1-D/2-D
convolutions run the SIMD register-tile kernel of ops/conv_direct.py instead (``select``:
"direct"), except unpadded 1×1 ones: 2-D ones run ops/conv_pointwise.py ("pointwise", which
also turns a CNN's tensors NCHWc16, see ``select_format``), 1-D ones on numba are GEMMs; plain
images of few channels run ops/conv_stem.py's pixel-vector kernel ("stem": a CNN's first layer;
``stem_supported``), and 3×3 stride-1 ones on NCHWc16 images on numba Winograd F(2×2, 3×3)
(ops/conv_winograd.py, "winograd": ``winograd_chosen``).

Both kernels end in an *epilogue* applied while storing: an optional residual tensor
added (``add_res``) and an activation (``conv_epilogue``: none, Relu, Clip, LeakyRelu).
A plain Conv passes "none"; the graph rewrites of ops/conv_fusion.py make a FusedConv
that uses it, so a following Add and Relu cost no extra pass over memory.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

import dsl
from dsl import In, InOut, Out, bool_, i32, i64, f16, bf16, f32, f64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.conv_direct import conv_direct, direct_supported, launch_conv_direct
from ops.conv_winograd import conv_winograd, launch_conv_winograd, winograd_chosen
from ops.conv_stem import conv_stem, launch_conv_stem, stem_supported
from ops.conv_pointwise import conv_pointwise, launch_conv_pointwise, pointwise_supported
from ops.elementwise import require_dtype, same_dtype
from ops.gemm_packed import ACT_NONE, PACKED_TYPES, gemm_packed, packed_gemm
from ops.gemm_packed import activation as conv_epilogue
from ops.matmul import grid_for

T = dsl.TypeVar("T")
A = dsl.TypeVar("A")  # accumulator: f32 for f16/bf16/f32 data, f64 for f64
CONV_TYPES = (f16, bf16, f32, f64)
BLOCK = 16
GEMM_GROUP_CHANNELS = 16  # input channels per group from which grouped convs run as GEMMs

@dsl.kernel
def conv_nchw(x: In[T, 5], w: In[T, 5], bias: In[T, 1], res: In[T, 5], y: Out[T, 5], acc: InOut[A, 2],
              group: i64, stride_d: i64, stride_h: i64, stride_w: i64, dil_d: i64, dil_h: i64, dil_w: i64,
              pad_f: i64, pad_t: i64, pad_l: i64, add_res: bool_, act: i32, act_lo: A, act_hi: A):
    """y[n, m, od, oh, ow] = bias[m] + Σ x[n, g·C/G + c, od·s - p + kd·d, ...] · w[m, c, kd, kh, kw],
    then + res[n, m, od, oh, ow] when ``add_res``, then ``conv_epilogue(act, act_lo, act_hi)``.

    One work item is an output row (n, m, od, oh): per weight, the inner loop runs along the
    row (contiguous for stride 1), accumulating in this worker's row of ``acc``.  2-D
    images come as D = 1."""
    m_out = y.shape[1]
    od_n = y.shape[2]
    oh_n = y.shape[3]
    ow_n = y.shape[4]
    c_in = x.shape[1]
    id_n = x.shape[2]
    ih_n = x.shape[3]
    iw_n = x.shape[4]
    cg = w.shape[1]
    kd_n = w.shape[2]
    kh_n = w.shape[3]
    kw_n = w.shape[4]
    mg = m_out // group
    rows = y.shape[0] * m_out * od_n * oh_n
    worker = dsl.tile_id() * dsl.num_threads() + dsl.thread_id()  # acc has a row per worker
    lo, hi = dsl.split(rows, grid=True)
    pacc = worker * acc.shape[1]
    for row in range(lo, hi):
        oh = row % oh_n
        r = row // oh_n
        od = r % od_n
        r = r // od_n
        m = r % m_out
        nb = r // m_out
        for ow in range(ow_n):
            acc.flat[pacc + ow] = 0
        id0 = od * stride_d - pad_f
        kd_lo = 0 if id0 >= 0 else (dil_d - 1 - id0) // dil_d  # window planes inside the image
        kd_hi = min(kd_n, (id_n - id0 + dil_d - 1) // dil_d)
        ih0 = oh * stride_h - pad_t
        kh_lo = 0 if ih0 >= 0 else (dil_h - 1 - ih0) // dil_h  # window rows inside the image
        kh_hi = min(kh_n, (ih_n - ih0 + dil_h - 1) // dil_h)
        xc = nb * c_in + (m // mg) * cg
        for c in range(cg):
            for kd in range(kd_lo, kd_hi):
                for kh in range(kh_lo, kh_hi):
                    px = (((xc + c) * id_n + id0 + kd * dil_d) * ih_n + ih0 + kh * dil_h) * iw_n
                    pw = (((m * cg + c) * kd_n + kd) * kh_n + kh) * kw_n
                    for kw in range(kw_n):
                        wv = w.flat[pw + kw]
                        off = kw * dil_w - pad_l
                        ow_lo = 0 if off >= 0 else (stride_w - 1 - off) // stride_w  # columns inside
                        ow_hi = min(ow_n, (iw_n - off + stride_w - 1) // stride_w)
                        for ow in range(ow_lo, ow_hi):
                            acc.flat[pacc + ow] += wv * x.flat[px + ow * stride_w + off]
        bv = bias.flat[m]
        py = row * ow_n
        for ow in range(ow_n):
            v = acc.flat[pacc + ow] + bv
            if add_res:
                v += res.flat[py + ow]
            y.flat[py + ow] = conv_epilogue(v, act, act_lo, act_hi)


@dsl.kernel
def conv_nchwc16(x: In[T, 5], w: In[T, 4], bias: In[T, 1], res: In[T, 5], y: Out[T, 5], acc: InOut[A, 2],
                 group: i64, stride_h: i64, stride_w: i64, dil_h: i64, dil_w: i64, pad_t: i64, pad_l: i64,
                 add_res: bool_, act: i32, act_lo: A, act_hi: A):
    """conv_nchw on channel-blocked tensors (``res`` blocked too); a work item is a row of
    16 channels (n, m // 16, oh) and padding output channels are written as 0."""
    m_out = w.shape[0]
    c_blocks = x.shape[1]
    m_blocks = y.shape[1]
    oh_n = y.shape[2]
    ow_n = y.shape[3]
    ih_n = x.shape[2]
    iw_n = x.shape[3]
    cg = w.shape[1]
    kh_n = w.shape[2]
    kw_n = w.shape[3]
    mg = m_out // group
    rows = y.shape[0] * m_blocks * oh_n
    worker = dsl.tile_id() * dsl.num_threads() + dsl.thread_id()  # acc has a row per worker
    lo, hi = dsl.split(rows, grid=True)
    pacc = worker * acc.shape[1]
    for row in range(lo, hi):
        oh = row % oh_n
        r = row // oh_n
        mb = r % m_blocks
        nb = r // m_blocks
        for j in range(ow_n * BLOCK):
            acc.flat[pacc + j] = 0
        ih0 = oh * stride_h - pad_t
        kh_lo = 0 if ih0 >= 0 else (dil_h - 1 - ih0) // dil_h
        kh_hi = min(kh_n, (ih_n - ih0 + dil_h - 1) // dil_h)
        for lane in range(min(BLOCK, m_out - mb * BLOCK)):
            m = mb * BLOCK + lane
            c0 = (m // mg) * cg
            for c in range(cg):
                ci = c0 + c
                plane = (nb * c_blocks + ci // BLOCK) * ih_n
                for kh in range(kh_lo, kh_hi):
                    px = (plane + ih0 + kh * dil_h) * iw_n * BLOCK + ci % BLOCK
                    pw = ((m * cg + c) * kh_n + kh) * kw_n
                    for kw in range(kw_n):
                        wv = w.flat[pw + kw]
                        off = kw * dil_w - pad_l
                        ow_lo = 0 if off >= 0 else (stride_w - 1 - off) // stride_w
                        ow_hi = min(ow_n, (iw_n - off + stride_w - 1) // stride_w)
                        for ow in range(ow_lo, ow_hi):
                            acc.flat[pacc + ow * BLOCK + lane] += wv * x.flat[px + (ow * stride_w + off) * BLOCK]
        py = row * ow_n * BLOCK
        for j in range(ow_n * BLOCK):
            m = mb * BLOCK + j % BLOCK
            if m < m_out:
                v = acc.flat[pacc + j] + bias.flat[m]
                if add_res:
                    v += res.flat[py + j]
                y.flat[py + j] = conv_epilogue(v, act, act_lo, act_hi)
            else:
                y.flat[py + j] = 0


# --------------------------------------------------------------------------- geometry

def conv_geometry(in_hw, k_hw, strides, dilations, pads, auto_pad: str):
    """(output dims, begin pads, end pads) per spatial axis, ONNX rules; None dims stay None."""
    out, begin, end = [], [], []
    rank = len(k_hw)
    for a in range(rank):
        i, k, s, d = in_hw[a], k_hw[a], strides[a], dilations[a]
        span = (k - 1) * d + 1 if k is not None else None
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            if i is None or span is None:
                out.append(None if i is None else -(-i // s))
                begin.append(None)
                end.append(None)
                continue
            o = -(-i // s)
            total = max(0, (o - 1) * s + span - i)
            b = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            out.append(o)
            begin.append(b)
            end.append(total - b)
        else:
            pb, pe = (0, 0) if auto_pad == "VALID" else (pads[a], pads[a + rank])
            begin.append(pb)
            end.append(pe)
            if i is None or span is None:
                out.append(None)
                continue
            o = (i + pb + pe - span) // s + 1
            if o < 0:
                raise VerifyError(f"Conv window of span {span} (kernel {k}, dilation {d}) does not fit input "
                                  f"size {i} with pads ({pb}, {pe}) along spatial axis {a}")
            out.append(o)
    return tuple(out), tuple(begin), tuple(end)


class ConvAttributes(dsl.Op):
    """The window attributes every convolution shares (Conv, ConvTranspose, ConvInteger,
    QLinearConv), with ONNX's defaults filled in from the weights' rank."""

    auto_pad: str = "NOTSET"
    dilations: Optional[Tuple[int, ...]] = None
    group: int = 1
    kernel_shape: Optional[Tuple[int, ...]] = None
    pads: Optional[Tuple[int, ...]] = None
    strides: Optional[Tuple[int, ...]] = None

    def _attrs(self, w: TensorSpec):
        """(kernel, strides, dilations, pads) for weights ``w`` (N-d: rank - 2 spatial axes)."""
        rank = w.ndim - 2
        k = tuple(self.kernel_shape) if self.kernel_shape else tuple(w.shape[2:])
        strides = tuple(self.strides) if self.strides else (1,) * rank
        dil = tuple(self.dilations) if self.dilations else (1,) * rank
        pads = tuple(self.pads) if self.pads else (0,) * (2 * rank)
        return k, strides, dil, pads


@dsl.op("Conv", since=1)
class Conv(ConvAttributes):
    """ONNX Conv over 1-D to 3-D images: X (N, C, [[D,] H,] W), W (M, C/group, [[kD,] kH,] kW), B (M,)."""

    formats = ("plain", "nchwc16")
    keeps_padding = True  # conv_nchwc16 writes zeros into padding channels
    kernels = {"plain": conv_nchw, "nchwc16": conv_nchwc16, "gemm": gemm_packed, "direct": conv_direct,
               "stem": conv_stem, "pointwise": conv_pointwise, "winograd": conv_winograd}

    def verify(self, x, w, b=None):
        same_dtype("Conv", x, w, b)
        require_dtype("Conv", x, CONV_TYPES)
        if x.ndim not in (3, 4, 5):
            raise VerifyError(f"Conv supports 1-D to 3-D images: input must be (N, C, W), (N, C, H, W) or "
                              f"(N, C, D, H, W), got {x}")
        if w.ndim != x.ndim:
            raise VerifyError(f"Conv weights {w} must have the input's rank {x.ndim} (M, C/group, kernel...)")
        rank = x.ndim - 2
        k, strides, dil, pads = self._attrs(w)
        for name, v, n in (("kernel_shape", k, rank), ("strides", strides, rank),
                           ("dilations", dil, rank), ("pads", pads, 2 * rank)):
            if len(v) != n:
                raise VerifyError(f"Conv {name} {list(v)} needs {n} values for a {rank}-D convolution")
        if any(s is not None and s < 1 for s in strides + dil):
            raise VerifyError(f"Conv strides {list(strides)} and dilations {list(dil)} must be >= 1")
        if any(p < 0 for p in pads):
            raise VerifyError(f"Conv pads {list(pads)} must be >= 0")
        if self.auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
            raise VerifyError(f"Conv auto_pad {self.auto_pad!r}; accepted: NOTSET, SAME_UPPER, SAME_LOWER, VALID")
        if self.group < 1:
            raise VerifyError(f"Conv group must be >= 1, got {self.group}")
        if self.kernel_shape and any(a is not None and a != b for a, b in zip(w.shape[2:], k)):
            raise VerifyError(f"Conv kernel_shape {list(k)} disagrees with weights {w}")
        c, m, cg = x.shape[1], w.shape[0], w.shape[1]
        if c is not None and cg is not None and c != cg * self.group:
            raise VerifyError(f"Conv input has {c} channels but weights {w} with group={self.group} "
                              f"expect {cg * self.group if cg is not None else '?'} (C/group = {cg})")
        if m is not None and m % self.group:
            raise VerifyError(f"Conv output channels {m} are not divisible by group={self.group}")
        if b is not None and (b.ndim != 1 or (b.shape[0] is not None and m is not None and b.shape[0] != m)):
            raise VerifyError(f"Conv bias must have shape (M,) = ({m},), got {b}")

    def infer(self, x, w, b=None):
        k, strides, dil, pads = self._attrs(w)
        out, _, _ = conv_geometry(x.shape[2:], k, strides, dil, pads, self.auto_pad)
        return TensorSpec((x.shape[0], w.shape[0]) + out, x.dtype)

    def _wide_groups(self, x) -> bool:
        """Every group has at least GEMM_GROUP_CHANNELS input channels: it runs as one GEMM per
        group (AlexNet's two halves, ResNeXt's groups) instead of the blocked direct kernel."""
        return x.shape[1] is not None and x.shape[1] // self.group >= GEMM_GROUP_CHANNELS

    def _direct(self, x, w) -> bool:
        return w is not None and direct_supported(x, w, self.group)

    def select_format(self, x, *rest):
        if self._pointwise(x, rest[0] if rest else None):
            # reads and writes either format: blocked out once there are 16 channels, so a CNN
            # stays NCHWc16 from its first 1×1 convolution on (the planner asks
            # select_plain_format when every reader wants plain)
            m = rest[0].shape[0]
            out = "nchwc16" if x.format == "nchwc16" or (m is not None and m >= BLOCK) else "plain"
            return (x.format if x.format == "nchwc16" else "plain",) + _plain(rest), out
        if self._direct(x, rest[0] if rest else None):
            # the direct kernel reads and writes either format: follow the producer, no reorder
            fmt = x.format if x.format == "nchwc16" else "plain"
            return (fmt,) + tuple(None if t is None else "plain" for t in rest), fmt
        # blocked pays off once there are enough channels to fill a block and groups are narrow
        # (depthwise); single and wide groups run as GEMMs on plain tensors (on numba; elsewhere
        # conv_nchw)
        blocked = (x.ndim == 4 and x.shape[1] is not None and x.shape[1] >= BLOCK and self.group > 1
                   and not self._wide_groups(x))
        fmt = "nchwc16" if blocked else "plain"
        return (fmt,) + tuple(None if t is None else "plain" for t in rest), fmt

    def _pointwise(self, x, w) -> bool:
        if w is None:
            return False
        k, strides, dil, pads = self._attrs(w)
        return pointwise_supported(x, w, self.group, k, strides, dil, pads, self.auto_pad)

    def select_plain_format(self, x, *rest):
        if not self._pointwise(x, rest[0] if rest else None):
            return None
        return (x.format if x.format == "nchwc16" else "plain",) + _plain(rest), "plain"

    def select(self, x, w, b=None, backend=None):
        if self._pointwise(x, w):
            # every backend, every shape: on numba (AVX-512) it took 10-25 % less CPU time than
            # the packed GEMM on all eleven ResNet-50 / SqueezeNet 1x1 shapes even plain -> plain
            # (benchmarks/RESULTS.md, c1x1 slice), and only it reads and writes NCHWc16
            return "pointwise"
        if x.format == "nchwc16" and self._winograd(x, w, backend):
            # 3×3 stride 1 on NCHWc16, numba, wide images of 32+ channels: F(2×2, 3×3) took
            # 0.67-0.96 of the direct kernel's time there (ops/conv_winograd.py)
            return "winograd"
        if self._direct(x, w) and (x.format == "nchwc16" or self._direct_faster(x, w, backend)):
            # plain images of few channels (a CNN's first layer, squeezenet's 16-channel expands):
            # vectors of output pixels store plain rows directly (ops/conv_stem.py)
            return "stem" if stem_supported(x, w, self.group, Conv.infer(self, x, w).shape[-1]) else "direct"
        if x.format == "nchwc16":
            return "nchwc16"
        if dsl.target(backend).packed_kernels and (self.group == 1 or self._wide_groups(x)) \
                and x.dtype in PACKED_TYPES and x.ndim <= 4:
            return "gemm"
        return "plain"

    def _winograd(self, x, w, backend) -> bool:
        if w is None or not dsl.target(backend).packed_kernels:
            return False
        k, strides, dil, _ = self._attrs(w)
        return winograd_chosen(x, w, self.group, k, strides, dil, Conv.infer(self, x, w).shape[2:])

    def _direct_faster(self, x, w, backend) -> bool:
        """Direct unless an unpadded 1×1 convolution on numba (2-D ones took "pointwise"
        before): with stride 1 that is a plain GEMM reading x in place (ops/gemm_packed.py),
        with stride 2 one whose B panels are gathered."""
        if not dsl.target(backend).packed_kernels:
            return True
        k, _, _, pads = self._attrs(w)
        pointwise = all(d == 1 for d in k) and not any(pads) and self.auto_pad in ("NOTSET", "VALID")
        return not pointwise

    def run(self, impl, inputs, outputs, backend):
        b = inputs[2] if len(inputs) > 2 else None
        launch_conv(self, impl, inputs[0], inputs[1], b, outputs[0], backend)

    plan = dsl.recorded_plan_when_constant(1, 2)  # run() packs constant weights and bias once


def _plain(specs) -> tuple:
    """Plain for the weights and bias (None where absent)."""
    return tuple(None if t is None else "plain" for t in specs)


def conv_as_gemm(impl, group, x, w, bias, y, res, strides, dil, begin, backend, act, lo, hi) -> None:
    """A convolution as packed GEMMs, one per group: y[n, g] = W_g (M/G × C/G·kH·kW) · im2col(x[n, g])
    + bias_g.  A 1×1 stride-1 unpadded one reads x[n, g] (C/G × H·W) as B directly, any other
    gathers B while packing it (implicit im2col), so nothing the size of im2col is ever written.
    With several groups each launch takes one batch entry's group, a contiguous slice."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    mg = m // group
    oh, ow = y.shape[2], y.shape[3]
    direct = kh == kw == 1 and strides == (1, 1) and tuple(begin) == (0, 0)
    geometry = None if direct else (h, wd, kh, kw, strides[0], strides[1], begin[0], begin[1], dil[0], dil[1], ow)
    xs = x.reshape(n, group, cg, h * wd)
    ys = y.reshape(n, group, mg, oh * ow)
    rs = None if res is None else res.reshape(n, group, mg, oh * ow)
    ws = w.reshape(group, 1, mg, cg * kh * kw)
    bs = bias.reshape(group, mg, 1)
    batches = [slice(None)] if group == 1 else [slice(i, i + 1) for i in range(n)]
    for g in range(group):
        for nb in batches:
            packed_gemm(ws[g], xs[nb, g], bs[g], ys[nb, g], alpha=1.0, beta=1.0, backend=backend, kernel=impl,
                        res=None if rs is None else rs[nb, g], act=act, act_lo=lo, act_hi=hi, geometry=geometry)


def launch_conv(conv: Conv, impl, x, w, b, y, backend, res=None, act: int = ACT_NONE,
                lo: float = 0.0, hi: float = 0.0) -> None:
    """Run a conv kernel with ``conv``'s params and an epilogue: ``res`` (y's shape and
    format) added, then activation ``act`` (ACT_*) with bounds ``lo``, ``hi``."""
    k, strides, dil, pads = conv._attrs(TensorSpec(w.shape, dsl.lang.types.from_numpy(w.dtype)))
    rank = w.ndim - 2
    _, begin, _ = conv_geometry(x.shape[2:2 + rank], k, strides, dil, pads, conv.auto_pad)
    if rank == 1:  # as 2-D with H = 1
        x = x.reshape(x.shape[:2] + (1,) + x.shape[2:])
        w = w.reshape(w.shape[:2] + (1,) + w.shape[2:])
        y = y.reshape(y.shape[:2] + (1,) + y.shape[2:])
        res = None if res is None else res.reshape(y.shape)
        strides, dil, begin = (1,) + strides, (1,) + dil, (0,) + begin
    bias = np.zeros(w.shape[0], y.dtype) if b is None else b
    if impl == conv_stem:
        launch_conv_stem(impl, x, w, b, y, res, strides, dil, begin, y.ndim == 5, backend, act, lo, hi)
        return
    if impl == conv_pointwise:
        launch_conv_pointwise(impl, x, w, b, y, res, strides, x.ndim == 5, backend, act, lo, hi)
        return
    if impl == conv_winograd:
        launch_conv_winograd(impl, x, w, b, y, res, begin, backend, act, lo, hi)
        return
    if impl == conv_direct:
        launch_conv_direct(impl, x, w, b, y, res, strides, dil, begin, x.ndim == 5, backend, act, lo, hi)
        return
    if impl == gemm_packed:
        conv_as_gemm(impl, conv.group, x, w, bias, y, res, strides, dil, begin, backend, act, lo, hi)
        return
    if impl == conv_nchw:
        launch_direct(impl, conv.group, x, w, bias, y, res, strides, dil, begin, backend, act, lo, hi)
        return
    grid = grid_for(y.size * w.shape[1] * w.shape[2] * w.shape[3])
    row = y.shape[3] * BLOCK
    acc = np.empty((grid * impl.threads, row), np.float64 if y.dtype == np.float64 else np.float32)
    add_res = res is not None
    if res is None:  # never read (add_res is False): any array of y's rank and dtype
        res = np.zeros((1,) * y.ndim, y.dtype)
    impl(x, w, bias, res, y, acc, conv.group, strides[0], strides[1], dil[0], dil[1], begin[0], begin[1],
         add_res, act, lo, hi, backend=backend, grid=grid)


def launch_direct(impl, group, x, w, bias, y, res, strides, dil, begin, backend, act, lo, hi) -> None:
    """``conv_nchw`` on (N, C, D, H, W) views: a 2-D convolution runs with D = 1."""
    if x.ndim == 4:
        x, w, y = (t.reshape(t.shape[:2] + (1,) + t.shape[2:]) for t in (x, w, y))
        res = None if res is None else res.reshape(y.shape)
        strides, dil, begin = (1,) + tuple(strides), (1,) + tuple(dil), (0,) + tuple(begin)
    grid = grid_for(y.size * w.shape[1] * w.shape[2] * w.shape[3] * w.shape[4])
    acc = np.empty((grid * impl.threads, y.shape[4]), np.float64 if y.dtype == np.float64 else np.float32)
    add_res = res is not None
    if res is None:  # never read (add_res is False): any array of y's rank and dtype
        res = np.zeros((1,) * 5, y.dtype)
    impl(x, w, bias, res, y, acc, group, *strides, *dil, *begin, add_res, act, lo, hi, backend=backend, grid=grid)
