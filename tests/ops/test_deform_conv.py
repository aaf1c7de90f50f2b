"""DeformConv on every backend against a numpy reference: offsets with taps outside the
image, mask and bias, groups, offset groups, pads/strides/dilations; zero offsets equal Conv;
errors."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(5)


def bilinear(img, ph, pw):
    h, w = img.shape
    h0, w0 = int(np.floor(ph)), int(np.floor(pw))
    v = 0.0
    for dh in (0, 1):
        for dw in (0, 1):
            hh, ww = h0 + dh, w0 + dw
            if 0 <= hh < h and 0 <= ww < w:
                v += (ph - h0 if dh else 1 - (ph - h0)) * (pw - w0 if dw else 1 - (pw - w0)) * img[hh, ww]
    return v


def reference(x, w, offset, b=None, mask=None, group=1, offset_group=1, pads=(0, 0, 0, 0), strides=(1, 1),
              dilations=(1, 1)):
    n, c, _, _ = x.shape
    m, cg, kh, kw = w.shape
    oh, ow = offset.shape[2:]
    off = offset.reshape(n, offset_group, kh, kw, 2, oh, ow)
    msk = np.ones((n, offset_group, kh, kw, oh, ow)) if mask is None else mask.reshape(n, offset_group, kh, kw, oh, ow)
    y = np.zeros((n, m, oh, ow))
    for b_ in range(n):
        for o in range(m):
            g = o // (m // group)
            for ci in range(cg):
                cin = g * cg + ci
                og = cin // (c // offset_group)
                for i in range(oh):
                    for j in range(ow):
                        for a in range(kh):
                            for e in range(kw):
                                ph = i * strides[0] - pads[0] + a * dilations[0] + off[b_, og, a, e, 0, i, j]
                                pw = j * strides[1] - pads[1] + e * dilations[1] + off[b_, og, a, e, 1, i, j]
                                y[b_, o, i, j] += w[o, ci, a, e] * msk[b_, og, a, e, i, j] * \
                                    bilinear(x[b_, cin].astype(np.float64), ph, pw)
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


def test_groups_offset_groups_mask_bias(backend):
    x = RNG.standard_normal((2, 4, 5, 6)).astype(np.float32)
    w = RNG.standard_normal((6, 2, 2, 3)).astype(np.float32)        # group 2
    attrs = dict(group=2, offset_group=2, pads=(1, 0, 1, 2), strides=(2, 1), dilations=(1, 2))
    oh, ow = (5 + 2 - 2) // 2 + 1, (6 + 2 - 5) // 1 + 1
    offset = RNG.uniform(-2, 2, (2, 2 * 6 * 2, oh, ow)).astype(np.float32)   # some taps leave the image
    mask = RNG.uniform(0, 1, (2, 2 * 6, oh, ow)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    y = ops.DeformConv(x, w, offset, b, mask, backend=backend, **attrs)
    assert y.shape == (2, 6, oh, ow)
    np.testing.assert_allclose(y, reference(x, w, offset, b, mask, **attrs), rtol=1e-4, atol=1e-4)


def test_zero_offsets_are_conv_in_a_graph(backend):
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float64)
    w = RNG.standard_normal((2, 3, 3, 3)).astype(np.float64)
    g = dsl.Graph("dc")
    xi = g.input("x", (1, 3, 6, 6), dsl.f64)
    oi = g.input("offset", (1, 18, 6, 6), dsl.f64)
    g.output(ops.DeformConv(xi, w, oi, pads=(1, 1, 1, 1)), "y")
    y = g.compile(backend=backend).run({"x": x, "offset": np.zeros((1, 18, 6, 6))})["y"]
    np.testing.assert_allclose(y, ops.Conv(x, w, pads=(1, 1, 1, 1), backend="interpreter"), rtol=1e-12, atol=1e-12)


def test_f16(backend):
    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float16)
    w = RNG.standard_normal((1, 2, 2, 2)).astype(np.float16)
    offset = RNG.uniform(-1, 1, (1, 8, 3, 3)).astype(np.float16)
    y = ops.DeformConv(x, w, offset, backend=backend)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), reference(x, w, offset), rtol=5e-3, atol=5e-3)


def test_errors():
    x = np.zeros((1, 4, 5, 5), np.float32)
    w = np.zeros((2, 2, 3, 3), np.float32)
    with pytest.raises(VerifyError, match="X has 4 channels but W .* with group=1 needs 2"):
        ops.DeformConv(x, w, np.zeros((1, 18, 3, 3), np.float32), backend="interpreter")
    with pytest.raises(VerifyError, match=r"offset must be \(N, offset_group·kH·kW·2, oH, oW\) = \(1, 18, 3, 3\)"):
        ops.DeformConv(x, w, np.zeros((1, 9, 3, 3), np.float32), group=2, backend="interpreter")
    with pytest.raises(VerifyError, match="supports 2-D images only"):
        ops.DeformConv(np.zeros((1, 2, 5), np.float32), np.zeros((1, 2, 3), np.float32),
                       np.zeros((1, 6, 3), np.float32), backend="interpreter")
