"""Kernels must take exactly the declared tensors and params; params, vectors, str params,
scratch buffers and plain-Python interpreter implementations reach the kernel."""
import numpy as np
import pytest

import dsl
from dsl.package import PackageError, check_package, register_package

HEADER = """
name: params
version: 1
ops:
  - type: Affine
    domain: com.test
    inputs: [{name: x}]
    outputs: [{name: y, like: x}]
    params:
      - {name: coef, dtype: f32, size: 2, default: [2.0, 1.0]}
      - {name: clip, dtype: bool, default: false}
      - {name: label, dtype: str, default: affine}
    scratch:
      - {name: tmp, bytes: 64}
    implementations:
"""

KERNELS = """
import dsl
from dsl import In, Out, f32, u8

@dsl.kernel
def affine(x: In[f32], y: Out[f32], tmp: Out[u8], coef: dsl.Vec[f32, 2], clip: dsl.bool_):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = coef[0] * x.flat[i] + coef[1]
        if clip:
            v = dsl.clamp(v, f32(0.0), f32(1.0))
        y.flat[i] = v
    if lo == 0:
        tmp.flat[0] = u8(tmp.size % 256)

@dsl.kernel
def wrong_names(x: In[f32], y: Out[f32], tmp: Out[u8], coef: dsl.Vec[f32, 2], clipped: dsl.bool_):
    pass

@dsl.kernel
def no_scratch(x: In[f32], y: Out[f32], coef: dsl.Vec[f32, 2], clip: dsl.bool_):
    pass

@dsl.kernel
def scalar_coef(x: In[f32], y: Out[f32], tmp: Out[u8], coef: f32, clip: dsl.bool_):
    pass

@dsl.kernel
def int_clip(x: In[f32], y: Out[f32], tmp: Out[u8], coef: dsl.Vec[f32, 2], clip: dsl.f32):
    pass

calls = []

def python_affine(x, y, tmp, *, coef, clip, label):
    calls.append((label, tmp.nbytes))
    y[...] = coef[0] * x + coef[1]
    if clip:
        np.clip(y, 0, 1, out=y)

import numpy as np
"""


def _package(make_package, impls, folder="pkg"):
    return make_package(HEADER + impls, folder, **{"kernels.py": KERNELS})


@pytest.mark.parametrize("kernel, problem", [
    ("wrong_names", "missing clip; not declared clipped"),
    ("no_scratch", "it has 2 tensor parameter(s), 3 expected first"),
    ("scalar_coef", "param coef is a vector of 2 (size: 2); the kernel's is dsl.f32"),
    ("int_clip", "param clip is declared bool, the kernel's is f32"),
])
def test_kernel_params_must_match_the_declared_params(make_package, kernel, problem):
    root = _package(make_package, f'      - {{backend: numba, kernel: "kernels.py:{kernel}"}}\n')
    with pytest.raises(PackageError) as e:
        check_package(root)
    msg = str(e.value)
    assert (e.value.line, e.value.key) == (15, "ops[0].implementations[0].kernel"), msg
    assert f"kernels.py:{kernel} takes (" in msg, msg
    assert "but the manifest declares (x, y, tmp, coef, clip)" in msg, msg  # str params do not reach DSL kernels
    assert problem in msg, msg


def test_dsl_kernel_gets_vector_bool_and_scratch(make_package, backend):
    pkg = register_package(_package(make_package, '      - {backend: %s, kernel: "kernels.py:affine"}\n' % backend))
    Affine = pkg.ops[0]
    x = np.linspace(-1, 1, 9, dtype=np.float32)
    np.testing.assert_allclose(Affine(x, backend=backend), 2 * x + 1, rtol=1e-6)
    np.testing.assert_allclose(Affine(x, coef=(0.5, 0.5), clip=True, backend=backend),
                               np.clip(0.5 * x + 0.5, 0, 1), rtol=1e-6)
    g = dsl.Graph("affine")
    g.output(Affine(g.input("x", (None,), dsl.f32), coef=(3.0, -1.0)), "y")
    model = g.compile(backend=backend)
    for n in (4, 9):
        xs = np.arange(n, dtype=np.float32)
        np.testing.assert_allclose(model.run({"x": xs})["y"], 3 * xs - 1)
    assert "0 of 1 nodes planned" in str(model)  # scratch is zeroed per launch (docs/packages.md): run() each time
    with pytest.raises(TypeError, match=r"Affine param 'coef' expects 2 values \(size: 2\), got 3"):
        Affine(coef=(1.0, 2.0, 3.0))
    with pytest.raises(TypeError, match=r"Affine param 'clip' expects bool"):
        Affine(clip="yes")


def test_plain_python_callable_for_the_interpreter(make_package):
    root = _package(make_package, '      - {backend: interpreter, kernel: "kernels.py:python_affine"}\n')
    pkg = register_package(root)
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    np.testing.assert_allclose(pkg.ops[0](x, label="mine", backend="interpreter"), 2 * x + 1)
    import sys
    kernels = sys.modules[pkg.ops[0].__module__ + ".kernels"]
    assert kernels.calls == [("mine", 64)]  # str params and scratch reach a Python callable
    with pytest.raises(dsl.VerifyError, match=r"no implementation for backend 'numba'; the package gives: "
                                              r"interpreter"):
        pkg.ops[0](x, backend="numba")


def test_plain_python_callable_is_for_the_interpreter_only(make_package):
    root = _package(make_package, '      - {backend: numba, kernel: "kernels.py:python_affine"}\n')
    with pytest.raises(PackageError, match=r":15: ops\[0\].implementations\[0\].kernel: kernels.py:python_affine is "
                                           r"a plain Python function, accepted for backend interpreter only"):
        check_package(root)


def test_plain_callable_with_wrong_params(make_package):
    kernels = KERNELS + "\ndef bad(x, y, tmp, *, coef, clip):\n    pass\n"
    root = make_package(HEADER + '      - {backend: interpreter, kernel: "kernels.py:bad"}\n',
                        **{"kernels.py": kernels})
    with pytest.raises(PackageError, match=r"kernels.py:bad takes \(x, y, tmp, coef, clip\) but the manifest "
                                           r"declares \(x, y, tmp, coef, clip, label\).*missing label"):
        check_package(root)


def test_required_param_and_onnx_attribute_names(make_package):
    text = HEADER.replace("default: [2.0, 1.0]", "default: [2.0, 1.0]").replace(
        "{name: clip, dtype: bool, default: false}", "{name: clip, dtype: bool}")
    pkg = register_package(make_package(text + '      - {backend: numba, kernel: "kernels.py:affine"}\n',
                                        **{"kernels.py": KERNELS}))
    table = pkg.ops[0].param_table()
    assert list(table) == ["coef", "clip", "label"] and table["clip"].required
    with pytest.raises(TypeError, match=r"Affine param 'clip' is required \(bool\)"):
        pkg.ops[0]()
