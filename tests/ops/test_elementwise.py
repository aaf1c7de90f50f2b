"""Elementwise ops on every backend against numpy: broadcasting, dtypes, eager == graph, errors."""
import ml_dtypes
import numpy as np
import pytest

import dsl
import ops

RNG = np.random.default_rng(7)

BINARY = [(ops.Add, np.add), (ops.Sub, np.subtract), (ops.Mul, np.multiply)]
SHAPES = [
    ((3, 4), (3, 4)),
    ((2, 3, 4), (4,)),             # trailing broadcast
    ((2, 1, 4), (1, 3, 1)),        # both sides broadcast
    ((5,), ()),                    # scalar operand
    ((1,), (2, 3)),
    ((2, 1, 3, 1, 2, 1), (1, 4, 1, 5, 1, 3)),  # > 4 axes after collapsing: leading loop
]


def graph_run(op_fn, arrays, backend, **params):
    """The same op call in a compiled graph (every array a graph input)."""
    g = dsl.Graph("t")
    ins = [g.input(f"in{i}", a.shape, dsl.lang.types.from_numpy(a.dtype)) for i, a in enumerate(arrays)]
    g.output(op_fn(*ins, **params), "y")
    return g.compile(backend=backend).run({f"in{i}": a for i, a in enumerate(arrays)})["y"]


@pytest.mark.parametrize("sa,sb", SHAPES, ids=str)
def test_binary_broadcasting(backend, sa, sb):
    a = RNG.standard_normal(sa).astype(np.float32)
    b = RNG.standard_normal(sb).astype(np.float32)
    for op, ref in BINARY:
        y = op(a, b, backend=backend)
        assert y.shape == ref(a, b).shape and y.dtype == np.float32
        np.testing.assert_array_equal(y, ref(a, b))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int64, np.float64, np.float16])
def test_binary_dtypes_wrap_like_numpy(backend, dtype):
    if np.dtype(dtype).kind == "f":
        a = RNG.standard_normal((3, 5)).astype(dtype)
        b = RNG.standard_normal((5,)).astype(dtype)
    else:
        info = np.iinfo(dtype)
        a = RNG.integers(info.min, info.max, (3, 5), endpoint=True).astype(dtype)
        b = RNG.integers(info.min, info.max, (5,), endpoint=True).astype(dtype)
    for op, ref in BINARY:
        y = op(a, b, backend=backend)
        assert y.dtype == dtype
        np.testing.assert_array_equal(y, ref(a, b))


def test_unary_activations(backend):
    x = np.concatenate([RNG.standard_normal(40) * 4, [0.0, -0.0, 100.0, -100.0, np.inf, -np.inf, np.nan]])
    x = x.astype(np.float32)
    with np.errstate(over="ignore"):
        sig = (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    np.testing.assert_array_equal(ops.Relu(x, backend=backend)[:-1], np.maximum(x, 0)[:-1])
    assert np.isnan(ops.Relu(x, backend=backend)[-1])
    np.testing.assert_array_equal(ops.LeakyRelu(x, alpha=0.1, backend=backend),
                                  np.where(x >= 0, x, x * np.float32(0.1)))
    np.testing.assert_array_equal(ops.LeakyRelu(x, backend=backend), np.where(x >= 0, x, x * np.float32(0.01)))
    np.testing.assert_allclose(ops.Sigmoid(x, backend=backend), sig, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ops.Tanh(x, backend=backend), np.tanh(x), rtol=1e-6, atol=1e-6)


def test_unary_storage_types_and_int_relu(backend):
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    for dt in (np.float16, ml_dtypes.bfloat16):
        xs = x.astype(dt)
        y = ops.Tanh(xs, backend=backend)
        assert y.dtype == dt
        np.testing.assert_allclose(y.astype(np.float32), np.tanh(xs.astype(np.float32)), rtol=1e-2, atol=1e-2)
    xi = RNG.integers(-100, 100, (3, 7)).astype(np.int32)
    np.testing.assert_array_equal(ops.Relu(xi, backend=backend), np.maximum(xi, 0))
    xd = RNG.standard_normal(9)
    np.testing.assert_allclose(ops.Sigmoid(xd, backend=backend), 1 / (1 + np.exp(-xd)), rtol=1e-12)


def test_eager_equals_graph(backend):
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((3, 1)).astype(np.float32)
    for op, _ in BINARY:
        np.testing.assert_array_equal(op(a, b, backend=backend), graph_run(op, [a, b], backend))
    np.testing.assert_array_equal(ops.LeakyRelu(a, alpha=0.3, backend=backend),
                                  graph_run(ops.LeakyRelu, [a], backend, alpha=0.3))
    np.testing.assert_array_equal(ops.Sigmoid(a, backend=backend), graph_run(ops.Sigmoid, [a], backend))


def test_chain_in_graph_with_none_dims(backend):
    g = dsl.Graph("chain")
    x = g.input("x", (None, 4), dsl.f32)
    b = g.constant("b", np.arange(4, dtype=np.float32))
    y = ops.Tanh(ops.Mul(ops.Relu(ops.Add(x, b)), 0.5))  # a Python scalar becomes a constant
    g.output(y, "y")
    model = g.compile(backend=backend)
    for n in (1, 5):
        xv = RNG.standard_normal((n, 4)).astype(np.float32)
        ref = np.tanh(np.maximum(xv + b.value, 0) * np.float32(0.5))
        np.testing.assert_allclose(model.run({"x": xv})["y"], ref, rtol=1e-6, atol=1e-6)


def test_empty_tensors(backend):
    e = np.zeros((0, 3), np.float32)
    assert ops.Add(e, np.ones(3, np.float32), backend=backend).shape == (0, 3)
    assert ops.Relu(e, backend=backend).shape == (0, 3)


def test_errors_name_the_problem():
    a = np.ones((2, 3), np.float32)
    with pytest.raises(dsl.VerifyError, match=r"Add.*one dtype.*f32, i32"):
        ops.Add(a, np.ones(3, np.int32))
    with pytest.raises(dsl.VerifyError, match=r"do not broadcast.*axis -1.*\[3, 4\]"):
        ops.Mul(a, np.ones(4, np.float32))
    with pytest.raises(dsl.VerifyError, match=r"Sigmoid input has dtype i32; accepted: f16, bf16, f32, f64"):
        ops.Sigmoid(np.ones(3, np.int32))
    with pytest.raises(dsl.VerifyError, match="Add.*bool_"):
        ops.Add(np.ones(2, bool), np.ones(2, bool))
    with pytest.raises(TypeError, match="LeakyRelu param 'alpha' expects float"):
        ops.LeakyRelu(a, alpha="big")
    g = dsl.Graph("bad")
    x = g.input("x", (None, 3), dsl.f32)
    with pytest.raises(dsl.VerifyError, match="do not broadcast"):
        ops.Add(x, g.input("y", (2,), dsl.f32))


def test_registered_with_onnx_opsets():
    from dsl.opgraph import registry
    for name, since in [("Add", 7), ("Mul", 7), ("Relu", 6), ("LeakyRelu", 6), ("Sigmoid", 6), ("Tanh", 6)]:
        cls = registry.lookup("", name, 13)
        assert cls.since == since and cls is getattr(ops, name)
    assert registry.lookup("", "Add", 6).broadcast == 0  # opset 6: the legacy broadcast/axis attributes
    with pytest.raises(registry.UnknownOpError):
        registry.lookup("", "Add", 5)  # opsets 1-5 (consumed_inputs): not provided


def _broadcast_pairs():
    from hypothesis import strategies as st

    @st.composite
    def pair(draw):
        out = draw(st.lists(st.integers(1, 4), min_size=1, max_size=6))

        def side(least):
            keep = draw(st.integers(least, len(out)))
            return tuple(1 if draw(st.booleans()) else d for d in out[len(out) - keep:])
        return side(1), side(0)  # (0-d eager arrays become 1-d in dsl.opgraph.op.as_arrays)
    return pair()


def test_binary_broadcasting_property():
    """Random broadcast patterns (collapsing, leading loops) agree with numpy on numba."""
    hypothesis = pytest.importorskip("hypothesis")

    @hypothesis.settings(max_examples=40, deadline=None, derandomize=True)
    @hypothesis.given(_broadcast_pairs())
    def check(shapes):
        a = RNG.standard_normal(shapes[0]).astype(np.float32)
        b = RNG.standard_normal(shapes[1]).astype(np.float32)
        for op, ref in BINARY:
            y = op(a, b, backend="numba")
            assert y.shape == ref(a, b).shape
            np.testing.assert_array_equal(y, ref(a, b))
    check()


def test_eager_ops_keep_zero_dim_shapes(backend):
    a = np.array(1.5, np.float32)
    r = ops.Add(a, np.array(2.0, np.float32), backend=backend)
    assert r.shape == () and r == np.float32(3.5)
    assert ops.Relu(np.array(-1.0, np.float32), backend=backend).shape == ()
