"""light_squeezenet quantized (benchmarks/bench_int8.py) with its packed QLinearConvs planned vs calling run()
(replay=False), one thread, alternating rounds, best of 10.  PYTHONPATH=. python benchmarks/bench_qconv_plan_model.py"""
import sys, time, numpy as np, numba, dsl, ops
sys.path.insert(0, "benchmarks")
from bench_int8 import quantized_model
numba.set_num_threads(1)
proto, feeds = quantized_model("squeezenet")
planned = dsl.load_onnx(proto, backend="numba")
a = list(planned.run(feeds).values())[0]
ops.QLinearConv.replay = False; ops.ConvInteger.replay = False
from ops.quant_conv_fused import FusedQLinearConv; FusedQLinearConv.replay = False
proto.doc_string = "unplanned copy"
unplanned = dsl.load_onnx(proto, backend="numba")
b = list(unplanned.run(feeds).values())[0]
print("equal:", np.array_equal(a, b))
print([l for l in str(planned).splitlines() if "planned" in l], [l for l in str(unplanned).splitlines() if "planned" in l])
best = [1e9, 1e9]
for _ in range(10):
    for i, m in enumerate((planned, unplanned)):
        t = time.perf_counter(); m.run(feeds); best[i] = min(best[i], time.perf_counter() - t)
print(f"squeezenet 1 thread: planned {best[0]*1e3:.2f} ms, run() per conv {best[1]*1e3:.2f} ms, ratio {best[1]/best[0]:.3f}")
