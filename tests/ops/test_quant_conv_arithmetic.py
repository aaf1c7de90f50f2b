"""``int8_arithmetic`` of load_onnx / Graph.compile (ops/conv_int8_direct.py ``choose_products``):
"exact" (the default) sums int8 convolutions exactly on every backend, full-range weights
included (``dsl.dot2_i16`` on AVX2 without VNNI); "saturating" sums u8·i8 pairs in saturating
i16 where that is faster (``dsl.dot4_sat``), so a QLinearConv whose pairs leave i16 then
equals onnxruntime's on such a CPU and is exact elsewhere.  Bad values name what is accepted."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dsl
from backends import host
from ops.gemm_int8 import saturating_pairs_pay
from test_gemm_int8 import conv_exact, requantized

M, C, H = 6, 8, 5


def saturating_model():
    """QLinearConv 1×1, C = 8 -> M = 6 on 5×5: weights at ±127/-128 in pairs of one sign (each
    255·127 pair is 64770, twice i16's range), a mixed-sign channel and a 7-bit one; activations
    mostly 255; per-channel weight scales and a bias."""
    rng = np.random.default_rng(1629)
    w = rng.integers(-128, 128, (M, C, 1, 1)).astype(np.int8)
    w[0], w[1] = 127, -128
    w[2, ::2], w[2, 1::2] = 127, -128  # pairs of both signs: never saturate
    w[3, :, 0, 0] = rng.integers(-64, 64, C)  # 7-bit: never saturate
    x = rng.integers(0, 256, (1, C, H, H)).astype(np.uint8)
    x.reshape(-1)[: x.size // 2] = 255
    inits = {"sx": np.array(0.02, np.float32), "zx": np.array(3, np.uint8), "w": w,
             "sw": rng.uniform(0.002, 0.004, M).astype(np.float32), "zw": np.zeros(M, np.int8),
             "sy": np.array(1.5, np.float32), "zy": np.array(128, np.uint8),
             "b": rng.integers(-2000, 2000, M).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, C, H, H])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, M, H, H])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    acc = conv_exact(x, w, 3, np.zeros(M, np.int8), (1, 1), (0, 0, 0, 0), (1, 1))[0]
    mult = (np.float32(0.02) * inits["sw"] / np.float32(1.5)).astype(np.float32)
    want = np.stack([requantized(acc[m], mult[m], inits["b"][m], 128, np.uint8) for m in range(M)])[None]
    return proto, x, want


@pytest.mark.parametrize("compiled_backend", ["numba", "opencl"], indirect=True)
def test_int8_arithmetic_is_exact_by_default_and_saturates_only_on_request(compiled_backend):
    proto, x, want = saturating_model()
    exact = dsl.load_onnx(proto, backend=compiled_backend)
    np.testing.assert_array_equal(exact.run({"x": x})["y"], want)
    fast = dsl.load_onnx(proto, backend=compiled_backend, int8_arithmetic="saturating")
    got = fast.run({"x": x})["y"]
    if not saturating_pairs_pay(compiled_backend):  # VNNI, OpenCL: dot4 is as fast, so still exact
        np.testing.assert_array_equal(got, want)
        return
    assert (got != want).sum() >= 10  # channels 0 and 1 saturate ...
    np.testing.assert_array_equal(got[:, 2:], want[:, 2:])  # ... the others cannot
    ort = pytest.importorskip("onnxruntime")
    if {"avx512vnni", "avxvnni"} & (host.llvm_features() or frozenset()):
        return  # AVX2 simulated (OPDSL_CPU) on a VNNI CPU: onnxruntime reads the real CPU and sums exactly
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got, sess.run(None, {"x": x})[0])  # its AVX2 kernels saturate alike


def test_int8_arithmetic_names_what_it_accepts():
    proto, _, _ = saturating_model()
    with pytest.raises(ValueError, match=r"int8_arithmetic='fast'.*'exact' or 'saturating'"):
        dsl.load_onnx(proto, backend="interpreter", int8_arithmetic="fast")
    import ops
    with pytest.raises(dsl.VerifyError, match=r"QLinearConv int8_arithmetic='fast': accepted 'exact' or 'saturating'"):
        g = dsl.Graph("g")
        x = g.input("x", (1, C, H, H), dsl.u8)
        f = g.constant("s", np.float32(0.1))
        z = g.constant("z", np.uint8(0))
        w = g.constant("w", np.ones((M, C, 1, 1), np.int8))
        zw = g.constant("zw", np.int8(0))
        g.output(ops.QLinearConv(int8_arithmetic="fast")(x, f, z, w, f, zw, f, z), "y")
        g.compile(backend="interpreter")


def test_the_plan_cache_keeps_saturating_loads_apart(monkeypatch):
    """A saturating load's options reach the plan cache's key; an exact load's key is as before."""
    from dsl.onnx import load
    seen = []
    monkeypatch.setattr(load.plan_cache, "cached_load", lambda model, options, base_dir, build: seen.append(options))
    proto, _, _ = saturating_model()
    dsl.load_onnx(proto, backend="interpreter", int8_arithmetic="saturating")
    dsl.load_onnx(proto, backend="interpreter")
    assert seen[0]["int8_arithmetic"] == "saturating" and "int8_arithmetic" not in seen[1]
