"""A 1×1 convolution whose only reader is a GlobalAveragePool, as one op: FusedConvGlobalPool.

SqueezeNet's head is Conv 1×1 512→1000 (+ Relu) on 13×13, then GlobalAveragePool: the
convolution's 1000×13×13 output (676 KB) is written once and read once, by the pool.  Here the
1×1 kernel (ops/conv_pointwise.py, ``pooled``) sums each tile's activated pixels per channel in
its epilogue instead of storing them: one thread owns each (output channel group, image) run of
tiles, keeps the run's sums in its scratch and writes them scaled by 1/(H·W) at the run's last
tile.  The convolution output never goes to memory and there is no pool pass (one core:
squeezenet's head 0.92-0.97x the time of the two nodes; benchmarks/RESULTS.md, slice sq2).

The rule fuses Conv or FusedConv (activation, no residual Z) -> GlobalAveragePool where the
Conv is one the 1×1 kernel takes (f32, one group, 2-D, 1×1, unpadded).  A residual before the
pool (ResNet heads: Conv -> Add -> Relu -> pool) is not fused.  The op writes
back to standard ONNX as Conv [+ activation] + GlobalAveragePool, so a compiled model's export
runs in onnxruntime.
"""
from __future__ import annotations

import dsl
from dsl.onnx.lower import names, register
from dsl.opgraph.fusion import fusion_rule
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.conv_fusion import ACTIVATIONS, FusedConv, _write_fused_conv
from ops.conv_pointwise import conv_pointwise, launch_conv_pointwise
from ops.nn import Conv
from ops.pool import GlobalAveragePool, GlobalAveragePoolV1


@dsl.op("FusedConvGlobalPool", domain="com.opdsl", since=1)
class FusedConvGlobalPool(FusedConv):
    """y = GlobalAveragePool(activation(Conv(X, W, B))): FusedConv's params (no Z), for
    f32 (N, C, H, W) images and a 1×1 unpadded window of one group; y is (N, M, 1, 1), plain."""

    formats = ("plain", "nchwc16")
    kernels = {"pointwise": conv_pointwise}

    def verify(self, x, w, b=None):
        super().verify(x, w, b)
        if x.dtype != dsl.f32 or x.ndim != 4 or not self._pointwise(x, w):
            k, strides, _, pads = self._attrs(w)
            raise VerifyError(f"FusedConvGlobalPool takes f32 (N, C, H, W) images, one group and an unpadded "
                              f"1x1 window; got {x}, weights {w}, group={self.group}, pads {list(pads)}, "
                              f"auto_pad {self.auto_pad!r}")

    def infer(self, x, w, b=None):
        y = Conv.infer(self, x, w, b)
        return TensorSpec(tuple(y.shape[:2]) + (1, 1), y.dtype)

    def free_inplace(self, impl, backend: str):
        return {}  # no Z, and x is read to the end

    def select(self, x, w, b=None, backend=None):
        return "pointwise"

    def select_format(self, x, *rest):
        ins, _ = Conv.select_format(self, x, *rest)
        return ins, "plain"

    def select_plain_format(self, x, *rest):
        return self.select_format(x, *rest)

    def run(self, impl, inputs, outputs, backend):
        x, w, b = (list(inputs) + [None])[:3]
        act, _ = ACTIVATIONS[self.activation]
        lo, hi = (tuple(self.activation_params) + (0.0, 0.0))[:2]
        _, strides, _, _ = self._attrs(TensorSpec(w.shape, dsl.f32))
        launch_conv_pointwise(impl, x, w, b, outputs[0], None, strides, x.ndim == 5, backend, act, lo, hi,
                              pooled=True)


def fuse_global_pool(g, conv, pool):
    """Conv or FusedConv (no Z) that the 1×1 kernel takes -> GlobalAveragePool -> FusedConvGlobalPool."""
    x, w, b = (list(conv.inputs) + [None, None])[:3]
    if len(conv.inputs) > 3 and conv.inputs[3] is not None:
        return None  # a residual: ResNet's head adds it before the pool
    op = conv.op
    if pool.inputs[0] is not conv.outputs[0] or w is None or not op._pointwise(x.spec, w.spec):
        return None
    if x.spec.dtype != dsl.f32 or x.spec.ndim != 4:
        return None
    params = {k: v for k, v in op.params.items() if k not in ("activation", "activation_params")}
    act = {} if not isinstance(op, FusedConv) else dict(activation=op.activation,
                                                         activation_params=op.activation_params)
    return FusedConvGlobalPool(**params, **act), [x, w] + ([] if b is None else [b])


for _conv in (Conv, FusedConv):
    for _pool in (GlobalAveragePoolV1, GlobalAveragePool):
        fusion_rule(_conv, _pool)(fuse_global_pool)


@register("com.opdsl", "FusedConvGlobalPool", everywhere=True)
def _fused_conv_global_pool(node, opset, emit) -> bool:
    """GlobalAveragePool(activation(Conv(X, W, B))) as FusedConv's nodes and a GlobalAveragePool."""
    ins, specs, (y,) = names(node)
    conv = emit.temp("conv")
    if not _write_fused_conv(node.op, ins, specs, conv, opset, emit):
        return False
    emit("GlobalAveragePool", [conv], [y])
    return True
