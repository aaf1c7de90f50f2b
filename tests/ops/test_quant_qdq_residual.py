"""A QDQ residual block runs on the 8-bit integers (ops/qdq_residual.py): DQ -> BatchNormalization
-> [Relu] -> Q is one QLinearBatchNormalization (ops/quant_batch_norm.py), DQ(a), DQ(b) -> Add /
Sum -> [Relu] -> Q one QLinearAdd / FusedQLinearAdd (ops/quant_add.py).  Results against
onnxruntime running the float QDQ graph as written: one quantization step at most.  Shapes are
tiny; the kernels' u8 -> u8 specializations are shared between tests."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as H  # noqa: E402
from onnx import numpy_helper as NH  # noqa: E402

import dsl  # noqa: E402
import ops  # noqa: E402
from ops.quant_add import FusedQLinearAdd, QLinearAdd  # noqa: E402
from ops.quant_batch_norm import QLinearBatchNormalization, channel_affine  # noqa: E402
from ops.quant_conv_batch_norm import QLinearConvBatchNormalization  # noqa: E402
from ops.quant_conv_fused import FusedQLinearConv  # noqa: E402

SHAPE = (1, 4, 5, 6)
FLOAT_BETWEEN = (ops.BatchNormalization, ops.Add, ops.Sum, ops.Relu, ops.Clip, ops.Conv)


def _model(nodes, inits, inputs, opset=13):
    graph = H.make_graph(nodes, "qdq", [H.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                         [H.make_tensor_value_info("y", TP.UINT8, None)],
                         [NH.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", opset), H.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def _ort(model, feeds, optimize=False):
    """onnxruntime; by default running the QDQ graph as written (float BN / Add between Q/DQ pairs)."""
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def _steps(got, want) -> int:
    return int(np.abs(got.astype(np.int64) - want.astype(np.int64)).max())


def _bn_params(rng, channels):
    """gamma of both signs (one channel's scale is negative), means and variances that send
    some values past both ends of the output range."""
    gamma = rng.uniform(0.5, 3.0, channels).astype(np.float32) * np.where(np.arange(channels) % 2, -1, 1)
    return dict(gamma=gamma.astype(np.float32), beta=rng.uniform(-1, 1, channels).astype(np.float32),
                mean=rng.uniform(-0.5, 0.5, channels).astype(np.float32),
                var=rng.uniform(0.2, 2.0, channels).astype(np.float32))


def _bn_model(rng, zx, zy, sy, act=None, shape=SHAPE):
    """u8 q -> DQ(0.03, zx) -> BatchNormalization [-> act] -> Q(sy, zy) -> y (u8)."""
    p = _bn_params(rng, shape[1])
    inits = {"sx": np.float32(0.03), "zx": np.uint8(zx), "sy": np.float32(sy), "zy": np.uint8(zy),
             "g": p["gamma"], "b": p["beta"], "m": p["mean"], "v": p["var"]}
    nodes = [H.make_node("DequantizeLinear", ["q", "sx", "zx"], ["xd"]),
             H.make_node("BatchNormalization", ["xd", "g", "b", "m", "v"], ["bn"], epsilon=1e-3)]
    last = "bn"
    if act is not None:
        name, bounds = act
        ins = [last] + [k for k in ("lo", "hi")[:len(bounds)]]
        inits.update({k: np.float32(v) for k, v in zip(("lo", "hi"), bounds)})
        nodes.append(H.make_node(name, ins, ["a"]))
        last = "a"
    nodes.append(H.make_node("QuantizeLinear", [last, "sy", "zy"], ["y"]))
    return _model(nodes, inits, [("q", TP.UINT8, shape)])


# (input zero point, output zero point, output scale, activation): zero points 0, 128, 255; the
# small output scales saturate both ends of u8
BN_CASES = [(128, 128, 0.02, None), (0, 0, 0.01, ("Relu", ())), (255, 255, 0.015, None),
            (128, 128, 0.01, ("Clip", (-0.7, 0.9)))]


@pytest.mark.parametrize("zx,zy,sy,act", BN_CASES)
def test_batch_norm_between_qdq_pairs_is_a_per_channel_requantization(backend, zx, zy, sy, act):
    rng = np.random.default_rng(1)
    model = _bn_model(rng, zx, zy, sy, act)
    m = dsl.load_onnx(model, backend=backend)
    kinds = [type(n.op) for n in m.graph.nodes]
    assert kinds == [QLinearBatchNormalization]
    assert m.graph.nodes[0].op.activation == (act[0] if act else "")
    q = rng.integers(0, 256, SHAPE).astype(np.uint8)
    got = m.run({"q": q})["y"]
    want = _ort(model, {"q": q})
    assert _steps(got, want) <= 1
    if zy == 128 and act is None:  # saturated at both ends
        assert got.min() == 0 and got.max() == 255


def test_batch_norm_on_large_channels_reads_its_table(backend):
    """512 elements per channel and image (>= 128): the tabulated map (lookup_channels), same integers."""
    rng = np.random.default_rng(7)
    shape = (1, 3, 16, 32)
    model = _bn_model(rng, 128, 128, 0.02, ("Relu", ()), shape=shape)
    m = dsl.load_onnx(model, backend=backend)
    (node,) = m.graph.nodes
    assert node.op.select(*(t.spec for t in node.inputs)) == "table"
    q = rng.integers(0, 256, shape).astype(np.uint8)
    got = m.run({"q": q})["y"]
    assert _steps(got, _ort(model, {"q": q})) <= 1
    assert got.min() == 128 and got.max() == 255  # the Relu's clamp at the zero point; saturation


@pytest.mark.parametrize("shape", [SHAPE, (1, 2, 16, 32)])
def test_i8_batch_norm_and_add_match_the_float_path(shape):
    """i8 activations (QuantType.QInt8): both BN kernels (the table indexes from -128) and the add,
    on the interpreter, against numpy's float DQ -> BN -> Q and DQ -> Add -> Q."""
    rng = np.random.default_rng(8)
    p = _bn_params(rng, shape[1])
    g = dsl.Graph("i8")
    q = g.input("q", shape, dsl.i8)
    k = {n: g.constant(n, v) for n, v in dict(sx=np.float32(0.03), zx=np.int8(-20), sy=np.float32(0.02),
                                               zy=np.int8(5), **p).items()}
    bn = ops.BatchNormalization(ops.DequantizeLinear(q, k["sx"], k["zx"]), k["gamma"], k["beta"], k["mean"], k["var"])
    bq = ops.QuantizeLinear(bn, k["sy"], k["zy"])
    added = ops.Add(ops.DequantizeLinear(bq, k["sy"], k["zy"]), ops.DequantizeLinear(q, k["sx"], k["zx"]))
    g.output(bq, "bn")
    g.output(ops.QuantizeLinear(added, k["sx"], k["zx"]), "y")
    model = g.compile(backend="interpreter")
    kinds = [type(n.op) for n in model.graph.nodes]
    assert kinds == [QLinearBatchNormalization, QLinearAdd]
    x = rng.integers(-128, 128, shape).astype(np.int8)
    out = model.run({"q": x})
    f = np.float32
    a, b = channel_affine(p["gamma"], p["beta"], p["mean"], p["var"], 1e-5)
    v = ((x.astype(f) - f(-20)) * f(0.03)) * a[:, None, None] + b[:, None, None]
    want_bn = np.clip(np.rint(v / f(0.02)) + f(5), -128, 127)
    np.testing.assert_array_equal(out["bn"], want_bn.astype(np.int8))
    s = (want_bn.astype(f) - f(5)) * f(0.02) + (x.astype(f) - f(-20)) * f(0.03)
    np.testing.assert_array_equal(out["y"], np.clip(np.rint(s / f(0.03)) - 20, -128, 127).astype(np.int8))
    assert out["bn"].min() == -128 and out["bn"].max() == 127


def test_batch_norm_affine_is_onnxruntimes_float_batch_norm_bit_for_bit():
    """a = scale · (1 / sqrt(var + eps)), b = B - mean · a, y = x·a + b: what onnxruntime computes."""
    rng = np.random.default_rng(2)
    p = _bn_params(rng, 8)
    x = rng.standard_normal((1, 8, 7, 7)).astype(np.float32) * 3
    inits = [NH.from_array(v, k) for k, v in p.items()]
    graph = H.make_graph([H.make_node("BatchNormalization", ["x", "gamma", "beta", "mean", "var"], ["y"], epsilon=1e-5)],
                         "bn", [H.make_tensor_value_info("x", TP.FLOAT, x.shape)],
                         [H.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 13)])
    model.ir_version = 8
    a, b = channel_affine(p["gamma"], p["beta"], p["mean"], p["var"], 1e-5)
    mine = x * a[:, None, None] + b[:, None, None]
    np.testing.assert_array_equal(_ort(model, {"x": x}), mine)


def _add_model(sa, za, sb, zb, sc, zc, op="Add", act=None):
    """u8 a, u8 b -> DQ each -> Add / Sum [-> Relu] -> Q(sc, zc) -> y."""
    inits = {"sa": np.float32(sa), "za": np.uint8(za), "sb": np.float32(sb), "zb": np.uint8(zb),
             "sc": np.float32(sc), "zc": np.uint8(zc)}
    nodes = [H.make_node("DequantizeLinear", ["a", "sa", "za"], ["ad"]),
             H.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bd"]),
             H.make_node(op, ["ad", "bd"], ["s"])]
    last = "s"
    if act == "Clip":  # Clip(-1, 2): integers clamped to [Q(-1), Q(2)]
        inits.update(lo=np.float32(-1.0), hi=np.float32(2.0))
        nodes.append(H.make_node("Clip", [last, "lo", "hi"], ["r"]))
        last = "r"
    elif act:
        nodes.append(H.make_node(act, [last], ["r"]))
        last = "r"
    nodes.append(H.make_node("QuantizeLinear", [last, "sc", "zc"], ["y"]))
    return _model(nodes, inits, [("a", TP.UINT8, SHAPE), ("b", TP.UINT8, SHAPE)])


# mismatched scales and zero points 0/128/255; the output scale small enough to saturate both ends
ADD_CASES = [("Add", None, (0.05, 128, 0.02, 0, 0.03, 128)), ("Sum", "Relu", (0.05, 128, 0.02, 255, 0.02, 0)),
             ("Add", "Relu", (0.01, 0, 0.04, 128, 0.02, 128)), ("Add", "Clip", (0.05, 128, 0.02, 0, 0.03, 128))]


@pytest.mark.parametrize("op,act,params", ADD_CASES)
def test_add_of_dequantized_tensors_is_an_int8_add(backend, op, act, params):
    rng = np.random.default_rng(3)
    model = _add_model(*params, op=op, act=act)
    m = dsl.load_onnx(model, backend=backend)
    kinds = [type(n.op) for n in m.graph.nodes]
    assert kinds == [FusedQLinearAdd if act else QLinearAdd]
    feeds = {k: rng.integers(0, 256, SHAPE).astype(np.uint8) for k in ("a", "b")}
    for k in ("a", "b"):  # the extremes of the sum, on both ends
        feeds[k].flat[:2] = (255, 0)
    got = m.run(feeds)["y"]
    assert _steps(got, _ort(model, feeds)) <= 1
    zc, sc = params[5], np.float32(params[4])
    lo, hi = {None: (0, 255), "Relu": (zc, 255),
              "Clip": (int(np.rint(np.float32(-1) / sc)) + zc, int(np.rint(np.float32(2) / sc)) + zc)}[act]
    assert got.min() == lo and got.max() == hi  # saturation; Relu clamps at the zero point, Clip at its bounds


def test_qlinear_add_matches_onnxruntimes_contrib_op_with_broadcast():
    """com.microsoft QLinearAdd as a model writes it (onnxruntime's kernel, optimized session), with
    a (1, C, 1, 1) B broadcast: within one step (its kernel multiplies by scale ratios)."""
    rng = np.random.default_rng(4)
    inits = {"sa": np.float32(0.05), "za": np.uint8(100), "sb": np.float32(0.03), "zb": np.uint8(7),
             "sc": np.float32(0.04), "zc": np.uint8(128)}
    node = H.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["y"], domain="com.microsoft")
    model = _model([node], inits, [("a", TP.UINT8, SHAPE), ("b", TP.UINT8, (1, SHAPE[1], 1, 1))])
    feeds = {"a": rng.integers(0, 256, SHAPE).astype(np.uint8),
             "b": rng.integers(0, 256, (1, SHAPE[1], 1, 1)).astype(np.uint8)}
    m = dsl.load_onnx(model, backend="interpreter")
    got = m.run(feeds)["y"]
    assert _steps(got, _ort(model, feeds, optimize=True)) <= 1
    a = (feeds["a"].astype(np.float32) - 100) * np.float32(0.05)
    b = (feeds["b"].astype(np.float32) - 7) * np.float32(0.03)
    want = np.clip(np.rint((a + b) / np.float32(0.04)) + 128, 0, 255)
    np.testing.assert_array_equal(got, want.astype(np.uint8))
    planned = next(line for line in str(m).splitlines() if "nodes planned" in line).split()[-5:-2]
    assert planned == ["0", "of", "1"]  # the broadcast copy is host work: run() at every run
    np.testing.assert_array_equal(m.run(feeds)["y"], got)


def _residual_block(rng):
    """The resnet block quantize_static writes (u8 activations, i8 weights):
    Q(x) -> DQ -> Conv -> Q -> DQ -> BN -> Q -> DQ -> Sum(., DQ(x)) -> Relu -> Q -> DQ -> y (float)."""
    c = SHAPE[1]
    p = _bn_params(rng, c)
    inits = {"sx": np.float32(0.04), "zx": np.uint8(128), "w": rng.integers(-63, 64, (c, c, 3, 3)).astype(np.int8),
             "ws": rng.uniform(0.004, 0.02, c).astype(np.float32), "wz": np.zeros(c, np.int8),
             "s1": np.float32(0.08), "z1": np.uint8(120), "gq": np.rint(p["gamma"] / 0.025).astype(np.int8),
             "gs": np.float32(0.025), "gz": np.int8(0), "b": p["beta"], "m": p["mean"], "v": p["var"],
             "s2": np.float32(0.06), "z2": np.uint8(128), "s3": np.float32(0.05), "z3": np.uint8(0)}
    q = "QuantizeLinear"
    d = "DequantizeLinear"
    nodes = [H.make_node(q, ["x", "sx", "zx"], ["xq"]), H.make_node(d, ["xq", "sx", "zx"], ["xd"]),
             H.make_node(d, ["w", "ws", "wz"], ["wd"], axis=0),
             H.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1]),
             H.make_node(q, ["c", "s1", "z1"], ["cq"]), H.make_node(d, ["cq", "s1", "z1"], ["cd"]),
             H.make_node(d, ["gq", "gs", "gz"], ["g"]),  # BN's scale, quantized as a weight
             H.make_node("BatchNormalization", ["cd", "g", "b", "m", "v"], ["bn"]),
             H.make_node(q, ["bn", "s2", "z2"], ["bq"]), H.make_node(d, ["bq", "s2", "z2"], ["bd"]),
             H.make_node("Sum", ["bd", "xd"], ["s"]), H.make_node("Relu", ["s"], ["r"]),
             H.make_node(q, ["r", "s3", "z3"], ["rq"]), H.make_node(d, ["rq", "s3", "z3"], ["yf"])]
    graph = H.make_graph(nodes, "block", [H.make_tensor_value_info("x", TP.FLOAT, SHAPE)],
                         [H.make_tensor_value_info("yf", TP.FLOAT, None)],
                         [NH.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_a_qdq_residual_block_runs_int8_between_layers(backend):
    rng = np.random.default_rng(5)
    model = _residual_block(rng)
    m = dsl.load_onnx(model, backend=backend)
    kinds = [type(n.op) for n in m.graph.nodes]
    assert not any(k in FLOAT_BETWEEN for k in kinds), kinds
    # the convolution's integers are read by the batch normalization alone: one node (ops/quant_conv_batch_norm.py)
    assert kinds.count(QLinearConvBatchNormalization) == 1 and kinds.count(FusedQLinearAdd) == 1
    assert kinds.count(ops.QuantizeLinear) == 1 and kinds.count(ops.DequantizeLinear) == 1  # the input's, the output's
    for _ in range(2):
        x = rng.uniform(-4, 4, SHAPE).astype(np.float32)
        got = m.run({"x": x})["yf"]
        want = _ort(model, {"x": x})
        assert np.abs(got - want).max() <= np.float32(0.05) * 1.001
    planned = next(line for line in str(m).splitlines() if "nodes planned" in line).split()[-5:-2]
    assert planned[0] == planned[2], planned  # every node runs from its recorded launches


def test_the_int8_residual_exports_and_onnxruntime_runs_it():
    """QLinearBatchNormalization is written as DQ -> BN -> Q, FusedQLinearAdd as com.microsoft
    QLinearAdd + a Clip of its integers."""
    rng = np.random.default_rng(6)
    model = _residual_block(rng)
    m = dsl.load_onnx(model, backend="interpreter")
    exported = m.graph.to_onnx()
    kinds = {(n.domain or "", n.op_type) for n in exported.graph.node}
    assert ("com.microsoft", "QLinearAdd") in kinds and ("", "BatchNormalization") in kinds
    assert not any(dom == "com.opdsl" for dom, _ in kinds)
    x = rng.uniform(-4, 4, SHAPE).astype(np.float32)
    got = _ort(exported, {"x": x}, optimize=True)
    assert np.abs(got - m.run({"x": x})["yf"]).max() <= np.float32(0.05) * 1.001


def test_int8_add_and_batch_norm_name_their_bad_inputs():
    g = dsl.Graph("bad")
    a = g.input("a", (1, 4, 2, 2), dsl.u8)
    c = {k: g.constant(k, v) for k, v in dict(s=np.float32(0.1), z=np.uint8(0), s2=np.array([0.1, 0.2], np.float32),
                                               p=np.ones(4, np.float32), p3=np.ones(3, np.float32)).items()}
    with pytest.raises(dsl.VerifyError, match="QLinearAdd B_scale must be an f32 scalar"):
        QLinearAdd(a, c["s"], c["z"], a, c["s2"], c["z"], c["s"], c["z"])
    with pytest.raises(dsl.VerifyError, match="do not broadcast"):
        QLinearAdd(a, c["s"], c["z"], g.input("b", (1, 3, 2, 2), dsl.u8), c["s"], c["z"], c["s"], c["z"])
    with pytest.raises(dsl.VerifyError, match="activation 'Gelu'; accepted: 'Relu', 'Clip'"):
        FusedQLinearAdd(a, c["s"], c["z"], a, c["s"], c["z"], c["s"], c["z"], activation="Gelu")
    with pytest.raises(dsl.VerifyError, match=r"QLinearBatchNormalization mean must be a float \(C,\) = \(4,\)"):
        QLinearBatchNormalization(a, c["s"], c["z"], c["p"], c["p"], c["p3"], c["p"], c["s"], c["z"])
    with pytest.raises(dsl.VerifyError, match="X must be i8 or u8"):
        QLinearBatchNormalization(g.input("f", (1, 4, 2, 2), dsl.f32), c["s"], c["z"], c["p"], c["p"], c["p"],
                                  c["p"], c["s"], c["z"])
    bn = (a, c["s"], c["z"], c["p"], c["p"], c["p"], c["p"], c["s"], c["z"])
    with pytest.raises(dsl.VerifyError, match="QLinearBatchNormalization activation 'Gelu'; accepted: '', 'Relu', 'Clip'"):
        QLinearBatchNormalization(*bn, activation="Gelu")
    with pytest.raises(dsl.VerifyError, match=r"QLinearBatchNormalization Clip bounds \[6.0, 0.0\] need min <= max"):
        QLinearBatchNormalization(*bn, activation="Clip", activation_params=(6.0, 0.0))


def test_batch_norm_with_a_non_constant_parameter_stays_float():
    """The rule needs every BN parameter a constant: a graph input keeps the float path."""
    g = dsl.Graph("bn")
    q = g.input("q", SHAPE, dsl.u8)
    mean = g.input("mean", (SHAPE[1],), dsl.f32)
    one = g.constant("one", np.ones(SHAPE[1], np.float32))
    x = ops.DequantizeLinear(q, g.constant("s", np.float32(0.1)), g.constant("z", np.uint8(128)))
    y = ops.BatchNormalization(x, one, one, mean, one)
    g.output(ops.QuantizeLinear(y, g.constant("so", np.float32(0.1)), g.constant("zo", np.uint8(128))), "y")
    kinds = [type(n.op) for n in g.compile(backend="interpreter").graph.nodes]
    assert ops.BatchNormalization in kinds and QLinearBatchNormalization not in kinds
    assert FusedQLinearConv not in kinds
