"""MaxPool (Indices, storage_order), AveragePool, LpPool and the Global pools on every backend
against a numpy reference looping over windows: 1-D/2-D/3-D, pads, strides, dilations,
ceil_mode, auto_pad, count_include_pad, dtypes, graph use and bad input."""
import itertools

import numpy as np
import pytest

import dsl
import ops
from ops import pool as P

RNG = np.random.default_rng(11)


def out_size(i, k, s, d, pb, pe, ceil):
    span = (k - 1) * d + 1
    room = i + pb + pe - span
    if not ceil:
        return room // s + 1
    o = -(-room // s) + 1
    return o - 1 if (o - 1) * s >= i + pb else o


def same_pads(i, k, s, d, upper):
    o = -(-i // s)
    total = max(0, (o - 1) * s + (k - 1) * d + 1 - i)
    b = total // 2 if upper else total - total // 2
    return b, total - b


def pool_ref(x, kind, k, strides=None, dil=None, pads=None, ceil=False, auto_pad="NOTSET",
             count_include_pad=False, p=2, storage_order=0):
    """(y, indices) by looping over every window of x (N, C, spatial...)."""
    r = len(k)
    strides = strides or (1,) * r
    dil = dil or (1,) * r
    pads = list(pads or (0,) * (2 * r))
    sp = x.shape[2:]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        for a in range(r):
            pads[a], pads[a + r] = same_pads(sp[a], k[a], strides[a], dil[a], auto_pad == "SAME_UPPER")
    elif auto_pad == "VALID":
        pads = [0] * (2 * r)
    outs = [out_size(sp[a], k[a], strides[a], dil[a], pads[a], pads[a + r], ceil) for a in range(r)]
    y = np.zeros(x.shape[:2] + tuple(outs), np.float64)
    ind = np.full(y.shape, -1, np.int64)
    plane = int(np.prod(sp))
    for n, c in itertools.product(range(x.shape[0]), range(x.shape[1])):
        for o in itertools.product(*(range(v) for v in outs)):
            axes = [[o[a] * strides[a] - pads[a] + t * dil[a] for t in range(k[a])] for a in range(r)]
            inside = [[q for q in ax if 0 <= q < sp[a]] for a, ax in enumerate(axes)]
            padded = [[q for q in ax if q < sp[a] + pads[a + r]] for a, ax in enumerate(axes)]
            pos = list(itertools.product(*inside))
            vals = np.array([x[(n, c) + q] for q in pos], np.float64)
            if kind == "max":
                j = int(np.argmax(vals))  # first largest
                y[(n, c) + o] = vals[j]
                q = pos[j]
                if storage_order:
                    flat = sum(q[a] * int(np.prod(sp[:a])) for a in range(r))
                else:
                    flat = int(np.ravel_multi_index(q, sp))
                ind[(n, c) + o] = (n * x.shape[1] + c) * plane + flat
            elif kind == "avg":
                cnt = int(np.prod([len(v) for v in (padded if count_include_pad else inside)]))
                y[(n, c) + o] = vals.sum() / cnt
            else:
                y[(n, c) + o] = (np.abs(vals) ** p).sum() ** (1.0 / p)
    return y, ind


CASES = [  # (shape, kernel, strides, dilations, pads, ceil_mode)
    ((1, 2, 9), (3,), (2,), (1,), (1, 1), 0),
    ((2, 2, 6, 7), (3, 2), (2, 1), (1, 1), (1, 0, 1, 1), 0),
    ((1, 3, 7, 7), (3, 3), (2, 2), (1, 1), (0, 0, 0, 0), 1),        # ceil: last window partly out
    ((1, 1, 6, 6), (2, 2), (3, 3), (1, 1), (1, 1, 1, 1), 1),        # ceil: would start in end padding
    ((1, 2, 8, 7), (2, 3), (1, 2), (2, 2), (1, 1, 0, 1), 1),        # dilations
    ((1, 2, 5, 6, 5), (2, 3, 2), (2, 1, 2), (1, 2, 1), (1, 1, 0, 0, 1, 1), 0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{len(c[1])}d-k{''.join(map(str, c[1]))}-ceil{c[5]}")
def test_max_avg_lp_against_loops(backend, case):
    shape, k, s, d, pads, ceil = case
    x = RNG.standard_normal(shape).astype(np.float32)
    y, ind = ops.MaxPool(x, kernel_shape=k, strides=s, dilations=d, pads=pads, ceil_mode=ceil, backend=backend)
    ry, rind = pool_ref(x, "max", k, s, d, pads, ceil)
    np.testing.assert_array_equal(y, ry.astype(np.float32))
    np.testing.assert_array_equal(ind, rind)
    np.testing.assert_array_equal(x.ravel()[ind], y)
    for cip in (0, 1):
        y = ops.AveragePool(x, kernel_shape=k, strides=s, dilations=d, pads=pads, ceil_mode=ceil,
                            count_include_pad=cip, backend=backend)
        np.testing.assert_allclose(y, pool_ref(x, "avg", k, s, d, pads, ceil, count_include_pad=cip)[0],
                                   rtol=1e-5, atol=1e-6)
    for p in (1, 2, 3):
        y = ops.LpPool(x, kernel_shape=k, strides=s, dilations=d, pads=pads, ceil_mode=ceil, p=p, backend=backend)
        np.testing.assert_allclose(y, pool_ref(x, "lp", k, s, d, pads, ceil, p=p)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_auto_pad(backend, auto_pad):
    x = RNG.standard_normal((1, 2, 8, 6)).astype(np.float32)
    k, s = (3, 2), (2, 2)
    y, ind = ops.MaxPool(x, kernel_shape=k, strides=s, auto_pad=auto_pad, backend=backend)
    ry, rind = pool_ref(x, "max", k, s, auto_pad=auto_pad)
    np.testing.assert_array_equal(y, ry.astype(np.float32))
    np.testing.assert_array_equal(ind, rind)
    y = ops.AveragePool(x, kernel_shape=k, strides=s, auto_pad=auto_pad, backend=backend)
    np.testing.assert_allclose(y, pool_ref(x, "avg", k, s, auto_pad=auto_pad)[0], rtol=1e-5, atol=1e-6)
    if auto_pad == "SAME_UPPER":
        assert y.shape == (1, 2, 4, 3)
    # auto_pad ignores ceil_mode (VALID: floor((8 - 3) / 2) + 1 = 3 rows, not 4)
    yc = ops.AveragePool(x, kernel_shape=k, strides=s, auto_pad=auto_pad, ceil_mode=1, backend=backend)
    np.testing.assert_array_equal(yc, y)


def test_storage_order_column_major(backend):
    x = RNG.standard_normal((2, 2, 5, 4, 3)).astype(np.float32)
    _, ind = ops.MaxPool(x, kernel_shape=(2, 2, 2), strides=(2, 1, 2), storage_order=1, backend=backend)
    np.testing.assert_array_equal(ind, pool_ref(x, "max", (2, 2, 2), (2, 1, 2), storage_order=1)[1])


def test_max_pool_ties_keep_the_first_and_ints(backend):
    x = np.array([[[[1, 5, 5], [5, 0, 2], [3, 3, 3]]]], np.uint8)
    y, ind = ops.MaxPool(x, kernel_shape=(2, 2), backend=backend)
    np.testing.assert_array_equal(y, [[[[5, 5], [5, 3]]]])
    np.testing.assert_array_equal(ind, [[[[1, 1], [3, 7]]]])
    xi = RNG.integers(-128, 127, (1, 3, 8), endpoint=True).astype(np.int8)
    y, _ = ops.MaxPool(xi, kernel_shape=(3,), strides=(2,), pads=(1, 1), backend=backend)
    np.testing.assert_array_equal(y, pool_ref(xi, "max", (3,), (2,), pads=(1, 1))[0].astype(np.int8))


def test_f16_and_f64(backend):
    for dt, tol in ((np.float16, 2e-3), (np.float64, 1e-12)):
        x = RNG.standard_normal((1, 2, 6, 6)).astype(dt)
        y = ops.AveragePool(x, kernel_shape=(3, 3), pads=(1, 1, 1, 1), count_include_pad=1, backend=backend)
        assert y.dtype == dt
        ref = pool_ref(x, "avg", (3, 3), pads=(1, 1, 1, 1), count_include_pad=True)[0]
        np.testing.assert_allclose(y.astype(np.float64), ref, rtol=tol, atol=tol)
        y, _ = ops.MaxPool(x, kernel_shape=(2, 2), backend=backend)
        np.testing.assert_array_equal(y, pool_ref(x, "max", (2, 2))[0].astype(dt))


@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 4, 2)], ids=lambda s: f"{len(s) - 2}d")
def test_global_pools(backend, shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    axes = tuple(range(2, len(shape)))
    keep = dict(axis=axes, keepdims=True)
    np.testing.assert_array_equal(ops.GlobalMaxPool(x, backend=backend), x.max(**keep))
    np.testing.assert_allclose(ops.GlobalAveragePool(x, backend=backend), x.mean(**keep), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.GlobalLpPool(x, p=3, backend=backend),
                               (np.abs(x.astype(np.float64)) ** 3).sum(**keep) ** (1 / 3), rtol=1e-5)


def test_in_a_graph_with_indices(backend):
    g = dsl.Graph("pools")
    xi = g.input("x", (None, 3, 8, 8), dsl.f32)
    y, ind = ops.MaxPool(xi, kernel_shape=(2, 2), strides=(2, 2))
    g.output(ops.GlobalAveragePool(ops.AveragePool(y, kernel_shape=(2, 2), strides=(2, 2))), "avg")
    g.output(ind, "ind")
    model = g.compile(backend=backend)
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    out = model.run({"x": x})
    ry, rind = pool_ref(x, "max", (2, 2), (2, 2))
    np.testing.assert_array_equal(out["ind"], rind)
    np.testing.assert_allclose(out["avg"], ry.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)


SQUARE_CASES = [  # (shape, k, stride, pads, ceil_mode): max_pool2d_rows' edges and clipping
    ((1, 3, 13, 11), 3, 2, (0, 0, 0, 0), 0),
    ((1, 2, 9, 10), 3, 2, (1, 1, 1, 1), 1),   # window clipped on every side, ceil overhang
    ((2, 2, 7, 6), 2, 1, (1, 0, 0, 1), 0),    # asymmetric pads
    ((1, 1, 4, 4), 5, 3, (2, 2, 2, 2), 1),    # every column an edge column
    ((1, 2, 7, 37), 3, 2, (1, 1, 1, 1), 1),   # two 16-lane vectors of a row and a scalar rest
    ((1, 1, 5, 32), 2, 2, (0, 0, 0, 0), 0),   # whole vectors only
    ((1, 1, 3, P.ROW + 7), 3, 2, (1, 1, 1, 1), 1),  # wider than the row buffer: max_pool2d_kernel
]


@pytest.mark.parametrize("case", SQUARE_CASES, ids=lambda c: f"k{c[1]}s{c[2]}-ceil{c[4]}")
def test_square_windows_without_indices(backend, case):
    """A MaxPool whose Indices nothing reads compiles window and stride into its kernel; rows up
    to ROW pixels take the two-pass kernel (a row buffer), wider ones max_pool2d_kernel."""
    shape, k, s, pads, ceil = case
    g = dsl.Graph("maxpool")
    xi = g.input("x", shape, dsl.f32)
    y, _ = ops.MaxPool(xi, kernel_shape=(k, k), strides=(s, s), pads=pads, ceil_mode=ceil)
    g.output(y, "y")
    model = g.compile(backend=backend)
    want = P.max_pool2d_rows if shape[-1] <= P.ROW else P.max_pool2d_kernel
    assert model._impls[g.nodes[0].name] is want
    x = RNG.standard_normal(shape).astype(np.float32)
    ref = pool_ref(x, "max", (k, k), (s, s), pads=pads, ceil=ceil)[0].astype(np.float32)
    np.testing.assert_array_equal(model.run({"x": x})["y"], ref)


@pytest.mark.parametrize("dt", [dsl.f16, dsl.f64], ids=str)
def test_square_windows_of_f16_and_f64_rows(backend, dt):
    """The row kernel's vector pass on f16 (lanes computed in f32) and f64 storage."""
    g = dsl.Graph("maxpool_rows")
    xi = g.input("x", (1, 2, 5, 21), dt)
    g.output(ops.MaxPool(xi, kernel_shape=(3, 3), strides=(2, 2))[0], "y")
    model = g.compile(backend=backend)
    assert model._impls[g.nodes[0].name] is P.max_pool2d_rows
    x = RNG.standard_normal((1, 2, 5, 21)).astype(dt.np)
    np.testing.assert_array_equal(model.run({"x": x})["y"], pool_ref(x, "max", (3, 3), (2, 2))[0].astype(dt.np))


@pytest.mark.parametrize("width", [9, 35])
def test_square_windows_of_int8_without_indices(backend, width):
    """int8 rows, shorter than one vector and of two vectors and a rest."""
    g = dsl.Graph("maxpool_i8")
    xi = g.input("x", (1, 2, 7, width), dsl.i8)
    g.output(ops.MaxPool(xi, kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))[0], "y")
    x = RNG.integers(-128, 128, (1, 2, 7, width)).astype(np.int8)
    ref = pool_ref(x, "max", (3, 3), (2, 2), pads=(1, 1, 1, 1))[0].astype(np.int8)
    np.testing.assert_array_equal(g.compile(backend=backend).run({"x": x})["y"], ref)


def test_opset_ranges_have_their_attributes():
    from dsl.opgraph import registry
    assert registry.lookup("", "MaxPool", 7) is P.MaxPoolV1
    assert registry.lookup("", "MaxPool", 11) is P.MaxPoolV10
    assert registry.lookup("", "AveragePool", 19) is P.AveragePoolV19
    with pytest.raises(TypeError, match="has no param 'dilations'"):
        P.AveragePoolV10(dilations=(2, 2))
    with pytest.raises(TypeError, match="has no param 'ceil_mode'"):
        P.MaxPoolV8(ceil_mode=1)
    x = np.zeros((1, 1, 4, 4), np.float32)
    assert isinstance(P.MaxPoolV1(x, kernel_shape=(2, 2)), np.ndarray)  # no Indices before opset 8


def test_bad_input():
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(dsl.VerifyError, match="MaxPool needs kernel_shape"):
        ops.MaxPool(x)
    with pytest.raises(dsl.VerifyError, match=r"MaxPool strides \[1\] needs 2 values"):
        ops.MaxPool(x, kernel_shape=(2, 2), strides=(1,))
    with pytest.raises(dsl.VerifyError, match="does not fit input size 4"):
        ops.AveragePool(x, kernel_shape=(5, 5))
    with pytest.raises(dsl.VerifyError, match="auto_pad 'SAME'"):
        ops.AveragePool(x, kernel_shape=(2, 2), auto_pad="SAME")
    with pytest.raises(dsl.VerifyError, match="AveragePool"):
        ops.AveragePool(x.astype(np.int8), kernel_shape=(2, 2))
    with pytest.raises(dsl.VerifyError, match="supports 1-D to 3-D images"):
        ops.GlobalMaxPool(np.zeros((2, 3), np.float32))
    with pytest.raises(dsl.VerifyError, match="LpPool p must be > 0"):
        ops.LpPool(x, kernel_shape=(2, 2), p=0)


def test_max_unpool_inverts_max_pool(backend):
    x = RNG.standard_normal((2, 3, 6, 4)).astype(np.float32)
    y, ind = ops.MaxPool(x, kernel_shape=(2, 2), strides=(2, 2), backend=backend)
    u = ops.MaxUnpool(y, ind, kernel_shape=(2, 2), strides=(2, 2), backend=backend)
    ref = np.where(x == np.repeat(np.repeat(y, 2, axis=2), 2, axis=3), x, 0)  # each window's max kept
    np.testing.assert_array_equal(u, ref)
    # an output_shape input embeds the unpooled image at the low corner (onnx's reference)
    big = ops.MaxUnpool(y, ind, np.array([2, 3, 7, 5], np.int64), kernel_shape=(2, 2), strides=(2, 2),
                        backend=backend)
    assert big.shape == (2, 3, 7, 5)
    np.testing.assert_array_equal(big[:, :, :6, :4], ref)
    assert not big[:, :, 6:].any() and not big[:, :, :, 4:].any()
    with pytest.raises(dsl.VerifyError, match="MaxUnpool Indices"):
        ops.MaxUnpool(y, ind[:, :2], kernel_shape=(2, 2))
    with pytest.raises(dsl.VerifyError, match=r"MaxUnpool kernel_shape \[2\] needs 2 values"):
        ops.MaxUnpool(y, ind, kernel_shape=(2,))


# --------------------------------------------------------------------------- SIMD kernels (ops/pool_fast.py)

def _blocked_run(op, kernel, x, out_shapes, backend, want_ind=False):
    """Run ``op`` on the NCHWc16 storage of x as a compiled model would; -> plain outputs."""
    from dsl.opgraph import formats as F
    from dsl.opgraph.spec import TensorSpec
    ys = [np.full(F.physical_shape(out_shapes[0], "nchwc16"), np.nan, np.float32)]
    if len(out_shapes) > 1:
        ys.append(np.zeros(out_shapes[1], np.int64) if want_ind else None)
    op.run(kernel, [F.to_nchwc16_ref(x)], ys, backend, specs=(TensorSpec(x.shape, dsl.f32, "nchwc16"),))
    c = x.shape[1]
    assert not ys[0][:, -1, ..., c % 16:].any() if c % 16 else True  # padding channels stay zero
    return [F.to_plain_ref(ys[0], c)] + ys[1:]


@pytest.mark.parametrize("hw", [(1, 1), (4, 4), (13, 13), (3, 7)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_global_pools_simd_rows(backend, hw):
    """f32 global pools sum 16 pixels a vector then the tail; channels split across the team."""
    x = RNG.standard_normal((2, 5) + hw).astype(np.float32) + 3
    keep = dict(axis=(2, 3), keepdims=True)
    assert ops.GlobalAveragePool().select(dsl.TensorSpec.of(x), backend) == "plain"
    np.testing.assert_array_equal(ops.GlobalMaxPool(x, backend=backend), x.max(**keep))
    np.testing.assert_allclose(ops.GlobalAveragePool(x, backend=backend), x.mean(**keep), rtol=1e-6)


@pytest.mark.parametrize("shape", [(2, 20, 3, 5), (1, 32, 1, 1), (1, 7, 13, 13)], ids=str)
def test_global_pools_blocked(backend, shape):
    """On NCHWc16 storage a vector holds 16 channels of a pixel; padding channels stay zero."""
    x = RNG.standard_normal(shape).astype(np.float32)
    out = shape[:2] + (1, 1)
    keep = dict(axis=(2, 3), keepdims=True)
    y, = _blocked_run(ops.GlobalMaxPool(), P.global_pool_blocked, x, [out], backend)
    np.testing.assert_array_equal(y, x.max(**keep))
    y, = _blocked_run(ops.GlobalAveragePool(), P.global_pool_blocked, x, [out], backend)
    np.testing.assert_allclose(y, x.mean(**keep), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(2, 20, 3, 5), (1, 32, 2, 2)], ids=str)
def test_global_pools_blocked_write_plain(backend, shape):
    """NCHWc16 in, plain (N, C, 1, 1) out: every image's C channels in place, nothing past them
    written (a partial last block, two images whose blocks do not align)."""
    from dsl.opgraph import formats as F
    x = RNG.standard_normal(shape).astype(np.float32)
    keep = dict(axis=(2, 3), keepdims=True)
    for op, ref in ((ops.GlobalMaxPool(), x.max(**keep)), (ops.GlobalAveragePool(), x.mean(**keep)),
                    (ops.AveragePool(kernel_shape=shape[2:]), x.mean(**keep))):
        spec = dsl.TensorSpec(shape, dsl.f32, "nchwc16")
        assert op.select_plain_format(spec) == (("nchwc16",), "plain")
        y = np.full(shape[0] * shape[1] + 3, np.nan, np.float32)
        op.run(op.kernels[op.select(spec, backend)], [F.to_nchwc16_ref(x)], [y[:-3].reshape(ref.shape)], backend)
        np.testing.assert_allclose(y[:-3].reshape(ref.shape), ref, rtol=1e-5, atol=1e-6)
        assert np.isnan(y[-3:]).all()


BLOCKED_CASES = [  # (shape, k, strides, pads, dilations, ceil_mode)
    ((1, 20, 13, 11), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), 1),   # squeezenet's 3x3/2 ceil pools
    ((1, 16, 12, 12), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0),   # resnet50's stem pool
    ((2, 5, 7, 6), (2, 3), (1, 2), (1, 0, 0, 2), (1, 1), 0),      # rectangular, asymmetric pads
    ((1, 3, 9, 8), (2, 2), (2, 1), (1, 1, 1, 1), (2, 3), 1),      # dilated taps clipped at the edges
    ((1, 4, 5, 2), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 0),      # rows narrower than a window: no inner column
    ((1, 17, 4, 23), (2, 3), (1, 3), (0, 2, 1, 2), (1, 1), 1),    # inner columns between clipped ones, stride 3
]


@pytest.mark.parametrize("case", BLOCKED_CASES, ids=lambda c: f"k{c[1]}s{c[2]}d{c[4]}-ceil{c[5]}")
def test_max_pool_blocked(backend, case):
    """2-D MaxPool on NCHWc16 storage: one 16-channel vector max per tap; with Indices wanted
    the plain kernel runs on a plain copy and both outputs match the loops."""
    shape, k, s, pads, dil, ceil = case
    x = RNG.standard_normal(shape).astype(np.float32)
    op = ops.MaxPool(kernel_shape=k, strides=s, pads=pads, dilations=dil, ceil_mode=ceil)
    ry, rind = pool_ref(x, "max", k, s, dil=dil, pads=pads, ceil=ceil)
    y, _ = _blocked_run(op, P.max_pool2d_blocked, x, [ry.shape, ry.shape], backend)
    np.testing.assert_array_equal(y, ry.astype(np.float32))
    y, ind = _blocked_run(op, P.max_pool2d_blocked, x, [ry.shape, ry.shape], backend, want_ind=True)
    np.testing.assert_array_equal(y, ry.astype(np.float32))
    np.testing.assert_array_equal(ind, rind)


def test_blocked_pools_in_a_graph(backend):
    """After a grouped Conv (NCHWc16) MaxPool and GlobalAveragePool stay blocked, no reorder
    between them, and the model matches the all-plain compile."""
    g = dsl.Graph("blocked_pools")
    xi = g.input("x", (1, 16, 9, 9), dsl.f32)
    w = g.constant("w", RNG.standard_normal((18, 8, 3, 3)).astype(np.float32) * 0.1)
    y, _ = ops.MaxPool(ops.Conv(xi, w, pads=[1, 1, 1, 1], group=2), kernel_shape=(3, 3), strides=(2, 2),
                       ceil_mode=1)
    g.output(ops.GlobalAveragePool(y), "y")
    auto = g.compile(backend=backend)
    pools = [n for n in auto.graph.nodes if n.op.op_type in ("MaxPool", "GlobalAveragePool")]
    assert [n.inputs[0].spec.format for n in pools] == ["nchwc16", "nchwc16"]
    assert [auto._impls[n.name] for n in pools] == [P.max_pool2d_blocked, P.global_pool_blocked]
    # the graph output is plain: the global pool writes it so, no Reorder after it
    assert pools[1].outputs[0].spec.format == "plain" and auto.graph.nodes[-1] is pools[1]
    x = RNG.standard_normal((1, 16, 9, 9)).astype(np.float32)
    plain = g.compile(backend=backend, formats="plain").run({"x": x})["y"]
    np.testing.assert_allclose(auto.run({"x": x})["y"], plain, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(1, 5, 7, 7), (2, 3, 4, 6)], ids=str)
def test_average_pool_over_the_whole_image(backend, shape):
    """AveragePool whose window is the whole unpadded image (ResNet's last pool) runs the SIMD
    global average; a padded one keeps pool_kernel."""
    x = RNG.standard_normal(shape).astype(np.float32)
    k = shape[2:]
    op = ops.AveragePool(kernel_shape=k)
    assert op.select(dsl.TensorSpec.of(x), backend) == "global"
    np.testing.assert_allclose(op(x, backend=backend), x.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
    padded = ops.AveragePool(kernel_shape=k, pads=(1, 1, 1, 1))
    assert padded.select(dsl.TensorSpec.of(x), backend) == "default"
    np.testing.assert_allclose(padded(x, backend=backend), pool_ref(x, "avg", k, pads=(1, 1, 1, 1))[0],
                               rtol=1e-5, atol=1e-6)


def test_fast_pools_in_a_compiled_model(backend):
    """The SIMD kernels are what a compiled model launches (run() hands them the model's
    recorded kernel), and the results match numpy."""
    g = dsl.Graph("fast_pools")
    xi = g.input("x", (1, 20, 11, 11), dsl.f32)
    y, _ = ops.MaxPool(xi, kernel_shape=(3, 3), strides=(2, 2), ceil_mode=1)
    g.output(ops.AveragePool(y, kernel_shape=(5, 5)), "avg")
    g.output(ops.GlobalMaxPool(y), "max")
    model = g.compile(backend=backend)
    impls = {n.op.op_type: model._impls[n.name] for n in model.graph.nodes}
    assert impls == {"MaxPool": P.max_pool2d_rows, "AveragePool": P.global_pool_plain,
                     "GlobalMaxPool": P.global_pool_plain}
    x = RNG.standard_normal((1, 20, 11, 11)).astype(np.float32)
    ry = pool_ref(x, "max", (3, 3), (2, 2), ceil=True)[0].astype(np.float32)
    out = model.run({"x": x})
    np.testing.assert_allclose(out["avg"], ry.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["max"], ry.max(axis=(2, 3), keepdims=True))
