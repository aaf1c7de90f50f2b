"""int8 ops against onnxruntime in the same process (issue 29): QLinearMatMul, MatMulInteger and
DynamicQuantizeLinear -> MatMulInteger at 256×1024×1024 (the packed u8×i8 GEMM, ops/gemm_int8.py),
and QLinearConv 64×56×56 and 256×14×14 3×3 (still the scalar direct kernel, ops/quant_conv.py).
Each case is one ONNX model run by ``dsl.load_onnx(..., backend="numba")`` and by an onnxruntime
session with as many threads as cores (not spinning between runs, which would take the cores from
the opdsl round that follows); the two sides alternate, round by round, each keeping its
best time.  Weights are 7-bit (-64..63) so that onnxruntime's AVX2 u8·i8 path (vpmaddubsw, which
saturates on full-range weights) gives exact sums; both sides' outputs are compared.
With a third argument ``1`` both sides run on one thread (onnxruntime's intra-op pool and numba's
workers), which a loaded machine disturbs far less than two threads that wait for each other.
Usage: PYTHONPATH=. python benchmarks/bench_int8.py [rounds] [case-filter] [threads]"""
import os
import sys
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import dsl

RNG = np.random.default_rng(29)


def model(nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def weights(*shape):
    return RNG.integers(-64, 64, shape).astype(np.int8)


def qlinear_matmul(m=256, k=1024, n=1024):
    inits = {"sa": np.array(0.02, np.float32), "za": np.array(128, np.uint8), "b": weights(k, n),
             "sb": np.array(0.004, np.float32), "zb": np.array(0, np.int8), "sy": np.array(0.3, np.float32),
             "zy": np.array(128, np.uint8)}
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    return (model([node], [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])],
                  [helper.make_tensor_value_info("y", TensorProto.UINT8, [m, n])], inits),
            {"a": RNG.integers(0, 256, (m, k)).astype(np.uint8)})


def matmul_integer(m=256, k=1024, n=1024):
    node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
    inits = {"b": weights(k, n), "za": np.array(128, np.uint8), "zb": np.array(0, np.int8)}
    return (model([node], [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])],
                  [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])], inits),
            {"a": RNG.integers(0, 256, (m, k)).astype(np.uint8)})


def dynamic_matmul(m=256, k=1024, n=1024):
    """The pattern onnxruntime's quantize_dynamic writes for a MatMul."""
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xs", "ws"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["y"])]
    inits = {"w": weights(k, n), "wz": np.array(0, np.int8), "ws": np.array(0.01, np.float32)}
    return (model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits),
            {"x": RNG.standard_normal((m, k)).astype(np.float32)})


def qlinear_conv(c, h, m):
    inits = {"sx": np.array(0.02, np.float32), "zx": np.array(128, np.uint8), "w": weights(m, c, 3, 3),
             "sw": np.array(0.004, np.float32), "zw": np.array(0, np.int8), "sy": np.array(0.5, np.float32),
             "zy": np.array(128, np.uint8)}
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"], ["y"], pads=[1, 1, 1, 1])
    return (model([node], [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, c, h, h])],
                  [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, m, h, h])], inits),
            {"x": RNG.integers(0, 256, (1, c, h, h)).astype(np.uint8)})


CASES = {
    "QLinearMatMul 256x1024x1024": qlinear_matmul,
    "MatMulInteger 256x1024x1024": matmul_integer,
    "DynamicQuantizeLinear->MatMulInteger 256x1024x1024": dynamic_matmul,
    "QLinearConv 64x56x56 3x3": lambda: qlinear_conv(64, 56, 64),
    "QLinearConv 256x14x14 3x3": lambda: qlinear_conv(256, 14, 256),
}


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    pick = sys.argv[2] if len(sys.argv) > 2 else ""
    cores = int(sys.argv[3]) if len(sys.argv) > 3 else dsl.target("numba").compute_units
    import numba
    numba.set_num_threads(min(cores, numba.config.NUMBA_NUM_THREADS))
    print(f"cpu {dsl.target('numba').cpu}, {cores} threads a side, load average {os.getloadavg()[0]:.1f}; "
          f"rounds {rounds}, best of each")
    for name, make in CASES.items():
        if pick not in name:
            continue
        proto, feeds = make()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = cores
        # its pool's threads spin after each run: they would take the cores from the next opdsl round
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        ours = dsl.load_onnx(proto, backend="numba")
        got = list(ours.run(feeds).values())[0]
        want = sess.run(None, feeds)[0]
        diff = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
        slow = "QLinearConv" in name  # the scalar kernel: few rounds are enough
        best = [float("inf"), float("inf")]
        for _ in range(min(rounds, 3) if slow else rounds):
            t = time.perf_counter()
            ours.run(feeds)
            best[0] = min(best[0], time.perf_counter() - t)
            t = time.perf_counter()
            sess.run(None, feeds)
            best[1] = min(best[1], time.perf_counter() - t)
        print(f"| {name} | {best[0] * 1e3:.2f} ms | {best[1] * 1e3:.2f} ms | {best[0] / best[1]:.2f}x | "
              f"max |diff| {diff:g} |", flush=True)


if __name__ == "__main__":
    main()
