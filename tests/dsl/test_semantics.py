"""One meaning on every backend: the "Semantics" table of docs/language.md, case by case.

Each test runs on the interpreter, numba and OpenCL (the ``backend`` fixture) and compares
with the documented definition, written here in plain Python/numpy.  OpenCL runs on a
simulator on some machines, so sizes stay tiny.
"""
import numpy as np
import pytest

import dsl
from dsl import In, Out, f32, f64, i8, i16, i32, i64, u8, u32, u64

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
