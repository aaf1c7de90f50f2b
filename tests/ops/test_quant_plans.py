"""Which int8 ops a model runs from a recorded launch plan (docs/ops.md "Launch plans"): with
constant scales, zero points and weights QuantizeLinear, DequantizeLinear, QLinearConv,
ConvInteger, QLinearMatMul and MatMulInteger are planned (the packed 2-D convolutions declare their
image packing and convolution launches, tests/ops/test_quant_conv_plans.py); results stay right run
after run."""
import numpy as np
import pytest

import dsl
import ops

RNG = np.random.default_rng(2812)


def _planned(model) -> str:
    return next(line for line in str(model).splitlines() if "nodes planned" in line).split(", ")[-1]


def _qlinear_conv1d_reference(q, w, bias, sx, sw, sy, zx, zy):
    """u8 QLinearConv of (N, C, L) with pads 1: exact i64 sums, f32 multiplier, half-even rounding."""
    xp = np.pad(q.astype(np.int64) - int(zx), ((0, 0), (0, 0), (1, 1)))
    taps = w.shape[2]
    length = xp.shape[2] - taps + 1
    acc = sum(np.einsum("ncl,mc->nml", xp[:, :, k:k + length], w[:, :, k].astype(np.int64))
              for k in range(taps)) + bias.reshape(1, -1, 1)
    mult = (np.float32(sx) * sw.astype(np.float32) / np.float32(sy)).astype(np.float32).reshape(1, -1, 1)
    return np.clip(np.rint(acc * mult.astype(np.float64)) + int(zy), 0, 255)


def test_quantized_conv_chain_is_planned_and_right_on_every_run(backend):
    sx, zx, sy, zy = np.float32(0.05), np.uint8(120), np.float32(0.1), np.uint8(128)
    w = RNG.integers(-50, 50, (4, 3, 3)).astype(np.int8)
    sw = RNG.uniform(0.01, 0.03, 4).astype(np.float32)
    bias = RNG.integers(-100, 100, 4).astype(np.int32)
    g = dsl.Graph("qconv1d")
    x = g.input("x", (2, 3, 11), dsl.f32)
    c = {k: g.constant(k, np.asarray(v)) for k, v in dict(sx=sx, zx=zx, sy=sy, zy=zy, w=w, sw=sw, b=bias).items()}
    q = ops.QuantizeLinear(x, c["sx"], c["zx"])
    zw = g.constant("zw", np.zeros(4, np.int8))
    y = ops.QLinearConv(q, c["sx"], c["zx"], c["w"], c["sw"], zw, c["sy"], c["zy"], c["b"], pads=[1, 1])
    g.output(ops.DequantizeLinear(y, c["sy"], c["zy"]), "y")
    model = g.compile(backend=backend)
    assert _planned(model) == "3 of 3 nodes planned"
    for _ in range(2):  # new values each run: a plan that froze the stand-ins would repeat itself
        xv = RNG.uniform(-5, 5, (2, 3, 11)).astype(np.float32)
        qv = np.clip(np.rint(xv / sx) + int(zx), 0, 255)
        want = (_qlinear_conv1d_reference(qv, w, bias, sx, sw, sy, zx, zy) - int(zy)) * sy
        np.testing.assert_allclose(model.run({"x": xv})["y"], want, atol=1.01 * sy)  # one step: x/sx rounding


def test_matmul_integer_with_a_run_time_zero_point_is_planned(backend):
    b = RNG.integers(-128, 128, (6, 5)).astype(np.int8)
    g = dsl.Graph("mmi")
    a, za = g.input("a", (4, 6), dsl.u8), g.input("za", (), dsl.u8)
    g.output(ops.MatMulInteger(a, g.constant("b", b), za, g.constant("zb", np.array(3, np.int8))), "y")
    model = g.compile(backend=backend)
    assert _planned(model) == "1 of 1 nodes planned"  # a's zero point reaches the kernel as a view
    for zv in (7, 200):
        av = RNG.integers(0, 256, (4, 6)).astype(np.uint8)
        got = model.run({"a": av, "za": np.array(zv, np.uint8)})["y"]
        np.testing.assert_array_equal(got, (av.astype(np.int64) - zv) @ (b.astype(np.int64) - 3))


def test_a_product_broadcasting_a_over_b_batches_is_not_planned(backend):
    """The packed GEMM gets a numpy copy of a broadcast over B's batch, which a plan would freeze:
    MatMulInteger's plan declines a whose batch is not the output's (on every path)."""
    b = RNG.integers(-128, 128, (2, 6, 5)).astype(np.int8)
    g = dsl.Graph("mmi_bcast")
    a = g.input("a", (4, 6), dsl.u8)
    g.output(ops.MatMulInteger(a, g.constant("b", b)), "y")
    model = g.compile(backend=backend)
    assert _planned(model) == "0 of 1 nodes planned"
    for _ in range(2):
        av = RNG.integers(0, 256, (4, 6)).astype(np.uint8)
        np.testing.assert_array_equal(model.run({"a": av})["y"], av.astype(np.int64) @ b.astype(np.int64))


def test_a_non_constant_weight_is_not_planned():
    g = dsl.Graph("mmi_w")
    a, b = g.input("a", (4, 6), dsl.u8), g.input("b", (6, 5), dsl.i8)
    g.output(ops.MatMulInteger(a, b), "y")
    model = g.compile(backend="interpreter")
    assert _planned(model) == "0 of 1 nodes planned"
    for _ in range(2):
        av = RNG.integers(0, 256, (4, 6)).astype(np.uint8)
        bv = RNG.integers(-128, 128, (6, 5)).astype(np.int8)
        np.testing.assert_array_equal(model.run({"a": av, "b": bv})["y"], av.astype(np.int64) @ bv.astype(np.int64))


@pytest.mark.parametrize("compiled_backend", [pytest.param("numba", marks=pytest.mark.slow), "opencl"],
                         indirect=True)  # numba: the packed kernels' compiles take ~20 s
def test_a_conv_packing_its_activation_with_another_kernel_is_planned(compiled_backend):
    """Stride 2 takes the im2col path: pack_im2col_int8 reads x, then the GEMM reads the packing.
    The op declares both launches (ops/quant_conv_plan.py), the packing into a scratch buffer, so
    each run packs that run's image."""
    w = RNG.integers(-128, 128, (5, 3, 3, 3)).astype(np.int8)
    g = dsl.Graph("conv_int_s2")
    x = g.input("x", (1, 3, 9, 9), dsl.u8)
    g.output(ops.ConvInteger(x, g.constant("w", w), g.constant("zx", np.array(9, np.uint8)),
                             g.constant("zw", np.array(-2, np.int8)), strides=[2, 2]), "y")
    model = g.compile(backend=compiled_backend)
    assert _planned(model) == "1 of 1 nodes planned"
    for _ in range(2):
        xv = RNG.integers(0, 256, (1, 3, 9, 9)).astype(np.uint8)
        xs, ws = xv.astype(np.int64) - 9, w.astype(np.int64) + 2
        want = sum(np.einsum("nchw,mc->nmhw", xs[:, :, i:i + 8:2, j:j + 8:2], ws[:, :, i, j])
                   for i in range(3) for j in range(3))
        np.testing.assert_array_equal(model.run({"x": xv})["y"], want)


def test_dynamic_quantize_linear_feeding_matmul_integer_is_planned(backend):
    """The dynamically quantized MatMul (quantize_dynamic's pattern): both nodes replay their plan,
    and each run quantizes over that run's own range."""
    b = RNG.integers(-128, 128, (6, 5)).astype(np.int8)
    g = dsl.Graph("dyn")
    x = g.input("x", (4, 6), dsl.f32)
    q, s, z = ops.DynamicQuantizeLinear(x)
    g.output(ops.MatMulInteger(q, g.constant("b", b), z, g.constant("zb", np.array(0, np.int8))), "y")
    g.output(s, "scale")
    model = g.compile(backend=backend)
    assert _planned(model) == "2 of 2 nodes planned"
    for span in (1.0, 40.0):  # another range each run: a plan that froze the stand-ins would repeat itself
        xv = RNG.uniform(-span, span / 2, (4, 6)).astype(np.float32)
        lo, hi = min(0.0, float(xv.min())), max(0.0, float(xv.max()))
        scale = np.float32((hi - lo) / 255)
        zp = np.clip(np.rint(-lo / scale), 0, 255)
        qv = np.clip(np.rint(xv / scale) + zp, 0, 255)
        out = model.run({"x": xv})
        np.testing.assert_allclose(out["scale"], scale, rtol=1e-6)
        want = (qv.astype(np.int64) - int(zp)) @ b.astype(np.int64)
        assert np.abs(out["y"].astype(np.int64) - want).max() <= 128 * 6  # one step of x at most per term
