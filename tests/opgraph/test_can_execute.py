"""``Op.can_execute`` (PPL.NN's CanDoExecute): a node the hook declines does not run and its
outputs are zero-filled, in eager calls and in ``Model.run`` (planned and node by node), on
every backend; a package's functions module can define it too."""
import numpy as np
import pytest

import dsl
from dsl import In, Out, f32
from dsl.opgraph import registry

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as H  # noqa: E402

CALLS = []


@dsl.kernel
def add_one(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] + 1.0


class GatedAddOne(dsl.Op):
    """y = x + 1, but only for inputs of at most ``limit`` rows (else skipped: zeros)."""
    limit: int = 3
    kernels = {"default": add_one}

    def infer(self, x):
        return x.spec

    def can_execute(self, x):
        CALLS.append(x.shape)
        return x.shape[0] <= self.limit


@pytest.fixture
def gated():
    cls = dsl.op("GatedAddOne", domain="com.test.gate")(GatedAddOne)
    yield cls
    registry.unregister(cls)


def _model(rows):
    g = H.make_graph([H.make_node("GatedAddOne", ["x"], ["h"], domain="com.test.gate", name="gate"),
                      H.make_node("Relu", ["h"], ["y"], name="relu")], "m",
                     [H.make_tensor_value_info("x", TP.FLOAT, [rows, 4])],
                     [H.make_tensor_value_info("y", TP.FLOAT, [rows, 4])])
    m = H.make_model(g, opset_imports=[H.make_opsetid("", 17), H.make_opsetid("com.test.gate", 1)])
    m.ir_version = 8
    return m


def test_eager_call_skips_when_the_hook_says_no(gated, backend):
    x = np.full((2, 4), 1.5, np.float32)
    np.testing.assert_array_equal(gated()(x, backend=backend), x + 1)
    np.testing.assert_array_equal(gated()(np.ones((5, 4), np.float32), backend=backend), np.zeros((5, 4)))
    np.testing.assert_array_equal(gated(limit=9)(np.ones((5, 4), np.float32), backend=backend), np.full((5, 4), 2))


@pytest.mark.parametrize("rows", [2, 5, "n"])
def test_model_run_skips_and_zero_fills(gated, backend, rows):
    model = dsl.load_onnx(_model(rows), backend=backend)
    for n in ([2, 5] if rows == "n" else [rows]):
        x = np.full((n, 4), -0.5 if n > 3 else 0.25, np.float32)
        want = np.zeros((n, 4), np.float32) if n > 3 else np.maximum(x + 1, 0)
        for _ in range(2):  # a reused plan zero-fills again at every run
            np.testing.assert_array_equal(model.run({"x": x})["y"], want)


def test_trace_shows_the_skipped_node(gated):
    seen = []
    dsl.load_onnx(_model(5), backend="interpreter").run({"x": np.ones((5, 4), np.float32)}, trace=seen.append)
    np.testing.assert_array_equal(seen[0].outputs["h"], np.zeros((5, 4)))


def test_a_non_bool_answer_is_an_error(gated, monkeypatch):
    monkeypatch.setattr(GatedAddOne, "can_execute", lambda self, x: "yes")
    with pytest.raises(dsl.VerifyError, match=r"can_execute returned 'yes'; accepted: True \(the node runs\) or "
                                              r"False"):
        GatedAddOne()(np.ones((2, 4), np.float32), backend="interpreter")


def test_package_functions_define_can_execute(make_package_here):
    pkg = dsl.register_package(make_package_here)
    try:
        (Scale,) = pkg.ops
        x = np.ones(4, np.float32)
        np.testing.assert_array_equal(Scale(x, backend="interpreter"), 2 * x)
        np.testing.assert_array_equal(Scale(x, alpha=0.0, backend="interpreter"), np.zeros(4))
    finally:
        pkg.unregister()


@pytest.fixture
def make_package_here(tmp_path):
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "opdsl-package.yaml").write_text(
        "name: gate\nversion: 1\nops:\n  - type: Scale\n    domain: com.test.gatepkg\n    inputs: [{name: x}]\n"
        "    outputs: [{name: y, like: x}]\n    params: [{name: alpha, dtype: f32, default: 2.0}]\n"
        "    functions: functions.py\n    implementations:\n"
        "      - {backend: interpreter, kernel: \"kernels.py:scale\"}\n")
    (root / "kernels.py").write_text(
        "def scale(x, y, *, alpha):\n    y[...] = alpha * x + 100.0 * (alpha == 0.0)\n")
    (root / "functions.py").write_text(
        "def can_execute(op, x):\n    return op.alpha != 0.0  # alpha 0: nothing to compute, zeros\n")
    return root
