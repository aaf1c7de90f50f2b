"""benchmarks/models.py: the BERT-style encoder layer is a valid model that onnxruntime runs
and that computes what it says (numpy reference); the light CNN paths exist."""
import collections

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from benchmarks import models  # noqa: E402


def test_bert_layer_is_the_layer_issue_10_asks_for(tmp_path):
    path = models.bert_layer(folder=str(tmp_path))
    assert path.parent == tmp_path and path.name == "bert_layer_b1_s128_d256_h4_ff1024_seed0.onnx"
    assert models.bert_layer(folder=str(tmp_path)) == path  # cached: written once
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert {"MatMul", "Add", "Reshape", "Transpose", "Softmax", "Div", "Mul", "Erf", "LayerNormalization"} <= set(ops)
    assert "Gelu" not in ops and ops["LayerNormalization"] == 2 and ops["Softmax"] == 1
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [1, 128, 256]
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    assert inits["ff.in.weight"].shape == (256, 1024) and list(inits["heads_shape"]) == [0, 0, 4, 64]
    mask = inits["attn.causal_mask"]
    assert mask.shape == (128, 128) and mask[0, 1] == models.MASK_VALUE and mask[1, 0] == 0 and mask[5, 5] == 0


def test_bert_layer_runs_on_onnxruntime_and_matches_numpy(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    path = models.bert_layer(folder=str(tmp_path), seq=16, d_model=32, heads=4, ff=64)
    model = onnx.load(str(path))
    x = np.random.default_rng(1).standard_normal((1, 16, 32)).astype(np.float32)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
    assert y.shape == (1, 16, 32) and y.dtype == np.float32
    np.testing.assert_allclose(y, models.bert_layer_reference(x, model), rtol=1e-4, atol=1e-4)
    # causal: the first position does not see the others
    x2 = x.copy()
    x2[0, 1:] += 1
    (y2,) = sess.run(None, {"x": x2})
    np.testing.assert_allclose(y2[0, 0], y[0, 0], rtol=1e-5, atol=1e-5)


def test_full_size_bert_layer_runs_on_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    path = models.bert_layer(folder=str(tmp_path))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": np.random.default_rng(2).standard_normal((1, 128, 256)).astype(np.float32)})
    assert y.shape == (1, 128, 256) and np.isfinite(y).all()
    np.testing.assert_allclose(y.mean(-1), 0, atol=0.1)  # the last LayerNorm (beta is small)


def test_light_model_paths():
    for short, stem in models.LIGHT_MODELS.items():
        path = models.light_model_path(short)
        assert path.name == f"light_{stem}.onnx" and path.exists()
        assert path.with_name(f"light_{stem}_output_0.pb").exists()
    assert models.light_model_path("bvlc_alexnet") == models.light_model_path("alexnet")
    with pytest.raises(ValueError, match="unknown light model 'lenet'; known: alexnet, densenet121"):
        models.light_model_path("lenet")


@pytest.mark.slow
def test_bert_layer_on_opdsl_matches_onnxruntime(tmp_path):
    """Once every op of the layer is registered (skips with the missing ones until then)."""
    ort = pytest.importorskip("onnxruntime")
    import dsl
    path = models.bert_layer(folder=str(tmp_path), seq=16, d_model=32, heads=4, ff=64)
    try:
        model = dsl.load_onnx(str(path), backend="numba")
    except dsl.OnnxImportError as e:
        if not e.missing:
            raise
        pytest.skip("missing ops: " + ", ".join(m.label for m in e.missing))
    x = np.random.default_rng(3).standard_normal((1, 16, 32)).astype(np.float32)
    (expected,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(model.run({"x": x})["y"], expected, rtol=1e-4, atol=1e-4)
