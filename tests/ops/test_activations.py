"""Activation ops (ops/activations.py) on every backend against numpy references written from
the ONNX definitions: attributes, special values, every float dtype, PRelu broadcasting
(opset 6 per-channel slopes too), Shrink on integers, graph use, errors and opsets."""
from math import erf

import ml_dtypes
import numpy as np
import pytest

import dsl
import ops

RNG = np.random.default_rng(5)
SPECIAL = [0.0, -0.0, 1.0, -1.0, 30.0, -30.0, 100.0, -100.0, np.inf, -np.inf, np.nan]


def _softplus(x):
    return np.logaddexp(x, 0.0)


def _gelu(x):
    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _hard_sigmoid(x, alpha=0.2, beta=0.5):
    return np.clip(alpha * x + beta, 0, 1)


# (op, params, reference in f64)
CASES = [
    ("Gelu", {}, _gelu),
    ("Gelu", {"approximate": "tanh"}, _gelu_tanh),
    ("Elu", {}, lambda x: np.where(x < 0, np.expm1(x), x)),
    ("Elu", {"alpha": 0.5}, lambda x: np.where(x < 0, 0.5 * np.expm1(x), x)),
    ("Selu", {}, lambda x: np.float32(1.0507010221481323) * np.where(x > 0, x, np.float32(1.6732631921768188) * np.expm1(x))),
    ("Selu", {"alpha": 2.0, "gamma": 3.0}, lambda x: 3 * np.where(x > 0, x, 2 * np.expm1(x))),
    ("Celu", {"alpha": 2.0}, lambda x: np.maximum(0, x) + np.minimum(0, 2 * np.expm1(x / 2))),
    ("Softplus", {}, _softplus),
    ("Softsign", {}, lambda x: x / (1 + np.abs(x))),
    ("HardSigmoid", {}, lambda x: _hard_sigmoid(x, np.float32(0.2), 0.5)),
    ("HardSigmoid", {"alpha": 0.5, "beta": 0.25}, lambda x: _hard_sigmoid(x, 0.5, 0.25)),
    ("HardSwish", {}, lambda x: x * _hard_sigmoid(x, np.float32(1 / 6), 0.5)),
    ("Mish", {}, lambda x: x * np.tanh(_softplus(x))),
    ("ThresholdedRelu", {}, lambda x: np.where(x > 1, x, 0)),
    ("ThresholdedRelu", {"alpha": -0.5}, lambda x: np.where(x > -0.5, x, 0)),
    ("Swish", {}, lambda x: x * np.exp(-np.logaddexp(0, -x))),
    ("Swish", {"alpha": 1.702}, lambda x: x * np.exp(-np.logaddexp(0, -np.float32(1.702) * x))),
    ("Shrink", {}, lambda x: np.where(x < -0.5, x, np.where(x > 0.5, x, 0))),
    ("Shrink", {"bias": 1.5, "lambd": 1.0}, lambda x: np.where(x < -1, x + 1.5, np.where(x > 1, x - 1.5, 0))),
]


def _ref(fn, x, dtype):
    with np.errstate(all="ignore"):
        return np.asarray(fn(x.astype(np.float64))).astype(dtype)


@pytest.mark.parametrize("name,params,fn", CASES, ids=[f"{c[0]}{c[1] or ''}" for c in CASES])
def test_activations_f32(backend, name, params, fn):
    x = np.concatenate([RNG.standard_normal(30) * 4, SPECIAL]).astype(np.float32)
    y = getattr(ops, name)(x, backend=backend, **params)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y, _ref(fn, x, np.float32), rtol=3e-6, atol=2e-7, equal_nan=True)


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-13), (np.float16, 2e-3),
                                        (ml_dtypes.bfloat16, 1.6e-2)], ids=["f64", "f16", "bf16"])
def test_activation_dtypes(backend, dtype, rtol):
    x = np.concatenate([RNG.standard_normal(20) * 3, [0.0, -0.0, np.inf, np.nan]]).astype(dtype)
    for name, params, fn in CASES[:1] + CASES[2:3] + CASES[7:9] + CASES[12:13]:
        y = getattr(ops, name)(x, backend=backend, **params)
        assert y.dtype == x.dtype, name
        np.testing.assert_allclose(y.astype(np.float64), _ref(fn, x, dtype).astype(np.float64),
                                   rtol=rtol, atol=1e-6 if dtype != np.float64 else 1e-15, equal_nan=True,
                                   err_msg=name)


def test_softplus_and_mish_do_not_overflow(backend):
    x = np.array([-1000.0, -80.0, 80.0, 1000.0], np.float32)
    tiny = np.exp(-80.0)
    np.testing.assert_allclose(ops.Softplus(x, backend=backend), [0, tiny, 80, 1000], rtol=1e-5, atol=1e-38)
    np.testing.assert_allclose(ops.Mish(x, backend=backend), [0, -80 * tiny, 80, 1000], rtol=1e-5, atol=1e-38)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int64, np.float16])
def test_shrink_every_numeric_dtype(backend, dtype):
    x = np.arange(-6, 6).astype(dtype) if np.dtype(dtype).kind != "u" else np.arange(0, 12).astype(dtype)
    y = ops.Shrink(x, bias=1.5, lambd=1.5, backend=backend)
    xf = x.astype(np.float64)
    ref = np.where(xf < -1.5, xf + 1.5, np.where(xf > 1.5, xf - 1.5, 0))
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, ref.astype(dtype))  # integers truncate: -4.5 -> -4


PRELU_SHAPES = [((2, 3, 4), (4,)), ((2, 3, 4), (3, 1)), ((2, 3, 4), ()), ((2, 3, 4), (2, 3, 4)),
                ((2, 3, 1, 2, 3), (3, 1, 1, 1)), ((4,), (1,))]


@pytest.mark.parametrize("xs,ss", PRELU_SHAPES, ids=str)
def test_prelu_broadcasts_slope_to_x(backend, xs, ss):
    x = RNG.standard_normal(xs).astype(np.float32)
    s = RNG.standard_normal(ss).astype(np.float32)
    y = ops.PRelu(x, s, backend=backend)
    np.testing.assert_array_equal(y, np.where(x < 0, x * s, x))


def test_prelu_integers_and_opset6_channels(backend):
    x = np.arange(-6, 6, dtype=np.int64).reshape(2, 3, 2)
    s = np.array([1, 2, 3], np.int64)
    np.testing.assert_array_equal(ops.PReluV6(x, s, backend=backend), np.where(x < 0, x * s.reshape(3, 1), x))
    with pytest.raises(dsl.VerifyError, match=r"PRelu x and slope shapes .* do not broadcast"):
        ops.PRelu(x, s)  # opset 7: (3,) is broadcast against the last axis (2)


def test_swiglu_gates_the_value(backend):
    a = RNG.standard_normal((3, 8)).astype(np.float32) * 4
    b = RNG.standard_normal((3, 8)).astype(np.float32)
    want = a.astype(np.float64) / (1 + np.exp(-0.5 * a.astype(np.float64))) * b
    np.testing.assert_allclose(ops.SwiGLU(a, b, alpha=0.5, backend=backend), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="must have the same shape"):
        ops.SwiGLU(a, b[:, :4], backend=backend)


def test_graph_use(backend):
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    g = dsl.Graph("act")
    xi = g.input("x", ("batch", 8), dsl.f32)
    g.output(ops.HardSwish(ops.PRelu(ops.Elu(xi, alpha=0.5), g.constant("s", np.full(8, 0.25, np.float32)))), "y")
    y = g.compile(backend=backend).run({"x": x})["y"]
    e = np.where(x < 0, 0.5 * np.expm1(x), x)
    p = np.where(e < 0, 0.25 * e, e)
    np.testing.assert_allclose(y, p * np.clip(p / 6 + 0.5, 0, 1), rtol=1e-6, atol=1e-7)


def test_errors_name_the_problem():
    with pytest.raises(dsl.VerifyError, match=r"Gelu input has dtype i32; accepted: f16, bf16, f32, f64"):
        ops.Gelu(np.ones(3, np.int32))
    with pytest.raises(dsl.VerifyError, match=r"Gelu approximate must be 'none' or 'tanh', got 'fast'"):
        ops.Gelu(np.ones(3, np.float32), approximate="fast")
    with pytest.raises(dsl.VerifyError, match=r"Celu alpha must not be 0"):
        ops.Celu(np.ones(3, np.float32), alpha=0.0)
    with pytest.raises(dsl.VerifyError, match=r"Shrink input has dtype bool_"):
        ops.Shrink(np.ones(3, bool))
    with pytest.raises(dsl.VerifyError, match=r"PRelu input has dtype i8"):
        ops.PRelu(np.ones(3, np.int8), np.ones(1, np.int8))
    with pytest.raises(dsl.VerifyError, match=r"PRelu need one dtype"):
        ops.PRelu(np.ones(3, np.float32), np.ones(1, np.float64))
    with pytest.raises(dsl.VerifyError, match=r"PRelu slope of shape \(2, 3\) must broadcast to x's shape \(3,\)"):
        ops.PRelu(np.ones(3, np.float32), np.ones((2, 3), np.float32))


def test_registered_with_onnx_opsets():
    from dsl.opgraph import registry
    for name, since in [("Gelu", 20), ("Elu", 6), ("Selu", 6), ("Celu", 12), ("Softplus", 1), ("Softsign", 1),
                        ("HardSigmoid", 6), ("HardSwish", 14), ("Mish", 18), ("ThresholdedRelu", 10),
                        ("PRelu", 7), ("Shrink", 9)]:
        cls = registry.lookup("", name, 22)
        assert cls.since == since and cls is getattr(ops, name), name
    assert registry.lookup("", "PRelu", 6) is ops.PReluV6
    with pytest.raises(registry.UnknownOpError):
        registry.lookup("", "Mish", 17)
