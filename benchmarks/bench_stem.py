"""The plain-image stem kernel (ops/conv_stem.py) alone, against another tree's, on one core.

The kernel's launch is bound once (no Python per call) and the two sides alternate in one
process, CPU time (``time.process_time``), best and median of ``--reps``: on a machine shared
with other jobs only such ratios hold.  Shapes: ResNet-50's 3,224->64 7x7/2 stem, squeezenet's
3,224->64 3x3/2 and its 16,55->64 3x3 expand on plain input (plain in, plain out, Relu).

    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_stem --base DIR [--reps 30]

``DIR`` is another tree (e.g. ``git archive`` of a branch point); set ``OPDSL_CPU`` to compile
both for another kind of CPU (docs/ops.md).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.bench_f32_cpu import _Bound  # noqa: E402

# (C, H=W, M, k, stride, pad)
SHAPES = ((3, 224, 64, 7, 2, 3), (3, 224, 64, 3, 2, 0), (16, 55, 64, 3, 1, 1))
ACT_RELU = 1


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, str(path))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def bound_launch(mod, x, w, b, y, stride: int, pad: int):
    """``mod``'s conv_stem launch for these arrays, bound (weights packed once)."""
    bound = _Bound(mod.conv_stem)
    mod.launch_conv_stem(bound, x, w, b, y, None, (stride, stride), (1, 1), (pad, pad), False, "numba",
                         ACT_RELU, 0.0, 0.0)
    return bound.launch


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="another tree whose ops/conv_stem.py is the base side")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args(argv)
    import ops.conv_stem as now
    base = _module(Path(a.base) / "ops" / "conv_stem.py", "base_conv_stem")
    rng = np.random.default_rng(0)
    for c, hw, m, k, s, p in SHAPES:
        x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
        w = (rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        oh = (hw + 2 * p - k) // s + 1
        sides = {}
        for name, mod in (("base", base), ("now", now)):
            y = np.empty((1, m, oh, oh), np.float32)
            run = bound_launch(mod, x, w, b, y, s, p)
            run()
            sides[name] = (run, y, [])
        diff = float(np.abs(sides["now"][1] - sides["base"][1]).max())
        if diff > 1e-4:
            raise SystemExit(f"{c},{hw}->{m} {k}x{k}/{s}: the two trees differ by {diff}")
        order = list(sides.values())
        for r in range(a.reps):
            for run, _, times in (order if r % 2 == 0 else order[::-1]):
                t = time.process_time()
                run()
                times.append(time.process_time() - t)
        (tb, tn) = (np.array(sides[k][2]) * 1e3 for k in ("base", "now"))
        flops = 2 * m * oh * oh * c * k * k
        print(f"{c},{hw}->{m} {k}x{k}/{s}: base best {tb.min():.3f} med {np.median(tb):.3f} ms | now best "
              f"{tn.min():.3f} med {np.median(tn):.3f} ms ({flops / tn.min() / 1e6:.0f} GFLOP/s) | now/base best "
              f"{tn.min() / tb.min():.3f} med {np.median(tn) / np.median(tb):.3f}", flush=True)


if __name__ == "__main__":
    main()
