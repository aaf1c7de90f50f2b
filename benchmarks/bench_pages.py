"""A model's speed against the pages its memory sits on, in one process: the same model loaded
twice from the plan cache -- once as before session 21 (activation buffers separate ``np.empty``
arrays on 4 KiB pages; weights mapped without the huge-page advice, though from the same entry,
which is now written in whole huge pages: the page cache may hold it as 2 MiB folios all the
same), once as now (the buffers carved from one huge-page mapping, dsl/runtime/huge_pages.py;
the entry mapped with the advice) -- a third time as a plan-cache miss ("built": its plan
built and its weights packed in this process, as in the process that compiled the model; a
miss runs the model restored with its weights on huge pages, plan_cache.on_huge_pages), and
onnxruntime, all four alternated round by round in blocks, CPU time, one core:

    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_pages [resnet50|squeezenet] [--reps 10] [--blocks 5]

Each block prints each side's best and the two opdsl sides' ratios to onnxruntime; the last
line gives the median and range over blocks of new/old and built/new.  One process, so both opdsl sides see
the same machine state; the plan cache must hold the model (a first run of this script fills
it: that first process measures a plan-cache miss for the first side, so run it twice).
Timing script, not a test; results go to benchmarks/RESULTS.md by hand.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from unittest import mock

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks import models  # noqa: E402


def small_pages(sizes):
    """The arena as it was: one np.empty per buffer (4 KiB pages under 4 MiB, 16 bytes past a line)."""
    return [np.empty(max(int(size), 1), np.uint8) for size in sizes]


def load(path: str, feeds, old: bool, built: bool = False):
    """The model loaded and run once, its memory laid out the old way or the new one; ``built``:
    a plan-cache miss (the plan built and packed in this process, as in the process that
    compiled the model; its entry written again)."""
    import dsl
    from dsl.opgraph import plan_cache
    from dsl.runtime import huge_pages
    env = {"OPDSL_HUGE_PAGES": "0"} if old else {}
    miss = mock.patch.object(plan_cache, "_read", lambda name: None) if built else mock.patch.dict({})
    with mock.patch.dict(os.environ, env), mock.patch.object(huge_pages, "carve", small_pages if old else huge_pages.carve), miss:
        model = dsl.load_onnx(path, backend="numba")
        model.run(feeds)
    plan_cache.wait_for_writes()
    return model


def huge_kb() -> int:
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("AnonHugePages"))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="resnet50", choices=("resnet50", "squeezenet"))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--blocks", type=int, default=5)
    a = ap.parse_args(argv)
    import onnx
    import onnxruntime as ort
    from dsl.opgraph import plan_cache
    path = str(models.light_model_path(a.model))
    feeds = models.random_feeds(onnx.load(path))
    before = huge_kb()
    old = load(path, feeds, old=True)
    mid = huge_kb()
    new = load(path, feeds, old=False)
    built = load(path, feeds, old=False, built=True)
    print(f"plan cache {plan_cache.stats}; AnonHugePages: +{(mid - before) >> 10} MB for the old layout, "
          f"+{(huge_kb() - mid) >> 10} MB for the new", flush=True)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)[0]
    for name, m in (("old", old), ("new", new), ("built", built)):
        got = np.asarray(next(iter(m.run(feeds).values())))
        if not np.allclose(got, want, rtol=1e-3, atol=1e-3):
            raise SystemExit(f"{name}: opdsl and onnxruntime differ by {float(np.abs(got - want).max())}")
    sides = {"old": lambda: old.run(feeds), "new": lambda: new.run(feeds), "built": lambda: built.run(feeds),
             "ort": lambda: sess.run(None, feeds)}
    order = list(sides)
    ratios, built_ratios = [], []
    for block in range(a.blocks):
        times = {k: [] for k in sides}
        for r in range(a.reps):
            for k in (order if r % 2 == 0 else order[::-1]):
                t = time.process_time()
                sides[k]()
                times[k].append(time.process_time() - t)
        best = {k: min(v) * 1e3 for k, v in times.items()}
        ratios.append(best["new"] / best["old"])
        built_ratios.append(best["built"] / best["new"])
        print(f"block {block + 1}: " + "  ".join(f"{k} {best[k]:.2f} ms ({best[k] / best['ort']:.3f}x ort)" for k in order[:-1])
              + f"  ort {best['ort']:.2f} ms  new/old {ratios[-1]:.3f}  built/new {built_ratios[-1]:.3f}", flush=True)
    print(f"{a.model}: new/old best, median of {a.blocks} blocks {float(np.median(ratios)):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f}); built/new {float(np.median(built_ratios)):.3f} "
          f"(range {min(built_ratios):.3f}-{max(built_ratios):.3f}); load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
