"""One-node ONNX models (MatMul, Conv) and the two ways the benchmark runs them.

The same ``onnx.ModelProto`` goes to ``dsl.load_onnx`` (opdsl, the path a user takes)
and to an onnxruntime session, so both run the same op on the same weights.  opdsl is
reached only through its public API: when someone replaces the MatMul or Conv kernels,
the benchmark times the new ones without a change here.
"""
from __future__ import annotations

import os
from typing import Callable, Dict, Sequence, Tuple

import numpy as np

OPSET = 17
IR_VERSION = 8  # an IR version every onnxruntime of the last years reads


def onnx_elem_type(dtype: np.dtype) -> int:
    from onnx import TensorProto
    name = np.dtype(dtype).name
    return {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
            "bfloat16": TensorProto.BFLOAT16, "float64": TensorProto.DOUBLE}[name]


def _model(node, inputs, outputs, initializers=()):
    from onnx import helper
    graph = helper.make_graph([node], node.op_type.lower(), inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def matmul_model(a_shape: Sequence[int], b_shape: Sequence[int], dtype=np.float32):
    """y = a @ b (numpy batch rules), a and b graph inputs."""
    from onnx import helper
    et = onnx_elem_type(dtype)
    y_shape = list(np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))) + [a_shape[-2], b_shape[-1]]
    return _model(helper.make_node("MatMul", ["a", "b"], ["y"]),
                  [helper.make_tensor_value_info("a", et, list(a_shape)),
                   helper.make_tensor_value_info("b", et, list(b_shape))],
                  [helper.make_tensor_value_info("y", et, y_shape)])


def conv_output_size(size: int, k: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - k) // stride + 1


def same_pad(k: int) -> int:
    """Symmetric padding that keeps the spatial size for an odd kernel at stride 1
    (and gives ResNet's 224 -> 112 for the 7x7 stride-2 stem)."""
    return k // 2


def conv_model(c_in: int, hw: int, c_out: int, k: int, stride: int, weight: np.ndarray, bias: np.ndarray):
    """A batch-1 f32 Conv with ``weight`` (c_out, c_in, k, k) and ``bias`` as initializers."""
    from onnx import TensorProto, helper, numpy_helper
    pad = same_pad(k)
    out = conv_output_size(hw, k, stride, pad)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], strides=[stride, stride],
                            pads=[pad] * 4)
    return _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, hw, hw])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c_out, out, out])],
                  [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")])


def opdsl_runner(model, feeds: Dict[str, np.ndarray], backend: str = "numba") -> Callable[[], np.ndarray]:
    """``dsl.load_onnx(model).run(feeds)`` as a no-argument call returning ``y``.

    Model.run reads large feeds in place and writes the output into a new array, as a user's
    call does (dsl/opgraph/binding.py); the allocation is part of the time, as in onnxruntime."""
    import dsl
    compiled = dsl.load_onnx(model, backend=backend)
    return lambda: compiled.run(feeds)["y"]


def ort_runner(model, feeds: Dict[str, np.ndarray], threads: int = 0) -> Callable[[], np.ndarray]:
    """An onnxruntime session on ``threads`` intra-op threads (default: every core) as a
    no-argument call returning ``y``; ``sess.run`` allocates the output, like Model.run."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads or os.cpu_count() or 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return lambda: sess.run(["y"], feeds)[0]


def random_inputs(shapes: Sequence[Tuple[int, ...]], dtype=np.float32, seed: int = 0):
    """Standard-normal f32 values rounded to ``dtype`` (f16, bf16 or f32)."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s, dtype=np.float32).astype(dtype) for s in shapes]
