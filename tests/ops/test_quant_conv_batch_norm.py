"""A QDQ convolution followed by a QDQ BatchNormalization runs as one QLinearConvBatchNormalization
(ops/quant_conv_batch_norm.py, the pass in ops/qdq_residual.py): the batch normalization's
per-channel map done in the direct int8 kernel's store (ops/conv_int8_direct.py), or on a scratch
image of the convolution's integers for the other kernels.  Results against onnxruntime running
the float QDQ graph as written: one quantization step at most.  The 4-channel 3×3 convolution on
7-bit weights is the residual test's (tests/ops/test_quant_qdq_residual.py): one direct kernel
specialization per backend."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as H  # noqa: E402
from onnx import numpy_helper as NH  # noqa: E402

import dsl  # noqa: E402
from ops.conv_int8_direct import SecondRequantization, conv_int8_direct  # noqa: E402
from ops.gemm_int8 import Int8Tile  # noqa: E402
from ops.quant_batch_norm import QLinearBatchNormalization, channel_affine  # noqa: E402
from ops.quant_conv_batch_norm import QLinearConvBatchNormalization  # noqa: E402
from test_quant_qdq_residual import SHAPE, _bn_params, _ort, _steps  # noqa: E402


def _conv_bn_model(rng, z1, z2, s2, act=None, conv_act=None, stride=1, channels=SHAPE[1], shape=SHAPE, bias=True):
    """u8 x -> DQ -> Conv 3×3 (i8 per-channel weights) [-> conv_act] -> Q(0.08, z1) -> DQ ->
    BatchNormalization [-> act] -> Q(s2, z2) -> y (u8)."""
    c = shape[1]
    p = _bn_params(rng, channels)
    inits = {"sx": np.float32(0.04), "zx": np.uint8(128), "w": rng.integers(-63, 64, (channels, c, 3, 3)).astype(np.int8),
             "ws": rng.uniform(0.004, 0.02, channels).astype(np.float32), "wz": np.zeros(channels, np.int8),
             "s1": np.float32(0.08), "z1": np.uint8(z1), "g": p["gamma"], "b": p["beta"], "m": p["mean"],
             "v": p["var"], "s2": np.float32(s2), "z2": np.uint8(z2),
             "cb": rng.uniform(-0.5, 0.5, channels).astype(np.float32)}
    nodes = [H.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xd"]),
             H.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             H.make_node("Conv", ["xd", "wd"] + (["cb"] if bias else []), ["c"], pads=[1, 1, 1, 1],
                         strides=[stride, stride])]
    last = "c"
    if conv_act == "Relu":  # DQ -> Conv -> Relu -> Q: a FusedQLinearConv first
        nodes.append(H.make_node("Relu", [last], ["ca"]))
        last = "ca"
    nodes += [H.make_node("QuantizeLinear", [last, "s1", "z1"], ["cq"]),
              H.make_node("DequantizeLinear", ["cq", "s1", "z1"], ["cd"]),
              H.make_node("BatchNormalization", ["cd", "g", "b", "m", "v"], ["bn"], epsilon=1e-3)]
    last = "bn"
    if act is not None:
        name, bounds = act
        inits.update({k: np.float32(v) for k, v in zip(("lo", "hi"), bounds)})
        nodes.append(H.make_node(name, [last] + ["lo", "hi"][:len(bounds)], ["a"]))
        last = "a"
    nodes.append(H.make_node("QuantizeLinear", [last, "s2", "z2"], ["y"]))
    graph = H.make_graph(nodes, "conv_bn", [H.make_tensor_value_info("x", TP.UINT8, shape)],
                         [H.make_tensor_value_info("y", TP.UINT8, None)],
                         [NH.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 13)])
    model.ir_version = 8
    return model


# (conv output zero point, BN output zero point, BN output scale, BN activation, conv activation):
# zero points 0 / 128 / 255; the small output scales saturate both ends of u8
CASES = [(128, 128, 0.02, None, None), (0, 0, 0.01, ("Relu", ()), "Relu"), (255, 255, 0.015, None, None),
         (120, 128, 0.01, ("Clip", (-0.7, 0.9)), None)]


@pytest.mark.parametrize("z1,z2,s2,act,conv_act", CASES)
def test_conv_then_batch_norm_is_one_node_with_the_float_paths_integers(backend, z1, z2, s2, act, conv_act):
    rng = np.random.default_rng(11)
    model = _conv_bn_model(rng, z1, z2, s2, act, conv_act, bias=conv_act is None)
    m = dsl.load_onnx(model, backend=backend)
    (node,) = m.graph.nodes
    assert type(node.op) is QLinearConvBatchNormalization
    assert node.op.bn_activation == (act[0] if act else "") and node.op.activation == (conv_act or "")
    x = rng.integers(0, 256, SHAPE).astype(np.uint8)
    got = m.run({"x": x})["y"]
    assert _steps(got, _ort(model, {"x": x})) <= 1
    if act is None:  # saturated at both ends
        assert got.min() == 0 and got.max() == 255
    elif act[0] == "Relu":
        assert got.min() == z2
    planned = next(line for line in str(m).splitlines() if "nodes planned" in line).split()[-5:-2]
    assert planned == ["1", "of", "1"]  # the node runs from its declared launches


def test_strided_conv_with_many_channels_maps_a_scratch_image(compiled_backend):
    """A 3×3/2 convolution on 20 channels runs on the im2col GEMM (ops/conv_int8.py), not the
    direct kernel: its integers go to a scratch buffer the batch normalization's kernel maps."""
    rng = np.random.default_rng(12)
    shape = (1, 20, 7, 8)
    model = _conv_bn_model(rng, 128, 128, 0.02, ("Relu", ()), stride=2, channels=4, shape=shape)
    m = dsl.load_onnx(model, backend=compiled_backend)
    assert [type(n.op) for n in m.graph.nodes] == [QLinearConvBatchNormalization]
    x = rng.integers(0, 256, shape).astype(np.uint8)
    for _ in range(2):  # the planned run again: the scratch image is remade
        got = m.run({"x": x})["y"]
        assert _steps(got, _ort(model, {"x": x})) <= 1
    assert got.min() == 128 and got.max() == 255


@pytest.mark.parametrize("backend", ["interpreter", "opencl", pytest.param("numba", marks=pytest.mark.slow)],
                         indirect=True)
def test_direct_kernel_second_requantization_against_numpy(backend):
    """conv_int8_direct's ``post`` stage alone: per-channel a (both signs) and b, the first stage's
    integers taken through the second in f32, clamped to [lo, hi]."""
    rng = np.random.default_rng(13)
    x = rng.integers(0, 256, (1, 4, 5, 6)).astype(np.uint8)
    w = rng.integers(-63, 64, (4, 4, 3, 3)).astype(np.int8)
    mult = rng.uniform(2e-3, 6e-3, 4).astype(np.float32)
    bias = rng.integers(-500, 500, 4).astype(np.int32)
    a = np.array([1.5, -2.0, 0.7, 3.0], np.float32)
    b = np.array([0.3, -0.2, 0.0, 1.1], np.float32)
    post = SecondRequantization(np.stack([a, b]), 0.08, 0.02, 100.0, 3.0, 250.0)
    y = np.zeros((1, 4, 5, 6), np.uint8)
    conv_int8_direct(x, w, y, np.array([128], np.uint8), [3, 3, 1, 1, 1, 1, 1, 1, 5, 6], mult, bias, 120,
                     backend=backend, post=post, tile=_tile_for(backend))
    acc = _conv_sum(x.astype(np.int64) - 128, w.astype(np.int64)) + bias[None, :, None, None]
    f = np.float32
    q = np.clip(np.rint(acc.astype(f) * mult[None, :, None, None]) + f(120), 0, 255).astype(f)
    v = (q - f(120)) * f(0.08) * a[None, :, None, None] + b[None, :, None, None]
    want = np.clip(np.rint(v / f(0.02)) + f(100), 3, 250)
    assert _steps(y, want.astype(np.uint8)) <= 1  # rint of an f32 product: a .5 may land either way
    assert y.min() == 3 and y.max() == 250


def _tile_for(backend):
    """The interpreter's small tiles (every panel and row-tile tail reached), as test_conv_int8_direct's."""
    return Int8Tile(V=4, MR=2) if backend == "interpreter" else None


def _conv_sum(x, w):
    """Σ x·w of a 3×3 convolution padded by 1 (x already minus its zero point), in i64."""
    n, c, h, wd = x.shape
    xp = np.zeros((n, c, h + 2, wd + 2), np.int64)
    xp[:, :, 1:-1, 1:-1] = x
    out = np.zeros((n, w.shape[0], h, wd), np.int64)
    for kh in range(3):
        for kw in range(3):
            out += np.einsum("nchw,mc->nmhw", xp[:, :, kh:kh + h, kw:kw + wd], w[:, :, kh, kw])
    return out


def test_conv_batch_norm_exports_and_onnxruntime_runs_it():
    """Written back as QLinearConv [+ Clip] and DQ -> BatchNormalization -> [Relu] -> Q."""
    rng = np.random.default_rng(14)
    model = _conv_bn_model(rng, 0, 0, 0.01, ("Relu", ()), "Relu")
    m = dsl.load_onnx(model, backend="interpreter")
    exported = m.graph.to_onnx()
    kinds = [n.op_type for n in exported.graph.node]
    assert "QLinearConv" in kinds and "BatchNormalization" in kinds and "Clip" in kinds
    assert not any(n.domain == "com.opdsl" for n in exported.graph.node)
    x = rng.integers(0, 256, SHAPE).astype(np.uint8)
    np.testing.assert_array_equal(_ort(exported, {"x": x}), m.run({"x": x})["y"])


def test_conv_read_by_another_node_keeps_its_batch_norm_apart():
    """The convolution's integers are also a graph output: both nodes stay."""
    rng = np.random.default_rng(15)
    model = _conv_bn_model(rng, 128, 128, 0.02)
    model.graph.output.append(H.make_tensor_value_info("cq", TP.UINT8, None))
    m = dsl.load_onnx(model, backend="interpreter")
    kinds = {type(n.op) for n in m.graph.nodes}
    assert QLinearBatchNormalization in kinds and QLinearConvBatchNormalization not in kinds


def test_conv_batch_norm_names_its_bad_inputs():
    g = dsl.Graph("bad")
    x = g.input("x", (1, 4, 5, 6), dsl.u8)
    k = {n: g.constant(n, v) for n, v in dict(
        s=np.float32(0.1), z=np.uint8(0), w=np.ones((4, 4, 3, 3), np.int8), wz=np.int8(0), b=np.zeros(4, np.int32),
        p=np.ones(4, np.float32), p3=np.ones(3, np.float32), s64=np.float64(0.1)).items()}
    conv = (x, k["s"], k["z"], k["w"], k["s"], k["wz"], k["s"], k["z"], k["b"])
    with pytest.raises(dsl.VerifyError, match=r"batch normalization mean must be a float \(4,\) tensor"):
        QLinearConvBatchNormalization(*conv, k["p"], k["p"], k["p3"], k["p"], k["s"], k["z"])
    with pytest.raises(dsl.VerifyError, match="needs an f32 Z_scale"):
        QLinearConvBatchNormalization(*conv, k["p"], k["p"], k["p"], k["p"], k["s64"], k["z"])
    bn = (k["p"], k["p"], k["p"], k["p"], k["s"], k["z"])
    with pytest.raises(dsl.VerifyError, match="bn_activation: activation 'Gelu'; accepted: '', 'Relu', 'Clip'"):
        QLinearConvBatchNormalization(*conv, *bn, bn_activation="Gelu")
    with pytest.raises(dsl.VerifyError, match=r"Clip bounds \[1.0, 0.0\] need min <= max"):
        QLinearConvBatchNormalization(*conv, *bn, bn_activation="Clip", bn_activation_params=(1.0, 0.0))


def test_batch_norm_parameters_match_the_affine_map():
    """The pass hands the node BN's own constants: a and b as channel_affine computes them."""
    rng = np.random.default_rng(16)
    model = _conv_bn_model(rng, 128, 128, 0.02)
    (node,) = dsl.load_onnx(model, backend="interpreter").graph.nodes
    params = [t.spec.value for t in node.inputs[9:13]]
    stage = node.op.second_stage(np.float32(0.08), *params, np.float32(0.02), np.uint8(128), np.uint8)
    a, b = channel_affine(*params, 1e-3)
    np.testing.assert_array_equal(stage.table, np.stack([a, b]))
    assert (stage.s1, stage.s2, stage.z2, stage.lo, stage.hi) == (np.float32(0.08), np.float32(0.02), 128.0, 0.0, 255.0)
