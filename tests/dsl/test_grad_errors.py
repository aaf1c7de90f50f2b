"""``dsl.grad``: what cannot be differentiated is a ``dsl.NotDifferentiable`` (a CompileError) at
the offending line and column, saying why; and the gradient kernel is a kernel like any other:
it pickles, caches and shows its source."""

import inspect
import pickle

import numpy as np
import pytest

import dsl
from dsl import In, InOut, Out, f64
from dsl.lang import builtins as B
from tests.dsl import grad_kernels as K

SRC = inspect.getsource(inspect.getmodule(inspect.currentframe())).splitlines()
FILE = __file__


def line_of(text: str) -> int:
    hits = [k + 1 for k, line in enumerate(SRC) if text in line]
    assert len(hits) == 1, (text, hits)
    return hits[0]


@dsl.kernel(threads=2)
def uses_sync(x: In[f64], y: Out[f64]):
    i = dsl.thread_id()
    dsl.sync()  # marker: sync
    y[i] = x[i]


@dsl.kernel(threads=2)
def uses_scratch(x: In[f64], y: Out[f64]):
    s = dsl.scratch(2, f64)  # marker: scratch
    i = dsl.thread_id()
    s[i] = x[i]
    y[i] = s[i]


@dsl.kernel(threads=2)
def uses_atomic(x: In[f64], y: InOut[f64]):
    i = dsl.thread_id()
    dsl.atomic_add(y, 0, x[i])  # marker: atomic


@dsl.kernel(threads=1)
def value_dependent_while(x: In[f64], y: Out[f64]):
    v = x[0]
    while v < 10.0:  # marker: while
        v = v * 2.0
    y[0] = v


@dsl.kernel(threads=2)
def reads_and_writes_inout(x: InOut[f64]):
    i = dsl.thread_id()
    x[i] = x[i] * 2.0  # marker: inout


@dsl.kernel(threads=1)
def breaks(x: In[f64], y: Out[f64]):
    acc = 0.0
    for i in range(x.shape[0]):
        acc += x[i]
        if acc > 3.0:
            break  # marker: break
    y[0] = acc


@dsl.kernel(threads=1)
def simd(x: In[f64], y: Out[f64]):
    v = x.vload(0, 4)  # marker: simd
    y.vstore(0, v * v)


def no_derivative(x):
    return x


@dsl.kernel(threads=1)
def calls_underivable(x: In[f64], y: Out[f64]):
    y[0] = no_derivative(x[0]) * 2.0  # marker: builtin


CASES = [
    (uses_sync, "sync", "dsl.sync() is not differentiable"),
    (uses_scratch, "scratch", "team scratch 's' is not differentiable"),
    (uses_atomic, "atomic", "dsl.atomic_add on 'y' is not differentiable"),
    (value_dependent_while, "while", "while loop whose trip count depends on a differentiated"),
    (reads_and_writes_inout, "inout", "InOut tensor 'x' is read and written"),
    (breaks, "break", "break in a differentiated kernel"),
    (simd, "simd", "SIMD values are not differentiable"),
]


@pytest.mark.parametrize("kernel,marker,why", CASES, ids=[c[1] for c in CASES])
def test_not_differentiable_is_located(kernel, marker, why):
    x = np.ones(4)
    args = {p.name: (np.zeros(4) if p.kind == "tensor" else 0.0) for p in dsl.grad(kernel).params}
    args.update({n: x for n in args if n == "x"})
    with pytest.raises(dsl.NotDifferentiable) as e:
        dsl.grad(kernel)(**args, backend="numba")
    assert isinstance(e.value, dsl.CompileError)
    assert why in e.value.message
    assert e.value.loc.file == FILE and e.value.loc.line == line_of(f"# marker: {marker}")
    assert "^" in str(e.value)  # the caret under the column


def test_builtin_without_derivative_names_the_registry():
    B.register(B.Builtin("no_derivative", no_derivative, "identity", arity=(1,), rule=B.RULES["unary_float"],
                         spelling={"numba": "({0})", "c": "({0})"}))
    try:
        k = dsl.kernel(threads=1)(calls_underivable.fn)
        with pytest.raises(dsl.NotDifferentiable) as e:
            dsl.grad(k)(np.ones(1), np.zeros(1), np.ones(1), np.zeros(1), backend="numba")
        assert "builtin no_derivative() declares no derivative" in e.value.message
        assert "dsl/lang/builtins.py" in e.value.note
        assert e.value.loc.line == line_of("* 2.0  # marker: " + "builtin")
    finally:
        B.unregister("no_derivative")


def test_every_float_builtin_declares_a_derivative():
    missing = [n for n, b in B.BUILTINS.items() if b.kind == "call" and b.rule is not None and not b.derivative
               and any(b.rule([t])[1].is_float for t in (dsl.f32,) if 1 in b.arity)]
    assert missing == []


def test_grad_of_non_kernel_and_of_a_gradient():
    with pytest.raises(TypeError, match="takes a @dsl.kernel"):
        dsl.grad(lambda x: x)
    with pytest.raises(TypeError, match="already a gradient"):
        dsl.grad(dsl.grad(K.elementwise))


def test_integer_dtype_for_a_typevar_tensor_has_no_gradient():
    T = dsl.TypeVar("T")

    @dsl.kernel(threads=1)
    def copy(x: In[T], y: Out[T]):
        for i in range(x.shape[0]):
            y[i] = x[i]
    g = dsl.grad(copy)
    assert [p.name for p in g.params] == ["x", "y", "grad_y", "grad_x"]
    a = np.ones(3)
    g(a, a * 0, a, a * 0)
    with pytest.raises(TypeError, match="'y' is i32, which has no gradient"):
        g(np.ones(3, np.int32), np.zeros(3, np.int32), np.ones(3, np.int32), np.zeros(3, np.int32))


def test_pickles_caches_and_shows_source():
    g = dsl.grad(K.elementwise)
    x, gy = np.linspace(-1, 1, 7), np.ones(7)
    gx = np.zeros(7)
    g(x, np.zeros(7), 0.5, gy, gx)
    again = pickle.loads(pickle.dumps(g))
    assert again is g  # by reference: dsl.grad of the importable forward, the same object
    gx2 = np.zeros(7)
    again(x, np.zeros(7), 0.5, gy, gx2)
    np.testing.assert_array_equal(gx, gx2)
    assert len([k for k in g._variants if k[0] == "numba"]) == 1  # compiled once for this specialization
    python = g.source("python")
    assert python.startswith("def elementwise_grad(x: dsl.In[dsl.f64, 1], y: dsl.Out[dsl.f64, 1], alpha: dsl.f64, "
                             "grad_y: dsl.In[dsl.f64, 1], grad_x: dsl.InOut[dsl.f64, 1]):")
    assert "def " in g.source("numba") and "__kernel" in g.source("opencl") and "grad_x" in g.source("ir")
    # the disk cache keys the generated kernel; a fresh gradient object finds the same key
    from dsl.runtime.grad import GradKernel
    fresh = GradKernel(K.elementwise)
    values, key = g.bind((x, np.zeros(7), 0.5, gy, gx), {})
    a, b = g.generated(values), fresh.generated(values)
    assert a.cache_key("numba", a.bind(tuple(values), {})[1]) == b.cache_key("numba", b.bind(tuple(values), {})[1])


def test_pickles_by_value_for_a_kernel_defined_in_a_function():
    @dsl.kernel(threads=1)
    def square(x: In[f64], y: Out[f64]):
        for i in range(x.shape[0]):
            y[i] = x[i] * x[i]
    g = pickle.loads(pickle.dumps(dsl.grad(square)))
    gx = np.zeros(3)
    g(np.array([1.0, 2.0, 3.0]), np.zeros(3), np.ones(3), gx)
    np.testing.assert_allclose(gx, [2.0, 4.0, 6.0])
