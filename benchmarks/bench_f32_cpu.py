"""f32 models and ResNet-50's conv shapes against onnxruntime on one core, in CPU time: on a
machine shared with other jobs, wall time swings 2-4x between runs, CPU time (``time.process_time``)
does not count descheduling.  The two sides alternate in one process and each keeps its best and
median; outputs are checked equal first.

    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_f32_cpu models [--reps 25] [--only resnet50]
    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_f32_cpu convs [--reps 15]

With NUMBA_NUM_THREADS=2 the models run on two threads a side and wall time is reported
(CPU time would add the two threads up).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks import models, op_models  # noqa: E402
from benchmarks.bench_ops import RESNET50_CONVS  # noqa: E402

MODELS = ("squeezenet", "resnet50", "bert")
# ResNet-50's three stride-2 1x1 projections, timed after the eight without a target
PROJECTIONS = ((256, 56, 512, 1, 2), (512, 28, 1024, 1, 2), (1024, 14, 2048, 1, 2))


def threads() -> int:
    return int(os.environ.get("NUMBA_NUM_THREADS", "1"))


def alternate(ours, theirs, reps: int, clock):
    """Seconds per call of both, alternating which goes first."""
    a, b = [], []
    for r in range(reps):
        for times, fn in (((a, ours), (b, theirs)) if r % 2 == 0 else ((b, theirs), (a, ours))):
            t = clock()
            fn()
            times.append(clock() - t)
    return np.array(a), np.array(b)


def line(label: str, a: np.ndarray, b: np.ndarray, unit: float, name: str) -> str:
    return (f"{label}: opdsl best {a.min() * unit:.2f} med {np.median(a) * unit:.2f} {name} | onnxruntime best "
            f"{b.min() * unit:.2f} med {np.median(b) * unit:.2f} {name} | ratio best {a.min() / b.min():.2f}x "
            f"med {np.median(a) / np.median(b):.2f}x")


def run_models(reps: int, only: str) -> None:
    import onnx
    import onnxruntime as ort

    import dsl
    n = threads()
    clock = time.process_time if n == 1 else time.perf_counter
    for name in MODELS:
        if only and only != name:
            continue
        path = str(models.bert_layer() if name == "bert" else models.light_model_path(name))
        proto = onnx.load(path)
        feeds = models.random_feeds(proto)
        model = dsl.load_onnx(path, backend="numba")
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = n, 1, 3
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        got, want = model.run(feeds), sess.run(None, feeds)[0]
        got = np.asarray(next(iter(got.values())) if isinstance(got, dict) else got[0])
        if not np.allclose(got, want, rtol=1e-3, atol=1e-3):
            raise SystemExit(f"{name}: opdsl and onnxruntime differ by {float(np.abs(got - want).max())}")
        a, b = alternate(lambda: model.run(feeds), lambda: sess.run(None, feeds), reps, clock)
        print(line(f"{name} ({n} thread{'s' * (n > 1)}, {'CPU' if n == 1 else 'wall'})", a, b, 1e3, "ms"),
              flush=True)


def run_convs(reps: int) -> None:
    ratios = []
    for shape in tuple(RESNET50_CONVS) + PROJECTIONS:
        c, hw, m, k, s = shape
        rng = np.random.default_rng(0)
        w = (rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        model = op_models.conv_model(c, hw, m, k, s, w, b)
        feeds = {"x": rng.standard_normal((1, c, hw, hw)).astype(np.float32)}
        ours, theirs = op_models.opdsl_runner(model, feeds), op_models.ort_runner(model, feeds, threads=1)
        diff = float(np.abs(ours() - theirs()).max())
        if diff > 1e-2:
            raise SystemExit(f"conv {shape}: opdsl and onnxruntime differ by {diff}")
        a, bt = alternate(ours, theirs, reps, time.process_time)
        if shape in RESNET50_CONVS:
            ratios.append(a.min() / bt.min())
        print(line(f"{c},{hw}->{m} {k}x{k} s{s}", a, bt, 1e6, "us"), flush=True)
    print(f"geomean of ResNet-50's eight (best): {float(np.exp(np.mean(np.log(ratios)))):.2f}x")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("models", "convs"))
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--only", default="", help=f"one model of {', '.join(MODELS)}")
    a = ap.parse_args(argv)
    if a.what == "models":
        run_models(a.reps, a.only)
    else:
        run_convs(a.reps)


if __name__ == "__main__":
    main()
