"""Warm start of a light ONNX model: a fresh process's import + ``load_onnx`` + first run, with the
model plan cache (dsl/opgraph/plan_cache.py) off and on, alternated in fresh processes so both see
the same machine load.  Kernels come from the disk cache either way (a first round warms it).

    python -m benchmarks.bench_warm_load --model resnet50 --rounds 3
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


def run_child(model: str, backend: str, plan_cache: bool) -> dict:
    env = dict(os.environ, OPDSL_PLAN_CACHE="1" if plan_cache else "0", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", _CHILD, model, backend], env=env, cwd=ROOT, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--backend", default="numba")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
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
