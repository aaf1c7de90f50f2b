"""Small ops for the op-layer tests (domain com.opdsl.test), written as DSL kernels.

They exercise the Op contract independently of the ops/ library: elementwise ops
in both formats (one that breaks zero padding, one that keeps it), a 3x3 Conv in
plain and NCHWc16, FullyConnected with an optional bias (a run() override), a
u8 quantizer, a value-dependent Reshape, a two-output op, an unfoldable op.
"""
import numpy as np

import dsl
from dsl import In, InOut, Out, f32, i64, u8  # noqa: F401

T = dsl.TypeVar("T")
DOMAIN = "com.opdsl.test"


# --------------------------------------------------------------------------- kernels

@dsl.kernel
def hard_sigmoid_k(x: In[f32], y: Out[f32], alpha: f32 = 0.2, beta: f32 = 0.5):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = dsl.clamp(alpha * x.flat[i] + beta, 0.0, 1.0)


@dsl.kernel
def add_k(a: In[T], b: In[T], y: Out[T]):
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        y.flat[i] = a.flat[i] + b.flat[i]


@dsl.kernel
def tanh_k(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = dsl.tanh(x.flat[i])


@dsl.kernel
def fc_bias_k(x: In[f32, 2], w: In[f32, 2], b: In[f32, 1], y: Out[f32, 2]):
    units = w.shape[0]
    inner = w.shape[1]
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        r = i // units
        u = i % units
        acc = b[u]
        for k in range(inner):
            acc += x[r, k] * w[u, k]
        y.flat[i] = acc


@dsl.kernel
def fc_k(x: In[f32, 2], w: In[f32, 2], y: Out[f32, 2]):
    units = w.shape[0]
    inner = w.shape[1]
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        r = i // units
        u = i % units
        acc = f32(0.0)
        for k in range(inner):
            acc += x[r, k] * w[u, k]
        y.flat[i] = acc


@dsl.kernel
def quantize_u8_k(x: In[f32], y: Out[u8], scale: f32, zero_point: i64):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i] / scale
        r = dsl.floor(v + 0.5)
        if r - v == 0.5 and r - 2.0 * dsl.floor(r * 0.5) == 1.0:
            r = r - 1.0  # round half to even
        q = r + f32(zero_point)
        y.flat[i] = u8(dsl.clamp(q, 0.0, 255.0))


@dsl.kernel
def conv3x3_plain_k(x: In[f32, 4], w: In[f32, 4], y: Out[f32, 4]):
    channels = x.shape[1]
    height = x.shape[2]
    width = x.shape[3]
    kout = w.shape[0]
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        col = i % width
        r = i // width
        row = r % height
        r = r // height
        k = r % kout
        n = r // kout
        acc = f32(0.0)
        for c in range(channels):
            for dy in range(3):
                yy = row + dy - 1
                if yy >= 0 and yy < height:
                    for dx in range(3):
                        xx = col + dx - 1
                        if xx >= 0 and xx < width:
                            acc += x[n, c, yy, xx] * w[k, c, dy, dx]
        y.flat[i] = acc


@dsl.kernel
def conv3x3_blocked_k(x: In[f32, 5], w: In[f32, 4], y: Out[f32, 5]):
    channels = w.shape[1]
    kout = w.shape[0]
    height = y.shape[2]
    width = y.shape[3]
    kblocks = y.shape[1]
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        lane = i % 16
        r = i // 16
        col = r % width
        r = r // width
        row = r % height
        r = r // height
        kb = r % kblocks
        n = r // kblocks
        k = kb * 16 + lane
        acc = f32(0.0)
        if k < kout:
            for c in range(channels):
                for dy in range(3):
                    yy = row + dy - 1
                    if yy >= 0 and yy < height:
                        for dx in range(3):
                            xx = col + dx - 1
                            if xx >= 0 and xx < width:
                                acc += x[n, c // 16, yy, xx, c % 16] * w[k, c, dy, dx]
        y.flat[i] = acc


@dsl.kernel
def lane_sum_blocked_k(x: In[f32, 5], y: Out[f32, 4]):
    """Sums *every* lane of each block, padding included: wrong unless padding is 0."""
    blocks = x.shape[1]
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        n = i // (x.shape[2] * x.shape[3])
        rest = i % (x.shape[2] * x.shape[3])
        row = rest // x.shape[3]
        col = rest % x.shape[3]
        acc = f32(0.0)
        for b in range(blocks):
            for lane in range(16):
                acc += x[n, b, row, col, lane]
        y.flat[i] = acc


@dsl.kernel
def lane_sum_plain_k(x: In[f32, 4], y: Out[f32, 4]):
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        n = i // (x.shape[2] * x.shape[3])
        rest = i % (x.shape[2] * x.shape[3])
        row = rest // x.shape[3]
        col = rest % x.shape[3]
        acc = f32(0.0)
        for c in range(x.shape[1]):
            acc += x[n, c, row, col]
        y.flat[i] = acc


@dsl.kernel
def copy_k(x: In[T], y: Out[T]):
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i]


@dsl.kernel
def minmax_k(x: In[f32], lo_out: Out[f32], hi_out: Out[f32], alpha: f32 = 1.0):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i] * alpha
        lo_out.flat[i] = min(v, 0.0)
        hi_out.flat[i] = max(v, 0.0)


# --------------------------------------------------------------------------- ops

@dsl.op("HardSigmoid", domain=DOMAIN)
class HardSigmoid(dsl.Op):
    """clamp(alpha*x + beta, 0, 1): elementwise, both formats, breaks zero padding (f(0) = beta)."""

    alpha: float = 0.2
    beta: float = 0.5
    formats = ("plain", "nchwc16")
    inplace = {0: 0}

    def infer(self, x):
        return x.spec

    def verify(self, x):
        if x.dtype != dsl.f32:
            raise dsl.VerifyError(f"HardSigmoid takes f32, got {x.dtype}")

    kernels = {"default": hard_sigmoid_k}


@dsl.op("Add", domain=DOMAIN)
class Add(dsl.Op):
    """Same-shape addition (keeps zero padding)."""

    formats = ("plain", "nchwc16")
    inplace = {0: 0}
    keeps_padding = True

    def infer(self, a, b):
        return a.spec

    def verify(self, a, b):
        if a.dtype != b.dtype:
            raise dsl.VerifyError(f"input dtypes differ: {a.dtype} and {b.dtype}")
        if len(a.shape) != len(b.shape) or any(
                p is not None and q is not None and p != q for p, q in zip(a.shape, b.shape)):
            raise dsl.VerifyError(f"shapes differ: {a} and {b}")

    kernels = {"default": add_k}


@dsl.op("Tanh", domain=DOMAIN)
class Tanh(dsl.Op):
    formats = ("plain", "nchwc16")
    inplace = {0: 0}
    keeps_padding = True

    def infer(self, x):
        return x.spec

    kernels = {"default": tanh_k}


@dsl.op("FullyConnected", domain=DOMAIN)
class FullyConnected(dsl.Op):
    """x . w^T (+ b): the bias is optional, so run() drops the absent input."""

    def infer(self, x, w, b=None):
        return dsl.TensorSpec((x.shape[0], w.shape[0]), x.dtype)

    def verify(self, x, w, b=None):
        if x.shape[1] is not None and w.shape[1] is not None and x.shape[1] != w.shape[1]:
            raise dsl.VerifyError(f"x has {x.shape[1]} features but w expects {w.shape[1]}")

    def select(self, x, w, b=None, *, backend):
        return "nobias" if b is None else "bias"

    def run(self, impl, inputs, outputs, backend):
        impl(*[a for a in inputs if a is not None], *outputs, backend=backend)

    def plan(self, impl, inputs, outputs, backend):  # run()'s launch, declared: a model binds it once
        return [dsl.Launch(impl, tuple(r for r in inputs if r is not None) + tuple(outputs), backend=backend)]

    kernels = {"bias": fc_bias_k, "nobias": fc_k}


@dsl.op("DataConvert", domain=DOMAIN)
class DataConvert(dsl.Op):
    """f32 -> u8 with quant(f) = clamp(round_half_even(f / scale) + zero_point)."""

    dtype: dsl.DType = dsl.u8
    scale: float = 1.0
    zero_point: int = 0

    def infer(self, x):
        return x.spec.with_(dtype=self.dtype, quant=(self.scale, self.zero_point))

    def verify(self, x):
        if self.dtype != dsl.u8:
            raise dsl.VerifyError(f"only u8 output is implemented here, got {self.dtype}")

    kernels = {"default": quantize_u8_k}


@dsl.op("Conv3x3", domain=DOMAIN)
class Conv3x3(dsl.Op):
    """3x3 conv, padding 1: prefers nchwc16 for its data input (unless blocked=False)."""

    blocked: bool = True
    formats = ("plain", "nchwc16")
    keeps_padding = True

    def infer(self, x, w):
        return dsl.TensorSpec((x.shape[0], w.shape[0], x.shape[2], x.shape[3]), x.dtype)

    def select_format(self, x, w):
        fmt = "nchwc16" if self.blocked else "plain"
        return (fmt, "plain"), fmt

    def select(self, x, w, *, backend):
        return x.format

    kernels = {"plain": conv3x3_plain_k, "nchwc16": conv3x3_blocked_k}


@dsl.op("LaneSum", domain=DOMAIN)
class LaneSum(dsl.Op):
    """Sum over channels -> (N, 1, H, W); its blocked kernel also sums the padding."""

    formats = ("plain", "nchwc16")

    def infer(self, x):
        return x.spec.with_(shape=(x.shape[0], 1, x.shape[2], x.shape[3]))

    def select_format(self, x):
        return (x.format,), "plain"

    def select(self, x, *, backend):
        return x.format

    kernels = {"plain": lane_sum_plain_k, "nchwc16": lane_sum_blocked_k}


@dsl.op("Reshape", domain=DOMAIN)
class Reshape(dsl.Op):
    """Shape from a second (i64) tensor: known at compile time only when it is constant."""

    def infer(self, x, shape):
        if shape.value is None:
            return dsl.TensorSpec((None,) * shape.shape[0], x.dtype)
        dims = [int(d) for d in shape.value]
        if -1 in dims:
            known = int(np.prod([d for d in dims if d != -1]))
            dims[dims.index(-1)] = None if not x.known else (x.size // known if known else 0)
        return dsl.TensorSpec(tuple(dims), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0].reshape(-1), outputs[0].reshape(-1), backend=backend)

    kernels = {"default": copy_k}


@dsl.op("MinMax", domain=DOMAIN)
class MinMax(dsl.Op):
    """Two outputs: min(alpha*x, 0) and max(alpha*x, 0)."""

    alpha: float = 1.0

    def infer(self, x):
        return x.spec, x.spec

    kernels = {"default": minmax_k}


CALLS = {"noise": 0}


def _noise(x, y):
    CALLS["noise"] += 1
    y[...] = x + CALLS["noise"]


@dsl.op("Noise", domain=DOMAIN)
class Noise(dsl.Op):
    """Different output every call: must not be constant-folded."""

    foldable = False

    def infer(self, x):
        return x.spec

    kernels = {"default": _noise}


# --------------------------------------------------------------------------- numpy references

def hard_sigmoid_ref(x, alpha=0.2, beta=0.5):
    return np.clip(alpha * x + beta, 0, 1).astype(x.dtype)


def conv3x3_ref(x, w):
    n, c, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd), np.float64)
    for dy in range(3):
        for dx in range(3):
            out += np.einsum("nchw,kc->nkhw", xp[:, :, dy:dy + h, dx:dx + wd], w[:, :, dy, dx])
    return out.astype(np.float32)


def quantize_ref(x, scale, zero_point=0):
    return np.clip(np.round(x / np.float32(scale)) + zero_point, 0, 255).astype(np.uint8)
