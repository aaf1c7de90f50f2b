"""The 1×1 kernel's item order (ops/conv_pointwise.py ``G_PIXEL_MAJOR``: oc groups innermost up to
``PIXEL_MAJOR_MAX_C`` input channels) against group-major everywhere, on a whole model: CPU time,
one thread, the sides alternated in one process, best and median.

    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_pointwise_order [--rounds 60] [--only resnet50]

Four copies are loaded new, old, old, new (each side one early and one late copy; different
``max_tensor_bytes`` keep the plan cache from handing them the same launches, and a copy's
launches keep the order chosen at its load) and run in rotating order.
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


def bench_model(name: str, rounds: int) -> None:
    import onnx
    import dsl
    from benchmarks import models
    path = str(models.light_model_path(name))
    feeds = models.random_feeds(onnx.load(path))
    limit = pw.PIXEL_MAJOR_MAX_C
    copies = []
    try:
        for i, new in enumerate((True, False, False, True)):
            pw.PIXEL_MAJOR_MAX_C = limit if new else 0
            model = dsl.load_onnx(path, backend="numba", max_tensor_bytes=(4 << 30) - 1 - i)
            model.run(feeds)
            copies.append((new, model))
    finally:
        pw.PIXEL_MAJOR_MAX_C = limit
    t = {True: [], False: []}
    for r in range(rounds):
        for new, model in copies[r % 4:] + copies[:r % 4]:
            t0 = time.process_time()
            model.run(feeds)
            t[new].append(time.process_time() - t0)
    print(f"{name}: pixel-major up to {limit} channels best {min(t[True]) * 1e3:.2f} ms, group-major "
          f"{min(t[False]) * 1e3:.2f} ms: new/old best {min(t[True]) / min(t[False]):.3f}, median "
          f"{np.median(t[True]) / np.median(t[False]):.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--only", default="resnet50", help="the model (light_<name>)")
    args = ap.parse_args()
    bench_model(args.only, args.rounds)


if __name__ == "__main__":
    main()
