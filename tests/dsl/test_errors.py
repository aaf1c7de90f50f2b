"""Every compile error points at the user's line and column; every launch error names the parameter."""
import traceback

import numpy as np
import pytest

import dsl
from dsl import In, InOut, Out, f32, i32, i64

SRC = open(__file__).read().splitlines()


def line_of(marker: str) -> int:
    hits = [k + 1 for k, line in enumerate(SRC) if line.rstrip().endswith("# " + marker)]
    assert len(hits) == 1, marker
    return hits[0]


def compile_error(kernel, *args) -> dsl.CompileError:
    with pytest.raises(dsl.CompileError) as info:
        if args:
            kernel(*args, backend="interpreter")
        else:
            kernel.source("ir")
    return info.value


def assert_points_at(err: dsl.CompileError, marker: str, col_text: str, *words):
    line = line_of(marker)
    text = str(err)
    col = SRC[line - 1].index(col_text) + 1
    assert f"test_errors.py:{line}:{col}: error:" in text, text
    src_line, caret = text.splitlines()[1:3]
    assert src_line.strip() == SRC[line - 1].strip()
    assert caret.index("^") - 4 == col - 1 - (len(SRC[line - 1]) - len(SRC[line - 1].lstrip()))
    for w in words:
        assert w in text, (w, text)
    assert "frontend.py" not in text and "check.py" not in text


# --------------------------------------------------------------------------- frontend errors

@dsl.kernel
def writes_input(x: In[f32]):
    x[0] = 1.0  # E-write-in


@dsl.kernel
def uses_with(x: Out[f32]):
    with open("f"):  # E-with
        pass


@dsl.kernel
def uses_list(x: Out[f32]):
    v = [1, 2]  # E-list
    x[0] = 1.0


@dsl.kernel
def calls_numpy(x: Out[f32]):
    x[0] = np.exp(1.0)  # E-numpy


@dsl.kernel
def unknown_name(x: Out[f32]):
    x[0] = nowhere  # noqa: F821 # E-undefined


@dsl.kernel
def tensor_as_value(x: In[f32], y: Out[f32]):
    y[0] = x + 1.0  # E-tensor-value


@dsl.kernel
def iterates_tensor(x: In[f32], y: Out[f32]):
    for v in x:  # E-for-iter
        y[0] = v


@dsl.kernel
def slices(x: In[f32], y: Out[f32]):
    y[0] = x[1:3]  # E-slice


@dsl.kernel
def returns_value(x: Out[f32]):
    return 1.0  # E-return-value


@dsl.kernel
def bad_log(x: Out[f32]):
    dsl.log.info("%d and %d", 1)  # E-log-format


@dsl.kernel
def annotated_local(x: Out[f32]):
    v: f32 = 1.0  # E-annassign
    x[0] = v


@pytest.mark.parametrize("kernel,marker,col_text,words", [
    (writes_input, "E-write-in", "x[0]", ("'x'", "In[dsl.f32]", "Out and InOut")),
    (uses_with, "E-with", "with", ("'with' is not supported",)),
    (uses_list, "E-list", "[1, 2]", ("'list' is not supported",)),
    (calls_numpy, "E-numpy", "np.exp", ("dsl.exp",)),
    (unknown_name, "E-undefined", "nowhere", ("'nowhere' is not defined",)),
    (tensor_as_value, "E-tensor-value", "x +", ("tensor 'x' used as a value",)),
    (iterates_tensor, "E-for-iter", "x:", ("range(",)),
    (slices, "E-slice", "1:3", ("slices are not supported",)),
    (returns_value, "E-return-value", "return", ("returns nothing",)),
    (bad_log, "E-log-format", '"%d and %d"', ("2 conversion(s) but 1 argument",)),  # at the format string
    (annotated_local, "E-annassign", "v: f32", ("annotated assignment",)),
])
def test_frontend_errors_point_at_the_construct(kernel, marker, col_text, words):
    assert_points_at(compile_error(kernel), marker, col_text, *words)


# --------------------------------------------------------------------------- type errors

@dsl.kernel
def float_index(x: In[f32], y: Out[f32]):
    y[0] = x[0.5]  # E-float-index


@dsl.kernel
def wrong_rank(x: In[f32, 2], y: Out[f32]):
    y[0] = x[1]  # E-rank


@dsl.kernel
def float_range(y: Out[f32]):
    for i in range(2.5):  # E-float-range
        y[0] = 1.0


@dsl.kernel
def bitwise_float(x: In[f32], y: Out[f32]):
    y[0] = x[0] & 1  # E-bitwise


@dsl.kernel
def before_assignment(y: Out[f32]):
    y[0] = later  # E-before-assign
    later = 1.0


@dsl.func
def recursive(n):
    return recursive(n - 1) if n > 0 else 0  # E-recursion


@dsl.kernel
def calls_recursive(y: Out[i64]):
    y[0] = recursive(3)


@pytest.mark.parametrize("kernel,marker,col_text,words", [
    (float_index, "E-float-index", "0.5", ("index of 'x' must be an integer", "got float")),
    (wrong_rank, "E-rank", "x[1]", ("2 dimension(s)", "indexed with 1")),
    (float_range, "E-float-range", "2.5", ("range() takes integers",)),
    (bitwise_float, "E-bitwise", "x[0] & 1", ("'&' needs integers or bools",)),
    (before_assignment, "E-before-assign", "later", ("used before it is assigned",)),
    (calls_recursive, "E-recursion", "recursive(n - 1)", ("recursion",)),
])
def test_type_errors_point_at_the_expression(kernel, marker, col_text, words):
    assert_points_at(compile_error(kernel), marker, col_text, *words)


# --------------------------------------------------------------------------- uniformity errors

@dsl.kernel
def sync_in_thread_branch(y: Out[f32]):
    if dsl.thread_id() < 2:  # E-cause-if
        dsl.sync()  # E-sync-if


@dsl.kernel
def sync_in_thread_loop(y: Out[f32]):
    lo, hi = dsl.split(10)
    for i in range(lo, hi):  # E-cause-loop
        dsl.sync()  # E-sync-loop


@dsl.kernel
def sync_after_early_return(y: Out[f32]):
    if dsl.thread_id() == 3:
        return  # E-cause-return
    dsl.sync()  # E-sync-return


@dsl.kernel
def sync_after_divergent_break(y: Out[f32]):
    t = dsl.thread_id()
    for i in range(4):
        if i == t:  # E-cause-break
            break
        dsl.sync()  # E-sync-break


@dsl.kernel
def sync_in_value_from_scratch(y: Out[f32]):
    buf = dsl.scratch((4,), f32)
    v = buf[0]
    while v > 0:  # E-cause-scratch
        dsl.sync()  # E-sync-scratch
        v -= 1.0


@pytest.mark.parametrize("kernel,which", [
    (sync_in_thread_branch, "if"), (sync_in_thread_loop, "loop"), (sync_after_early_return, "return"),
    (sync_after_divergent_break, "break"), (sync_in_value_from_scratch, "scratch"),
])
def test_sync_under_divergent_control_names_both_lines(kernel, which):
    err = compile_error(kernel)
    assert_points_at(err, f"E-sync-{which}", "dsl.sync", "thread-dependent control flow")
    assert f"line {line_of('E-cause-' + which)} " in str(err)


@dsl.kernel
def uniform_syncs(y: Out[i64]):
    buf = dsl.scratch((4,), i64)
    n = y.shape[0]
    for k in range(n):            # uniform trip count: sync allowed inside
        if k % 2 == 0:            # uniform condition
            buf[dsl.thread_id()] = k
            dsl.sync()
    if dsl.thread_id() == 0:
        y[0] = buf[3]


def test_sync_in_uniform_control_flow_is_accepted(backend):
    y = np.zeros(5, np.int64)
    uniform_syncs(y, backend=backend)
    assert y[0] == 4


def test_no_compiler_frames_in_traceback():
    with pytest.raises(dsl.CompileError) as info:
        writes_input(np.zeros(1, np.float32), backend="interpreter")
    frames = [f.filename for f in traceback.extract_tb(info.value.__traceback__)]
    assert not any(f.endswith(("frontend.py", "check.py")) for f in frames), frames


def test_jupyter_shows_the_message_not_a_traceback():
    """IPython prints ``_render_traceback_()`` instead of frames: the first line names the error
    class and the kernel's file:line:col, then the source line and its caret, nothing of ours."""
    with pytest.raises(dsl.CompileError) as info:
        writes_input(np.zeros(1, np.float32), backend="interpreter")
    lines = info.value._render_traceback_()
    assert lines[0].startswith("CompileError: ") and "test_errors.py:" in lines[0], lines
    assert lines[1:] == str(info.value).splitlines()[1:]
    assert "^" in lines[2] and not any("kernel.py" in line for line in lines), lines


def test_jupyter_cells_are_named_as_ipython_names_them(monkeypatch):
    """A kernel defined in a notebook cell is compiled from IPython's temporary file for that
    cell; errors name the cell (``In[7]:4:5``) as IPython's own tracebacks do."""
    import sys
    import types
    from dsl.lang.errors import SourceLoc
    cell_file = "/tmp/ipykernel_1/123.py"
    shell = types.SimpleNamespace(compile=types.SimpleNamespace(_filename_map={cell_file: 7}))
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    assert str(SourceLoc(cell_file, 4, 5)) == "In[7]:4:5"
    assert str(SourceLoc("/src/k.py", 4, 5)) == "/src/k.py:4:5"  # not a cell: the file stays


def test_sync_in_func_is_rejected():
    @dsl.func
    def helper(v):
        dsl.sync()
        return v

    @dsl.kernel
    def k(y: Out[f32]):
        y[0] = helper(1.0)

    assert "only allowed in a kernel body" in str(compile_error(k))


def test_missing_annotation_is_reported_at_decoration():
    with pytest.raises(dsl.CompileError, match="parameter 'n' needs an annotation"):
        @dsl.kernel
        def k(y: Out[f32], n):
            pass


# --------------------------------------------------------------------------- launch errors

@dsl.kernel
def axpy(x: In[f32, 1], y: InOut[f32, 1], a: f32 = 1.0, n: i32 = 0):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y[i] += a * x[i]


@pytest.mark.parametrize("call,exc,words", [
    (lambda x, y: axpy(x.astype(np.float64), y), TypeError, ("'x'", "f64", "expected f32")),
    (lambda x, y: axpy(x.reshape(2, 4), y), ValueError, ("'x'", "2 dimension(s)", "expected 1")),
    (lambda x, y: axpy(x[::2], y[::2]), ValueError, ("'x'", "not C-contiguous")),
    (lambda x, y: axpy(x), TypeError, ("missing argument 'y'",)),
    (lambda x, y: axpy(x, y, 1.0, 2, 3), TypeError, ("takes 4 argument(s)",)),
    (lambda x, y: axpy(x, y, b=2.0), TypeError, ("unexpected argument 'b'", "x, y, a, n")),
    (lambda x, y: axpy(x, y, 1.0, a=2.0), TypeError, ("multiple values for argument 'a'",)),
    (lambda x, y: axpy(x, y, n=1.5), TypeError, ("'n' is i32", "1.5")),
    (lambda x, y: axpy(x, y, n=2**40), ValueError, ("'n'", "does not fit i32")),
    (lambda x, y: axpy(x, y, a="2"), TypeError, ("'a' is f32", "str")),
    (lambda x, y: axpy([1.0], y), TypeError, ("'x' must be a numpy array",)),
    (lambda x, y: axpy(x, y, backend="cuda"), ValueError, ("unknown backend 'cuda'", "numba")),
    (lambda x, y: axpy(x, y, grid=-1), ValueError, ("grid must be a non-negative int",)),
])
def test_launch_errors_name_the_parameter_before_running(call, exc, words):
    x = np.ones(8, np.float32)
    y = np.zeros(8, np.float32)
    with pytest.raises(exc) as info:
        call(x, y)
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    assert (y == 0).all()  # nothing ran


def test_read_only_output_is_rejected():
    y = np.zeros(8, np.float32)
    y.flags.writeable = False
    with pytest.raises(ValueError, match="'y' is InOut"):
        axpy(np.ones(8, np.float32), y)


T = dsl.TypeVar("T")


@dsl.kernel
def same_type(a: In[T], b: Out[T]):
    b[0] = a[0]


def test_typevar_mismatch_names_both():
    with pytest.raises(TypeError, match="'b' has dtype f64 but T is f32"):
        same_type(np.zeros(1, np.float32), np.zeros(1, np.float64))


@pytest.mark.parametrize("call,exc,words", [
    (lambda x, y: axpy(x.astype(np.float64), y), TypeError, ("'x'", "expected f32")),
    (lambda x, y: axpy(x[::2], y[::2]), ValueError, ("not C-contiguous",)),
    (lambda x, y: axpy(x, y, n=2**40), ValueError, ("does not fit i32",)),
    (lambda x, y: axpy(x, y, n=np.int64(2**40)), ValueError, ("does not fit i32",)),
    (lambda x, y: axpy(x, y, a="2"), TypeError, ("'a' is f32",)),
    (lambda x, y: axpy(x, y, n=True), TypeError, ("'n' is i32",)),
    (lambda x, y: axpy(x, y, 1.0, 2, 3), TypeError, ("takes 4 argument(s)",)),
])
def test_checks_still_apply_after_a_successful_launch(call, exc, words, monkeypatch):
    """The launch fast path must never skip a check the full binder makes."""
    from dsl import config
    monkeypatch.setattr(config, "_default_backend", "interpreter")
    x = np.ones(8, np.float32)
    y = np.zeros(8, np.float32)
    axpy(x, y, 2.0, n=1)
    axpy(x, y, 2.0, n=1)
    assert axpy._fast_variants  # the second launch went through the fast path
    np.testing.assert_array_equal(y, 4.0)
    with pytest.raises(exc) as info:
        call(x, y)
    for w in words:
        assert w in str(info.value)
    y2 = np.zeros(8, np.float32)
    y2.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        axpy(x, y2)
