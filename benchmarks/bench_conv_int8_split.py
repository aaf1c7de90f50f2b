"""Where an int8 3×3 convolution's time goes, launch by launch (issue 29): the requantizing
QLinearConv shapes of benchmarks/bench_int8.py called directly through ops/conv_int8.py's
``conv_int8`` (the VNNI direct kernel) and ops/conv_int8_amx.py's ``conv_int8_amx`` (the tile
paths), each launch timed by the ``launch`` recorder hook (process CPU time, best of the rounds),
the sides alternated round by round in one process, one numba thread.

``models``: the quantized models (and one-node rows) of benchmarks/bench_int8.py whose name
holds the filter, each built twice, before and after the implicit GEMM (ops/conv_int8_implicit.py:
the "before" model is built and planned with it switched off), run alternately with
onnxruntime, one thread a side, best process CPU time of each.

``direct-models REV``: bench_int8's one-node models planned with REV's direct kernel and with
this tree's, against onnxruntime (``direct_models_ab``).

``direct REV`` / ``implicit REV``: ops/conv_int8_direct.py's ``conv_int8_direct`` (or
ops/conv_int8_implicit.py's ``conv_int8_implicit``) as this tree has it against the same file at
git revision REV (loaded as another module, so its kernels compile apart), alternated on the 3×3
shapes and, for the direct kernel, 1×1 ones and an unpadded 3×3 (whose panels cross rows: the
picked stores), for the implicit GEMM two 3×3/2 ones, requantized (u8 out) and exact (i32 out),
one thread, best CPU time of each.

Usage: PYTHONPATH=. python benchmarks/bench_conv_int8_split.py [rounds] [shape-filter]
       PYTHONPATH=. python benchmarks/bench_conv_int8_split.py models [rounds] [case-filter] [threads]
       PYTHONPATH=. python benchmarks/bench_conv_int8_split.py direct|implicit REV [rounds]
       PYTHONPATH=. python benchmarks/bench_conv_int8_split.py direct-models REV [rounds] [pause] [case,filters]
"""
import os
import sys
import time
from collections import defaultdict

import numba
import numpy as np

SHAPES = ((64, 56, 64, 3, 1), (128, 28, 128, 3, 1), (256, 14, 256, 3, 1), (512, 7, 512, 3, 1),  # (C, H = W, M,
          (3, 224, 64, 7, 2), (32, 112, 64, 3, 2), (128, 56, 128, 3, 2), (256, 28, 256, 3, 2))  # k, stride), pad k // 2


def problem(c, h, m, k, rng):
    x = rng.integers(0, 256, (1, c, h, h)).astype(np.uint8)
    w = rng.integers(-64, 64, (m, c, k, k)).astype(np.int8)
    w.setflags(write=False)  # a model's constant: packed once
    mult = (0.02 * rng.uniform(0.002, 0.006, m) / 0.5).astype(np.float32)
    bias = rng.integers(-3000, 3000, m).astype(np.int32)
    return x, w, np.array([128], np.uint8), np.zeros(m, np.int8), mult, bias


def sides():
    """name -> f(x, w, y, zx, zw, geom, mult, bias, launch): each path the ops may select (the tiles
    before the implicit GEMM: B packed over the padded width, strided ones after space-to-depth)."""
    from ops.conv_int8 import conv_int8
    from ops import conv_int8_amx as amx
    out = {"vnni direct": lambda x, w, y, zx, zw, g, mult, bias, launch:
           conv_int8(x, w, y, zx, zw, g, mult, bias, 128, "numba", launch=launch)}
    out["tiles (before: packed B panels)"] = lambda x, w, y, zx, zw, g, mult, bias, launch: amx.conv_int8_amx(
        x, w, y, zx, zw, g, mult, bias, 128, "numba", launch=launch, implicit=False)
    out["tiles (implicit GEMM where it takes)"] = lambda x, w, y, zx, zw, g, mult, bias, launch: amx.conv_int8_amx(
        x, w, y, zx, zw, g, mult, bias, 128, "numba", launch=launch)
    return out


def models(rounds: int, pick: str, threads: int = 1) -> None:
    """Before / after the implicit GEMM / onnxruntime, alternated, on bench_int8's cases."""
    import dsl
    from benchmarks import bench_int8
    from ops import conv_int8_amx as amx
    numba.set_num_threads(threads)
    print(f"{threads} thread(s) a side, load average {os.getloadavg()[0]:.1f}, best of {rounds} rounds, process CPU ms")
    for name, make in bench_int8.CASES.items():
        if pick not in name:
            continue
        proto, feeds = make()
        sess = bench_int8.ort_session(proto, threads)
        built = {}
        for side, on in (("before", False), ("after", True)):
            keep = amx.implicit_ok, amx.implicit_pays
            if not on:  # the selection and packings before: tiles from AMX_MIN_CHANNELS, B panels
                amx.implicit_ok, amx.implicit_pays = (lambda *a: False), (lambda c, s: c >= amx.AMX_MIN_CHANNELS)
            try:
                built[side] = dsl.load_onnx(proto, backend="numba")
                got = list(built[side].run(feeds).values())[0]  # selects and plans with the setting
            finally:
                amx.implicit_ok, amx.implicit_pays = keep
            want = sess.run(None, feeds)[0]
            diff = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
            built[side + " diff"] = diff
        runs = {"before": lambda: built["before"].run(feeds), "after": lambda: built["after"].run(feeds),
                "onnxruntime": lambda: sess.run(None, feeds)}
        best = dict.fromkeys(runs, float("inf"))
        for _ in range(rounds):
            for side, run in runs.items():
                t = time.process_time()
                run()
                best[side] = min(best[side], time.process_time() - t)
        b, a, o = best["before"], best["after"], best["onnxruntime"]
        print(f"| {name} | {b * 1e3:.2f} ms | {a * 1e3:.2f} ms | {o * 1e3:.2f} ms | {b / o:.2f}x | {a / o:.2f}x | "
              f"after/before {a / b:.2f} | max diff to ort {built['before diff']:g} / {built['after diff']:g} |",
              flush=True)


def module_at(rev: str, path: str):
    """The module at ``path`` (ops/...) as git revision ``rev`` has it, loaded under another name
    (its kernels compile apart from this tree's)."""
    import importlib.util
    import subprocess
    import tempfile
    source = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True, check=True).stdout
    name = os.path.basename(path)[:-3] + "_old"
    file = os.path.join(tempfile.mkdtemp(), name + ".py")
    with open(file, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def old_new_ab(rev: str, rounds: int, which: str) -> None:
    """This tree's direct kernel or implicit GEMM against REV's, alternated (module docstring)."""
    from ops import conv_int8_direct, conv_int8_implicit
    new = conv_int8_direct if which == "direct" else conv_int8_implicit
    old = module_at(rev, f"ops/conv_int8_{which}.py")
    numba.set_num_threads(1)
    rng = np.random.default_rng(29)
    print(f"one thread, load average {os.getloadavg()[0]:.1f}, best of {rounds} rounds, CPU ms; {rev} against this tree")
    cases = [(c, h, m, 3, 1) for c, h, m, _, _ in SHAPES[:4]]
    if which == "direct":
        cases += [(64, 56, 64, 1, 0), (256, 14, 64, 1, 0), (64, 30, 64, 3, 0)]
    else:
        cases += [(128, 56, 128, 3, 1), (256, 28, 256, 3, 1)]  # the last two strided
    for n_case, (c, h, m, k, pad) in enumerate(cases):
        st = 2 if which == "implicit" and n_case >= 4 else 1
        x, w, zx, zw, mult, bias = problem(c, h, m, k, rng)
        o = (h + 2 * pad - k) // st + 1
        geom = [k, k, st, st, pad, pad, 1, 1, o, o]
        for out in (np.uint8, np.int32):
            q = (mult, bias, 128) if out == np.uint8 else (None, None, 0)
            best, ys = {}, {}
            for _ in range(rounds):
                for name, mod in (("old", old), ("new", new)):
                    y = np.empty((1, m, o, o), out)
                    t = time.process_time()
                    if which == "direct":
                        mod.conv_int8_direct(x, w, y, zx, geom, *q, backend="numba", w_zp=zw)
                    else:
                        mod.conv_int8_implicit(x, w, y, zx, geom, *q, backend="numba")
                    best[name] = min(best.get(name, float("inf")), time.process_time() - t)
                    ys[name] = y
            same = "same output" if np.array_equal(ys["old"], ys["new"]) else "OUTPUT DIFFERS"
            print(f"| {c}x{h}x{h}->{m} {k}x{k}/{st} pad {pad}, {np.dtype(out).name} out | {best['old'] * 1e3:.3f} ms | "
                  f"{best['new'] * 1e3:.3f} ms | new/old {best['new'] / best['old']:.3f} | {same} |", flush=True)


def direct_models_ab(rev: str, rounds: int, pause: float, picks: str) -> None:
    """``direct-models REV``: bench_int8's cases whose name holds one of the comma-separated
    ``picks``, each built twice, the "before" model with REV's ``conv_int8_direct`` in
    ops/conv_int8.py while it plans, alternated with onnxruntime, one thread, ``pause`` seconds
    before each side.  The plan cache is switched off: two models of the same bytes in one
    process would otherwise share its entry, the second reading the first one's launches."""
    os.environ["OPDSL_PLAN_CACHE"] = "0"
    import dsl
    from benchmarks import bench_int8
    import ops.conv_int8 as conv_int8
    old = module_at(rev, "ops/conv_int8_direct.py")
    numba.set_num_threads(1)
    print(f"one thread a side, load average {os.getloadavg()[0]:.1f}, best of {rounds} rounds, {pause} s pauses, "
          f"process CPU ms; {rev}'s conv_int8_direct against this tree's")
    for name, make in bench_int8.CASES.items():
        if not any(p in name for p in picks.split(",")):
            continue
        proto, feeds = make()
        sess = bench_int8.ort_session(proto, 1)
        want = sess.run(None, feeds)[0]
        runs = {}
        for side in ("before", "after"):
            keep = conv_int8.conv_int8_direct
            if side == "before":
                conv_int8.conv_int8_direct = old.conv_int8_direct
            try:
                model = dsl.load_onnx(proto, backend="numba")
                same = np.array_equal(list(model.run(feeds).values())[0], want)
            finally:
                conv_int8.conv_int8_direct = keep
            runs[side] = lambda model=model: model.run(feeds)
        runs["onnxruntime"] = lambda: sess.run(None, feeds)
        best = dict.fromkeys(runs, float("inf"))
        for _ in range(rounds):
            for side, run in runs.items():
                if pause:
                    time.sleep(pause)
                t = time.process_time()
                run()
                best[side] = min(best[side], time.process_time() - t)
        b, a, o = best["before"], best["after"], best["onnxruntime"]
        print(f"| {name} | {b * 1e3:.3f} | {a * 1e3:.3f} | {o * 1e3:.3f} | {b / o:.2f}x | {a / o:.2f}x | "
              f"after/before {a / b:.2f} | {'equal to ort' if same else 'DIFFERS from ort'} |", flush=True)


def main(argv):
    if argv and argv[0] == "direct-models":
        direct_models_ab(argv[1], int(argv[2]) if len(argv) > 2 else 30, float(argv[3]) if len(argv) > 3 else 0.0,
                         argv[4] if len(argv) > 4 else "1x1/1")
        return
    if argv and argv[0] in ("direct", "implicit"):
        old_new_ab(argv[1], int(argv[2]) if len(argv) > 2 else 20, argv[0])
        return
    if argv and argv[0] == "models":
        models(int(argv[1]) if len(argv) > 1 else 10, argv[2] if len(argv) > 2 else "quantize_static",
               int(argv[3]) if len(argv) > 3 else 1)
        return
    rounds = int(argv[0]) if argv else 20
    pick = argv[1] if len(argv) > 1 else ""
    numba.set_num_threads(1)
    rng = np.random.default_rng(29)
    print(f"one thread, load average {os.getloadavg()[0]:.1f}, best of {rounds} rounds, CPU ms per launch")
    for c, h, m, k, s in SHAPES:
        name = f"{c}x{h}x{h}->{m} {k}x{k}/{s}"
        if pick not in name:
            continue
        x, w, zx, zw, mult, bias = problem(c, h, m, k, rng)
        o = (h + 2 * (k // 2) - k) // s + 1
        geom = [k, k, s, s, k // 2, k // 2, 1, 1, o, o]
        paths = sides()
        best = {k: defaultdict(lambda: float("inf")) for k in paths}
        outs = {}
        for _ in range(rounds):
            for side, run in paths.items():
                spent = defaultdict(float)

                def launch(kernel, spent=spent):
                    def timed(*a, **k):
                        t = time.process_time()
                        kernel(*a, **k)
                        spent[kernel.__name__] += time.process_time() - t
                    return timed
                y = np.empty((1, m, o, o), np.uint8)
                t = time.process_time()
                run(x, w, y, zx, zw, geom, mult, bias, launch)
                total = time.process_time() - t
                for k, v in spent.items():
                    best[side][k] = min(best[side][k], v)
                best[side]["total"] = min(best[side]["total"], total)
                outs[side] = y
        ref = outs["vnni direct"]
        for side, b in best.items():
            same = "same output" if np.array_equal(outs[side], ref) else "OUTPUT DIFFERS"
            parts = ", ".join(f"{k} {v * 1e3:.3f}" for k, v in b.items() if k != "total")
            print(f"| {name} | {side} | {b['total'] * 1e3:.3f} ms | {parts} | {same} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
