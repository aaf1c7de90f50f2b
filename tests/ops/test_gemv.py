"""The SIMD matrix-vector kernel (ops/gemv.py) against numpy, on every backend, and the ops
that select it (MatMul, FusedMatMul, Gemm, FullyConnected with few rows or one column)."""
import numpy as np
import pytest

import dsl
import ops
from ops.gemv import gemv_kernel

RNG = np.random.default_rng(11)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


CASES = [  # (batch a, batch b, m, k, n, trans_b, alpha, beta, c shape)
    (1, 1, 1, 64, 37, 1, 1.0, 1.0, (1, 37)),   # dot form: 37 = 9 whole groups of 4 rows + 1
    (1, 1, 3, 45, 18, 1, 0.5, 2.0, (3, 1)),    # K tail of 13 scalars, column C
    (2, 1, 2, 33, 16, 1, 1.0, 0.0, (1, 1)),    # b broadcast over the batch
    (1, 1, 1, 20, 150, 0, 1.0, 1.0, (1, 150)),  # axpy form: 2 whole groups, 1 vector + 6 columns
    (1, 3, 5, 16, 64, 0, 1.5, 0.5, (5, 64)),   # a broadcast, one exact group, full C
    (1, 1, 7, 17, 16, 0, 1.0, 1.0, (1, 1)),    # only the partial group: one vector
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"-t{c[5]}")
def test_gemv_kernel(backend, case):
    ba, bb, m, k, n, tb, alpha, beta, cshape = case
    a = rand(ba, m, k)
    b = rand(bb, n, k) if tb else rand(bb, k, n)
    c = rand(*cshape)
    y = np.full((max(ba, bb), m, n), np.nan, np.float32)
    gemv_kernel(a, b, c, y, trans_b=tb, alpha=alpha, beta=beta, backend=backend, grid=3)
    bt = b.transpose(0, 2, 1) if tb else b
    ref = alpha * np.matmul(a.astype(np.float64), bt.astype(np.float64)) + beta * c
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_gemv_half_storage(backend, dtype):
    """f16/bf16 lanes load as f32 and accumulate in f32; y rounds once."""
    npt = dsl.f16.np if dtype == "f16" else dsl.bf16.np
    a, b, c = rand(1, 2, 40).astype(npt), rand(1, 33, 40).astype(npt), rand(1, 33).astype(npt)
    y = np.zeros((1, 2, 33), npt)
    gemv_kernel(a, b, c, y, trans_b=1, alpha=1.0, beta=1.0, backend=backend)
    ref = a.astype(np.float32) @ b.astype(np.float32).transpose(0, 2, 1) + c.astype(np.float32)
    tol = 2e-2 if dtype == "f16" else 1e-1
    np.testing.assert_allclose(y.astype(np.float32), ref, rtol=tol, atol=tol)


def _spec(*shape):
    return dsl.TensorSpec(shape, dsl.f32)


def test_ops_select_it_for_few_rows_or_one_column():
    """Batch-1 products pick it on every backend; wide ones, integers, tiny ones and a
    transposed A of several rows do not."""
    for backend in ("numba", "opencl", "interpreter"):
        assert ops.MatMul().select(_spec(1, 2048), _spec(2048, 1000), backend=backend) == "gemv"
        assert ops.MatMul().select(_spec(64, 300), _spec(300,), backend=backend) == "gemv"
    assert ops.MatMul().select(_spec(70, 96), _spec(96, 64), backend="numba") == "packed"
    assert ops.MatMul().select(_spec(4, 3), _spec(3, 4), backend="numba") == "default"
    assert ops.MatMul().select(dsl.TensorSpec((1, 64), dsl.i32), dsl.TensorSpec((64, 64), dsl.i32),
                               backend="numba") == "default"
    assert ops.Gemm(transB=1).select(_spec(1, 2048), _spec(1000, 2048), backend="numba") == "gemv"
    assert ops.Gemm(transA=1).select(_spec(2048, 1), _spec(2048, 1000), backend="numba") == "gemv"
    assert ops.Gemm(transA=1).select(_spec(2048, 3), _spec(2048, 1000), backend="numba") == "default"
    assert ops.FullyConnected().select(_spec(1, 512), _spec(100, 512), backend="numba") == "gemv"


PRODUCTS = [  # (op, inputs, attributes, numpy reference)
    ("MatMul", [(1, 300), (300, 70)], {}, lambda a, b: a @ b),
    ("MatMul", [(70, 300), (300,)], {}, lambda a, b: a @ b),
    ("MatMul", [(3, 2, 40), (3, 40, 33)], {}, lambda a, b: a @ b),
    ("Gemm", [(1, 100), (50, 100), (50,)], {"transB": 1, "alpha": 0.5, "beta": 2.0},
     lambda a, b, c: 0.5 * a @ b.T + 2 * c),
    ("Gemm", [(100, 1), (100, 50), (1, 50)], {"transA": 1}, lambda a, b, c: a.T @ b + c),
    ("Gemm", [(40, 100), (100, 1), (40, 1)], {}, lambda a, b, c: a @ b + c),
]


@pytest.mark.parametrize("case", PRODUCTS, ids=lambda c: c[0] + "-" + "-".join("x".join(map(str, s)) for s in c[1]))
def test_products_in_a_graph(backend, case):
    """One-node graphs run it (``gemv`` in the profile) and match numpy."""
    op, shapes, attrs, ref = case
    inputs = [rand(*s) for s in shapes]
    g = dsl.Graph(f"one_{op}")
    xs = [g.input(f"x{i}", s, dsl.f32) for i, s in enumerate(shapes)]
    g.output(getattr(ops, op)(*xs, **attrs), "y")
    model = g.compile(backend=backend)
    feeds = {f"x{i}": x for i, x in enumerate(inputs)}
    np.testing.assert_allclose(model.run(feeds)["y"], ref(*inputs), rtol=1e-4, atol=1e-4)
    assert [r.impl for r in model.profile(feeds, repeat=1).rows] == ["gemv"]
