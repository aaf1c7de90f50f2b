"""Kernel-language benchmarks (issue 2 §8): opdsl against numpy, hand-written numba,
the memory-bandwidth floor and onnxruntime, in one run, printed as markdown tables.

    python -m benchmarks.bench_kernels            # full run (a few minutes on 2 cores)
    python -m benchmarks.bench_kernels --quick    # smoke run: small sizes, few samples
    python -m benchmarks.bench_kernels --only leaky,launch --backend opencl

Sections: ``leaky`` (leaky_relu over 2^24 f32), ``softmax`` (rows of 4096x1024 f32),
``launch`` (16-element kernel vs a plain njit call), ``compute`` (compute-bound kernel,
threads=1 vs 4), ``compile`` (cold compile and warm load in new processes).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import median
from typing import Callable, Dict, List, Optional

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.harness import (Section, Timing, fmt_seconds, load_text, machine_info,  # noqa: E402
                                measure, measure_interleaved, start, wait_until_idle)

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("leaky", "softmax", "launch", "compute", "compile")


class Config:
    """Sizes and sample counts; ``--quick`` shrinks everything for a smoke run."""

    def __init__(self, quick: bool, backend: str, probe_python: str = ""):
        self.quick = quick
        self.backend = backend
        self.probe_python = probe_python  # a second interpreter (e.g. a clean venv) for the compile probes
        self.leaky_n = 1 << (20 if quick else 24)
        self.softmax_shape = (256, 1024) if quick else (4096, 1024)
        self.compute_n = 1 << (15 if quick else 16)  # above the numba serial-launch threshold
        self.compute_iters = 16 if quick else 64
        self.repeat = 3 if quick else 15
        self.compile_runs = 1 if quick else 3


def _check(name: str, got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """A benchmark of a wrong result is worthless: stop with the worst difference."""
    if not np.allclose(got, want, rtol=rtol, atol=atol):
        raise AssertionError(f"{name}: result differs from the numpy reference "
                             f"(max abs diff {np.max(np.abs(got - want)):.3g})")


def _progress(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- onnxruntime

def ort_runner(node, shape, threads: int = 2, opset: int = 17):
    """A one-node ORT session run through IO binding into a preallocated output, so
    ORT is timed without allocating its 64 MB result each call (its best case)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph([node], "bench", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # an IR version every onnxruntime of the last years reads
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

    def bind(x: np.ndarray, y: np.ndarray) -> Callable[[], None]:
        b = sess.io_binding()
        b.bind_cpu_input("x", x)
        b.bind_output("y", "cpu", 0, np.float32, list(y.shape), y.ctypes.data)
        return lambda: sess.run_with_iobinding(b)

    def plain(x: np.ndarray) -> Callable[[], object]:
        return lambda: sess.run(["y"], {"x": x})

    return bind, plain


# --------------------------------------------------------------------------- hand-written references

def _numba_refs():
    """Hand-written numba code of the kind a user would write without opdsl."""
    from numba import njit, prange

    @njit(parallel=True)
    def leaky_prange(x, y, alpha):
        for i in prange(x.size):
            v = x[i]
            y[i] = v if v > 0 else alpha * v

    @njit(parallel=True)
    def copy_prange(x, y):
        for i in prange(x.size):
            y[i] = x[i]

    @njit(parallel=True)
    def negate_prange(x, y):  # a copy's traffic without memcpy's streaming stores
        for i in prange(x.size):
            y[i] = -x[i]

    @njit
    def leaky_serial(x, y, alpha):
        for i in range(x.size):
            v = x[i]
            y[i] = v if v > 0 else alpha * v

    @njit(parallel=True)
    def softmax_prange(x, y):
        rows, n = x.shape
        for r in prange(rows):
            m = x[r, 0]
            for j in range(1, n):
                m = max(m, x[r, j])
            s = np.float32(0)
            for j in range(n):
                e = np.exp(x[r, j] - m)
                y[r, j] = e
                s += e
            inv = np.float32(1) / s
            for j in range(n):
                y[r, j] *= inv

    return dict(leaky_prange=leaky_prange, copy_prange=copy_prange, negate_prange=negate_prange,
                leaky_serial=leaky_serial,
                softmax_prange=softmax_prange)


def _with_numba_threads(n: int, fn: Callable[[], object]) -> Callable[[], object]:
    import numba

    def run():
        old = numba.get_num_threads()
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
        try:
            return fn()
        finally:
            numba.set_num_threads(old)
    return run


# --------------------------------------------------------------------------- sections

def bench_leaky(cfg: Config) -> Section:
    from benchmarks import kernels as K
    from onnx import helper

    n, alpha = cfg.leaky_n, 0.1
    sec = Section(f"leaky_relu over {n} f32 (2^{n.bit_length() - 1}), alpha={alpha}")
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32)
    y = np.zeros_like(x)
    want = np.where(x > 0, x, np.float32(alpha) * x)
    refs = _numba_refs()
    rep = cfg.repeat

    ax = np.float32(alpha)
    _progress("leaky_relu: checking every implementation")
    pool = ThreadPoolExecutor(2)
    halves = [slice(0, n // 2), slice(n // 2, n)]
    bind, plain = ort_runner(helper.make_node("LeakyRelu", ["x"], ["y"], alpha=alpha), x.shape)
    cases = {
        f"opdsl {cfg.backend} (threads=4)": lambda: K.leaky_relu(x, y, alpha=alpha, backend=cfg.backend),
        "numba @njit(parallel=True) prange, 2 threads": _with_numba_threads(2, lambda: refs["leaky_prange"](x, y, ax)),
        "onnxruntime LeakyRelu, 2 intra-op threads (IO binding)": bind(x, y),
    }
    for name, fn in cases.items():
        y[:] = 0
        fn()
        _check(name, y, want)
    cases["onnxruntime LeakyRelu, 2 intra-op threads (sess.run, allocates y)"] = plain(x)
    cases["copy floor: np.copyto over 2 Python threads"] = lambda: list(pool.map(lambda s: np.copyto(y[s], x[s]),
                                                                                 halves))
    cases["copy floor: numba prange copy, 2 threads"] = _with_numba_threads(2, lambda: refs["copy_prange"](x, y))
    cases["copy, 1 thread (np.copyto)"] = lambda: np.copyto(y, x)
    cases["y = -x, numba prange, 2 threads (plain stores)"] = _with_numba_threads(
        2, lambda: refs["negate_prange"](x, y))
    _progress("leaky_relu: timing opdsl, numba, onnxruntime and copies, interleaved")
    timings = measure_interleaved(cases, repeat=rep)
    rows = {name: sec.add(name, t) for name, t in timings.items()}
    pool.shutdown()
    del bind, plain, cases
    ours = rows[f"opdsl {cfg.backend} (threads=4)"]
    ort_row = min((r for name, r in rows.items() if name.startswith("onnxruntime")), key=lambda r: r.timing.best)
    floor = min((r for name, r in rows.items() if name.startswith("copy floor")), key=lambda r: r.timing.best)
    floor.note = "reference (fastest 2-thread copy)"

    _progress("leaky_relu: numpy")
    sec.add("numpy np.where(x > 0, x, alpha*x)", measure(lambda: np.where(x > 0, x, ax * x), repeat=max(3, rep // 3)),
            "allocates its result")
    tmp = np.empty_like(x)
    sec.add("numpy np.maximum(x, alpha*x, out=y)",
            measure(lambda: np.maximum(x, np.multiply(x, ax, out=tmp), out=y), repeat=max(3, rep // 3)))

    sec.ratios(floor)
    sec.target("opdsl / 2-thread copy <= 1.10", ours.ratio, 1.10)
    sec.target("opdsl / onnxruntime (faster row) <= 1.00", ours.timing.best / ort_row.timing.best, 1.0)
    gbs = 2 * x.nbytes / ours.timing.best / 1e9
    sec.notes.append(f"opdsl moves {gbs:.1f} GB/s (read + write); the 2-thread copy "
                     f"{2 * x.nbytes / floor.timing.best / 1e9:.1f} GB/s")
    plain_floor = rows["y = -x, numba prange, 2 threads (plain stores)"]
    sec.notes.append(f"opdsl / plain-store copy (y = -x): {ours.timing.best / plain_floor.timing.best:.2f}x. "
                     "The copy rows compile to memcpy, whose streaming stores skip reading y into the cache "
                     "first; a kernel with ordinary stores moves ~1.5x the bytes")
    return sec


def bench_softmax(cfg: Config) -> Section:
    from benchmarks import kernels as K
    from onnx import helper

    rows, cols = cfg.softmax_shape
    sec = Section(f"row softmax {rows}x{cols} f32")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    y = np.zeros_like(x)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    rep = cfg.repeat

    refs = _numba_refs()
    bind, plain = ort_runner(helper.make_node("Softmax", ["x"], ["y"], axis=-1), x.shape, opset=13)
    b = cfg.backend
    ours_name = f"opdsl {b}: rows split over a team (threads=4)"
    unrolled_name = f"opdsl {b}: rows split over a team, max pass with 8 running maxima"
    tiles_name = f"opdsl {b}: grid of {rows} one-thread teams, a row each"
    fast_name = f"opdsl {b}: rows split over a team, fastmath=True"
    piped_name = f"opdsl {b}: fastmath=True, next row's max inside this row's exp pass"
    cases = {
        "onnxruntime Softmax(axis=-1), 2 intra-op threads (IO binding)": bind(x, y),
        ours_name: lambda: K.softmax_rows(x, y, backend=b),
        unrolled_name: lambda: K.softmax_rows_unrolled(x, y, backend=b),
        tiles_name: lambda: K.softmax_row_tiles(x, y, backend=b, grid=rows),
        fast_name: lambda: K.softmax_rows_fast(x, y, backend=b),
        piped_name: lambda: K.softmax_rows_pipelined(x, y, backend=b),
        "numba @njit(parallel=True) prange over rows, 2 threads": _with_numba_threads(
            2, lambda: refs["softmax_prange"](x, y)),
    }
    _progress("softmax: checking every implementation")
    for name, fn in cases.items():
        y[:] = 0
        fn()
        _check(name, y, want)
    cases["onnxruntime Softmax(axis=-1), 2 intra-op threads (sess.run)"] = plain(x)
    _progress("softmax: timing opdsl, numba and onnxruntime, interleaved")
    found = {name: sec.add(name, t) for name, t in measure_interleaved(cases, repeat=rep).items()}
    del bind, plain, cases
    ort_row = min((r for name, r in found.items() if name.startswith("onnxruntime")), key=lambda r: r.timing.best)
    ort_row.note = "reference (faster onnxruntime row)"
    ours, unrolled, tiles = found[ours_name], found[unrolled_name], found[tiles_name]
    fast, piped = found[fast_name], found[piped_name]
    fast.note = "benchmarks/kernels.py softmax_rows_fast"
    piped.note = "softmax_rows_pipelined"

    def np_softmax():
        ex = np.exp(x - x.max(axis=1, keepdims=True))
        return ex / ex.sum(axis=1, keepdims=True)
    sec.add("numpy (1 thread)", measure(np_softmax, repeat=max(3, rep // 3)))

    sec.ratios(ort_row)
    best = min((ours, unrolled, tiles, fast, piped), key=lambda r: r.timing.best)
    sec.target("best opdsl kernel / onnxruntime <= 1.25", best.ratio, 1.25)
    sec.target("fastmath kernel as first written (three plain passes) / onnxruntime <= 1.25", fast.ratio, 1.25)
    return sec


def bench_launch(cfg: Config) -> Section:
    from benchmarks import kernels as K
    refs = _numba_refs()
    n = 16
    sec = Section(f"launch overhead: leaky_relu on {n} f32 elements")
    x = np.linspace(-1, 1, n, dtype=np.float32)
    y = np.zeros_like(x)
    want = np.where(x > 0, x, np.float32(0.1) * x)
    ax = np.float32(0.1)
    rep = max(cfg.repeat, 7)

    serial = refs["leaky_serial"]
    serial(x, y, ax)
    _check("njit leaky_relu", y, want)
    base = sec.add("plain @njit call, serial loop", measure(lambda: serial(x, y, ax), repeat=rep))
    base.note = "reference"
    rows = {}
    for label, k in (("threads=4", K.leaky_relu), ("threads=1", K.leaky_relu_t1)):
        y[:] = 0
        k(x, y, alpha=0.1, backend=cfg.backend)
        _check(f"opdsl leaky_relu {label}", y, want)
        rows[label] = sec.add(f"opdsl {cfg.backend} kernel call, {label}",
                              measure(lambda k=k: k(x, y, alpha=0.1, backend=cfg.backend), repeat=rep))
        # where the time goes: the compiled launcher (an internal handle) vs opdsl's Python work
        values, key = k.bind((x, y), {"alpha": 0.1})
        launcher = k._variants.get((cfg.backend, key))
        if launcher is not None:
            lt = measure(lambda launcher=launcher, values=values: launcher(values, 1), repeat=rep)
            sec.add(f"  of which: backend launcher alone ({label})", lt)
            call = rows[label].timing
            sec.add(f"  of which: argument checks + variant lookup ({label})",
                    Timing(call.best - lt.best, call.median - lt.median, call.samples, call.inner), "difference")
        sec.add(f"  k.bind(): the full argument check ({label})",
                measure(lambda k=k: k.bind((x, y), {"alpha": 0.1}), repeat=rep),
                "used on a signature's first launch and with grid= at launch")
    par = refs["leaky_prange"]
    par(x, y, ax)
    sec.add("@njit(parallel=True) prange call (numba's own parallel launch)",
            measure(lambda: par(x, y, ax), repeat=rep))
    # a mid-size launch, back to back and after 2 ms of idling (worker threads asleep)
    big = np.random.default_rng(3).standard_normal(1 << 20, dtype=np.float32)
    out = np.empty_like(big)
    K.leaky_relu(big, out, alpha=0.1, backend=cfg.backend)
    sec.add(f"opdsl {cfg.backend} threads=4 on 2^20 elements, back to back",
            measure(lambda: K.leaky_relu(big, out, alpha=0.1, backend=cfg.backend), repeat=rep * 3),
            "context: a parallel launch")
    sec.add(f"opdsl {cfg.backend} threads=4 on 2^20 elements, 2 ms idle before each",
            measure(lambda: K.leaky_relu(big, out, alpha=0.1, backend=cfg.backend), repeat=rep * 3, pause_s=0.002),
            "wake-up of sleeping worker threads")
    sec.ratios(base)
    for label, row in rows.items():
        extra = (row.timing.best - base.timing.best) * 1e6
        sec.target(f"extra launch cost ({label}) <= 3 us", extra, 3.0, unit=" us")
    return sec


def bench_compute(cfg: Config) -> Section:
    from benchmarks import kernels as K
    n, iters = cfg.compute_n, cfg.compute_iters
    sec = Section(f"compute-bound: {iters} x (sin + fma) per element, {n} f32")
    rng = np.random.default_rng(2)
    x = rng.uniform(-3, 3, n).astype(np.float32)
    y = np.zeros_like(x)
    want = x.copy()
    for _ in range(iters):
        want = np.sin(want) * np.float32(0.75) + np.float32(0.25)
    rep = max(3, cfg.repeat // 2)
    rows = {}
    for t, k in ((1, K.sin_chain_t1), (2, K.sin_chain_t2), (4, K.sin_chain_t4)):
        _progress(f"compute: threads={t}")
        y[:] = 0
        k(x, y, iters=iters, backend=cfg.backend)
        _check(f"opdsl sin_chain threads={t}", y, want, rtol=1e-4, atol=1e-5)
        rows[t] = sec.add(f"opdsl {cfg.backend} threads={t}",
                          measure(lambda k=k: k(x, y, iters=iters, backend=cfg.backend), repeat=rep))
    rows[1].note = "reference"
    sec.ratios(rows[1])
    speedup = rows[1].timing.best / rows[4].timing.best
    sec.target("threads=4 speed-up over threads=1 >= 1.7x", speedup, 1.7, higher_is_better=True)
    return sec


def _probe(cache_dir: str, backend: str, profile: int = 0, python: str = "", cwd: Optional[Path] = None) -> Dict:
    """One compile-probe process.  ``python`` (another interpreter with opdsl installed, e.g. a
    clean venv) runs it in ``cwd``, a copy made by ``_probe_copy``, so that it imports its own
    installed opdsl rather than this checkout."""
    env = dict(os.environ, OPDSL_CACHE_DIR=cache_dir)
    env.pop("OPDSL_NO_DISK_CACHE", None)
    if python:
        env.pop("PYTHONPATH", None)  # the boosted run points it at this checkout
    cmd = [python or sys.executable, "-m", "benchmarks.compile_probe", "--backend", backend]
    if profile:
        cmd += ["--profile", str(profile)]
    t = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd or ROOT, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"compile probe failed ({done.returncode}):\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["process_wall"] = wall
    if not out["correct"]:
        raise AssertionError("compile probe: leaky_relu gave a wrong result")
    return out


def _probe_copy(where: str) -> Path:
    """The probe and the kernel module copied into ``where``/benchmarks (same path for the cold
    and the warm run: the kernel's file is part of its cache key)."""
    import shutil
    (Path(where) / "benchmarks").mkdir()
    for name in ("compile_probe.py", "kernels.py"):
        shutil.copy(ROOT / "benchmarks" / name, Path(where) / "benchmarks" / name)
    return Path(where)


def bench_compile(cfg: Config) -> Section:
    sec = Section(f"compile: leaky_relu cold (empty OPDSL_CACHE_DIR) and warm (new process, same dir), "
                  f"{cfg.backend}, median of {cfg.compile_runs}")
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    bare = time.perf_counter() - t
    cold: List[Dict] = []
    warm: List[Dict] = []
    for k in range(cfg.compile_runs):
        with tempfile.TemporaryDirectory(prefix="opdsl-bench-cache-") as d:
            _progress(f"compile: cold run {k + 1}")
            cold.append(_probe(d, cfg.backend))
            _progress(f"compile: warm run {k + 1}")
            warm.append(_probe(d, cfg.backend))

    def med(runs: List[Dict], f: Callable[[Dict], float]) -> float:
        return median(f(r) for r in runs)

    def row(name: str, runs: List[Dict], f: Callable[[Dict], float], note: str = ""):
        vals = [f(r) for r in runs]
        return sec.add(name, Timing(min(vals), median(vals), len(vals), 1), note)

    other: List[Dict] = []
    if cfg.probe_python:
        for k in range(cfg.compile_runs):
            with tempfile.TemporaryDirectory(prefix="opdsl-bench-cache-") as d, \
                    tempfile.TemporaryDirectory(prefix="opdsl-probe-") as copy:
                _progress(f"compile: {cfg.probe_python}, cold then warm run {k + 1}")
                cwd = _probe_copy(copy)
                _probe(d, cfg.backend, python=cfg.probe_python, cwd=cwd)
                other.append(_probe(d, cfg.backend, python=cfg.probe_python, cwd=cwd))

    sec.add("bare interpreter start (python -c pass)", Timing(bare, bare, 1, 1))
    row("import numba", cold, lambda r: r["import_numba"])
    row("import dsl + backend (after numba)", cold, lambda r: r["import_dsl"])
    row("numba target set-up (one-time per process; cold run)", cold, lambda r: r["numba_init"],
        "registries + typing tables" + (", imports scipy (numba's BLAS check)"
                                         if cold[0].get("scipy_imported_by_numba") else ""))
    cold_first = row("cold: first call (frontend + check + codegen + numba compile + launch)", cold,
                     lambda r: r["first_call"])
    cold_compile = row("cold: compile = numba set-up + first call", cold,
                       lambda r: r["numba_init"] + r["first_call"])
    cold_excl = row("cold: excluding import numba (import dsl + define + set-up + first call)", cold,
                    lambda r: r["since_start"] - r["import_numba"])
    cold_total = row("cold: total from the probe's first line", cold, lambda r: r["since_start"])
    row("cold: process wall time (with interpreter start)", cold, lambda r: r["process_wall"])
    row("numba target set-up (warm run)", warm, lambda r: r["numba_init"])
    warm_first = row("warm: first call (disk-cache load + launch)", warm, lambda r: r["first_call"],
                     "after numba's set-up")
    warm_load = row("warm: load = numba set-up + first call", warm, lambda r: r["numba_init"] + r["first_call"],
                    "what a user waits for after the imports")
    row("warm: total from the probe's first line (imports included)", warm, lambda r: r["since_start"])
    row("warm: process wall time (with interpreter start)", warm, lambda r: r["process_wall"])
    row("second call in the same process (for scale)", warm, lambda r: r["second_call"])
    other_load = None
    if other:
        scipy = "with scipy" if other[0].get("scipy_imported_by_numba") else "no scipy"
        where = f"{cfg.probe_python} ({scipy})"
        row(f"{where}: import numba", other, lambda r: r["import_numba"])
        row(f"{where}: numba target set-up (warm run)", other, lambda r: r["numba_init"])
        row(f"{where}: warm first call", other, lambda r: r["first_call"])
        other_load = row(f"{where}: warm load = set-up + first call", other,
                         lambda r: r["numba_init"] + r["first_call"], "imports excluded")
    sec.target("cold compile excluding import numba <= 2 s", cold_excl.timing.median, 2.0, unit=" s")
    sec.target("cold total including import numba <= 2 s", cold_total.timing.median, 2.0, unit=" s")
    sec.target("cold compile (numba set-up + first call) <= 2 s", cold_compile.timing.median, 2.0, unit=" s")
    sec.target("warm load (numba set-up + first call, imports excluded) <= 0.2 s",
               warm_load.timing.median, 0.2, unit=" s")
    sec.target("warm first call alone (opdsl's own load work) <= 0.2 s", warm_first.timing.median, 0.2, unit=" s")
    if other_load is not None:
        sec.target(f"warm load with {cfg.probe_python} (imports excluded) <= 0.2 s", other_load.timing.median, 0.2,
                   unit=" s")
    del cold_first
    sec.notes.append(f"warm process wall time minus bare interpreter start: "
                     f"{fmt_seconds(med(warm, lambda r: r['process_wall']) - bare)}")
    return sec


BENCHES = dict(leaky=bench_leaky, softmax=bench_softmax, launch=bench_launch, compute=bench_compute,
               compile=bench_compile)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_kernels",
                                 description="opdsl kernel-language benchmarks (issue 2 §8)")
    ap.add_argument("--quick", action="store_true", help="small sizes and few samples: a smoke run")
    ap.add_argument("--backend", default="numba", help="opdsl backend to time (default numba)")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help=f"comma-separated sections to run, from {','.join(SECTIONS)}")
    ap.add_argument("--output", metavar="FILE", help="also write the markdown report to FILE")
    ap.add_argument("--wait-idle", type=float, default=0.0, metavar="LOAD",
                    help="before each section, wait (up to 10 min) until the 1-minute load average is below LOAD")
    ap.add_argument("--probe-python", default="", metavar="PYTHON",
                    help="also run the compile probes with this interpreter (e.g. a clean venv where "
                         "`pip install .` installed opdsl), from a copy of the probe so it uses its own opdsl")
    ap.add_argument("--boost", action="store_true",
                    help="run in a new session at nice -20 (Linux, root): on a shared machine this is the only "
                         "way a parallel kernel gets every core")
    args, wanted, argv, boosted, code = start(ap, argv, "benchmarks.bench_kernels", tuple(BENCHES))
    if code is not None:  # the boosted child ran the benchmarks
        return code
    from backends import base
    reason = base.get(args.backend).available()
    if reason:
        ap.error(f"backend {args.backend!r} is not usable here: {reason}")

    cfg = Config(args.quick, args.backend, args.probe_python)
    cmd = "python -m benchmarks.bench_kernels " + " ".join(argv)
    header = [f"Command: `{cmd.strip()}`", f"Date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", ""]
    if boosted:
        header.insert(1, f"Priority: {boosted} (own session)")
    header += [f"- {line}" for line in machine_info()]
    report = ["\n".join(header)]
    print(report[0], flush=True)
    for name in wanted:
        if args.wait_idle:
            wait_until_idle(args.wait_idle, 600, _progress)
        t = time.perf_counter()
        load0 = load_text()
        sec = BENCHES[name](cfg)
        sec.notes.append(f"section time {time.perf_counter() - t:.1f} s; load average before {load0}, "
                         f"after {load_text()}")
        text = sec.markdown()
        print("\n" + text, flush=True)
        report.append(text)
    if args.output:
        Path(args.output).write_text("\n\n".join(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
