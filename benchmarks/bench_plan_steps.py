"""Where a compiled model's run goes, step by step, on one thread: what fusing its layers could
save at most, before writing the fused kernel.

* ``steps``: each plan step's CPU time in a run (the steps called in order, each timed) and hot
  (the same step called again at once, its data and weights in cache), best of N each.  The
  difference is what the step pays for data and weights coming back from L2/L3 between layers:
  the most a fusion that keeps one layer's output in cache for the next could win there.
* ``ablate``: whole runs of the plan with every step of one kind of node left out (outputs
  wrong, times real), alternated with the full plan in one process, the order rotated every
  round, best and median of N.  What a kind costs in a run: an upper bound of what fusing it
  into its neighbours could save (its arithmetic stays).  Kinds: convolutions by window and
  whether they reduce channels (``1x1 reduce``: a squeeze, ``1x1 expand``, ``3x3``...),
  other nodes by op type.

Both time ``Model.run``'s own prepared steps (dsl/opgraph/flat_run.py), so a run is exactly the
sum of its steps (a run timed whole and the same run timed step by step agree within 2 us a
step).  CPU time (``time.process_time``): other processes' time slices are not counted.

    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_plan_steps steps squeezenet [--reps 40]
    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_plan_steps ablate squeezenet [--reps 100]

The model is a light CNN's name (squeezenet, resnet50...), ``bert``, or an .onnx file.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks import models  # noqa: E402


def model_path(name: str) -> str:
    """An .onnx file as it is, ``bert``: the BERT layer, else a light CNN of the onnx wheel."""
    if name.endswith(".onnx"):
        return name
    return str(models.bert_layer() if name == "bert" else models.light_model_path(name))


def compiled_plan(name: str):
    """``name`` (``model_path``) compiled for numba, run until its steps are prepared; returns
    (model, feeds, [(label, kind, step)] in run order)."""
    import onnx

    import dsl
    path = model_path(name)
    feeds = models.random_feeds(onnx.load(path))
    model = dsl.load_onnx(path, backend="numba")
    for _ in range(3):
        model.run(feeds)
    plan = next(iter(model._plans.values())).first
    if plan.flat is None:
        raise SystemExit(f"{name}: the plan has no prepared steps (binding or host values); nothing to time")
    calls = plan.flat._calls
    owner = {}
    for node, first, end in plan.spans:
        for k in range(first, end):
            owner[k] = node
    steps = []
    for k, call in enumerate(calls):
        node = owner.get(k)
        label = "?" if node is None else f"{node.name} {node.op_type.split('::')[-1]} {tuple(node.outputs[0].spec.shape)}"
        steps.append((label, "?" if node is None else node_kind(node), call))
    return model, feeds, steps


def node_kind(node) -> str:
    """A convolution's window and channel change (``1x1 reduce``, ``1x1 expand``, ``3x3``), else
    the op type."""
    op = node.op_type.split("::")[-1]
    if "Conv" not in op or len(node.inputs) < 2 or node.inputs[1] is None or node.inputs[1].spec.ndim != 4:
        return op
    m, c, kh, kw = node.inputs[1].spec.shape
    window = f"{kh}x{kw}"
    if (kh, kw) == (1, 1):
        window += " reduce" if m < c else " expand"
    return window if op in ("Conv", "FusedConv") else f"{op} {window}"


def steps_table(name: str, reps: int) -> None:
    _, _, steps = compiled_plan(name)
    clock = time.process_time
    seq = np.full(len(steps), np.inf)
    hot = np.full(len(steps), np.inf)
    for _ in range(reps):
        for k, (_, _, (fn, args)) in enumerate(steps):
            t = clock()
            fn(*args)
            seq[k] = min(seq[k], clock() - t)
        for k, (_, _, (fn, args)) in enumerate(steps):
            fn(*args)
            t = clock()
            fn(*args)
            hot[k] = min(hot[k], clock() - t)
    print(f"{name}: {len(steps)} steps, best of {reps}, CPU ms: in a run {seq.sum() * 1e3:.3f}, hot "
          f"{hot.sum() * 1e3:.3f}, difference {(seq - hot).sum() * 1e3:+.3f}")
    print(f"  {'step':44s} {'kind':20s} {'in run':>8s} {'hot':>8s} {'diff':>8s}")
    for (label, kind, _), s, h in zip(steps, seq, hot):
        print(f"  {label:44s} {kind[-20:]:20s} {s * 1e3:8.3f} {h * 1e3:8.3f} {(s - h) * 1e3:+8.3f}")
    kinds = sorted({k for _, k, _ in steps})
    print("  by kind: " + "; ".join(
        f"{k} {seq[[i for i, s in enumerate(steps) if s[1] == k]].sum() * 1e3:.3f} / "
        f"{hot[[i for i, s in enumerate(steps) if s[1] == k]].sum() * 1e3:.3f}" for k in kinds) + " (in run / hot)")


def ablate(name: str, reps: int) -> None:
    _, _, steps = compiled_plan(name)
    runs = {"all steps": [s[2] for s in steps]}
    for kind in sorted({k for _, k, _ in steps}):
        runs[f"without {kind}"] = [s[2] for s in steps if s[1] != kind]
    clock = time.process_time
    times = {k: [] for k in runs}
    order = list(runs)
    for rep in range(reps):
        for key in order[rep % len(order):] + order[:rep % len(order)]:
            calls = runs[key]
            t = clock()
            for fn, args in calls:
                fn(*args)
            times[key].append(clock() - t)
    base, base_med = min(times["all steps"]), float(np.median(times["all steps"]))
    print(f"{name}: whole runs, best (median) of {reps}, CPU ms; saved = the full plan's best minus this one's")
    for key, v in times.items():
        saved = base - min(v)
        print(f"  {key[-36:]:36s} {len(runs[key]):3d} steps  {min(v) * 1e3:7.3f} ({np.median(v) * 1e3:7.3f})  saved "
              f"{saved * 1e3:+.3f} ms ({saved / base * 100:+.1f} %), median {(base_med - np.median(v)) * 1e3:+.3f}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("steps", "ablate"))
    ap.add_argument("model", help="squeezenet, resnet50 (light CNNs), bert or an .onnx file")
    ap.add_argument("--reps", type=int, default=None, help="rounds (steps: 40, ablate: 100)")
    a = ap.parse_args(argv)
    if a.what == "steps":
        steps_table(a.model, a.reps or 40)
    else:
        ablate(a.model, a.reps or 100)


if __name__ == "__main__":
    main()
