"""Debug mode (@dsl.kernel(debug=True) / OPDSL_DEBUG=1): compiled code is bounds-checked like the interpreter.

Every case runs on every backend: the interpreter reports an IndexError (inside a LaunchError), the
compiled backends a KernelIndexError, which is both; the message names the tensor, the index, the
shape and the Python line.  Out-of-range writes never reach memory.  Cases whose failure without
checks could corrupt memory or crash run in a separate process.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import dsl
from dsl import In, InOut, Out, f32, i32, i64
from tests.adversarial import isolated


def _index_error(exc: BaseException) -> BaseException:
    """The IndexError a launch raised (the interpreter wraps it in a LaunchError)."""
    if isinstance(exc, IndexError):
        return exc
    assert isinstance(exc, dsl.LaunchError) and isinstance(exc.__cause__, IndexError), repr(exc)
    return exc


def _line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn.fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


@dsl.kernel(debug=True)
def shift_right(x: In[f32], y: Out[f32], by: i64):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y[i + by] = x[i]


@dsl.kernel(debug=True)
def read_at(x: In[f32], y: Out[f32], at: i64):
    if dsl.thread_id() == 0:
        y[0] = x[at]


@dsl.kernel(debug=True)
def copy_2d(x: In[f32, 2], y: Out[f32, 2], dj: i64):
    lo, hi = dsl.split(x.shape[0])
    for i in range(lo, hi):
        for j in range(x.shape[1]):
            y[i, j] = x[i, j + dj]


@dsl.kernel(debug=True)
def flat_read(x: In[f32, 2], y: Out[f32], at: i64):
    if dsl.thread_id() == 0:
        y[0] = x.flat[at]


@dsl.kernel(threads=4, debug=True)
def scratch_overrun(x: In[f32], y: Out[f32], at: i64):
    buf = dsl.scratch((4,), f32)
    t = dsl.thread_id()
    buf[t] = x[t]
    dsl.sync()
    if t == 0:
        y[0] = buf[at]


@dsl.kernel(threads=4, debug=True)
def atomic_at(y: InOut[i32], at: i64):
    dsl.atomic_add(y, at, i32(1))


@dsl.kernel(debug=False)
def plain_copy(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y[i] = x[i]


def _raises(kernel, backend, *args):
    with pytest.raises((IndexError, dsl.LaunchError)) as info:
        kernel(*args, backend=backend)
    return _index_error(info.value), str(info.value)


def test_small_overshoot_is_reported_and_never_written(backend):
    x = np.arange(8, dtype=np.float32)
    guard = np.zeros(9, np.float32)
    y = guard[:8]                                # y[8] would be guard[8]: the neighbour
    err, msg = _raises(shift_right, backend, x, y, 1)
    assert "'y'" in msg and "index 8" in msg and "(8,)" in msg
    assert f":{_line_of(shift_right, 'y[i + by]')}" in msg
    assert guard[8] == 0                         # the out-of-range write did not happen
    if backend != "interpreter":
        assert (err.tensor, err.index, err.shape) == ("y", (8,), (8,))
        assert err.loc.line == _line_of(shift_right, "y[i + by]")


def test_large_overshoot_and_negative_index(backend):
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    _, msg = _raises(read_at, backend, x, y, 1 << 40)
    assert f"index {1 << 40}" in msg and "'x'" in msg and "(8,)" in msg
    _, msg = _raises(read_at, backend, x, y, -1)
    assert "index -1" in msg and "'x'" in msg           # negative: an error, not a wrap-around
    read_at(x, y, 7, backend=backend)                   # in range: no error, the right value
    assert y[0] == 7


def test_2d_index_names_the_axis(backend):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    y = np.zeros((4, 3), np.float32)
    _, msg = _raises(copy_2d, backend, x, y, 1)
    assert "'x'" in msg and "(4, 3)" in msg and "axis 1: 3 not in 0..2" in msg
    assert f":{_line_of(copy_2d, 'y[i, j] = x[i, j + dj]')}" in msg
    copy_2d(x, y, 0, backend=backend)
    np.testing.assert_array_equal(y, x)


def test_flat_index_is_checked_against_the_size(backend):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    y = np.zeros(1, np.float32)
    _, msg = _raises(flat_read, backend, x, y, 12)
    assert "x.flat" in msg and "index 12" in msg and "12 elements" in msg
    flat_read(x, y, 11, backend=backend)
    assert y[0] == 11


def test_scratch_index_is_checked(backend):
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(1, np.float32)
    _, msg = _raises(scratch_overrun, backend, x, y, 4)
    assert "'buf'" in msg and "index 4" in msg and "(4,)" in msg
    scratch_overrun(x, y, 3, backend=backend)
    assert y[0] == 3


def test_atomic_add_index_is_checked(backend):
    y = np.zeros(4, np.int32)
    _, msg = _raises(atomic_at, backend, y, 4)
    assert "'y'" in msg and "index 4" in msg
    atomic_at(y, 2, backend=backend)
    assert y.tolist() == [0, 0, 4, 0]


@pytest.mark.parametrize("name", ["numba", "opencl"])
def test_debug_off_generates_no_checks(name):
    off = plain_copy.source(name)
    on = dsl.kernel(debug=True)(plain_copy.fn).source(name)
    for marker in ("_err", "_checked", "opdsl_err", "opdsl_at"):
        assert marker not in off
    assert ("rt.store_checked" if name == "numba" else "opdsl_at_1") in on


KERNEL_MODULE = """
import dsl
from dsl import In, Out, f32

@dsl.kernel
def k(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y[(i + 1) << 20] = x[i]
"""


def test_opdsl_debug_environment_turns_checks_on(tmp_path):
    """OPDSL_DEBUG=1 bounds-checks kernels that did not choose (a child process: unchecked, this write crashes)."""
    (tmp_path / "kmod.py").write_text(KERNEL_MODULE)
    out = isolated.run(f"""
        import sys, numpy as np
        sys.path.insert(0, {str(tmp_path)!r})
        import kmod
        try:
            kmod.k(np.ones(8, np.float32), np.zeros(8, np.float32))
        except IndexError as e:
            print('IndexError', e)
    """, env={"OPDSL_DEBUG": "1"}, timeout=300)
    assert "IndexError" in out.stdout and "'y'" in out.stdout and "kmod.py:9" in out.stdout
