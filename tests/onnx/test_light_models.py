"""The nine light CNNs shipped in the onnx wheel (``onnx/backend/test/data/light``), loaded
with ``dsl.load_onnx`` on numba and checked against their shipped expected output.

onnx's runner (``onnx.backend.test.runner``, the ``real`` kind) feeds these models an input
it generates -- ``Runner.generate_dummy_data(input, random=False)``: arange(n) / n in the
input's shape -- and compares with ``light_<name>_output_0.pb`` using the tolerances of
``data/real/test_<name>/data.json``.  This test does the same.  zfnet512 and shufflenet
run by default; all nine run under ``-m slow``.  A model that uses an op opdsl does not
have yet skips with the list of missing ops (conformance.missing_ops), never fails.
"""
from __future__ import annotations

import os

import pytest

onnx = pytest.importorskip("onnx")

import conformance  # noqa: E402 (tests/onnx is on sys.path under pytest)

from benchmarks import models  # noqa: E402

# the two cheapest from a cold compile cache (2 cores, quiet machine, all ops merged):
# zfnet512 82 s, shufflenet 101 s, squeezenet 121 s; zfnet512 also covers LRN and Gemm
DEFAULT = ("zfnet512", "shufflenet")
ALL = tuple(models.LIGHT_MODELS)


def _tolerances(stem: str):
    from onnx.backend.test.loader import load_model_tests
    for case in load_model_tests(kind="real"):
        if case.model_name == stem:
            return case.rtol, case.atol
    return 1e-3, 1e-7  # onnx's defaults for a model test


def light_case(short: str):
    """(model, feeds, expected outputs, rtol, atol) as onnx's runner makes them."""
    from onnx.backend.test.runner import Runner
    path = models.light_model_path(short)
    model = onnx.load(str(path))
    stem = models.LIGHT_MODELS[short]
    inits = {t.name for t in model.graph.initializer}
    feeds = {x.name: Runner.generate_dummy_data(x, seed=0, name=stem, random=False)
             for x in model.graph.input if x.name not in inits}
    expected = []
    for i in range(len(model.graph.output)):
        t = onnx.TensorProto()
        with open(os.path.join(path.parent, f"light_{stem}_output_{i}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        expected.append(onnx.numpy_helper.to_array(t))
    return (model, feeds, expected) + _tolerances(stem)


def check_light_model(short: str, backend: str = "numba") -> None:
    from onnx.backend.test.runner import Runner

    import dsl
    model, feeds, expected, rtol, atol = light_case(short)
    missing = conformance.missing_ops(model)
    if missing:
        pytest.skip(f"light_{models.LIGHT_MODELS[short]}: missing ops: {', '.join(missing)}")
    out = dsl.load_onnx(model, backend=backend).run(feeds)
    Runner.assert_similar_outputs(expected, [out[o.name] for o in model.graph.output], rtol=rtol, atol=atol)


def test_the_nine_models_and_their_data_are_shipped():
    for short in ALL:
        path = models.light_model_path(short)
        assert path.with_name(path.stem + "_output_0.pb").exists()
    assert _tolerances("densenet121") == (2e-3, 1e-7)


def test_missing_ops_are_listed_for_every_model():
    """What the skips below say, computed the same way (an empty list once the ops land)."""
    for short in ALL:
        missing = conformance.missing_ops(onnx.load(str(models.light_model_path(short))))
        assert missing == sorted(missing) and all(isinstance(m, str) and m for m in missing)


@pytest.mark.parametrize("short", DEFAULT)
def test_generated_input_reproduces_the_shipped_output_on_onnxruntime(short):
    """The input made here is the one the shipped expected output was computed from."""
    from onnx.backend.test.runner import Runner
    ort = pytest.importorskip("onnxruntime")
    model, feeds, expected, rtol, atol = light_case(short)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    Runner.assert_similar_outputs(expected, sess.run(None, feeds), rtol=rtol, atol=atol)


@pytest.mark.parametrize("short", DEFAULT)
def test_light_model(short):
    check_light_model(short)


@pytest.mark.slow
@pytest.mark.parametrize("short", ALL)
def test_light_model_all(short):
    check_light_model(short)
