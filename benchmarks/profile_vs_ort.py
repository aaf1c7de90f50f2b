"""Where an f32 model's gap to onnxruntime is, node by node, on one thread a side.

opdsl's side is ``Model.profile`` (wall clock per node), repeated as single runs and each node
kept at its minimum, so neighbours' load inflates it less than a mean would; onnxruntime's is its
own profiler (``enable_profiling``), each node at its minimum too.  The two graphs differ
(onnxruntime fuses and reorders differently), so nodes are matched by output shape, which for
CNNs groups the same layers on both sides.

    NUMBA_NUM_THREADS=1 python -m benchmarks.profile_vs_ort resnet50 [--profiles 10] [--top 30]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from benchmarks import models  # noqa: E402

ORT_GROUPED = ("Conv", "FusedConv", "MaxPool", "GlobalAveragePool", "Gemm", "MatMul", "FusedMatMul")


def ort_node_times(profile_file: str):
    """{node: (min ms, op type, first output shape)} from onnxruntime's profile JSON."""
    times, info = {}, {}
    for e in json.load(open(profile_file)):
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            node = e["name"][:-len("_kernel_time")]
            times.setdefault(node, []).append(e["dur"] / 1e3)
            args = e.get("args", {})
            shapes = [list(d.values())[0] for d in args.get("output_type_shape", [])]
            info[node] = (args.get("op_name"), tuple(shapes[0]) if shapes else ())
    return {k: (min(v),) + info[k] for k, v in times.items()}


def main(argv=None) -> None:
    import onnx
    import onnxruntime as ort

    import dsl
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="squeezenet, resnet50 (light CNNs) or bert")
    ap.add_argument("--profiles", type=int, default=10, help="single-run profiles, each node kept at its minimum")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args(argv)
    path = str(models.bert_layer() if a.model == "bert" else models.light_model_path(a.model))
    proto = onnx.load(path)
    feeds = models.random_feeds(proto)
    model = dsl.load_onnx(path, backend="numba")
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 3
    so.enable_profiling = True
    so.profile_file_prefix = str(Path(tempfile.mkdtemp()) / "ort")
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    model.run(feeds)
    profiles = []
    for _ in range(a.profiles):
        sess.run(None, feeds)
        profiles.append(model.profile(feeds, repeat=1, warmup=0))
    ours = {r.name: (min(next(q for q in p.rows if q.name == r.name).mean_s for p in profiles) * 1e3,
                     r.op_type, r.impl, tuple(r.shape)) for r in profiles[0].rows}
    theirs = ort_node_times(sess.end_profiling())
    print(f"{a.model}: opdsl nodes sum {sum(v[0] for v in ours.values()):.2f} ms, onnxruntime nodes sum "
          f"{sum(v[0] for v in theirs.values()):.2f} ms (minimum per node of {a.profiles} runs, one thread)")
    print("\nopdsl's slowest nodes:")
    for name, (ms, op, impl, shp) in sorted(ours.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print(f"  {ms:8.3f} ms  {name:32s} {op:26s} {impl:12s} {shp}")
    print("\nonnxruntime's slowest nodes:")
    for name, (ms, op, shp) in sorted(theirs.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print(f"  {ms:8.3f} ms  {name:32s} {op:26s} {shp}")
    groups = {}
    for ms, _, _, shp in ours.values():
        g = groups.setdefault(shp, [0.0, 0, 0.0, 0])
        g[0] += ms
        g[1] += 1
    for ms, op, shp in theirs.values():
        if op in ORT_GROUPED and shp:
            g = groups.setdefault(shp, [0.0, 0, 0.0, 0])
            g[2] += ms
            g[3] += 1
    print("\nby output shape, largest gap first: opdsl ms (nodes) | onnxruntime ms (conv/pool/matmul nodes) | gap")
    for shp, (o, on, t, tn) in sorted(groups.items(), key=lambda kv: kv[1][2] - kv[1][0])[:a.top]:
        print(f"  {str(shp):24s} {o:8.3f} ({on}) | {t:8.3f} ({tn}) | {o - t:+.3f}")


if __name__ == "__main__":
    main()
