"""``opdsl bench model.onnx``: opdsl next to onnxruntime on one model, same inputs.

Loads the model with ``dsl.load_onnx`` (timed: that is the compile time, plus the first
run, which compiles what depends on run-time shapes), runs both on the same inputs,
checks the outputs agree, times both, and shows where opdsl's time goes (the slowest
nodes of ``Model.profile``; ``--profile``: every node).

onnxruntime is only the reference here, never a dependency of opdsl: it is imported
when the command runs, and without it the command times opdsl alone and says how to
install it.
"""
from __future__ import annotations

import itertools
import statistics
import sys
import time
from typing import List

import numpy as np

from dsl.cli.errors import UserError, require_file, require_packages
from dsl.cli.feeds import make_feeds, parse_pairs

ORT_HINT = "pip install onnxruntime"


class BenchError(UserError):
    """A problem with the command's arguments or the model; printed without a traceback."""


def time_in_blocks(fns: List, repeat: int, warmup: int, block: int = 5, warm_s: float = 0.1) -> List[List[float]]:
    """Seconds of ``repeat`` calls of each function, taken in rounds: each round gives every
    function ``warmup`` untimed and then ``block`` timed calls.

    Rounds let a change of load on a shared machine hit every function alike; blocks (rather
    than alternating single calls) let each runtime's thread pool settle, because onnxruntime's
    workers spin for a while after a call and would take the cores from the next one (it made
    light_squeezenet's opdsl median 11.2 ms interleaved call by call against 7.7 ms alone).  So
    the warm-up of a block lasts ``warmup`` calls and at least ``warm_s`` seconds: the BERT layer
    of benchmarks/models.py ran 2.5-3 ms for ~50 ms after an onnxruntime block, 1.38 ms after."""
    times: List[List[float]] = [[] for _ in fns]
    while len(times[0]) < repeat:
        for fn, acc in zip(fns, times):
            t_end = time.perf_counter() + warm_s
            for k in itertools.count():
                if k >= warmup and time.perf_counter() >= t_end:
                    break
                fn()
            for _ in range(min(block, repeat - len(acc))):
                t0 = time.perf_counter()
                fn()
                acc.append(time.perf_counter() - t0)
    return times


def _ort_session(path: str):
    """An onnxruntime session on the CPU, or (None, reason) when onnxruntime is missing."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        return None, (f"onnxruntime is not installed ({e}); it is only the reference `opdsl bench` compares "
                      f"with: install it with `{ORT_HINT}` (or `pip install opdsl[bench]`)")
    try:
        return ort.InferenceSession(path, providers=["CPUExecutionProvider"]), f"onnxruntime {ort.__version__}"
    except Exception as e:
        return None, f"onnxruntime cannot load the model: {type(e).__name__}: {str(e).splitlines()[0]}"


def _custom_domains(proto) -> List[str]:
    """The node domains of ``proto`` that onnxruntime does not implement (a package's own ops)."""
    known = {"", "ai.onnx", "ai.onnx.ml", "com.microsoft"}
    return sorted({n.domain for n in proto.graph.node} - known)


def run(args, out=None) -> int:
    """The ``bench`` subcommand; returns the exit code (1 when the outputs disagree)."""
    import onnx

    from dsl.cli.run import load_model
    from dsl.opgraph.profile import format_seconds as fmt

    out = out or sys.stdout
    say = lambda *a: print(*a, file=out)  # noqa: E731
    path = require_file(args.model)
    packages = require_packages(args.package)
    if args.repeat < 1 or args.warmup < 0 or args.top < 0:
        raise BenchError("--repeat must be >= 1, --warmup and --top >= 0")
    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception as e:
        raise BenchError(f"{path} is not a readable ONNX model: {type(e).__name__}: {e}") from None
    feeds, notes = make_feeds(proto, parse_pairs(args.input, "--input"), parse_pairs(args.dim, "--dim"), args.seed)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    say(f"model: {path} ({len(proto.graph.node)} nodes, opset {opset}), opdsl backend {args.backend}")
    for n in notes:
        say(f"input: {n}")

    t0 = time.perf_counter()
    model = load_model(path, packages, args.backend)
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    try:
        got = model.run(feeds)
    except Exception as e:  # feeds the model rejects, a package kernel that raised
        raise BenchError(f"running {path}: {type(e).__name__}: {e}") from e
    t_first = time.perf_counter() - t0
    say(f"opdsl graph: {len(model.graph.nodes)} nodes after rewrites ("
        + ", ".join(f"{k}={v}" for k, v in model.stats.items()) + ")")
    say(f"opdsl load + plan:     {fmt(t_load)}")
    say(f"opdsl first run:       {fmt(t_first)} (compiles the kernels the disk cache does not hold)")
    say(f"opdsl compile time:    {fmt(t_load + t_first)} (load + first run)")
    custom = _custom_domains(proto)
    sess, ort_note = (None, f"onnxruntime cannot run the custom ops of {', '.join(custom)} (only opdsl runs "
                            "them, from --package); timing opdsl alone") if custom and packages else _ort_session(path)
    ort_feeds = {} if sess is None else {i.name: feeds[i.name] for i in sess.get_inputs()}
    fns = [lambda: model.run(feeds)] + ([] if sess is None else [lambda: sess.run(None, ort_feeds)])
    timings = time_in_blocks(fns, args.repeat, max(1, args.warmup))
    ours = timings[0]
    ours_med = statistics.median(ours)
    say(f"opdsl latency:         {fmt(ours_med)} (median of {args.repeat}, min {fmt(min(ours))})")
    status = 0
    if sess is None:
        say(f"onnxruntime latency:   n/a ({ort_note})")
        print(f"opdsl bench: {ort_note}", file=sys.stderr)
    else:
        ort_names = [o.name for o in sess.get_outputs()]
        theirs = timings[1]
        theirs_med = statistics.median(theirs)
        say(f"onnxruntime latency:   {fmt(theirs_med)} (median of {args.repeat}, min {fmt(min(theirs))}; {ort_note})")
        ratio = ours_med / theirs_med if theirs_med > 0 else float("inf")
        say(f"ratio opdsl / onnxruntime: {ratio:.2f}x" + (" (opdsl faster)" if ratio < 1 else ""))
        for name, ref in zip(ort_names, sess.run(None, ort_feeds)):
            mine = got.get(name)
            if mine is None or np.shape(mine) != np.shape(ref):
                say(f"output {name}: MISMATCH shape {None if mine is None else mine.shape} vs onnxruntime {np.shape(ref)}")
                status = 1
                continue
            a, b = np.asarray(mine), np.asarray(ref)
            diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
            ok = a.dtype == b.dtype and np.allclose(a, b, rtol=args.rtol, atol=args.atol, equal_nan=True)
            status = status or (0 if ok else 1)
            say(f"output {name}: max abs diff {diff:.3g} "
                + ("(ok)" if ok else f"MISMATCH (rtol {args.rtol}, atol {args.atol}, dtypes {a.dtype}/{b.dtype})"))

    prof = model.profile(feeds, repeat=args.repeat, warmup=min(args.warmup, 1))
    top = prof.slowest(args.top)
    say("")
    say(f"slowest {len(top)} of {len(prof.rows)} nodes (profile: mean of {args.repeat} runs, "
        f"nodes sum to {fmt(prof.total_s)}):")
    say(prof.table(top))
    say("")
    say("by op type: " + ", ".join(f"{op} {100 * share:.1f}% ({n})" for op, n, _, share in prof.by_op_type()))
    if args.profile:
        say("")
        say(str(prof))
    return status


def register(sub) -> None:
    from backends import base
    b = sub.add_parser("bench", help="time a model with opdsl and onnxruntime, check they agree, profile opdsl",
                       description="Load a model with opdsl, run it next to onnxruntime on the same inputs, "
                                   "check the outputs agree, time both and show where opdsl's time goes.",
                       epilog="example: opdsl bench model.onnx --dim batch=8 --repeat 50 --profile")
    b.add_argument("model", help="an .onnx file")
    b.add_argument("--backend", default="numba", choices=base.names(), help="opdsl backend (default numba)")
    b.add_argument("--package", action="append", metavar="PKG", default=[],
                   help="an op package folder, or its opdsl-package.yaml, defining the model's custom ops "
                        "(repeatable)")
    b.add_argument("--repeat", type=int, default=20, help="timed runs of each (default 20)")
    b.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    b.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                   help="feed this input from a .npy file (repeatable; default: random values by dtype)")
    b.add_argument("--dim", action="append", metavar="NAME=SIZE",
                   help="size of a symbolic dimension for random inputs (repeatable; default 1)")
    b.add_argument("--profile", action="store_true", help="also print the per-node table of every node")
    b.add_argument("--top", type=int, default=10, help="how many of the slowest nodes to show (default 10)")
    b.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance of the output check (default 1e-3)")
    b.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance of the output check (default 1e-4)")
    b.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    b.set_defaults(func=run)
