"""Squeezenet's stem Conv 3x3/2 -> Relu -> MaxPool 3x3/2 on 1x3x224x224: fused (FusedConvPool) vs the same model with that rewrite removed (FusedConv -> MaxPool) vs onnxruntime, rotated in one process; then conv_stem_pool launched alone per band.  Usage: PYTHONPATH=. python benchmarks/bench_stem_pool.py [reps]"""
import sys, time
import numpy as np
from onnx import helper, TensorProto, numpy_helper
import dsl, onnxruntime as ort
import dsl.opgraph.fusion as F
import ops.conv_fusion as cf
rng = np.random.default_rng(0)
w = (rng.standard_normal((64, 3, 3, 3)) * 0.2).astype(np.float32); b = rng.standard_normal(64).astype(np.float32)
nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[2, 2], kernel_shape=[3, 3]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2])]
g = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 224, 224])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 55, 55])],
                      [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)]); m.ir_version = 8
x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)

def compile_(fuse_pool):
    saved = {k: list(v) for k, v in F._RULES.items()}
    if not fuse_pool:
        for k in F._RULES: F._RULES[k] = [f for f in F._RULES[k] if f is not cf.fuse_max_pool]
    try:
        mod = dsl.load_onnx(m, backend="numba")
        return mod
    finally:
        F._RULES.clear(); F._RULES.update(saved)
a = compile_(True); bm = compile_(False)
print([n.op_type for n in a.graph.nodes], [n.op_type for n in bm.graph.nodes])
sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
ya = a.run({"x": x}); yb = bm.run({"x": x})
ya = list(ya.values())[0]; yb = list(yb.values())[0]
print("max diff fused vs unfused", np.abs(ya - yb).max(), "vs ort", np.abs(ya - sess.run(None, {"x": x})[0]).max())
runs = {"fused": lambda: a.run({"x": x}), "unfused": lambda: bm.run({"x": x}), "onnxruntime": lambda: sess.run(None, {"x": x})}
t = {k: [] for k in runs}
for rep in range(int(sys.argv[1]) if len(sys.argv) > 1 else 200):
    for k, f in runs.items():
        t0 = time.perf_counter(); f(); t[k].append(time.perf_counter() - t0)
for k, v in t.items():
    print(f"{k:12s} best {min(v)*1e3:.3f} ms  median {np.median(v)*1e3:.3f} ms")
from ops.conv_stem_pool import launch_conv_stem_pool, conv_stem_pool, PoolWindow
y = np.empty((1, 64, 55, 55), np.float32)
bt = {}
for rep in range(60):
    for band in (2, 4, 7):
        t0 = time.perf_counter()
        launch_conv_stem_pool(conv_stem_pool, x, w, b, y, (2, 2), (1, 1), (0, 0), (111, 111), PoolWindow((3, 3), (2, 2), (0, 0), (55, 55)), "numba", 1, 0., 0., band=band)
        bt.setdefault(band, []).append(time.perf_counter() - t0)
for k, v in bt.items():
    print(f"band {k}: best {min(v)*1e3:.3f} ms median {np.median(v)*1e3:.3f} ms")
