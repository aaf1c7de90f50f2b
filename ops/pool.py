"""Pooling (ONNX MaxPool, AveragePool, LpPool and their Global forms) over 1-D, 2-D and 3-D images.

One kernel serves the family: ``pool_kernel`` works on an (N·C, D, H, W) view of the input
(1-D and 2-D images get leading spatial axes of size 1, with a window of 1 along them) and a
run-time code picks max, average or Lp.  A work item is one output row; each window is
clipped to the image once per axis, so the inner loops carry no padding tests.  Max keeps
the first largest value and its flattened input index (the Indices output, row- or
column-major over the spatial axes as ``storage_order`` says); average divides by the taps
inside the image (or, with ``count_include_pad``, inside the padded image); Lp is
(Σ|x|^p)^(1/p).  Sums run in f32 (f64 for f64 data).

The output shape follows the ONNX spec: floor or ceil (``ceil_mode``) of
(in + pads - span) / stride + 1, where with ceil_mode a last window that would start in the
end padding is dropped; auto_pad SAME_* gives ceil(in / stride) with the padding split
(the odd one at the end for SAME_UPPER, at the beginning for SAME_LOWER), VALID no padding;
ceil_mode changes neither.

Faster kernels for the cases real CNNs hit (f32 global pools and whole-image AveragePool,
MaxPool on plain rows and on NCHWc16 tensors) live in ops/pool_fast.py; ``select`` picks them.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

import dsl
from dsl import In, Out, bool_, i32, i64, f16, bf16, f32, f64, i8, u8
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import require_dtype
from ops.matmul import grid_for
from ops import pool_fast
from ops.pool_fast import ROW, UNROLL_WINDOW, global_pool_blocked, global_pool_plain, max_pool2d_blocked, max_pool2d_rows

T = dsl.TypeVar("T")

# pooling codes of pool_kernel (module constants fold into the kernel)
MAX = 0
AVG = 1
LP = 2

FLOATS = (f16, f32, f64)
FLOATS_BF16 = (f16, bf16, f32, f64)
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dsl.kernel
def pool_kernel(x: In[T, 4], y: Out[T, 4], ind: Out[i64, 4], k: dsl.Vec[i64, 3], s: dsl.Vec[i64, 3],
                d: dsl.Vec[i64, 3], pb: dsl.Vec[i64, 3], pe: dsl.Vec[i64, 3], code: i32,
                count_pad: bool_, p: f32, col_major: bool_, want_ind: bool_):
    """y[r, od, oh, ow] = pool over x[r, od·s0 - pb0 + kd·d0, ...] of the taps inside the image."""
    id_n = x.shape[1]
    ih_n = x.shape[2]
    iw_n = x.shape[3]
    od_n = y.shape[1]
    oh_n = y.shape[2]
    ow_n = y.shape[3]
    plane = id_n * ih_n * iw_n
    lo, hi = dsl.split(y.size // ow_n, grid=True)  # a work item is an output row (r, od, oh)
    for row in range(lo, hi):
        oh = row % oh_n
        r = row // oh_n
        od = r % od_n
        r = r // od_n
        # window origins and the taps inside the image along each axis
        d0 = od * s[0] - pb[0]
        h0 = oh * s[1] - pb[1]
        kd_lo = 0 if d0 >= 0 else (d[0] - 1 - d0) // d[0]
        kd_hi = min(k[0], (id_n - d0 + d[0] - 1) // d[0])
        kh_lo = 0 if h0 >= 0 else (d[1] - 1 - h0) // d[1]
        kh_hi = min(k[1], (ih_n - h0 + d[1] - 1) // d[1])
        base = r * plane
        for ow in range(ow_n):
            i = row * ow_n + ow
            w0 = ow * s[2] - pb[2]
            kw_lo = 0 if w0 >= 0 else (d[2] - 1 - w0) // d[2]
            kw_hi = min(k[2], (iw_n - w0 + d[2] - 1) // d[2])
            if code == MAX:
                best = x.flat[base] * 0
                at = -1
                for kd in range(kd_lo, kd_hi):
                    pd = d0 + kd * d[0]
                    for kh in range(kh_lo, kh_hi):
                        ph = h0 + kh * d[1]
                        px = base + (pd * ih_n + ph) * iw_n + w0
                        for kw in range(kw_lo, kw_hi):
                            v = x.flat[px + kw * d[2]]
                            if at < 0 or v > best:
                                best = v
                                at = (pd * ih_n + ph) * iw_n + w0 + kw * d[2]
                y.flat[i] = best
                if want_ind:
                    if at < 0:
                        ind.flat[i] = -1
                    elif col_major:  # the first spatial axis varies fastest
                        pw = at % iw_n
                        ph = (at // iw_n) % ih_n
                        pd = at // (iw_n * ih_n)
                        ind.flat[i] = base + pd + id_n * (ph + ih_n * pw)
                    else:
                        ind.flat[i] = base + at
            else:
                acc = 0.0
                for kd in range(kd_lo, kd_hi):
                    for kh in range(kh_lo, kh_hi):
                        px = base + ((d0 + kd * d[0]) * ih_n + h0 + kh * d[1]) * iw_n + w0
                        for kw in range(kw_lo, kw_hi):
                            v = x.flat[px + kw * d[2]]
                            if code == AVG:
                                acc += v
                            elif p == 2:
                                acc += v * v
                            elif p == 1:
                                acc += abs(v)
                            else:
                                acc += dsl.pow(abs(v), p)
                if code == AVG:
                    if count_pad:  # taps inside the padded image (the ceil_mode overhang is not)
                        n = ((min(k[0], (id_n + pe[0] - d0 + d[0] - 1) // d[0]))
                             * (min(k[1], (ih_n + pe[1] - h0 + d[1] - 1) // d[1]))
                             * (min(k[2], (iw_n + pe[2] - w0 + d[2] - 1) // d[2])))
                    else:
                        n = (kd_hi - kd_lo) * (kh_hi - kh_lo) * (kw_hi - kw_lo)
                    y.flat[i] = acc / max(n, 1)
                elif p == 2:
                    y.flat[i] = dsl.sqrt(acc)
                elif p == 1:
                    y.flat[i] = acc
                else:
                    y.flat[i] = dsl.pow(acc, 1.0 / p)


@dsl.kernel
def max_pool2d_kernel(x: In[T, 3], y: Out[T, 3], ph0: i64, pw0: i64, K: dsl.const[i64], S: dsl.const[i64]):
    """MaxPool of a 2-D image without Indices or dilation: y[r, oh, ow] = max over the K×K taps of
    x[r] inside the image, window origin (oh·S - ph0, ow·S - pw0).

    The window and stride are compile-time constants, so for the output columns whose window lies
    inside the row the tap loop unrolls and the column loop vectorizes (stride-S loads); only the
    padded edge columns clip.  A work item is an output row; the first window row stores, the
    others max into y's row, which stays in L1."""
    ih_n = x.shape[1]
    iw_n = x.shape[2]
    oh_n = y.shape[1]
    ow_n = y.shape[2]
    ow_lo = min(ow_n, (pw0 + S - 1) // S)  # first column whose window starts inside the row
    ow_hi = max(ow_lo, min(ow_n, (iw_n - K + pw0) // S + 1))  # past the last one ending inside
    lo, hi = dsl.split(y.size // ow_n, grid=True)
    for row in range(lo, hi):
        oh = row % oh_n
        r = row // oh_n
        h0 = oh * S - ph0
        kh_lo = max(0, -h0)
        kh_hi = min(K, ih_n - h0)
        out = row * ow_n
        for kh in range(kh_lo, kh_hi):
            src = (r * ih_n + h0 + kh) * iw_n - pw0
            for ow in range(ow_lo, ow_hi):
                px = src + ow * S
                m = x.flat[px]
                for kw in dsl.static_range(1, K):
                    m = max(m, x.flat[px + kw])
                if kh == kh_lo:
                    y.flat[out + ow] = m
                else:
                    y.flat[out + ow] = max(y.flat[out + ow], m)
            for e in range(ow_lo + ow_n - ow_hi):  # edge columns: the window clipped to the row
                ow = e if e < ow_lo else ow_hi + e - ow_lo
                w0 = ow * S - pw0
                px = src + ow * S
                m = x.flat[px + max(0, -w0)]
                for t in range(max(0, -w0) + 1, min(K, iw_n - w0)):
                    m = max(m, x.flat[px + t])
                if kh == kh_lo:
                    y.flat[out + ow] = m
                else:
                    y.flat[out + ow] = max(y.flat[out + ow], m)


# --------------------------------------------------------------------------- geometry

def pool_geometry(in_sp, k, strides, dil, pads, auto_pad: str, ceil_mode: bool):
    """(output dims, begin pads, end pads) per spatial axis, ONNX rules; None dims stay None."""
    out, begin, end = [], [], []
    rank = len(k)
    for a in range(rank):
        i, s, span = in_sp[a], strides[a], (k[a] - 1) * dil[a] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            if i is None:
                out.append(None)
                begin.append(None)
                end.append(None)
                continue
            o = -(-i // s)
            total = max(0, (o - 1) * s + span - i)
            b = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            out.append(o)
            begin.append(b)
            end.append(total - b)
            continue
        pb, pe = (0, 0) if auto_pad == "VALID" else (pads[a], pads[a + rank])
        begin.append(pb)
        end.append(pe)
        if i is None:
            out.append(None)
            continue
        room = i + pb + pe - span
        if room < 0:
            raise VerifyError(f"pooling window of span {span} (kernel {k[a]}, dilation {dil[a]}) does not fit "
                              f"input size {i} with pads ({pb}, {pe}) along spatial axis {a}")
        if ceil_mode and auto_pad != "VALID":  # VALID: floor whatever ceil_mode says (the spec)
            o = -(-room // s) + 1
            if (o - 1) * s >= i + pb:  # the last window would start in the end padding
                o -= 1
        else:
            o = room // s + 1
        out.append(o)
    return tuple(out), tuple(begin), tuple(end)


def _pad3(v, fill):
    """A per-axis tuple for 1-3 spatial axes as the kernel's three (leading axes get ``fill``)."""
    v = tuple(v)
    return (fill,) * (3 - len(v)) + v


def launch_pool(impl, x, y, ind, k, strides, dil, begin, end, code, count_pad=False, p=2.0, col_major=False,
                backend=None):
    """Run ``pool_kernel`` on the (N·C, D, H, W) views of x and y."""
    rank = x.ndim - 2
    if rank > 3:
        raise VerifyError(f"pooling supports 1-D to 3-D images, got input of shape {x.shape}")
    view_x = x.reshape((-1,) + _pad3(x.shape[2:], 1))
    view_y = y.reshape((-1,) + _pad3(y.shape[2:], 1))
    want = ind is not None
    view_i = ind.reshape(view_y.shape) if want else np.zeros((1, 1, 1, 1), np.int64)
    taps = int(np.prod(k)) if len(k) else 1
    grid = grid_for(y.size * taps)
    impl(view_x, view_y, view_i, _pad3(k, 1), _pad3(strides, 1), _pad3(dil, 1), _pad3(begin, 0),
         _pad3(end, 0), code, count_pad, float(p), col_major, want, backend=backend, grid=grid)


# --------------------------------------------------------------------------- windowed pools

class _Pool(dsl.Op):
    """Shared params, checks and launch of the windowed pools (kernel_shape required)."""

    auto_pad: str = "NOTSET"
    kernel_shape: Tuple[int, ...] = ()
    pads: Optional[Tuple[int, ...]] = None
    strides: Optional[Tuple[int, ...]] = None
    kernels = {"default": pool_kernel}
    CODE = MAX
    DTYPES = FLOATS

    def _attrs(self):
        rank = len(self.kernel_shape)
        k = tuple(self.kernel_shape)
        strides = tuple(self.strides) if self.strides else (1,) * rank
        dil = tuple(getattr(self, "dilations", None) or ()) or (1,) * rank
        pads = tuple(self.pads) if self.pads else (0,) * (2 * rank)
        return k, strides, dil, pads

    def _geometry(self, x):
        k, strides, dil, pads = self._attrs()
        return pool_geometry(x.shape[2:], k, strides, dil, pads, self.auto_pad,
                             bool(getattr(self, "ceil_mode", 0)))

    def verify(self, x):
        name = self.op_type
        require_dtype(name, x, self.DTYPES)
        if x.ndim not in (3, 4, 5):
            raise VerifyError(f"{name} supports 1-D to 3-D images: input must be (N, C, W), (N, C, H, W) or "
                              f"(N, C, D, H, W), got {x}")
        rank = x.ndim - 2
        if not self.kernel_shape:
            raise VerifyError(f"{name} needs kernel_shape ({rank} values for input {x})")
        k, strides, dil, pads = self._attrs()
        for attr, v, n in (("kernel_shape", k, rank), ("strides", strides, rank),
                           ("dilations", dil, rank), ("pads", pads, 2 * rank)):
            if len(v) != n:
                raise VerifyError(f"{name} {attr} {list(v)} needs {n} values for a {rank}-D input {x}")
        if any(v < 1 for v in k + strides + dil):
            raise VerifyError(f"{name} kernel_shape {list(k)}, strides {list(strides)} and dilations "
                              f"{list(dil)} must be >= 1")
        if any(v < 0 for v in pads):
            raise VerifyError(f"{name} pads {list(pads)} must be >= 0")
        if self.auto_pad not in AUTO_PADS:
            raise VerifyError(f"{name} auto_pad {self.auto_pad!r}; accepted: {', '.join(AUTO_PADS)}")
        self._geometry(x)  # raises when a window does not fit

    def infer(self, x):
        out, _, _ = self._geometry(x)
        return TensorSpec(tuple(x.shape[:2]) + out, x.dtype)

    def _launch(self, impl, x, y, ind, backend, p=2.0):
        k, strides, dil, _ = self._attrs()
        _, begin, end = self._geometry(TensorSpec.of(x))
        launch_pool(impl, x, y, ind, k, strides, dil, begin, end, self.CODE,
                    count_pad=bool(getattr(self, "count_include_pad", 0)), p=p,
                    col_major=bool(getattr(self, "storage_order", 0)), backend=backend)

    def run(self, impl, inputs, outputs, backend):
        self._launch(impl, inputs[0], outputs[0], None, backend)

    plan = dsl.recorded_plan  # window geometry from shapes and params


class _MaxPool(_Pool):
    """MaxPool's choice of kernel: square 2-D windows without dilation or Indices take
    ``max_pool2d_rows`` (rows of at most ROW pixels) or ``max_pool2d_kernel`` (window and stride
    compiled in), f32 2-D pools on NCHWc16 tensors ``max_pool2d_blocked`` (ops/pool_fast.py),
    everything else ``pool_kernel``."""

    kernels = {"default": pool_kernel, "max2d": max_pool2d_kernel, "rows": max_pool2d_rows,
               "blocked": max_pool2d_blocked}
    skips_unused_outputs = True
    formats = ("plain", "nchwc16")
    keeps_padding = True  # the max of zero padding channels is zero

    def _blockable(self, x):
        return x.ndim == 4 and x.dtype == f32 and len(self.kernel_shape) == 2

    def select_format(self, x):
        fmt = "nchwc16" if x.format == "nchwc16" and self._blockable(x) else "plain"
        return (fmt,), fmt

    def select(self, x, backend):
        if x.format == "nchwc16":
            return "blocked"
        k, strides, dil, _ = self._attrs()
        square = len(k) == 2 and k[0] == k[1] <= 8 and strides[0] == strides[1] <= 4
        if not square or dil != (1, 1):
            return "default"
        return "rows" if x.shape[-1] is not None and x.shape[-1] <= ROW else "max2d"

    def run(self, impl, inputs, outputs, backend, specs=()):
        x, y = inputs[0], outputs[0]
        ind = outputs[1] if len(outputs) > 1 else None
        if _is_blocked(specs):
            return self._run_blocked(impl, x, y, ind, specs[0], backend)
        self._launch(impl, x, y, ind, backend)

    def _launch(self, impl, x, y, ind, backend, p=2.0):
        if impl not in (max_pool2d_kernel, max_pool2d_rows) or ind is not None:
            return super()._launch(pool_kernel, x, y, ind, backend)
        (kh, _), (s, _), _, _ = self._attrs()
        _, begin, _ = self._geometry(TensorSpec.of(x))
        n, c = x.shape[:2]
        view_x = x.reshape(n * c, *x.shape[2:])
        view_y = y.reshape(n * c, *y.shape[2:])
        impl(view_x, view_y, begin[0], begin[1], kh, s, backend=backend, grid=grid_for(y.size * kh * kh))

    def _run_blocked(self, impl, x, y, ind, spec, backend):
        """NCHWc16 storage: the SIMD kernel, or with Indices wanted the plain kernel on a plain copy
        (the indices are defined over the plain layout)."""
        k, strides, dil, _ = self._attrs()
        _, begin, _ = self._geometry(spec)
        n, cb, h, w, lanes = x.shape
        if ind is None:
            impl = impl if impl == max_pool2d_blocked else max_pool2d_blocked
            unroll = max(k) <= UNROLL_WINDOW
            impl(x.reshape(n * cb, h, w, lanes), y.reshape(n * cb, *y.shape[2:]), k, strides, dil,
                 begin, KH=k[0] if unroll else 0, KW=k[1] if unroll else 0, backend=backend,
                 grid=grid_for(y.size * k[0] * k[1]))
            return
        c = spec.shape[1]
        plain_x = np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * lanes, h, w)[:, :c])
        out = np.empty((n, c) + y.shape[2:4], y.dtype)
        super()._launch(pool_kernel, plain_x, out, ind, backend)
        plain_y = np.zeros((n, cb * lanes) + y.shape[2:4], y.dtype)  # padding channels stay zero
        plain_y[:, :c] = out
        y[...] = plain_y.reshape(n, cb, lanes, *y.shape[2:4]).transpose(0, 1, 3, 4, 2)


@dsl.op("MaxPool", since=1, until=7)
class MaxPoolV1(_MaxPool):
    """MaxPool without Indices, ceil_mode or dilations (opsets 1-7)."""

    keeps_quant = True  # moves data: a quantized input's quant carries over


@dsl.op("MaxPool", since=8, until=9)
class MaxPoolV8(_MaxPool):
    """MaxPool with the optional Indices output (i64, flattened input index; opsets 8-9)."""

    keeps_quant = True  # moves data: a quantized input's quant carries over
    storage_order: int = 0

    def verify(self, x):
        super().verify(x)
        if self.storage_order not in (0, 1):
            raise VerifyError(f"MaxPool storage_order must be 0 (row major) or 1 (column major), "
                              f"got {self.storage_order}")

    def infer(self, x):
        y = super().infer(x)
        return y, TensorSpec(y.shape, dsl.i64)

    def select_format(self, x):
        ins, out = super().select_format(x)
        return ins, (out, "plain")  # Indices stay plain


@dsl.op("MaxPool", since=10, until=11)
class MaxPoolV10(MaxPoolV8):
    """MaxPool with ceil_mode and dilations (opsets 10-11)."""
    ceil_mode: int = 0
    dilations: Optional[Tuple[int, ...]] = None


@dsl.op("MaxPool", since=12, until=21)
class MaxPoolV12(MaxPoolV10):
    """MaxPool of i8/u8 too (opsets 12-21)."""
    DTYPES = FLOATS + (i8, u8)


@dsl.op("MaxPool", since=22)
class MaxPool(MaxPoolV12):
    """MaxPool of bf16 too (opset 22+)."""
    DTYPES = FLOATS_BF16 + (i8, u8)


@dsl.op("AveragePool", since=1, until=6)
class AveragePoolV1(_Pool):
    """AveragePool excluding padding from the count (opsets 1-6).  A window that is the whole
    unpadded image (ResNet's last pool) is a global average: f32 takes ``global_pool_plain``,
    or ``global_pool_blocked`` on NCHWc16 (a blocked CNN's last pool)."""
    CODE = AVG
    kernels = {"default": pool_kernel, "global": global_pool_plain, "global_blocked": global_pool_blocked}
    formats = ("plain", "nchwc16")  # NCHWc16 for the global case only
    keeps_padding = True  # the mean of zero padding channels is zero

    def _global(self, x) -> bool:
        if x.dtype != f32 or any(d is None for d in x.shape[2:]):
            return False
        k, _, dil, _ = self._attrs()
        out, begin, end = self._geometry(x)
        return (tuple(k) == tuple(x.shape[2:]) and all(d == 1 for d in dil) and all(o == 1 for o in out)
                and not any(begin) and not any(end))

    def select_format(self, x):
        fmt = "nchwc16" if x.format == "nchwc16" and x.ndim == 4 and self._global(x) else "plain"
        return (fmt,), fmt

    def select(self, x, backend):
        if not self._global(x):
            return "default"
        return "global_blocked" if x.format == "nchwc16" else "global"

    def select_plain_format(self, x):
        return global_plain_format(x, self._global(x))

    def run(self, impl, inputs, outputs, backend):
        x, y = inputs[0], outputs[0]
        if impl == global_pool_blocked:
            launch_global_blocked(impl, x, y, pool_fast.AVG, backend)
            return
        if impl != global_pool_plain:
            return self._launch(impl, x, y, None, backend)
        rows = x.shape[0] * x.shape[1]
        impl(x.reshape(rows, -1), y.reshape(rows), pool_fast.AVG, backend=backend, grid=grid_for(x.size))


@dsl.op("AveragePool", since=7, until=9)
class AveragePoolV7(AveragePoolV1):
    """AveragePool with count_include_pad (opsets 7-9)."""
    count_include_pad: int = 0


@dsl.op("AveragePool", since=10, until=18)
class AveragePoolV10(AveragePoolV7):
    """AveragePool with ceil_mode (opsets 10-18)."""
    ceil_mode: int = 0


@dsl.op("AveragePool", since=19, until=21)
class AveragePoolV19(AveragePoolV10):
    """AveragePool with dilations (opsets 19-21)."""
    dilations: Optional[Tuple[int, ...]] = None


@dsl.op("AveragePool", since=22)
class AveragePool(AveragePoolV19):
    """AveragePool of bf16 too (opset 22+)."""
    DTYPES = FLOATS_BF16


@dsl.op("LpPool", since=1, until=1)
class LpPoolV1(_Pool):
    """LpPool with a float p (opset 1)."""
    CODE = LP
    p: float = 2.0

    def verify(self, x):
        super().verify(x)
        if not self.p > 0:
            raise VerifyError(f"LpPool p must be > 0, got {self.p}")

    def run(self, impl, inputs, outputs, backend):
        self._launch(impl, inputs[0], outputs[0], None, backend, p=self.p)


@dsl.op("LpPool", since=2, until=17)
class LpPoolV2(LpPoolV1):
    """LpPool with an integer p (opsets 2-17)."""
    p: int = 2


@dsl.op("LpPool", since=18, until=21)
class LpPoolV18(LpPoolV2):
    """LpPool with ceil_mode and dilations (opsets 18-21)."""
    ceil_mode: int = 0
    dilations: Optional[Tuple[int, ...]] = None


@dsl.op("LpPool", since=22)
class LpPool(LpPoolV18):
    """LpPool of bf16 too (opset 22+)."""
    DTYPES = FLOATS_BF16


# --------------------------------------------------------------------------- global pools

def global_plain_format(x, fast: bool):
    """NCHWc16 in, plain out, for a global pool whose readers all want plain (a classifier's
    Softmax, Flatten or the graph output): the pooled 1×1 image is written plain by
    ``global_pool_blocked`` itself, so no Reorder follows it (squeezenet: 12 µs a run)."""
    if fast and x.format == "nchwc16" and x.ndim == 4:
        return ("nchwc16",), "plain"
    return None


def launch_global_blocked(impl, x, y, code: int, backend) -> None:
    """``impl`` (``global_pool_blocked`` or a model's recorder of it) on NCHWc16 storage x (N, CB, H, W, 16) into y: NCHWc16 storage
    (N, CB, 1, 1, 16) or plain (N, C, 1, 1)."""
    n, cb = x.shape[:2]
    channels = cb * pool_fast.LANES if y.ndim == x.ndim else y.shape[1]
    impl(x.reshape(n * cb, -1, x.shape[-1]), y.reshape(-1), channels, code, backend=backend, grid=grid_for(x.size))


class _GlobalPool(dsl.Op):
    """A pool whose window is the whole image: (N, C, spatial...) -> (N, C, 1, ...).  Global
    max and average of f32 data take the SIMD kernels of ops/pool_fast.py, on plain or NCHWc16
    tensors; other dtypes and GlobalLpPool the shared ``pool_kernel``."""

    plan = dsl.recorded_plan  # views from shapes and the input's format
    kernels = {"default": pool_kernel, "plain": global_pool_plain, "blocked": global_pool_blocked}
    formats = ("plain", "nchwc16")
    keeps_padding = True  # mean and max of zero padding channels are zero
    CODE = MAX
    DTYPES = FLOATS

    def verify(self, x):
        require_dtype(self.op_type, x, self.DTYPES)
        if x.ndim < 3 or x.ndim > 5:
            raise VerifyError(f"{self.op_type} supports 1-D to 3-D images: input must be (N, C, spatial...) with "
                              f"1 to 3 spatial axes, got {x}")

    def infer(self, x):
        return TensorSpec(tuple(x.shape[:2]) + (1,) * (x.ndim - 2), x.dtype)

    def _fast(self, x):
        return x.dtype == f32 and self.CODE in (MAX, AVG)

    def select_format(self, x):
        fmt = "nchwc16" if x.format == "nchwc16" and x.ndim == 4 and self._fast(x) else "plain"
        return (fmt,), fmt

    def select_plain_format(self, x):
        return global_plain_format(x, self._fast(x))

    def select(self, x, backend):
        if not self._fast(x):
            return "default"
        return "blocked" if x.format == "nchwc16" else "plain"

    def run(self, impl, inputs, outputs, backend, specs=()):
        x, y = inputs[0], outputs[0]
        code = pool_fast.AVG if self.CODE == AVG else pool_fast.MAX
        if impl == global_pool_blocked:
            launch_global_blocked(impl, x, y, code, backend)
            return
        if impl == global_pool_plain:
            rows = x.shape[0] * x.shape[1]
            impl(x.reshape(rows, -1), y.reshape(rows), code, backend=backend, grid=grid_for(x.size))
            return
        rank = x.ndim - 2
        launch_pool(pool_kernel, x, y, None, tuple(x.shape[2:]), (1,) * rank, (1,) * rank, (0,) * rank,
                    (0,) * rank, self.CODE, p=float(getattr(self, "p", 2.0)), backend=backend)


def _is_blocked(specs) -> bool:
    """Whether the input is NCHWc16 storage (5-D, but so is a plain 3-D image: the spec decides)."""
    return bool(specs) and specs[0] is not None and specs[0].format == "nchwc16"


@dsl.op("GlobalMaxPool", since=1, until=21)
class GlobalMaxPoolV1(_GlobalPool):
    """Largest value of each channel (opsets 1-21)."""


@dsl.op("GlobalMaxPool", since=22)
class GlobalMaxPool(GlobalMaxPoolV1):
    """GlobalMaxPool of bf16 too (opset 22+)."""
    DTYPES = FLOATS_BF16


@dsl.op("GlobalAveragePool", since=1, until=21)
class GlobalAveragePoolV1(_GlobalPool):
    """Mean of each channel (opsets 1-21)."""
    CODE = AVG


@dsl.op("GlobalAveragePool", since=22)
class GlobalAveragePool(GlobalAveragePoolV1):
    """GlobalAveragePool of bf16 too (opset 22+)."""
    DTYPES = FLOATS_BF16


@dsl.op("GlobalLpPool", since=1, until=1)
class GlobalLpPoolV1(_GlobalPool):
    """Lp norm of each channel, float p (opset 1)."""
    CODE = LP
    p: float = 2.0

    def verify(self, x):
        super().verify(x)
        if not self.p > 0:
            raise VerifyError(f"GlobalLpPool p must be > 0, got {self.p}")


@dsl.op("GlobalLpPool", since=2, until=21)
class GlobalLpPoolV2(GlobalLpPoolV1):
    """GlobalLpPool with an integer p (opsets 2-21)."""
    p: int = 2


@dsl.op("GlobalLpPool", since=22)
class GlobalLpPool(GlobalLpPoolV2):
    """GlobalLpPool of bf16 too (opset 22+)."""
    DTYPES = FLOATS_BF16
