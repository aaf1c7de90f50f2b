"""ConvTranspose (1-D/2-D/3-D; strides, pads, dilations, group, output_padding, output_shape,
auto_pad) on every backend against a numpy scatter reference."""
import itertools

import numpy as np
import pytest

import dsl
import ops

RNG = np.random.default_rng(13)


def conv_transpose_ref(x, w, b=None, strides=None, dil=None, pads=None, out_pad=None, group=1,
                       output_shape=None, auto_pad="NOTSET"):
    """Scatter every input element over its window of the full output, then crop the pads."""
    r = x.ndim - 2
    strides, dil = strides or (1,) * r, dil or (1,) * r
    pads, out_pad = list(pads or (0,) * (2 * r)), out_pad or (0,) * r
    k = w.shape[2:]
    full = [strides[a] * (x.shape[2 + a] - 1) + out_pad[a] + (k[a] - 1) * dil[a] + 1 for a in range(r)]
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        outs = output_shape or [x.shape[2 + a] * strides[a] for a in range(r)]
        for a in range(r):
            total = full[a] - outs[a]
            pads[a] = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            pads[a + r] = total - pads[a]
    elif auto_pad == "VALID":
        pads = [0] * (2 * r)
    cg, mg = x.shape[1] // group, w.shape[1]
    big = np.zeros((x.shape[0], mg * group) + tuple(f + max(0, -pads[a]) + max(0, -pads[a + r]) for a, f in
                                                   enumerate(full)))
    shift = [max(0, -pads[a]) for a in range(r)]
    for c in range(x.shape[1]):
        g = c // cg
        for i in itertools.product(*(range(v) for v in x.shape[2:])):
            for t in itertools.product(*(range(v) for v in k)):
                o = tuple(i[a] * strides[a] + t[a] * dil[a] + shift[a] for a in range(r))
                big[(slice(None), slice(g * mg, (g + 1) * mg)) + o] += (
                    x[(slice(None), c) + i][:, None] * w[(c, slice(None)) + t][None, :])
    crop = tuple(slice(max(0, pads[a]), max(0, pads[a]) + (full[a] - pads[a] - pads[a + r])) for a in range(r))
    y = big[(slice(None), slice(None)) + crop]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * r)
    return y


CASES = [  # (x shape, w shape, params)
    ((2, 3, 5), (3, 2, 3), dict(strides=(2,), pads=(1, 0))),
    ((1, 2, 4), (2, 2, 5), dict(strides=(4,), dilations=(2,), pads=(3, 2), output_padding=(1,))),  # every 2nd tap
    ((1, 4, 4, 3), (4, 2, 3, 2), dict(strides=(2, 3), pads=(1, 0, 2, 1), dilations=(2, 1), output_padding=(1, 1))),
    ((2, 4, 3, 3), (4, 3, 2, 2), dict(group=2, strides=(2, 2))),
    ((1, 2, 3, 3), (2, 1, 3, 3), dict(strides=(3, 2), output_shape=(10, 8))),
    ((1, 2, 3, 4), (2, 2, 3, 3), dict(strides=(2, 2), auto_pad="SAME_UPPER")),
    ((1, 2, 3, 4), (2, 2, 3, 3), dict(strides=(2, 2), auto_pad="SAME_LOWER")),
    ((1, 2, 3, 4), (2, 2, 2, 3), dict(strides=(2, 1), auto_pad="VALID")),
    ((1, 2, 2, 3, 2), (2, 2, 2, 2, 3), dict(strides=(1, 2, 2), pads=(0, 1, 1, 1, 0, 0))),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{len(c[0]) - 2}d-" + "-".join(c[2]))
def test_against_scatter(backend, case):
    xs, ws, params = case
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(ws[1] * params.get("group", 1)).astype(np.float32)
    ref = conv_transpose_ref(x, w, b, params.get("strides"), params.get("dilations"), params.get("pads"),
                             params.get("output_padding"), params.get("group", 1), params.get("output_shape"),
                             params.get("auto_pad", "NOTSET"))
    y = ops.ConvTranspose(x, w, b, backend=backend, **params)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_no_bias_f64_and_f16(backend):
    for dt, tol in ((np.float64, 1e-10), (np.float16, 1e-2)):
        x = RNG.standard_normal((1, 2, 3, 3)).astype(dt)
        w = RNG.standard_normal((2, 3, 2, 2)).astype(dt)
        y = ops.ConvTranspose(x, w, strides=(2, 2), backend=backend)
        assert y.dtype == dt and y.shape == (1, 3, 6, 6)
        ref = conv_transpose_ref(x.astype(np.float64), w.astype(np.float64), strides=(2, 2))
        np.testing.assert_allclose(y.astype(np.float64), ref, rtol=tol, atol=tol)


def test_in_a_graph_with_unknown_batch(backend):
    g = dsl.Graph("deconv")
    xi = g.input("x", (None, 2, 4, 4), dsl.f32)
    w = RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)
    y = ops.ConvTranspose(xi, w, strides=(2, 2), pads=(1, 1, 1, 1), output_padding=(1, 1))
    g.output(y, "y")
    x = RNG.standard_normal((3, 2, 4, 4)).astype(np.float32)
    out = g.compile(backend=backend).run({"x": x})["y"]
    ref = conv_transpose_ref(x, w, strides=(2, 2), pads=(1, 1, 1, 1), out_pad=(1, 1))
    assert out.shape == (3, 3, 8, 8)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_bad_input():
    x = np.zeros((1, 4, 3, 3), np.float32)
    with pytest.raises(dsl.VerifyError, match="input has 4 channels but weights"):
        ops.ConvTranspose(x, np.zeros((2, 2, 3, 3), np.float32))
    with pytest.raises(dsl.VerifyError, match=r"strides \[2\] needs 2 values"):
        ops.ConvTranspose(x, np.zeros((4, 2, 3, 3), np.float32), strides=(2,))
    with pytest.raises(dsl.VerifyError, match="not divisible by group=3"):
        ops.ConvTranspose(x, np.zeros((4, 2, 3, 3), np.float32), group=3)
    with pytest.raises(dsl.VerifyError, match="bias must have shape"):
        ops.ConvTranspose(x, np.zeros((4, 2, 3, 3), np.float32), np.zeros(3, np.float32))
    with pytest.raises(dsl.VerifyError, match="ConvTranspose"):
        ops.ConvTranspose(x.astype(np.int32), np.zeros((4, 2, 3, 3), np.int32))
