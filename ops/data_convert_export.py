"""DataConvert (ops/quant.py) as standard ONNX: QuantizeLinear, DequantizeLinear or Cast, written
inside the FunctionProto of a composed op (in a graph the node stays ``com.opdsl``, which
``dsl.load_onnx`` maps back).  Registered through ``dsl.onnx.lower.register`` when the op library
loads; kept beside ops/quant.py rather than in it while that file is reworked (issue 29).
"""
from __future__ import annotations

import numpy as np

from dsl.lang.types import DType, f32
from dsl.onnx.lower import QUANT_NAMES, names, onnx_type, register


@register("com.opdsl", "DataConvert")
def _data_convert(node, opset, emit) -> bool:
    """Quantize (float -> i8/u8/i16/u16) as QuantizeLinear on f32, dequantize (those -> float with
    a scale) as DequantizeLinear, anything else as Cast: the three modes of DataConvert."""
    op = node.op
    (x,), (xs,), (y,) = names(node)
    to: DType = op.dtype
    if opset < 13:
        return False
    scale = np.float32(1.0 if op.scale is None else op.scale)
    if xs.dtype.is_float and to.name in QUANT_NAMES:
        if to.name in ("i16", "u16") and opset < 21:
            return False
        if xs.dtype.name != "f32":  # DataConvert divides in f32 whatever the float input
            xf = emit.temp("x_f32")
            emit("Cast", [x], [xf], to=onnx_type(f32))
            x = xf
        s = emit.constant(np.array(scale, np.float32), "scale")
        z = emit.constant(np.array(op.zero_point, to.np), "zero_point")
        emit("QuantizeLinear", [x, s, z], [y])
        return True
    if xs.dtype.name in QUANT_NAMES and to.is_float and op.scale is None:
        return False  # dequantized with its input's own quantization, which a function body does not know
    if xs.dtype.name in QUANT_NAMES and to.is_float:
        if xs.dtype.name in ("i16", "u16") and opset < 21:
            return False
        s = emit.constant(np.array(scale, np.float32), "scale")
        f = y if to.name == "f32" else emit.temp("dequantized")
        info = np.iinfo(xs.dtype.np)
        if info.min <= op.zero_point <= info.max:
            z = emit.constant(np.array(op.zero_point, xs.dtype.np), "zero_point")
            emit("DequantizeLinear", [x, s, z], [f])
        else:  # an offset outside the dtype (the guide's u8 with -127): (f32(x) - offset) * scale
            xf, d = emit.temp("x_f32"), emit.temp("centered")
            emit("Cast", [x], [xf], to=onnx_type(f32))
            z = emit.constant(np.array(op.zero_point, np.float32), "zero_point")
            emit("Sub", [xf, z], [d])
            emit("Mul", [d, s], [f])
        if f != y:
            emit("Cast", [f], [y], to=onnx_type(to))
        return True
    emit("Cast", [x], [y], to=onnx_type(to))
    return True
