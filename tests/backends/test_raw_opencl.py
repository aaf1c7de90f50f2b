"""Raw OpenCL operators (TIM-VX custom OpenCL op): the shipped hswish and GEMM vs numpy,
variant selection by dtype with build options, params in declared order, hooks, errors."""
import numpy as np
import pytest

import dsl
from dsl.runtime.raw_opencl import Param, RawOpenCL


@pytest.fixture(scope="module", autouse=True)
def opencl():
    from backends import base
    reason = base.get("opencl").available()
    if reason:
        pytest.skip(f"opencl: {reason}")


def _hswish_ref(x):
    x = x.astype(np.float32)
    return x * np.clip(x + np.float32(3), 0, 6) / np.float32(6)


# ---------------------------------------------------------------- shipped kernels

def test_hswish_f32_matches_numpy():
    from ops.opencl import hswish
    x = np.linspace(-6, 6, 1001).astype(np.float32)
    np.testing.assert_allclose(hswish(x), _hswish_ref(x), rtol=1e-6, atol=1e-7)
    y = np.empty((7, 11), np.float32)
    x2 = np.random.default_rng(0).standard_normal((7, 11)).astype(np.float32) * 4
    assert hswish(x2, y) is None  # the op-layer signature: inputs, outputs, params
    np.testing.assert_allclose(y, _hswish_ref(x2), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype, zp_in, zp_out", [(np.uint8, 128, 10), (np.int8, -3, 5)])
def test_hswish_quantized_dequant_hswish_quant(dtype, zp_in, zp_out):
    from ops.opencl import hswish
    info = np.iinfo(dtype)
    q = np.arange(info.min, info.max + 1).astype(dtype)
    s_in, s_out = np.float32(0.05), np.float32(0.03)
    y = hswish(q, in_scale=s_in, in_zero_point=zp_in, out_scale=s_out, out_zero_point=zp_out)
    assert y.dtype == dtype and y.shape == q.shape
    f = (q.astype(np.float32) - np.float32(zp_in)) * s_in
    ref = np.clip(np.round(_hswish_ref(f) / s_out) + zp_out, info.min, info.max).astype(dtype)
    np.testing.assert_array_equal(y, ref)


def test_hswish_variant_and_build_options_follow_input_dtype():
    from ops.opencl import hswish
    assert hswish.select((dsl.f32,), {}) == ("hswish_F32toF32", "")
    name, options = hswish.select((dsl.u8,), {})
    assert name == "hswish_U8toU8" and "-DQ_T=uchar" in options
    with pytest.raises(TypeError, match="accepted: f32, u8, i8"):
        hswish(np.zeros(3, np.float64))


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (16, 16, 16), (37, 50, 21), (64, 3, 70)])
def test_gemm_f32_matches_numpy(m, k, n):
    from ops.opencl import gemm
    rng = np.random.default_rng(m * 100 + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = gemm(a, b, alpha=0.5)
    np.testing.assert_allclose(c, np.float32(0.5) * (a @ b), rtol=1e-4, atol=1e-4)


def test_gemm_f16_storage_accumulates_in_f32():
    from ops.opencl import gemm
    rng = np.random.default_rng(5)
    a = rng.standard_normal((20, 33)).astype(np.float16)
    b = rng.standard_normal((33, 9)).astype(np.float16)
    c = np.empty((20, 9), np.float16)
    gemm(a, b, c)
    ref = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(c.astype(np.float32), ref.astype(np.float32), rtol=2e-3, atol=2e-3)


def test_gemm_shape_and_output_checks():
    from ops.opencl import gemm
    with pytest.raises(ValueError, match=r"need 2-D a\[M, K\] and b\[K, N\]"):
        gemm(np.zeros((2, 3), np.float32), np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match="output 'c' is float32\\[2, 3\\], expected float32\\[2, 2\\]"):
        gemm(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match="unexpected param\\(s\\) 'beta'; declared: alpha"):
        gemm(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), beta=1.0)


# ---------------------------------------------------------------- a user's raw op

SOURCE = """
// two variants; the scale arrives as a build option, params in declared order
__kernel void axpb_f32(__global const float* x, __global float* y, float a, int b, long n) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = SCALE * (a * x[i] + (float)b);
}
__kernel void axpb_i32(__global const int* x, __global int* y, float a, int b, long n) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = SCALE * ((int)(a * (float)x[i]) + b);
}
"""

axpb = RawOpenCL(
    "axpb", SOURCE, inputs=("x",), outputs=("y",),
    params=[Param("a", dsl.f32), ("b", dsl.i32, 0)],
    select=lambda dts, p: (f"axpb_{dts[0].name}", "-DSCALE=2"),
    enqueue=lambda ins, outs, p: (((ins[0].size + 3) // 4 * 4,), (4,)),
    shape=lambda ins, p: [(ins[0].shape, ins[0].dtype)],
    args=lambda ins, outs, p: [np.int64(ins[0].size)],
)


def test_user_raw_op_select_params_and_extra_args():
    x = np.arange(10, dtype=np.float32)
    np.testing.assert_allclose(axpb(x, a=1.5, b=3), 2 * (1.5 * x + 3))
    xi = np.arange(-5, 5, dtype=np.int32)
    np.testing.assert_array_equal(axpb(xi, a=0.5), 2 * ((0.5 * xi).astype(np.int32) + 0))
    with pytest.raises(TypeError, match="missing param 'a'"):
        axpb(x)
    with pytest.raises(TypeError, match=r"takes 1 input\(s\) \(x\) optionally followed by 1 output\(s\) \(y\)"):
        axpb(x, x, x, a=1.0)
    assert list(__import__("inspect").signature(axpb).parameters) == ["arrays", "a", "b", "backend"]


def test_raw_op_build_error_points_into_the_cl_source():
    bad = RawOpenCL("bad", "__kernel void k(__global float* y) {\n  y[0] = undefined_thing;\n}\n",
                    inputs=(), outputs=("y",), select=lambda d, p: ("k", ""),
                    enqueue=lambda i, o, p: ((1,), None))
    with pytest.raises(dsl.CompileError) as e:
        bad(np.zeros(1, np.float32))
    assert e.value.loc.line == 2 and "undefined_thing" in str(e.value)


def test_raw_op_select_naming_a_missing_function():
    wrong = RawOpenCL("wrong", SOURCE, inputs=("x",), outputs=("y",), params=[("a", dsl.f32), ("b", dsl.i32)],
                      select=lambda d, p: ("nope", "-DSCALE=1"), enqueue=lambda i, o, p: ((1,), None))
    with pytest.raises(ValueError, match="chose 'nope', which the source does not define"):
        wrong(np.zeros(1, np.float32), np.zeros(1, np.float32), a=1.0, b=0)


def test_raw_op_as_an_operator_implementation():
    from ops.opencl import hswish

    @dsl.op("HSwishCL", domain="com.opdsl.test")
    class HSwishCL(dsl.Op):
        in_scale: float = 1.0
        in_zero_point: int = 0
        out_scale: float = 1.0
        out_zero_point: int = 0

        def infer(self, x):
            return x.spec if hasattr(x, "spec") else x

        kernels = {"default": hswish}

    from dsl.opgraph import registry
    try:
        _check_hswish_op(HSwishCL)
    finally:
        registry.unregister(HSwishCL)  # other tests list the registered ops


def _check_hswish_op(HSwishCL):
    x = np.linspace(-4, 4, 33).astype(np.float32)
    np.testing.assert_allclose(HSwishCL(x), _hswish_ref(x), rtol=1e-6, atol=1e-7)
    q = np.arange(0, 256, dtype=np.uint8)
    y = HSwishCL(q, in_scale=0.05, in_zero_point=128, out_scale=0.03, out_zero_point=10)
    f = (q.astype(np.float32) - 128) * np.float32(0.05)
    ref = np.clip(np.round(_hswish_ref(f) / np.float32(0.03)) + 10, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(y, ref)


def test_the_old_import_place_names_the_new_one():
    """RawOpenCL and Param moved from the backend to the kernel runtime (issue 26); the backend
    keeps RawProgram, and an import of the old place says where they went."""
    import backends.opencl.raw as device
    for name in ("RawOpenCL", "Param"):
        with pytest.raises(ImportError, match=rf"from dsl\.runtime\.raw_opencl import {name}"):
            getattr(device, name)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        device.nothing
    assert dsl.RawOpenCL is RawOpenCL and isinstance(axpb._device(), device.RawProgram)


def test_a_raw_op_made_in_a_fresh_process_loads_no_opencl_until_it_runs():
    """Defining a raw op (as `import ops` does) imports neither pyopencl nor the backend's runner."""
    import subprocess
    import sys
    code = ("import sys; from dsl.runtime.raw_opencl import RawOpenCL\n"
            "op = RawOpenCL('k', '__kernel void k(__global float* y) {}', inputs=(), outputs=('y',),\n"
            "               select=lambda d, p: ('k', ''), enqueue=lambda i, o, p: ((1,), None))\n"
            "print(sorted(m for m in ('pyopencl', 'backends.opencl.raw') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
