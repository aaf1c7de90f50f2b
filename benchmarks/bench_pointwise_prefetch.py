"""The 1×1 kernel's weight prefetches (ops/conv_pointwise.py ``prefetch_mode``) on against off, on a
shared machine: CPU time, one thread, the sides alternated in one process, best and median.

    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_pointwise_prefetch layers [--rounds 31] [--sweep 64] [--bit x,y]
    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_pointwise_prefetch model [--rounds 40] [--only resnet50] [--bit x|y|weights]

``--bit`` switches kinds of prefetch off on the "off" side (``weights``: PF_WEIGHTS, ``x``:
PF_X, ``y``: PF_Y; comma-separated), the other kinds as ``prefetch_mode`` chooses on both sides; without it "off" prefetches nothing.

``layers``: ResNet-50's deep 1×1 layers alone (NCHWc16, bias + Relu, a residual where the model has
one), ``--sweep`` MB of other data read before every call (0: hot) so the weights come from L3 as
in a model.  ``model``: four copies of the model loaded on, off, off, on (the first-loaded copy ran
~4 % faster whichever it was, so each side gets one early and one late copy; different
``max_tensor_bytes`` keep the plan cache from handing them the same launches), run in rotating order.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ops import conv_pointwise as pw  # noqa: E402
from ops.gemm_packed import ACT_RELU  # noqa: E402

# name: (C, H = W, M, residual)
LAYERS = {"2048>512 7": (2048, 7, 512, False), "1024>256 14": (1024, 14, 256, False),
          "512>2048 7 res": (512, 7, 2048, True), "256>1024 14 res": (256, 14, 1024, True),
          "512>128 28": (512, 28, 128, False), "128>512 28 res": (128, 28, 512, True),
          "64>256 56 res": (64, 56, 256, True), "256>64 56": (256, 56, 64, False)}


BITS = {"weights": pw.PF_WEIGHTS, "x": pw.PF_X, "y": pw.PF_Y}


def switched(on: bool, bit: str, mode):
    """``mode`` (prefetch_mode) as it is, or without ``bit`` (without any prefetch when no bit is named)."""
    if on:
        return mode
    mask = sum(BITS[b] for b in bit.split(",")) if bit else 0
    return (lambda c, m: mode(c, m) & ~mask) if bit else (lambda c, m: 0)


def bench_layers(rounds: int, sweep_mb: int, bit: str = "") -> None:
    sweep = np.ones(max(1, (sweep_mb << 20) // 8))
    mode = pw.prefetch_mode
    rng = np.random.default_rng(0)
    for name, (c, hw, m, res) in LAYERS.items():
        x = rng.standard_normal((1, c // 16, hw, hw, 16)).astype(np.float32)
        w = (rng.standard_normal((m, c, 1, 1)) * 0.05).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        w.flags.writeable = b.flags.writeable = False  # constants: packed once
        y = np.empty((1, m // 16, hw, hw, 16), np.float32)
        z = rng.standard_normal(y.shape).astype(np.float32) if res else None
        t = {True: [], False: []}
        try:
            for r in range(rounds):
                for on in ((True, False) if r % 2 == 0 else (False, True)):
                    pw.prefetch_mode = mode if on else switched(False, bit, mode)
                    if sweep_mb:
                        sweep.sum()
                    t0 = time.process_time()
                    pw.launch_conv_pointwise(pw.conv_pointwise, x, w, b, y, z, (1, 1), True, "numba", ACT_RELU, 0.0, 0.0)
                    t[on].append(time.process_time() - t0)
        finally:
            pw.prefetch_mode = mode
        print(f"{name:16s} pf={mode(c, m)} on {min(t[True]) * 1e3:.3f} ms, off {min(t[False]) * 1e3:.3f} ms: on/off best "
              f"{min(t[True]) / min(t[False]):.3f}, median {np.median(t[True]) / np.median(t[False]):.3f}", flush=True)


def bench_model(name: str, rounds: int, bit: str = "") -> None:
    import onnx
    import dsl
    from benchmarks import models
    path = str(models.light_model_path(name))
    feeds = models.random_feeds(onnx.load(path))
    mode = pw.prefetch_mode
    copies = []
    try:
        for i, on in enumerate((True, False, False, True)):
            pw.prefetch_mode = mode if on else switched(False, bit, mode)
            model = dsl.load_onnx(path, backend="numba", max_tensor_bytes=(4 << 30) - 1 - i)
            model.run(feeds)
            copies.append((on, model))
    finally:
        pw.prefetch_mode = mode
    t = {True: [], False: []}
    for r in range(rounds):
        for on, model in copies[r % 4:] + copies[:r % 4]:
            t0 = time.process_time()
            model.run(feeds)
            t[on].append(time.process_time() - t0)
    print(f"{name}: on best {min(t[True]) * 1e3:.2f} ms, off {min(t[False]) * 1e3:.2f} ms: on/off best "
          f"{min(t[True]) / min(t[False]):.3f}, median {np.median(t[True]) / np.median(t[False]):.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("layers", "model"))
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--sweep", type=int, default=64, help="MB read before each layer call (0: hot)")
    ap.add_argument("--only", default="resnet50", help="the model (light_<name>)")
    ap.add_argument("--bit", default="", help=f"switch only these prefetches off: {', '.join(sorted(BITS))} (comma-separated)")
    args = ap.parse_args()
    if args.what == "layers":
        bench_layers(args.rounds or 31, args.sweep, args.bit)
    else:
        bench_model(args.only, args.rounds or 40, args.bit)


if __name__ == "__main__":
    main()
