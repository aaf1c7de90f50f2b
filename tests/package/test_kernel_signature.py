"""A package kernel's signature must match its manifest: tensor names in order, In for inputs,
Out for outputs and scratch, dtypes the manifest accepts, the scratch buffer's type. Typed
scratch, per-implementation defines / options and memory hints reach (or are checked by) the
kernel on every backend."""
import re

import numpy as np
import pytest

import dsl
from dsl.package import PackageError, check_package, register_package

OP = """
name: sig
version: 1
ops:
  - type: Scale
    domain: {domain}
    inputs: [{{name: x, dtypes: [f32]}}]
    outputs: [{{name: y, like: x}}]
    params: [{{name: alpha, dtype: f32, default: 2.0}}]
{extra}    implementations:
{impls}"""

KERNELS = """
import dsl
from dsl import In, InOut, Out, f16, f32, u8

SCALE = 1.0

@dsl.kernel
def swapped(y: Out[f32], x: In[f32], alpha: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        x.flat[i] = alpha

@dsl.kernel
def writes_input(x: InOut[f32], y: Out[f32], alpha: f32):
    pass

@dsl.kernel
def reads_output(x: In[f32], y: In[f32], alpha: f32):
    pass

@dsl.kernel
def half(x: In[f16], y: Out[f16], alpha: f32):
    pass

@dsl.kernel
def good(x: In[f32], y: Out[f32], alpha: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = alpha * SCALE * x.flat[i]

@dsl.kernel
def typed_scratch(x: In[f32], y: Out[f32], acc: Out[f32, 2], alpha: f32):
    # acc is (2, 4) f32, zeroed per launch: y = alpha * x + (number of zero entries of acc)
    lo, hi = dsl.split(x.size)
    if lo == 0:
        n = 0
        for r in range(acc.shape[0]):
            for c in range(acc.shape[1]):
                if acc[r, c] == f32(0.0):
                    n += 1
        acc[0, 0] = f32(n)
    dsl.sync()
    for i in range(lo, hi):
        y.flat[i] = alpha * x.flat[i] + acc[0, 0]

@dsl.kernel
def byte_scratch(x: In[f32], y: Out[f32], acc: Out[u8], alpha: f32):
    pass
"""


def _pkg(make_package, impls, extra="", domain="com.test"):
    return make_package(OP.format(domain=domain, extra=extra, impls=impls), **{"kernels.py": KERNELS})


def _impl(kernel, backend="numba", more=""):
    return f'      - {{backend: {backend}, kernel: "kernels.py:{kernel}"{more}}}\n'


@pytest.mark.parametrize("kernel, message", [
    ("swapped", "its tensor parameters are (y, x); declared: (x, y)"),
    ("writes_input", "input x is InOut[f32]; accepted: In[...] (the kernel must not write the caller's input)"),
    ("reads_output", "output y is In[f32]; accepted: Out[...]"),
    ("half", "input x is In[f16]; the manifest accepts f32"),
])
def test_kernel_tensors_must_match_the_manifest(make_package, kernel, message):
    root = _pkg(make_package, _impl(kernel))
    with pytest.raises(PackageError) as e:
        check_package(root)
    assert e.value.key == "ops[0].implementations[0].kernel"
    assert f"kernels.py:{kernel} takes" in str(e.value) and message in str(e.value), str(e.value)


def test_opdsl_check_rejects_a_swapped_kernel(make_package, capsys):
    from dsl.cli import main
    root = _pkg(make_package, _impl("swapped"))
    code = main.main(["check", str(root)])
    err = capsys.readouterr().err
    assert code == 2 and "its tensor parameters are (y, x); declared: (x, y)" in err and "Traceback" not in err


TYPED = "    scratch: [{name: acc, dtype: f32, shape: [2, 4]}]\n"


def test_typed_scratch_reaches_the_kernel(make_package, backend):
    pkg = register_package(_pkg(make_package, _impl("typed_scratch", backend), extra=TYPED))
    (Scale,) = pkg.ops
    assert [(b.dtype, b.shape) for b in Scale().scratch_buffers()] == [(np.float32, (2, 4))]
    x = np.linspace(-1, 1, 33, dtype=np.float32)
    np.testing.assert_allclose(Scale(x, alpha=3.0, backend=backend), 3 * x + 8, rtol=1e-6)


def test_scratch_type_must_match(make_package):
    with pytest.raises(PackageError, match=r"scratch acc is Out\[u8\]; the manifest accepts f32"):
        check_package(_pkg(make_package, _impl("byte_scratch"), extra=TYPED))
    rank3 = "    scratch: [{name: acc, dtype: f32, shape: [2, 4, 1]}]\n"
    with pytest.raises(PackageError, match=r"scratch acc is Out\[f32, 2\]; accepted: Out\[f32, 3\]"):
        check_package(_pkg(make_package, _impl("typed_scratch"), extra=rank3))
    as_bytes = "    scratch: [{name: acc, bytes: 32}]\n"
    with pytest.raises(PackageError, match=r"scratch acc is Out\[f32, 2\]; the manifest accepts u8"):
        check_package(_pkg(make_package, _impl("typed_scratch"), extra=as_bytes))


@pytest.mark.parametrize("scratch, message", [
    ("{name: acc, bytes: 4, dtype: f32, shape: [1]}", "give either bytes: N"),
    ("{name: acc, dtype: f32}", "missing required key 'shape'"),
    ("{name: acc, dtype: float, shape: [1]}", "unknown dtype str 'float'"),
    ("{name: acc, dtype: f32, shape: [0]}", "expected a dimension, an integer >= 1, got int 0"),
    ("{name: acc, dtype: f64, shape: [65536, 65536]}", "34359738368 bytes per launch; accepted: at most"),
])
def test_typed_scratch_schema_errors(make_package, scratch, message):
    with pytest.raises(PackageError, match=re.escape(message)):
        check_package(_pkg(make_package, _impl("typed_scratch"), extra=f"    scratch: [{scratch}]\n"))


def test_defines_and_options_compile_a_variant(make_package, backend):
    impls = _impl("good", backend, ", defines: {SCALE: 3.0}, options: {fastmath: true, threads: 2}")
    pkg = register_package(_pkg(make_package, impls))
    (Scale,) = pkg.ops
    k = Scale._impls[backend]["good"]
    assert dict(k.defines) == {"SCALE": 3.0} and k.fastmath and k.threads == 2
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_allclose(Scale(x, backend=backend), 6 * x)   # alpha 2 * SCALE 3
    assert k.base.defines == () and not k.base.fastmath  # the decorated kernel keeps its own


@pytest.mark.parametrize("more, key, message", [
    (", defines: {SCALE: [1]}", "defines.SCALE", "accepted: an identifier and an int, float or bool"),
    (", defines: {NOPE: 1}", "defines", "NOPE"),
    (", options: {fast: true}", "options.fast", "unknown key; accepted: fastmath, threads, features"),
    (", options: {threads: 5000}", "options.threads", "accepted: 1 to 1024"),
    (", memory: {acc: vtcm}", "memory.acc", "'acc' is not an input, output or scratch buffer"),
    (", memory: {x: l2}", "memory.x", "unknown place str 'l2'; accepted: ddr, cacheable_ddr, vtcm"),
])
def test_implementation_option_errors(make_package, more, key, message):
    with pytest.raises(PackageError) as e:
        check_package(_pkg(make_package, _impl("good", more=more)))
    assert e.value.key.endswith(key) and message in str(e.value), str(e.value)


def test_memory_hints_are_accepted_and_ignored(make_package, backend):
    impls = _impl("typed_scratch", backend, ", memory: {x: ddr, y: ddr, acc: vtcm}")
    pkg = register_package(_pkg(make_package, impls, extra=TYPED))
    x = np.ones(4, np.float32)
    np.testing.assert_allclose(pkg.ops[0](x, backend=backend), 2 * x + 8)


def test_raw_opencl_defines_become_macros(make_package):
    from tests.conftest import _unavailable
    if _unavailable("opencl"):
        pytest.skip("no OpenCL device")
    cl = """
    __kernel void scale(__global const float* x, __global float* y, float alpha) {
        size_t i = get_global_id(0);
        y[i] = alpha * x[i] * SCALE + OFFSET;
    }
    """
    impl = ('      - {backend: opencl, source: scale.cl, function: scale, build_options: "-DOFFSET=1",'
            ' defines: {SCALE: 4}}\n')
    root = make_package(OP.format(domain="com.test", extra="", impls=impl), **{"scale.cl": cl})
    pkg = register_package(root)
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_allclose(pkg.ops[0](x, backend="opencl"), 8 * x + 1)


def test_empty_domain_is_the_onnx_domain(make_package):
    pkg = check_package(_pkg(make_package, _impl("good"), domain='""'))
    assert pkg.ops[0].domain == ""
