"""The packed 2-D QLinearConv and ConvInteger run from their declared launch plan (ops/quant_conv_plan.py):
the image packing writes a scratch buffer, the convolution or GEMM reads it, and a model replays
both with no run().  The planned outputs equal run()'s (the same model with ``replay = False``)
and the portable kernel's, run after run with new images."""
import numpy as np
import pytest

import dsl
import ops

RNG = np.random.default_rng(2929)


def _planned(model) -> str:
    return next(line for line in str(model).splitlines() if "nodes planned" in line).split(", ")[-1]


def _qlinear_conv(c, m, stride, x_zp=None, u8_weights=False):
    """u8 x (2, c, 9, 9), 3×3 weights (i8 around 0, or u8 around 128) with per-channel scales,
    pads 1; ``x_zp``: a graph input instead of a constant when given as its name."""
    g = dsl.Graph(f"qconv_s{stride}")
    x = g.input("x", (2, c, 9, 9), dsl.u8)
    w = RNG.integers(68, 188, (m, c, 3, 3)).astype(np.uint8) if u8_weights else \
        RNG.integers(-60, 60, (m, c, 3, 3)).astype(np.int8)
    zw = np.full(m, 128, np.uint8) if u8_weights else np.zeros(m, np.int8)
    const = {k: g.constant(k, np.asarray(v)) for k, v in dict(
        sx=np.float32(0.02), sy=np.float32(0.4), zy=np.uint8(128),
        w=w, sw=RNG.uniform(0.01, 0.03, m).astype(np.float32),
        zw=zw, b=RNG.integers(-900, 900, m).astype(np.int32)).items()}
    zx = g.input(x_zp, (), dsl.u8) if x_zp else g.constant("zx", np.array(100, np.uint8))
    g.output(ops.QLinearConv(x, const["sx"], zx, const["w"], const["sw"], const["zw"], const["sy"], const["zy"],
                             const["b"], strides=[stride, stride], pads=[1, 1, 1, 1]), "y")
    return g


def _conv_integer(c, m, stride):
    g = dsl.Graph(f"convint_s{stride}")
    x = g.input("x", (2, c, 9, 9), dsl.u8)
    g.output(ops.ConvInteger(x, g.constant("w", RNG.integers(-128, 128, (m, c, 3, 3)).astype(np.int8)),
                             g.constant("zx", np.array(9, np.uint8)), g.constant("zw", np.array(-2, np.int8)),
                             strides=[stride, stride], pads=[1, 1, 1, 1]), "y")
    return g


def _unplanned(g, backend, monkeypatch):
    """The same graph calling run() at every run."""
    with monkeypatch.context() as m:
        m.setattr(ops.QLinearConv, "replay", False)
        m.setattr(ops.ConvInteger, "replay", False)
        model = g.compile(backend=backend)
    assert _planned(model) == "0 of 1 nodes planned"
    return model


# The im2col cases' GEMM takes the weights as its A operand.  The QLinearConv one has u8 weights:
# its numba specialization (u8 A, u8 y) is the one test_gemm_int8.py's QLinearMatMul model test
# compiles, one ~30-45 s cold compile for both; the ConvInteger one keeps i8 weights (i8 A, the
# GEMM's i8-A case on numba by default), as do the direct and space-to-depth cases.
CASES = {  # name: (graph, input channels): each of conv_int8's three packed paths
    "qlinear stride 1 (NCHW4c packing, direct kernel)": (lambda: _qlinear_conv(8, 16, 1), 8),
    "qlinear stride 2, few channels (space-to-depth)": (lambda: _qlinear_conv(8, 16, 2), 8),
    "qlinear stride 2 (zero-point border, im2col, GEMM)": (lambda: _qlinear_conv(24, 16, 2, u8_weights=True), 24),
    "conv integer stride 2 (im2col, GEMM)": (lambda: _conv_integer(24, 8, 2), 24),
}


@pytest.mark.parametrize("case", list(CASES))
def test_packed_conv_is_planned_and_equals_run(compiled_backend, case, monkeypatch):
    make, channels = CASES[case]
    g = make()
    model = g.compile(backend=compiled_backend)
    assert _planned(model) == "1 of 1 nodes planned"
    reference = _unplanned(g, compiled_backend, monkeypatch)
    portable = g.compile(backend="interpreter")  # the portable kernel, exact in i32 / onnx's rounding
    for _ in range(2):  # new images each run: a plan that froze the stand-in's packing would repeat itself
        xv = RNG.integers(0, 256, (2, channels, 9, 9)).astype(np.uint8)
        got = model.run({"x": xv})["y"]
        np.testing.assert_array_equal(got, reference.run({"x": xv})["y"])
        want = portable.run({"x": xv})["y"].astype(np.int64)
        assert np.abs(got.astype(np.int64) - want).max() <= (0 if got.dtype == np.int32 else 1)


@pytest.mark.slow  # ~9 s per backend of compiles
def test_a_run_time_image_zero_point_is_not_planned_and_stays_right(compiled_backend):
    """run() reads x's zero point in numpy on the packed path: from a graph input it calls run() each run."""
    g = _qlinear_conv(8, 16, 1, x_zp="zx")
    model = g.compile(backend=compiled_backend)
    assert _planned(model) == "0 of 1 nodes planned"
    portable = g.compile(backend="interpreter")
    for zx in (3, 200):
        feeds = {"x": RNG.integers(0, 256, (2, 8, 9, 9)).astype(np.uint8), "zx": np.array(zx, np.uint8)}
        got = model.run(feeds)["y"].astype(np.int64)
        assert np.abs(got - portable.run(feeds)["y"]).max() <= 1
