"""Where a whole model's time goes besides its kernels: waking OpenMP workers, Model.run's Python
work, and in-place launches (issue 10, "Speed and use").

    python -m benchmarks.bench_launch                       # all sections, squeezenet and the BERT layer
    python -m benchmarks.bench_launch --only wake --repeat 500
    python -m benchmarks.bench_launch --only models --models squeezenet,resnet50,bert

Sections:
- ``wake``: an empty 2-iteration ``prange`` launch after a gap of Python work, under libgomp's
  policies, each in a child process (the policy is read when libgomp loads): opdsl's default
  ``OMP_WAIT_POLICY=PASSIVE`` (workers sleep at once), a short spin (``GOMP_SPINCOUNT``) and
  ``OMP_WAIT_POLICY=ACTIVE``.  The 1-minute load average is printed: a spin only pays while the
  other cores are free.
- ``inplace``: elementwise kernels with their own output buffer vs in place (y is x), serial
  entry, 32K f32: why the memory plan runs only no-op nodes in place (dsl/opgraph/memory.py).
- ``models``: per model, the plan's launches (parallel / serial), Model.run's own Python work
  (every launch made a no-op, then every compiled call), and the run time.

Timing scripts, not tests; results go to benchmarks/RESULTS.md by hand.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, List

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.harness import load_text, machine_info  # noqa: E402

SECTIONS = ("wake", "inplace", "models")
POLICIES = (("PASSIVE (opdsl default)", {}), ("GOMP_SPINCOUNT=1000", {"GOMP_SPINCOUNT": "1000"}),
            ("OMP_WAIT_POLICY=ACTIVE", {"OMP_WAIT_POLICY": "ACTIVE"}))
GAPS_US = (0, 20, 1000, 10000)


def best_median(fn: Callable[[], object], repeat: int, before: Callable[[], object] = None):
    """(best, median) seconds of ``repeat`` single calls, ``before()`` untimed ahead of each."""
    fn()
    ts: List[float] = []
    for _ in range(repeat):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), statistics.median(ts)


def us(pair) -> str:
    return f"{pair[0] * 1e6:.1f} / {pair[1] * 1e6:.1f}"


# --------------------------------------------------------------------------- wake

def wake_child(repeat: int) -> None:
    """Runs in a child: one table row of empty parallel launch times per gap."""
    import importlib
    importlib.import_module("backends.numba.backend")  # opdsl's OpenMP defaults, as a model run sees them
    from numba import njit, prange

    @njit(parallel=True)
    def empty(a):
        for i in prange(a.size):
            a[i] += 1.0

    a = np.zeros(2, np.float32)

    def gap(seconds: float) -> Callable[[], None]:
        def wait():
            if seconds >= 0.005:
                time.sleep(seconds)
                return
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:  # Python work between launches, as in Model.run
                pass
        return wait

    cells = [us(best_median(lambda: empty(a), repeat if g < 5000 else max(20, repeat // 10), gap(g * 1e-6)))
             for g in GAPS_US]
    print("|".join(cells))


def wake(repeat: int) -> None:
    print(f"\n### Empty parallel launch (2 threads) after a gap: best / median us, {repeat} launches\n")
    print("| policy | " + " | ".join(f"gap {g} us" for g in GAPS_US) + " | load before |")
    print("|---|" + "---:|" * (len(GAPS_US) + 1))
    for name, env in POLICIES:
        child_env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        child_env.update(env)
        child_env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                   child_env.get("PYTHONPATH", "")])
        load = f"{os.getloadavg()[0]:.2f}"
        out = subprocess.run([sys.executable, "-m", "benchmarks.bench_launch", "--wake-child", str(repeat)],
                             env=child_env, capture_output=True, text=True, timeout=600)
        cells = out.stdout.strip().splitlines()[-1].split("|") if out.returncode == 0 else [out.stderr[-200:]]
        print(f"| {name} | " + " | ".join(cells) + f" | {load} |")


# --------------------------------------------------------------------------- in place

def inplace(repeat: int) -> None:
    from dsl.runtime.kernel import inplace_launches
    from ops.elementwise import ADD, SIGMOID, binary_kernel, relu_kernel, unary_kernel
    from ops.unary import EXP, NEG, float_math_kernel

    n = 1 << 15  # every launch below SERIAL_MAX_ELEMENTS (its tensors together): the serial entry
    rng = np.random.default_rng(0)
    other = rng.standard_normal(n).astype(np.float32)
    flat4 = (1, 1, 1, n)
    cases = [("Relu", lambda x, y: relu_kernel(x, y)),
             ("Neg", lambda x, y: float_math_kernel(x, y, op=NEG)),
             ("Exp", lambda x, y: float_math_kernel(x, y, op=EXP)),
             ("Sigmoid", lambda x, y: unary_kernel(x, y, op=SIGMOID, alpha=0.0)),
             ("Add", lambda x, y: binary_kernel(x.reshape(flat4), other.reshape(flat4), y.reshape(flat4), op=ADD))]
    print(f"\n### Elementwise kernels on {n} f32 (serial: below the parallel threshold), best / median us\n")
    print("| kernel | own output buffer | in place (y is x) | in place / own |")
    print("|---|---:|---:|---:|")
    for name, call in cases:
        x = (rng.standard_normal(n) * 0.1).astype(np.float32)
        y = np.empty_like(x)
        base = x.copy()
        own = best_median(lambda: call(x, y), repeat)
        with inplace_launches():  # refilled before each call: the values stay those of `own`
            same = best_median(lambda: call(x, x), repeat, before=lambda: np.copyto(x, base))
        print(f"| {name} | {us(own)} | {us(same)} | {same[0] / own[0]:.1f}x |")


# --------------------------------------------------------------------------- models

def model_path(name: str) -> str:
    if name == "bert":
        from benchmarks import models
        return str(models.bert_layer())
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")


def model_feeds(path: str):
    import onnx
    proto = onnx.load(path, load_external_data=False)
    inits = {t.name for t in proto.graph.initializer}
    rng = np.random.default_rng(0)
    return {i.name: rng.standard_normal([d.dim_value or 1 for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in proto.graph.input if i.name not in inits}


def launch_counts(model, feeds):
    """(parallel, serial) launches of one run, counted at the numba launcher."""
    from backends.numba import backend as nb
    counts = [0, 0]
    real = nb.NumbaLauncher._run

    def counting(self, fn, args, grid, kernel_args=None):
        counts[fn.__name__.startswith("launch_serial")] += 1
        return real(self, fn, args, grid, kernel_args)
    nb.NumbaLauncher._run = counting
    try:
        model.run(feeds)
    finally:
        nb.NumbaLauncher._run = real
    return counts


def python_work(model, feeds, repeat: int):
    """(run with every step a no-op, run with every compiled call a no-op): best / median seconds."""
    from backends.numba import backend as nb
    plan = next(iter(model._plans.values())).first
    steps = list(plan.steps)
    plan.steps[:] = [((lambda *a: None), args) for _, args in steps]
    try:
        empty = best_median(lambda: model.run(feeds), repeat)
    finally:
        plan.steps[:] = steps
    real = nb.NumbaLauncher._run
    nb.NumbaLauncher._run = lambda self, fn, args, grid, kernel_args=None: None
    try:
        dispatch = best_median(lambda: model.run(feeds), repeat)
    finally:
        nb.NumbaLauncher._run = real
    return empty, dispatch


def models_section(names: List[str], repeat: int) -> None:
    import dsl
    print(f"\n### Whole models (numba): launches and Model.run's own work, best / median of {repeat}\n")
    print("| model | steps | parallel / serial launches | run (ms) | steps as no-ops (us) | "
          "launcher Python work, no compiled call (us) | load |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in names:
        path = model_path(name)
        feeds = model_feeds(path)
        model = dsl.load_onnx(path, backend="numba")
        model.run(feeds)
        plan = next(iter(model._plans.values())).first
        par, ser = launch_counts(model, feeds)
        run = best_median(lambda: model.run(feeds), repeat)
        empty, dispatch = python_work(model, feeds, max(repeat, 100))
        print(f"| {name} | {len(plan.steps)} | {par} / {ser} | {run[0] * 1e3:.2f} / {run[1] * 1e3:.2f} | "
              f"{us(empty)} | {us(dispatch)} | {os.getloadavg()[0]:.2f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"sections: {', '.join(SECTIONS)}")
    ap.add_argument("--models", default="squeezenet,bert", help="light_<name> models of the onnx wheel, or bert")
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--wake-child", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.wake_child:
        wake_child(args.wake_child)
        return 0
    wanted = [s for s in args.only.split(",") if s]
    bad = [s for s in wanted if s not in SECTIONS]
    if bad:
        ap.error(f"unknown section(s) {', '.join(bad)}; choose from {', '.join(SECTIONS)}")
    print("\n".join(f"- {line}" for line in machine_info()))
    print(f"- load average at start: {load_text()}")
    if "wake" in wanted:
        wake(args.repeat)
    if "inplace" in wanted:
        inplace(args.repeat)
    if "models" in wanted:
        models_section([m for m in args.models.split(",") if m], max(10, args.repeat // 10))
    print(f"\n- load average at end: {load_text()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
