"""``model.run(feeds, trace=...)``: every node's inputs, outputs and params in order, on every
backend; ``first_difference`` finds the first node where two runs differ."""
import json

import numpy as np
import pytest

import dsl
from dsl.opgraph.trace import NodeTrace, first_difference, load_trace

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as H  # noqa: E402
from onnx import numpy_helper  # noqa: E402

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 3)).astype(np.float32)
B = RNG.standard_normal(3).astype(np.float32)


def _model(w=W, b=B):
    """x[2,4] -> MatMul(w) -> Add(b) -> LeakyRelu(alpha=0.1) -> y."""
    nodes = [H.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             H.make_node("Add", ["h", "b"], ["s"], name="add"),
             H.make_node("LeakyRelu", ["s"], ["y"], name="act", alpha=0.1)]
    g = H.make_graph(nodes, "m", [H.make_tensor_value_info("x", TP.FLOAT, [2, 4])],
                     [H.make_tensor_value_info("y", TP.FLOAT, [2, 3])],
                     [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = H.make_model(g, opset_imports=[H.make_opsetid("", 17)])
    m.ir_version = 8
    return m


X = RNG.standard_normal((2, 4)).astype(np.float32)


def _reference():
    h = X @ W
    s = h + B
    return h, s, np.where(s > 0, s, 0.1 * s)


def test_trace_gives_every_node_in_order(backend):
    model = dsl.load_onnx(_model(), backend=backend, fuse=False)
    seen = []
    got = model.run({"x": X}, trace=seen.append)
    h, s, y = _reference()
    np.testing.assert_allclose(got["y"], y, rtol=1e-5, atol=1e-6)
    assert [(r.index, r.name, r.op_type) for r in seen] == [(0, "mm", "MatMul"), (1, "add", "Add"),
                                                             (2, "act", "LeakyRelu")]
    assert all(isinstance(r, NodeTrace) for r in seen)
    np.testing.assert_allclose(seen[0].inputs["x"], X)
    np.testing.assert_allclose(seen[0].inputs["w"], W)
    np.testing.assert_allclose(seen[0].outputs["h"], h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(seen[1].inputs["h"], seen[0].outputs["h"])
    np.testing.assert_allclose(seen[1].outputs["s"], s, rtol=1e-5, atol=1e-6)
    assert seen[2].params["alpha"] == pytest.approx(0.1)
    np.testing.assert_allclose(seen[2].outputs["y"], got["y"])
    # the traced run and a plain run agree; a plain run after a traced one is unchanged
    np.testing.assert_array_equal(model.run({"x": X})["y"], got["y"])


def test_trace_folder_and_first_difference(backend, tmp_path):
    good = dsl.load_onnx(_model(), backend=backend, fuse=False)
    b = B.copy()
    b[1] += 0.5  # an injected difference in the second node's constant
    bad = dsl.load_onnx(_model(b=b), backend=backend, fuse=False)
    good.run({"x": X}, trace=tmp_path / "good")
    bad.run({"x": X}, trace=tmp_path / "bad")
    index = json.loads((tmp_path / "good" / "trace.json").read_text())["nodes"]
    assert [n["name"] for n in index] == ["mm", "add", "act"] and index[2]["params"]["alpha"] == pytest.approx(0.1)
    records = load_trace(tmp_path / "good")
    np.testing.assert_allclose(records[1].outputs["s"], _reference()[1], rtol=1e-5, atol=1e-6)
    assert first_difference(tmp_path / "good", records) is None
    diff = first_difference(tmp_path / "good", tmp_path / "bad")
    assert (diff.index, diff.node, diff.op_type, diff.output) == (1, "add", "Add", "s")
    assert diff.max_abs_diff == pytest.approx(0.5, rel=1e-4)
    assert "node 1 'add' (Add) output 's': max abs diff 0.5" in str(diff)


def test_backends_agree_node_by_node(compiled_backend):
    ref, got = [], []
    dsl.load_onnx(_model(), backend="interpreter", fuse=False).run({"x": X}, trace=ref.append)
    dsl.load_onnx(_model(), backend=compiled_backend, fuse=False).run({"x": X}, trace=got.append)
    assert first_difference(ref, got) is None


def test_bad_trace_argument(tmp_path):
    model = dsl.load_onnx(_model(), backend="interpreter", fuse=False)
    with pytest.raises(TypeError, match=r"trace: expected a callable taking a dsl.opgraph.trace.NodeTrace or a "
                                        r"folder path \(str or Path\), got int 3"):
        model.run({"x": X}, trace=3)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="exists and is not a folder"):
        model.run({"x": X}, trace=tmp_path / "file")
    with pytest.raises(ValueError, match="no trace.json"):
        load_trace(tmp_path)
