"""The packed f32 GEMM's cache blocks and knobs, side by side on one core (issue 29).

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \\
        python -m benchmarks.bench_gemm_blocks --shapes 1024x1024x1024,256x256x256 \\
        --variant mc192=16,8,256,192,2048 --variant mc64=16,8,256,64,2048 --variant nopf=,,,,,0

Each ``--variant NAME=V,MR,KC,MC,NC[,PREFETCH_Y]`` is a ``TileConfig`` (empty fields: the
target's own) and optionally ``prefetch_y`` forced to 0 or 1.  Shapes are M×K×N.  Every variant
launches the serial entry on its own output and packing buffers; the variants and numpy are
alternated call by call and each keeps its best CPU time (``time.process_time``), printed as
GFLOP/s and as a ratio to numpy.  A shared machine moves single runs by ±5 %: run it several
times and read the ratios.  Timing scripts, not tests; results go to benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.bench_f32_cpu import _Bound  # noqa: E402


def parse_variant(spec: str, base):
    """``NAME=V,MR,KC,MC,NC[,PREFETCH_Y]`` -> (name, TileConfig, prefetch_y or None)."""
    name, _, fields = spec.partition("=")
    values = fields.split(",") if fields else []
    keys = ("V", "MR", "KC", "MC", "NC")
    changes = {k: int(v) for k, v in zip(keys, values) if v != ""}
    prefetch_y = int(values[5]) if len(values) > 5 and values[5] != "" else None
    return name, dataclasses.replace(base, **changes), prefetch_y


def run(shapes, variants, reps: int) -> None:
    from ops import gemm_packed
    rng = np.random.default_rng(0)
    for m, k, n in shapes:
        a = rng.standard_normal((1, m, k)).astype(np.float32)
        b = (rng.standard_normal((1, k, n)) / np.sqrt(k)).astype(np.float32)
        want = a @ b
        out = np.empty_like(want)
        sides = {"numpy": lambda: np.matmul(a, b, out=out)}
        for name, cfg, prefetch_y in variants:
            y = np.empty_like(want)
            bound = _Bound(gemm_packed.gemm_packed)
            gemm_packed.packed_gemm(a, b, np.zeros((1, 1), np.float32), y, beta=0.0, backend="numba", kernel=bound,
                                    cores=1, config=cfg, prefetch_y=prefetch_y)
            bound.launch()
            err = float(np.abs(y - want).max())
            if err > 1e-3 * np.sqrt(k):
                raise SystemExit(f"{m}x{k}x{n} ({name}): differs from numpy by {err}")
            sides[name] = bound.launch
        times = {name: [] for name in sides}
        order = list(sides.items())
        for r in range(reps):
            for name, fn in (order if r % 2 == 0 else order[::-1]):
                t = time.process_time()
                fn()
                times[name].append(time.process_time() - t)
        rate = {name: 2 * m * k * n / min(v) / 1e9 for name, v in times.items()}
        print(f"{m}x{k}x{n}: " + "  ".join(f"{name} {g:.1f} ({g / rate['numpy']:.2f})" for name, g in rate.items()),
              flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="1024x1024x1024,256x256x256", help="M×K×N, comma-separated")
    ap.add_argument("--variant", action="append", default=[], help="NAME=V,MR,KC,MC,NC[,PREFETCH_Y]")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args(argv)
    from ops import gemm_packed
    base = gemm_packed.tile_config("numba")
    variants = [parse_variant(s, base) for s in (args.variant or ["target="])]
    shapes = [tuple(int(d) for d in s.split("x")) for s in args.shapes.split(",")]
    print(f"target tile {base}; " + "; ".join(f"{n}: {c}, prefetch_y {p}" for n, c, p in variants), flush=True)
    run(shapes, variants, args.reps)


if __name__ == "__main__":
    main()
