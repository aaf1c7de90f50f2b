"""f32 models and ResNet-50's conv shapes against onnxruntime on one core, in CPU time: on a
machine shared with other jobs, wall time swings 2-4x between runs, CPU time (``time.process_time``)
does not count descheduling.  The two sides alternate in one process and each keeps its best and
median; outputs are checked equal first.

    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_f32_cpu models [--reps 25] [--only resnet50]
    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_f32_cpu models --reps 10 --blocks 5 [--processes 3]
    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_f32_cpu convs [--reps 15]
    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_f32_cpu kernels [--reps 400] [--base DIR]
    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
        python -m benchmarks.bench_f32_cpu gemms [--reps 50] [--base DIR] [--evict] [--copies 2] [--only 1024]

``models`` prints one line per model: opdsl's and onnxruntime's best and median over every
round, and their ratios (the figure RESULTS.md has always quoted).  One such reading of
light_resnet50 moved 0.73-1.21x between runs of the same tree, so ``--blocks B`` repeats the
alternation B times and adds each block's best-to-best ratio, their median, range and spread
(range over median): a difference between two trees counts only where it exceeds that spread.
``--processes P`` runs the blocks in P fresh processes in turn (each loads the model from the
caches) and adds the range over blocks of every process and over the processes' own bests --
where a process's memory lands moves a model more than a block does.  The first line keeps
the present figure (best of every round of every block and process).

``kernels`` times the BERT layer's small kernels alone on the serial entry (the launch bound once,
no Python per call): the row softmax (random and causally masked rows), the head transposes and the attention and linear GEMMs;
``--base DIR`` alternates each with the same kernel from another tree's ops/norm.py, ops/shape.py
and ops/gemm_packed.py (e.g. a ``git archive`` of the branch point), for A/B on a loaded machine.

``gemms`` times the packed GEMM (serial entry, bound launch) against numpy's BLAS on one thread
(start it as above: OpenBLAS reads its variables at import), alternated, at issue 29's shapes:
256³ and 1024³, the attention products and BERT's linears (a read-only B: packed once, as a
model's weights); ``--base DIR`` adds another tree's ops/gemm_packed.py as a third side;
``--evict`` streams 4 MB before every call (not timed), so the operands come from L3 rather
than L2, as a model's weights do when the layers' weights add up to more than L2.
``--copies N`` runs N copies of each opdsl side, each with its own output and packing buffers:
the same kernel differs by up to 15 % at 1024³ with where its buffers landed (4 KB pages or
transparent huge pages), so an A/B difference counts only where it exceeds the copies' spread;
``--only`` keeps the shapes whose label contains that text.

With NUMBA_NUM_THREADS=2 the models run on two threads a side and wall time is reported
(CPU time would add the two threads up).
"""
from __future__ import annotations

import argparse
import importlib.util
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


def run_models(reps: int, only: str, blocks: int = 1, as_json: bool = False) -> None:
    """Each model against onnxruntime: ``blocks`` blocks of ``reps`` alternated rounds.  The first
    line per model is the present figure (best and median of every round); with more than one
    block, each block's best ratio follows, and their median and range (``spread``)."""
    import json

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
        runs = [alternate(lambda: model.run(feeds), lambda: sess.run(None, feeds), reps, clock) for _ in range(blocks)]
        a, b = np.concatenate([r[0] for r in runs]), np.concatenate([r[1] for r in runs])
        label = f"{name} ({n} thread{'s' * (n > 1)}, {'CPU' if n == 1 else 'wall'})"
        if as_json:
            print(json.dumps({"model": name, "label": label, "opdsl": [r[0].tolist() for r in runs],
                              "onnxruntime": [r[1].tolist() for r in runs]}), flush=True)
            continue
        print(line(label, a, b, 1e3, "ms"), flush=True)
        if blocks > 1:
            print(spread(name, [(r[0].min(), r[1].min()) for r in runs], f"{blocks} blocks of {reps} rounds"), flush=True)


def spread(name: str, bests, what: str) -> str:
    """One line: each block's best-to-best ratio, their median and range; ``bests``: per block
    (opdsl best, onnxruntime best) in seconds."""
    ratios = np.array([ours / theirs for ours, theirs in bests])
    med = float(np.median(ratios))
    return (f"  {name}, {what}: ratio per block " + " ".join(f"{r:.2f}" for r in ratios)
            + f" | median {med:.2f}x, range {ratios.min():.2f}-{ratios.max():.2f}x "
            f"(spread {(ratios.max() - ratios.min()) / med * 100:.0f} %) | opdsl best per block "
            f"{min(o for o, _ in bests) * 1e3:.2f}-{max(o for o, _ in bests) * 1e3:.2f} ms, onnxruntime "
            f"{min(t for _, t in bests) * 1e3:.2f}-{max(t for _, t in bests) * 1e3:.2f} ms")


def run_models_in_processes(reps: int, only: str, blocks: int, processes: int) -> None:
    """``processes`` fresh processes one after the other, each running ``blocks`` blocks: where
    a process's memory lands (pages, cache sets) moves a model by more than a block does, so
    the range over processes is the one a single reading can be off by."""
    import json
    import subprocess
    per_model: dict = {}
    for p in range(processes):
        cmd = [sys.executable, "-m", "benchmarks.bench_f32_cpu", "models", "--reps", str(reps),
               "--blocks", str(blocks), "--json"] + (["--only", only] if only else [])
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True,
                             cwd=str(Path(__file__).resolve().parent.parent)).stdout
        for row in (json.loads(x) for x in out.splitlines() if x.startswith("{")):
            per_model.setdefault(row["model"], (row["label"], []))[1].append(row)
    for name, (label, rows) in per_model.items():
        a = np.concatenate([np.concatenate([np.array(b) for b in r["opdsl"]]) for r in rows])
        b = np.concatenate([np.concatenate([np.array(x) for x in r["onnxruntime"]]) for r in rows])
        print(line(label, a, b, 1e3, "ms"), flush=True)
        blocks_all = [(min(o), min(t)) for r in rows for o, t in zip(r["opdsl"], r["onnxruntime"])]
        print(spread(name, blocks_all, f"{processes} processes x {blocks} blocks of {reps} rounds"), flush=True)
        procs = [(min(min(o) for o in r["opdsl"]), min(min(t) for t in r["onnxruntime"])) for r in rows]
        print(spread(name, procs, f"best of each of {processes} processes").replace("per block", "per process"),
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


class _Bound:
    """Stands in for a kernel: keeps the launch a launcher makes, bound, for the timed loop."""

    def __init__(self, kernel):
        self.kernel, self.launch = kernel, None

    def __call__(self, *args, backend=None, grid=None, **kwargs):
        launcher, values, g = self.kernel.prepare(args, kwargs, backend=backend, grid=grid)
        values = launcher._adapt(values)
        self.launch = lambda: launcher._run(launcher._serial, values, g)


def _module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _bert_kernels(norm, shape, gemm):
    """{name: (run once, result array, numpy reference)} of one tree's modules."""
    rng = np.random.default_rng(0)
    out = {}
    s = (rng.standard_normal((512, 128)) * 3).astype(np.float32)
    causal = (s.reshape(4, 128, 128) + np.triu(np.full((128, 128), models.MASK_VALUE, np.float32), k=1)).reshape(s.shape)
    # a tree from before the softmax's underflow floor has no such argument
    floor = {"floor": norm.underflow_floor(np.float32)} if hasattr(norm, "underflow_floor") else {}
    for name, rows in (("softmax rows 512x128", s), ("softmax causal 512x128", causal)):
        e = np.exp(rows - rows.max(axis=1, keepdims=True))
        out[name] = (norm.softmax_rows_kernel, (rows, np.empty_like(rows)), {"op": norm.SOFTMAX, **floor},
                     e / e.sum(axis=1, keepdims=True))
    x = rng.standard_normal((1, 128, 4, 64)).astype(np.float32)
    found = {}
    for perm in ((0, 2, 1, 3), (0, 2, 3, 1)):
        bound = _Bound(shape.strided_copy_kernel)
        y = np.empty([x.shape[p] for p in perm], np.float32)
        shape.launch_transpose(bound, x, y, perm, backend="numba")
        found[f"transpose {perm}"] = (bound, y, x.transpose(perm))
    for (b, m, k, n, bias) in ((4, 128, 64, 128, False), (4, 128, 128, 64, False), (1, 128, 256, 256, True)):
        a = rng.standard_normal((b, m, k)).astype(np.float32)
        w = (rng.standard_normal((b, k, n)) / np.sqrt(k)).astype(np.float32)
        if b == 1:
            w.setflags(write=False)  # a weight: packed once
        c = rng.standard_normal((1, n)).astype(np.float32) if bias else np.zeros((1, 1), np.float32)
        y = np.empty((b, m, n), np.float32)
        bound = _Bound(gemm.gemm_packed)
        gemm.packed_gemm(a, w, c, y, beta=float(bias), backend="numba", kernel=bound, cores=1)
        found[f"gemm {b}x{m}x{k}x{n}{' + bias' if bias else ''}"] = (bound, y, np.matmul(a, w) + c * bias)
    for name, (kernel, args, kw, want) in list(out.items()):
        bound = _Bound(kernel)
        bound(*args, backend="numba", **kw)
        out[name] = (bound, args[1], want)
    out.update(found)
    return {name: (bound.launch, y, want) for name, (bound, y, want) in out.items()}


def run_kernels(reps: int, base: str) -> None:
    from ops import gemm_packed, norm, shape
    sides = [("now", _bert_kernels(norm, shape, gemm_packed))]
    if base:
        mods = [_module(str(Path(base) / "ops" / f"{m}.py"), f"base_{m}") for m in ("norm", "shape", "gemm_packed")]
        sides.append(("base", _bert_kernels(*mods)))
    for name in sides[0][1]:
        times = {}
        for side, kernels in sides:
            run, y, want = kernels[name]
            run()
            err = float(np.abs(y - want).max())
            if err > 1e-3:
                raise SystemExit(f"{name} ({side}): differs from numpy by {err}")
            times[side] = []
        for r in range(reps):
            for side, kernels in (sides if r % 2 == 0 else sides[::-1]):
                t = time.process_time()
                kernels[name][0]()
                times[side].append(time.process_time() - t)
        row = "  ".join(f"{k} best {min(v) * 1e3:.4f} med {np.median(v) * 1e3:.4f} ms" for k, v in times.items())
        ratio = f"  now/base best {min(times['now']) / min(times['base']):.2f}" if base else ""
        print(f"{name:28s} {row}{ratio}", flush=True)


# (batch, m, k, n, constant B): issue 29's square sizes, the attention products, BERT's linears
GEMM_SHAPES = ((1, 256, 256, 256, False), (1, 1024, 1024, 1024, False), (4, 128, 64, 128, False),
               (4, 128, 128, 64, False), (12, 128, 64, 128, False), (12, 128, 128, 64, False),
               (1, 128, 256, 256, True), (1, 128, 256, 1024, True), (1, 128, 1024, 256, True))


def _gemm_launch(gemm, a, b, y):
    bound = _Bound(gemm.gemm_packed)
    gemm.packed_gemm(a, b, np.zeros((1, 1), np.float32), y, beta=0.0, backend="numba", kernel=bound, cores=1)
    return bound.launch


EVICT_FLOATS = 1 << 20  # 4 MB: more than a core's L2 here (2 MB), less than L3


def run_gemms(reps: int, base: str, evict: bool = False, copies: int = 1, only: str = "") -> None:
    from benchmarks.blas_child import SLOW_BLAS_VARS, _openblas_facts
    from ops import gemm_packed
    facts = _openblas_facts()
    print(f"numpy BLAS: {facts['openblas_core']}, {facts['threads']} thread(s); "
          + ", ".join(f"{k}={os.environ.get(k)}" for k in SLOW_BLAS_VARS), flush=True)
    mods = [("now", gemm_packed)]
    if base:
        mods.append(("base", _module(str(Path(base) / "ops" / "gemm_packed.py"), "base_gemm_packed")))
    rng = np.random.default_rng(0)
    junk = np.zeros(EVICT_FLOATS if evict else 1, np.float32)
    for batch, m, k, n, const in GEMM_SHAPES:
        label = f"{batch}x{m}x{k}x{n}{' (B packed once)' if const else ''}"
        if only not in label:
            continue
        a = rng.standard_normal((batch, m, k)).astype(np.float32)
        b = (rng.standard_normal((1 if const else batch, k, n)) / np.sqrt(k)).astype(np.float32)
        if const:
            b.setflags(write=False)
        want = np.matmul(a, b)
        out = np.empty_like(want)
        sides = {"numpy": lambda: np.matmul(a, b, out=out)}
        for name, mod in mods:
            for copy in range(copies):
                y = np.empty_like(want)
                run = _gemm_launch(mod, a, b, y)
                run()
                err = float(np.abs(y - want).max())
                if err > 1e-3 * np.sqrt(k):
                    raise SystemExit(f"gemm {batch}x{m}x{k}x{n} ({name}): differs from numpy by {err}")
                sides[name if copies == 1 else f"{name}#{copy + 1}"] = run
        times = {name: [] for name in sides}
        order = list(sides.items())
        for r in range(reps):
            for name, fn in (order if r % 2 == 0 else order[::-1]):
                if evict:
                    junk[::16] += 1  # one write per cache line
                t = time.process_time()
                fn()
                times[name].append(time.process_time() - t)
        flops = 2 * batch * m * k * n
        best = {name: min(v) for name, v in times.items()}
        row = "  ".join(f"{name} {flops / best[name] / 1e9:6.1f} GFLOP/s" for name in sides)
        side = {name: min(t for s, t in best.items() if s.split("#")[0] == name) for name, _ in mods}
        ratios = "  ".join(f"{name}/numpy {best['numpy'] / side[name]:.2f}" for name, _ in mods)
        extra = f"  now/base time {side['now'] / side['base']:.2f}" if base else ""
        print(f"{label:32s} {row}  {ratios}{extra}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("models", "convs", "kernels", "gemms"))
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--only", default="", help=f"models: one of {', '.join(MODELS)}; gemms: shapes whose label has this")
    ap.add_argument("--base", default="", help="kernels, gemms: a tree whose kernels run alternately with these")
    ap.add_argument("--evict", action="store_true", help="gemms: evict L2 before every call")
    ap.add_argument("--copies", type=int, default=1, help="gemms: copies of each side, each with its own buffers")
    ap.add_argument("--blocks", type=int, default=1, help="models: blocks of --reps rounds; per-block ratios and their spread")
    ap.add_argument("--processes", type=int, default=0, help="models: run the blocks in this many fresh processes in turn")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # a --processes child's report
    a = ap.parse_args(argv)
    if a.what == "models" and a.processes:
        run_models_in_processes(a.reps, a.only, a.blocks, a.processes)
    elif a.what == "models":
        run_models(a.reps, a.only, a.blocks, a.json)
    elif a.what == "kernels":
        run_kernels(a.reps, a.base)
    elif a.what == "gemms":
        run_gemms(a.reps, a.base, a.evict, a.copies, a.only)
    else:
        run_convs(a.reps)


if __name__ == "__main__":
    main()
