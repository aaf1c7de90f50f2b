"""Conv (1-D/2-D, 3-D in test_conv3d.py; pads, strides, dilations, group, auto_pad) in plain and NCHWc16 on every backend."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph import formats as F

RNG = np.random.default_rng(5)


def conv_ref(x, w, b=None, strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), group=1):
    """Direct numpy convolution (f64 accumulation), 2-D NCHW."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    span_h, span_w = (kh - 1) * dilations[0] + 1, (kw - 1) * dilations[1] + 1
    oh = (h + pads[0] + pads[2] - span_h) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - span_w) // strides[1] + 1
    y = np.zeros((n, m, oh, ow))
    mg = m // group
    for mm in range(m):
        g = mm // mg
        for i in range(oh):
            for j in range(ow):
                r0, c0 = i * strides[0], j * strides[1]
                patch = xp[:, g * cg:(g + 1) * cg, r0:r0 + span_h:dilations[0], c0:c0 + span_w:dilations[1]]
                y[:, mm, i, j] = (patch * w[mm]).sum(axis=(1, 2, 3))
    if b is not None:
        y += b[None, :, None, None]
    return y


CASES = [  # (N, C, H, W, M, k, strides, dilations, pads, group)
    (1, 3, 5, 5, 4, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (2, 4, 7, 6, 6, 3, (2, 1), (1, 2), (0, 1, 2, 0), 2),   # asymmetric pads, group, dilation
    (1, 18, 4, 5, 20, 1, (1, 1), (1, 1), (0, 0, 0, 0), 1),  # channels past one block
    (1, 4, 6, 6, 4, 3, (1, 1), (1, 1), (1, 1, 1, 1), 4),    # depthwise
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"C{c[1]}M{c[4]}k{c[5]}g{c[9]}")
def test_conv_plain_and_blocked_kernels(backend, case):
    n, c, h, wd, m, k, s, d, p, g = case
    x = RNG.standard_normal((n, c, h, wd)).astype(np.float32)
    w = RNG.standard_normal((m, c // g, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    ref = conv_ref(x, w, b, s, d, p, g)
    y = ops.Conv(x, w, b, strides=s, dilations=d, pads=p, group=g, backend=backend)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    # the NCHWc16 kernel on blocked arrays: same values, zeros in the padding channels
    op = ops.Conv(strides=s, dilations=d, pads=p, group=g)
    yb = np.full(F.physical_shape(ref.shape, "nchwc16"), np.nan, np.float32)
    op.run(ops.nn.conv_nchwc16, [F.to_nchwc16_ref(x), w, b], [yb], backend)
    np.testing.assert_allclose(F.to_plain_ref(yb, m), ref, rtol=1e-4, atol=1e-4)
    assert (F.to_plain_ref(yb, yb.shape[1] * 16)[:, m:] == 0).all()


def _same_pads(size, k, s, upper):
    out = -(-size // s)
    total = max(0, (out - 1) * s + k - size)
    first = total // 2 if upper else total - total // 2
    return first, total - first


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_auto_pad_and_1d(backend, auto_pad):
    x = RNG.standard_normal((1, 2, 6, 7)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 2, 3)).astype(np.float32)
    y = ops.Conv(x, w, auto_pad=auto_pad, strides=[2, 2], backend=backend)
    if auto_pad == "VALID":
        ref = conv_ref(x, w, strides=(2, 2))
    else:
        (t, bo), (l, r) = (_same_pads(6, 2, 2, auto_pad == "SAME_UPPER"), _same_pads(7, 3, 2, auto_pad == "SAME_UPPER"))
        ref = conv_ref(x, w, strides=(2, 2), pads=(t, l, bo, r))
        assert y.shape == (1, 3, 3, 4)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    x1 = RNG.standard_normal((2, 2, 9)).astype(np.float32)
    w1 = RNG.standard_normal((3, 2, 3)).astype(np.float32)
    y1 = ops.Conv(x1, w1, auto_pad=auto_pad, strides=[2], backend=backend)
    if auto_pad == "VALID":
        ref1 = conv_ref(x1[:, :, None], w1[:, :, None], strides=(1, 2))[:, :, 0]
    else:
        l, r = _same_pads(9, 3, 2, auto_pad == "SAME_UPPER")
        ref1 = conv_ref(x1[:, :, None], w1[:, :, None], strides=(1, 2), pads=(0, l, 0, r))[:, :, 0]
    np.testing.assert_allclose(y1, ref1, rtol=1e-4, atol=1e-4)


def test_conv_f64_f16_and_no_bias(backend):
    rng = np.random.default_rng(11)  # its own generator: the data must not depend on which tests ran first
    x = rng.standard_normal((1, 2, 4, 4))
    w = rng.standard_normal((2, 2, 3, 3))
    # f64 throughout: a sum of 18 products of magnitude <= 10 is exact to ~1e-15 absolute (f32 would be ~1e-6);
    # atol covers outputs that cancel to near zero, where a relative bound alone is meaningless
    np.testing.assert_allclose(ops.Conv(x, w, pads=[1, 1, 1, 1], backend=backend), conv_ref(x, w, pads=(1, 1, 1, 1)),
                               rtol=1e-12, atol=1e-12)
    xh, wh = x.astype(np.float16), w.astype(np.float16)
    yh = ops.Conv(xh, wh, pads=[1, 1, 1, 1], backend=backend)
    assert yh.dtype == np.float16  # accumulated in f32, rounded once
    ref = conv_ref(xh.astype(np.float32), wh.astype(np.float32), pads=(1, 1, 1, 1)).astype(np.float16)
    np.testing.assert_allclose(yh.astype(np.float32), ref.astype(np.float32), rtol=1e-3, atol=1e-3)


def test_graph_runs_conv_blocked_end_to_end(backend):
    """A grouped Conv picks NCHWc16 for >= 16 channels; the chain after it follows; equal to plain."""
    g = dsl.Graph("blocked")
    x = g.input("x", (None, 16, 4, 4), dsl.f32)
    w = g.constant("w", RNG.standard_normal((18, 8, 3, 3)).astype(np.float32) * 0.1)
    b = g.constant("b", RNG.standard_normal(18).astype(np.float32))
    y = ops.LeakyRelu(ops.Conv(x, w, b, pads=[1, 1, 1, 1], group=2), alpha=0.2)
    g.output(ops.Add(y, ops.Tanh(y)), "y")
    xv = RNG.standard_normal((2, 16, 4, 4)).astype(np.float32)
    auto = g.compile(backend=backend)
    assert auto.stats["reorders"] >= 2
    plain = g.compile(backend=backend, formats="plain").run({"x": xv})["y"]
    np.testing.assert_allclose(auto.run({"x": xv})["y"], plain, rtol=1e-5, atol=1e-5)
    c = conv_ref(xv, w.value, b.value, pads=(1, 1, 1, 1), group=2)
    r = np.where(c >= 0, c, 0.2 * c)
    np.testing.assert_allclose(plain, r + np.tanh(r), rtol=1e-4, atol=1e-4)
    eager = ops.Conv(xv, w.value, b.value, pads=[1, 1, 1, 1], group=2, backend=backend)
    np.testing.assert_allclose(eager, c, rtol=1e-4, atol=1e-4)


def test_wide_groups_run_as_one_gemm_per_group():
    """Groups of >= 16 input channels (AlexNet's halves) take the GEMM path on numba, plain layout."""
    x = RNG.standard_normal((2, 32, 6, 5)).astype(np.float32)
    w = RNG.standard_normal((24, 16, 3, 3)).astype(np.float32) * 0.1
    b = RNG.standard_normal(24).astype(np.float32)
    g = dsl.Graph("wide")
    xi = g.input("x", x.shape, dsl.f32)
    g.output(ops.Relu(ops.Conv(xi, g.constant("w", w), g.constant("b", b), pads=[1, 0, 1, 2], strides=[1, 2],
                               group=2)), "y")
    model = g.compile(backend="numba")
    assert "impl=gemm" in str(model) and "nchwc16" not in str(model)
    want = np.maximum(conv_ref(x, w, b, strides=(1, 2), pads=(1, 0, 1, 2), group=2), 0)
    np.testing.assert_allclose(model.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


def test_errors_name_the_problem():
    x = np.ones((1, 4, 5, 5), np.float32)
    w = np.ones((6, 2, 3, 3), np.float32)
    with pytest.raises(dsl.VerifyError, match="Conv input has 4 channels but weights .* group=1 expect 2"):
        ops.Conv(x, w)
    with pytest.raises(dsl.VerifyError, match="output channels 6 are not divisible by group=4"):
        ops.Conv(x, np.ones((6, 1, 3, 3), np.float32), group=4)
    with pytest.raises(dsl.VerifyError, match=r"Conv pads \[1, 1\] needs 4 values"):
        ops.Conv(x, w, group=2, pads=[1, 1])
    with pytest.raises(dsl.VerifyError, match="auto_pad 'SAME'"):
        ops.Conv(x, w, group=2, auto_pad="SAME")
    with pytest.raises(dsl.VerifyError, match="1-D to 3-D"):
        ops.Conv(np.ones((1, 2, 3, 3, 3, 3), np.float32), np.ones((1, 2, 1, 1, 1, 1), np.float32))
    with pytest.raises(dsl.VerifyError, match="does not fit input size 5"):
        ops.Conv(x, np.ones((2, 4, 7, 7), np.float32))
    with pytest.raises(dsl.VerifyError, match=r"bias must have shape \(M,\) = \(6,\)"):
        ops.Conv(x, w, np.ones(5, np.float32), group=2)
    with pytest.raises(dsl.VerifyError, match="Conv input has dtype i32"):
        ops.Conv(x.astype(np.int32), w.astype(np.int32), group=2)
    with pytest.raises(dsl.VerifyError, match="must be >= 1"):
        ops.Conv(x, w, group=2, strides=[0, 1])
