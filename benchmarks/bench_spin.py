"""Two-thread runs against libgomp's spin count, without onnxruntime in the process (its
spinning pool would take the cores).  The spin count is read when libgomp loads, so each
setting needs its own process.

``bert`` (or a light model's name): the model on one or two numba threads, back to back and with
a pause before each run (workers asleep, as after an idle spell):

    for s in 3000 300000 3000000; do GOMP_SPINCOUNT=$s python -m benchmarks.bench_spin bert; done

``batched``: the attention product 4x128x128 @ 4x128x64 (``Model.run`` of a one-node MatMul) on
one and on two numba threads, alternated in rounds with numpy's matmul on two OpenBLAS threads,
which runs in a child process of its own with OpenBLAS's overrides removed (so neither pool
spins in the other's process), each side back to back and after a pause:

    for s in 3000 300 0; do GOMP_SPINCOUNT=$s python -m benchmarks.bench_spin batched --rounds 8; done
    for on in 0 1; do OPDSL_WORKERS_OFF_LAUNCH_CORE=$on python -m benchmarks.bench_spin batched; done

(the second compares the workers placed by the OS with the workers kept off the launching
thread's core, backends/numba/worker_cores.py).

Timing script, not a test; results go to benchmarks/RESULTS.md by hand.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numba  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.blas_child import clean_blas_env  # noqa: E402
from benchmarks.harness import load_text  # noqa: E402

WARM_S = 0.1  # untimed calls before each block: the side's own pool settles, the other's sleeps


def model_runs(name: str = "bert", runs: int = 20) -> None:
    """A model's runs on one and two numba threads, with and without a 20 ms pause before each."""
    import onnx

    import dsl
    from benchmarks import models
    path = str(models.bert_layer() if name == "bert" else models.light_model_path(name))
    feeds = models.random_feeds(onnx.load(path))
    model = dsl.load_onnx(path)
    model.run(feeds)
    rows = []
    for threads in (1, 2):
        numba.set_num_threads(threads)
        for pause in (0.0, 0.02):
            times = []
            for _ in range(runs):
                time.sleep(pause)
                t = time.perf_counter()
                model.run(feeds)
                times.append(time.perf_counter() - t)
            times.sort()
            rows.append(f"{threads} thread(s), pause {pause * 1e3:.0f} ms: best {times[0] * 1e3:.2f} "
                        f"median {times[runs // 2] * 1e3:.2f} ms")
    print(f"{name}, GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', '-')}: " + " | ".join(rows))


def timed_block(fn, calls: int, pause: float):
    """(per-call seconds, CPU seconds per call) of ``calls`` single calls after ``WARM_S`` of
    untimed ones; ``pause`` seconds of sleep (untimed) before each timed call.  The CPU time is
    the whole block's, pauses included: what every thread of the process burnt, spinning too
    (a µs-scale call's own CPU time is not usable: the clock lags the second thread's time)."""
    t_end = time.perf_counter() + WARM_S
    while time.perf_counter() < t_end:
        fn()
    times = []
    c0 = time.process_time()
    for _ in range(calls):
        if pause:
            time.sleep(pause)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times, (time.process_time() - c0) / calls


def _every_core() -> None:
    """The numpy child's CPU mask: every core, not the parent's (OMP_PROC_BIND binds its launching
    thread; OpenBLAS starts its threads with the mask numpy is imported under)."""
    os.sched_setaffinity(0, range(os.cpu_count() or 1))


def numpy_child(a_shape, b_shape) -> None:
    """Serve numpy's timed blocks: a line "calls pause" in, a JSON [times, cpu per call] line out."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal(a_shape, dtype=np.float32)
    b = rng.standard_normal(b_shape, dtype=np.float32)
    out = np.empty(a_shape[:-1] + b_shape[-1:], np.float32)
    for line in sys.stdin:
        calls, pause = line.split()
        times, cpu = timed_block(lambda: np.matmul(a, b, out=out), int(calls), float(pause))
        print(json.dumps([times, cpu]), flush=True)


def batched(rounds: int, calls: int, pause: float, a_shape=(4, 128, 128), b_shape=(4, 128, 64)) -> None:
    """The attention product's Model.run on one and two threads against numpy's two threads."""
    import dsl
    from benchmarks import op_models
    a, b = op_models.random_inputs([a_shape, b_shape], seed=1)
    model = dsl.load_onnx(op_models.matmul_model(a_shape, b_shape), backend="numba")
    feeds = {"a": a, "b": b}
    np.testing.assert_allclose(model.run(feeds)["y"], a @ b, rtol=1e-4, atol=1e-3)
    child = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_spin", "numpy-child",
                              ",".join(map(str, a_shape)), ",".join(map(str, b_shape))],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=clean_blas_env(),
                             preexec_fn=_every_core if hasattr(os, "sched_setaffinity") else None,
                             cwd=str(Path(__file__).resolve().parent.parent))

    def numpy_side(n, p):
        child.stdin.write(f"{n} {p}\n")
        child.stdin.flush()
        return tuple(json.loads(child.stdout.readline()))

    def ours(threads):
        def side(n, p):
            numba.set_num_threads(threads)
            try:
                return timed_block(lambda: model.run(feeds), n, p)
            finally:
                numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        return side

    sides = {"numpy, 2 threads": numpy_side, "opdsl, 2 threads": ours(2), "opdsl, 1 thread": ours(1)}
    modes = {"back to back": 0.0, f"after {pause * 1e3:g} ms": pause}
    spin = os.environ.get("GOMP_SPINCOUNT", "-")
    print(f"{'x'.join(map(str, a_shape))} @ {'x'.join(map(str, b_shape))}, GOMP_SPINCOUNT={spin}, "
          f"{rounds} rounds of {calls} calls a side, load {load_text()}", flush=True)
    per_round = {(m, s): [] for m in modes for s in sides}
    cpu = {(m, s): [] for m in modes for s in sides}
    for _ in range(rounds):
        for mode, p in modes.items():
            for name, side in sides.items():
                times, c = side(calls if not p else max(1, calls // 4), p)
                per_round[mode, name].append(times)
                cpu[mode, name].append(c)
    child.stdin.close()
    child.wait()
    print("| mode | side | best µs | median µs | mean µs | round bests, µs (min-max) | CPU µs a call | "
          "opdsl / numpy, best (round ratios min-max) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for mode in modes:
        ref = per_round[mode, "numpy, 2 threads"]
        for name in sides:
            rs = per_round[mode, name]
            every = sorted(t for r in rs for t in r)
            bests = [min(r) * 1e6 for r in rs]
            ratio = "—"
            if name != "numpy, 2 threads":
                ratios = [min(x) / min(y) for x, y in zip(ref, rs)]  # time ratio = speed ratio opdsl/numpy
                ratio = f"{min(t for r in ref for t in r) / every[0]:.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
            print(f"| {mode} | {name} | {every[0] * 1e6:.1f} | {statistics.median(every) * 1e6:.1f} | "
                  f"{statistics.fmean(every) * 1e6:.1f} | "
                  f"{min(bests):.1f}-{max(bests):.1f} | {statistics.median(cpu[mode, name]) * 1e6:.1f} | {ratio} |")
    print(f"load at end {load_text()}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_spin", description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="?", default="bert", help="bert, a light model's name, or batched")
    ap.add_argument("shapes", nargs="*", help=argparse.SUPPRESS)  # numpy-child's shapes
    ap.add_argument("--rounds", type=int, default=6, help="batched: rounds of alternated blocks")
    ap.add_argument("--calls", type=int, default=200, help="batched: timed calls a side a round (a quarter after a pause)")
    ap.add_argument("--pause", type=float, default=0.005, help="batched: seconds of sleep before each paused call")
    args = ap.parse_args(argv)
    if args.what == "numpy-child":
        numpy_child(*(tuple(int(d) for d in s.split(",")) for s in args.shapes))
    elif args.what == "batched":
        batched(args.rounds, args.calls, args.pause)
    else:
        model_runs(args.what)
    return 0


if __name__ == "__main__":
    sys.exit(main())
