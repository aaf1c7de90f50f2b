"""Semantics decided once in the language layer: the builtin registry, IR node identities
(scratch declarations, @dsl.func specializations, .ndim) and the evaluation rules the IR
node classes carry."""
import re
from pathlib import Path

import numpy as np
import pytest

import dsl
from dsl import In, Out, f32, f64, i32
from dsl.lang import builtins as B
from dsl.lang import ir

T = dsl.TypeVar("T")
DOC = (Path(__file__).parents[2] / "docs" / "language.md").read_text()


# ---------------------------------------------------------------- the registry is complete

def test_every_builtin_is_spelled_for_every_target_or_says_why():
    missing = []
    for name, b in B.BUILTINS.items():
        assert b.kind in B.KINDS, name
        if b.kind == "lowered":
            assert b.reason, f"lowered builtin {name} must say why it has no spelling"
            continue
        assert b.rule is not None and b.arity, name
        for target in B.TARGETS:
            if b.spelled((target,)) is None:
                missing.append((name, target))
    assert not missing, f"builtins without a spelling: {missing}"


def test_every_builtin_has_a_docs_row():
    rows = [line for line in DOC.splitlines() if line.startswith("| `dsl.")]
    documented = {m.group(1) for r in rows for m in re.finditer(r"`dsl\.(\w+)\(", r.split("|")[1])}
    missing = sorted(set(B.BUILTINS) - documented)
    assert not missing, f"builtins without a row in docs/language.md: {missing}"


def test_builtins_resolve_through_the_registry():
    assert B.by_runtime(dsl.exp) == "exp"
    assert B.by_runtime(dsl.where) == "where"
    assert B.by_runtime(np.exp) is None


def test_a_builtin_without_a_spelling_is_a_compile_error_naming_it():
    loc = dsl.SourceLoc("k.py", 3, 5, "y = f(x)")
    with pytest.raises(dsl.CompileError, match=r"k.py:3:5: .*exp\(\) has no spelling for the fpga target"):
        B.spelling("exp", ("fpga",), loc)


# ---------------------------------------------------------------- IR identities

def _ir(kernel, *args) -> ir.Kernel:
    values, _ = kernel.bind(args, {})
    return kernel.specialize(values)


@dsl.kernel
def ndim_kernel(x: In[f32, 3], y: Out[i32]):
    s = dsl.scratch((4, 2), f32)
    if dsl.thread_id() == 0:
        y[0] = x.ndim * 10 + s.ndim


def test_ndim_is_a_node_folded_by_the_checker(backend):
    x = np.zeros((1, 2, 3), np.float32)
    k = _ir(ndim_kernel, x, np.zeros(1, np.int32))
    assert not any(isinstance(n, (ir.NDim, ir.Call)) and getattr(n, "name", "") == "_ndim"
                   for n in ir.walk(list(k.body)))
    assert not any(isinstance(n, ir.NDim) for n in ir.walk(list(k.body)))
    y = np.zeros(1, np.int32)
    ndim_kernel(x, y, backend=backend)
    assert y[0] == 32


@dsl.kernel(threads=2)
def two_scratch_one_line(x: In[f32], y: Out[f32], n: Out[i32]):
    a, b = dsl.scratch((3,), f32), dsl.scratch((5,), i32)
    t = dsl.thread_id()
    if t == 0:
        for i in range(3):
            a[i] = x[i]
        for i in range(5):
            b[i] = i32(i * 2)
    dsl.sync()
    if t == 1:
        y[0] = a[0] + a[1] + a[2]
        n[0] = b[4] + i32(a.size * 100 + b.size)


def test_two_scratch_buffers_declared_on_one_line(backend):
    k = _ir(two_scratch_one_line, np.ones(3, np.float32), np.zeros(1, np.float32), np.zeros(1, np.int32))
    a, b = k.scratch
    assert (a.index, b.index) == (0, 1) and a.loc.line == b.loc.line and a.loc.col < b.loc.col
    assert k.scratch_at(b.loc.line, b.loc.col) is b
    x = np.array([1, 2, 4], np.float32)
    y, n = np.zeros(1, np.float32), np.zeros(1, np.int32)
    two_scratch_one_line(x, y, n, backend=backend)
    assert y[0] == 7 and n[0] == 8 + 305


# two @dsl.func with one __name__, from different places: distinct specializations
def _make(scale):
    @dsl.func
    def helper(v):
        return v * scale
    return helper


helper_a = _make(2.0)
helper_c = _make(3)  # the same def (one FuncOrigin), another captured constant


@dsl.func
def helper(v):  # same __name__ as helper_a
    return v + 100.0


@dsl.kernel(threads=1)
def same_named_funcs(x: In[f32], y: Out[f32, 2]):  # three different functions named helper
    for i in range(x.size):
        y[0, i] = helper_a(x[i])
        y[1, i] = helper(x[i]) + helper(1) + helper_c(x[i]) - helper_c(x[i])
        y[2, i] = helper_c(x[i])


def test_func_specializations_have_structured_origins(backend):
    x = np.array([1, 2], np.float32)
    k = _ir(same_named_funcs, x, np.zeros((3, 2), np.float32))
    names = [f.name for f in k.funcs]
    assert len(set(names)) == len(names) == 4 and all(n.isidentifier() for n in names)
    origins = {f.origin.qualname for f in k.funcs}
    assert origins == {"_make.<locals>.helper", "helper"}
    by_types = {(f.origin.qualname, f.arg_types) for f in k.funcs}
    assert ("helper", (dsl.f32,)) in by_types and ("helper", (dsl.lang.types.WEAK_INT,)) in by_types
    for n in ir.walk(list(k.body)):
        if isinstance(n, ir.FuncCall):
            assert k.function(n.func).name == n.func
    y = np.zeros((3, 2), np.float32)
    same_named_funcs(x, y, backend=backend)
    np.testing.assert_array_equal(y, [[2, 4], [202, 203], [3, 6]])


# ---------------------------------------------------------------- evaluation rules in the IR

@dsl.kernel(threads=1)
def where_and_ifexp(x: In[f64], y: Out[f64]):
    for i in range(x.size):
        y[i] = dsl.where(x[i] > 0, x[i], -x[i]) + (1.0 if x[i] > 1 else 0.0)


def test_where_and_ifexp_are_different_nodes(backend):
    k = _ir(where_and_ifexp, np.zeros(2), np.zeros(2))
    kinds = {type(n).__name__ for n in ir.walk(list(k.body))}
    assert "Select" in kinds and "Conditional" in kinds
    assert not any(hasattr(n, "both") for n in ir.walk(list(k.body)))
    y = np.zeros(3)
    where_and_ifexp(np.array([-1.0, 0.5, 3.0]), y, backend=backend)
    np.testing.assert_array_equal(y, [1.0, 0.5, 4.0])


# ---------------------------------------------------------------- a builtin added in the table alone

expm1_local = B._np_unary(np.expm1)  # the Python face of a test-local builtin
half_only = B._np_unary(lambda x: x * 0.5)


@pytest.fixture
def local_builtins():
    B.register(B.Builtin("expm1_local", expm1_local, "e**x - 1", arity=(1,), rule=B.RULES["unary_float"],
                         spelling={"numba": "math.expm1({0})", "c": "expm1({0})"}))
    B.register(B.Builtin("half_only", half_only, "x / 2, spelled for numba only", arity=(1,),
                         rule=B.RULES["unary_float"], spelling={"numba": "({0} * {T}(0.5))"}))
    yield
    B.unregister("expm1_local")
    B.unregister("half_only")


@dsl.kernel
def uses_local_builtin(x: In[f32], y: Out[f32], z: Out[f64]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y[i] = expm1_local(x[i])
        z[i] = expm1_local(f64(x[i]) * 2.0)


@dsl.kernel
def uses_numba_only_builtin(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y[i] = half_only(x[i])


def test_a_builtin_registered_in_the_table_alone_runs_everywhere(backend, local_builtins):
    x = np.linspace(-3, 3, 37).astype(np.float32)
    y, z = np.zeros_like(x), np.zeros(x.size)
    uses_local_builtin(x, y, z, backend=backend)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, np.expm1(x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(z, np.expm1(x.astype(np.float64) * 2.0), rtol=1e-13)


def test_a_builtin_without_a_spelling_for_a_backend_names_builtin_target_and_line(backend, local_builtins):
    x = np.arange(4, dtype=np.float32)
    y = np.zeros_like(x)
    if backend != "opencl":
        uses_numba_only_builtin(x, y, backend=backend)
        np.testing.assert_array_equal(y, x * 0.5)
        return
    with pytest.raises(dsl.CompileError, match=r"test_builtins_registry.py:\d+:\d+: error: builtin half_only\(\) "
                                                r"has no spelling for the opencl target"):
        uses_numba_only_builtin(x, y, backend=backend)


def test_every_helper_spelling_has_its_emitter_method():
    from backends.cstyle.emitter import CStyleRenderer
    from backends.numba.codegen import Gen
    from backends.opencl.render import OpenCLRenderer
    emitters = {"numba": (Gen, Gen.TARGETS), "c": (CStyleRenderer, CStyleRenderer.targets),
                "opencl": (OpenCLRenderer, OpenCLRenderer.targets)}
    missing = []
    for name, b in B.BUILTINS.items():
        if b.kind == "lowered":
            continue
        for target, (cls, chain) in emitters.items():
            s = b.spelled(chain)
            if isinstance(s, B.Helper) and not hasattr(cls, "builtin_" + s.name):
                missing.append((name, target, "builtin_" + s.name))
    assert not missing


def test_scratch_identity_in_an_indented_kernel_with_pow(backend):
    # indented (defined in a function) and using ** (which the interpreter recompiles from the
    # dedented source): the scratch calls are still matched by their line and column
    # (the TypeVar dtype is only known from the checked declaration the call is matched to)
    @dsl.kernel(threads=1)
    def k(y: Out[T], n: Out[i32]):
        a, b = dsl.scratch((2,), T), dsl.scratch((3,), i32)
        a[1] = y[0] ** 3
        b[2] = i32(3) ** 2
        y[0] = a[1] + a.size
        n[0] = b[2] + i32(b.size)

    y, n = np.full(1, 2, np.float64), np.zeros(1, np.int32)
    k(y, n, backend=backend)
    assert y[0] == 10 and n[0] == 12
