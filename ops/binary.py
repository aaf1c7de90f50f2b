"""Binary arithmetic beyond Add/Sub/Mul: Div, Mod, BitShift, Pow, the variadic Max, Min,
Sum and Mean, and the opset-6 forms of Div and Pow (``broadcast``/``axis`` attributes; Add,
Sub and Mul of opset 6 are deliberately not provided, tests/ops/test_elementwise.py).

They broadcast like Add (the 4-D collapse of ops/elementwise.py) through two kernels:

* ``binary_op_kernel``: one inner loop per op code, the code a ``dsl.const`` -- a variant
  compiles only its own loop, so each (op, dtype) is a small compile and none makes
  Add's variants bigger.  Max/Min/Sum/Mean fold their inputs pairwise through it.
* ``pow_kernel``: base and exponent have their own TypeVars (ONNX Pow opset 12+).

Both are written by ops/generated_kernel.py's broadcast loop; BitwiseAnd/Or/Xor are the
``bitwise`` rows of ops/elementwise_table.py (classes and ladder branches made from them), and
Div, Pow, Max and Min bind to ``custom`` rows, which say how they fuse.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

import dsl
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops import elementwise_table as table
from ops.elementwise import (FLOATS, INTEGERS, MAX_RANK, NUMERIC, UNSIGNED, Add, Mul, Sub, _Binary,
                             broadcast_shape, launch_broadcast, require_dtype, same_dtype)
from ops.generated_kernel import broadcast_loop, compile_kernel, indent, kernel_text, ladder, with_loads

T = dsl.TypeVar("T")
U = dsl.TypeVar("U")

# op codes of binary_op_kernel (module constants fold into kernels)
ADD = 0
SUB = 1
MUL = 2
DIV = 3     # float division
IDIV = 4    # integer division, truncating
MAX = 5
MIN = 6
MOD = 7     # floor remainder (np.mod)
IFMOD = 8   # C fmod of integers
FMOD = 9    # C fmod of floats
SHL = 10
SHR = 11    # arithmetic right shift
SHRU = 12   # logical right shift
BAND = 13
BOR = 14
BXOR = 15


# --------------------------------------------------------------------------- kernels

_LOADS = {"va": "a.flat[p_a + j * s_a3]", "vb": "b.flat[p_b + j * s_b3]"}

# the ops' own loops; the arith and bitwise rows' loops come from their expressions
_LOOPS = {
    DIV: ["y.flat[base + j] = va / vb"],  # floats: true division
    IDIV: ["q = va // vb",  # integers: truncate toward zero (C, ONNX); x / 0 gives 0 as numpy
           "if va % vb != 0 and (va < 0) != (vb < 0):", "    q += 1", "y.flat[base + j] = q"],
    MAX: ["y.flat[base + j] = va if va >= vb or va != va else vb"],  # NaN in either input gives NaN (np.maximum)
    MIN: ["y.flat[base + j] = va if va <= vb or va != va else vb"],
    MOD: ["y.flat[base + j] = va % vb"],  # floor remainder, the sign of b (Python, np.mod)
    IFMOD: ["m = va % vb",  # C fmod of integers: the sign of a
            "if m != 0 and (m < 0) != (va < 0):", "    m -= vb", "y.flat[base + j] = m"],
    FMOD: ["m = abs(va) % abs(vb)", "y.flat[base + j] = -m if va < 0 else m"],  # |a| mod |b| exact, sign of a
    SHL: ["y.flat[base + j] = dsl.i64(va) << dsl.i64(vb)"],  # counts outside [0, bits) give 0; wraps into T
    SHR: ["y.flat[base + j] = dsl.i64(va) >> dsl.i64(vb)"],  # signed: sign fill, also for counts outside
    SHRU: ["y.flat[base + j] = dsl.u64(va) >> dsl.u64(vb)"],  # unsigned, zero fill
}


def _op_kernel(name: str, branches, doc: str):
    """A 4-D broadcast kernel whose ``op`` is a compile-time constant: one loop per branch."""
    row = ladder([(code, ["for j in range(j0, jn):"] + indent(with_loads(lines, _LOADS))) for code, lines in branches])
    body = broadcast_loop("y", ("a", "b"), row)
    return compile_kernel(kernel_text(f"{name}(a: In[T, 4], b: In[T, 4], y: Out[T, 4], op: dsl.const[i32])", doc, body),
                          name, __name__, {"T": T})


def _row_loop(row) -> list:
    return [f"y.flat[base + j] = {row.expr.format('va', 'vb')}"]


_BITWISE = table.codes("bitwise")  # ONNX name -> its code, counted from BAND
binary_op_kernel = _op_kernel("binary_op_kernel", sorted(
    [(ADD + k, _row_loop(r)) for k, r in enumerate(table.rows("arith"))] + list(_LOOPS.items())
    + [(BAND + _BITWISE[r.onnx], _row_loop(r)) for r in table.rows("bitwise")]),
    """y = a (op) b for the rarer binary ops, broadcasting like binary_kernel.

    ``op`` is a compile-time constant: a variant holds only its own loop, so each
    (op, dtype) costs a small compile instead of every op making every variant large.
    Every op's code type-checks for every numeric T (shifts go through i64/u64), though
    the ops only pick the codes that make sense for the dtype.""")

pow_kernel = compile_kernel(kernel_text(
    "pow_kernel(a: In[T, 4], b: In[U, 4], y: Out[T, 4])",
    """y = a ** b with broadcasting; the exponent's dtype may differ from the base's
    (ONNX Pow opset 12+), the result takes the base's (float math for any float operand,
    integer power by squaring for two integers).""",
    broadcast_loop("y", ("a", "b"), ["for j in range(j0, jn):",
                                     "    y.flat[base + j] = dsl.pow(a.flat[p_a + j * s_a3], b.flat[p_b + j * s_b3])"])),
    "pow_kernel", __name__, {"T": T, "U": U})


# --------------------------------------------------------------------------- ops

def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind in "fV"  # V: ml_dtypes' bfloat16


@table.implements
@dsl.op("Div", since=7)
class Div(_Binary):
    """a / b; integers truncate toward zero (as C and onnx's reference) and x / 0 is 0."""
    keeps_padding = False  # 0 / 0 is NaN
    kernels = {"default": binary_op_kernel}

    def opcode(self, dtype):
        return DIV if _is_float(dtype) else IDIV


class _Mod(_Binary):
    """a mod b: ``fmod=0`` floor remainder with the sign of b (Python), ``fmod=1`` C fmod
    with the sign of a; an integer x mod 0 is 0 (numpy), a float one NaN."""
    fmod: int = 0
    keeps_padding = False
    floats_need_fmod = False
    kernels = {"default": binary_op_kernel}

    def verify(self, a, b):
        super().verify(a, b)
        if self.fmod not in (0, 1):
            raise VerifyError(f"Mod attribute fmod is {self.fmod}; accepted: 0 or 1")
        if self.floats_need_fmod and self.fmod == 0 and a.dtype in FLOATS:
            raise VerifyError(f"Mod of {a.dtype} inputs needs fmod=1 before opset 28, got fmod=0")

    def opcode(self, dtype):
        if self.fmod == 0:
            return MOD
        return FMOD if _is_float(dtype) else IFMOD


@dsl.op("Mod", since=10, until=27)
class ModV10(_Mod):
    """Mod of opsets 10-27: float inputs require fmod=1."""
    floats_need_fmod = True


@dsl.op("Mod", since=28)
class Mod(_Mod):
    """Mod of opset 28+: floats may use fmod=0 too (np.mod)."""


class _BitShift(_Binary):
    """x << y or x >> y (direction LEFT / RIGHT); a count outside [0, bits) gives 0, or
    the sign fill (-1 for a negative x) when shifting a signed x right."""
    direction: str
    allowed = UNSIGNED
    kernels = {"default": binary_op_kernel}

    def verify(self, a, b):
        super().verify(a, b)
        if self.direction not in ("LEFT", "RIGHT"):
            raise VerifyError(f"BitShift attribute direction is {self.direction!r}; accepted: 'LEFT', 'RIGHT'")

    def opcode(self, dtype):
        if self.direction == "LEFT":
            return SHL
        return SHR if dtype.kind == "i" else SHRU


@dsl.op("BitShift", since=11, until=27)
class BitShiftV11(_BitShift):
    """BitShift of opsets 11-27: unsigned integers."""


@dsl.op("BitShift", since=28)
class BitShift(_BitShift):
    """BitShift of opset 28+: signed integers too (arithmetic right shift)."""
    allowed = INTEGERS


class _Bitwise(_Binary):
    """a & b, a | b, a ^ b of integers, with numpy broadcasting."""
    allowed = INTEGERS
    code = BAND
    kernels = {"default": binary_op_kernel}

    def opcode(self, dtype):
        return self.code


@table.builder("bitwise")
def bitwise_class(row: table.Elementwise) -> type:
    """BitwiseAnd/Or/Xor, and bitwise rows added later (those get a kernel of their own)."""
    attrs = {"allowed": row.dtypes, "keeps_padding": row.keeps_padding, "__module__": __name__,
             "__qualname__": row.class_name, "__doc__": row.doc or f"{row.onnx}(a, b) with numpy broadcasting."}
    if row in table.ROWS:
        attrs["code"] = BAND + _BITWISE[row.onnx]
    else:
        attrs["code"] = 0
        attrs["kernels"] = {"default": _op_kernel(f"{row.class_name.lower()}_kernel", [(0, _row_loop(row))], row.onnx)}
    return dsl.op(row.onnx, since=row.since, until=row.until)(type(row.class_name, (_Bitwise,), attrs))


BitwiseAnd, BitwiseOr, BitwiseXor = (table.register(r) for r in table.rows("bitwise"))


@table.implements
@dsl.op("Pow", since=7)
class Pow(dsl.Op):
    """a ** b; b may have another dtype (opset 12+), the result has a's."""
    formats = ("plain",)
    inplace = {0: 0}
    kernels = {"default": pow_kernel}

    def verify(self, a, b):
        require_dtype("Pow", a, NUMERIC, "base")
        require_dtype("Pow", b, NUMERIC, "exponent")
        broadcast_shape(a.shape, b.shape, what="Pow")

    def infer(self, a, b):
        return TensorSpec(broadcast_shape(a.shape, b.shape), a.dtype)

    def run(self, impl, inputs, outputs, backend):
        launch_broadcast(impl, inputs, outputs[0], MAX_RANK, backend=backend)

    plan = dsl.recorded_plan  # launches from shapes and params only


class _Variadic(dsl.Op):
    """Max, Min, Sum, Mean of 1..N inputs with multidirectional broadcasting, folded pairwise
    through binary_op_kernel (intermediates in the output's dtype, as onnx's reference)."""
    code = MAX
    allowed = NUMERIC
    mean = False
    kernels = {"default": binary_op_kernel}

    def verify(self, *xs):
        if not xs:
            raise VerifyError(f"{self.op_type} needs at least one input, got none")
        if any(x is None for x in xs):
            raise VerifyError(f"{self.op_type} inputs may not be omitted (empty input names)")
        same_dtype(self.op_type, *xs)
        require_dtype(self.op_type, xs[0], self.allowed)
        broadcast_shape(*(x.shape for x in xs), what=self.op_type)

    def infer(self, *xs):
        return TensorSpec(broadcast_shape(*(x.shape for x in xs)), xs[0].dtype)

    def run(self, impl, inputs, outputs, backend):
        y = outputs[0]
        xs = list(inputs)
        code = self.code
        if len(xs) == 1 and not self.mean:
            xs, code = [xs[0], xs[0]], MAX  # max(x, x): a copy
        acc = xs[0]
        for k in range(1, len(xs)):
            dst = y if k == len(xs) - 1 and not self.mean else np.empty(y.shape, y.dtype)
            launch_broadcast(impl, [acc, xs[k]], dst, MAX_RANK, op=code, backend=backend)
            acc = dst
        if self.mean:
            n = np.full((1,), len(xs), y.dtype)
            launch_broadcast(impl, [acc, n], y, MAX_RANK, op=DIV, backend=backend)

    plan = dsl.recorded_plan  # launches from shapes and params only


@table.implements
@dsl.op("Max", since=8)
class Max(_Variadic):
    """Elementwise largest of the inputs; NaN wins (np.maximum)."""
    code = MAX


@table.implements
@dsl.op("Min", since=8)
class Min(_Variadic):
    """Elementwise smallest of the inputs; NaN wins (np.minimum)."""
    code = MIN


@dsl.op("Sum", since=8)
class Sum(_Variadic):
    """Elementwise sum of the float inputs, added left to right."""
    code = ADD
    allowed = FLOATS


@dsl.op("Mean", since=8)
class Mean(_Variadic):
    """The sum of the float inputs divided by their count."""
    code = ADD
    allowed = FLOATS
    mean = True


class _SameShapes(dsl.Op):
    """Max, Min, Sum, Mean of opsets 6-7: no broadcasting, every input of one shape."""

    def verify(self, *xs):
        super().verify(*xs)
        ref = xs[0].shape
        if any(len(x.shape) != len(ref) or any(p is not None and q is not None and p != q
                                                for p, q in zip(x.shape, ref)) for x in xs[1:]):
            shown = ", ".join(str(tuple(x.shape)) for x in xs)
            raise VerifyError(f"{self.op_type} before opset 8 needs inputs of one shape (no broadcasting), got {shown}")


@dsl.op("Max", since=6, until=7)
class MaxV6(_SameShapes, Max):
    allowed = FLOATS


@dsl.op("Min", since=6, until=7)
class MinV6(_SameShapes, Min):
    allowed = FLOATS


@dsl.op("Sum", since=6, until=7)
class SumV6(_SameShapes, Sum):
    pass


@dsl.op("Mean", since=6, until=7)
class MeanV6(_SameShapes, Mean):
    pass


class _LegacyBroadcast(dsl.Op):
    """Binary ops before opset 7: shapes must match unless ``broadcast=1``, which broadcasts
    b onto a with b's dims aligned at ``axis`` of a (default: trailing), never the reverse."""
    broadcast: int = 0
    axis: Optional[int] = None
    formats = ("plain",)

    def aligned(self, a: Sequence, b: Sequence) -> Tuple:
        """b's shape padded with trailing 1s so that numpy broadcasting reads it as opset 6 did."""
        if not self.broadcast:
            if len(a) != len(b) or any(x is not None and y is not None and x != y for x, y in zip(a, b)):
                raise VerifyError(f"{self.op_type} (opset < 7) needs inputs of one shape unless broadcast=1, "
                                  f"got {tuple(a)} and {tuple(b)}")
            return tuple(b)
        axis = len(a) - len(b) if self.axis is None else self.axis + (len(a) if self.axis < 0 else 0)
        if axis < 0 or axis + len(b) > len(a):
            raise VerifyError(f"{self.op_type} (opset < 7) cannot align b {tuple(b)} at axis {self.axis} "
                              f"of a {tuple(a)}")
        shape = tuple(b) + (1,) * (len(a) - axis - len(b))
        if broadcast_shape(a, shape, what=self.op_type) != tuple(a):
            raise VerifyError(f"{self.op_type} (opset < 7) broadcasts b onto a only; got a {tuple(a)}, b {tuple(b)}")
        return shape

    def verify(self, a, b):
        super().verify(a, b.with_(shape=self.aligned(a.shape, b.shape)))

    def infer(self, a, b):
        return TensorSpec(a.shape, a.dtype)

    def run(self, impl, inputs, outputs, backend):
        a, b = inputs
        shape = self.aligned(a.shape, b.shape)
        super().run(impl, [a, b.reshape(shape) if shape != b.shape else b], outputs, backend)


@dsl.op("Add", since=6, until=6)
class AddV6(_LegacyBroadcast, Add):
    pass


@dsl.op("Sub", since=6, until=6)
class SubV6(_LegacyBroadcast, Sub):
    pass


@dsl.op("Mul", since=6, until=6)
class MulV6(_LegacyBroadcast, Mul):
    pass


@dsl.op("Div", since=6, until=6)
class DivV6(_LegacyBroadcast, Div):
    pass


@dsl.op("Pow", since=1, until=6)
class PowV1(_LegacyBroadcast, Pow):
    pass
