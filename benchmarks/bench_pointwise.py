"""Squeezenet's and ResNet-50's 1×1 convolutions alone, as the model runs them (NCHWc16 in and
out, bias + Relu), on the parallel entry: best and median µs per layer, and the work split
(tile path, items, grid).  ``--base FILE`` times a second copy of ops/conv_pointwise.py (e.g.
``git show HEAD:ops/conv_pointwise.py``) alternating with this one, for A/B on a noisy machine.

    python -m benchmarks.bench_pointwise [--base /tmp/old_pw.py] [--rounds 30] [--only sq] [--serial] [--cpu] [--res]
                                         [--evict 64]

``--res`` adds a residual before the Relu (ResNet's expanding 1×1 layers: FusedConv with Add);
``--no-act`` leaves the Relu out (ResNet's projections, a Conv whose output a Sum reads).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import backends.numba.backend as numba_backend  # noqa: E402
from ops import conv_pointwise as pw  # noqa: E402
from ops.gemm_packed import ACT_RELU  # noqa: E402

# name: (C, H, W, M, stride, blocked x, blocked y)
LAYERS = {
    "sq55 64>16": (64, 55, 55, 16, 1, True, True),
    "sq55 128>16": (128, 55, 55, 16, 1, True, True),
    "ex55 16>64": (16, 55, 55, 64, 1, True, True),
    "sq27 128>32": (128, 27, 27, 32, 1, True, True),
    "sq27 256>32": (256, 27, 27, 32, 1, True, True),
    "ex27 32>128": (32, 27, 27, 128, 1, True, True),
    "sq13 256>48": (256, 13, 13, 48, 1, True, True),
    "sq13 384>48": (384, 13, 13, 48, 1, True, True),
    "sq13 384>64": (384, 13, 13, 64, 1, True, True),
    "sq13 512>64": (512, 13, 13, 64, 1, True, True),
    "ex13 48>192": (48, 13, 13, 192, 1, True, True),
    "ex13 64>256": (64, 13, 13, 256, 1, True, True),
    "head 512>1000": (512, 13, 13, 1000, 1, True, True),
    "r50 64>256 56": (64, 56, 56, 256, 1, True, True),
    "r50 64>256 56 plain x": (64, 56, 56, 256, 1, False, True),  # the projection after the plain stem
    "r50 256>64 56": (256, 56, 56, 64, 1, True, True),
    "r50 64>64 56": (64, 56, 56, 64, 1, True, True),
    "r50 256>128 56": (256, 56, 56, 128, 1, True, True),
    "r50 512>128 28": (512, 28, 28, 128, 1, True, True),
    "r50 128>512 28": (128, 28, 28, 512, 1, True, True),
    "r50 512>256 28": (512, 28, 28, 256, 1, True, True),
    "r50 256>1024 14": (256, 14, 14, 1024, 1, True, True),
    "r50 1024>512 14": (1024, 14, 14, 512, 1, True, True),
    "r50 256>512 s2": (256, 56, 56, 512, 2, True, True),
    "r50 512>1024 s2": (512, 28, 28, 1024, 2, True, True),
    "r50 1024>2048 s2": (1024, 14, 14, 2048, 2, True, True),
    "r50 1024>256 14": (1024, 14, 14, 256, 1, True, True),
    "r50 512>2048 7": (512, 7, 7, 2048, 1, True, True),
    "r50 2048>512 7": (2048, 7, 7, 512, 1, True, True),
    "plain 1024>256 14": (1024, 14, 14, 256, 1, False, False),
    "plain 256>512 s2": (256, 56, 56, 512, 2, False, False),
    "plain 512>1000 13": (512, 13, 13, 1000, 1, False, False),
}


def load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def blocked(a: np.ndarray) -> np.ndarray:
    n, c, h, w = a.shape
    cb = -(-c // 16)
    out = np.zeros((n, cb * 16, h, w), a.dtype)
    out[:, :c] = a
    return np.ascontiguousarray(out.reshape(n, cb, 16, h, w).transpose(0, 1, 3, 4, 2))


def setup(layer):
    c, h, w, m, s, bx, by = layer
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    oh, ow = (h - 1) // s + 1, (w - 1) // s + 1
    ref = np.einsum("oc,nchw->nohw", wt[:, :, 0, 0], x[:, :, ::s, ::s]) + b[None, :, None, None]
    res = None
    if RES:
        res_plain = rng.standard_normal(ref.shape).astype(np.float32)
        ref = ref + res_plain
        res = blocked(res_plain) if by else res_plain
    if ACT == ACT_RELU:
        ref = np.maximum(ref, 0)
    xi = blocked(x) if bx else x
    wt.setflags(write=False)  # a graph constant: packed once
    b.setflags(write=False)
    y = np.zeros((1, -(-m // 16), oh, ow, 16) if by else (1, m, oh, ow), np.float32)
    return xi, wt, b, y, ref, bx, (s, s), res


class Recorder:
    """Takes the launches ``launch_conv_pointwise`` makes (a gather, then the convolution, where
    x's pixels are not consecutive) and keeps them bound, so the timed loop runs only the kernel
    (no argument binding, no packing lookup) on the serial or the parallel entry."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.launches = []

    def __call__(self, *args, backend=None, grid=None, **kwargs):
        launcher, values, g = self.kernel.prepare(args, kwargs, backend=backend, grid=grid)
        values = launcher._adapt(values)
        self.launches.append((launcher, values, g))


def bound(mod, args):
    """A no-argument function running ``mod``'s kernel on ``args`` as the model would."""
    xi, wt, b, y, _, bx, st, res = args
    rec = Recorder(mod.conv_pointwise)
    mod.launch_conv_pointwise(rec, xi, wt, b, y, res, st, bx, "numba", ACT, 0.0, 0.0)
    if SERIAL:
        runs = [(launcher._run, launcher._serial, values, g) for launcher, values, g in rec.launches]
        return lambda: [run(entry, values, g) for run, entry, values, g in runs]
    runs = [(launcher._run_parallel, values, g) for launcher, values, g in rec.launches]
    return lambda: [run(values, g) for run, values, g in runs]


SERIAL = False
RES = False
ACT = ACT_RELU


def check(args):
    y, ref = args[3], args[4]
    got = y.transpose(0, 1, 4, 2, 3).reshape(1, -1, *y.shape[2:4])[:, :ref.shape[1]] if y.ndim == 5 else y
    return float(np.abs(got - ref).max())


def alternate(fns, times: dict, rounds: int, clock, calls: int, before=None) -> None:
    """Append to ``times[name]`` the µs a call of each (name, fn) of ``fns`` takes, ``calls`` calls a
    sample, the sides taking turns in an order that flips each round (so neither always runs right
    after the other's cache traffic); ``before()``, untimed, precedes each sample."""
    for r in range(rounds):
        for k, fn in (fns if r % 2 == 0 else fns[::-1]):
            if before is not None:
                before()
            t0 = clock()
            for _ in range(calls):
                fn()
            times[k].append((clock() - t0) / calls * 1e6)


def report(label: str, times: dict, mflop: float) -> None:
    """One line: each side's best and median µs, new/base ratios where a base ran, new's GFLOP/s."""
    row = " ".join(f"{k} best {min(v):7.1f} med {np.median(v):7.1f}" for k, v in times.items())
    ratio = (f" new/base best {min(times['new']) / min(times['base']):.2f} med "
             f"{np.median(times['new']) / np.median(times['base']):.2f}" if "base" in times else "")
    print(f"{label} {row}{ratio}  ({mflop / min(times['new']):.0f} GFLOP/s)", flush=True)


def work(layer) -> float:
    """A 1×1 layer's multiply-adds × 2 / 1e3: divided by µs, GFLOP/s (``report``'s third argument)."""
    c, h, w, m, s = layer[:5]
    return 2 * c * m * ((h - 1) // s + 1) * ((w - 1) // s + 1) / 1e3


def ab_arguments(rounds: int) -> argparse.ArgumentParser:
    """The options of both conv A/B benchmarks (this one and bench_direct), as a ``parents=`` parser."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--base", help="a second copy of the op module, timed alternating with this one")
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--only", default="", help="the layers whose name contains this")
    ap.add_argument("--serial", action="store_true", help="time the serial entry (one core)")
    ap.add_argument("--cpu", action="store_true", help="CPU time (time.process_time): on a shared machine")
    ap.add_argument("--evict", type=int, default=0, metavar="MB",
                    help="write MB of other data, then read x, before every call (one call a sample): the "
                         "weights come from L3 and x from L2, as in a model run")
    return ap


def evictor(mb: int, x: np.ndarray):
    """``before`` for ``alternate``: ``mb`` MB written a line at a time (the layer's weights and
    output leave L2), then ``x`` read (the previous layer just wrote it)."""
    junk = np.zeros((mb << 20) // 4, np.float32)

    def evict():
        junk[::16] += 1
        x.sum()
    return evict


def ab_layers(layers: dict, mods: list, opts, setup, bind, check, calls: int, mflop, width: int) -> None:
    """Both conv benchmarks' A/B loop: per layer that ``opts.only`` picks, each (label, module) of
    ``mods`` bound to the same arguments (``bind(mod, args)``), run once and checked against the
    reference (``check(args)``), then timed in turns (``alternate``) and reported with
    ``mflop(layer)``."""
    clock = time.process_time if opts.cpu else time.perf_counter
    for name, layer in layers.items():
        if opts.only and opts.only not in name:
            continue
        args = setup(layer)
        fns = []
        for k, mod in mods:
            args[3][...] = 0
            fn = bind(mod, args)
            fn()
            err = check(args)
            if err > 1e-3:
                print(f"  {name} {k}: max error {err}")
            fns.append((k, fn))
        times = {k: [] for k, _ in mods}
        evict = getattr(opts, "evict", 0)
        alternate(fns, times, opts.rounds, clock, 1 if evict else calls, evictor(evict, args[0]) if evict else None)
        report(f"{name:{width}s}", times, mflop(layer))


def main():
    ap = argparse.ArgumentParser(parents=[ab_arguments(rounds=30)])
    ap.add_argument("--res", action="store_true", help="a residual added before the Relu")
    ap.add_argument("--no-act", action="store_true", help="no Relu (ResNet's projections)")
    a = ap.parse_args()
    global SERIAL, RES, ACT
    SERIAL, RES, ACT = a.serial, a.res, 0 if a.no_act else ACT_RELU
    numba_backend.SERIAL_MAX_ELEMENTS = 0  # every launch on the parallel entry
    mods = [("new", pw)] + ([("base", load_module(a.base, "pw_base"))] if a.base else [])
    ab_layers(LAYERS, mods, a, setup, bound, check, calls=5, mflop=work, width=20)


if __name__ == "__main__":
    main()
