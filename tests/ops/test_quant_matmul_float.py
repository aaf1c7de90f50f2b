"""The dynamically quantized MatMul as one GEMM (ops/quant_matmul_float.py): the int8 GEMMs' f32
epilogue (``FLOAT_OUT``: f32(sum)·mult[n] + bias[n]) on every backend against numpy, and
quantize_dynamic's DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul [-> Add] fused into
MatMulIntegerToFloat, against the unfused graph's arithmetic (numpy, bit for bit) and onnxruntime:
all-positive, all-negative and constant inputs (zero points 0, 255 and the constant's), ties at
.5 of the quantization step, per-column weight scales and zero points, ragged M/N."""
import numpy as np
import pytest

import dsl
from ops.gemm_int8 import Int8Tile, qgemm_int8
from ops.gemm_int8_amx import qgemm_int8_amx
from test_gemm_int8 import _model, data, exact

RNG = np.random.default_rng(19)
SMALL = Int8Tile(V=4, MR=2)


def scaled(acc, mult, bias):
    """The unfused graph: Cast(acc) to f32, Mul by the f32 scale, Add the f32 bias (no FMA)."""
    y = acc.astype(np.float32) * np.asarray(mult, np.float32)
    return y + np.asarray(bias, np.float32) if bias is not None else y


@pytest.mark.parametrize("gemm", ["dot4", "tiles"])
@pytest.mark.parametrize("backend", ["interpreter", pytest.param("numba", marks=pytest.mark.slow),
                                     pytest.param("opencl", marks=pytest.mark.slow)], indirect=True)
def test_int8_gemms_float_epilogue_on_every_backend(backend, gemm):
    m, k, n = 37, 68, 45  # M past a 32-row block, N ragged past a panel
    a, b = data(np.uint8, (1, m, k), 255), data(np.int8, (1, k, n), -128)
    za, zb = np.array([7], np.uint8), data(np.int8, (n,))
    mult = RNG.uniform(1e-4, 3e-3, n).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    a_scale = np.array(0.37, np.float32)  # read by the kernel: the scale is f32(a_scale·mult[n])
    y = np.full((1, m, n), np.nan, np.float32)
    if gemm == "dot4":
        qgemm_int8(a, b, y, za, zb, mult=mult, bias=bias, backend=backend, a_scale=a_scale,
                   tile=SMALL if backend == "interpreter" else None)
    else:
        qgemm_int8_amx(a, b, y, za, zb, mult=mult, bias=bias, backend=backend, a_scale=a_scale)
    np.testing.assert_array_equal(y[0], scaled(exact(a[0], b[0], za, zb), a_scale * mult, bias))


def dynamic_model(m, k, n, ws, wz, bias=None):
    """quantize_dynamic's graph for x (m, k) · W (k, n) [+ bias], W 7-bit (onnxruntime's AVX2
    u8·i8 path is exact on it)."""
    from onnx import TensorProto, helper
    inits = {"w": RNG.integers(-64, 64, (k, n)).astype(np.int8), "wz": wz, "ws": ws}
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xs", "ws"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["y" if bias is None else "yb"])]
    if bias is not None:
        inits["bias"] = bias
        nodes.append(helper.make_node("Add", ["yb", "bias"], ["y"]))
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits), inits


def reference(x, inits):
    """onnx's DynamicQuantizeLinear (range widened to 0, round half to even, saturated to u8),
    then the unfused graph's arithmetic."""
    lo, hi = min(np.float32(0), x.min()), max(np.float32(0), x.max())
    scale = np.float32((hi - lo) / np.float32(255))
    zp = np.uint8(np.clip(np.rint(-lo / scale), 0, 255))
    q = np.clip(np.rint(x / scale) + zp, 0, 255).astype(np.uint8)
    mult = (scale * inits["ws"]).astype(np.float32)
    return scaled(exact(q, inits["w"], zp, inits["wz"]), mult, inits.get("bias"))


def inputs(m, k):
    """x of each corner: all positive (zero point 0), all negative (255), constant, ties at .5
    (range exactly 255, so the step is 1 and x - min lands on k + 0.5), random."""
    ties = (np.float32(-100) + RNG.integers(0, 255, (m, k)).astype(np.float32) + np.float32(0.5))
    ties.reshape(-1)[:2] = (-100, 155)
    return {"positive": RNG.uniform(0.1, 3, (m, k)).astype(np.float32),
            "negative": RNG.uniform(-3, -0.1, (m, k)).astype(np.float32),
            "constant": np.full((m, k), 1.75, np.float32),
            "ties": ties,
            "random": RNG.standard_normal((m, k)).astype(np.float32)}


CASES = {  # name: (m, k, n, weight scale, weight zero point, bias)
    "per-tensor": (32, 64, 32, np.array(0.01, np.float32), np.array(0, np.int8), None),
    "per-column, bias, ragged": (20, 68, 40, RNG.uniform(0.002, 0.02, 40).astype(np.float32),
                                 RNG.integers(-3, 4, 40).astype(np.int8), RNG.standard_normal(40).astype(np.float32)),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("backend", ["interpreter", "numba", pytest.param("opencl", marks=pytest.mark.slow)],
                         indirect=True)
def test_dynamic_matmul_fuses_and_matches_the_graph_and_onnxruntime(backend, case):
    ort = pytest.importorskip("onnxruntime")
    m, k, n, ws, wz, bias = CASES[case]
    model, inits = dynamic_model(m, k, n, ws, wz, bias)
    compiled = dsl.load_onnx(model, backend=backend)
    assert [node.op.op_type for node in compiled.graph.nodes] == ["DynamicQuantizeLinear", "MatMulIntegerToFloat"]
    if backend == "numba":  # A's scale and zero point are buffers the recorded launch reads: every x below is new
        assert "2 of 2 nodes planned" in str(compiled)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    onnx_reference = pytest.importorskip("onnx.reference").ReferenceEvaluator(model)
    for name, x in inputs(m, k).items():
        got = compiled.run({"x": x})["y"]
        np.testing.assert_array_equal(got, reference(x, inits), err_msg=name)
        np.testing.assert_array_equal(got, onnx_reference.run(None, {"x": x})[0], err_msg=name)
        np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-6, atol=1e-5, err_msg=name)


def test_matmul_integer_to_float_refuses_bad_scales_and_bias():
    from dsl.opgraph.spec import TensorSpec, VerifyError
    from ops.quant_matmul_float import MatMulIntegerToFloat
    a, b = TensorSpec((4, 8), dsl.u8), TensorSpec((8, 6), dsl.i8)
    one = TensorSpec((), dsl.f32)
    op = MatMulIntegerToFloat()
    assert op.infer(a, b, one, TensorSpec((6,), dsl.f32)).dtype == dsl.f32
    with pytest.raises(VerifyError, match="a_scale must be one value"):
        op.verify(a, b, TensorSpec((4,), dsl.f32), one)
    with pytest.raises(VerifyError, match="b_scale .* one per column"):
        op.verify(a, b, one, TensorSpec((5,), dsl.f32))
    with pytest.raises(VerifyError, match="bias must be an f32 vector of the 6 columns"):
        op.verify(a, b, one, one, None, None, TensorSpec((4,), dsl.f32))
    with pytest.raises(VerifyError, match="must be f32"):
        op.verify(a, b, TensorSpec((), dsl.f64), one)


def test_fusion_keeps_the_graph_where_the_scale_broadcasts_to_rows():
    """A Mul by a per-row scale (m, 1) is not a column scale: the graph stays unfused and right."""
    from onnx import TensorProto, helper
    m, k, n = 8, 16, 12
    inits = {"w": RNG.integers(-64, 64, (k, n)).astype(np.int8), "rs": RNG.uniform(0.5, 1, (m, 1)).astype(np.float32)}
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "rs"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits)
    compiled = dsl.load_onnx(model, backend="interpreter")
    assert "MatMulIntegerToFloat" not in [node.op.op_type for node in compiled.graph.nodes]
    x = RNG.standard_normal((m, k)).astype(np.float32)
    ort = pytest.importorskip("onnxruntime")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(compiled.run({"x": x})["y"], want, rtol=1e-6)


def test_fused_dynamic_matmul_exports_as_standard_onnx():
    """The compiled graph's MatMulIntegerToFloat writes itself back as MatMulInteger, Cast, Mul
    (the scales' product) and Add: checker-clean, and onnxruntime runs it to the same result."""
    ort = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    m, k, n, ws, wz, bias = CASES["per-column, bias, ragged"]
    model, inits = dynamic_model(m, k, n, ws, wz, bias)
    compiled = dsl.load_onnx(model, backend="interpreter")
    exported = compiled.graph.to_onnx()
    onnx.checker.check_model(exported, full_check=True)
    kinds = sorted({(node.domain, node.op_type) for node in exported.graph.node})
    assert kinds == [("", "Add"), ("", "Cast"), ("", "DynamicQuantizeLinear"), ("", "MatMulInteger"), ("", "Mul")]
    x = RNG.standard_normal((m, k)).astype(np.float32)
    got = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, reference(x, inits))


def test_dynamic_matmul_on_an_avx2_target_takes_the_dot4_gemm(monkeypatch):
    """``dsl.target`` answering as a plain AVX2 CPU (no AMX, no VNNI): the fused node takes the
    ``dot4`` GEMM on its AVX2 tile (8 lanes, 4 rows; 7-bit weights: ``dot4_sat``) and stays exact."""
    import dataclasses
    real = dsl.target("numba")
    dropped = {"amx", "amx-tile", "amx-int8", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avxvnni"}
    fake = dataclasses.replace(real, features=frozenset(real.features - dropped), vector_bits=256)
    monkeypatch.setattr(dsl, "target", lambda backend=None: fake)
    m, k, n, ws, wz, bias = CASES["per-column, bias, ragged"]
    model, inits = dynamic_model(m, k, n, ws, wz, bias)
    compiled = dsl.load_onnx(model, backend="numba")
    assert "MatMulIntegerToFloat" in str(compiled) and "impl=packed" in str(compiled)
    for name, x in inputs(m, k).items():
        np.testing.assert_array_equal(compiled.run({"x": x})["y"], reference(x, inits), err_msg=name)


def test_fused_node_keeps_the_int8_arithmetic_asked_for():
    """``int8_arithmetic="saturating"`` reaches the fused node as it reaches MatMulInteger (it only
    changes anything on numba on AVX2 without VNNI); a bad value names the accepted ones."""
    from dsl.opgraph.spec import TensorSpec, VerifyError
    from ops.quant_matmul_float import MatMulIntegerToFloat
    m, k, n, ws, wz, bias = CASES["per-column, bias, ragged"]
    model, inits = dynamic_model(m, k, n, ws, wz, bias)
    compiled = dsl.load_onnx(model, backend="interpreter", int8_arithmetic="saturating")
    fused = [node.op for node in compiled.graph.nodes if node.op.op_type == "MatMulIntegerToFloat"]
    assert [op.int8_arithmetic for op in fused] == ["saturating"]
    x = RNG.standard_normal((m, k)).astype(np.float32)
    np.testing.assert_array_equal(compiled.run({"x": x})["y"], reference(x, inits))
    one = TensorSpec((), dsl.f32)
    with pytest.raises(VerifyError, match="int8_arithmetic='fast'.*'exact'"):
        MatMulIntegerToFloat(int8_arithmetic="fast").verify(TensorSpec((4, 8), dsl.u8), TensorSpec((8, 6), dsl.i8),
                                                           one, one)
