"""Warm start of a light ONNX model: a fresh process's import + ``load_onnx`` + first run, with the
model plan cache (dsl/opgraph/plan_cache.py) off and on, alternated in fresh processes so both see
the same machine load.  Kernels come from the disk cache either way (a first round warms it).

    python -m benchmarks.bench_warm_load --model resnet50 --rounds 3

``--artifact``: instead, ``dsl.load_model`` of the model compiled ahead of time (``opdsl compile
MODEL.onnx -o MODEL.opdsl``, once, first) against onnxruntime's ``InferenceSession(path)``, each
in a fresh process, sides alternating.  Children run with Python's bytecode cache on (in a
private prefix folder, as an installed package has its .pyc files), after one warm-up of each.

    python -m benchmarks.bench_warm_load --model resnet50 --rounds 5 --artifact
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
t0 = time.perf_counter()
import numpy as np
import dsl
from dsl.opgraph import plan_cache
from benchmarks.models import light_model_path
t1 = time.perf_counter()
model = dsl.load_onnx(str(light_model_path(sys.argv[1])), backend=sys.argv[2])
t2 = time.perf_counter()
name, spec = next(iter(model.inputs.items()))
model.run({name: np.ones(spec.shape, np.float32)})
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "first_run": t3 - t2, "total": t3 - t0,
                  "hits": plan_cache.stats["hits"]}))
"""


_ARTIFACT_CHILD = r"""
import json, sys, time, warnings
t0 = time.perf_counter()
import numpy as np
import dsl
from dsl.opgraph import artifact_load
warnings.simplefilter("error", dsl.ArtifactWarning)  # a rebuilt or recompiled model is not what is measured
t1 = time.perf_counter()
model = dsl.load_model(sys.argv[1])
t2 = time.perf_counter()
name, spec = next(iter(model.inputs.items()))
model.run({name: np.ones(spec.shape, np.float32)})
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "first_run": t3 - t2, "total": t3 - t0,
                  "kept": artifact_load.stats["kept"], "installed": artifact_load.stats["installed"]}))
"""

_ORT_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import onnxruntime as ort
t1 = time.perf_counter()
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
t2 = time.perf_counter()
inp = session.get_inputs()[0]
session.run(None, {inp.name: np.ones([d if isinstance(d, int) else 1 for d in inp.shape], np.float32)})
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "first_run": t3 - t2, "total": t3 - t0}))
"""


def _child(code: str, *argv: str, env_extra=None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env_extra or {}))
    out = subprocess.run([sys.executable, "-c", code, *argv], env=env, cwd=ROOT, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def artifact_rounds(model: str, backend: str, rounds: int) -> None:
    """``load_model`` of the .opdsl file vs ``InferenceSession`` of the .onnx, fresh processes, alternating."""
    import tempfile
    from benchmarks.models import light_model_path
    onnx_path = str(light_model_path(model))
    with tempfile.TemporaryDirectory(prefix="bench-artifact-") as tmp:
        art = str(Path(tmp) / f"{model}.opdsl")
        subprocess.run([sys.executable, "-m", "dsl.cli", "compile", onnx_path, "-o", art, "--backend", backend],
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, check=True)
        pyc = {"PYTHONPYCACHEPREFIX": str(Path(tmp) / "pyc"), "PYTHONDONTWRITEBYTECODE": ""}
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        _child(_ARTIFACT_CHILD, art, env_extra=pyc)  # warm-up: .pyc files, page cache
        _child(_ORT_CHILD, onnx_path, env_extra=pyc)
        run_child(model, backend, True, env_extra=pyc)  # the plan cache entry of this code
        rows = {"opdsl": [], "ort": [], "plan": []}
        for _ in range(rounds):
            r = run_child(model, backend, True, env_extra=pyc)
            rows["plan"].append(r)
            print(f"opdsl load_onnx (plan cache hit): import {r['import']:.2f} s, load {r['load']:.2f} s, first run "
                  f"{r['first_run']:.2f} s", flush=True)
            r = _child(_ARTIFACT_CHILD, art, env_extra=pyc)
            rows["opdsl"].append(r)
            print(f"opdsl load_model: import {r['import']:.2f} s, load {r['load']:.2f} s, first run "
                  f"{r['first_run']:.2f} s (cache entries kept {r['kept']}, installed {r['installed']})", flush=True)
            r = _child(_ORT_CHILD, onnx_path, env_extra=pyc)
            rows["ort"].append(r)
            print(f"onnxruntime:      import {r['import']:.2f} s, session {r['load']:.2f} s, first run "
                  f"{r['first_run']:.2f} s", flush=True)
        for part, label in (("load", "load_model vs InferenceSession"),
                            ("import+load", "import + load vs import + session"),
                            ("total", "import + load + first run")):
            def value(r):
                return r["import"] + r["load"] if part == "import+load" else r[part]
            mine = statistics.median(value(r) for r in rows["opdsl"])
            theirs = statistics.median(value(r) for r in rows["ort"])
            warm = statistics.median(value(r) for r in rows["plan"])
            print(f"median {label}: opdsl {mine:.2f} s, onnxruntime {theirs:.2f} s, ratio {mine / theirs:.2f} "
                  f"(load_onnx with a plan cache hit {warm:.2f} s)")


def run_child(model: str, backend: str, plan_cache: bool, env_extra=None) -> dict:
    env = dict(os.environ, OPDSL_PLAN_CACHE="1" if plan_cache else "0", PYTHONPATH=str(ROOT), **(env_extra or {}))
    out = subprocess.run([sys.executable, "-c", _CHILD, model, backend], env=env, cwd=ROOT, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--backend", default="numba")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--artifact", action="store_true",
                    help="dsl.load_model of an .opdsl file vs onnxruntime's InferenceSession")
    args = ap.parse_args(argv)
    if args.artifact:
        artifact_rounds(args.model, args.backend, args.rounds)
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
