"""Property test: random elementwise kernels agree on interpreter, numba and opencl.

Hypothesis builds the Python source of a small kernel (an expression tree over two
input elements, a scalar param and literals; f32 f64 i32 i64 and wrapping i8 u8; sometimes
a range() loop with a negative step and an if/elif), execs it as a module registered in
linecache (so the frontend can read its source, like a file), and runs it on every
available backend.  Operations that are exact in IEEE arithmetic must agree bit for
bit; transcendental functions within a few ulps.  Discontinuous operations (floor,
//, %) only see exact subexpressions, so a last-ulp difference cannot flip them.
"""
import itertools
import linecache
import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from backends import base  # noqa: E402

DTYPES = ("f32", "f64", "i32", "i64", "i8", "u8")
_counter = itertools.count()


def _available():
    """Backends usable here, the interpreter (the specification) first."""
    names = []
    for b in ("interpreter", "numba", "opencl"):
        try:
            if not base.get(b).available():
                names.append(b)
        except ImportError:
            continue
    return names


@st.composite
def expressions(draw, dtype: str, depth: int = 3):
    """(python source, exact): an expression of type ``dtype`` over a, b, s."""
    is_float = dtype.startswith("f")
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        leaf = draw(st.sampled_from(["a", "b", "s", "lit"]))
        if leaf == "lit":
            lo = 0 if dtype.startswith("u") else -9
            v = draw(st.floats(-4, 4, allow_nan=False, width=32)) if is_float else draw(st.integers(lo, 9))
            return (f"{dtype}({v!r})", True)
        return (leaf, True)
    sub = expressions(dtype, depth - 1)
    kinds = ["add", "sub", "mulc", "minmax", "abs", "where", "floordivc", "modc", "neg"]
    if is_float:
        kinds += ["mul", "div", "exp", "tanh", "sin", "sqrt", "floor"]
    kind = draw(st.sampled_from(kinds))
    x, ex = draw(sub)
    if kind in ("add", "sub", "mul", "minmax", "where", "div"):
        y, ey = draw(sub)
        exact = ex and ey
        if kind == "add":
            return (f"({x} + {y})", exact)
        if kind == "sub":
            return (f"({x} - {y})", exact)
        if kind == "mul":
            return (f"({x} * {y})", exact)
        if kind == "div":
            return (f"({x} / (dsl.abs({y}) + {dtype}(1)))", exact)
        if kind == "minmax":
            return (f"{draw(st.sampled_from(['min', 'max']))}({x}, {y})", exact)
        cmp = draw(st.sampled_from(["<", "<=", ">", "==", "!="]))
        if not exact:  # a comparison of inexact values could flip: compare exact leaves instead
            return (f"dsl.where(a {cmp} b, {x}, {y})", False)
        return (f"dsl.where({x} {cmp} {y}, {x}, {y})", True)
    if kind == "mulc":
        return (f"({x} * {dtype}({draw(st.integers(0 if dtype.startswith('u') else -3, 3))}))", ex)
    if kind == "neg":
        return (f"(-{x})", ex)
    if kind == "abs":
        return (f"abs({x})", ex)
    if kind in ("floordivc", "modc", "floor"):
        if not ex:
            x = "a"
        if kind == "floor":
            return (f"dsl.floor({x})", True)
        d = draw(st.sampled_from([2, 3, 4, 7] if dtype.startswith("u") else [-3, -2, 2, 3, 4, 7]))
        op = "//" if kind == "floordivc" else "%"
        return (f"({x} {op} {dtype}({d}))", True)
    if kind == "exp":
        return (f"dsl.exp(dsl.clamp({x}, {dtype}(-8), {dtype}(8)))", False)
    if kind == "sqrt":
        return (f"dsl.sqrt(dsl.abs({x}))", False)
    return (f"dsl.{kind}({x})", False)


@st.composite
def bodies(draw, dtype: str):
    """(statements computing ``r``, exact): an expression, maybe a range loop and an if."""
    expr, exact = draw(expressions(dtype))
    lines = [f"r = {dtype}({expr})"]
    if draw(st.booleans()):  # range() with a possibly negative step: trip counts must agree
        start, stop = draw(st.integers(-4, 4)), draw(st.integers(-4, 4))
        step = draw(st.sampled_from([-2, -1, 1, 3]))
        lines += [f"for k in range({start}, {stop}, {step}):",
                  f"    r = {dtype}(r + {dtype}(k % 3))"]
    if draw(st.booleans()):
        other, ex2 = draw(expressions(dtype, depth=1))
        lines += ["if a < b or s == b:", f"    r = {dtype}({other})", "elif a == b:", "    r = r - r"]
        exact = exact and ex2
    return lines, exact


def make_kernel(dtype: str, body):
    name = f"gen_{next(_counter)}"
    src = (f"import dsl\n"
           f"from dsl import In, Out, {dtype}\n\n"
           f"@dsl.kernel(threads=2)\n"
           f"def {name}(x: In[{dtype}], y: In[{dtype}], out: Out[{dtype}], s: {dtype}):\n"
           f"    lo, hi = dsl.split(x.size)\n"
           f"    for i in range(lo, hi):\n"
           f"        a = x.flat[i]\n"
           f"        b = y.flat[i]\n"
           + "".join(f"        {line}\n" for line in body)
           + "        out.flat[i] = r\n")
    filename = f"<opdsl-differential-{name}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns = {"__name__": f"opdsl_differential_{name}", "__file__": filename}
    exec(compile(src, filename, "exec"), ns)
    return ns[name], src


def _inputs(dtype: str, seed: int):
    rng = np.random.default_rng(seed)
    npt = np.dtype({"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64", "i8": "int8",
                    "u8": "uint8"}[dtype])
    if npt.kind == "f":
        x = (rng.standard_normal(13) * 3).astype(npt)
        y = (rng.standard_normal(13) * 3).astype(npt)
        x[:3] = [0.0, -2.0, 3.5]
        y[:3] = [0.0, 2.0, 3.5]  # equal and opposite values exercise ==, //, %
        s = npt.type(rng.standard_normal() * 2)
    else:  # narrow types see their whole range: arithmetic must wrap like numpy
        lo, hi = (np.iinfo(npt).min, np.iinfo(npt).max) if npt.itemsize == 1 else (-50, 50)
        x = rng.integers(lo, hi, 13, endpoint=True).astype(npt)
        y = rng.integers(lo, hi, 13, endpoint=True).astype(npt)
        s = npt.type(rng.integers(lo // 4, hi // 4))
    return x, y, s


def check_random_kernel(data) -> None:
    """Draw one kernel and its inputs, run it on every available backend, compare with the first."""
    backends = _available()
    if len(backends) < 2:
        pytest.skip(f"need two backends to compare, have {backends}")
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    body, exact = data.draw(bodies(dtype), label="body")
    kern, src = make_kernel(dtype, body)
    x, y, s = _inputs(dtype, data.draw(st.integers(0, 2**16), label="seed"))
    results = {}
    with np.errstate(all="ignore"):
        for b in backends:
            out = np.zeros_like(x)
            kern(x, y, out, s, backend=b)
            results[b] = out
    ref_name = backends[0]
    ref = results[ref_name]
    for b in backends[1:]:
        got = results[b]
        msg = f"{b} vs {ref_name} on\n{src}\nx={x!r}\ny={y!r}\ns={s!r}"
        if exact or x.dtype.kind == "i":
            np.testing.assert_array_equal(got, ref, err_msg=msg)
        else:
            rtol = 1e-5 if x.dtype == np.float32 else 1e-12
            np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol, equal_nan=True, err_msg=msg)


# Every example is a new kernel compiled on numba and OpenCL (~1 s each on 2 cores): the default
# run draws 12 (CI replays the same ones, locally they vary); -m slow draws 100.
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=bool(os.environ.get("CI")))
@given(data=st.data())
def test_backends_agree_on_random_elementwise_kernels(data):
    check_random_kernel(data)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_backends_agree_on_many_random_elementwise_kernels(data):
    check_random_kernel(data)
