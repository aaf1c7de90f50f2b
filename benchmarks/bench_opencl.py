"""OpenCL backend vs hand-written OpenCL C (both on the same device) vs the numba backend.

    python benchmarks/bench_opencl.py [--size N] [--repeat R]

Kernels: leaky_relu (one element per work-item, 256-thread teams) and row softmax
(one team per row, max and sum reduced in scratch).  The hand-written OpenCL runs the
same algorithm with the same launch shape, wrapped the same way (zero-copy
USE_HOST_PTR buffers per call), so the ratio measures the emitted code.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dsl  # noqa: E402
from dsl import In, Out, f32  # noqa: E402

TEAM = 256
SOFTMAX_TEAM = 64


@dsl.kernel(threads=TEAM)
def leaky_relu(x: In[f32], y: Out[f32], alpha: f32 = 0.01):
    i = dsl.tile_id() * dsl.num_threads() + dsl.thread_id()
    if i < x.size:
        v = x.flat[i]
        y.flat[i] = v if v > 0 else alpha * v


@dsl.kernel(threads=SOFTMAX_TEAM)
def row_softmax(x: In[f32, 2], y: Out[f32, 2]):
    red = dsl.scratch((SOFTMAX_TEAM,), f32)
    row = dsl.tile_id()
    t = dsl.thread_id()
    n = x.shape[1]
    m = -3.0e38
    for j in range(t, n, dsl.num_threads()):
        m = max(m, x[row, j])
    red[t] = m
    dsl.sync()
    s = dsl.num_threads() // 2
    while s > 0:
        if t < s:
            red[t] = max(red[t], red[t + s])
        dsl.sync()
        s = s // 2
    m = red[0]
    dsl.sync()
    acc = 0.0
    for j in range(t, n, dsl.num_threads()):
        e = dsl.exp(x[row, j] - m)
        y[row, j] = e
        acc += e
    red[t] = acc
    dsl.sync()
    s = dsl.num_threads() // 2
    while s > 0:
        if t < s:
            red[t] = red[t] + red[t + s]
        dsl.sync()
        s = s // 2
    inv = 1.0 / red[0]
    for j in range(t, n, dsl.num_threads()):
        y[row, j] = y[row, j] * inv


HAND = r"""
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void leaky_relu(__global const float* x, __global float* y, float alpha, long n)
{
    long i = get_global_id(0);
    if (i < n) {
        float v = x[i];
        y[i] = v > 0.0f ? v : alpha * v;
    }
}

__kernel __attribute__((reqd_work_group_size(64, 1, 1)))
void row_softmax(__global const float* x, __global float* y, long cols)
{
    __local float red[64];
    const long row = get_group_id(0);
    const int t = get_local_id(0);
    __global const float* xr = x + row * cols;
    __global float* yr = y + row * cols;
    float m = -3.0e38f;
    for (long j = t; j < cols; j += 64) m = fmax(m, xr[j]);
    red[t] = m;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 32; s > 0; s >>= 1) {
        if (t < s) red[t] = fmax(red[t], red[t + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    m = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    float acc = 0.0f;
    for (long j = t; j < cols; j += 64) { float e = exp(xr[j] - m); yr[j] = e; acc += e; }
    red[t] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 32; s > 0; s >>= 1) {
        if (t < s) red[t] += red[t + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float inv = 1.0f / red[0];
    for (long j = t; j < cols; j += 64) yr[j] *= inv;
}
"""


class Hand:
    """The hand-written kernels, launched like the backend launches its own (zero-copy buffers)."""

    def __init__(self):
        import pyopencl as cl
        from backends.opencl import runtime as rt
        self.cl, self.rt = cl, rt
        self.prg = rt.build(HAND)
        self.k_leaky = cl.Kernel(self.prg, "leaky_relu")
        self.k_softmax = cl.Kernel(self.prg, "row_softmax")

    def _run(self, kernel, arrays, scalars, gsize, lsize):
        bufs = self.rt.Buffers(self.rt.device())
        try:
            args = [bufs.wrap(a, writable=w) for a, w in arrays] + list(scalars)
            self.rt.run(kernel, args, gsize, lsize)
        finally:
            bufs.finish()

    def leaky_relu(self, x, y, alpha):
        n = x.size
        self._run(self.k_leaky, [(x, False), (y, True)], [np.float32(alpha), np.int64(n)],
                  (-(-n // TEAM) * TEAM,), (TEAM,))

    def row_softmax(self, x, y):
        rows, cols = x.shape
        self._run(self.k_softmax, [(x, False), (y, True)], [np.int64(cols)], (rows * SOFTMAX_TEAM,),
                  (SOFTMAX_TEAM,))


def interleaved(runs: dict, repeat: int) -> dict:
    """name -> (best wall, median wall, best CPU) seconds.

    The contenders alternate so machine noise hits all alike; CPU time (all threads of
    this process, PoCL's workers included) is less sensitive to other processes' load.
    """
    live, times, cpu = {}, {}, {}
    for name, fn in runs.items():
        try:
            fn()  # warm-up: compile, caches
            live[name], times[name], cpu[name] = fn, [], []
        except Exception as e:  # e.g. a backend not installed here
            print(f"  {name:20s} n/a ({type(e).__name__}: {str(e).splitlines()[0][:80]})")
    order = list(live.items())
    for r in range(repeat):  # rotate: whoever runs right after numba meets its spinning worker threads
        for name, fn in order[r % len(order):] + order[:r % len(order)]:
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    return {name: (min(ts), statistics.median(ts), min(cpu[name])) for name, ts in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1 << 24, help="elements (leaky_relu) and rows*cols (softmax)")
    ap.add_argument("--cols", type=int, default=1024, help="softmax row length")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)
    from backends import base
    reason = base.get("opencl").available()
    if reason:
        print(f"opencl unavailable: {reason}")
        return 1
    rng = np.random.default_rng(0)
    x = rng.standard_normal(args.size).astype(np.float32)
    y = np.empty_like(x)
    rows = max(args.size // args.cols, 1)
    x2 = rng.standard_normal((rows, args.cols)).astype(np.float32)
    y2 = np.empty_like(x2)
    hw = Hand()
    grid = -(-x.size // TEAM)

    cases = {
        "leaky_relu": {
            "opencl": lambda: leaky_relu(x, y, 0.1, backend="opencl", grid=grid),
            "hand-written OpenCL": lambda: hw.leaky_relu(x, y, 0.1),
            "numba": lambda: leaky_relu(x, y, 0.1, backend="numba", grid=grid),
        },
        "row_softmax": {
            "opencl": lambda: row_softmax(x2, y2, backend="opencl", grid=rows),
            "hand-written OpenCL": lambda: hw.row_softmax(x2, y2),
            "numba": lambda: row_softmax(x2, y2, backend="numba", grid=rows),
        },
    }
    dev = hw.rt.device()
    print(f"device: {dev.description}; leaky_relu n={x.size}, softmax {rows}x{args.cols}; "
          f"{args.repeat} interleaved runs: best wall [median wall], best CPU time")
    for case, runs in cases.items():
        results = interleaved(runs, args.repeat)
        hand = results.get("hand-written OpenCL")
        for name, (best, med, cpu) in results.items():
            ratio = (f"median {med / hand[1]:5.2f}x, best {best / hand[0]:5.2f}x, cpu {cpu / hand[2]:5.2f}x "
                     f"of hand-written") if hand else ""
            print(f"  {case:12s} {name:20s} {best * 1e3:8.3f} ms [{med * 1e3:8.3f}] cpu {cpu * 1e3:8.3f} ms  {ratio}")
    # the emitted kernels compute what numpy does
    leaky_relu(x, y, 0.1, backend="opencl", grid=grid)
    assert np.allclose(y, np.where(x > 0, x, np.float32(0.1) * x))
    row_softmax(x2, y2, backend="opencl", grid=rows)
    ref = np.exp(x2 - x2.max(axis=1, keepdims=True))
    assert np.allclose(y2, ref / ref.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-6)
    return 0


if __name__ == "__main__":
    sys.exit(main())
