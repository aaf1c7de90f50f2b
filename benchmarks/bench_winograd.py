"""Winograd F(2×2, 3×3) (ops/conv_winograd.py) against the direct kernel (ops/conv_direct.py) on
squeezenet's and ResNet-50's 3×3 layers (NCHWc16 in and out, pad 1, bias + Relu), launched directly
and alternated in one process: CPU ms best of ``reps`` per side, the ratio winograd / direct, and
Winograd's max error relative to the largest output of a float64 reference.
Usage: NUMBA_NUM_THREADS=1 PYTHONPATH=. python -m benchmarks.bench_winograd [reps] [sq|rn|sqrn]
(OPDSL_CPU=zen4 / avx2 compile for another CPU kind, docs/ops.md)."""
import sys
import time

import numpy as np

from ops import conv_direct as cd
from ops import conv_winograd as cw
from ops.gemm_packed import ACT_RELU

SQUEEZE = [(16, 55, 64), (32, 27, 128), (48, 13, 192), (64, 13, 256)]
RESNET = [(64, 56, 64), (128, 28, 128), (256, 14, 256), (512, 7, 512)]


def layer_args(c, h, m, rng):
    """x, w, b, y (NCHWc16 x and y) for a c×h×h -> m 3×3 pad-1 convolution."""
    w = (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = (rng.standard_normal(m) * 0.1).astype(np.float32)
    for a in (w, b):
        a.setflags(write=False)
    x = np.zeros((1, -(-c // 16), h, h, 16), np.float32)
    x.reshape(1, -1, h * h, 16)[:] = rng.random((1, x.shape[1], h * h, 16))  # post-Relu-like
    if c % 16:
        x[:, -1, :, :, c % 16:] = 0
    y = np.empty((1, -(-m // 16), h, h, 16), np.float32)
    return x, w, b, y


def reference(x, w, b):
    """float64 conv + bias + Relu, NCHWc16."""
    n, cb, h, wd, _ = x.shape
    m, c = w.shape[:2]
    xp = np.pad(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * 16, h, wd)[:, :c].astype(np.float64),
                ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, m, h, wd))
    for kh in range(3):
        for kw in range(3):
            out += np.einsum("nchw,mc->nmhw", xp[:, :, kh:kh + h, kw:kw + wd], w[:, :, kh, kw].astype(np.float64))
    out = np.maximum(out + b[None, :, None, None], 0)
    return out.reshape(n, m // 16, 16, h, wd).transpose(0, 1, 3, 4, 2)


def direct(x, w, b, y):
    cd.launch_conv_direct(cd.conv_direct, x, w, b, y, None, (1, 1), (1, 1), (1, 1), True, "numba", ACT_RELU, 0.0, 0.0)


def winograd(x, w, b, y):
    cw.launch_conv_winograd(cw.conv_winograd, x, w, b, y, None, (1, 1), "numba", ACT_RELU, 0.0, 0.0)


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    which = sys.argv[2] if len(sys.argv) > 2 else "sqrn"
    layers = (SQUEEZE if "sq" in which else []) + (RESNET if "rn" in which else [])
    rng = np.random.default_rng(0)
    print(f"{'layer':>16} {'direct ms':>10} {'winograd ms':>12} {'wino/direct':>12} {'max rel err':>12}")
    for c, h, m in layers:
        x, w, b, y = layer_args(c, h, m, rng)
        ref = reference(x, w, b)
        sides = {"direct": direct, "winograd": winograd}
        best = {}
        for name, f in sides.items():
            f(x, w, b, y)
            best[name] = float("inf")
        winograd(x, w, b, y)
        err = float(np.abs(y - ref).max() / np.abs(ref).max())
        for r in range(reps):
            for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
                t0 = time.process_time()
                sides[name](x, w, b, y)
                best[name] = min(best[name], time.process_time() - t0)
        print(f"{f'{c}->{m} @{h}':>16} {best['direct'] * 1e3:10.3f} {best['winograd'] * 1e3:12.3f} "
              f"{best['winograd'] / best['direct']:12.3f} {err:12.2e}", flush=True)


if __name__ == "__main__":
    main()
