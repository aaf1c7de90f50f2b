"""A QDQ graph runs in 8-bit integers from layer to layer (ops/qdq_fusion.py,
ops/qdq_data_movement.py): DQ -> Conv -> Relu/Clip -> Q is one FusedQLinearConv (the activation a
clamp of the requantized integers), MaxPool and Dropout run on the integers when the scales
match, Concat is a Concat of the integers or a QLinearConcat that requantizes the parts whose
scale differs.  Results against onnxruntime's float QDQ computation: one quantization step at
most.  Shapes are tiny and share one kernel specialization (u8 x, i8 w, 3x3) per backend."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as H  # noqa: E402
from onnx import numpy_helper as NH  # noqa: E402

import dsl  # noqa: E402
import ops  # noqa: E402
from ops.quant_concat import QLinearConcat  # noqa: E402
from ops.quant_conv_fused import FusedQLinearConv, quantized_bounds  # noqa: E402

RNG = np.random.default_rng(29)
SX, ZX = 0.04, 128
SHAPE = (1, 4, 6, 6)


def _model(nodes, inits, out_name="y"):
    graph = H.make_graph(nodes, "qdq", [H.make_tensor_value_info("x", TP.FLOAT, SHAPE)],
                         [H.make_tensor_value_info(out_name, TP.FLOAT, None)],
                         [NH.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _conv(prefix, src, cin, cout, inits, sy, zy, act=None, wmax=127):
    """DQ(w) -> Conv(src, w, bias) [-> act] -> Q(sy, zy) -> DQ: nodes, output name; weights in
    [-wmax, wmax]."""
    inits[f"{prefix}w"] = RNG.integers(-wmax, wmax + 1, (cout, cin, 3, 3)).astype(np.int8)
    inits[f"{prefix}ws"] = RNG.uniform(0.004, 0.02, cout).astype(np.float32)
    inits[f"{prefix}wz"] = np.zeros(cout, np.int8)
    inits[f"{prefix}b"] = RNG.uniform(-0.5, 0.5, cout).astype(np.float32)
    inits[f"{prefix}sy"], inits[f"{prefix}zy"] = np.float32(sy), np.uint8(zy)
    nodes = [H.make_node("DequantizeLinear", [f"{prefix}w", f"{prefix}ws", f"{prefix}wz"], [f"{prefix}wd"], axis=0),
             H.make_node("Conv", [src, f"{prefix}wd", f"{prefix}b"], [f"{prefix}c"], pads=[1, 1, 1, 1])]
    last = f"{prefix}c"
    if act is not None:
        name, bounds = act
        ins = [last]
        for k, v in zip(("lo", "hi"), bounds):
            inits[f"{prefix}{k}"] = np.float32(v)
            ins.append(f"{prefix}{k}")
        nodes.append(H.make_node(name, ins, [f"{prefix}a"]))
        last = f"{prefix}a"
    nodes += [H.make_node("QuantizeLinear", [last, f"{prefix}sy", f"{prefix}zy"], [f"{prefix}q"]),
              H.make_node("DequantizeLinear", [f"{prefix}q", f"{prefix}sy", f"{prefix}zy"], [f"{prefix}d"])]
    return nodes, f"{prefix}d"


def _input(inits):
    inits["sx"], inits["zx"] = np.float32(SX), np.uint8(ZX)
    return [H.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
            H.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"])]


def _ort_float(model, x):
    """onnxruntime running the QDQ graph as written (float Conv between Q/DQ pairs)."""
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _steps(got, want, scale):
    return np.abs(np.rint((got.astype(np.float64) - want) / np.float64(np.float32(scale)))).max()


# (activation, bounds, output zero point): zero points 0, 128 and 255; sy small enough that
# both ends of u8 saturate
EPILOGUES = [("Relu", (), 0), ("Relu", (), 128), ("Clip", (-0.6, 0.9), 255), ("Clip", (0.0, 6.0), 128),
             ("Clip", (-0.3, 0.4), 0)]


@pytest.mark.parametrize("act,bounds,zy", EPILOGUES)
def test_conv_relu_clip_runs_as_one_int8_conv_with_the_clamp_in_its_epilogue(backend, act, bounds, zy):
    inits = {}
    nodes = _input(inits)
    conv, out = _conv("c1", "xd", 4, 8, inits, 0.006, zy, act=(act, bounds))
    nodes += conv + [H.make_node("Identity", [out], ["y"])]
    model = _model(nodes, inits)
    m = dsl.load_onnx(model, backend=backend)
    fused = [n.op for n in m.graph.nodes if type(n.op) is FusedQLinearConv]
    assert len(fused) == 1 and fused[0].activation == act
    assert not any(type(n.op) in (ops.Conv, ops.Relu, ops.Clip) for n in m.graph.nodes)
    x = RNG.uniform(-4, 4, SHAPE).astype(np.float32)
    got = m.run({"x": x})["y"]
    want = _ort_float(model, x)
    assert _steps(got, want, 0.006) <= 1
    q = np.rint(got / np.float32(0.006)) + zy  # the integers: both ends reached where the range allows
    lo, hi = quantized_bounds(act, bounds, np.float32(0.006), np.uint8(zy))
    assert q.min() >= lo and q.max() <= hi
    assert q.min() == lo and q.max() == hi


def _layers_model(mismatched_pool: bool = False, wmax: int = 127, coarse_part: bool = False):
    """Q -> DQ -> Conv -> Relu -> Q -> DQ -> MaxPool -> Q -> DQ -> (Conv a, Conv b) -> Q -> DQ ->
    Concat (parts on two scales) -> Q -> DQ -> Dropout -> Q -> DQ -> y.  The Concat is on b's
    scale (a, finer, is retargeted), or with ``coarse_part`` on a's (b, coarser, is requantized)."""
    inits = {}
    nodes = _input(inits)
    conv, c1 = _conv("c1", "xd", 4, 8, inits, 0.05, 0, act=("Relu", ()), wmax=wmax)
    nodes += conv
    pool_scale = 0.07 if mismatched_pool else 0.05
    inits["ps"], inits["pz"] = np.float32(pool_scale), np.uint8(0)
    nodes += [H.make_node("MaxPool", [c1], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
              H.make_node("QuantizeLinear", ["p", "ps", "pz"], ["pq"]),
              H.make_node("DequantizeLinear", ["pq", "ps", "pz"], ["pd"])]
    ca, a = _conv("ca", "pd", 8, 4, inits, 0.03, 10, wmax=wmax)
    cb, b = _conv("cb", "pd", 8, 6, inits, 0.08, 3, wmax=wmax)
    inits["cs"], inits["cz"] = (np.float32(0.03), np.uint8(10)) if coarse_part else (np.float32(0.08), np.uint8(3))
    nodes += ca + cb + [H.make_node("Concat", [a, b], ["cat"], axis=1),
                        H.make_node("QuantizeLinear", ["cat", "cs", "cz"], ["catq"]),
                        H.make_node("DequantizeLinear", ["catq", "cs", "cz"], ["catd"]),
                        H.make_node("Dropout", ["catd"], ["drop"]),
                        H.make_node("QuantizeLinear", ["drop", "cs", "cz"], ["dq"]),
                        H.make_node("DequantizeLinear", ["dq", "cs", "cz"], ["y"])]
    return _model(nodes, inits)


@pytest.mark.parametrize("coarse_part", [False, True])
def test_a_qdq_model_runs_int8_from_layer_to_layer(backend, coarse_part):
    """The Concat's finer part is made by its convolution on the Concat's scale (a plain Concat,
    written in place); a coarser part keeps a QLinearConcat."""
    model = _layers_model(coarse_part=coarse_part)
    m = dsl.load_onnx(model, backend=backend)
    kinds = [type(n.op) for n in m.graph.nodes]
    # only the input's QuantizeLinear and the output's DequantizeLinear are left
    assert kinds.count(ops.QuantizeLinear) == 1 and kinds.count(ops.DequantizeLinear) == 1
    if coarse_part:
        assert kinds.count(FusedQLinearConv) == 1 and kinds.count(ops.QLinearConv) == 2 and QLinearConcat in kinds
    else:  # conv a: requantized to (0.08, 3), clamped to where its own u8 range on (0.03, 10) lands
        assert kinds.count(FusedQLinearConv) == 2 and kinds.count(ops.QLinearConv) == 1 and ops.Concat in kinds
        cat = next(n for n in m.graph.nodes if type(n.op) is ops.Concat)
        a = cat.inputs[0].producer
        assert type(a.op) is FusedQLinearConv and float(a.inputs[6].value) == np.float32(0.08)
        assert a.op.clamp(np.float32(0.08), np.uint8(3)) == (max(0, int(np.rint(-10 * np.float32(0.03) / np.float32(0.08))) + 3),
                                                             int(np.rint(245 * np.float32(0.03) / np.float32(0.08))) + 3)
    assert ops.MaxPool in kinds
    pool = next(n for n in m.graph.nodes if type(n.op) is ops.MaxPool)
    assert pool.inputs[0].spec.dtype == dsl.u8
    scale = 0.03 if coarse_part else 0.08
    for _ in range(2):
        x = RNG.uniform(-4, 4, SHAPE).astype(np.float32)
        assert _steps(m.run({"x": x})["y"], _ort_float(model, x), scale) <= 1


def test_max_pool_between_other_scales_stays_float():
    """Max commutes with requantization only on one scale: with another one the float path stays."""
    m = dsl.load_onnx(_layers_model(mismatched_pool=True), backend="interpreter")
    pool = next(n for n in m.graph.nodes if type(n.op).__name__.startswith("MaxPool"))
    assert pool.inputs[0].spec.dtype == dsl.f32


def _concat_graph(scales):
    """Concat of DQ(u8 parts) on ``scales`` (scale, zero point) -> Q on the last part's."""
    g = dsl.Graph("qcat")
    parts = []
    for k, (s, z) in enumerate(scales):
        q = g.input(f"q{k}", (2, k + 2, 3), dsl.u8)
        parts.append(ops.DequantizeLinear(q, g.constant(f"s{k}", np.float32(s)), g.constant(f"z{k}", np.uint8(z))))
    s, z = scales[-1]
    cat = ops.Concat(*parts, axis=1)
    g.output(ops.QuantizeLinear(cat, g.constant("so", np.float32(s)), g.constant("zo", np.uint8(z))), "y")
    return g


@pytest.mark.parametrize("scales", [((0.1, 7), (0.1, 7)), ((0.2, 0), (0.5, 250), (0.1, 128))])
def test_concat_of_quantized_parts_matches_the_float_path(backend, scales):
    g = _concat_graph(scales)
    feeds = {f"q{k}": RNG.integers(0, 256, (2, k + 2, 3)).astype(np.uint8) for k in range(len(scales))}
    model = g.compile(backend=backend)
    kinds = [type(n.op) for n in model.graph.nodes]
    same = len(set(scales)) == 1
    assert kinds == ([ops.Concat] if same else [QLinearConcat])
    s, z = scales[-1]
    want = np.concatenate([np.clip(np.rint((feeds[f"q{k}"].astype(np.float32) - zk) * np.float32(sk) / np.float32(s))
                                   + z, 0, 255) for k, (sk, zk) in enumerate(scales)], axis=1)
    got = model.run(feeds)["y"]
    np.testing.assert_array_equal(got, want.astype(np.uint8))  # saturates at both ends (0.5 vs 0.1)
    assert got.min() == 0 and got.max() == 255 or same


def test_qlinear_concat_names_its_bad_inputs():
    g = dsl.Graph("bad")
    a = g.input("a", (2, 3), dsl.u8)
    with pytest.raises(dsl.VerifyError, match="X_scale must be an f32 scalar"):
        QLinearConcat(g.constant("s", np.float32(0.1)), g.constant("z", np.uint8(0)), a,
                      g.constant("sa", np.array([0.1, 0.2], np.float32)), g.constant("za", np.uint8(0)), axis=1)
    with pytest.raises(dsl.VerifyError, match=r"\(X, X_scale, X_zero_point\) for each part"):
        QLinearConcat(g.constant("s2", np.float32(0.1)), g.constant("z2", np.uint8(0)), a, axis=1)


def test_fused_qlinear_conv_names_a_bad_activation():
    g = dsl.Graph("bad")
    x = g.input("x", (1, 4, 5, 5), dsl.u8)
    c = {k: g.constant(k, v) for k, v in dict(
        s=np.float32(0.1), z=np.uint8(0), w=np.ones((2, 4, 3, 3), np.int8), wz=np.int8(0)).items()}
    args = (x, c["s"], c["z"], c["w"], c["s"], c["wz"], c["s"], c["z"])
    with pytest.raises(dsl.VerifyError, match="activation 'Gelu'; accepted: 'Relu', 'Clip'"):
        FusedQLinearConv(*args, activation="Gelu")
    with pytest.raises(dsl.VerifyError, match="takes 2 activation_params"):
        FusedQLinearConv(*args, activation="Clip", activation_params=(1.0,))


def test_the_int8_graph_exports_and_onnxruntime_runs_it():
    """FusedQLinearConv is written as QLinearConv + Clip of its integers, QLinearConcat as
    onnxruntime's com.microsoft op: onnxruntime runs the export to opdsl's integers.  7-bit weights:
    onnxruntime's AVX2 u8·i8 path (vpmaddubsw) saturates pairs of full-range products."""
    ort = pytest.importorskip("onnxruntime")
    m = dsl.load_onnx(_layers_model(wmax=63, coarse_part=True), backend="interpreter")
    exported = m.graph.to_onnx()
    kinds = {(n.domain or "", n.op_type) for n in exported.graph.node}
    assert ("", "QLinearConv") in kinds and ("", "Clip") in kinds and ("com.microsoft", "QLinearConcat") in kinds
    assert not any(d == "com.opdsl" for d, _ in kinds)
    sess = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"])
    x = RNG.uniform(-4, 4, SHAPE).astype(np.float32)
    got = sess.run(None, {"x": x})[0]
    assert _steps(got, m.run({"x": x})["y"], 0.03) <= 1
