"""Params declared ``from: <input>.scale`` / ``<input>.zero_point`` are filled from the input's
quantization (the guide's getInputScale / getInputOffset)."""
import numpy as np
import pytest

import dsl
import ops
from dsl.package import register_package

MANIFEST = """
name: quant
version: 1
ops:
  - type: Dequant
    domain: com.test
    inputs: [{name: x, dtypes: [i8, u8]}]
    outputs: [{name: y}]
    params:
      - {name: x_scale, from: x.scale}
      - {name: x_offset, from: x.zero_point}
      - {name: gain, dtype: f32, default: 1.0}
    functions: functions.py
    implementations:
      - {backend: numba, kernel: "kernels.py:dequant"}
      - {backend: interpreter, kernel: "kernels.py:dequant"}
      - {backend: opencl, kernel: "kernels.py:dequant"}
  - type: Scaled
    domain: com.test
    inputs: [{name: x}]
    outputs: [{name: y, like: x}]
    params:
      - {name: s, from: x.scale, default: 1.0}
      - {name: per_axis, from: x.scale, size: 3, default: [1.0, 1.0, 1.0]}
    implementations:
      - {backend: interpreter, kernel: "kernels.py:scaled"}
"""

KERNELS = """
import dsl
from dsl import In, Out, f32, i64

Q = dsl.TypeVar("Q")

@dsl.kernel
def dequant(x: In[Q], y: Out[f32], x_scale: f32, x_offset: i64, gain: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = gain * (f32(x.flat[i]) - f32(x_offset)) * x_scale

def scaled(x, y, *, s, per_axis):
    y[...] = x * s * per_axis[0]
"""

FUNCTIONS = """
import dsl

def infer(op, x):
    if op.op_type == "Dequant":
        return dsl.TensorSpec(x.shape, dsl.f32)
"""


@pytest.fixture
def pkg(make_package):
    return register_package(make_package(MANIFEST, **{"kernels.py": KERNELS, "functions.py": FUNCTIONS}))


@pytest.mark.parametrize("dtype, scale, zero_point", [(dsl.i8, 0.02, -127), (dsl.u8, 0.04, -127 + 255)])
def test_kernel_reads_the_input_quantization_in_a_graph(pkg, backend, dtype, scale, zero_point):
    Dequant = pkg.ops[0]
    g = dsl.Graph("q")
    x = g.input("x", (None, 5), dsl.f32)
    q = ops.DataConvert(x, dtype=dtype, scale=scale, zero_point=zero_point)
    g.output(Dequant(q, gain=2.0), "y")
    model = g.compile(backend=backend)
    xv = np.linspace(-1, 1, 10, dtype=np.float32).reshape(2, 5)
    lo, hi = (-128, 127) if dtype == dsl.i8 else (0, 255)
    qv = np.clip(np.rint(xv / np.float32(scale)) + zero_point, lo, hi)
    ref = 2 * (qv - zero_point).astype(np.float32) * np.float32(scale)
    np.testing.assert_allclose(model.run({"x": xv})["y"], ref, rtol=1e-6, atol=1e-6)
    assert "2 of 2 nodes planned" in str(model)  # the bound kernel still replays its launches
    assert f"impl=dequant[x_scale={scale}, x_offset={zero_point}]" in str(model)


def test_missing_quantization_is_an_error(pkg):
    with pytest.raises(dsl.VerifyError, match=r"com.test::Dequant.*param 'x_scale' reads x.scale, but input 'x' "
                                              r"\(i8\[4\]\) carries no quantization; quantize it first"):
        pkg.ops[0](np.zeros(4, np.int8), backend="interpreter")
    g = dsl.Graph("q")
    with pytest.raises(dsl.VerifyError, match=r"com.test::Dequant \(node 'Dequant_0'\): param 'x_scale' reads "
                                              r"x.scale, but input 'x' \(u8\[4\]\) carries no quantization.*"
                                              r"opdsl-package.yaml:9\)"):
        pkg.ops[0](g.input("x", (4,), dsl.u8))


def test_defaults_stand_in_for_a_missing_quantization(pkg):
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(pkg.ops[1](x, backend="interpreter"), x)


def test_per_axis_quantization(pkg):
    Dequant, Scaled = pkg.ops
    spec = dsl.TensorSpec((2, 3), dsl.i8, quant=dsl.Quant((0.5, 0.25, 0.125), (1, 2, 3), axis=1))
    with pytest.raises(dsl.VerifyError, match=r"param 'x_scale' reads x.scale, which is per axis \(3 values\); "
                                              r"accepted: declare the param with size: 3"):
        Dequant().verify(spec)
    with pytest.raises(dsl.VerifyError, match=r"param 's' reads x.scale, which is per axis"):
        Scaled().quant_params([spec])
    from dsl.package.op import _quant_value
    with pytest.raises(dsl.VerifyError, match=r"param 'per_axis' \(size 3\) reads x.scale, which has 2 values"):
        _quant_value(Scaled._decl.params[1], ((0.5, 0.25), (1, 2)))
    assert _quant_value(Scaled._decl.params[1], ((0.5, 0.25, 2), (1, 2, 3))) == (0.5, 0.25, 2.0)
    per_tensor = dsl.TensorSpec((2, 3), dsl.i8, quant=(0.5, 1))
    assert Scaled().quant_params([per_tensor]) == {"s": 0.5, "per_axis": (0.5, 0.5, 0.5)}
