"""Comparison and logical ops: Equal, Less, LessOrEqual, Greater, GreaterOrEqual, And, Or,
Xor (bool results, ONNX multidirectional broadcasting), Not, Where, IsNaN, IsInf.

Three kernels serve the family.  ``compare_kernel`` and ``where_kernel`` use the 4-D
broadcast scheme of ops/elementwise.py (``launch_broadcast`` collapses any number of
inputs' broadcast patterns, so Where's three-way broadcast is the same machinery);
``predicate_kernel`` is a flat loop.  The op code is a ``dsl.const``: each variant holds
only its own test.
"""
from __future__ import annotations

import dsl
from dsl import In, Out, bool_, i32
from dsl.opgraph.spec import TensorSpec
from ops.elementwise import (FLOATS, INTEGERS, MAX_RANK, NUMERIC, broadcast_shape, launch_broadcast,
                             require_dtype, same_dtype)

T = dsl.TypeVar("T")

# op codes of compare_kernel
EQ = 0
LT = 1
LE = 2
GT = 3
GE = 4
AND = 5
OR = 6
XOR = 7
# op codes of predicate_kernel
ISNAN = 0
ISINF = 1
NOT = 2

BOOL = (bool_,)


# --------------------------------------------------------------------------- kernels

@dsl.kernel
def compare_kernel(a: In[T, 4], b: In[T, 4], y: Out[bool_, 4], op: dsl.const[i32]):
    """y = a (op) b as bool; an axis of size 1 in a or b is broadcast along y.  NaN
    compares unequal to everything (IEEE)."""
    n1 = y.shape[1]
    n2 = y.shape[2]
    n3 = y.shape[3]
    sa3 = 1 if a.shape[3] > 1 else 0
    sa2 = a.shape[3] if a.shape[2] > 1 else 0
    sa1 = a.shape[2] * a.shape[3] if a.shape[1] > 1 else 0
    sa0 = a.shape[1] * a.shape[2] * a.shape[3] if a.shape[0] > 1 else 0
    sb3 = 1 if b.shape[3] > 1 else 0
    sb2 = b.shape[3] if b.shape[2] > 1 else 0
    sb1 = b.shape[2] * b.shape[3] if b.shape[1] > 1 else 0
    sb0 = b.shape[1] * b.shape[2] * b.shape[3] if b.shape[0] > 1 else 0
    lo, hi = dsl.split(y.size)
    i = lo
    while i < hi:
        r = i // n3
        j0 = i - r * n3
        jn = min(n3, j0 + hi - i)
        i2 = r % n2
        r = r // n2
        i1 = r % n1
        i0 = r // n1
        pa = i0 * sa0 + i1 * sa1 + i2 * sa2
        pb = i0 * sb0 + i1 * sb1 + i2 * sb2
        base = i - j0
        for j in range(j0, jn):
            va = a.flat[pa + j * sa3]
            vb = b.flat[pb + j * sb3]
            if op == EQ:
                y.flat[base + j] = va == vb
            elif op == LT:
                y.flat[base + j] = va < vb
            elif op == LE:
                y.flat[base + j] = va <= vb
            elif op == GT:
                y.flat[base + j] = va > vb
            elif op == GE:
                y.flat[base + j] = va >= vb
            elif op == AND:  # bool() keeps every branch well typed for every T
                y.flat[base + j] = bool(va) and bool(vb)
            elif op == OR:
                y.flat[base + j] = bool(va) or bool(vb)
            else:
                y.flat[base + j] = bool(va) != bool(vb)
        i = base + jn


@dsl.kernel
def where_kernel(c: In[bool_, 4], a: In[T, 4], b: In[T, 4], y: Out[T, 4]):
    """y = a where c else b, each of the three broadcast along y."""
    n1 = y.shape[1]
    n2 = y.shape[2]
    n3 = y.shape[3]
    sc3 = 1 if c.shape[3] > 1 else 0
    sc2 = c.shape[3] if c.shape[2] > 1 else 0
    sc1 = c.shape[2] * c.shape[3] if c.shape[1] > 1 else 0
    sc0 = c.shape[1] * c.shape[2] * c.shape[3] if c.shape[0] > 1 else 0
    sa3 = 1 if a.shape[3] > 1 else 0
    sa2 = a.shape[3] if a.shape[2] > 1 else 0
    sa1 = a.shape[2] * a.shape[3] if a.shape[1] > 1 else 0
    sa0 = a.shape[1] * a.shape[2] * a.shape[3] if a.shape[0] > 1 else 0
    sb3 = 1 if b.shape[3] > 1 else 0
    sb2 = b.shape[3] if b.shape[2] > 1 else 0
    sb1 = b.shape[2] * b.shape[3] if b.shape[1] > 1 else 0
    sb0 = b.shape[1] * b.shape[2] * b.shape[3] if b.shape[0] > 1 else 0
    lo, hi = dsl.split(y.size)
    i = lo
    while i < hi:
        r = i // n3
        j0 = i - r * n3
        jn = min(n3, j0 + hi - i)
        i2 = r % n2
        r = r // n2
        i1 = r % n1
        i0 = r // n1
        pc = i0 * sc0 + i1 * sc1 + i2 * sc2
        pa = i0 * sa0 + i1 * sa1 + i2 * sa2
        pb = i0 * sb0 + i1 * sb1 + i2 * sb2
        base = i - j0
        for j in range(j0, jn):
            y.flat[base + j] = dsl.where(c.flat[pc + j * sc3], a.flat[pa + j * sa3], b.flat[pb + j * sb3])
        i = base + jn


@dsl.kernel
def predicate_kernel(x: In[T], y: Out[bool_], op: dsl.const[i32], neg: bool_, pos: bool_):
    """IsNaN, IsInf (``neg``/``pos`` pick the signs reported) and Not."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        if op == ISNAN:
            y.flat[i] = v != v
        elif op == ISINF:
            w = float(v)  # float(): every branch type-checks for bool x (Not) too
            d = w - w  # NaN for +-inf (and NaN), 0 for finite values
            inf = d != d and w == w
            y.flat[i] = inf and ((v > 0 and pos) or (v < 0 and neg))
        else:
            y.flat[i] = not bool(v)


# --------------------------------------------------------------------------- ops

class _Compare(dsl.Op):
    """a (op) b -> bool with numpy broadcasting."""
    code = EQ
    allowed = NUMERIC
    kernels = {"default": compare_kernel}

    def verify(self, a, b):
        same_dtype(self.op_type, a, b)
        require_dtype(self.op_type, a, self.allowed)
        broadcast_shape(a.shape, b.shape, what=self.op_type)

    def infer(self, a, b):
        return TensorSpec(broadcast_shape(a.shape, b.shape), bool_)

    def run(self, impl, inputs, outputs, backend):
        launch_broadcast(impl, inputs, outputs[0], MAX_RANK, op=self.code, backend=backend)


@dsl.op("Equal", since=7, until=10)
class EqualV7(_Compare):
    """Equal of opsets 7-10: bool and integers."""
    allowed = BOOL + INTEGERS


@dsl.op("Equal", since=11)
class Equal(_Compare):
    """a == b; every numeric dtype and bool (opset 11+)."""
    allowed = BOOL + NUMERIC


@dsl.op("Less", since=7, until=8)
class LessV7(_Compare):
    """Less of opsets 7-8: floats."""
    code = LT
    allowed = FLOATS


@dsl.op("Less", since=9)
class Less(_Compare):
    code = LT


@dsl.op("LessOrEqual", since=12)
class LessOrEqual(_Compare):
    code = LE


@dsl.op("Greater", since=7, until=8)
class GreaterV7(_Compare):
    """Greater of opsets 7-8: floats."""
    code = GT
    allowed = FLOATS


@dsl.op("Greater", since=9)
class Greater(_Compare):
    code = GT


@dsl.op("GreaterOrEqual", since=12)
class GreaterOrEqual(_Compare):
    code = GE


@dsl.op("And", since=7)
class And(_Compare):
    """Logical and of bool tensors."""
    code = AND
    allowed = BOOL


@dsl.op("Or", since=7)
class Or(_Compare):
    code = OR
    allowed = BOOL


@dsl.op("Xor", since=7)
class Xor(_Compare):
    code = XOR
    allowed = BOOL


class _Predicate(dsl.Op):
    """An elementwise test -> bool of the same shape."""
    code = ISNAN
    allowed = FLOATS
    kernels = {"default": predicate_kernel}

    def verify(self, x):
        require_dtype(self.op_type, x, self.allowed)

    def infer(self, x):
        return TensorSpec(x.shape, bool_)

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0], outputs[0], op=self.code, neg=bool(getattr(self, "detect_negative", True)),
             pos=bool(getattr(self, "detect_positive", True)), backend=backend)


@dsl.op("Not", since=1)
class Not(_Predicate):
    code = NOT
    allowed = BOOL
    inplace = {0: 0}


@dsl.op("IsNaN", since=9)
class IsNaN(_Predicate):
    code = ISNAN


@dsl.op("IsInf", since=10)
class IsInf(_Predicate):
    """x is +inf (when detect_positive) or -inf (when detect_negative)."""
    code = ISINF
    detect_negative: int = 1
    detect_positive: int = 1


@dsl.op("Where", since=9)
class Where(dsl.Op):
    """x where condition else y, the three broadcast together (numpy.where)."""
    kernels = {"default": where_kernel}

    def verify(self, condition, x, y):
        require_dtype("Where", condition, BOOL, "condition")
        same_dtype("Where x and y", x, y)
        require_dtype("Where", x, BOOL + NUMERIC, "x")
        broadcast_shape(condition.shape, x.shape, y.shape, what="Where condition, x and y")

    def infer(self, condition, x, y):
        return TensorSpec(broadcast_shape(condition.shape, x.shape, y.shape), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        launch_broadcast(impl, inputs, outputs[0], MAX_RANK, backend=backend)

