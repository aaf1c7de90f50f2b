"""onnx's light_squeezenet and light_resnet50 quantized by onnxruntime's ``quantize_static`` (QDQ,
u8 activations, i8 full-range weights: benchmarks/bench_int8.py ``quantized_model``) on numba,
against onnxruntime: outputs within one quantization step of the output, with the default exact
products and with ``int8_arithmetic="saturating"``.  Slow: the int8 kernels of a whole model."""
from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")


def output_step(proto) -> float:
    """The scale of the DequantizeLinear that makes the graph's output (one quantization step)."""
    from onnx import numpy_helper
    out = proto.graph.output[0].name
    node = next(n for n in proto.graph.node if out in n.output)
    assert node.op_type == "DequantizeLinear", node.op_type
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    return float(np.asarray(inits[node.input[1]]).max())


@pytest.mark.slow
@pytest.mark.parametrize("arithmetic", ["exact", "saturating"])
@pytest.mark.parametrize("name", ["squeezenet", "resnet50"])
def test_quantize_static_model_is_within_one_step_of_onnxruntime(name, arithmetic):
    import dsl
    from benchmarks.bench_int8 import quantized_model
    proto, feeds = quantized_model(name)
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = list(dsl.load_onnx(proto, backend="numba", int8_arithmetic=arithmetic).run(feeds).values())[0]
    assert np.abs(got - want).max() <= output_step(proto) * 1.0001
