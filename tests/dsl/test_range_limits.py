"""range() near the int64 limits and dsl.split's align: one meaning on every backend.

A loop's iterations are Python's ``len(range(start, stop, step))`` even when ``i += step`` would
overflow (numba used to run 0 iterations of ``range(0, 2**63 - 1, 2**62)`` and OpenCL forever).
An ``align`` below 1 known at compile time is a CompileError (0 gave every thread an empty share,
-3 dropped elements).
"""
import numpy as np
import pytest

import dsl
from dsl import Out, i64

ALL = ("interpreter", "numba", "opencl")
SRC = open(__file__).read().splitlines()
M = 2 ** 63 - 1
NEGATIVE_ALIGN = -3


@dsl.kernel(threads=1)
def walk(out: Out[i64], start: i64, stop: i64, step: i64):
    n = 0
    last = 0
    for i in range(start, stop, step):
        n += 1
        last = i
        if n > 10:
            break
    out[0] = n
    out[1] = last


@dsl.kernel(threads=1)
def walk_constant_step(out: Out[i64]):
    n = 0
    for i in range(0, 9223372036854775807, 4611686018427387904):
        out[1 + n] = i
        n += 1
        if n > 3:
            break
    out[0] = n


CASES = [(0, M, 2 ** 62), (M, -M - 1, -2 ** 62), (-M - 1, M, M), (M - 5, M, 2), (-M - 1, -M + 3, 3),
         (5, 0, -2), (0, 10, 3), (0, 5, 1), (3, 3, 7), (M, M - 1, -M - 1)]


def python_walk(start, stop, step):
    r = range(start, stop, step)[:11]
    return [len(r), r[-1] if len(r) else 0]


@pytest.mark.parametrize("backend", ALL)
def test_run_time_steps_count_like_python_near_the_limits(backend):
    for case in CASES:
        out = np.zeros(2, np.int64)
        walk(out, *case, backend=backend)
        assert out.tolist() == python_walk(*case), case


@pytest.mark.parametrize("backend", ALL)
def test_a_constant_step_near_the_limit_runs_twice(backend):
    out = np.zeros(5, np.int64)
    walk_constant_step(out, backend=backend)
    assert out.tolist() == [2, 0, 2 ** 62, 0, 0]


@dsl.kernel(threads=4)
def split_literal_zero(out: Out[i64, 2], n: i64):
    lo, hi = dsl.split(n, 0)  # E-zero
    out[dsl.thread_id(), 0] = lo


@dsl.kernel(threads=4)
def split_module_constant(out: Out[i64, 2], n: i64):
    lo, hi = dsl.split(n, align=NEGATIVE_ALIGN)  # E-negative
    out[dsl.thread_id(), 0] = lo


@dsl.kernel(threads=4)
def split_const_param(out: Out[i64, 2], n: i64, a: dsl.const[i64]):
    lo, hi = dsl.split(n, a)  # E-const
    out[dsl.thread_id(), 0] = lo
    out[dsl.thread_id(), 1] = hi


@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("kernel,extra,marker,value", [
    (split_literal_zero, (), "E-zero", 0), (split_module_constant, (), "E-negative", -3),
    (split_const_param, (0,), "E-const", 0), (split_const_param, (-3,), "E-const", -3)])
def test_an_align_below_one_known_at_compile_time_is_rejected(backend, kernel, extra, marker, value):
    with pytest.raises(dsl.CompileError) as info:
        kernel(np.zeros((4, 2), np.int64), 32, *extra, backend=backend)
    text = str(info.value)
    line = next(i + 1 for i, s in enumerate(SRC) if s.rstrip().endswith("# " + marker))
    assert f"test_range_limits.py:{line}:" in text, text
    assert f"align is {value}" in text and ">= 1" in text, text


def test_a_run_time_align_below_one_is_a_value_error_in_the_interpreter():
    from tests.dsl.test_team import split_aligned
    with pytest.raises(Exception) as info:
        split_aligned(np.zeros((4, 2), np.int64), 32, 0, backend="interpreter")
    assert "align is 0" in str(info.value)


@pytest.mark.parametrize("backend", ALL)
def test_a_good_const_align_still_splits(backend):
    out = np.zeros((4, 2), np.int64)
    split_const_param(out, 37, 8, backend=backend)
    assert [tuple(r) for r in out] == [(0, 16), (16, 32), (32, 37), (37, 37)]
