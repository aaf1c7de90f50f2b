"""MatMul -> Add(bias) as one GEMM: the bias is added by the GEMM's own store (its ``beta·C``
epilogue, ops/gemm_packed.py and ops/matmul.py's gemm_kernel), so a linear layer costs no
extra pass over its output (every Linear of a transformer exported to ONNX is MatMul + Add).

The rule applies where the MatMul's output has no other reader and the Add's other input is
(``_bias_fits``) a vector along the output's last axis, shape (n,) or (1, ..., 1, n), or a
matrix broadcast over the batch, (1, ..., 1, m or 1, n or 1) (an attention mask over the
scores), of no higher rank than the output (so the Add changes no shape).

Attention's scores are scaled first: MatMul -> Mul or Div by a constant scalar becomes the
GEMM's ``alpha`` (Div only where 1/c is exact, a power of two such as sqrt(64), so the result
is the unfused graph's bit for bit), and a scaled product then takes its mask the same way:
``softmax(Q·Kᵀ / 8 + mask)`` runs one GEMM before the Softmax, as onnxruntime's
MatMulScaleFusion does.  ``FusedMatMul`` is also an op of its own (com.opdsl domain, after
ONNX Runtime's com.microsoft FusedMatMul): A, B, an optional bias and ``alpha``.
"""
from __future__ import annotations

import numpy as np

import dsl
from dsl.onnx.lower import names, register
from dsl.opgraph.fusion import fusion_rule
from dsl.opgraph.spec import VerifyError
from ops.binary import Div
from ops.elementwise import Add, Mul
from ops.matmul import MatMul, _zero_bias, run_matmul


def _bias_fits(spec, y) -> bool:
    """Whether ``spec`` is a bias the GEMM's 2-D ``C`` can add to product ``y``: rank <= y's,
    its last axis 1 or y's columns, the one before 1 or y's rows, every other axis 1."""
    if spec.ndim < 1 or spec.ndim > y.ndim or any(d != 1 for d in spec.shape[:-2]):
        return False
    return all(d == 1 or (d == want and want is not None)
               for d, want in zip(spec.shape[::-1], y.shape[::-1][:2]))


@dsl.op("FusedMatMul", domain="com.opdsl", since=1)
class FusedMatMul(MatMul):
    """y = alpha·numpy.matmul(A, B) + bias; bias of shape (n,), (1, ..., 1, n) or, broadcast
    over the batch, (1, ..., 1, m, n) (m, n: the product's rows and columns; each may be 1)."""

    alpha: float = 1.0

    def verify(self, a, b, bias=None):
        super().verify(a, b)
        if self.alpha != 1 and not a.dtype.is_float:
            raise VerifyError(f"FusedMatMul alpha={self.alpha} needs float inputs, got {a}; accepted: alpha=1")
        if bias is not None:
            y = super().infer(a, b)
            m, n = (y.shape[-2] if y.ndim >= 2 else 1), (y.shape[-1] if y.ndim else None)
            if bias.dtype != a.dtype or y.ndim < 1 or not _bias_fits(bias, y):
                raise VerifyError(f"FusedMatMul bias {bias} must be {a.dtype} of shape ({n},), (1, ..., {n}) or "
                                  f"(1, ..., {m}, {n}) (axes of size 1 broadcast) with rank <= {y.ndim} "
                                  f"(the product is {y})")

    def infer(self, a, b, bias=None):
        return super().infer(a, b)

    def select(self, a, b, bias=None, backend=None):
        return super().select(a, b, backend=backend)

    def run(self, impl, inputs, outputs, backend):
        a, b = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        y = outputs[0]
        if bias is None:
            c = _zero_bias(y.dtype)
        else:  # the 2-D C of the GEMM kernels: (rows or 1, columns or 1)
            c = bias.reshape(bias.shape[-2] if bias.ndim >= 2 else 1, bias.shape[-1])
        run_matmul(impl, a, b, y, c, backend, beta=int(bias is not None), alpha=self.alpha)


def _other_input(node, out):
    """The input of binary ``node`` that is not ``out`` (None if both are)."""
    x, other = node.inputs
    found = other if x is out else x
    return None if found is out else found


def _two_d(mm) -> bool:
    """Both operands at least 2-D: a 1-D one drops an axis, and the bias axes would be ambiguous."""
    return mm.outputs[0].spec.ndim >= 2 and mm.inputs[0].spec.ndim >= 2 and mm.inputs[1].spec.ndim >= 2


@fusion_rule(MatMul, Add)
def fuse_bias(g, mm, add):
    """MatMul -> Add(bias: ``_bias_fits``) => FusedMatMul(a, b, bias)."""
    out = mm.outputs[0]
    bias = _other_input(add, out)
    if bias is None or not _two_d(mm) or not _bias_fits(bias.spec, out.spec):
        return None
    return FusedMatMul(), [mm.inputs[0], mm.inputs[1], bias]


@fusion_rule(FusedMatMul, Add)
def fuse_scaled_bias(g, mm, add):
    """FusedMatMul(alpha, no bias yet) -> Add(bias) => FusedMatMul(a, b, bias, alpha): the
    scaled scores of attention taking their mask."""
    out = mm.outputs[0]
    bias = _other_input(add, out)
    if len(mm.inputs) > 2 and mm.inputs[2] is not None or bias is None or not _two_d(mm) \
            or not _bias_fits(bias.spec, out.spec):
        return None
    return FusedMatMul(alpha=mm.op.alpha), [mm.inputs[0], mm.inputs[1], bias]


def _scale(node, out, divide: bool):
    """The alpha that Mul (Div: ``out`` divided) by a constant float scalar amounts to, or None:
    Div only by a power of two, whose reciprocal is exact (x / 8 == x · 0.125 bit for bit)."""
    c = _other_input(node, out)
    if c is None or c.kind != "constant" or c.value.size != 1 or c.value.dtype.kind != "f" \
            or (divide and node.inputs[0] is not out):
        return None
    v = float(c.value.reshape(-1)[0])
    if not np.isfinite(v) or v == 0 or divide and np.frexp(v)[0] not in (0.5, -0.5):
        return None
    return 1 / v if divide else v


def _fuse_scale(mm, node, divide: bool):
    out = mm.outputs[0]
    alpha = _scale(node, out, divide)
    # a bias would be scaled too; the scalar must not broadcast the product to a higher rank
    if alpha is None or len(mm.inputs) > 2 and mm.inputs[2] is not None or not _two_d(mm) \
            or not out.spec.dtype.is_float or node.outputs[0].spec.shape != out.spec.shape:
        return None
    return FusedMatMul(alpha=getattr(mm.op, "alpha", 1.0) * alpha), [mm.inputs[0], mm.inputs[1]]


@fusion_rule(MatMul, Mul)
def fuse_mul_scale(g, mm, mul):
    """MatMul -> Mul(constant scalar c) => FusedMatMul(a, b, alpha=c)."""
    return _fuse_scale(mm, mul, divide=False)


@fusion_rule(MatMul, Div)
def fuse_div_scale(g, mm, div):
    """MatMul -> Div(by a constant power of two c) => FusedMatMul(a, b, alpha=1/c)."""
    return _fuse_scale(mm, div, divide=True)


# --------------------------------------------------------------------------- the standard ONNX form

@register("com.opdsl", "FusedMatMul", everywhere=True)
def _fused_matmul(node, opset, emit) -> bool:
    """alpha·numpy.matmul(A, B) + bias as MatMul, Mul (alpha, if not 1) and Add (the bias broadcasts)."""
    (a, b, *rest), (spec, *_), (y,) = names(node)
    bias = rest[0] if rest else None
    alpha = float(getattr(node.op, "alpha", 1.0))
    if opset < 7:  # Add broadcasts from opset 7
        return False
    steps = [("MatMul", [a, b])]
    if alpha != 1:
        steps.append(("Mul", [emit.constant(np.array(alpha, spec.dtype.np), "alpha")]))
    if bias is not None:
        steps.append(("Add", [bias]))
    prev = None
    for k, (op_type, ins) in enumerate(steps):
        out = y if k == len(steps) - 1 else emit.temp(op_type.lower())
        emit(op_type, ins if prev is None else [prev] + ins, [out])
        prev = out
    return True
