"""range() near the int64 limits and dsl.split's align: one meaning on every backend.

A loop's iterations are Python's ``len(range(start, stop, step))`` even when ``i += step`` would
overflow (numba used to run 0 iterations of ``range(0, 2**63 - 1, 2**62)`` and OpenCL forever).
An ``align`` below 1 known at compile time is a CompileError (0 gave every thread an empty share,
-3 dropped elements).  A step of 0 or an align below 1 known at run time only is the same
``KernelValueError`` (a ValueError and a LaunchError) on every backend, naming the kernel and the
loop or call (OpenCL used to run 0 iterations, numba said only "range() arg 3 must not be zero").
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
    for i in range(start, stop, step):  # E-loop
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


def where(marker: str, word: str) -> str:
    """file:line:col of ``word`` on the line ending in ``# marker``."""
    line = next(i for i, s in enumerate(SRC) if s.rstrip().endswith("# " + marker))
    return f"test_range_limits.py:{line + 1}:{SRC[line].index(word) + 1}"


def assert_refused(info, kernel: str, marker: str, word: str, what: str, value: int, func: str = ""):
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, dsl.LaunchError), type(err)
    text = str(err)
    assert where(marker, word) in text, text
    assert f"kernel {kernel!r}" in text and f"is {value} (accepted: " in text, text
    assert (f"@dsl.func {func!r}" in text) == bool(func), text
    assert err.what == what and err.value == value and err.thread_id >= 0, (err.what, err.value)


@pytest.mark.parametrize("backend", ALL)
def test_a_run_time_step_of_zero_is_a_located_value_error(backend):
    with pytest.raises(dsl.KernelValueError) as info:
        walk(np.zeros(2, np.int64), 0, 10, 0, backend=backend)
    assert_refused(info, "walk", "E-loop", "for", "range_step", 0)


@dsl.func
def count_steps(n: i64, step: i64) -> i64:
    c = 0
    for i in range(0, n, step):  # E-func-loop
        c += 1
    return c


@dsl.kernel(threads=2)
def steps_in_func(out: Out[i64], step: i64):
    out[dsl.thread_id()] = count_steps(8, step)


@pytest.mark.parametrize("backend", ALL)
def test_a_run_time_step_of_zero_in_a_func_names_the_func(backend):
    with pytest.raises(dsl.KernelValueError) as info:
        steps_in_func(np.zeros(2, np.int64), 0, backend=backend)
    assert_refused(info, "steps_in_func", "E-func-loop", "for", "range_step", 0, func="count_steps")
    out = np.zeros(2, np.int64)
    steps_in_func(out, -3, backend=backend)  # a negative step counts like Python: range(0, 8, -3) is empty
    steps_in_func(out, 3, backend=backend)
    assert out.tolist() == [3, 3]


@dsl.kernel(threads=4)
def split_run_time(out: Out[i64, 2], n: i64, align: i64):
    lo, hi = dsl.split(n, align=align)  # E-run-time
    out[dsl.thread_id(), 0] = lo
    out[dsl.thread_id(), 1] = hi


@dsl.kernel(threads=2)
def split_synced(out: Out[i64], align: i64):
    buf = dsl.scratch((2,), i64)
    lo, hi = dsl.split(out.size, align=align + 0, grid=True)  # E-synced
    buf[dsl.thread_id()] = hi - lo
    dsl.sync()
    for i in range(lo, hi):
        out[i] = buf[0] + buf[1]


@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("align", [0, -3])
def test_a_run_time_align_below_one_is_a_located_value_error(backend, align):
    with pytest.raises(dsl.KernelValueError) as info:
        split_run_time(np.zeros((4, 2), np.int64), 32, align, backend=backend)
    assert_refused(info, "split_run_time", "E-run-time", "dsl.split", "split_align", align)
    with pytest.raises(dsl.KernelValueError) as info:  # an expression, a team with sync(), 3 tiles
        split_synced(np.zeros(24, np.int64), align, grid=3, backend=backend)
    assert_refused(info, "split_synced", "E-synced", "dsl.split", "split_align", align)
    out = np.zeros(24, np.int64)
    split_synced(out, 4, grid=3, backend=backend)
    assert out.tolist() == [8] * 24


ZERO = 0


@dsl.kernel(threads=1)
def const_step(out: Out[i64], s: dsl.const[i64]):
    for i in range(0, 4, s):  # E-const-step
        out[0] += 1


@dsl.kernel(threads=1)
def module_zero_step(out: Out[i64]):
    for i in range(0, 4, ZERO):  # E-module-step
        out[0] += 1


@pytest.mark.parametrize("backend", ALL)
def test_a_step_of_zero_known_at_compile_time_is_a_compile_error(backend):
    for kernel, extra, marker, word in ((const_step, (0,), "E-const-step", "s)"),
                                        (module_zero_step, (), "E-module-step", "range")):
        with pytest.raises(dsl.CompileError) as info:
            kernel(np.zeros(1, np.int64), *extra, backend=backend)
        assert where(marker, word) in str(info.value) and "step must not be zero" in str(info.value), str(info.value)
    out = np.zeros(1, np.int64)
    const_step(out, 2, backend=backend)
    assert out[0] == 2


@pytest.mark.parametrize("backend", ("numba", "opencl"))
def test_only_run_time_steps_and_aligns_get_the_error_record(backend):
    """A kernel whose steps and aligns are all known at compile time is generated as before:
    no hidden record argument, no check."""
    record = {"numba": "_err", "opencl": "opdsl_err"}[backend]
    assert record not in walk_constant_step.source(backend)
    assert record not in split_const_param.source(backend, np.zeros((4, 2), np.int64), 37, 8)
    assert record in walk.source(backend) and record in split_run_time.source(backend)


@pytest.mark.parametrize("backend", ALL)
def test_a_good_const_align_still_splits(backend):
    out = np.zeros((4, 2), np.int64)
    split_const_param(out, 37, 8, backend=backend)
    assert [tuple(r) for r in out] == [(0, 16), (16, 32), (32, 37), (37, 37)]
