"""Cast and CastLike on every backend against numpy's astype (in-range values)."""
import ml_dtypes
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(3)
F = np.array([-2.75, -1.5, -0.5, 0.0, 0.5, 1.0, 2.75, 100.25], np.float32)

PAIRS = [  # (from, to): floats <-> ints, narrowing ints, bool both ways, f16/bf16
    (np.float32, np.int32), (np.float32, np.uint8), (np.float32, np.float16), (np.float32, ml_dtypes.bfloat16),
    (np.float16, np.float64), (ml_dtypes.bfloat16, np.float32), (np.int32, np.int8), (np.int64, np.float32),
    (np.float32, np.bool_), (np.bool_, np.float32), (np.uint16, np.int64),
]


def sample(dtype):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return np.array([True, False, True, True, False, False, True, False])
    if dt.kind == "u":
        if dt.itemsize == 1:
            return np.array([0, 1, 7, 200, 255, 3, 65, 9], dt)
        return np.array([0, 1, 300, 65535, 7, 2, 40000, 9], dt)
    if dt.kind == "i":
        return np.array([-300, -1, 0, 1, 127, 128, 70000, -129], dt)
    return F.astype(dt)


@pytest.mark.parametrize("src,dst", PAIRS, ids=lambda t: np.dtype(t).name)
def test_cast_pairs(backend, src, dst):
    x = sample(src)
    if np.dtype(dst).kind == "u":
        x = np.abs(x)  # negative floats to unsigned are undefined in ONNX
    to = dsl.lang.types.from_numpy(np.dtype(dst))
    y = ops.Cast(x, to=to, backend=backend)
    assert y.dtype == np.dtype(dst) and y.shape == x.shape
    np.testing.assert_array_equal(y, x.astype(dst))


def test_castlike_and_shapes(backend):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float64)
    y = ops.CastLike(x, np.zeros((1,), np.float32), backend=backend)
    assert y.dtype == np.float32 and y.shape == (2, 3, 4)
    np.testing.assert_array_equal(y, x.astype(np.float32))
    nan = np.array([np.nan, 0.0, -0.0], np.float32)
    np.testing.assert_array_equal(ops.Cast(nan, to=dsl.bool_, backend=backend), [True, False, False])


def test_graph_cast_chain(backend):
    x = RNG.integers(-50, 50, (3, 5)).astype(np.int32)
    g = dsl.Graph("t")
    xi = g.input("x", x.shape, dsl.i32)
    g.output(ops.Cast(ops.Cast(xi, to=dsl.f16), to=dsl.i64), "y")
    y = g.compile(backend=backend).run({"x": x})["y"]
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, x.astype(np.int64))


def test_bad_inputs():
    with pytest.raises(VerifyError, match="attribute 'to' has dtype bf16"):
        ops.CastV6(np.ones(2, np.float32), to=dsl.bf16)
    with pytest.raises(TypeError):
        ops.Cast(np.ones(2, np.float32))  # `to` is required


def test_bitcast_keeps_the_bits(backend):
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_array_equal(ops.BitCast(x, to=dsl.i32, backend=backend), x.view(np.int32))
    h = RNG.standard_normal(7).astype(np.float16)
    np.testing.assert_array_equal(ops.BitCast(h, to=dsl.bf16, backend=backend).view(np.uint16), h.view(np.uint16))
    flags = np.array([True, False, True])
    np.testing.assert_array_equal(ops.BitCast(flags, to=dsl.u8, backend=backend), [1, 0, 1])
    with pytest.raises(VerifyError, match="BitCast needs dtypes of one width: input f32 has 32 bits"):
        ops.BitCast(x, to=dsl.i64, backend=backend)
