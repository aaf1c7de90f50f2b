"""Interpreter-only behaviour: the real barrier and its deadlock reports, errors
raised in a thread, checked tensor views, and that the user's own code object runs
(so print, breakpoint() and pdb work on the user's lines)."""
import os
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

import dsl
from backends import interpreter
from backends.base import CompileRequest
from dsl import In, InOut, Out, bf16, f16, f32, f64, i8, i32
from dsl.lang import ir

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def run(kernel, *args, **kwargs):
    kernel(*args, backend="interpreter", **kwargs)


# ---------------------------------------------------------------- kernels (compiled once per run)

@dsl.kernel(threads=4)
def neighbours(x: In[f32, 1], y: Out[f32, 1]):
    """Thread t reads what thread t+1 wrote before the barrier; per tile."""
    buf = dsl.scratch((4,), f32)
    t = dsl.thread_id()
    buf[t] = x[dsl.tile_id() * 4 + t]
    dsl.sync()
    y[dsl.tile_id() * 4 + t] = buf[(t + 1) % dsl.num_threads()] + f32(dsl.num_tiles() * 100)


@dsl.kernel(threads=4)
def scratch_peek(y: Out[f32, 1]):
    """Reads a scratch element nobody wrote: the interpreter poisons fresh scratch with NaN."""
    buf = dsl.scratch((8,), f32)
    y[dsl.thread_id()] = buf[dsl.thread_id()]
    buf[dsl.thread_id()] = 1.0


@dsl.kernel(threads=3)
def bounds(x: In[f32, 2], y: Out[f32, 2], di: i32, dj: i32, flat_at: i32):
    if dsl.thread_id() == 2:
        if flat_at >= 0:
            y.flat[flat_at] = 1.0
        else:
            y[0, 0] = x[di, dj]


@dsl.kernel(threads=2)
def talk(x: In[f32], y: Out[f32]):
    for i in range(x.size):
        if dsl.thread_id() == 1:
            print("item", i, x[i])
            dsl.log.warn("warned %d", i)
            dsl.log.debug("hidden %d", i)
            y[i] = x[i] * 2.0


@dsl.kernel(threads=1)
def stop_here(x: In[f32], y: Out[f32]):
    for i in range(x.size):
        v = x[i] * 2.0
        breakpoint()
        y[i] = v


@dsl.kernel(threads=4)
def adds(x: In[i32], total: InOut[i32], fl: InOut[f32, 2]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        dsl.atomic_add(total, 0, x[i])
        dsl.atomic_add(fl.flat, 1, f32(1.0))


@dsl.kernel(threads=2)
def narrow(a: In[f16], b: In[bf16], c: In[i8], lo16: Out[f16], lob: Out[bf16], wrap: Out[i8], m: Out[f64]):
    lo, hi = dsl.split(a.size)
    for i in range(lo, hi):
        lo16[i] = a[i] * 3.0 + b[i]
        lob[i] = b[i] * 3.0 + a[i]
        wrap[i] = c[i] * 3
        m[i] = min(f32(a[i]), 0.1) + abs(c[i])


@dsl.kernel(threads=2)
def vec_param(y: Out[i32], v: dsl.Vec[i32, 3]):
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        y[i] = v[i % 3] * 10 + i


# ---------------------------------------------------------------- the team

def test_barrier_orders_writes_before_reads_in_every_tile():
    x = np.arange(12, dtype=np.float32)
    y = np.zeros(12, np.float32)
    run(neighbours, x, y, grid=3)
    ref = x.reshape(3, 4)[:, [1, 2, 3, 0]].reshape(-1) + 300
    np.testing.assert_array_equal(y, ref)


def test_scratch_is_fresh_and_poisoned_each_launch():
    for _ in range(2):  # the 1.0 written by the first launch must not survive
        y = np.zeros(4, np.float32)
        run(scratch_peek, y)
        assert np.isnan(y).all()


def test_atomic_add_is_atomic_across_threads():
    x = np.arange(1, 401, dtype=np.int32)
    total = np.zeros(1, np.int32)
    fl = np.zeros((2, 2), np.float32)
    run(adds, x, total, fl, grid=2)
    assert total[0] == 2 * x.sum()
    assert fl[0, 1] == 2 * 400


# ---------------------------------------------------------------- deadlocks (checker bypassed on purpose)

def _launch_raw(pyfunc, threads=4, grid=1, n=8):
    """Run ``pyfunc`` through the interpreter without the checker, which would reject it."""
    k = ir.Kernel(pyfunc.__name__, (ir.TensorParam("x", f32, 1, "in"),), (), (), (), threads=threads)
    launcher = interpreter.BACKEND.compile(CompileRequest(k, pyfunc, "raw"))
    launcher([np.zeros(n, np.float32)], grid)


def leaves_early(x):
    if dsl.thread_id() == 2:
        return
    dsl.sync()  # LINE_WAIT


def different_syncs(x):
    if dsl.thread_id() == 0:
        dsl.sync()  # LINE_A
    else:
        dsl.sync()  # LINE_B


def raises_while_others_wait(x):
    if dsl.thread_id() == 1:
        y = x[dsl.thread_id() * 100]  # LINE_RAISE
    dsl.sync()


def _line(marker: str) -> int:
    with open(HERE) as f:
        return next(n for n, text in enumerate(f, 1) if text.rstrip().endswith(marker))


@pytest.mark.timeout(60)
def test_thread_leaving_while_others_wait_is_a_deadlock_report():
    with pytest.raises(dsl.LaunchError) as e:
        _launch_raw(leaves_early)
    msg = str(e.value)
    assert "deadlock in kernel 'leaves_early'" in msg
    assert "thread 2 returned from the kernel" in msg
    assert f"threads 0, 1, 3 wait at dsl.sync() at {HERE}:{_line('# LINE_WAIT')}" in msg


@pytest.mark.timeout(60)
def test_threads_at_different_syncs_are_a_deadlock_report():
    with pytest.raises(dsl.LaunchError) as e:
        _launch_raw(different_syncs, grid=2)
    msg = str(e.value)
    assert "different dsl.sync() calls" in msg and "tile 0" in msg
    assert f"thread 0 waits at dsl.sync() at {HERE}:{_line('# LINE_A')}" in msg
    assert f"threads 1, 2, 3 wait at dsl.sync() at {HERE}:{_line('# LINE_B')}" in msg


@pytest.mark.timeout(60)
def test_exception_in_one_thread_is_reraised_with_thread_and_line():
    with pytest.raises(dsl.LaunchError) as e:
        _launch_raw(raises_while_others_wait)
    msg = str(e.value)
    line = _line("# LINE_RAISE")
    assert f"failed in thread 1 at {HERE}:{line}" in msg
    assert "y = x[dsl.thread_id() * 100]" in msg
    assert "IndexError: index 100 out of bounds for tensor 'x' of shape (8,)" in msg
    assert e.value.thread_id == 1
    cause = e.value.__cause__
    assert isinstance(cause, IndexError)
    tb, frames = cause.__traceback__, []
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    assert frames[-1] == (HERE, line)  # the user's line is last: our frames are trimmed
    assert not any(f == interpreter.__file__ for f, _ in frames)


# ---------------------------------------------------------------- checked tensor views

def test_out_of_bounds_and_negative_indexes_name_tensor_index_and_shape():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.zeros((3, 4), np.float32)
    run(bounds, x, y, 2, 3, -1)  # in bounds
    assert y[0, 0] == 11
    with pytest.raises(dsl.LaunchError, match=r"thread 2.*\n.*\nIndexError: index \(3, 0\) out of bounds for "
                                              r"tensor 'x' of shape \(3, 4\) \(axis 0: 3 not in 0..2\)"):
        run(bounds, x, y, 3, 0, -1)
    with pytest.raises(dsl.LaunchError, match=r"index \(0, -1\) out of bounds for tensor 'x' .*axis 1"):
        run(bounds, x, y, 0, -1, -1)  # numpy would silently read x[0, 3]
    with pytest.raises(dsl.LaunchError, match=r"index 12 out of bounds for y\.flat: tensor 'y' has shape \(3, 4\)"):
        run(bounds, x, y, 0, 0, 12)


def test_in_tensors_are_read_only_views():
    a = np.arange(3, dtype=np.float32)
    t = interpreter.Tensor(a, "x", "in", f32)
    with pytest.raises(ValueError, match=r"tensor 'x' is In\[f32\]: read-only"):
        t[0] = 5.0
    with pytest.raises(ValueError, match="read-only"):
        t.flat[0] = 5.0
    with pytest.raises(ValueError):
        np.asarray(t)[0] = 5.0
    assert a.flags.writeable and a[0] == 0  # the caller's array is untouched


def test_stores_and_loads_follow_the_ir_casts():
    a = np.linspace(-2, 2, 7).astype(np.float16)
    b = np.linspace(-1, 3, 7).astype(ml_dtypes.bfloat16)
    c = np.array([-100, -50, -1, 0, 1, 50, 100], np.int8)
    lo16, lob, wrap, m = np.zeros(7, np.float16), np.zeros(7, ml_dtypes.bfloat16), np.zeros(7, np.int8), np.zeros(7)
    run(narrow, a, b, c, lo16, lob, wrap, m)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    np.testing.assert_array_equal(lo16, (a32 * np.float32(3) + b32).astype(np.float16))
    np.testing.assert_array_equal(lob, (b32 * np.float32(3) + a32).astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(wrap, (c.astype(np.int32) * 3).astype(np.int8))  # wraps like astype
    # min(f32, 0.1) is an f32 (promoted like the compiled builtins), not Python's 0.1
    np.testing.assert_array_equal(m, (np.minimum(a32, np.float32(0.1)) + np.abs(c)).astype(np.float64))


def test_vec_params_are_read_only_vectors():
    y = np.zeros(7, np.int32)
    run(vec_param, y, v=[1, 2, 3])
    np.testing.assert_array_equal(y, np.array([1, 2, 3, 1, 2, 3, 1]) * 10 + np.arange(7))


# ---------------------------------------------------------------- the user's own code runs

def test_print_and_log_reach_stdout(capsys):
    x = np.array([1.5, 2.5], np.float32)
    y = np.zeros(2, np.float32)
    run(talk, x, y)
    out = capsys.readouterr().out
    assert "item 0 1.5" in out and "item 1 2.5" in out
    assert "[talk t=1 tile=0] warned 1" in out
    assert "hidden" not in out  # debug is below the default level
    np.testing.assert_array_equal(y, x * 2)


def test_the_kernels_own_code_object_runs(monkeypatch):
    seen = []

    def hook(*args, **kwargs):  # what pdb.set_trace() would see
        frame = sys._getframe(1)
        seen.append((frame.f_code, dict(frame.f_locals), frame.f_globals))

    monkeypatch.setattr(sys, "breakpointhook", hook)
    x = np.array([1.0, 4.0], np.float32)
    y = np.zeros(2, np.float32)
    run(stop_here, x, y)
    np.testing.assert_array_equal(y, x * 2)
    assert [code for code, _, _ in seen] == [stop_here.fn.__code__] * 2
    assert [loc["v"] for _, loc, _ in seen] == [2.0, 8.0]
    glob = seen[0][2]
    assert glob["np"] is np and glob["__builtins__"]["min"] is dsl.lang.builtins.min_  # user globals, kernel builtins


@pytest.mark.timeout(120)
def test_pdb_steps_through_the_users_lines(tmp_path):
    script = tmp_path / "kern.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import dsl
        from dsl import In, Out, f32

        @dsl.kernel(threads=1)
        def k(x: In[f32], y: Out[f32]):
            for i in range(x.size):
                v = x[i] * 2.0
                breakpoint()
                y[i] = v

        x = np.array([3.0, 5.0], np.float32)
        y = np.zeros(2, np.float32)
        k(x, y, backend="interpreter")
        print("done", y.tolist())
    """))
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONBREAKPOINT="pdb.set_trace")
    r = subprocess.run([sys.executable, str(script)], input="p v\nnext\np y[i]\nc\np i\nc\n", text=True,
                       capture_output=True, env=env, timeout=100)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"{script}(11)k()" in out and "-> y[i] = v" in out  # pdb shows the user's file and line
    assert "6.0" in out and "1" in out and "done [6.0, 10.0]" in out


def test_source_is_the_python_function():
    src = stop_here.source("interpreter")
    assert "breakpoint()" in src and "def stop_here" in src


# ---------------------------------------------------------------- @dsl.func helpers follow the checker's types

@dsl.func
def third(v: f32):
    return v / 3.0  # v is converted to the annotated f32 even when called with an f64


@dsl.func
def positive(v):
    if v > 0:
        return v
    return 0  # joined with v's type: an f32 zero, not a Python int


@dsl.kernel(threads=2)
def helpers(x: In[f64], y: Out[f64], z: Out[f64]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y[i] = third(x[i])
        z[i] = positive(f32(x[i])) + 0.1


def test_func_helpers_get_annotated_argument_and_joined_return_types():
    x = np.array([1.0, -2.0, 5.0, 7.1])
    y, z = np.zeros(4), np.zeros(4)
    run(helpers, x, y, z)
    x32 = x.astype(np.float32)
    np.testing.assert_array_equal(y, (x32 / np.float32(3)).astype(np.float64))
    np.testing.assert_array_equal(z, (np.maximum(x32, 0) + np.float32(0.1)).astype(np.float64))
