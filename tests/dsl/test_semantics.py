"""One meaning on every backend: the "Semantics" table of docs/language.md, case by case.

Each test runs on the interpreter, numba and OpenCL (the ``backend`` fixture) and compares
with the documented definition, written here in plain Python/numpy.  OpenCL runs on a
simulator on some machines, so sizes stay tiny.
"""
import numpy as np
import pytest

import dsl
from dsl import In, Out, bool_, f32, f64, i8, i16, i32, i64, u8, u32, u64

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


def compile_error(kernel, *args, match: str) -> dsl.CompileError:
    with pytest.raises(dsl.CompileError, match=match) as err:
        kernel(*args, backend="interpreter")
    return err.value


# --------------------------------------------------------------------------- uniformity through @dsl.func

@dsl.func
def my_tid():
    return dsl.thread_id()


@dsl.func
def via_helper(a):
    return my_tid() + a


@dsl.func
def pure_twice(a):
    return a * 2


def test_sync_under_a_func_returning_thread_id_is_a_compile_error():
    @dsl.kernel
    def k(o: Out[i64]):
        if my_tid() == 0:
            dsl.sync()
        o[0] = 1

    err = compile_error(k, np.zeros(1, np.int64), match="thread-dependent control flow")
    assert "my_tid() == 0" in str(err)


def test_thread_dependence_flows_through_nested_funcs():
    @dsl.kernel
    def k(o: Out[i64]):
        n = via_helper(1)
        while n > 0:
            dsl.sync()
            n -= 1
        o[0] = 1

    compile_error(k, np.zeros(1, np.int64), match="thread-dependent control flow")


def test_a_pure_func_of_uniform_values_keeps_sync_legal(backend):
    @dsl.kernel
    def k(o: Out[i64]):
        part = dsl.scratch((4,), i64)
        part[dsl.thread_id()] = dsl.thread_id()
        if pure_twice(dsl.num_threads()) == 8:
            dsl.sync()
        if dsl.thread_id() == 0:
            o[0] = part[0] + part[1] + part[2] + part[3]

    o = np.zeros(1, np.int64)
    k(o, backend=backend)
    assert o[0] == 6


# --------------------------------------------------------------------------- definite assignment

def test_local_assigned_under_if_without_else_is_a_compile_error():
    @dsl.kernel
    def k(x: In[f32], o: Out[f32]):
        if x[0] > 0:
            v = x[0]
        o[0] = v

    err = compile_error(k, np.ones(1, np.float32), np.zeros(1, np.float32), match="'v' may be used before")
    assert err.loc.line == k.fn.__code__.co_firstlineno + 4


def test_local_assigned_only_in_a_loop_body_is_a_compile_error():
    @dsl.kernel
    def k(x: In[f32], o: Out[f32]):
        for i in range(x.size):
            last = x[i]
        o[0] = last

    compile_error(k, np.ones(2, np.float32), np.zeros(1, np.float32), match="'last' may be used before")


def test_loop_variable_after_the_loop_is_a_compile_error():
    @dsl.kernel
    def k(x: In[f32], o: Out[i64]):
        for i in range(x.size):
            pass
        o[0] = i

    compile_error(k, np.ones(2, np.float32), np.zeros(1, np.int64), match="'i' may be used before")


def test_assigned_on_every_path_compiles(backend):
    @dsl.kernel(threads=1)
    def k(x: In[f32], o: Out[f32]):
        if x[0] > 0:
            v = x[0]
        elif x[0] < -1:
            v = f32(-1)
        else:
            return
        while True:
            w = v * 2
            if w > 0:
                break
            v = -v
        o[0] = w

    o = np.zeros(1, np.float32)
    k(np.array([3.0], np.float32), o, backend=backend)
    assert o[0] == 6.0


def test_func_that_may_not_return_is_a_compile_error():
    @dsl.func
    def half_defined(a):
        if a > 0:
            return a

    @dsl.kernel
    def k(x: In[f32], o: Out[f32]):
        o[0] = half_defined(x[0])

    compile_error(k, np.ones(1, np.float32), np.zeros(1, np.float32), match="without returning a value")


# --------------------------------------------------------------------------- integer edges

def launch(kernel, backend, *args):
    kernel(*args, backend=backend)
    return args[-1]


@dsl.kernel(threads=1)
def int_ops(a: In[i64], b: In[i64], o: Out[i64]):
    for k in range(a.size):
        o[k, 0] = a[k] // b[k]
        o[k, 1] = a[k] % b[k]
        o[k, 2] = a[k] << b[k]
        o[k, 3] = a[k] >> b[k]
        o[k, 4] = a[k] ** b[k]


def reference_int_ops(a, b):
    """The documented definitions, in Python integers wrapped to i64."""
    def wrap(v):
        return (v + (1 << 63)) % (1 << 64) - (1 << 63)

    rows = []
    for x, y in zip(a.tolist(), b.tolist()):
        div = 0 if y == 0 else wrap(x // y)
        mod = 0 if y == 0 else wrap(x % y)
        shl = wrap(x << y) if 0 <= y < 64 else 0
        shr = x >> y if 0 <= y < 64 else (-1 if x < 0 else 0)
        if y >= 0:
            p = wrap(pow(x, y, 1 << 64))
        else:
            p = 1 if x == 1 else (-1 if y % 2 else 1) if x == -1 else 0
        rows.append([div, mod, shl, shr, p])
    return np.array(rows, np.int64)


def test_i64_edges_agree_with_the_definition(backend):
    a = np.array([I64_MIN, I64_MIN, -5, -5, -5, 7, 2, -1, -1, 1, 3], np.int64)
    b = np.array([-1, 0, 64, -1, 63, 0, -1, -3, -2, -7, 65], np.int64)
    o = launch(int_ops, backend, a, b, np.zeros((a.size, 5), np.int64))
    np.testing.assert_array_equal(o, reference_int_ops(a, b))


@dsl.kernel(threads=1)
def narrow_shifts(a: In[i32], b: In[i32], u: In[u32], o: Out[i64]):
    for k in range(a.size):
        o[k, 0] = a[k] << b[k]
        o[k, 1] = a[k] >> b[k]
        o[k, 2] = u[k] >> u32(b[k] & 63)
        o[k, 3] = a[k] // b[k]


def test_narrow_shifts_and_division_agree_with_numpy(backend):
    a = np.array([-(1 << 31), -5, 1, 3, 3, -7], np.int32)
    b = np.array([-1, 32, 31, 40, -1, 2], np.int32)
    u = np.array([0xFFFFFFFF, 8, 8, 8, 1, 5], np.uint32)
    o = launch(narrow_shifts, backend, a, b, u, np.zeros((a.size, 4), np.int64))
    with np.errstate(all="ignore"):  # numpy defines the same values, with warnings
        expect = np.stack([(a << b).astype(np.int64), (a >> b).astype(np.int64),
                           (u >> (b & 63).astype(np.uint32)).astype(np.int64), (a // b).astype(np.int64)], axis=1)
    np.testing.assert_array_equal(o, expect)


@dsl.kernel(threads=1)
def float_to_int(x: In[f64], y: In[f32], o: Out[i64], n: Out[i8], u: Out[u64], s: Out[i32]):
    for k in range(x.size):
        o[k] = int(x[k])
        n[k] = i8(x[k])
        u[k] = u64(y[k])
        s[k] = y[k]  # an implicit store conversion follows the same rule


def saturate(v, lo, hi):
    return 0 if v != v else hi if v >= hi + 1 else lo if v < lo else int(v)


def test_float_to_int_truncates_saturates_and_maps_nan_to_zero(backend):
    vals = [float("nan"), float("inf"), -float("inf"), 1e30, -1e30, 2.9, -2.9, 127.5, -128.9, 300.0, -0.5]
    x = np.array(vals, np.float64)
    y = x.astype(np.float32)
    outs = [np.zeros(x.size, np.int64), np.zeros(x.size, np.int8), np.zeros(x.size, np.uint64),
            np.zeros(x.size, np.int32)]
    float_to_int(x, y, *outs, backend=backend)
    assert outs[0].tolist() == [saturate(v, I64_MIN, I64_MAX) for v in vals]
    assert outs[1].tolist() == [saturate(v, -128, 127) for v in vals]
    assert outs[2].tolist() == [saturate(float(v), 0, (1 << 64) - 1) for v in y]
    assert outs[3].tolist() == [saturate(float(v), -(1 << 31), (1 << 31) - 1) for v in y]


def test_out_of_range_literals_are_compile_errors():
    @dsl.kernel
    def k(x: In[i8], o: Out[i8]):
        o[0] = x[0] + 300

    err = compile_error(k, np.zeros(1, np.int8), np.zeros(1, np.int8), match=r"literal 300 does not fit i8: "
                                                                              r"accepted -128\.\.127")
    assert err.loc.source_line().index("300") + 1 == err.loc.col

    @dsl.kernel
    def big(o: Out[i64]):
        o[0] = 100000000000000000000

    compile_error(big, np.zeros(1, np.int64), match="does not fit i64")


def test_int_to_a_negative_constant_power_is_a_compile_error():
    @dsl.kernel
    def k(a: i64, o: Out[i64]):
        o[0] = a ** -2

    compile_error(k, 3, np.zeros(1, np.int64), match=r"integer \*\* -2")


def test_vec_elements_are_range_checked_like_scalars(backend):
    @dsl.kernel(threads=1)
    def k(v: dsl.Vec[i8, 2], o: Out[i64]):
        o[0] = v[0] + v[1]

    o = np.zeros(1, np.int64)
    with pytest.raises(ValueError, match=r"'v\[1\]' = 300 does not fit i8"):
        k([1, 300], o, backend=backend)
    k([100, 100], o, backend=backend)
    assert o[0] == -56  # i8 arithmetic wraps; the values themselves were in range


# --------------------------------------------------------------------------- which side is evaluated

@dsl.func
def noisy(v):
    dsl.log.error("side %d", v)
    return v


def test_ternary_evaluates_one_side_and_where_both(backend, capfd):
    @dsl.kernel(threads=1)
    def k(c: bool_, o: Out[i64]):
        o[0] = noisy(1) if c else noisy(2)
        o[1] = dsl.where(c, noisy(3), noisy(4))

    o = np.zeros(2, np.int64)
    k(True, o, backend=backend)
    out = capfd.readouterr().out
    assert o.tolist() == [1, 3]
    sides = sorted(int(line.split("side ")[1]) for line in out.splitlines() if "side " in line)
    assert sides == [1, 3, 4], out


# --------------------------------------------------------------------------- log formats

def test_unsupported_log_conversions_are_compile_errors_at_the_format():
    @dsl.kernel
    def k(o: Out[i64]):
        dsl.log.error("ptr %p", o[0])

    err = compile_error(k, np.zeros(1, np.int64), match=r"unsupported conversion '%p'.*accepted: %d %i %u")
    assert err.loc.source_line()[err.loc.col - 1] == '"'

    @dsl.kernel
    def hexfloat(x: In[f32]):
        dsl.log.error("%x", x[0])

    compile_error(hexfloat, np.zeros(1, np.float32), match="%x needs an integer")

    @dsl.kernel
    def long_mod(o: Out[i64]):
        dsl.log.error("%ld", o[0])

    compile_error(long_mod, np.zeros(1, np.int64), match="unsupported conversion '%l")


def test_log_formats_print_the_same_everywhere(backend, capfd):
    @dsl.kernel(threads=1)
    def k(x: In[f32], n: In[i64]):
        dsl.log.error("100%% [%5d|%-4x|%#o|%+.2f|%c]", n[0], n[0], n[0], x[0], n[1])
        dsl.log.error("no args 50%%")

    k(np.array([1.5], np.float32), np.array([42, 65], np.int64), backend=backend)
    lines = [ln.split("] ", 1)[1] for ln in capfd.readouterr().out.splitlines() if "] " in ln]
    assert lines == ["100% [   42|2a  |0o52|+1.50|A]", "no args 50%"]
