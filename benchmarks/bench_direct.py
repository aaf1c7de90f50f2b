"""Squeezenet's and ResNet-50's 3×3 convolutions alone, as the models run them (NCHWc16 in and
out, padding 1, bias + Relu: the padding copy and the convolution), on one core or both: best and
median µs per layer.  ``--base FILE`` times a second copy of ops/conv_direct.py (e.g. ``git show
<commit>:ops/conv_direct.py``) alternating with this one, for A/B on a shared machine.

    python -m benchmarks.bench_direct [--base /tmp/old_dc.py] [--rounds 20] [--only r50] [--serial] [--cpu]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import backends.numba.backend as numba_backend  # noqa: E402
from benchmarks.bench_f32_cpu import _module  # noqa: E402
from benchmarks.bench_pointwise import Recorder, ab_arguments, ab_layers, blocked, work  # noqa: E402
from ops import conv_direct as dc  # noqa: E402
from ops.gemm_packed import ACT_RELU  # noqa: E402

# name: (C, H, W, M, stride)
LAYERS = {
    "ex55 16>64": (16, 55, 55, 64, 1),
    "ex27 32>128": (32, 27, 27, 128, 1),
    "ex13 48>192": (48, 13, 13, 192, 1),
    "ex13 64>256": (64, 13, 13, 256, 1),
    "r50 64,56": (64, 56, 56, 64, 1),
    "r50 128,28": (128, 28, 28, 128, 1),
    "r50 256,14": (256, 14, 14, 256, 1),
    "r50 512,7": (512, 7, 7, 512, 1),
    "r50 128,56 s2": (128, 56, 56, 128, 2),
    "r50 256,28 s2": (256, 28, 28, 256, 2),
    "r50 512,14 s2": (512, 14, 14, 512, 2),
}


def setup(layer):
    c, h, w, m, s = layer
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    oh, ow = (h - 1) // s + 1, (w - 1) // s + 1
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[:, :, i:i + s * (oh - 1) + 1:s, j:j + s * (ow - 1) + 1:s]
                     for i in range(3) for j in range(3)], 2)  # (N, C, 9 taps, OH, OW)
    ref = np.maximum(np.einsum("ock,nckhw->nohw", wt.reshape(m, c, 9), cols) + b[None, :, None, None], 0)
    wt.setflags(write=False)  # a graph constant: packed once
    b.setflags(write=False)
    y = np.zeros((1, -(-m // 16), oh, ow, 16), np.float32)
    return blocked(x), wt, b, y, ref, (s, s)


def bound(mod, args, serial: bool):
    """A no-argument function running ``mod``'s padding copy and convolution as the model would."""
    xi, wt, b, y, _, st = args
    rec = Recorder(mod.conv_direct)
    mod.launch_conv_direct(rec, xi, wt, b, y, None, st, (1, 1), (1, 1), True, "numba", ACT_RELU, 0.0, 0.0)
    if serial:
        runs = [(launcher._run, launcher._serial, values, g) for launcher, values, g in rec.launches]
        return lambda: [run(entry, values, g) for run, entry, values, g in runs]
    runs = [(launcher._run_parallel, values, g) for launcher, values, g in rec.launches]
    return lambda: [run(values, g) for run, values, g in runs]


def check(args):
    y, ref = args[3], args[4]
    got = y.transpose(0, 1, 4, 2, 3).reshape(1, -1, *y.shape[2:4])[:, :ref.shape[1]]
    return float(np.abs(got - ref).max())


def main():
    a = argparse.ArgumentParser(parents=[ab_arguments(rounds=20)]).parse_args()
    numba_backend.SERIAL_MAX_ELEMENTS = 0  # every launch on the parallel entry
    mods = [("new", dc)] + ([("base", _module(a.base, "dc_base"))] if a.base else [])
    ab_layers(LAYERS, mods, a, setup, lambda mod, args: bound(mod, args, a.serial), check, calls=3,
              mflop=lambda layer: 9 * work(layer), width=16)  # nine taps: nine 1×1 layers' work


if __name__ == "__main__":
    main()
