"""Build a small ONNX model that uses the example package's three ops:
x -> CustomRelu -> RMSNorm(w) -> Copy -> y, with x of shape (batch, 16).

    python examples/qaic_package/build_model.py model.onnx
    opdsl check examples/qaic_package
    python -c "import dsl, numpy as np; m = dsl.load_onnx('model.onnx', packages=['examples/qaic_package']); \\
               print(m.run({'x': np.ones((2, 16), np.float32)})['y'])"
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DOMAIN = "com.qaic.example"
WIDTH = 16


def build(width: int = WIDTH, seed: int = 0) -> onnx.ModelProto:
    w = np.random.default_rng(seed).uniform(0.5, 1.5, width).astype(np.float32)
    nodes = [
        helper.make_node("CustomRelu", ["x"], ["h"], domain=DOMAIN, name="relu", alpha=0.5, beta=0.2),
        helper.make_node("RMSNorm", ["h", "w"], ["n"], domain=DOMAIN, name="norm", epsilon=1e-5),
        helper.make_node("Copy", ["n"], ["y"], domain=DOMAIN, name="copy"),
    ]
    graph = helper.make_graph(
        nodes, "qaic_example",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
        initializer=[numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])


def reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """What the model computes, in numpy (f32)."""
    w = numpy_helper.to_array(model.graph.initializer[0])
    h = np.clip(0.5 * x + 0.2, 0.0, 1.0)
    return (w * h / np.sqrt((h * h).mean(axis=-1, keepdims=True) + 1e-5)).astype(np.float32)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "qaic_example.onnx"
    onnx.save(build(), out)
    print(f"wrote {out}")
