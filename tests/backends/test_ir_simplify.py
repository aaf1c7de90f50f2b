"""The numba backend's IR simplification (backends/numba/ir_simplify.py) and per-compile call typing
memo (backends/numba/typing_memo.py): smaller generated code, the same results on every backend."""
import numpy as np
import pytest

import dsl
from dsl import In, Out, f32, i64
from dsl.lang import ir
from dsl.lang import types as T

simplify = pytest.importorskip("backends.numba.ir_simplify")

MARK = 7654.5  # a value only the branch that folds away would store


@dsl.kernel(threads=1)
def tiled(x: In[f32], y: Out[f32], n: i64, flag: i64, WIDE: dsl.const[i64], V: dsl.const[i64]):
    """A register tile as the convolutions write it: an unrolled dsl.local zero-filled then
    initialized, constant locals, offsets of constants, and a branch under a const."""
    OCT = V * 2
    for i in range(n):
        acc = dsl.local((2,), f32)
        for j in dsl.static_range(2):
            acc[j] = x.flat[i * OCT + j * V] * 2.0
        for j in dsl.static_range(2):
            y.flat[i * OCT + j * V + 0 * i] = acc[j] + f32(j)
        if WIDE == 1 and flag == 1:  # folds away when WIDE is 0
            y.flat[i * OCT] = f32(MARK)
        if flag == 1 and V == 64:  # V is never 64 here: the pure left side does not keep it
            y.flat[i * OCT + 1] = f32(MARK)


def _reference(x, n, flag, wide, v):
    y = np.zeros(n * 2 * v, np.float32)
    for i in range(n):
        for j in range(2):
            y[i * 2 * v + j * v] = x[i * 2 * v + j * v] * 2 + j
        if wide == 1 and flag == 1:
            y[i * 2 * v] = MARK
    return y


@pytest.mark.parametrize("wide", [0, 1])
def test_tile_results_on_every_backend(backend, wide):
    """Folded or not, the kernel computes what numpy does (flag set, so the const decides)."""
    rng = np.random.default_rng(11)
    n, v = 3, 4
    x = rng.standard_normal(n * 2 * v).astype(np.float32)
    y = np.zeros_like(x)
    tiled(x, y, n=n, flag=1, WIDE=wide, V=v, backend=backend)
    np.testing.assert_allclose(y, _reference(x, n, 1, wide, v), rtol=1e-6, atol=1e-6)


def test_generated_source_is_smaller():
    """A branch under a const that is false is not in the numba source; constants are folded and
    the zero fill of the unrolled local, overwritten before any read, is gone."""
    x = np.zeros(24, np.float32)
    src = tiled.source("numba", x, x.copy(), n=3, flag=1, WIDE=0, V=4)
    body = src.split("def thread(")[1].split("\n@njit")[0]
    code = [line.strip() for line in body.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert not any(str(MARK) in line for line in code)
    assert "OCT = 8" in code
    assert not any("(0 * " in line or "(4 * 2)" in line for line in code)
    assert sum(line.startswith("acc__0 =") for line in code) == 1  # the zero fill dropped
    wide = tiled.source("numba", x, x.copy(), n=3, flag=1, WIDE=1, V=4)
    assert str(MARK) in wide  # the const keeps its branch


def _name(n, t=T.i64):
    return ir.Name(n, type=t)


def _c(v, t=T.i64):
    return ir.Const(v, type=t)


def _simplified(body, params=()):
    k = ir.Kernel("k", tuple(ir.ScalarParam(p, T.i64) for p in params), (), tuple(body), (("a", T.i64), ("b", T.i64)))
    return simplify.kernel(k).body


def test_store_kept_when_read_or_escaping():
    """An assignment is dropped only when overwritten before any read and with no break between."""
    read = _simplified([ir.Assign("a", _c(0)), ir.Assign("b", _name("a")), ir.Assign("a", _c(1))])
    assert [s.value for s in read if isinstance(s, ir.Assign) and s.name == "a"] == [_c(0), _c(1)]
    escaping = _simplified([ir.For("b", _c(0), _name("n"), _c(1), (
        ir.Assign("a", _c(0)), ir.If(ir.Compare("eq", _name("b"), _c(2), type=T.bool_), (ir.Break(),)),
        ir.Assign("a", _name("b"))))], params=("n",))
    assert len([s for s in escaping[0].body if isinstance(s, ir.Assign)]) == 2
    dead = _simplified([ir.Assign("a", _c(0)), ir.Assign("b", _c(3)), ir.Assign("a", _name("n"))], params=("n",))
    assert [s.name for s in dead] == ["b", "a"]


def test_side_effects_stay():
    """``f() and False`` keeps the call (only the condition's value is known); an impure left
    side and a debug build's checked loads are never dropped."""
    call = ir.FuncCall("bump", (), type=T.bool_)  # a @dsl.func call: it may store to a tensor
    cond = ir.Logical("and", call, _c(False, T.bool_), type=T.bool_)
    body = _simplified([ir.If(cond, (ir.Assign("a", _c(1)),))])
    assert isinstance(body[0], ir.If) and body[0].cond == cond
    load = ir.Load("t", (_c(0),), flat=True, type=T.i64)
    s = simplify._Simplifier({}, debug=True)
    assert not s.pure(load) and simplify._Simplifier({}, debug=False).pure(load)
    assert s.expr(ir.Binary("mul", load, _c(0), type=T.i64)) != _c(0)


def test_folds_wrap_like_the_type():
    """Folded integer arithmetic wraps as the IR type does; floats are left alone."""
    s = simplify._Simplifier({}, debug=False)
    assert s.expr(ir.Binary("add", _c(127, T.i8), _c(1, T.i8), type=T.i8)) == _c(-128, T.i8)
    assert s.expr(ir.Binary("floordiv", _c(7), _c(0), type=T.i64)).op == "floordiv"  # left to run time
    half = ir.Binary("mul", _c(0.5, T.f32), _c(3.0, T.f32), type=T.f32)
    assert s.expr(half) == half
    assert s.expr(ir.Binary("sub", ir.Binary("add", _name("n"), _c(8), type=T.i64), _c(16), type=T.i64)) == \
        ir.Binary("sub", _name("n"), _c(8), type=T.i64)


def test_typing_memo_resolves_each_call_once():
    """Inside opdsl's compiles numba types a repeated (function, argument types) call once; outside
    them numba's own resolution is back."""
    from numba import njit
    from numba.core.types import functions as numba_functions

    from backends.numba import link_once, typing_memo

    asked = []
    original = typing_memo._original

    def counting(self, context, args, kws):
        asked.append((self, args))
        return original(self, context, args, kws)

    def body(a, b):
        return a + b + a + b + a + b + a + b

    typing_memo._original = counting
    try:
        with link_once.compiling():
            njit(cache=False)(body).compile("f8(f8, f8)")
    finally:
        typing_memo._original = original
    assert len(asked) == len(set(asked)) and len(asked) >= 1
    assert numba_functions.BaseFunction.get_call_type is original  # numba's own, outside the block
