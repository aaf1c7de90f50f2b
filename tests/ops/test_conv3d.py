"""3-D Conv (N, C, D, H, W) on the direct kernel, every backend: pads, strides, dilations, group,
auto_pad, and the fused residual + activation epilogue."""
import itertools

import numpy as np
import pytest

import dsl
import ops

RNG = np.random.default_rng(17)


def conv3d_ref(x, w, b=None, strides=(1, 1, 1), dil=(1, 1, 1), pads=(0,) * 6, group=1):
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    k = w.shape[2:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0)) + tuple((pads[a], pads[a + 3]) for a in range(3)))
    outs = [(xp.shape[2 + a] - (k[a] - 1) * dil[a] - 1) // strides[a] + 1 for a in range(3)]
    y = np.zeros((n, m) + tuple(outs))
    mg = m // group
    for mm in range(m):
        g = mm // mg
        for o in itertools.product(*(range(v) for v in outs)):
            sl = tuple(slice(o[a] * strides[a], o[a] * strides[a] + (k[a] - 1) * dil[a] + 1, dil[a]) for a in range(3))
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + sl]
            y[(slice(None), mm) + o] = (patch * w[mm]).sum(axis=(1, 2, 3, 4))
    if b is not None:
        y += b.reshape(1, -1, 1, 1, 1)
    return y


CASES = [  # (x shape, M, kernel, strides, dilations, pads, group)
    ((1, 2, 4, 5, 4), 3, (2, 3, 2), (1, 1, 1), (1, 1, 1), (0, 1, 0, 1, 1, 1), 1),
    ((2, 4, 5, 4, 6), 4, (3, 2, 3), (2, 1, 2), (1, 2, 1), (1, 0, 1, 0, 1, 1), 2),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"g{c[6]}")
def test_conv3d_against_loops(backend, case):
    xs, m, k, s, d, p, g = case
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal((m, xs[1] // g) + k).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    y = ops.Conv(x, w, b, strides=s, dilations=d, pads=p, group=g, backend=backend)
    np.testing.assert_allclose(y, conv3d_ref(x, w, b, s, d, p, g), rtol=1e-4, atol=1e-4)


def test_conv3d_same_upper_and_fused_epilogue(backend):
    x = RNG.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 3, 3, 3)).astype(np.float32)
    y = ops.Conv(x, w, auto_pad="SAME_UPPER", backend=backend)
    np.testing.assert_allclose(y, conv3d_ref(x, w, pads=(1,) * 6), rtol=1e-4, atol=1e-4)
    # Conv -> Add -> Relu in a graph becomes one FusedConv with the residual and Relu
    g = dsl.Graph("c3")
    xi = g.input("x", x.shape, dsl.f32)
    zi = g.input("z", y.shape, dsl.f32)
    g.output(ops.Relu(ops.Add(ops.Conv(xi, w, pads=(1,) * 6), zi)), "y")
    model = g.compile(backend=backend)
    assert model.stats["fused"] == 2
    z = RNG.standard_normal(y.shape).astype(np.float32)
    np.testing.assert_allclose(model.run({"x": x, "z": z})["y"], np.maximum(conv3d_ref(x, w, pads=(1,) * 6) + z, 0),
                               rtol=1e-4, atol=1e-4)


def test_conv3d_rank_errors():
    with pytest.raises(dsl.VerifyError, match="Conv supports 1-D to 3-D images"):
        ops.Conv(np.zeros((1, 1, 2, 2, 2, 2), np.float32), np.zeros((1, 1, 1, 1, 1, 1), np.float32))
    with pytest.raises(dsl.VerifyError, match=r"Conv pads \[0, 0, 0, 0\] needs 6 values"):
        ops.Conv(np.zeros((1, 1, 3, 3, 3), np.float32), np.zeros((1, 1, 2, 2, 2), np.float32), pads=(0, 0, 0, 0))
