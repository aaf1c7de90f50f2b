"""The numba serial/parallel entry choice (backends/numba/entry_choice.py): what each launch of the
benchmark models and of bench_ops' GEMM and Conv cases chooses, the data its constants were
calibrated on, and model latency against onnxruntime across fresh processes.

    python -m benchmarks.bench_entry_choice --show-choices          # one line per launch + a digest
    python -m benchmarks.bench_entry_choice --calibrate             # work vs serial/parallel time
    python -m benchmarks.bench_entry_choice --models --processes 5 [--baseline TREE --baseline-cache DIR]
    python -m benchmarks.bench_entry_choice --nodes --processes 3 [--busy 1] [--pause 0.02]
    python -m benchmarks.bench_entry_choice --models --only squeezenet,bert --layers omp,workqueue
    python -m benchmarks.bench_entry_choice --models --only squeezenet,bert --spins 3000,300000 [--busy 1]

``--show-choices`` prints, per model and per bench_ops case, each launch of a numba kernel: its
grid, elements, estimated work (backends/numba/launch_work.py) and the entry it runs; the digest
of that list is what to compare between runs.  ``--models`` runs each model in ``--processes``
fresh processes (alternating with ``--baseline``'s tree, e.g. ``git archive main``), each timing
``model.run`` and onnxruntime alternately (a ``--pause`` of sleep before each side, 20 ms by
default: onnxruntime's pool threads spin after a run, and back-to-back they would take the cores from
opdsl's next run), and prints every process's best ratio and each side's process CPU time per run
(pauses included: what threads that spin after a run take from a neighbour).  ``--nodes`` does the same for single nodes
(NODES: two f32 convolutions, a GEMM, an int8 QLinearConv); ``--busy N`` runs N competing busy
processes meanwhile.

Timing script, not a test; results go to benchmarks/RESULTS.md by hand.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("squeezenet", "resnet50", "bert")


def model_path(name: str) -> str:
    from benchmarks import models
    return str(models.bert_layer() if name == "bert" else models.light_model_path(name))


def feeds_of(path: str) -> Dict[str, np.ndarray]:
    import onnx
    from benchmarks import models
    return models.random_feeds(onnx.load(path))


def op_cases() -> List[Tuple[str, object, Dict[str, np.ndarray]]]:
    """bench_ops' GEMM, batched, linear and Conv cases as (name, onnx model, feeds)."""
    from benchmarks import bench_ops as bo, op_models as om
    out = []
    for n in bo.GEMM_SIZES:
        out.append((f"gemm {n}", om.matmul_model((n, n), (n, n)), dict(zip("ab", om.random_inputs([(n, n), (n, n)])))))
    for a, b in bo.ATTENTION_SHAPES + bo.LINEAR_SHAPES:
        out.append((f"matmul {a} x {b}", om.matmul_model(a, b), dict(zip("ab", om.random_inputs([a, b])))))
    for c_in, hw, c_out, k, stride in bo.RESNET50_CONVS + bo.EXTRA_CONVS:
        rng = np.random.default_rng(c_in * 7 + c_out + k)
        w = rng.standard_normal((c_out, c_in, k, k), dtype=np.float32) * np.float32(1 / np.sqrt(c_in * k * k))
        b = rng.standard_normal(c_out, dtype=np.float32)
        x = rng.standard_normal((1, c_in, hw, hw), dtype=np.float32)
        out.append((f"conv {c_in}, {hw} -> {c_out}, {k}x{k}, s{stride}", om.conv_model(c_in, hw, c_out, k, stride, w, b),
                    {"x": x}))
    return out


def launches(model, feeds) -> List[Tuple]:
    """(launcher, values, grid) of every numba launch one ``model.run(feeds)`` makes, in order."""
    from backends.numba.backend import NumbaLauncher
    seen: List[Tuple] = []
    real = NumbaLauncher.__call__

    def spy(self, args, grid):
        seen.append((self, args, grid))
        return real(self, args, grid)
    NumbaLauncher.__call__ = spy
    try:
        model.run(feeds)
    finally:
        NumbaLauncher.__call__ = real
    return seen


def describe(launcher, args, grid) -> Tuple[str, int, Optional[float], str]:
    """(kernel, elements, estimated work, entry the launch runs in steady state)."""
    n = sum(args[i].size for i in launcher._tensors)
    work = launcher.work(args, grid) if type(grid) is int else None
    return launcher.name, n, work, launcher.which(args, grid)


def show_choices(ops: bool) -> int:
    import dsl
    cases = [(name, model_path(name), None) for name in MODELS]
    if ops:
        cases += op_cases()
    lines = []
    for name, model, feeds in cases:
        feeds = feeds if feeds is not None else feeds_of(model)
        m = dsl.load_onnx(model, backend="numba")
        m.run(feeds)  # first runs may take the serial entry while the parallel one is not compiled
        for launcher, args, grid in launches(m, feeds):
            kernel, n, work, entry = describe(launcher, args, grid)
            w = "-" if work is None else f"{work:.3g}"
            lines.append(f"{name:38} {kernel:34} grid {str(grid):12} elements {n:9d} work {w:>8} -> {entry}")
            print(lines[-1], flush=True)
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
    print(f"{len(lines)} launches; choices digest {digest}")
    return 0


def calibrate(rounds: int) -> int:
    """Each small launch of a nested-loop kernel (the ones the choice weighs): its estimated work
    and its best serial and parallel times, back to back (workers still spinning) and after a 2 ms
    pause (workers asleep, as after a model's serial stretch)."""
    import dsl
    from backends.numba import backend as nb
    rows = []
    for name in MODELS:
        path = model_path(name)
        feeds = feeds_of(path)
        m = dsl.load_onnx(path, backend="numba")
        m.run(feeds)
        done = set()
        for launcher, args, grid in launches(m, feeds):
            n = sum(args[i].size for i in launcher._tensors)
            if not launcher._weighed or type(grid) is not int or n >= nb.SERIAL_MAX_ELEMENTS \
                    or grid * launcher._team > nb.SERIAL_MAX_THREADS:
                continue
            key = (id(launcher), grid, n)
            if key in done:
                continue
            done.add(key)
            launcher.run_serial(args, grid), launcher.run_parallel(args, grid)  # compiled
            best = {"s": 1e9, "p": 1e9, "s_cold": 1e9, "p_cold": 1e9}
            for _ in range(rounds):
                for side, fn in (("s", launcher.run_serial), ("p", launcher.run_parallel)):
                    time.sleep(0.002)
                    t = time.perf_counter()
                    fn(args, grid)
                    best[side + "_cold"] = min(best[side + "_cold"], time.perf_counter() - t)
                    t = time.perf_counter()
                    fn(args, grid)
                    best[side] = min(best[side], time.perf_counter() - t)
            work = launcher.work(args, grid)
            rows.append((name, launcher.name, grid, n, work, best))
            print(f"{name:10} {launcher.name:34} grid {grid:4d} elements {n:7d} work {work:10.4g}  serial "
                  f"{best['s'] * 1e6:8.1f} us  parallel {best['p'] * 1e6:8.1f} us (asleep first: serial "
                  f"{best['s_cold'] * 1e6:8.1f}, parallel {best['p_cold'] * 1e6:8.1f})  "
                  f"-> {'parallel' if launcher.goes_parallel(grid, n, args) else 'serial'}", flush=True)
    if rows:
        per_op = np.median([r[5]["s"] / r[4] for r in rows if r[4]])
        print(f"median serial seconds per operation: {per_op:.3g}; load average {os.getloadavg()[0]:.1f}")
    return 0


MODEL_RUN = '''
import json, sys, time
import numpy as np, onnx, onnxruntime as ort
import dsl  # from the tree on PYTHONPATH
path, repeat = {path!r}, {repeat}
proto = onnx.load(path)
inits = {{t.name for t in proto.graph.initializer}}
inp = next(i for i in proto.graph.input if i.name not in inits)
shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
feeds = {{inp.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}}
model = dsl.load_onnx(path, backend="numba")
so = ort.SessionOptions(); so.intra_op_num_threads = 2
sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
{timed}
'''

# The timed rounds of MODEL_RUN and NODE_RUN.  A pause before each side: onnxruntime's pool threads
# spin for a while after a run (and opdsl's workers briefly), so back-to-back sides would time one
# side's run against the other's spinning threads on a 2-core machine.
TIMED = '''
pause = {pause}
for _ in range(3):
    model.run(feeds), sess.run(None, feeds)
ours, theirs = [], []
for _ in range(repeat):
    time.sleep(pause); t = time.perf_counter(); model.run(feeds); ours.append(time.perf_counter() - t)
    time.sleep(pause); t = time.perf_counter(); sess.run(None, feeds); theirs.append(time.perf_counter() - t)

def cpu_per_run(run):
    """Process CPU seconds per run, pauses included: what spinning threads take from neighbours."""
    time.sleep(0.1)
    c = time.process_time()
    for _ in range(repeat):
        time.sleep(pause); run()
    time.sleep(0.1)
    return (time.process_time() - c) / repeat

cpu = {{"opdsl_cpu": cpu_per_run(lambda: model.run(feeds)), "ort_cpu": cpu_per_run(lambda: sess.run(None, feeds))}}
print(json.dumps({{"opdsl": ours, "ort": theirs, **cpu}}))
'''

# One node against onnxruntime (bench_ops' f32 Conv and MatMul, bench_int8's QLinearConv), two threads a
# side; the parent writes the model and its feeds (so a baseline tree runs the very same case).
NODE_RUN = '''
import json, sys, time
import numpy as np, onnxruntime as ort
import dsl  # from the tree on PYTHONPATH
path, repeat = {path!r}, {repeat}
feeds = dict(np.load(path + ".npz"))
model = dsl.load_onnx(path, backend="numba")
so = ort.SessionOptions(); so.intra_op_num_threads = 2
sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
'''

NODES = ("conv 128, 28 -> 128, 3x3", "conv 48, 13 -> 192, 3x3", "gemm 256", "qlinearconv 128, 28 -> 128, 3x3")


def node_case(name: str):
    """(onnx model, feeds) of one NODES entry."""
    from benchmarks import op_models as om
    if name.startswith("qlinearconv"):
        from benchmarks import bench_int8
        return bench_int8.qlinear_conv(128, 28, 128)
    if name.startswith("gemm"):
        n = int(name.split()[1])
        return om.matmul_model((n, n), (n, n)), dict(zip("ab", om.random_inputs([(n, n), (n, n)])))
    c_in, hw, c_out = (128, 28, 128) if "128, 28" in name else (48, 13, 192)
    rng = np.random.default_rng(c_in * 7 + c_out)
    w = rng.standard_normal((c_out, c_in, 3, 3), dtype=np.float32) * np.float32(1 / np.sqrt(c_in * 9))
    b = rng.standard_normal(c_out, dtype=np.float32)
    return om.conv_model(c_in, hw, c_out, 3, 1, w, b), {"x": rng.standard_normal((1, c_in, hw, hw), dtype=np.float32)}


def run_code(name: str, path: Optional[str], repeat: int, pause: float) -> str:
    """The script one fresh process runs: a model or a NODES entry (``path``: its .onnx file, its
    feeds beside it in ``path + ".npz"``), against onnxruntime."""
    timed = TIMED.format(pause=pause)
    if name not in MODELS:
        return NODE_RUN.format(path=path, repeat=repeat) + timed
    return MODEL_RUN.format(path=path, repeat=repeat, timed=timed)


def node_file(name: str) -> str:
    """A NODES entry written to a temporary .onnx file, its feeds in ``<file>.npz``."""
    import tempfile
    proto, feeds = node_case(name)
    path = os.path.join(tempfile.mkdtemp(prefix="opdsl_node_"), "node.onnx")
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())
    np.savez(path + ".npz", **feeds)
    return path


def busy_processes(n: int) -> List[subprocess.Popen]:
    """``n`` competing processes that each keep one core busy (a neighbour on a shared machine)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def model_processes(processes: int, repeat: int, baseline: Optional[Path], names,
                    baseline_cache: Optional[Path] = None, pause: float = 0.02, busy: int = 0,
                    layers: Sequence[str] = (), spins: Sequence[str] = ()) -> int:
    """Each model (or NODES entry) in ``processes`` fresh processes per tree (trees alternating),
    ``model.run`` and onnxruntime alternating inside each with ``pause`` seconds before each side;
    every process's best and median ratio, then the spread.  ``busy``: competing busy processes;
    ``layers``: numba threading layers to compare (``NUMBA_THREADING_LAYER``) in place of trees;
    ``spins``: libgomp spin counts to compare (``GOMP_SPINCOUNT``) in place of trees."""
    trees = [("opdsl", ROOT, {})] + ([("baseline", baseline, {})] if baseline is not None else [])
    if layers:  # this tree on each numba threading layer instead
        trees = [(f"{layer}", ROOT, {"NUMBA_THREADING_LAYER": layer}) for layer in layers]
    if spins:  # this tree with each libgomp spin count instead
        trees = [(f"spin {n}", ROOT, {"GOMP_SPINCOUNT": n}) for n in spins]
    hogs = busy_processes(busy)
    try:
        for name in names:
            _one_case(name, processes, repeat, trees, baseline_cache, pause, busy)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    return 0


def _one_case(name, processes, repeat, trees, baseline_cache, pause, busy) -> None:
    """One case (a model or a NODES entry) in fresh processes per tree, and its line per tree."""
    path = model_path(name) if name in MODELS else node_file(name)
    got: Dict[str, List] = {t: [] for t, _, _ in trees}
    for _ in range(processes):
        for label, tree, extra in trees:
            env = dict(os.environ, PYTHONPATH=str(tree), **extra)
            if label == "baseline" and baseline_cache is not None:  # its own front-end records
                env["OPDSL_CACHE_DIR"] = str(baseline_cache)
            code = run_code(name, path, repeat, pause)
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                 check=True, cwd=str(tree))
            r = json.loads(out.stdout.strip().splitlines()[-1])
            a, b = np.array(r["opdsl"]), np.array(r["ort"])
            got[label].append((a.min(), np.median(a), b.min(), np.median(b), r["opdsl_cpu"], r["ort_cpu"]))
    print(f"{name}: {processes} fresh processes per tree, {repeat} runs each alternating with onnxruntime, "
          f"{pause * 1e3:.0f} ms pause before each side, {busy} busy competing process(es) "
          f"(1-minute load average {os.getloadavg()[0]:.1f})")
    for label, rows in got.items():
        best = [r[0] * 1e3 for r in rows]
        ratio = [r[0] / r[2] for r in rows]
        med_ratio = [r[1] / r[3] for r in rows]
        print(f"  {label:8}: best ms {' '.join(f'{v:.2f}' for v in best)}; slowest/fastest {max(best) / min(best):.2f}x; "
              f"ratio to ORT best {' '.join(f'{v:.2f}' for v in ratio)} (mean {np.mean(ratio):.2f}x), "
              f"median {' '.join(f'{v:.2f}' for v in med_ratio)} (mean {np.mean(med_ratio):.2f}x); "
              f"CPU ms per run with its pause: opdsl {np.mean([r[4] for r in rows]) * 1e3:.2f}, "
              f"onnxruntime {np.mean([r[5] for r in rows]) * 1e3:.2f}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--show-choices", action="store_true", help="each launch's entry, and a digest of them")
    ap.add_argument("--no-ops", action="store_true", help="with --show-choices: the models only, not bench_ops' cases")
    ap.add_argument("--calibrate", action="store_true", help="work against serial and parallel time")
    ap.add_argument("--models", action="store_true", help="latency against onnxruntime in fresh processes")
    ap.add_argument("--only", default=None, help="models (--models) or nodes (--nodes), comma-separated")
    ap.add_argument("--nodes", action="store_true", help="one-node cases (NODES) against onnxruntime in fresh processes")
    ap.add_argument("--pause", type=float, default=0.02, help="seconds of sleep before each timed side (--models, --nodes)")
    ap.add_argument("--busy", type=int, default=0, help="competing busy processes during --models / --nodes")
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=30, help="runs per process (--models)")
    ap.add_argument("--rounds", type=int, default=20, help="timed rounds per launch (--calibrate)")
    ap.add_argument("--baseline", type=Path, default=None, help="also time this tree (--models)")
    ap.add_argument("--baseline-cache", type=Path, default=None, help="OPDSL_CACHE_DIR of the baseline's processes")
    ap.add_argument("--layers", default="", help="--models/--nodes: compare numba threading layers, e.g. omp,workqueue")
    ap.add_argument("--spins", default="", help="--models/--nodes: compare GOMP_SPINCOUNT values, e.g. 3000,300000")
    args = ap.parse_args(argv)
    if args.calibrate:
        return calibrate(args.rounds)
    if args.models or args.nodes:
        names = args.only.split(",") if args.only else list(MODELS if args.models else NODES)
        return model_processes(args.processes, args.repeat, args.baseline, names, args.baseline_cache,
                               args.pause, args.busy, [x for x in args.layers.split(",") if x],
                               [x for x in args.spins.split(",") if x])
    return show_choices(not args.no_ops)


if __name__ == "__main__":
    sys.exit(main())
