"""A 1×1 convolution's pooled epilogue (FusedConvGlobalPool, issue 29) against the two nodes it
replaces, alternated in one process, CPU time, best of N (the machine is shared):

* ``head``: the kernels alone on squeezenet's head, NCHWc16 x (1, 512, 13, 13) -> 1000 channels
  + Relu: conv_pointwise into NCHWc16 then global_pool_blocked, against one pooled launch.
* ``models``: squeezenet and resnet50 compiled with the rewrite and without it (its rule
  removed), and onnxruntime, on one thread a side.
* ``nodes``: squeezenet's head nodes in both models, best of N single-run profiles.

    NUMBA_NUM_THREADS=1 PYTHONPATH=. python -m benchmarks.bench_conv_global_pool head|models|nodes [--reps 200]
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def best_cpu_ms(runs: dict, reps: int) -> dict:
    """{name: (best CPU ms, median CPU ms)} of ``runs`` (name -> callable), called in turn, the
    order rotated every round (whoever runs after onnxruntime finds colder caches)."""
    t = {k: [] for k in runs}
    order = list(runs)
    for rep in range(reps):
        for k in order[rep % len(order):] + order[:rep % len(order)]:
            t0 = time.process_time()
            runs[k]()
            t[k].append(time.process_time() - t0)
    return {k: (min(v) * 1e3, float(np.median(v)) * 1e3) for k, v in t.items()}


def head(reps: int, c: int = 512, m: int = 1000, hw: int = 13) -> None:
    from dsl.opgraph import formats as F
    from ops.conv_pointwise import conv_pointwise, launch_conv_pointwise
    from ops.gemm_packed import ACT_RELU
    from ops.pool import launch_global_blocked
    from ops.pool_fast import AVG, global_pool_blocked
    rng = np.random.default_rng(0)
    x = F.to_nchwc16_ref(np.maximum(rng.standard_normal((1, c, hw, hw)), 0).astype(np.float32))
    w = (rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    for a in (w, b):  # constants, as in a model: packed once (cached_pack)
        a.setflags(write=False)
    conv = np.empty(F.physical_shape((1, m, hw, hw), "nchwc16"), np.float32)
    old, new = np.empty((1, m, 1, 1), np.float32), np.empty((1, m, 1, 1), np.float32)

    def two_nodes():
        launch_conv_pointwise(conv_pointwise, x, w, b, conv, None, (1, 1), True, "numba", ACT_RELU, 0.0, 0.0)
        launch_global_blocked(global_pool_blocked, conv, old, AVG, "numba")

    def pooled():
        launch_conv_pointwise(conv_pointwise, x, w, b, new, None, (1, 1), True, "numba", ACT_RELU, 0.0, 0.0,
                              pooled=True)

    def conv_only():
        launch_conv_pointwise(conv_pointwise, x, w, b, conv, None, (1, 1), True, "numba", ACT_RELU, 0.0, 0.0)

    runs = {"conv + pool": two_nodes, "pooled": pooled, "conv alone": conv_only}
    for f in runs.values():
        f()
    print(f"head {c}->{m} on {hw}x{hw}: max |pooled - two nodes| = {np.abs(new - old).max():.2e}")
    res = best_cpu_ms(runs, reps)
    for k, (bst, med) in res.items():
        print(f"  {k:12s} best {bst:.3f} ms  median {med:.3f} ms")
    print(f"  pooled / two nodes: best {res['pooled'][0] / res['conv + pool'][0]:.3f}x "
          f"median {res['pooled'][1] / res['conv + pool'][1]:.3f}x")


def models_(reps: int, names=("squeezenet", "resnet50")) -> None:
    import onnx
    import onnxruntime as ort

    from benchmarks import models

    for name in names:
        path = str(models.light_model_path(name))
        feeds = models.random_feeds(onnx.load(path))
        fused, plain = _compile(path, True), _compile(path, False)
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 3
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        kinds = [n.op_type for n in fused.graph.nodes]
        a, b_ = list(fused.run(feeds).values())[0], list(plain.run(feeds).values())[0]
        unfused_kinds = [n.op_type for n in plain.graph.nodes]
        print(f"{name}: FusedConvGlobalPool nodes {kinds.count('FusedConvGlobalPool')} (unfused: "
              f"{unfused_kinds.count('FusedConvGlobalPool')}, GlobalAveragePool {unfused_kinds.count('GlobalAveragePool')}), "
              f"max |fused - unfused| {np.abs(a - b_).max():.2e}")
        res = best_cpu_ms({"fused": lambda: fused.run(feeds), "unfused": lambda: plain.run(feeds),
                           "onnxruntime": lambda: sess.run(None, feeds)}, reps)
        for k, (bst, med) in res.items():
            print(f"  {k:12s} best {bst:.3f} ms  median {med:.3f} ms")
        ort_b, ort_m = res["onnxruntime"]
        print(f"  fused / unfused best {res['fused'][0] / res['unfused'][0]:.3f}x median "
              f"{res['fused'][1] / res['unfused'][1]:.3f}x | vs onnxruntime: fused {res['fused'][0] / ort_b:.3f}x "
              f"(median {res['fused'][1] / ort_m:.3f}x), unfused {res['unfused'][0] / ort_b:.3f}x "
              f"(median {res['unfused'][1] / ort_m:.3f}x)")


def nodes(reps: int, name: str = "squeezenet") -> None:
    """The head's nodes of ``name`` fused and unfused, each node at its best of ``reps`` single-run
    profiles (``Model.profile``), the two models alternated."""
    import onnx

    from benchmarks import models
    path = str(models.light_model_path(name))
    feeds = models.random_feeds(onnx.load(path))
    fused, plain = _compile(path, True), _compile(path, False)
    best = {}
    for _ in range(reps):
        for side, model in (("fused", fused), ("unfused", plain)):
            for r in model.profile(feeds, repeat=1, warmup=0).rows:
                if r.op_type.endswith(("FusedConvGlobalPool", "GlobalAveragePool")) or (
                        r.op_type.endswith("FusedConv") and r.name == _head_conv(plain)):
                    key = (side, r.name, r.op_type, r.impl, tuple(r.shape))
                    best[key] = min(best.get(key, float("inf")), r.mean_s * 1e3)
    for key, ms in sorted(best.items()):
        print(f"  {key[0]:8s} {key[1]:6s} {key[2]:32s} {key[3]:10s} {str(key[4]):20s} {ms:.3f} ms")
    for side in ("fused", "unfused"):
        print(f"  {side}: head {sum(v for k, v in best.items() if k[0] == side):.3f} ms")


def _head_conv(model) -> str:
    """The name of the node the (unfused) GlobalAveragePool reads."""
    pool = next(n for n in model.graph.nodes if n.op_type == "GlobalAveragePool")
    return next(n.name for n in model.graph.nodes if n.outputs[0] is pool.inputs[0])


def _compile(path, fuse: bool):
    """``path`` compiled for numba with or without the FusedConvGlobalPool rule (not by
    load_onnx: its plan cache would hand back the other's plan)."""
    import dsl.opgraph.fusion as fusion
    import ops.conv_global_pool as cgp
    from dsl.onnx.load import to_graph
    saved = {k: list(v) for k, v in fusion._RULES.items()}
    if not fuse:
        for k in fusion._RULES:
            fusion._RULES[k] = [f for f in fusion._RULES[k] if f is not cgp.fuse_global_pool]
    try:
        return to_graph(path).compile(backend="numba")
    finally:
        fusion._RULES.clear()
        fusion._RULES.update(saved)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("head", "models", "nodes"))
    ap.add_argument("--reps", type=int, default=200)
    a = ap.parse_args(argv)
    {"head": head, "models": models_, "nodes": nodes}[a.what](a.reps)


if __name__ == "__main__":
    main()
