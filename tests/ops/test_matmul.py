"""MatMul, Gemm and FullyConnected on every backend against numpy."""
import numpy as np
import pytest

import dsl
import ops

RNG = np.random.default_rng(11)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


MATMUL_SHAPES = [
    ((3, 5), (5, 7)),
    ((2, 3, 5), (5, 2)),           # batch on one side
    ((5,), (5, 3)),                # 1-D left: row vector, axis removed
    ((3, 5), (5,)),                # 1-D right
    ((6,), (6,)),                  # dot product -> scalar
    ((2, 1, 3, 4), (1, 3, 4, 6)),  # batch broadcast on both sides (leading loop)
    ((4, 1, 2, 3), (3, 1)),
    ((2, 0), (0, 3)),              # K = 0: zeros
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
def test_matmul_shapes(backend, sa, sb):
    a, b = rand(*sa), rand(*sb)
    y = ops.MatMul(a, b, backend=backend)
    ref = np.matmul(a, b)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_matmul_ints_and_f16(backend):
    a = RNG.integers(-50, 50, (4, 9)).astype(np.int32)
    b = RNG.integers(-50, 50, (9, 5)).astype(np.int32)
    np.testing.assert_array_equal(ops.MatMul(a, b, backend=backend), a @ b)
    c = RNG.integers(-50, 50, (5,)).astype(np.int32)
    np.testing.assert_array_equal(ops.Gemm(a, b, c, alpha=2.0, beta=3.0, backend=backend), 2 * (a @ b) + 3 * c)
    h = ops.MatMul(a.astype(np.float16) / 8, b.astype(np.float16) / 8, backend=backend)
    assert h.dtype == np.float16
    ref = (a.astype(np.float32) / 8) @ (b.astype(np.float32) / 8)
    np.testing.assert_allclose(h.astype(np.float32), ref, rtol=2e-3, atol=0.1)


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_transposes_and_bias_broadcast(backend, trans_a, trans_b):
    m, k, n = 3, 5, 6
    a = rand(k, m) if trans_a else rand(m, k)
    b = rand(n, k) if trans_b else rand(k, n)
    prod = (a.T if trans_a else a) @ (b.T if trans_b else b)
    for c_shape in [None, (), (n,), (m, 1), (1, n), (m, n)]:
        c = None if c_shape is None else rand(*c_shape)
        args = (a, b) if c is None else (a, b, c)
        y = ops.Gemm(*args, alpha=0.5, beta=2.0, transA=trans_a, transB=trans_b, backend=backend)
        np.testing.assert_allclose(y, 0.5 * prod + (0 if c is None else 2.0 * c), rtol=1e-5, atol=1e-5)
    y = ops.Gemm(a, b, rand(n), transA=trans_a, transB=trans_b, backend=backend)  # alpha = beta = 1
    assert y.shape == (m, n)


def test_fully_connected(backend):
    x, w, b = rand(2, 3), rand(4, 3), rand(4)
    np.testing.assert_allclose(ops.FullyConnected(x, w, b, backend=backend), x @ w.T + b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.FullyConnected(x, w, backend=backend), x @ w.T, rtol=1e-5, atol=1e-6)
    x3 = rand(2, 5, 3)  # leading axes are rows
    np.testing.assert_allclose(ops.FullyConnected(x3, w, b, backend=backend), x3 @ w.T + b, rtol=1e-5, atol=1e-6)


def test_larger_product_uses_all_threads(backend):
    if backend == "interpreter":
        pytest.skip("large sizes are slow in the interpreter; small ones cover it")
    a, b = rand(37, 65), rand(65, 29)  # sizes not multiples of the 4-column block
    np.testing.assert_allclose(ops.MatMul(a, b, backend=backend), a @ b, rtol=1e-4, atol=1e-4)


def test_eager_equals_graph(backend):
    x, w, b = rand(2, 3), rand(4, 3), rand(4)
    g = dsl.Graph("fc")
    xi = g.input("x", (None, 3), dsl.f32)
    y = ops.Gemm(ops.FullyConnected(xi, g.constant("w", w), g.constant("b", b)), g.constant("w2", w.T.copy()),
                 transB=1, alpha=2.0)
    z = ops.MatMul(y, g.constant("w3", w.T.copy()))
    g.output(z, "z")
    eager = ops.MatMul(ops.Gemm(ops.FullyConnected(x, w, b, backend=backend), w.T.copy(), transB=1, alpha=2.0,
                                backend=backend), w.T.copy(), backend=backend)
    np.testing.assert_array_equal(g.compile(backend=backend).run({"x": x})["z"], eager)
    np.testing.assert_allclose(eager, (2 * (x @ w.T + b) @ w) @ w.T, rtol=1e-4, atol=1e-4)


def test_errors_name_the_problem():
    with pytest.raises(dsl.VerifyError, match="MatMul inner dimensions differ: A f32\\[3,4\\] has K=4, B .* K=5"):
        ops.MatMul(rand(3, 4), rand(5, 2))
    with pytest.raises(dsl.VerifyError, match="MatMul batch shapes .* do not broadcast"):
        ops.MatMul(rand(2, 3, 4), rand(3, 4, 5))
    g = dsl.Graph("scalar")
    with pytest.raises(dsl.VerifyError, match="rank >= 1"):
        ops.MatMul(g.input("s", (), dsl.f32), g.input("v", (3,), dsl.f32))
    with pytest.raises(dsl.VerifyError, match="Gemm needs 2-D A and B"):
        ops.Gemm(rand(2, 3, 4), rand(4, 2))
    with pytest.raises(dsl.VerifyError, match="Gemm C .* does not broadcast to \\(M, N\\) = \\(3, 6\\) along N"):
        ops.Gemm(rand(3, 5), rand(5, 6), rand(4))
    with pytest.raises(dsl.VerifyError, match="Gemm on i32 needs whole-number alpha and beta, got alpha=0.5"):
        ops.Gemm(np.ones((2, 2), np.int32), np.ones((2, 2), np.int32), alpha=0.5)
    with pytest.raises(dsl.VerifyError, match="transA=1"):
        ops.Gemm(rand(3, 5), rand(5, 6), transA=1)
    with pytest.raises(dsl.VerifyError, match="FullyConnected input f32\\[2,5\\] must end with inputs=3"):
        ops.FullyConnected(rand(2, 5), rand(4, 3))
    with pytest.raises(dsl.VerifyError, match="bias must have shape \\(units,\\) = \\(4,\\)"):
        ops.FullyConnected(rand(2, 3), rand(4, 3), rand(3))
    with pytest.raises(dsl.VerifyError, match="MatMul input has dtype bool_"):
        ops.MatMul(np.ones((2, 2), bool), np.ones((2, 2), bool))
    with pytest.raises(dsl.VerifyError, match="one dtype"):
        ops.MatMul(rand(2, 2), rand(2, 2, dtype=np.float64))


def test_registration():
    from dsl.opgraph import registry
    assert registry.lookup("com.opdsl", "FullyConnected") is ops.FullyConnected
    assert registry.lookup("", "Gemm", 13) is ops.Gemm and registry.lookup("", "MatMul", 1) is ops.MatMul
