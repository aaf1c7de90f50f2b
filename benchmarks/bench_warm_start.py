"""Warm starts (issue 28): a new process with a warm disk cache, to its first result.

- ``model``: ``import dsl`` + ``load_onnx(light_resnet50)`` + first run, against onnxruntime's
  import + ``InferenceSession`` + first run of the same file.
- ``kernel``: import + first call of a kernel whose compiled code is on disk, against numba's
  ``njit(parallel=True, cache=True)`` of the same loop with its cache warm.

Each sample is a fresh process timed from its first line (``time.perf_counter`` before the
imports); the sides alternate round by round and each keeps its best.  One unrecorded round
first fills the caches (and, with ``PYTHONDONTWRITEBYTECODE`` unset in the children, the
``.pyc`` files, as an installed package has them).  ``--baseline TREE`` adds opdsl imported from
another source tree (an export of main) for a before/after in the same run; it gets a cache of
its own (generated modules name their kernels' files, so two trees would overwrite each other's
entries), made cold in the warm-up round.  ``--no-records`` adds this tree with its front-end
records deleted before each of its runs (docs/cache.md, "Warm starts skip the front end"): the
front end's share of the warm start, in the same cache.

    python -m benchmarks.bench_warm_start --rounds 5 --no-records
    python -m benchmarks.bench_warm_start --only kernel --baseline /tmp/main-export

Timing script, not a test; results go to benchmarks/RESULTS.md by hand.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from benchmarks import bench_first_call

ROOT = Path(__file__).resolve().parent.parent

MODEL_OPDSL = '''
import time, json, sys
w0 = time.perf_counter()
import numpy as np
import dsl
name, shape, path = json.loads(sys.argv[1])
model = dsl.load_onnx(path, backend="numba")
model.run({name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)})
print(json.dumps({"wall": time.perf_counter() - w0}))
'''
MODEL_ORT = '''
import time, json, sys
w0 = time.perf_counter()
import numpy as np
import onnxruntime as ort
name, shape, path = json.loads(sys.argv[1])
sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
sess.run(None, {name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)})
print(json.dumps({"wall": time.perf_counter() - w0}))
'''
# the first-call benchmark's kernel (its output also carries "cpu", which is not read here); numba's
# side caches its machine code on disk, as a warm start of a deployed script would
KERNEL_OPDSL = bench_first_call.OPDSL
KERNEL_NUMBA = bench_first_call.NUMBA.replace("@numba.njit(parallel=True)", "@numba.njit(parallel=True, cache=True)")
assert "cache=True" in KERNEL_NUMBA


def _child_env(tree: Path, cache_dir: Path) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "OPDSL_NO_DISK_CACHE")}
    env.update(OPDSL_CACHE_DIR=str(cache_dir), PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(cache_dir / "numba-user"))
    return env


def run(script: Path, tree: Path, cache_dir: Path, argv: List[str] = ()) -> float:
    out = subprocess.run([sys.executable, str(script), *argv], env=_child_env(tree, cache_dir), capture_output=True,
                         text=True, cwd=script.parent)
    if out.returncode:
        raise RuntimeError(f"{script.name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["wall"]


def model_args(name: str) -> List[str]:
    import onnx

    from benchmarks.models import light_model_path
    path = str(light_model_path(name))
    proto = onnx.load(path, load_external_data=False)
    inits = {t.name for t in proto.graph.initializer}
    inp = next(i for i in proto.graph.input if i.name not in inits)
    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
    return [json.dumps([inp.name, shape, path])]


def alternate(sides: List[Tuple[str, str, Path]], rounds: int, argv: List[str], cache_dir: Path,
              work: Path) -> Dict[str, float]:
    """Best wall time per side over ``rounds`` alternating rounds, after one warm-up round."""
    scripts = {}
    for name, code, _ in sides:
        scripts[name] = work / f"warm_{name.replace(' ', '_')}.py"
        scripts[name].write_text(code)
    best: Dict[str, float] = {}
    for r in range(rounds + 1):
        for name, _, tree in sides:
            if name == "no records":
                for p in (cache_dir / "numba-frontend").glob("*.json"):
                    p.unlink()
            t = run(scripts[name], tree, work / "baseline-cache" if name == "baseline" else cache_dir, argv)
            if r:  # round 0 fills the caches
                best[name] = min(best.get(name, t), t)
    return best


def report(title: str, anchor: str, best: Dict[str, float], rounds: int) -> None:
    print(f"{title}: best of {rounds} fresh processes, warm caches (1-minute load average {os.getloadavg()[0]:.1f})")
    for name, t in best.items():
        if name != anchor:
            print(f"  {name}: {t:.2f} s = {t / best[anchor]:.2f}x {anchor} ({best[anchor]:.2f} s)")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="kernel,model", help="kernel, model")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", default="resnet50", help="a light_<name> model of the onnx wheel")
    ap.add_argument("--baseline", type=Path, help="another opdsl source tree to time beside this one")
    ap.add_argument("--no-records", action="store_true", help="also time this tree without front-end records")
    ap.add_argument("--cache", type=Path, help="the warm cache folder (default: OPDSL_CACHE_DIR, else a new one)")
    args = ap.parse_args(argv)
    only = args.only.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        work = Path(tmp)
        cache_dir = args.cache or Path(os.environ.get("OPDSL_CACHE_DIR") or work / "cache")
        if "kernel" in only:
            sides = [("opdsl", KERNEL_OPDSL, ROOT), ("numba", KERNEL_NUMBA, ROOT)]
            if args.baseline:
                sides.insert(1, ("baseline", KERNEL_OPDSL, args.baseline))
            if args.no_records:
                sides.insert(1, ("no records", KERNEL_OPDSL, ROOT))
            report("kernel warm first call", "numba", alternate(sides, args.rounds, [], cache_dir, work), args.rounds)
        if "model" in only:
            sides = [("opdsl", MODEL_OPDSL, ROOT), ("onnxruntime", MODEL_ORT, ROOT)]
            if args.baseline:
                sides.insert(1, ("baseline", MODEL_OPDSL, args.baseline))
            if args.no_records:
                sides.insert(1, ("no records", MODEL_OPDSL, ROOT))
            report(f"light_{args.model} warm start", "onnxruntime",
                   alternate(sides, args.rounds, model_args(args.model), cache_dir, work), args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
