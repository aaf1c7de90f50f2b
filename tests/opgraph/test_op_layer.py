"""dsl.Op: params, eager application, hooks, empty tensors, registry."""
import pickle
from typing import Literal, Optional, Tuple

import numpy as np
import pytest

import dsl
from dsl.opgraph import registry
import oplayer_testops as L


# --------------------------------------------------------------------------- params

class Params(dsl.Op):
    alpha: float = 0.5
    axes: Tuple[int, ...] = (0,)
    mode: Literal["a", "b"] = "a"
    dtype: dsl.DType = dsl.f32
    bound: Optional[int] = None
    table: np.ndarray = np.zeros(2)
    count: int  # required

    def infer(self, x):
        return x.spec


def test_params_defaults_coercion_and_value_semantics():
    p = Params(count=3, alpha=1, axes=[1, 2], dtype="u8", table=[1, 2, 3])
    assert p.alpha == 1.0 and isinstance(p.alpha, float)
    assert p.axes == (1, 2) and p.dtype is dsl.u8 and p.bound is None
    assert list(p.params) == ["alpha", "axes", "mode", "dtype", "bound", "table", "count"]
    q = Params(count=3, alpha=1.0, axes=(1, 2), dtype=dsl.u8, table=np.array([1, 2, 3]))
    assert p == q and hash(p) == hash(q) and len({p, q}) == 1
    assert p != q.replace(alpha=2.0) and p != Params(count=4, alpha=1, axes=[1, 2], dtype="u8", table=[1, 2, 3])
    assert p.replace(count=4).count == 4 and p.count == 3
    assert "alpha=1.0" in repr(p)
    assert pickle.loads(pickle.dumps(p)) == p
    with pytest.raises(AttributeError, match="frozen"):
        p.alpha = 3.0
    with pytest.raises(ValueError):
        p.table[0] = 5  # array params are read-only copies


@pytest.mark.parametrize("kwargs, message", [
    (dict(count=1, alpah=2.0), "no param 'alpah'.*did you mean alpha"),
    (dict(count=1, alpha="x"), "param 'alpha' expects float, got str"),
    (dict(count=1.5), "param 'count' expects int"),
    (dict(count=True), "param 'count' expects int"),
    (dict(count=1, mode="c"), "param 'mode' must be one of 'a', 'b'"),
    (dict(count=1, axes=[0, "x"]), r"param 'axes\[1\]' expects int"),
    (dict(count=1, dtype="float128"), "param 'dtype' expects dsl.DType"),
    (dict(), "param 'count' is required"),
])
def test_param_errors_name_op_and_param(kwargs, message):
    with pytest.raises(TypeError, match=message) as e:
        Params(**kwargs)
    assert "Params" in str(e.value)


def test_op_base_and_backend_reserved():
    with pytest.raises(TypeError, match="base class"):
        dsl.Op()
    with pytest.raises(TypeError, match="backend"):
        L.HardSigmoid(backend="numba")


# --------------------------------------------------------------------------- eager

def test_eager_instance_and_construct_apply(backend):
    x = np.linspace(-4, 4, 37, dtype=np.float32).reshape(1, 37)
    op = L.HardSigmoid(alpha=0.5)
    assert isinstance(op, dsl.Op)
    y1 = op(x, backend=backend)
    y2 = L.HardSigmoid(x, alpha=0.5, backend=backend)
    np.testing.assert_allclose(y1, L.hard_sigmoid_ref(x, 0.5), rtol=1e-6)
    np.testing.assert_array_equal(y1, y2)
    assert y1.dtype == np.float32 and y1.shape == x.shape


def test_eager_multiple_outputs_and_run_override(backend):
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    lo, hi = L.MinMax(x, alpha=2.0, backend=backend)
    np.testing.assert_allclose(lo, np.minimum(2 * x, 0), rtol=1e-6)
    np.testing.assert_allclose(hi, np.maximum(2 * x, 0), rtol=1e-6)
    w = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    b = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(L.FullyConnected(x, w, b, backend=backend), x @ w.T + b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(L.FullyConnected(x, w, backend=backend), x @ w.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(L.FullyConnected(x, w, None, backend=backend), x @ w.T, rtol=1e-5, atol=1e-6)


def test_kernel_gets_only_the_params_it_declares():
    seen = {}

    def impl(x, y, beta):
        seen["beta"] = beta
        y[...] = x + beta

    class Shift(dsl.Op):
        alpha: float = 1.0
        beta: float = 2.0
        kernels = {"default": impl}

        def infer(self, x):
            return x.spec

    assert Shift(beta=3.0).kernel_kwargs(impl) == {"beta": 3.0}
    np.testing.assert_array_equal(Shift(np.zeros(2, np.float32), beta=3.0), [3.0, 3.0])
    assert seen == {"beta": 3.0}


def test_python_scalars_take_the_tensor_dtype():
    class Mul(dsl.Op):
        kernels = {"default": lambda a, b, y: np.multiply(a, b, out=y)}

        def infer(self, a, b):
            assert b.dtype == a.dtype and b.value is not None
            return a.spec

    x = np.arange(4, dtype=np.float32)
    y = Mul(x, 1.5)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, x * 1.5)


def test_verify_infer_and_select_errors_name_the_op():
    with pytest.raises(dsl.VerifyError, match=r"com.opdsl.test::HardSigmoid \(eager call\): HardSigmoid takes f32"):
        L.HardSigmoid(np.zeros(3, np.float64))
    with pytest.raises(dsl.VerifyError, match="shapes differ"):
        L.Add(np.zeros(3, np.float32), np.zeros(4, np.float32))

    class Broken(dsl.Op):
        def infer(self, x):
            return x.shape[5]

    with pytest.raises(dsl.VerifyError, match=r"Broken \(eager call\): infer failed on inputs \(f32\[3\]\): IndexError"):
        Broken(np.zeros(3, np.float32))

    class BadSelect(dsl.Op):
        kernels = {"a": None, "b": None}

        def infer(self, x):
            return x.spec

        def select(self, x, backend):
            return "c"

    with pytest.raises(dsl.VerifyError, match="select\\(\\) returned 'c', which is not in kernels \\(known: 'a', 'b'\\)"):
        BadSelect(np.zeros(3, np.float32))

    class NoInfer(dsl.Op):
        pass

    with pytest.raises(NotImplementedError, match="NoInfer must define infer"):
        NoInfer(np.zeros(3, np.float32))


def test_eager_rejects_non_arrays():
    with pytest.raises(TypeError, match="input 0: expected a numpy array"):
        L.HardSigmoid(object())


# --------------------------------------------------------------------------- empty tensors

def test_empty_outputs_skip_the_launch():
    calls = []

    def impl(x, y):
        calls.append(x.shape)
        y[...] = -x

    class Neg(dsl.Op):
        kernels = {"default": impl}

        def infer(self, x):
            return x.spec

    out = Neg(np.zeros((0, 3), np.float32))
    assert out.shape == (0, 3) and out.dtype == np.float32 and calls == []
    Neg(np.ones(2, np.float32))
    assert calls == [(2,)]


def test_dsl_kernels_on_zero_size_inputs(backend):
    x = np.zeros((0, 5), np.float32)
    w = np.ones((4, 5), np.float32)
    assert L.FullyConnected(x, w, backend=backend).shape == (0, 4)
    # an empty input with a non-empty output still launches: x @ w.T with 0 features is 0 + b
    y = L.FullyConnected(np.zeros((2, 0), np.float32), np.zeros((3, 0), np.float32),
                         np.arange(3, dtype=np.float32), backend=backend)
    np.testing.assert_array_equal(y, np.tile(np.arange(3, dtype=np.float32), (2, 1)))


# --------------------------------------------------------------------------- registry

def test_registry_lookup_opsets_and_overrides():
    assert registry.lookup(L.DOMAIN, "HardSigmoid") is L.HardSigmoid
    assert L.HardSigmoid.qualified_name() == "com.opdsl.test::HardSigmoid"

    @dsl.op("Versioned", domain="com.opdsl.test2", since=1, until=6)
    class V1(dsl.Op):
        def infer(self, x):
            return x.spec

    @dsl.op("Versioned", domain="com.opdsl.test2", since=7)
    class V7(V1):
        pass

    try:
        assert registry.lookup("com.opdsl.test2", "Versioned", 3) is V1
        assert registry.lookup("com.opdsl.test2", "Versioned", 13) is V7
        assert registry.lookup("com.opdsl.test2", "Versioned") is V7

        @dsl.op("Versioned", domain="com.opdsl.test2", since=5)
        class UserVersioned(V1):  # a user op overriding the built-in from opset 5 on
            pass

        assert registry.lookup("com.opdsl.test2", "Versioned", 13) is UserVersioned
        assert registry.lookup("com.opdsl.test2", "Versioned", 3) is V1
        # a built-in registered after the user op (ops imported late) does not win
        BuiltinLate = type("BuiltinLate", (V1,), {"__module__": "ops.late", "since": 7, "until": None})
        with registry.builtin_library():
            registry.register(BuiltinLate)
        assert registry.lookup("com.opdsl.test2", "Versioned", 13) is UserVersioned
        registry.unregister(UserVersioned)
        assert registry.lookup("com.opdsl.test2", "Versioned", 13) is V7  # also a user op
        registry.unregister(BuiltinLate)
        assert registry.lookup("com.opdsl.test2", "Versioned", 13) is V7
        with pytest.raises(dsl.UnknownOpError, match=r"no registration for opset 0 \(registered: V1 \[1, 6\]"):
            registry.lookup("com.opdsl.test2", "Versioned", 0)
    finally:
        for cls in (V1, V7):
            registry.unregister(cls)


def test_builtin_is_what_the_ops_package_registers_not_a_module_name():
    import ops
    assert registry.is_builtin(ops.Add) and registry.is_builtin(ops.Identity)
    assert registry.is_builtin(registry.lookup("", "Relu"))
    # a user op in a module whose name starts with "ops" is a user op, and beats the built-in
    Custom = type("Relu", (ops.Relu,), {"__module__": "ops_custom"})
    dsl.op("Relu", since=6)(Custom)
    try:
        assert not registry.is_builtin(Custom)
        assert registry.lookup("", "Relu", 14) is Custom
    finally:
        registry.unregister(Custom)
    assert registry.lookup("", "Relu", 14) is ops.Relu


def test_unknown_op_error_names_op_domain_and_closest():
    with pytest.raises(dsl.UnknownOpError) as e:
        registry.lookup(L.DOMAIN, "HardSigmod", 13)
    msg = str(e.value)
    assert "'HardSigmod'" in msg and "'com.opdsl.test'" in msg and "opset 13" in msg
    assert "HardSigmoid" in msg
    with pytest.raises(LookupError, match="the same type exists in: com.opdsl.test::LaneSum"):
        registry.lookup("com.elsewhere", "LaneSum")
    assert registry.find("com.nowhere", "Nothing") is None
    assert registry.normalize_domain("ai.onnx") == ""


def test_op_decorator_rejects_non_ops():
    with pytest.raises(TypeError, match="decorates a dsl.Op subclass"):
        dsl.op("X")(object)
