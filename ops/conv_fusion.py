"""Convolution graph rewrites (as ONNX Runtime's and oneDNN's): what follows a Conv is
done by the Conv itself, so it costs no extra pass over memory.

* Conv -> BatchNormalization: the BN is folded into new constant weights and bias,
  w' = w·s, b' = (b - mean)·s + B with s = scale / sqrt(var + ε) per output channel,
  when the weights, bias and BN params are constants.
* Conv -> Add or two-input Sum (same-shape tensor z): a FusedConv adding z while storing
  (resnet's residual).
* Conv -> Relu / LeakyRelu / Clip (constant bounds): a FusedConv applying the activation
  while storing, after z when both are fused (Conv -> BN -> Add -> Relu is one node).
* A stem Conv or FusedConv (ops/conv_stem.py's kernel, no Z) -> a 2-D MaxPool without
  dilations or Indices: a FusedConvPool (ops/conv_stem_pool.py), whose convolution output
  never goes to memory.
* A 1×1 Conv or FusedConv (no Z) -> GlobalAveragePool: ops/conv_global_pool.py's
  FusedConvGlobalPool (SqueezeNet's head), whose convolution output never goes to memory.

The graph compiler applies the rules (dsl/opgraph/fusion.py) only where the Conv's output
has no other reader and is not a graph output.  ``FusedConv`` is also an op of its own
(com.opdsl domain, after ONNX Runtime's com.microsoft FusedConv): X, W, [B], [Z] with an
``activation`` and its ``activation_params``.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

import dsl
from dsl.onnx.attributes import node_attributes
from dsl.onnx.lower import names, register
from dsl.opgraph.fusion import fusion_rule
from dsl.opgraph.op import check_and_infer
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.binary import Sum, SumV6
from ops.elementwise import Add, Clip, ClipV6, LeakyRelu, Relu
from ops.gemm_packed import ACT_CLIP, ACT_LEAKY_RELU, ACT_NONE, ACT_RELU
from ops.conv_pointwise import conv_pointwise
from ops.conv_stem import stem_supported
from ops.conv_stem_pool import BLOCK, PoolWindow, conv_stem_pool, launch_conv_stem_pool
from ops.nn import Conv, conv_geometry, launch_conv
from ops.norm import BatchNormalization
from ops.pool import AUTO_PADS, MaxPoolV1, MaxPoolV8, MaxPoolV10, MaxPoolV12, MaxPool, pool_geometry

# activation name -> (kernel code, number of activation_params)
ACTIVATIONS = {"": (ACT_NONE, 0), "Relu": (ACT_RELU, 0), "Clip": (ACT_CLIP, 2), "LeakyRelu": (ACT_LEAKY_RELU, 1)}


@dsl.op("FusedConv", domain="com.opdsl", since=1)
class FusedConv(Conv):
    """y = activation(Conv(X, W, B) + Z): Conv's params plus ``activation`` ("" for none,
    Relu, Clip with params (min, max), LeakyRelu with params (alpha,)); Z is optional."""

    activation: str = ""
    activation_params: Tuple[float, ...] = ()

    def verify(self, x, w, b=None, z=None):
        super().verify(x, w, b)
        if self.activation not in ACTIVATIONS:
            raise VerifyError(f"FusedConv activation {self.activation!r}; accepted: "
                              f"{', '.join(repr(a) for a in ACTIVATIONS)}")
        wanted = ACTIVATIONS[self.activation][1]
        if len(self.activation_params) != wanted:
            raise VerifyError(f"FusedConv activation {self.activation!r} takes {wanted} activation_params, "
                              f"got {list(self.activation_params)}")
        if z is not None:
            y = super().infer(x, w, b)
            if z.dtype != y.dtype or z.ndim != y.ndim or any(
                    a is not None and c is not None and a != c for a, c in zip(z.shape, y.shape)):
                raise VerifyError(f"FusedConv Z {z} must have the output's shape and dtype {y}")

    def infer(self, x, w, b=None, z=None):
        return super().infer(x, w, b)

    def free_inplace(self, impl, backend: str):
        """The residual Z's buffer for the output where Z dies here, on the 1×1 kernel on numba:
        it reads each element of Z just before storing that element of y, so the two are one
        stream of lines instead of two (one core, caches cold: ResNet-50's 64→256 expand on 56×56
        0.83x the time, 128→512 on 28×28 0.95x; benchmarks/RESULTS.md, nineteenth session).  Other
        kernels and OpenCL (whose pointer arguments may be declared restrict) keep two buffers."""
        return {0: 3} if impl is conv_pointwise and backend == "numba" else {}

    def select(self, x, w, b=None, z=None, backend=None):
        return super().select(x, w, b, backend=backend)

    def select_format(self, x, *rest):
        ins, out = super().select_format(x, *rest[:2])
        if len(rest) > 2:  # Z is stored like the output
            ins += (None if rest[2] is None else out,)
        return ins, out

    def select_plain_format(self, x, *rest):
        found = super().select_plain_format(x, *rest[:2])
        if found is not None and len(rest) > 2:  # Z is stored like the output
            found = (found[0] + (None if rest[2] is None else "plain",), found[1])
        return found

    def run(self, impl, inputs, outputs, backend):
        x, w, b, z = (list(inputs) + [None, None])[:4]
        act, _ = ACTIVATIONS[self.activation]
        lo, hi = (tuple(self.activation_params) + (0.0, 0.0))[:2]
        launch_conv(self, impl, x, w, b, outputs[0], backend, res=z, act=act, lo=lo, hi=hi)


@dsl.op("FusedConvPool", domain="com.opdsl", since=1)
class FusedConvPool(FusedConv):
    """y = MaxPool(activation(Conv(X, W, B))): FusedConv's params (no Z) plus the MaxPool's
    ``pool_kernel_shape``, ``pool_strides``, ``pool_pads``, ``pool_auto_pad`` and
    ``pool_ceil_mode``; f32 2-D images of one group, plain in; out NCHWc16 when M is a multiple
    of 16 (plain where every reader wants plain).  Run by ops/conv_stem_pool.py."""

    formats = ("plain", "nchwc16")
    kernels = {"stem_pool": conv_stem_pool}
    pool_kernel_shape: Tuple[int, ...] = ()
    pool_strides: Optional[Tuple[int, ...]] = None
    pool_pads: Optional[Tuple[int, ...]] = None
    pool_auto_pad: str = "NOTSET"
    pool_ceil_mode: int = 0

    def _pool(self):
        strides = tuple(self.pool_strides) if self.pool_strides else (1, 1)
        pads = tuple(self.pool_pads) if self.pool_pads else (0,) * 4
        return tuple(self.pool_kernel_shape), strides, pads

    def verify(self, x, w, b=None):
        super().verify(x, w, b)
        if x.dtype != dsl.f32 or x.ndim != 4 or self.group != 1:
            raise VerifyError(f"FusedConvPool takes f32 (N, C, H, W) images and one group, got {x} with "
                              f"group={self.group}")
        k, strides, pads = self._pool()
        for attr, v, n in (("pool_kernel_shape", k, 2), ("pool_strides", strides, 2), ("pool_pads", pads, 4)):
            if len(v) != n:
                raise VerifyError(f"FusedConvPool {attr} {list(v)} needs {n} values (a 2-D MaxPool)")
        if any(v < 1 for v in k + strides) or any(p < 0 for p in pads):
            raise VerifyError(f"FusedConvPool pool_kernel_shape {list(k)} and pool_strides {list(strides)} "
                              f"must be >= 1, pool_pads {list(pads)} >= 0")
        if self.pool_auto_pad not in AUTO_PADS:
            raise VerifyError(f"FusedConvPool pool_auto_pad {self.pool_auto_pad!r}; accepted: {', '.join(AUTO_PADS)}")
        self.infer(x, w, b)  # raises when a pooling window does not fit

    def _pool_geometry(self, conv_hw):
        k, strides, pads = self._pool()
        return pool_geometry(conv_hw, k, strides, (1, 1), pads, self.pool_auto_pad, bool(self.pool_ceil_mode))

    def infer(self, x, w, b=None):
        y = Conv.infer(self, x, w, b)
        out, _, _ = self._pool_geometry(y.shape[2:])
        return TensorSpec(tuple(y.shape[:2]) + out, y.dtype)

    def select(self, x, w, b=None, backend=None):
        return "stem_pool"

    def select_format(self, x, *rest):
        # NCHWc16 out for whole blocks of output channels: the 1x1 convolutions after a stem read
        # it at stride 1 (from plain x, ResNet-50's 64->256 projection ran ~1.4x slower)
        m = rest[0].shape[0] if rest and rest[0] is not None else None
        out = "nchwc16" if m is not None and m % BLOCK == 0 else "plain"
        return ("plain",) + tuple(None if t is None else "plain" for t in rest), out

    def select_plain_format(self, x, *rest):
        return ("plain",) + tuple(None if t is None else "plain" for t in rest), "plain"

    def run(self, impl, inputs, outputs, backend):
        x, w, b = (list(inputs) + [None])[:3]
        act, _ = ACTIVATIONS[self.activation]
        lo, hi = (tuple(self.activation_params) + (0.0, 0.0))[:2]
        k, strides, dil, pads = self._attrs(TensorSpec(w.shape, dsl.f32))
        conv_hw, begin, _ = conv_geometry(x.shape[2:], k, strides, dil, pads, self.auto_pad)
        pout, pbegin, _ = self._pool_geometry(conv_hw)
        kp, sp, _ = self._pool()
        launch_conv_stem_pool(impl, x, w, b, outputs[0], strides, dil, begin, conv_hw,
                              PoolWindow(kp, sp, pbegin, pout), backend, act, lo, hi)


# --------------------------------------------------------------------------- rules

def _constant(t) -> bool:
    return t is not None and t.kind == "constant"


def _conv_inputs(node):
    """(x, w, b or None) of a Conv or FusedConv node."""
    x, w, b = (list(node.inputs) + [None, None])[:3]
    return x, w, b


@fusion_rule(Conv, BatchNormalization)
def fold_batch_norm(g, conv, bn):
    """Conv -> BN with constant weights, bias and BN params -> Conv with new constants."""
    x, w, b = _conv_inputs(conv)
    if bn.inputs[0] is not conv.outputs[0] or not _constant(w) or (b is not None and not _constant(b)):
        return None
    params = bn.inputs[1:5]
    if len(params) != 4 or not all(_constant(p) for p in params) or bn.op.training_mode:
        return None
    scale, beta, mean, var = (p.value.astype(np.float64) for p in params)
    m = w.value.shape[0]
    if any(v.shape != (m,) for v in (scale, beta, mean, var)):
        return None
    s = scale / np.sqrt(var + np.float32(bn.op.epsilon))
    w2 = w.value.astype(np.float64) * s.reshape((m,) + (1,) * (w.value.ndim - 1))
    b0 = np.zeros(m) if b is None else b.value.astype(np.float64)
    b2 = (b0 - mean) * s + beta
    dt = w.value.dtype
    wc = g.constant(g.unique_name(f"{w.name}.bn_folded"), w2.astype(dt))
    bc = g.constant(g.unique_name(f"{bn.outputs[0].name}.bias"), b2.astype(dt))
    return conv.op, [x, wc, bc]


def _activation(node) -> Optional[Tuple[str, Tuple[float, ...]]]:
    """(activation name, params) of a Relu / LeakyRelu / Clip node, None if not fusable."""
    op = node.op
    if isinstance(op, Relu):
        return "Relu", ()
    if isinstance(op, LeakyRelu):
        return "LeakyRelu", (op.alpha,)
    if isinstance(op, ClipV6):
        return "Clip", (op.min, op.max)
    if isinstance(op, Clip):
        bounds = (list(node.inputs[1:]) + [None, None])[:2]
        if not all(t is None or _constant(t) for t in bounds):
            return None  # bounds computed at run time
        lo = -np.inf if bounds[0] is None else float(bounds[0].value.reshape(-1)[0])
        hi = np.inf if bounds[1] is None else float(bounds[1].value.reshape(-1)[0])
        return "Clip", (lo, hi)
    return None


def fuse_activation(g, conv, act):
    """Conv or FusedConv (without an activation) -> Relu / LeakyRelu / Clip -> FusedConv."""
    found = _activation(act)
    if found is None or act.inputs[0] is not conv.outputs[0]:
        return None
    name, params = found
    if isinstance(conv.op, FusedConv):
        if conv.op.activation:
            return None
        return conv.op.replace(activation=name, activation_params=params), list(conv.inputs)
    return FusedConv(**conv.op.params, activation=name, activation_params=params), list(conv.inputs)


def fuse_residual(g, conv, add):
    """Conv or FusedConv (no Z, no activation) -> Add(z of the same shape), or a two-input Sum
    (resnet50 of the onnx zoo), -> FusedConv adding z."""
    if len(add.inputs) != 2:
        return None
    out = conv.outputs[0]
    a, b_ = add.inputs
    z = b_ if a is out else a
    if z.spec.shape != out.spec.shape or z.spec.dtype != out.spec.dtype:
        return None  # a broadcast Add stays an Add
    x, w, b = _conv_inputs(conv)
    if isinstance(conv.op, FusedConv):
        if conv.op.activation or (len(conv.inputs) > 3 and conv.inputs[3] is not None):
            return None
        op = conv.op
    else:
        op = FusedConv(**conv.op.params)
    if b is None:
        b = g.constant(g.unique_name(f"{conv.name}.bias"), np.zeros(w.spec.shape[0], w.spec.dtype.np))
    return op, [x, w, b, z]


for _act in (Relu, LeakyRelu, Clip, ClipV6):
    fusion_rule(Conv, _act)(fuse_activation)
    fusion_rule(FusedConv, _act)(fuse_activation)
for _sum in (Add, Sum, SumV6):
    fusion_rule(Conv, _sum)(fuse_residual)
    fusion_rule(FusedConv, _sum)(fuse_residual)


def fuse_max_pool(g, conv, pool):
    """A stem Conv or FusedConv (no Z; ops/conv_stem.py's images) -> a 2-D MaxPool without
    dilations or Indices -> FusedConvPool."""
    x, w, b = _conv_inputs(conv)
    op = conv.op
    if len(conv.inputs) > 3 and conv.inputs[3] is not None:
        return None
    if not _indices_unused(g, pool) or pool.inputs[0] is not conv.outputs[0] or w.spec.ndim != 4:
        return None
    p = pool.op
    if len(p.kernel_shape) != 2 or any(d != 1 for d in (getattr(p, "dilations", None) or ())):
        return None
    y = Conv.infer(op, x.spec, w.spec)
    if not stem_supported(x.spec, w.spec, op.group, y.shape[-1]):
        return None
    act = {} if not isinstance(op, FusedConv) else dict(activation=op.activation,
                                                         activation_params=op.activation_params)
    params = {k: v for k, v in op.params.items() if k not in ("activation", "activation_params")}
    fused = FusedConvPool(**params, **act, pool_kernel_shape=tuple(p.kernel_shape),
                          pool_strides=tuple(p.strides) if p.strides else None,
                          pool_pads=tuple(p.pads) if p.pads else None, pool_auto_pad=p.auto_pad,
                          pool_ceil_mode=int(getattr(p, "ceil_mode", 0)))
    try:
        check_and_infer(fused, [t.spec for t in (x, w, b) if t is not None], where=f"fusing {pool.name!r}")
    except VerifyError:
        return None
    for unused in pool.outputs[1:]:  # the Indices output nobody reads (opsets 8+ list it)
        del g.tensors[unused.name]
    pool.outputs = pool.outputs[:1]
    return fused, [x, w] + ([] if b is None else [b])


def _indices_unused(g, pool) -> bool:
    """The MaxPool's optional Indices output is absent, or read by no node and no graph output."""
    for t in pool.outputs[1:]:
        if any(o is t for o in g.outputs) or any(i is t for n in g.nodes for i in n.inputs):
            return False
    return True


for _pool in (MaxPoolV1, MaxPoolV8, MaxPoolV10, MaxPoolV12, MaxPool):
    fusion_rule(Conv, _pool)(fuse_max_pool)
    fusion_rule(FusedConv, _pool)(fuse_max_pool)


# --------------------------------------------------------------------------- the standard ONNX form

_CONV_PARAMS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


@register("com.opdsl", "FusedConv", everywhere=True)
def _fused_conv(node, opset, emit) -> bool:
    """activation(Conv(X, W, B) + Z) as Conv, Add and Relu / Clip / LeakyRelu."""
    ins, specs, (y,) = names(node)
    return _write_fused_conv(node.op, ins, specs, y, opset, emit)


@register("com.opdsl", "FusedConvPool", everywhere=True)
def _fused_conv_pool(node, opset, emit) -> bool:
    """MaxPool(activation(Conv(X, W, B))) as FusedConv's nodes and a MaxPool (ceil_mode from opset 10)."""
    op = node.op
    ins, specs, (y,) = names(node)
    if op.pool_ceil_mode and opset < 10:
        return False
    conv = emit.temp("conv")
    if not _write_fused_conv(op, ins, specs, conv, opset, emit):
        return False
    k, strides, pads = op._pool()
    emit("MaxPool", [conv], [y], kernel_shape=list(k), strides=list(strides),
         auto_pad=op.pool_auto_pad, ceil_mode=int(op.pool_ceil_mode) if opset >= 10 else None,
         **({} if op.pool_auto_pad != "NOTSET" else {"pads": list(pads)}))
    return True


def _write_fused_conv(op, ins, specs, y, opset, emit) -> bool:
    """Write FusedConv ``op``'s standard nodes from input names ``ins`` to output name ``y``."""
    x, w, b, z = (ins + [None, None])[:4]
    if opset < 7:  # Add broadcasts from opset 7
        return False
    attrs = {a.name: a for a in node_attributes(op) if a.name in _CONV_PARAMS}
    steps = [s for s in (z is not None, op.activation != "") if s]
    out = emit.temp("conv") if steps else y
    conv = [x, w] + ([b] if b else [])
    emit("Conv", conv, [out])
    emit.nodes[-1].attribute.extend(attrs.values())
    if z is not None:
        added = emit.temp("sum") if op.activation else y
        emit("Add", [out, z], [added])
        out = added
    if op.activation == "Relu":
        emit("Relu", [out], [y])
    elif op.activation == "LeakyRelu":
        emit("LeakyRelu", [out], [y], alpha=float(op.activation_params[0]))
    elif op.activation == "Clip" and opset < 11:  # bounds were attributes before opset 11
        lo, hi = (float(v) for v in op.activation_params)
        emit("Clip", [out], [y], min=lo, max=hi)
    elif op.activation == "Clip":
        dt = specs[0].dtype.np
        lo = emit.constant(np.array(op.activation_params[0], dt), "min")
        hi = emit.constant(np.array(op.activation_params[1], dt), "max")
        emit("Clip", [out, lo, hi], [y])
    elif op.activation:
        return False
    return True
