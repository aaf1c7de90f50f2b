"""Warm start of a light ONNX model: a fresh process's import + ``load_onnx`` + first run, with the
model plan cache (dsl/opgraph/plan_cache.py) off and on, alternated in fresh processes so both see
the same machine load.  Kernels come from the disk cache either way (a first round warms it).

    python -m benchmarks.bench_warm_load --model resnet50 --rounds 3

``--artifact``: instead, ``dsl.load_model`` of the model compiled ahead of time (``opdsl compile
MODEL.onnx -o MODEL.opdsl``, once, first) against onnxruntime's ``InferenceSession(path)``, each
in a fresh process, sides alternating.  Children run with Python's bytecode cache on (in a
private prefix folder, as an installed package has its .pyc files), after one warm-up of each.

    python -m benchmarks.bench_warm_load --model resnet50 --rounds 5 --artifact

``--baseline DIR`` (with ``--artifact``): the same children also run from another opdsl tree (a
``git worktree`` or ``git archive`` of the commit to compare with; its own artifact, its own plan
cache entries), interleaved with this tree's in every round, so both see the same machine load.

    python -m benchmarks.bench_warm_load --model resnet50 --rounds 5 --artifact --baseline /tmp/base

``--mmap`` (with ``--artifact``): this tree's ``load_model(path, mmap=True)`` as one more child per round.
With ``--baseline`` the summary ends with the per-round CPU ratios of the two trees' ``load_model``
children (import, load, first run, total), paired by round.

Each child also reports its process CPU time (every thread's user + system seconds) per phase,
and the summary gives CPU medians beside the wall ones: on a machine shared with other work the
wall times move 2x between rounds, the CPU seconds far less.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, sys, time
c0, t0 = time.process_time(), time.perf_counter()
import numpy as np
import dsl
from dsl.opgraph import plan_cache
from benchmarks.models import light_model_path
c1, t1 = time.process_time(), time.perf_counter()
model = dsl.load_onnx(str(light_model_path(sys.argv[1])), backend=sys.argv[2])
c2, t2 = time.process_time(), time.perf_counter()
name, spec = next(iter(model.inputs.items()))
model.run({name: np.ones(spec.shape, np.float32)})
c3, t3 = time.process_time(), time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "first_run": t3 - t2, "total": t3 - t0,
                  "cpu": {"import": c1 - c0, "load": c2 - c1, "first_run": c3 - c2, "total": c3 - c0},
                  "hits": plan_cache.stats["hits"]}))
"""


_ARTIFACT_CHILD = r"""
import json, sys, time, warnings
c0, t0 = time.process_time(), time.perf_counter()
import numpy as np
import dsl
from dsl.opgraph import artifact_load
try:
    from dsl.opgraph import lazy_constants  # a --baseline tree may not have it
except ImportError:
    lazy_constants = None
warnings.simplefilter("error", dsl.ArtifactWarning)  # a rebuilt or recompiled model is not what is measured
c1, t1 = time.process_time(), time.perf_counter()
model = dsl.load_model(sys.argv[1], **({"mmap": True} if sys.argv[2:] == ["mmap"] else {}))
c2, t2 = time.process_time(), time.perf_counter()
name, spec = next(iter(model.inputs.items()))
model.run({name: np.ones(spec.shape, np.float32)})
c3, t3 = time.process_time(), time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "first_run": t3 - t2, "total": t3 - t0,
                  "cpu": {"import": c1 - c0, "load": c2 - c1, "first_run": c3 - c2, "total": c3 - c0},
                  "kept": artifact_load.stats["kept"], "installed": artifact_load.stats["installed"],
                  "lazy_reads": None if lazy_constants is None else lazy_constants.stats["reads"]}))
"""

_ORT_CHILD = r"""
import json, sys, time
c0, t0 = time.process_time(), time.perf_counter()
import numpy as np
import onnxruntime as ort
c1, t1 = time.process_time(), time.perf_counter()
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
c2, t2 = time.process_time(), time.perf_counter()
inp = session.get_inputs()[0]
session.run(None, {inp.name: np.ones([d if isinstance(d, int) else 1 for d in inp.shape], np.float32)})
c3, t3 = time.process_time(), time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "first_run": t3 - t2, "total": t3 - t0,
                  "cpu": {"import": c1 - c0, "load": c2 - c1, "first_run": c3 - c2, "total": c3 - c0}}))
"""


def _child(code: str, *argv: str, env_extra=None, root: Path = ROOT) -> dict:
    env = dict(os.environ, PYTHONPATH=str(root), **(env_extra or {}))
    out = subprocess.run([sys.executable, "-c", code, *argv], env=env, cwd=root, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _print(label: str, r: dict, what: str = "load") -> None:
    extra = f" (cache entries kept {r['kept']}, installed {r['installed']})" if "kept" in r else ""
    if r.get("lazy_reads") is not None:  # graph constants read from the file (0: only the packed copies ran)
        extra += f" (deferred constants read {r['lazy_reads']})"
    print(f"{label:<44} import {r['import']:.2f} s, {what} {r['load']:.2f} s, first run {r['first_run']:.2f} s, "
          f"total {r['total']:.2f} s (CPU {r['cpu']['load']:.2f} / {r['cpu']['total']:.2f} s){extra}", flush=True)


def artifact_rounds(model: str, backend: str, rounds: int, baseline: Path = None, mmap: bool = False) -> None:
    """``load_model`` of the .opdsl file vs ``InferenceSession`` of the .onnx, fresh processes, alternating
    (and the same from ``baseline``, another opdsl tree, interleaved)."""
    import tempfile
    from benchmarks.models import light_model_path
    onnx_path = str(light_model_path(model))
    trees = {"": ROOT} if baseline is None else {"": ROOT, "baseline ": Path(baseline).resolve()}
    with tempfile.TemporaryDirectory(prefix="bench-artifact-") as tmp:
        arts = {}
        for tag, root in trees.items():
            arts[tag] = str(Path(tmp) / f"{model}-{len(arts)}.opdsl")
            subprocess.run([sys.executable, "-m", "dsl.cli", "compile", onnx_path, "-o", arts[tag], "--backend",
                            backend], env=dict(os.environ, PYTHONPATH=str(root)), cwd=root, check=True)
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        pycs = {tag: {"PYTHONPYCACHEPREFIX": str(Path(tmp) / f"pyc{i}"), "PYTHONDONTWRITEBYTECODE": ""}
                for i, tag in enumerate(trees)}
        for tag, root in trees.items():  # warm-up: .pyc files, page cache, the plan cache entry of this code
            _child(_ARTIFACT_CHILD, arts[tag], env_extra=pycs[tag], root=root)
            run_child(model, backend, True, env_extra=pycs[tag], root=root)
        _child(_ORT_CHILD, onnx_path, env_extra=pycs[""])
        rows = {}
        for _ in range(rounds):
            for tag, root in trees.items():
                r = run_child(model, backend, True, env_extra=pycs[tag], root=root)
                rows.setdefault(tag + "plan", []).append(r)
                _print(f"{tag}opdsl load_onnx (plan cache hit):", r)
                r = _child(_ARTIFACT_CHILD, arts[tag], env_extra=pycs[tag], root=root)
                rows.setdefault(tag + "opdsl", []).append(r)
                _print(f"{tag}opdsl load_model:", r)
                if mmap and not tag:
                    r = _child(_ARTIFACT_CHILD, arts[tag], "mmap", env_extra=pycs[tag], root=root)
                    rows.setdefault("mmap", []).append(r)
                    _print("opdsl load_model(mmap=True):", r)
            r = _child(_ORT_CHILD, onnx_path, env_extra=pycs[""])
            rows.setdefault("ort", []).append(r)
            _print("onnxruntime:", r, "session")
        for part, label in (("load", "load vs InferenceSession"),
                            ("import+load", "import + load vs import + session"),
                            ("total", "import + load + first run")):
            def value(r):
                return r["import"] + r["load"] if part == "import+load" else r[part]
            theirs = statistics.median(value(r) for r in rows["ort"])
            for tag in trees:
                mine = statistics.median(value(r) for r in rows[tag + "opdsl"])
                warm = statistics.median(value(r) for r in rows[tag + "plan"])
                print(f"{tag}median {label}: onnxruntime {theirs:.2f} s; load_model {mine:.2f} s = "
                      f"{mine / theirs:.2f}x; load_onnx with a plan cache hit {warm:.2f} s = {warm / theirs:.2f}x")
            if "mmap" in rows:
                mapped = statistics.median(value(r) for r in rows["mmap"])
                print(f"median {label}: load_model(mmap=True) {mapped:.2f} s = {mapped / theirs:.2f}x")
            # process CPU seconds (every thread's user + system time): what a loaded machine's
            # neighbours disturb far less than wall time
            def cpu(r):
                c = r["cpu"]
                return c["import"] + c["load"] if part == "import+load" else c[part]
            theirs = statistics.median(cpu(r) for r in rows["ort"])
            sides = [(tag + "load_model", rows[tag + "opdsl"]) for tag in trees] + \
                [(tag + "load_onnx plan hit", rows[tag + "plan"]) for tag in trees] + \
                ([("load_model(mmap=True)", rows["mmap"])] if "mmap" in rows else [])
            print(f"  CPU, median {label}: onnxruntime {theirs:.2f} s; " + "; ".join(
                f"{name} {statistics.median(cpu(r) for r in rs):.2f} s = "
                f"{statistics.median(cpu(r) for r in rs) / theirs:.2f}x" for name, rs in sides))
        if baseline is not None:
            _print_paired(rows["opdsl"], rows["baseline opdsl"])


def _print_paired(mine: list, theirs: list) -> None:
    """Per-round CPU ratios of this tree's load_model child to the baseline's (run next to each
    other, so both saw the same load), and their medians: steadier than a ratio of medians."""
    parts = {"import": lambda c: c["import"], "load": lambda c: c["load"], "first run": lambda c: c["first_run"],
             "total": lambda c: c["total"]}
    print("paired CPU, median of per-round ratios this tree / baseline (load_model children): " + "; ".join(
        f"{part} {statistics.median(get(a['cpu']) / get(b['cpu']) for a, b in zip(mine, theirs)):.2f}"
        for part, get in parts.items()))


def run_child(model: str, backend: str, plan_cache: bool, env_extra=None, root: Path = ROOT) -> dict:
    env = dict(os.environ, OPDSL_PLAN_CACHE="1" if plan_cache else "0", PYTHONPATH=str(root), **(env_extra or {}))
    out = subprocess.run([sys.executable, "-c", _CHILD, model, backend], env=env, cwd=root, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--backend", default="numba")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--artifact", action="store_true",
                    help="dsl.load_model of an .opdsl file vs onnxruntime's InferenceSession")
    ap.add_argument("--mmap", action="store_true", help="with --artifact: also load_model(path, mmap=True)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="with --artifact: another opdsl tree whose children run interleaved with this one's")
    args = ap.parse_args(argv)
    if args.artifact:
        artifact_rounds(args.model, args.backend, args.rounds, args.baseline, args.mmap)
        return
    run_child(args.model, args.backend, True)  # warm the kernel cache and store the plan
    rows = {False: [], True: []}
    for _ in range(args.rounds):
        for cached in (False, True):
            r = run_child(args.model, args.backend, cached)
            rows[cached].append(r)
            print(f"plan cache {'on ' if cached else 'off'}: import {r['import']:.2f} s, load_onnx {r['load']:.2f} s, "
                  f"first run {r['first_run']:.2f} s, total {r['total']:.2f} s (plan cache hits {r['hits']})",
                  flush=True)
    for part in ("load", "total"):
        off = statistics.median(r[part] for r in rows[False])
        on = statistics.median(r[part] for r in rows[True])
        print(f"median {part}: off {off:.2f} s, on {on:.2f} s, ratio {on / off:.2f}")


if __name__ == "__main__":
    main()
