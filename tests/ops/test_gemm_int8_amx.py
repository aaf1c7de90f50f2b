"""The int8 GEMM on matrix tiles (ops/gemm_int8_amx.py: AMX's tdpbusd where the CPU has it, the
tile builtins' portable lowering elsewhere) on every backend against numpy, and the ops that take
it where the target runs AMX (MatMulInteger, QLinearMatMul, DynamicQuantizeLinear ->
MatMulInteger) against numpy and onnxruntime: zero-point corners, i8/u8 either way round,
per-row and per-column zero points, u8 255 × i8 -128, ragged M/N/K, bias and clamp."""
import numpy as np
import pytest

import dsl
import ops
from ops.gemm_int8_amx import amx_usable, qgemm_int8_amx
from ops.quant_matmul import requant_multiplier
from test_gemm_int8 import (assert_qlinear_matmul_matches_onnxruntime, check_exact, check_requantized, data,
                            dynamic_matmul_model, exact, requantized)

RNG = np.random.default_rng(18)

CASES = [  # (A dtype, B dtype, a zero point, b zero point, A corner, B corner)
    (np.uint8, np.int8, 255, 0, 255, -128),          # every product 255·-128
    (np.int8, np.uint8, "per-row", 255, 127, 0),     # both shifted while packing; za per row of A
    (np.uint8, np.int8, 128, "per-column", None, 127),
]


# OpenCL compiles each specialization in ~10 s: the default run keeps one OpenCL case
@pytest.mark.parametrize("backend, case", [
    pytest.param(b, case, marks=[pytest.mark.slow] if b == "opencl" and i else [])
    for i, case in enumerate(CASES) for b in ("interpreter", "numba", "opencl")], indirect=["backend"])
def test_amx_int8_gemm_exact_on_every_backend(backend, case):
    # M past one 32-row block, K past one 64-byte step (K % 4 == 0), N ragged
    check_exact(qgemm_int8_amx, case, 37, 100, 45, backend=backend)


@pytest.mark.parametrize("backend", ["interpreter", "numba", pytest.param("opencl", marks=pytest.mark.slow)],
                         indirect=True)
def test_amx_int8_gemm_requantizes_per_channel_with_bias_and_clamp(backend):
    check_requantized(qgemm_int8_amx, 6, 36, 40, backend=backend)


def test_amx_int8_gemm_refuses_k_not_a_multiple_of_4():
    with pytest.raises(ValueError, match="K = 9 must be a multiple of 4"):
        qgemm_int8_amx(np.zeros((1, 2, 9), np.uint8), np.zeros((1, 9, 3), np.int8), np.zeros((1, 2, 3), np.int32))


# --------------------------------------------------------------------------- the ops (numba)

M, K, N = 19, 68, 37  # big enough for the packed path, every tail ragged, K % 4 == 0


def _specs(*xs):
    from dsl.opgraph.spec import TensorSpec
    return [TensorSpec.of(x) for x in xs]


def test_ops_choose_the_tile_gemm_only_where_amx_runs_and_k_allows():
    a, b = data(np.uint8, (M, K)), data(np.int8, (K, N))
    za, zb = np.array(128, np.uint8), np.array(0, np.int8)
    want = "amx" if amx_usable("numba") else "packed"
    assert ops.MatMulInteger().select(*_specs(a, b, za, zb), backend="numba") == want
    assert ops.MatMulInteger().select(*_specs(a, b, za, zb), backend="opencl") == "packed"
    a9, b9 = data(np.uint8, (M, K + 1)), data(np.int8, (K + 1, N))
    assert ops.MatMulInteger().select(*_specs(a9, b9, za, zb), backend="numba") == "packed"


def test_a_target_without_amx_takes_the_dot4_gemm(monkeypatch):
    """An AVX2 CPU, or an AVX-512 one whose OS refused the tile data ("amx" missing): "packed"."""
    import dataclasses
    real = dsl.target
    for dropped in ({"amx"}, {"amx", "amx-tile", "amx-int8", "avx512f", "avx512vnni", "avx512bw"}):
        def fake(backend=None, dropped=dropped):
            t = real(backend)
            return dataclasses.replace(t, features=t.features - dropped)
        monkeypatch.setattr(dsl, "target", fake)
        a, b = data(np.uint8, (M, K)), data(np.int8, (K, N))
        assert ops.MatMulInteger().select(*_specs(a, b, np.array(1, np.uint8), np.array(0, np.int8)),
                                          backend="numba") == "packed"


needs_amx = pytest.mark.skipif(not amx_usable("numba"), reason="this CPU or OS gives no AMX: the ops take dot4")


@needs_amx
def test_matmul_integer_on_amx_matches_numpy():
    a, b = data(np.int8, (2, M, K), -128), data(np.int8, (K, N), 127)  # batched i8 activations
    za, zb = np.array(-3, np.int8), data(np.int8, (N,))
    y = ops.MatMulInteger()(a, b, za, zb, backend="numba")
    for t in range(2):
        np.testing.assert_array_equal(y[t], exact(a[t], b, -3, zb))


@needs_amx
def test_qlinear_matmul_on_amx_matches_numpy_per_channel():
    a, b = data(np.uint8, (M, K)), data(np.int8, (K, N))
    sa, za = np.array(0.02, np.float32), np.array(131, np.uint8)
    sb, zb = RNG.uniform(0.001, 0.01, N).astype(np.float32), np.zeros(N, np.int8)
    sy, zy = np.array(0.05, np.float32), np.array(120, np.uint8)
    y = ops.QLinearMatMul()(a, sa, za, b, sb, zb, sy, zy, backend="numba")
    np.testing.assert_array_equal(y, requantized(exact(a, b, 131, 0), requant_multiplier(sa, sb, sy), None, zy, np.uint8))


@needs_amx
def test_quantized_matmul_models_on_amx_match_onnxruntime():
    """QLinearMatMul (planned: only the constant B is packed) and DynamicQuantizeLinear ->
    MatMulInteger, full-range weights (AMX's products are exact, as onnxruntime's are here)."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    inits = {"sa": np.array(0.02, np.float32), "za": np.array(128, np.uint8), "b": data(np.int8, (K, N), -128),
             "sb": RNG.uniform(0.001, 0.01, N).astype(np.float32), "zb": np.zeros(N, np.int8),
             "sy": np.array(0.3, np.float32), "zy": np.array(128, np.uint8)}
    assert_qlinear_matmul_matches_onnxruntime(inits, (data(np.uint8, (M, K), 255), data(np.uint8, (M, K))))
    x = RNG.standard_normal((M, K)).astype(np.float32)
    w = {"w": data(np.int8, (K, N)), "wz": np.array(0, np.int8), "ws": np.array(0.01, np.float32)}
    model = dynamic_matmul_model(w, M, K, N)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(dsl.load_onnx(model, backend="numba").run({"x": x})["y"], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", ["interpreter", "numba"], indirect=True)
def test_amx_int8_gemm_reads_u8_a_in_place_when_nothing_needs_packing(backend):
    """u8 A of whole 32-row blocks and 64-byte K steps against B with zero points 0: no packing
    launch (the kernel is told PACK=0), same result as numpy, per-row A zero points included."""
    from ops.gemm_int8_amx import qgemm_amx
    m, k, n = 64, 128, 40
    a, b = data(np.uint8, (1, m, k), 255), data(np.int8, (1, k, n), -128)
    za = data(np.uint8, (m,))
    packs = []
    kernel = lambda *args, **kw: (packs.append(kw["PACK"]), qgemm_amx(*args, **kw))  # noqa: E731
    y = np.zeros((1, m, n), np.int32)
    qgemm_int8_amx(a, b, y, za, np.array([0], np.int8), backend=backend, kernel=kernel)
    np.testing.assert_array_equal(y[0], exact(a[0], b[0], za, 0))
    qgemm_int8_amx(a, b, y, za, np.array([1], np.int8), backend=backend, kernel=kernel)  # row sums needed
    np.testing.assert_array_equal(y[0], exact(a[0], b[0], za, 1))
    y[:] = 7  # one zero point for A: whole 32-column blocks start at za·u[n] and store straight into y
    qgemm_int8_amx(a, b, y, np.array([200], np.uint8), np.array([0], np.int8), backend=backend, kernel=kernel)
    np.testing.assert_array_equal(y[0], exact(a[0], b[0], 200, 0))
    assert packs == [0, 1, 0]


@pytest.mark.parametrize("backend", ["interpreter", "numba", pytest.param("opencl", marks=pytest.mark.slow)],
                         indirect=True)
@pytest.mark.parametrize("za", [0, 255, "per-row"])
def test_amx_int8_gemm_in_row_groups_and_k_chunks(backend, za):
    """``block_order``'s order: a batch of two 32-row blocks (fewer than the kernel's threads, so
    the column blocks split into groups), K of 9 steps (a chunk of K_CHUNK then one), N ragged (the
    last block of each group takes all of K at once, with the epilogue): numpy's sums, with A's
    zero point 0, 255 (C starts at za·u[n] and partial sums wait in y) or per row (every block
    through the epilogue)."""
    from ops.gemm_int8_amx import K_CHUNK, THREADS, block_order
    m, k, n = 32, 9 * 64, 100
    a, b = data(np.uint8, (2, m, k), 255), data(np.int8, (1, k, n), -128)
    zav = data(np.uint8, (m,)) if za == "per-row" else np.array([za], np.uint8)
    group, kchunk, cols_first = block_order(2, m, 128, 128 * k, False)
    assert (kchunk, cols_first) == (K_CHUNK, 0) and 1 < group < 128 // 32 and 2 < THREADS
    y = np.full((2, m, n), 7, np.int32)
    qgemm_int8_amx(a, b, y, zav, np.array([0], np.int8), backend=backend)
    for t in range(2):
        np.testing.assert_array_equal(y[t], exact(a[t], b[0], zav, 0))
