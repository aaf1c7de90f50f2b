"""Raw OpenCL ops (TIM-VX workflow): image2d_t / image2d_array_t inputs and outputs vs numpy on
PoCL and Oclgrind, arguments checked against the __kernel's parameter list, work-size rules,
-cl-std=CL2.0 where the device has it, and no compiler tallies on stderr."""
import numpy as np
import pytest

import dsl
from backends.opencl import raw_checks
from backends.opencl.images import Image
from dsl.runtime.raw_opencl import Param, RawOpenCL
from tests.adversarial.isolated import run


@pytest.fixture(scope="module", autouse=True)
def opencl():
    from backends import base
    reason = base.get("opencl").available()
    if reason:
        pytest.skip(f"opencl: {reason}")


IMAGE_SOURCE = r"""
// TIM-VX style: a tensor as an image2d_array_t, read with integer coordinates (no sampler)
__kernel void scale_layers(__read_only image2d_array_t src, __global float* dst, float alpha) {
    int x = get_global_id(0), y = get_global_id(1), z = get_global_id(2);
    int w = get_image_width(src), h = get_image_height(src);
    float4 v = read_imagef(src, (int4)(x, y, z, 0));
    dst[(z * h + y) * w + x] = alpha * v.x + (float)z;
}
__constant sampler_t nearest = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP_TO_EDGE | CLK_FILTER_NEAREST;
__kernel void swap_rb(__read_only image2d_t src, __write_only image2d_t dst) {
    int2 p = (int2)(get_global_id(0), get_global_id(1));
    float4 v = read_imagef(src, nearest, p);
    write_imagef(dst, p, (float4)(v.z, v.y, v.x, v.w * 2.0f));
}
__kernel void unorm(__read_only image2d_t src, __global float* dst) {
    int x = get_global_id(0), y = get_global_id(1);
    dst[y * get_image_width(src) + x] = read_imagef(src, (int2)(x, y)).x;
}
"""


def _layers_op(source=IMAGE_SOURCE, image=Image("src", "image2d_array_t", order="R"), **kw):
    return RawOpenCL(
        "scale_layers", source, inputs=(image,), outputs=("dst",), params=[Param("alpha", dsl.f32)],
        select=lambda dts, p: ("scale_layers", ""),
        enqueue=lambda ins, outs, p: ((ins[0].shape[2], ins[0].shape[1], ins[0].shape[0]), None),
        shape=lambda ins, p: [(ins[0].shape, np.float32)], **kw)


swap_rb = RawOpenCL(
    "swap_rb", IMAGE_SOURCE, inputs=(Image("src", "image2d_t", order="RGBA"),),
    outputs=(Image("dst", "image2d_t", order="RGBA"),), select=lambda dts, p: ("swap_rb", ""),
    enqueue=lambda ins, outs, p: ((ins[0].shape[1], ins[0].shape[0]), None),
    shape=lambda ins, p: [(ins[0].shape, np.float32)])

unorm = RawOpenCL(
    "unorm", IMAGE_SOURCE, inputs=(Image("src", order="R", channel_type="UNORM_INT8"),), outputs=("dst",),
    select=lambda dts, p: ("unorm", ""), enqueue=lambda ins, outs, p: ((ins[0].shape[1], ins[0].shape[0]), None),
    shape=lambda ins, p: [(ins[0].shape, np.float32)])


def _check_images():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 7)).astype(np.float32)
    np.testing.assert_array_equal(_layers_op()(x, alpha=2.0), 2 * x + np.arange(3, dtype=np.float32)[:, None, None])
    rgba = rng.standard_normal((4, 6, 4)).astype(np.float32)
    ref = rgba[..., [2, 1, 0, 3]] * np.float32([1, 1, 1, 2])
    np.testing.assert_array_equal(swap_rb(rgba), ref)
    q = rng.integers(0, 256, (2, 9)).astype(np.uint8)
    np.testing.assert_allclose(unorm(q), q / np.float32(255), rtol=1e-6)


def test_image_inputs_and_outputs_match_numpy():
    _check_images()


@pytest.mark.parametrize("device", ["Portable", "oclgrind"])
def test_image_inputs_and_outputs_match_numpy_on_each_device(device):
    """In a child: before images were supported, a buffer bound to image2d_array_t segfaulted PoCL
    and gave wrong data on Oclgrind."""
    out = run("""
        from backends.opencl import runtime as rt
        print(rt.device().description)
        from tests.backends.test_raw_opencl_checks import _check_images
        _check_images()
        print("IMAGES-OK")
    """, env={"OPDSL_OPENCL_DEVICE": device}, timeout=300, expect_ok=False)
    if "no usable" in (out.stdout + out.stderr).lower() or "NoDevice" in out.stderr:
        pytest.skip(f"no {device} device")
    assert out.returncode == 0 and "IMAGES-OK" in out.stdout, out.describe()


def test_image_declaration_and_array_errors_name_the_image():
    with pytest.raises(ValueError, match="kind 'image3d' is not supported; accepted: image2d_t, image2d_array_t"):
        Image("v", "image3d")
    with pytest.raises(ValueError, match="channel order 'RGB' is not supported"):
        Image("v", order="RGB")
    with pytest.raises(ValueError, match=r"image 'src' \(image2d_array_t, order R\) takes an array of shape "
                                         r"\(layers, height, width\) or \(layers, height, width, 1\); got \(2, 5, 7, 3\)"):
        _layers_op()(np.zeros((2, 5, 7, 3), np.float32), alpha=1.0)
    with pytest.raises(TypeError, match="image 'src' has channel type UNORM_INT8, made from uint8 arrays; got float32"):
        unorm(np.zeros((2, 2), np.float32))


class _NoImages:
    description = "'fake' on 'test'"

    class device:
        image_support = False


def test_a_device_without_images_is_refused_naming_the_parameter():
    from backends.opencl import images
    with pytest.raises(ValueError, match=r"raw OpenCL op op1: input image 'src' \(image2d_array_t\) needs image "
                                         r"support, which OpenCL device 'fake' on 'test' lacks"):
        images.check_device("op1", Image("src", "image2d_array_t"), np.zeros((1, 2, 2), np.float32), _NoImages,
                            writable=False)


def test_an_image_format_the_device_lacks_is_refused_with_what_it_has(monkeypatch):
    import pyopencl as cl
    monkeypatch.setattr(cl, "get_supported_image_formats", lambda *a: [
        cl.ImageFormat(cl.channel_order.R, cl.channel_type.UNSIGNED_INT8)])
    with pytest.raises(ValueError, match="has no image2d_array_t of order R and channel type FLOAT; with order R it "
                                         "has: UNSIGNED_INT8"):
        _layers_op()(np.zeros((1, 2, 2), np.float32), alpha=1.0)


# ---------------------------------------------------------------- argument checks

def test_a_buffer_bound_to_an_image_parameter_is_refused_before_the_launch():
    """The crash the TIM-VX user hit (a segfault on PoCL, so in a child): the op declared a plain
    input, the source an image2d_array_t."""
    out = run("""
        import re, numpy as np
        from backends.opencl import raw_checks
        from tests.backends.test_raw_opencl_checks import _layers_op
        try:
            _layers_op(image="src")(np.zeros((1, 2, 2), np.float32), alpha=1.0)
        except raw_checks.RawArgumentError as e:
            print("REFUSED:", e)
    """, timeout=300, expect_ok=False)
    assert out.returncode == 0, out.describe()
    assert ("REFUSED: raw OpenCL op scale_layers: __kernel scale_layers parameter 0 '__read_only image2d_array_t src' "
            "is an image, but the op passes input 'src' as a buffer; declare it with Image('src', 'image2d_array_t'"
            in out.stdout), out.describe()


AXPB = r"""
__kernel void k(__global const float* x, __global float* y, float a, int b) {
    size_t i = get_global_id(0);
    y[i] = a * x[i] + (float)b;
}
"""


def _axpb(source=AXPB, params=(Param("a", dsl.f32), Param("b", dsl.i32)), args=None, enqueue=None):
    return RawOpenCL("axpb", source, inputs=("x",), outputs=("y",), params=list(params),
                     select=lambda d, p: ("k", ""), args=args,
                     enqueue=enqueue or (lambda i, o, p: ((i[0].size,), None)),
                     shape=lambda i, p: [(i[0].shape, i[0].dtype)])


def test_arguments_checked_against_the_kernel_parameter_list():
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(_axpb()(x, a=2.0, b=1), 2 * x + 1)
    with pytest.raises(raw_checks.RawArgumentError, match=r"__kernel k takes 4 argument\(s\) \(__global "
                                                          r"float\* x, __global float\* y, float a, int b\), but the "
                                                          r"op passes 3 \(input 'x', output 'y', param 'a'\)"):
        _axpb(params=[Param("a", dsl.f32)])(x, a=2.0)
    with pytest.raises(raw_checks.RawArgumentError, match=r"parameter 3 'int b' receives param 'b', passed as float; "
                                                          r"declare it 'float b'"):
        _axpb(params=[Param("a", dsl.f32), Param("b", dsl.f32)])(x, a=2.0, b=1.0)
    with pytest.raises(raw_checks.RawArgumentError, match=r"parameter 0 '__global float\* x' receives input 'x', an "
                                                          r"array of int32 \(int\); the pointer's element type is float32"):
        _axpb()(np.arange(4, dtype=np.int32), a=2.0, b=1)
    with pytest.raises(raw_checks.RawArgumentError, match=r"receives args\(\)\[0\], passed as long"):
        _axpb(source=AXPB.replace("int b)", "int b, int n)"), args=lambda i, o, p: [np.int64(4)])(x, a=1.0, b=0)


def test_typedefs_and_macros_resolve_to_the_element_type():
    src = "#define T float\ntypedef int count_t;\n" + AXPB.replace("const float*", "const T*").replace("int b", "count_t b")
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(_axpb(source=src)(x, a=1.0, b=2), x + 2)


# ---------------------------------------------------------------- work sizes and build options

def test_a_global_size_not_a_multiple_of_the_local_size_names_the_op_and_the_rule():
    op = _axpb(enqueue=lambda i, o, p: ((10,), (4,)))
    with pytest.raises(ValueError, match=r"raw OpenCL op axpb: __kernel k: enqueue\(\) returned global size \(10,\) and "
                                         r"local size \(4,\): global size 10 in dimension 0 is not a multiple of local "
                                         r"size 4, which OpenCL 1.2 requires .*round the global size up to 12.*"
                                         r"\(1, 2, 5, 10\)"):
        op(np.zeros(10, np.float32), a=1.0, b=0)
    with pytest.raises(ValueError, match=r"needs as many dimensions as the global size"):
        _axpb(enqueue=lambda i, o, p: ((8,), (4, 1)))(np.zeros(8, np.float32), a=1.0, b=0)


def test_reqd_work_group_size_is_checked():
    from ops.opencl import gemm
    fname, k = gemm.kernel((dsl.f32, dsl.f32), {"alpha": 1.0})
    from backends.opencl import runtime as rt
    with pytest.raises(ValueError, match=r"the source requires local size \(16, 16\)"):
        raw_checks.check_work_sizes("gemm", fname, (32, 32), (8, 8), k, rt.device().device)


def test_cl_std_2_0_builds_where_the_device_has_it_and_is_refused_where_not():
    from backends.opencl import runtime as rt
    dev = rt.device()
    have = raw_checks.opencl_c_versions(dev.device)
    op = _axpb()
    op2 = op.variant(build_options="-cl-std=CL2.0")
    x = np.arange(4, dtype=np.float32)
    if (2, 0) in have:
        np.testing.assert_array_equal(op2(x, a=1.0, b=1), x + 1)
    else:
        with pytest.raises(ValueError, match=r"raw OpenCL op axpb: build option -cl-std=CL2.0 needs OpenCL C 2.0, which "
                                             r"OpenCL device .* does not have; accepted there: -cl-std=CL1.0"):
            op2(x, a=1.0, b=1)
    newest = have[-1]
    op3 = op.variant(build_options=f"-cl-std=CL{newest[0]}.{newest[1]}")
    np.testing.assert_array_equal(op3(x, a=2.0, b=0), 2 * x)


def test_cl_std_options_replace_the_default_one():
    class Dev:
        opencl_c_version = "OpenCL C 2.0 vendor"
        version = "OpenCL 2.1 vendor"
    assert raw_checks.opencl_c_versions(Dev) == [(1, 0), (1, 1), (1, 2), (2, 0)]
    assert raw_checks.check_cl_std("op", "-cl-std=CL1.2", "-cl-std=CL2.0 -DX=1", Dev, "d") == "-cl-std=CL2.0 -DX=1"
    assert raw_checks.check_cl_std("op", "-cl-std=CL1.2", "-DX=1", Dev, "d") == "-cl-std=CL1.2 -DX=1"


def test_compiler_tallies_do_not_reach_stderr(tmp_path):
    """PoCL's and Oclgrind's clang print "1 warning generated." and "1 error generated." to stderr."""
    out = run("""
        import numpy as np, dsl
        from dsl.runtime.raw_opencl import RawOpenCL
        src = "__kernel void k(__global float* y) { int z = 3.5; y[get_global_id(0)] = (float)z; }"
        op = RawOpenCL("warns", src, inputs=(), outputs=("y",), select=lambda d, p: ("k", ""),
                       enqueue=lambda i, o, p: ((2,), None))
        y = np.zeros(2, np.float32); op(y); assert (y == 3).all(), y
        bad = RawOpenCL("bad", "__kernel void k(__global float* y) { y[0] = nothing; }", inputs=(), outputs=("y",),
                        select=lambda d, p: ("k", ""), enqueue=lambda i, o, p: ((1,), None))
        try:
            bad(y)
        except dsl.CompileError as e:
            assert "nothing" in str(e) + e.note, e
        print("DONE")
    """, env={"OPDSL_NO_DISK_CACHE": "1"}, timeout=300)
    assert "DONE" in out.stdout
    assert "generated" not in out.stderr, out.stderr
