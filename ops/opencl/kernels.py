"""Raw OpenCL operators shipped with opdsl (TIM-VX style): hswish and a 2D GEMM.

``hswish(x, in_scale=.., in_zero_point=.., out_scale=.., out_zero_point=..)``:
float32 input runs ``hswish_F32toF32``; u8 / i8 input runs the quantized variant
(dequant -> hswish -> quant), built from the same source with ``-D`` options.
``gemm(a, b, alpha=1.0)``: a[M, K] @ b[K, N] * alpha for f32 or f16 storage.
Both are ``dsl.RawOpenCL`` objects: call them with inputs to get new
outputs, or with inputs and outputs (the op-layer implementation signature).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dsl.lang import types as T
from dsl.runtime.raw_opencl import Param, RawOpenCL

HERE = Path(__file__).resolve().parent

_QUANT = {
    "u8": "-DQNAME=hswish_U8toU8 -DQ_T=uchar -DQ_MIN=0 -DQ_MAX=255",
    "i8": "-DQNAME=hswish_I8toI8 -DQ_T=char -DQ_MIN=-128 -DQ_MAX=127",
}


def _hswish_select(in_dtypes, params):
    t = in_dtypes[0]
    if t.name == "f32":
        return "hswish_F32toF32", ""
    if t.name in _QUANT:
        return f"hswish_{t.name.upper()}to{t.name.upper()}", _QUANT[t.name]
    raise TypeError(f"hswish: input dtype {t} is not supported; accepted: f32, u8, i8 (quantized)")


hswish = RawOpenCL(
    "hswish", HERE / "hswish.cl",
    inputs=("x",), outputs=("y",),
    params=[Param("in_scale", T.f32, 1.0), Param("in_zero_point", T.i32, 0),
            Param("out_scale", T.f32, 1.0), Param("out_zero_point", T.i32, 0)],
    select=_hswish_select,
    enqueue=lambda ins, outs, p: ((ins[0].size,), None),
    shape=lambda ins, p: [(ins[0].shape, ins[0].dtype)],
)

GEMM_TILE = 16


def _gemm_select(in_dtypes, params):
    a, b = in_dtypes
    if a != b or a.name not in ("f32", "f16"):
        raise TypeError(f"gemm: inputs are {a} and {b}; accepted: both f32 or both f16")
    return ("gemm_F32" if a.name == "f32" else "gemm_F16"), f"-DTS={GEMM_TILE}"


def _gemm_shape(ins, params):
    a, b = ins
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"gemm: a{list(a.shape)} @ b{list(b.shape)}: need 2-D a[M, K] and b[K, N]")
    return [((a.shape[0], b.shape[1]), a.dtype)]


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


gemm = RawOpenCL(
    "gemm", HERE / "gemm.cl",
    inputs=("a", "b"), outputs=("c",),
    params=[Param("alpha", T.f32, 1.0)],
    select=_gemm_select,
    shape=_gemm_shape,
    enqueue=lambda ins, outs, p: ((_round_up(outs[0].shape[1], GEMM_TILE), _round_up(outs[0].shape[0], GEMM_TILE)),
                                  (GEMM_TILE, GEMM_TILE)),
    args=lambda ins, outs, p: [np.int32(ins[0].shape[0]), np.int32(ins[1].shape[1]), np.int32(ins[0].shape[1])],
)
