"""Softmax, LogSoftmax, Hardmax, LpNormalization, LayerNormalization, RMSNormalization,
InstanceNormalization, GroupNormalization and LRN on every backend against numpy."""
import numpy as np
import pytest

import dsl
import ops
from ops.norm import GroupNormalizationV18, HardmaxV1, LogSoftmaxV1, SoftmaxV1

RNG = np.random.default_rng(11)


def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def hardmax(x, axis):
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    y = np.zeros_like(x)
    np.put_along_axis(y, idx, 1, axis=axis)
    return y


def coerce_2d(fn, x, axis):
    a = axis % x.ndim
    flat = x.reshape(int(np.prod(x.shape[:a])), -1)
    return fn(flat, 1).reshape(x.shape)


def test_softmax_family_axes(backend):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32) * 3
    x[0, 1, :2] = 2.0  # a tie for Hardmax: the first index wins
    for axis in (0, 1, 2, -1, -2):
        np.testing.assert_allclose(ops.Softmax(x, axis=axis, backend=backend), softmax(x, axis), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(ops.LogSoftmax(x, axis=axis, backend=backend), np.log(softmax(x, axis)),
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(ops.Hardmax(x, axis=axis, backend=backend), hardmax(x, axis))
    np.testing.assert_allclose(ops.Softmax(x, backend=backend), softmax(x, -1), rtol=1e-5)  # default axis -1


def test_softmax_family_opset_1_coerces_2d(backend):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    for axis in (0, 1, 2, -1):
        np.testing.assert_allclose(SoftmaxV1(x, axis=axis, backend=backend), coerce_2d(softmax, x, axis),
                                   rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(LogSoftmaxV1(x, axis=axis, backend=backend),
                                   np.log(coerce_2d(softmax, x, axis)), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(HardmaxV1(x, axis=axis, backend=backend), coerce_2d(hardmax, x, axis))
    np.testing.assert_allclose(SoftmaxV1(x, backend=backend), coerce_2d(softmax, x, 1), rtol=1e-5)  # default 1


def test_softmax_large_values_and_dtypes(backend):
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1e30]])
    np.testing.assert_allclose(ops.Softmax(x, backend=backend), softmax(x, 1), rtol=1e-12)
    np.testing.assert_allclose(ops.LogSoftmax(x, backend=backend), x - x.max(1, keepdims=True)
                               - np.log(np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)), rtol=1e-12)
    h = RNG.standard_normal((3, 8)).astype(np.float16)
    y = ops.Softmax(h, backend=backend)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), softmax(h.astype(np.float32), 1), rtol=2e-3, atol=1e-3)


def test_softmax_causal_rows_flush_subnormal_terms(backend):
    """A causally masked row (-1e4 above the diagonal) is exact 0 there; f32 terms below e**-87
    (subnormal) are 0 rather than subnormal, the rest as numpy's; LogSoftmax is unchanged."""
    rng = np.random.default_rng(29)
    x = (rng.standard_normal((2, 8, 8)) * 3).astype(np.float32) + np.triu(np.full((8, 8), -1e4, np.float32), k=1)
    x[0, 7, :4] = x[0, 7, 4:].max() - np.float32([86.0, 87.5, 95.0, 120.0])  # near, below e**-87, subnormal, 0
    want = softmax(x.astype(np.float64), -1)
    got = ops.Softmax(x, backend=backend)
    assert (got[want == 0] == 0).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-38)
    assert got[0, 7, 0] > 0  # e**-86 is a normal f32: kept
    x64 = x.astype(np.float64) - x.max(-1, keepdims=True)
    np.testing.assert_allclose(ops.LogSoftmax(x, backend=backend), x64 - np.log(np.exp(x64).sum(-1, keepdims=True)),
                               rtol=1e-5, atol=1e-5)
    if backend == "numba":  # the row kernel, where subnormals would be the slow path
        assert (got[0, 7, 1:4] == 0).all()


def test_lp_normalization(backend):
    x = RNG.standard_normal((3, 4, 2)).astype(np.float32)
    x[0, :, 0] = 0  # a zero vector stays 0
    for axis in (0, 1, -1):
        for p in (1, 2):
            norm = np.linalg.norm(x, ord=p, axis=axis, keepdims=True)
            want = np.where(norm == 0, 0, x / np.where(norm == 0, 1, norm))
            np.testing.assert_allclose(ops.LpNormalization(x, axis=axis, p=p, backend=backend), want,
                                       rtol=1e-5, atol=1e-7)


def layer_norm(x, w, b, axis, eps, rms=False):
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = 0 if rms else x.mean(axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axes, keepdims=True)
    inv = 1 / np.sqrt(var + eps)
    y = (x - mean) * inv * w + (0 if b is None else b)
    return y, mean, inv


def test_layer_normalization(backend):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32) * 2 + 1
    for axis in (0, 1, 2, -1, -2):
        shape = x.shape[axis % 3:]
        w = RNG.standard_normal(shape).astype(np.float32)
        b = RNG.standard_normal(shape).astype(np.float32)
        y, mean, inv = ops.LayerNormalization(x, w, b, axis=axis, epsilon=1e-3, backend=backend)
        ry, rmean, rinv = layer_norm(x, w, b, axis, 1e-3)
        np.testing.assert_allclose(y, ry, rtol=1e-4, atol=1e-5)
        assert mean.shape == rmean.shape == inv.shape and mean.dtype == np.float32
        np.testing.assert_allclose(mean, rmean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(inv, rinv, rtol=1e-4)
    # no bias; a scale broadcast along the normalized axes
    w = RNG.standard_normal((1, 4)).astype(np.float32)
    y, _, _ = ops.LayerNormalization(x, w, axis=1, backend=backend)
    np.testing.assert_allclose(y, layer_norm(x, w, None, 1, 1e-5)[0], rtol=1e-4, atol=1e-5)
    h = x.astype(np.float16)
    y, mean, _ = ops.LayerNormalization(h, np.ones(4, np.float16), backend=backend)
    assert y.dtype == np.float16 and mean.dtype == np.float32
    np.testing.assert_allclose(y.astype(np.float32), layer_norm(h.astype(np.float32), 1, None, -1, 1e-5)[0],
                               rtol=1e-2, atol=1e-2)


def test_rms_normalization(backend):
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    for axis in (0, 1, -1):
        w = RNG.standard_normal(x.shape[axis % 3:]).astype(np.float32)
        np.testing.assert_allclose(ops.RMSNormalization(x, w, axis=axis, epsilon=0.1, backend=backend),
                                   layer_norm(x, w, None, axis, 0.1, rms=True)[0], rtol=1e-4, atol=1e-6)


def group_norm(x, groups, scale, bias, eps, per_group):
    n, c = x.shape[:2]
    xg = x.reshape(n, groups, -1)
    y = ((xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + eps)).reshape(x.shape)
    if per_group:
        scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return y * scale.reshape(shape) + bias.reshape(shape)


def test_instance_and_group_normalization(backend):
    x = RNG.standard_normal((2, 6, 3, 2)).astype(np.float32) + 0.5
    s = RNG.standard_normal(6).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    np.testing.assert_allclose(ops.InstanceNormalization(x, s, b, epsilon=1e-2, backend=backend),
                               group_norm(x, 6, s, b, 1e-2, False), rtol=1e-4, atol=1e-5)
    for g in (1, 2, 3, 6):
        np.testing.assert_allclose(ops.GroupNormalization(x, s, b, num_groups=g, backend=backend),
                                   group_norm(x, g, s, b, 1e-5, False), rtol=1e-4, atol=1e-5)
        sg, bg = s[:g], b[:g]
        np.testing.assert_allclose(GroupNormalizationV18(x, sg, bg, num_groups=g, backend=backend),
                                   group_norm(x, g, sg, bg, 1e-5, True), rtol=1e-4, atol=1e-5)


def test_lrn(backend):
    x = RNG.standard_normal((2, 7, 3, 2)).astype(np.float32)
    for size in (1, 2, 3, 5):
        sq = np.zeros_like(x)
        for c in range(7):
            lo, hi = max(0, c - (size - 1) // 2), min(6, c + size // 2)
            sq[:, c] = (x[:, lo:hi + 1] ** 2).sum(1)
        want = x / (2.0 + 1e-2 / size * sq) ** 0.6
        np.testing.assert_allclose(ops.LRN(x, size=size, alpha=1e-2, beta=0.6, bias=2.0, backend=backend), want,
                                   rtol=1e-5, atol=1e-6)


def test_lrn_nchwc16(backend):
    """Blocked LRN equals plain LRN; after a grouped Conv the graph keeps NCHWc16 through it."""
    from dsl.opgraph import formats as F
    x = RNG.standard_normal((2, 20, 3, 2)).astype(np.float32)
    op = ops.LRN(size=5, alpha=0.1)
    yb = np.full(F.physical_shape(x.shape, "nchwc16"), np.nan, np.float32)
    op.run(ops.norm.lrn_kernel, [F.to_nchwc16_ref(x)], [yb], backend)
    np.testing.assert_allclose(F.to_plain_ref(yb, 20), op(x, backend=backend), rtol=1e-6)
    g = dsl.Graph("lrn")
    xi = g.input("x", (2, 16, 4, 4), dsl.f32)
    w = g.constant("w", RNG.standard_normal((18, 8, 3, 3)).astype(np.float32) * 0.1)
    g.output(ops.LRN(ops.Conv(xi, w, pads=[1, 1, 1, 1], group=2), size=3), "y")
    xv = RNG.standard_normal((2, 16, 4, 4)).astype(np.float32)
    auto = g.compile(backend=backend)
    lrn = next(n for n in auto.graph.nodes if n.op.op_type == "LRN")
    assert lrn.inputs[0].spec.format == lrn.outputs[0].spec.format == "nchwc16"
    plain = g.compile(backend=backend, formats="plain").run({"x": xv})["y"]
    np.testing.assert_allclose(auto.run({"x": xv})["y"], plain, rtol=1e-5, atol=1e-6)


def test_norm_ops_in_graph(backend):
    g = dsl.Graph("n")
    xi = g.input("x", (None, 8), dsl.f32)
    w = RNG.standard_normal(8).astype(np.float32)
    y, mean, inv = ops.LayerNormalization(xi, w)
    assert mean.spec.shape == (None, 1)
    g.output(ops.Softmax(y), "p")
    g.output(inv, "inv")
    model = g.compile(backend=backend)
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    out = model.run({"x": x})
    ry, _, rinv = layer_norm(x, w, None, -1, 1e-5)
    np.testing.assert_allclose(out["p"], softmax(ry, -1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["inv"], rinv, rtol=1e-4)


def test_norm_errors():
    x = np.zeros((2, 4, 3), np.float32)
    with pytest.raises(dsl.VerifyError, match="Softmax axis: axis 3 is out of range for input of rank 3"):
        ops.Softmax(x, axis=3)
    with pytest.raises(dsl.VerifyError, match="LayerNormalization axis: axis -4 is out of range for input of rank 3"):
        ops.LayerNormalization(x, np.ones(3, np.float32), axis=-4)
    with pytest.raises(dsl.VerifyError, match="num_groups=3 must be positive and divide the 4 channels"):
        ops.GroupNormalization(x, np.ones(4, np.float32), np.ones(4, np.float32), num_groups=3)
    with pytest.raises(dsl.VerifyError, match="scale must have 2 elements"):
        GroupNormalizationV18(x, np.ones(4, np.float32), np.ones(4, np.float32), num_groups=2)
    with pytest.raises(dsl.VerifyError, match="LRN input has dtype i32"):
        ops.LRN(x.astype(np.int32), size=3)
    with pytest.raises(dsl.VerifyError, match="LpNormalization p=3"):
        ops.LpNormalization(x, p=3)
    with pytest.raises(dsl.VerifyError, match="does not broadcast"):
        ops.LayerNormalization(x, np.ones(4, np.float32))
