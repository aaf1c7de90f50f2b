"""Launch checks (issue 7 §5): bad launches are clear errors before any code runs, never a silent
no-op, a data race or a crash.  Cases where a missing check could crash run in their own process
(tests/adversarial/isolated.py)."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

import dsl
import ops
from dsl import In, InOut, Out, f32
from tests.adversarial import isolated


@dsl.kernel
def scale(x: In[f32], y: Out[f32], a: f32 = 2.0):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * a


@dsl.kernel
def blend(x: In[f32], acc: InOut[f32], other: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        acc.flat[i] = acc.flat[i] + x.flat[i]
        other.flat[i] = x.flat[i]


def _ramp(n=16):
    return np.arange(n, dtype=np.float32)


# --------------------------------------------------------------------------- grid x threads overflow

@pytest.mark.parametrize("how", ["launch", "subscript", "decorator"])
def test_grid_times_threads_overflow_is_a_value_error(backend, how):
    """grid=2**62 with 4 threads is 2**64 logical threads: it used to wrap to 0 (a silent no-op on numba)."""
    launch = {"launch": "scale(x, y, grid=2**62, backend=B)",
              "subscript": "scale[2**62](x, y, backend=B)",
              "decorator": "scale_g(x, y, backend=B)"}[how]
    code = f"""
import numpy as np, dsl
from dsl import In, Out, f32
from tests.adversarial.test_launch_hostile import scale
B = {backend!r}
scale_g = dsl.kernel(scale.fn, grid=2**62)
x = np.ones(8, np.float32); y = np.full(8, -1, np.float32)
try:
    {launch}
except ValueError as e:
    msg = str(e)
    assert "grid=4611686018427387904" in msg and "threads=4" in msg and "limit of 9223372036854775807" in msg, msg
    assert (y == -1).all()
    print("refused")
"""
    out = isolated.run(code, timeout=300)
    assert "refused" in out.stdout


def test_largest_grid_that_fits_is_accepted_and_one_more_is_not():
    limit = 2 ** 63 - 1
    x, y = _ramp(), np.empty(16, np.float32)
    with pytest.raises(ValueError, match="exceeds the numba backend's limit"):
        scale.prepare((x, y), {}, backend="numba", grid=limit // 4 + 1)
    _, _, g = scale.prepare((x, y), {}, backend="numba", grid=limit // 4)
    assert g == limit // 4  # checked, not run


# --------------------------------------------------------------------------- overlapping In / Out

def test_in_and_out_on_the_same_array_is_refused(backend):
    x = _ramp()
    with pytest.raises(ValueError, match=r"'x' \(In\[dsl.f32\]\) and 'y' \(Out\[dsl.f32\]\) overlap in memory.*InOut"):
        scale(x, x, backend=backend)
    np.testing.assert_array_equal(x, _ramp())  # nothing ran


def test_partial_overlap_is_refused_and_adjacent_slices_are_not(backend):
    buf = _ramp(32)
    with pytest.raises(ValueError, match="overlap in memory"):
        scale(buf[:16], buf[8:24], backend=backend)
    scale(buf[:16], buf[16:], backend=backend)  # touching, not overlapping
    np.testing.assert_array_equal(buf[16:], 2 * _ramp(16))


def test_overlap_is_checked_on_the_fast_path_too():
    """The fast path caches argument *types*; aliasing arrays of the same types must still be caught."""
    x, y = _ramp(), np.empty(16, np.float32)
    for _ in range(3):
        scale(x, y)  # warm: these types now launch through the fast path
    assert scale._fast(x, y) is not None
    with pytest.raises(ValueError, match="overlap in memory"):
        scale(x, x)
    v = x.view()  # another array object, same memory
    with pytest.raises(ValueError, match="overlap in memory"):
        scale(v, x)
    np.testing.assert_array_equal(x, _ramp())



@dsl.kernel(threads=2)
def shift_rows(x: In[f32, 2], y: Out[f32, 2], offs: dsl.Vec[dsl.i64, 2]):
    """Row t of y = row t of x + offs[t % 2]; one team per row (an explicit grid)."""
    t = dsl.tile_id()
    lo, hi = dsl.split(x.shape[1])
    for j in range(lo, hi):
        y[t, j] = x[t, j] + offs[t % 2]


def test_fast_path_takes_vec_arguments_and_explicit_grids_and_keeps_every_check(backend, monkeypatch):
    """A launch with a Vec argument and grid= goes through the fast path once its types were seen
    (ops.MatMul's packed GEMM spent ~100 us per eager call binding its 29 arguments), and every
    check of the full binder still applies: Vec length and type, grid sign, overlap."""
    from dsl.runtime.kernel import Kernel
    x, y = np.arange(12, dtype=np.float32).reshape(3, 4), np.zeros((3, 4), np.float32)
    offs = np.array([10, 20], np.int64)
    shift_rows(x, y, offs, grid=3, backend=backend)
    binds, real_bind = [], Kernel.bind
    monkeypatch.setattr(Kernel, "bind", lambda self, *a: binds.append(1) or real_bind(self, *a))
    y[:] = 0
    shift_rows(x, y, offs, grid=3, backend=backend)
    assert not binds  # no full bind: the fast path ran it
    np.testing.assert_array_equal(y, x + np.array([[10], [20], [10]], np.float32))
    shift_rows(x, y, [1, 2], grid=2, backend=backend)  # a list: the full binder converts it
    np.testing.assert_array_equal(y[:2], x[:2] + np.array([[1], [2]], np.float32))
    assert binds
    with pytest.raises(ValueError, match=r"'offs' must be a sequence of 2 numbers"):
        shift_rows(x, y, np.array([1, 2, 3], np.int64), grid=3, backend=backend)
    with pytest.raises(ValueError, match=r"grid=-1 is negative"):
        shift_rows(x, y, offs, grid=-1, backend=backend)
    with pytest.raises(ValueError, match="overlap in memory"):
        shift_rows(x, x, offs, grid=3, backend=backend)
    ro = offs.copy()
    ro.flags.writeable = False  # read-only: the binder's copy, not a second numba specialization
    shift_rows(x, y, ro, grid=3, backend=backend)
    np.testing.assert_array_equal(y, x + np.array([[10], [20], [10]], np.float32))


def test_inout_and_out_overlaps_name_both(backend):
    x, acc, other = _ramp(), np.zeros(16, np.float32), np.zeros(16, np.float32)
    with pytest.raises(ValueError, match=r"'x' \(In\[dsl.f32\]\) and 'acc' \(InOut\[dsl.f32\]\)"):
        blend(x, x, other, backend=backend)
    with pytest.raises(ValueError, match=r"'acc' \(InOut\[dsl.f32\]\) and 'other' \(Out\[dsl.f32\]\)"):
        blend(x, acc, acc, backend=backend)
    blend(x, acc, other, backend=backend)
    np.testing.assert_array_equal(acc, x)


def test_two_ins_may_share_memory(backend):
    @dsl.kernel
    def add(a: In[f32], b: In[f32], out: Out[f32]):
        lo, hi = dsl.split(out.size)
        for i in range(lo, hi):
            out.flat[i] = a.flat[i] + b.flat[i]

    x, out = _ramp(), np.empty(16, np.float32)
    add(x, x, out, backend=backend)
    np.testing.assert_array_equal(out, 2 * x)


def test_models_still_run_elementwise_ops_in_place(backend, monkeypatch):
    """The memory plan reuses an input's buffer for an elementwise output (op.inplace): allowed."""
    monkeypatch.setenv("OPDSL_INPLACE_ALL", "1")  # by default only no-op in-place runs (memory.py)
    g = dsl.Graph("inplace")
    x = g.input("x", (8,), dsl.f32)
    g.output(ops.Relu(ops.Sigmoid(ops.Add(x, x))), "y")
    model = g.compile(backend=backend, fuse=False)  # fused, the chain is one kernel with a buffer of its own
    assert model.memory_plan().inplace, "the plan should run a node in place"
    xv = _ramp(8) - 4
    np.testing.assert_allclose(model.run({"x": xv})["y"], 1 / (1 + np.exp(-2 * xv)), rtol=1e-6)


# --------------------------------------------------------------------------- masked arrays

def test_masked_arrays_are_refused(backend):
    x = np.ma.masked_array(_ramp(), mask=_ramp() > 10)
    with pytest.raises(TypeError, match=r"argument 'x' is a masked array.*x\.filled\(value\).*x\.data"):
        scale(x, np.empty(16, np.float32), backend=backend)
    y = np.ma.masked_array(np.zeros(16, np.float32))
    with pytest.raises(TypeError, match="argument 'y' is a masked array"):
        scale(_ramp(), y, backend=backend)


def test_masked_arrays_are_refused_after_warm_up():
    x, y = _ramp(), np.empty(16, np.float32)
    scale(x, y)
    with pytest.raises(TypeError, match="masked array"):
        scale(np.ma.masked_array(x), y)


# --------------------------------------------------------------------------- decorating the wrong thing

@pytest.mark.parametrize("decorator", [dsl.kernel, dsl.func], ids=["kernel", "func"])
@pytest.mark.parametrize("target, says", [
    (len, "builtin function"),
    (lambda x: x, "cannot compile a lambda"),
    (int, "got a class"),
    (np.add, "object of type ufunc"),
    ("def f(): pass", "object of type str"),
])
def test_decorating_a_non_function_is_a_type_error(decorator, target, says):
    with pytest.raises(TypeError, match=says):
        decorator(target)


def test_decorator_misuse_says_how():
    with pytest.raises(TypeError, match=r"dsl.kernel\(threads=...\) with keywords"):
        dsl.kernel(4)
    with pytest.raises(TypeError, match="already a @dsl.kernel"):
        dsl.kernel(scale)

    def gen(x: In[f32]):
        yield x
    with pytest.raises(TypeError, match="generator or async"):
        dsl.kernel(gen)


# --------------------------------------------------------------------------- op arity

def test_eager_op_with_wrong_number_of_inputs():
    x = np.ones(3, np.float32)
    with pytest.raises(TypeError, match=r"Relu \(eager call\) takes 1 input \(x\), got 2"):
        ops.Relu(x, x)
    with pytest.raises(TypeError, match=r"Add \(eager call\) takes 2 inputs \(a, b\), got 1"):
        ops.Add(x)
    with pytest.raises(TypeError, match=r"Gemm \(eager call\) takes 2 to 3 inputs \(a, b, c=None\), got 4"):
        ops.Gemm(x, x, x, x)


def test_graph_op_with_wrong_number_of_inputs_adds_nothing():
    g = dsl.Graph("arity")
    x = g.input("x", (3,), dsl.f32)
    with pytest.raises(TypeError, match=r"Relu \(graph call\) takes 1 input \(x\), got 2"):
        ops.Relu(x, np.ones(3, np.float32))
    assert g.nodes == [] and g.constants == {}


def test_onnx_node_with_wrong_number_of_inputs():
    from onnx import TensorProto, helper
    node = helper.make_node("Relu", ["x", "x"], ["y"], name="two_in")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(dsl.OnnxImportError, match=r"'two_in'.*Relu.*takes 1 input \(x\), got 2"):
        dsl.load_onnx(model.SerializeToString())


def test_verify_signature_narrower_than_the_call_is_not_a_raw_type_error():
    class Pair(dsl.Op):
        def verify(self, a, b):
            pass

        def infer(self, a, b):
            return a.spec

    with pytest.raises(TypeError, match=r"Pair \(eager call\) takes 2 inputs \(a, b\), got 3"):
        Pair()(np.ones(2, np.float32), np.ones(2, np.float32), np.ones(2, np.float32))


# --------------------------------------------------------------------------- deeply nested expressions

DEEP = """
import importlib.util, sys
import numpy as np
import dsl
src = '''
import dsl
from dsl import In, Out, f32

@dsl.kernel(threads=1)
def deep(x: In[f32], y: Out[f32]):
    y.flat[0] = {expr}
'''
path = {path!r}
open(path, "w").write(src)
spec = importlib.util.spec_from_file_location("deep_kernel", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
x = np.ones(1, np.float32); y = np.zeros(1, np.float32)
try:
    module.deep(x, y, backend={backend!r})
    print("ran", float(y[0]))
except dsl.CompileError as e:
    print("CompileError", e)
"""


def _deep(tmp_path, expr, backend="numba"):
    code = textwrap.dedent(DEEP).format(expr=expr, path=str(tmp_path / "deep_kernel.py"), backend=backend)
    return isolated.run(code, timeout=300).stdout


@pytest.mark.parametrize("expr", ["x.flat[0]" + " + 1" * 800, "(" * 150 + "x.flat[0]" + " + 1)" * 150],
                         ids=["800-term-sum", "150-parentheses"])
def test_deep_expression_is_a_compile_error_at_its_line(tmp_path, expr):
    out = _deep(tmp_path, expr)
    assert "CompileError" in out and "nested too deeply (limit 100" in out, out
    assert "deep_kernel.py:7:" in out, out  # file:line:col of the statement's line
    assert "RecursionError" not in out


def test_nesting_just_under_the_limit_compiles_everywhere(tmp_path, backend):
    out = _deep(tmp_path, "x.flat[0]" + " + 1" * 90, backend)
    assert "ran 91.0" in out, out
