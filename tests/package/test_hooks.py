"""The functions module's hooks (PACKAGE_HOOKS) and the manifest's input checks."""
import numpy as np
import pytest

import dsl
from dsl.package import PACKAGE_HOOKS, register_package

MANIFEST = """
name: hooks
version: 1
ops:
  - type: MinMax
    domain: com.test
    inputs: [{name: x, dtypes: [f32]}, {name: bias, constant: true}]
    outputs: [{name: lo}, {name: hi}]
    params:
      - {name: mode, dtype: str, default: both}
    scratch:
      - {name: tmp, bytes: 16}
    functions: functions.py
    implementations:
      - {backend: interpreter, kernel: "kernels.py:min_max"}
      - {backend: interpreter, kernel: "kernels.py:min_max_python"}
      - {backend: numba, kernel: "kernels.py:min_max"}
      - {backend: opencl, kernel: "kernels.py:min_max"}
"""

KERNELS = """
import dsl
from dsl import In, Out, f32, u8

@dsl.kernel
def min_max(x: In[f32], bias: In[f32], lo: Out[f32, 1], hi: Out[f32, 1], tmp: Out[u8]):
    if dsl.thread_id() == 0:
        a = x.flat[0]
        b = x.flat[0]
        for i in range(x.size):
            a = min(a, x.flat[i])
            b = max(b, x.flat[i])
        lo[0] = a + bias.flat[0]
        hi[0] = b + bias.flat[0]

def min_max_python(x, bias, lo, hi, tmp, *, mode):
    lo[0] = x.min() + bias.flat[0] - (100 if mode == "python" else 0)
    hi[0] = x.max() + bias.flat[0]
"""

FUNCTIONS = """
import dsl

calls = []

def verify(op, x, bias):
    if op.mode not in ("both", "python", "bad"):
        raise dsl.VerifyError(f"MinMax mode must be both or python, got {op.mode!r}")

def infer(op, x, bias):
    return dsl.TensorSpec((1,), x.dtype), dsl.TensorSpec((1,), x.dtype)

def select(op, x, bias, backend):
    if op.mode == "bad":
        return "nope"
    return "min_max_python" if op.mode == "python" else "min_max"

def run(op, impl, inputs, outputs, backend):
    calls.append(backend)
    impl(*inputs, *outputs, *op.scratch_buffers(), **op.kernel_kwargs(impl, backend))
"""


@pytest.fixture
def MinMax(make_package):
    pkg = register_package(make_package(MANIFEST, **{"kernels.py": KERNELS, "functions.py": FUNCTIONS}))
    return pkg.ops[0]


def test_hooks_list():
    assert PACKAGE_HOOKS[:3] == ("verify", "infer", "select") and "run" in PACKAGE_HOOKS


def test_infer_select_run_hooks_in_a_graph(MinMax, backend):
    import sys
    functions = sys.modules[MinMax.__module__ + ".functions"]
    g = dsl.Graph("mm")
    x = g.input("x", (None,), dsl.f32)
    lo, hi = MinMax(x, g.constant("bias", np.array([1.0], np.float32)))
    g.output(lo, "lo")
    g.output(hi, "hi")
    model = g.compile(backend=backend)
    xv = np.array([3, -2, 7, 0], np.float32)
    out = model.run({"x": xv})
    assert out["lo"].tolist() == [-1.0] and out["hi"].tolist() == [8.0]
    assert functions.calls and set(functions.calls) == {backend}


def test_select_hook_chooses_by_name(MinMax):
    x, bias = np.array([1, 5], np.float32), np.zeros(1, np.float32)
    lo, hi = MinMax(x, bias, mode="python", backend="interpreter")
    assert (lo.tolist(), hi.tolist()) == ([-99.0], [5.0])
    with pytest.raises(dsl.VerifyError, match=r"com.test::MinMax: the package's select returned 'nope', which is "
                                              r"not one of its implementations for backend 'interpreter'; "
                                              r"accepted: 'min_max', 'min_max_python'"):
        MinMax(x, bias, mode="bad", backend="interpreter")
    with pytest.raises(dsl.VerifyError, match=r"MinMax mode must be both or python, got 'other'"):
        MinMax(x, bias, mode="other")


def test_constant_input_check(MinMax):
    g = dsl.Graph("mm")
    x = g.input("x", (4,), dsl.f32)
    with pytest.raises(dsl.VerifyError, match=r"input 'bias' must be a constant \(an initializer or folded value\), "
                                              r"got a run-time tensor f32\[1\] \(.*opdsl-package.yaml:6\)"):
        MinMax(x, g.input("bias", (1,), dsl.f32))
    with pytest.raises(TypeError, match=r"MinMax \(eager call\) takes 2 inputs \(x, bias\), got 1"):
        MinMax(np.zeros(2, np.float32))
