"""MatMul -> Add(bias) as one GEMM: the bias is added by the GEMM's own store (its ``beta·C``
epilogue, ops/gemm_packed.py and ops/matmul.py's gemm_kernel), so a linear layer costs no
extra pass over its output (every Linear of a transformer exported to ONNX is MatMul + Add).

The rule applies where the MatMul's output has no other reader and the Add's other input is a
vector along the output's last axis: shape (n,) or (1, ..., 1, n), n the MatMul's columns, of
no higher rank than the output (so the Add changes no shape).  ``FusedMatMul`` is also an op of
its own (com.opdsl domain, after ONNX Runtime's com.microsoft FusedMatMul): A, B and an
optional bias.
"""
from __future__ import annotations

import dsl
from dsl.onnx.lower import names, register
from dsl.opgraph.fusion import fusion_rule
from dsl.opgraph.spec import VerifyError
from ops.elementwise import Add
from ops.matmul import MatMul, _zero_bias, run_matmul


def _bias_vector(spec, n) -> bool:
    """Whether ``spec`` is n values along the last axis (leading axes of size 1)."""
    return spec.ndim >= 1 and spec.shape[-1] == n and n is not None and all(d == 1 for d in spec.shape[:-1])


@dsl.op("FusedMatMul", domain="com.opdsl", since=1)
class FusedMatMul(MatMul):
    """y = numpy.matmul(A, B) + bias, bias of shape (n,) or (1, ..., 1, n) (n = B's columns)."""

    def verify(self, a, b, bias=None):
        super().verify(a, b)
        if bias is not None:
            y = super().infer(a, b)
            n = y.shape[-1] if y.ndim else None
            if bias.dtype != a.dtype or not _bias_vector(bias, n) or bias.ndim > max(y.ndim, 1):
                raise VerifyError(f"FusedMatMul bias {bias} must be {a.dtype} of shape ({n},) or (1, ..., {n}) "
                                  f"with rank <= {y.ndim} (the product is {y})")

    def infer(self, a, b, bias=None):
        return super().infer(a, b)

    def select(self, a, b, bias=None, backend=None):
        return super().select(a, b, backend=backend)

    def run(self, impl, inputs, outputs, backend):
        a, b = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        y = outputs[0]
        c = _zero_bias(y.dtype) if bias is None else bias.reshape(1, -1)
        run_matmul(impl, a, b, y, c, backend, beta=int(bias is not None))


@fusion_rule(MatMul, Add)
def fuse_bias(g, mm, add):
    """MatMul -> Add(bias vector along the last axis) => FusedMatMul(a, b, bias)."""
    out = mm.outputs[0]
    x, other = add.inputs
    bias = other if x is out else x
    if bias is out or out.spec.ndim < 2 or mm.inputs[1].spec.ndim < 2:
        return None  # a 1-D operand drops an axis: the bias axis would be ambiguous
    if not _bias_vector(bias.spec, out.spec.shape[-1]) or bias.spec.ndim > out.spec.ndim:
        return None
    return FusedMatMul(), [mm.inputs[0], mm.inputs[1], bias]


# --------------------------------------------------------------------------- the standard ONNX form

@register("com.opdsl", "FusedMatMul", everywhere=True)
def _fused_matmul(node, opset, emit) -> bool:
    """numpy.matmul(A, B) + bias as MatMul and Add (bias along the last axis broadcasts)."""
    (a, b, *rest), _, (y,) = names(node)
    bias = rest[0] if rest else None
    if opset < 7:  # Add broadcasts from opset 7
        return False
    if bias is None:
        emit("MatMul", [a, b], [y])
        return True
    ab = emit.temp("matmul")
    emit("MatMul", [a, b], [ab])
    emit("Add", [ab, bias], [y])
    return True
