"""dsl.static_range: loops unrolled at compile time, on every backend, against numpy."""
import numpy as np
import pytest

import dsl
from dsl import In, InOut, Out, f32, i32
from dsl.lang import check, ir

SRC = open(__file__).read().splitlines()
TILE = 4  # a module-level constant bound


def line_of(marker: str) -> int:
    hits = [k + 1 for k, line in enumerate(SRC) if line.rstrip().endswith("# " + marker)]
    assert len(hits) == 1, marker
    return hits[0]


def assert_error_at(kernel, args, marker: str, col_text: str, *words):
    """The CompileError points at ``col_text`` on the marked line, on every backend (each one
    goes through the checker first), and says ``words``."""
    for backend in ("interpreter", "numba"):
        with pytest.raises(dsl.CompileError) as info:
            kernel(*args, backend=backend)
        text = str(info.value)
        line = line_of(marker)
        col = SRC[line - 1].index(col_text) + 1
        assert f"test_static_range.py:{line}:{col}: error:" in text, text
        for w in words:
            assert w in text, (w, text)


def _ir(kernel, *args) -> ir.Kernel:
    values, _ = kernel.bind(args, {})
    return kernel.specialize(values)


# --------------------------------------------------------------------------- semantics

@dsl.kernel(threads=1)
def dot4(x: In[f32, 2], y: In[f32], out: Out[f32]):
    for r in range(x.shape[0]):          # runtime loop around an unrolled one
        acc = f32(0)
        for j in dsl.static_range(4):
            acc += x[r, j] * y[j]
        out[r] = acc


def test_unrolled_dot_product(backend):
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    y = np.arange(1, 5, dtype=np.float32)
    out = np.zeros(5, np.float32)
    dot4(x, y, out, backend=backend)
    np.testing.assert_allclose(out, x @ y, rtol=1e-5)


def test_the_backends_see_straight_line_code():
    k = _ir(dot4, np.zeros((2, 4), np.float32), np.zeros(4, np.float32), np.zeros(2, np.float32))
    nodes = list(ir.walk(list(k.body)))
    assert not any(isinstance(n, ir.StaticFor) for n in nodes)
    assert sum(isinstance(n, ir.For) for n in nodes) == 1  # only the runtime loop is left
    loads = [n for n in nodes if isinstance(n, ir.Load) and n.tensor == "y"]
    assert [n.index[0].value for n in loads] == [0, 1, 2, 3]  # indices are literals
    assert "j" not in dict(k.locals)
    assert "py:" in dot4.source("numba", np.zeros((2, 4), np.float32), np.zeros(4, np.float32),
                                np.zeros(2, np.float32))


@dsl.kernel(threads=1)
def upper_triangle(out: Out[i32, 2]):
    for i in dsl.static_range(TILE):
        for j in dsl.static_range(i, TILE):  # inner bound from the outer variable
            out[i, j] = i * 10 + j
            if j == i:
                out[i, j] = -1


def test_nested_with_inner_bound_from_outer_variable(backend):
    out = np.zeros((TILE, TILE), np.int32)
    upper_triangle(out, backend=backend)
    want = np.zeros((TILE, TILE), np.int32)
    for i in range(TILE):
        for j in range(i, TILE):
            want[i, j] = -1 if i == j else i * 10 + j
    np.testing.assert_array_equal(out, want)


@dsl.kernel(threads=1)
def const_bounds(x: In[f32], out: Out[f32], n: dsl.const[i32], step: dsl.const[i32]):
    s = f32(0)
    for j in dsl.static_range(TILE // 2, n * 2 + TILE, step):  # const params and module constants
        s += x[j] * j
    for k in dsl.static_range(n, -1, -1):  # a negative step
        s += f32(k)
    out[0] = s


@pytest.mark.parametrize("n,step", [(3, 1), (5, 3), (0, 2)])
def test_bounds_from_const_params_and_module_constants(backend, n, step):
    x = np.arange(1, 2 * n + TILE + 1, dtype=np.float32)
    out = np.zeros(1, np.float32)
    const_bounds(x, out, n, step, backend=backend)
    js = np.arange(TILE // 2, n * 2 + TILE, step)
    want = np.float32((x[js] * js).sum() + sum(range(n, -1, -1)))
    np.testing.assert_allclose(out[0], want, rtol=1e-6)


@dsl.kernel(threads=1)
def tile_rows(x: In[f32, 2], out: Out[f32, 2]):
    # a runtime loop inside an unrolled one: row sums of a 3-row tile, any width
    for r in dsl.static_range(3):
        s = f32(0)
        for c in range(x.shape[1]):
            s += x[r, c]
            for k in dsl.static_range(2):  # and an unrolled loop inside that
                out[r, k] += x[r, c] * (k + 1)
        out[r, 2] = s


def test_runtime_loop_inside_static_and_vice_versa(backend):
    x = np.random.default_rng(1).standard_normal((3, 7)).astype(np.float32)
    out = np.zeros((3, 3), np.float32)
    tile_rows(x, out, backend=backend)
    want = np.stack([x.sum(1), 2 * x.sum(1), x.sum(1)], axis=1)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@dsl.kernel(threads=4)
def staged_shift(x: In[f32], y: Out[f32]):
    buf = dsl.scratch(4, f32)
    t = dsl.thread_id()
    buf[t] = x[t]
    for stage in dsl.static_range(1, 3):  # each copy has its own barriers
        dsl.sync()
        v = buf[(t + stage) % 4]
        dsl.sync()
        buf[t] = v
    dsl.sync()
    y[t] = buf[t]


def test_sync_inside_a_static_range_team_kernel(backend):
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(4, np.float32)
    staged_shift(x, y, backend=backend)
    np.testing.assert_array_equal(y, np.roll(x, -3))


@dsl.kernel(threads=1)
def reuse_name(out: InOut[f32]):
    for j in dsl.static_range(2):
        out[j] += 1
    for j in dsl.static_range(2, 4):  # two unrolled loops may share a variable name
        out[j] += j


def test_two_static_loops_share_a_variable_name(backend):
    out = np.zeros(4, np.float32)
    reuse_name(out, backend=backend)
    np.testing.assert_array_equal(out, [1, 1, 2, 3])


# --------------------------------------------------------------------------- errors

@dsl.kernel(threads=1)
def runtime_bound(x: In[f32], out: Out[f32]):
    for j in dsl.static_range(1, x.size):  # E-runtime
        out[0] += x[j]


def test_runtime_bound_is_a_compile_error_naming_the_bound():
    assert_error_at(runtime_bound, (np.ones(3, np.float32), np.zeros(1, np.float32)), "E-runtime", "x.size",
                    "dsl.static_range stop is not known at compile time", "dsl.const", "range(...)")


@dsl.kernel(threads=1)
def local_bound(out: Out[f32]):
    n = 3
    for j in dsl.static_range(n):  # E-local
        out[0] += 1


def test_local_bound_is_a_compile_error():
    assert_error_at(local_bound, (np.zeros(1, np.float32),), "E-local", "n)", "stop is not known at compile time")


@dsl.kernel(threads=1)
def zero_step(out: Out[f32], s: dsl.const[i32]):
    for j in dsl.static_range(0, 4, s):  # E-step
        out[0] += 1


def test_step_zero():
    assert_error_at(zero_step, (np.zeros(1, np.float32), 0), "E-step", "s)", "step must not be zero")


@dsl.kernel(threads=1)
def too_long(out: Out[f32]):
    for j in dsl.static_range(100000):  # E-long
        out[0] += 1


@dsl.kernel(threads=1)
def too_many_copies(out: Out[f32]):
    for i in dsl.static_range(100):
        for j in dsl.static_range(100):  # E-total
            out[0] += 1


def test_too_many_iterations_names_the_limit():
    assert_error_at(too_long, (np.zeros(1, np.float32),), "E-long", "for", "100000 iterations",
                    f"limit is {check.MAX_UNROLL}")
    assert_error_at(too_many_copies, (np.zeros(1, np.float32),), "E-total", "for",
                    f"more than {check.MAX_UNROLL_TOTAL} body copies")


@dsl.kernel(threads=1)
def breaks(out: Out[f32]):
    for j in dsl.static_range(4):
        if j == 2:
            break  # E-break
        out[0] += 1


@dsl.kernel(threads=1)
def breaks_inner_runtime_loop(out: Out[f32]):
    for j in dsl.static_range(2):
        for k in range(10):
            if k == j:
                break  # belongs to the runtime loop: fine
            out[0] += 1


def test_break_is_rejected_but_not_in_a_nested_runtime_loop(backend):
    assert_error_at(breaks, (np.zeros(1, np.float32),), "E-break", "break", "'break' inside a dsl.static_range")
    out = np.zeros(1, np.float32)
    breaks_inner_runtime_loop(out, backend=backend)
    assert out[0] == 1


@dsl.kernel(threads=1)
def read_after(out: Out[f32]):
    for j in dsl.static_range(4):
        out[0] += 1
    out[0] += j  # E-after


@dsl.kernel(threads=1)
def assigns_var(out: Out[f32]):
    j = 1
    for j in dsl.static_range(4):  # E-assigned
        out[0] += 1


def test_the_variable_is_only_visible_inside_the_loop():
    assert_error_at(read_after, (np.zeros(1, np.float32),), "E-after", "j  #",
                    "variable of the dsl.static_range loop", "only inside the loop body")
    assert_error_at(assigns_var, (np.zeros(1, np.float32),), "E-assigned", "j in",
                    "also assigned at line")


@dsl.kernel(threads=1)
def as_value(out: Out[f32]):
    out[0] = dsl.static_range(4)  # E-value


def test_static_range_outside_a_for_loop():
    assert_error_at(as_value, (np.zeros(1, np.float32),), "E-value", "dsl.static_range",
                    "only a for loop's iterable")


@dsl.func
def horner3(x):
    s = 0.0
    for k in dsl.static_range(3):  # unrolled in a @dsl.func too
        s = s * x + (k + 1)
    return s


@dsl.kernel(threads=1)
def uses_horner(x: In[f32], y: Out[f32]):
    for i in range(x.size):
        y[i] = horner3(x[i])


def test_static_range_in_a_device_function(backend):
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(4, np.float32)
    uses_horner(x, y, backend=backend)
    np.testing.assert_allclose(y, x * x + 2 * x + 3)


def _at_the_limits_source() -> str:
    """A kernel with one loop of MAX_UNROLL copies, then loops up to MAX_UNROLL_TOTAL copies in all."""
    lines = ["import dsl", "from dsl import In, Out, f32", "", "@dsl.kernel(threads=1)",
             "def at_limits(x: In[f32], out: Out[f32]):"]
    loops = check.MAX_UNROLL_TOTAL // check.MAX_UNROLL
    for r in range(loops):
        lines += ["    acc = 0.0", f"    for j in dsl.static_range({check.MAX_UNROLL}):",
                  f"        acc += x[{r * check.MAX_UNROLL} + j] * 0.5", f"    out[{r}] = acc"]
    return "\n".join(lines) + "\n", loops


@pytest.mark.slow
@pytest.mark.parametrize("backend", ("numba", "opencl"))
def test_a_kernel_at_both_limits_compiles_and_runs(backend, tmp_path):
    """A real compile at MAX_UNROLL per loop and MAX_UNROLL_TOTAL in all (its time is reported in
    docs/language.md, Unrolled loops; here only that it compiles and computes the right sums)."""
    import importlib.util
    src, loops = _at_the_limits_source()
    path = tmp_path / "at_limits_mod.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("at_limits_mod", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = np.random.default_rng(0).standard_normal(check.MAX_UNROLL_TOTAL).astype(np.float32)
    out = np.zeros(loops, np.float32)
    mod.at_limits(x, out, backend=backend)
    want = 0.5 * x.reshape(loops, check.MAX_UNROLL).astype(np.float64).sum(axis=1)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
