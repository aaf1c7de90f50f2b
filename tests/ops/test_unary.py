"""Unary math ops (ops/unary.py) on every backend against numpy: special values, every float
dtype, integer wrapping, graph use, errors and opset registration."""
import ml_dtypes
import numpy as np
import pytest

import dsl
import ops

RNG = np.random.default_rng(11)
SPECIAL = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0, np.inf, -np.inf, np.nan]


def _erf(x):
    from math import erf
    return np.vectorize(lambda v: erf(v) if np.isfinite(v) else (np.sign(v) if not np.isnan(v) else v))(
        x.astype(np.float64))


# op -> (numpy reference, a sample of its domain)
FLOAT_OPS = {
    "Neg": (np.negative, 5.0), "Abs": (np.abs, 5.0), "Sign": (np.sign, 5.0),
    "Reciprocal": (np.reciprocal, 5.0), "Sqrt": (np.sqrt, 5.0), "Exp": (np.exp, 5.0),
    "Log": (np.log, 5.0), "Floor": (np.floor, 5.0), "Ceil": (np.ceil, 5.0), "Round": (np.rint, 5.0),
    "Sin": (np.sin, 5.0), "Cos": (np.cos, 5.0), "Tan": (np.tan, 1.5), "Asin": (np.arcsin, 1.0),
    "Acos": (np.arccos, 1.0), "Atan": (np.arctan, 5.0), "Sinh": (np.sinh, 5.0), "Cosh": (np.cosh, 5.0),
    "Asinh": (np.arcsinh, 5.0), "Acosh": (np.arccosh, 5.0), "Atanh": (np.arctanh, 0.99), "Erf": (_erf, 3.0),
}


def _sample(scale, dtype=np.float32, n=24):
    x = np.concatenate([RNG.uniform(-scale, scale, n), SPECIAL])
    if scale >= 5:  # Acosh's domain starts at 1
        x = np.concatenate([x, RNG.uniform(1, scale, 6)])
    return x.astype(dtype)


def _ref(fn, x, dtype):
    """numpy's result computed in f64 and rounded to the op's dtype."""
    with np.errstate(all="ignore"):
        return np.asarray(fn(x.astype(np.float64))).astype(dtype)


@pytest.mark.parametrize("name", sorted(FLOAT_OPS))
def test_float_ops_f32(backend, name):
    fn, scale = FLOAT_OPS[name]
    x = _sample(scale)
    y = getattr(ops, name)(x, backend=backend)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y, _ref(fn, x, np.float32), rtol=3e-6, atol=1e-7, equal_nan=True)
    # -0.0 keeps its sign where numpy's does
    assert np.array_equal(np.signbit(y[np.isfinite(y) & (y == 0)]),
                          np.signbit(_ref(fn, x, np.float32)[np.isfinite(y) & (y == 0)]))


def test_round_is_half_to_even_and_sign_of_zero(backend):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 8388609.0, -0.0], np.float32)
    np.testing.assert_array_equal(ops.Round(x, backend=backend), [0, 2, 2, -0.0, -2, -2, 0, 8388609, -0.0])
    assert np.signbit(ops.Round(x, backend=backend)[3])
    s = ops.Sign(np.array([-0.0, 0.0, np.nan, -np.inf, 3.0], np.float32), backend=backend)
    np.testing.assert_array_equal(s, [0, 0, np.nan, -1, 1])


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-14), (np.float16, 1e-3),
                                        (ml_dtypes.bfloat16, 8e-3)], ids=["f64", "f16", "bf16"])
def test_float_dtypes(backend, dtype, rtol):
    for name in ("Neg", "Abs", "Sqrt", "Exp", "Log", "Round", "Atan", "Erf", "Cosh"):
        fn, scale = FLOAT_OPS[name]
        x = _sample(min(scale, 4.0), dtype)
        y = getattr(ops, name)(x, backend=backend)
        assert y.dtype == x.dtype
        ref = _ref(fn, x, dtype)
        np.testing.assert_allclose(y.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=1e-12,
                                   equal_nan=True, err_msg=name)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int64])
def test_integer_ops_wrap_like_numpy(backend, dtype):
    info = np.iinfo(dtype)
    x = np.concatenate([RNG.integers(max(info.min, -1000), min(info.max, 1000), 20),
                        [info.min, info.max, 0, 1]]).astype(dtype)
    np.testing.assert_array_equal(ops.Abs(x, backend=backend), np.abs(x))
    np.testing.assert_array_equal(ops.Sign(x, backend=backend), np.sign(x))
    if info.min < 0:
        np.testing.assert_array_equal(ops.Neg(x, backend=backend), np.negative(x))


def test_graph_chain_matches_eager(backend):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    g = dsl.Graph("unary")
    xi = g.input("x", (None, 3, 4), dsl.f32)
    g.output(ops.Floor(ops.Exp(ops.Sin(ops.Abs(xi)))), "y")
    g.output(ops.Erf(ops.Neg(xi)), "z")
    out = g.compile(backend=backend).run({"x": x})
    np.testing.assert_allclose(out["y"], np.floor(np.exp(np.sin(np.abs(x)))), rtol=1e-6)
    np.testing.assert_allclose(out["z"], _ref(_erf, -x, np.float32), rtol=3e-6, atol=1e-7)


def test_empty_tensor(backend):
    assert ops.Sqrt(np.zeros((0, 3), np.float32), backend=backend).shape == (0, 3)


def test_errors_name_the_op_and_the_dtype():
    with pytest.raises(dsl.VerifyError, match=r"Abs input has dtype bool_; accepted: i8, i16, i32, i64, u8"):
        ops.Abs(np.ones(3, bool))
    with pytest.raises(dsl.VerifyError, match=r"Sqrt input has dtype i32; accepted: f16, bf16, f32, f64"):
        ops.Sqrt(np.ones(3, np.int32))
    with pytest.raises(dsl.VerifyError, match=r"Neg input has dtype u8"):
        ops.Neg(np.ones(3, np.uint8))
    g = dsl.Graph("bad")
    with pytest.raises(dsl.VerifyError, match=r"Erf input has dtype i64"):
        ops.Erf(g.input("x", (2,), dsl.i64))


def test_registered_with_onnx_opsets():
    from dsl.opgraph import registry
    for name, since in [("Neg", 6), ("Abs", 6), ("Reciprocal", 6), ("Sqrt", 6), ("Exp", 6), ("Log", 6),
                        ("Floor", 6), ("Ceil", 6), ("Round", 11), ("Sign", 9), ("Sin", 7), ("Tan", 7),
                        ("Acos", 7), ("Sinh", 9), ("Atanh", 9), ("Erf", 9)]:
        cls = registry.lookup("", name, 22)
        assert cls.since == since and cls is getattr(ops, name), name
    with pytest.raises(registry.UnknownOpError):
        registry.lookup("", "Round", 10)


def test_nchwc16_keeps_the_zero_padding(backend):
    """Cos(0) = 1 would fill the padding channels (so they are re-zeroed); Sin and Neg keep them 0."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parents[1] / "opgraph"))  # tests/opgraph/oplayer_testops.py
    import oplayer_testops as L
    g = dsl.Graph("blocked")
    x = g.input("x", (1, 20, 2, 3), dsl.f32)
    w = g.constant("w", RNG.standard_normal((18, 20, 3, 3)).astype(np.float32) * 0.2)
    c = L.Conv3x3(x, w)  # an nchwc16 producer
    g.output(L.LaneSum(ops.Cos(ops.Neg(ops.Sin(c)))), "s")  # LaneSum adds the padding lanes too
    xv = RNG.standard_normal((1, 20, 2, 3)).astype(np.float32)
    blocked = g.compile(backend=backend, fuse=False)  # the unary ops themselves, not a fused chain
    assert any(n.outputs[0].spec.format == "nchwc16" for n in blocked.graph.nodes if n.op_type == "Cos")
    np.testing.assert_allclose(blocked.run({"x": xv})["s"], g.compile(backend=backend, formats="plain").run({"x": xv})["s"],
                               rtol=1e-5)
