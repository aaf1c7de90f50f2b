"""``dsl.grad``'s generated backward kernels against hand-written ones on numba, interleaved in one
process so the machine's load hits both alike.

    python -m benchmarks.bench_grad [--repeat 30] [--n 1000000] [--rows 2048] [--cols 512]

Cases: an elementwise kernel (the generated backward replays the forward and adds into
``grad_x`` with a plain ``+=``), and a row softmax (the generated backward recomputes the row's
max and sum, then runs the three loops in reverse; under strict math the reversed loops that add
into ``adj_s``/``adj_m`` are split so that their ``exp`` vectorizes, dsl/lang/adjoint_fission.py,
and the row maximum's gradient finds its element with a search loop, dsl/lang/adjoint_first.py).  The softmax is compared with two hand-written
backwards: one that recomputes the softmax from ``x`` (the information the generated one uses)
and one that reads the forward's output ``y`` (``dx = y * (dy - sum(dy * y))``); then both
recomputing kernels again with ``fastmath=True``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import dsl  # noqa: E402
from dsl import In, InOut, Out, f32  # noqa: E402
from benchmarks.harness import fmt_seconds, load_text, measure_interleaved  # noqa: E402


@dsl.kernel(threads=64)
def elementwise(x: In[f32], y: Out[f32], alpha: f32):
    lo, hi = dsl.split(x.shape[0])
    for i in range(lo, hi):
        v = x[i]
        y[i] = dsl.exp(v) * v + alpha * dsl.sin(v) / (1.0 + v * v)


@dsl.kernel(threads=64)
def elementwise_backward(x: In[f32], y: Out[f32], alpha: f32, grad_y: In[f32], grad_x: InOut[f32]):
    lo, hi = dsl.split(x.shape[0])
    for i in range(lo, hi):
        v = x[i]
        q = 1.0 + v * v
        d = dsl.exp(v) * (1.0 + v) + alpha * (dsl.cos(v) * q - 2.0 * v * dsl.sin(v)) / (q * q)
        grad_x[i] += grad_y[i] * d


@dsl.kernel(threads=64)
def softmax(x: In[f32, 2], y: Out[f32, 2]):
    lo, hi = dsl.split(x.shape[0])
    for r in range(lo, hi):
        m = -3.0e38
        for j in range(x.shape[1]):
            m = max(m, x[r, j])
        s = 0.0
        for j in range(x.shape[1]):
            s += dsl.exp(x[r, j] - m)
        for j in range(x.shape[1]):
            y[r, j] = dsl.exp(x[r, j] - m) / s


@dsl.kernel(threads=64)
def softmax_backward_recompute(x: In[f32, 2], y: Out[f32, 2], grad_y: In[f32, 2], grad_x: InOut[f32, 2]):
    lo, hi = dsl.split(x.shape[0])
    for r in range(lo, hi):
        m = -3.0e38
        for j in range(x.shape[1]):
            m = max(m, x[r, j])
        s = 0.0
        for j in range(x.shape[1]):
            s += dsl.exp(x[r, j] - m)
        inv = 1.0 / s
        dot = 0.0
        for j in range(x.shape[1]):
            dot += grad_y[r, j] * dsl.exp(x[r, j] - m) * inv
        for j in range(x.shape[1]):
            grad_x[r, j] += dsl.exp(x[r, j] - m) * inv * (grad_y[r, j] - dot)


@dsl.kernel(threads=64)
def softmax_backward_from_y(y: In[f32, 2], grad_y: In[f32, 2], grad_x: InOut[f32, 2]):
    lo, hi = dsl.split(y.shape[0])
    for r in range(lo, hi):
        dot = 0.0
        for j in range(y.shape[1]):
            dot += grad_y[r, j] * y[r, j]
        for j in range(y.shape[1]):
            grad_x[r, j] += y[r, j] * (grad_y[r, j] - dot)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--cols", type=int, default=512)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"load before: {load_text()}")
    print("| case | generated best (median) | hand-written best (median) | generated / hand |")
    print("|---|---:|---:|---:|")

    x = rng.standard_normal(args.n).astype(np.float32)
    y, gy = np.zeros_like(x), rng.standard_normal(args.n).astype(np.float32)
    g1, g2 = np.zeros_like(x), np.zeros_like(x)
    gen = dsl.grad(elementwise)
    gen(x, y, 0.5, gy, g1)
    elementwise_backward(x, y, 0.5, gy, g2)
    np.testing.assert_allclose(g1, g2, rtol=1e-4, atol=1e-4)
    t = measure_interleaved({"gen": lambda: gen(x, y, 0.5, gy, g1),
                             "hand": lambda: elementwise_backward(x, y, 0.5, gy, g2)}, repeat=args.repeat)
    _row(f"elementwise, n={args.n}", t["gen"], t["hand"])

    x = rng.standard_normal((args.rows, args.cols)).astype(np.float32)
    y, gy = np.zeros_like(x), rng.standard_normal(x.shape).astype(np.float32)
    softmax(x, y)
    g1, g2, g3 = np.zeros_like(x), np.zeros_like(x), np.zeros_like(x)
    gen = dsl.grad(softmax)
    gen(x, y, gy, g1)
    softmax_backward_recompute(x, y, gy, g2)
    softmax_backward_from_y(y, gy, g3)
    np.testing.assert_allclose(g1, g2, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(g1, g3, rtol=1e-3, atol=1e-5)
    t = measure_interleaved({"gen": lambda: gen(x, y, gy, g1),
                             "recompute": lambda: softmax_backward_recompute(x, y, gy, g2),
                             "from_y": lambda: softmax_backward_from_y(y, gy, g3)}, repeat=args.repeat)
    _row(f"row softmax {args.rows}x{args.cols} vs hand recomputing from x", t["gen"], t["recompute"])
    _row(f"row softmax {args.rows}x{args.cols} vs hand reading y", t["gen"], t["from_y"])

    # fastmath=True on both sides (the gradient kernel inherits the forward's options): the
    # reductions of the reversed loops may then vectorize, as the hand-written ones do
    fast_gen = dsl.grad(dsl.kernel(threads=64, fastmath=True)(softmax.fn))
    fast_hand = dsl.kernel(threads=64, fastmath=True)(softmax_backward_recompute.fn)
    fast_gen(x, y, gy, g1)
    fast_hand(x, y, gy, g2)
    t = measure_interleaved({"gen": lambda: fast_gen(x, y, gy, g1), "hand": lambda: fast_hand(x, y, gy, g2)},
                            repeat=args.repeat)
    _row(f"row softmax {args.rows}x{args.cols}, fastmath=True, vs hand recomputing from x", t["gen"], t["hand"])
    print(f"load after: {load_text()}")
    return 0


def _row(name, gen, hand) -> None:
    print(f"| {name} | {fmt_seconds(gen.best)} ({fmt_seconds(gen.median)}) | {fmt_seconds(hand.best)} "
          f"({fmt_seconds(hand.median)}) | {gen.best / hand.best:.2f}x |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
