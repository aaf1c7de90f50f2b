"""The 3×3 kernel's weight prefetch (ops/conv_direct.py, ``PREFETCH_MIN_BYTES``) inside a model,
where each layer's weights arrive cold: the model built twice in one process, without the
prefetch and with the tree's threshold, on one thread, alternated.

    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_direct_prefetch nodes resnet50 [--runs 20]
    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_direct_prefetch model resnet50 [--runs 30]

``nodes``: ``Model.profile`` single runs, each node at its minimum: the direct-kernel nodes side
by side.  ``model``: whole runs (CPU time) of both builds and onnxruntime, in rotating order:
best and median ms.  Plans are not read from the plan cache (they keep their launch values).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["OPDSL_PLAN_CACHE"] = "0"  # a cached plan would bring the other build's prefetch setting

import numpy as np  # noqa: E402

from benchmarks import models  # noqa: E402
from ops import conv_direct  # noqa: E402


def builds(name: str, on_min: int):
    """(feeds, path, model without the prefetch, model with it from ``on_min`` bytes of weights)."""
    import onnx

    import dsl
    path = str(models.light_model_path(name))
    feeds = models.random_feeds(onnx.load(path))
    kept = conv_direct.PREFETCH_MIN_BYTES
    try:
        conv_direct.PREFETCH_MIN_BYTES = 1 << 62
        off = dsl.load_onnx(path, backend="numba")
        off.run(feeds)
        conv_direct.PREFETCH_MIN_BYTES = on_min
        on = dsl.load_onnx(path, backend="numba")
        on.run(feeds)
    finally:
        conv_direct.PREFETCH_MIN_BYTES = kept
    return feeds, path, off, on


def nodes(off, on, feeds, runs: int) -> None:
    best = {"off": {}, "on": {}}
    info = {}
    for r in range(runs):
        for side, model in ((("off", off), ("on", on)) if r % 2 == 0 else (("on", on), ("off", off))):
            for row in model.profile(feeds, repeat=1, warmup=0).rows:
                best[side][row.name] = min(best[side].get(row.name, np.inf), row.mean_s * 1e3)
                info[row.name] = (row.impl, tuple(row.shape))
    print(f"sum of node minima: without {sum(best['off'].values()):.2f} ms, with {sum(best['on'].values()):.2f} ms")
    total = [0.0, 0.0]
    for node, (impl, shape) in info.items():
        if impl == "direct":
            a, b = best["off"][node], best["on"][node]
            total[0] += a
            total[1] += b
            print(f"  {node:12s} {str(shape):20s} without {a:6.3f} with {b:6.3f} ms  {b / a:.2f}")
    print(f"direct nodes: without {total[0]:.2f} ms, with {total[1]:.2f} ms ({total[1] / total[0]:.3f})")


def whole(off, on, feeds, path: str, runs: int) -> None:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    sides = [("without", lambda: off.run(feeds)), ("with", lambda: on.run(feeds)),
             ("onnxruntime", lambda: sess.run(None, feeds))]
    times = {k: [] for k, _ in sides}
    for r in range(runs):
        for k, fn in sides[r % 3:] + sides[:r % 3]:
            t0 = time.process_time()
            fn()
            times[k].append((time.process_time() - t0) * 1e3)
    b = {k: min(v) for k, v in times.items()}
    m = {k: float(np.median(v)) for k, v in times.items()}
    print(" | ".join(f"{k} best {b[k]:.1f} med {m[k]:.1f} ms" for k in times)
          + f" | with/without best {b['with'] / b['without']:.3f} med {m['with'] / m['without']:.3f}"
          + f" | to onnxruntime: without {b['without'] / b['onnxruntime']:.2f}x, with "
            f"{b['with'] / b['onnxruntime']:.2f}x")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("nodes", "model"))
    ap.add_argument("model", help="squeezenet or resnet50")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--on-min", type=int, default=conv_direct.PREFETCH_MIN_BYTES,
                    help="PREFETCH_MIN_BYTES of the prefetching build (default: the tree's)")
    a = ap.parse_args(argv)
    feeds, path, off, on = builds(a.model, a.on_min)
    if a.mode == "nodes":
        nodes(off, on, feeds, a.runs)
    else:
        whole(off, on, feeds, path, a.runs)


if __name__ == "__main__":
    main()
