"""Unary math ops: Neg, Abs, Sign (integers and floats), Reciprocal, Sqrt, Exp, Log, Floor,
Ceil, Round, Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Erf (floats).

Two kernels serve the whole family, one for floats and one for integers, specialized by
dtype through a TypeVar; the function is a run-time code, tested once outside the loops, so
every float op of one dtype shares one compiled variant.  f16/bf16 load as f32, are computed in
f32 and stored rounded; f64 is computed in f64.  Special values follow IEEE/numpy: NaN
passes through, Sqrt/Log/Asin... outside their domain give NaN, Log(0) and Reciprocal(0)
give -inf/inf, Round rounds half to even, and -0.0 keeps its sign (Neg, Floor, Ceil, Round,
Sin...).  Integers wrap as numpy does (Neg and Abs of the smallest value give it back).
"""
from __future__ import annotations

import dsl
from dsl import In, Out, i32, i64
from ops.elementwise import FLOATS, INTEGERS, require_dtype

F = dsl.TypeVar("F")
I = dsl.TypeVar("I")  # noqa: E741

# operation codes of float_math_kernel / int_math_kernel (module constants fold into kernels)
NEG = 0
ABS = 1
SIGN = 2
RECIPROCAL = 3
SQRT = 4
EXP = 5
LOG = 6
FLOOR = 7
CEIL = 8
ROUND = 9
SIN = 10
COS = 11
TAN = 12
ASIN = 13
ACOS = 14
ATAN = 15
SINH = 16
COSH = 17
ASINH = 18
ACOSH = 19
ATANH = 20
ERF = 21
BITWISE_NOT = 22

SIGNED = (dsl.i8, dsl.i16, dsl.i32, dsl.i64)
UNSIGNED = (dsl.u8, dsl.u16, dsl.u32, dsl.u64)


@dsl.kernel
def float_math_kernel(x: In[F], y: Out[F], op: i32):
    """y = f(x) for a float dtype, f chosen by ``op``.  The choice is made once, outside the
    loops, so each loop is simple enough to vectorize (Exp, Sqrt, Neg... run at memory speed)."""
    lo, hi = dsl.split(x.size)
    if op == NEG:
        for i in range(lo, hi):
            y.flat[i] = -x.flat[i]
    elif op == ABS:
        for i in range(lo, hi):
            y.flat[i] = abs(x.flat[i])
    elif op == SIGN:  # numpy's: 0 for +-0, NaN for NaN
        for i in range(lo, hi):
            v = x.flat[i]
            y.flat[i] = 1.0 if v > 0 else (-1.0 if v < 0 else (v if v != v else 0.0))
    elif op == RECIPROCAL:
        for i in range(lo, hi):
            y.flat[i] = 1 / x.flat[i]
    elif op == SQRT:
        for i in range(lo, hi):
            y.flat[i] = dsl.sqrt(x.flat[i])
    elif op == EXP:
        for i in range(lo, hi):
            y.flat[i] = dsl.exp(x.flat[i])
    elif op == LOG:
        for i in range(lo, hi):
            y.flat[i] = dsl.log(x.flat[i])
    elif op == FLOOR:
        for i in range(lo, hi):
            y.flat[i] = dsl.floor(x.flat[i])
    elif op == CEIL:
        for i in range(lo, hi):
            y.flat[i] = dsl.ceil(x.flat[i])
    elif op == ROUND:
        for i in range(lo, hi):
            y.flat[i] = dsl.rint(x.flat[i])
    elif op == SIN:
        for i in range(lo, hi):
            y.flat[i] = dsl.sin(x.flat[i])
    elif op == COS:
        for i in range(lo, hi):
            y.flat[i] = dsl.cos(x.flat[i])
    elif op == TAN:
        for i in range(lo, hi):
            y.flat[i] = dsl.tan(x.flat[i])
    elif op == ASIN:
        for i in range(lo, hi):
            y.flat[i] = dsl.asin(x.flat[i])
    elif op == ACOS:
        for i in range(lo, hi):
            y.flat[i] = dsl.acos(x.flat[i])
    elif op == ATAN:
        for i in range(lo, hi):
            y.flat[i] = dsl.atan(x.flat[i])
    elif op == SINH:
        for i in range(lo, hi):
            y.flat[i] = dsl.sinh(x.flat[i])
    elif op == COSH:
        for i in range(lo, hi):
            y.flat[i] = dsl.cosh(x.flat[i])
    elif op == ASINH:
        for i in range(lo, hi):
            y.flat[i] = dsl.asinh(x.flat[i])
    elif op == ACOSH:
        for i in range(lo, hi):
            y.flat[i] = dsl.acosh(x.flat[i])
    elif op == ATANH:
        for i in range(lo, hi):
            y.flat[i] = dsl.atanh(x.flat[i])
    else:  # ERF
        for i in range(lo, hi):
            y.flat[i] = dsl.erf(x.flat[i])


@dsl.kernel
def int_math_kernel(x: In[I], y: Out[I], op: i32):
    """Neg, Abs, Sign, BitwiseNot of an integer dtype (wrapping as numpy: -(-128) is -128 in i8)."""
    lo, hi = dsl.split(x.size)
    if op == NEG:
        for i in range(lo, hi):
            y.flat[i] = -x.flat[i]
    elif op == ABS:
        for i in range(lo, hi):
            y.flat[i] = abs(x.flat[i])
    elif op == BITWISE_NOT:
        for i in range(lo, hi):
            y.flat[i] = ~x.flat[i]
    else:  # SIGN; -1 is never stored for unsigned dtypes
        for i in range(lo, hi):
            v = x.flat[i]
            y.flat[i] = i64(v > 0) - i64(v < 0)


class _Math(dsl.Op):
    """One function of the family: ``code`` picks it, ``allowed`` lists the dtypes."""

    code = NEG
    allowed = FLOATS
    formats = ("plain", "nchwc16")
    inplace = {0: 0}
    keeps_padding = True  # f(0) == 0; ops where it is not say False
    kernels = {"float": float_math_kernel, "int": int_math_kernel}

    def verify(self, x):
        require_dtype(self.op_type, x, self.allowed)

    def infer(self, x):
        return x.spec.with_()

    def select(self, x, backend):
        return "float" if x.dtype in FLOATS else "int"

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0], outputs[0], op=self.code, backend=backend)


@dsl.op("Neg", since=6)
class Neg(_Math):
    """-x for signed integers (wrapping) and floats."""
    code = NEG
    allowed = SIGNED + FLOATS


@dsl.op("Abs", since=6)
class Abs(_Math):
    """|x| for every integer (wrapping at the smallest signed value) and float dtype."""
    code = ABS
    allowed = SIGNED + UNSIGNED + FLOATS


@dsl.op("Sign", since=9)
class Sign(_Math):
    """-1, 0 or 1 (NaN stays NaN) for every integer and float dtype."""
    code = SIGN
    allowed = SIGNED + UNSIGNED + FLOATS


@dsl.op("Reciprocal", since=6)
class Reciprocal(_Math):
    code = RECIPROCAL
    keeps_padding = False


@dsl.op("Sqrt", since=6)
class Sqrt(_Math):
    code = SQRT


@dsl.op("Exp", since=6)
class Exp(_Math):
    code = EXP
    keeps_padding = False


@dsl.op("Log", since=6)
class Log(_Math):
    code = LOG
    keeps_padding = False


@dsl.op("Floor", since=6)
class Floor(_Math):
    code = FLOOR


@dsl.op("Ceil", since=6)
class Ceil(_Math):
    code = CEIL


@dsl.op("Round", since=11)
class Round(_Math):
    """Nearest integral value, halves to even (numpy's rint)."""
    code = ROUND


@dsl.op("Sin", since=7)
class Sin(_Math):
    code = SIN


@dsl.op("Cos", since=7)
class Cos(_Math):
    code = COS
    keeps_padding = False


@dsl.op("Tan", since=7)
class Tan(_Math):
    code = TAN


@dsl.op("Asin", since=7)
class Asin(_Math):
    code = ASIN


@dsl.op("Acos", since=7)
class Acos(_Math):
    code = ACOS
    keeps_padding = False


@dsl.op("Atan", since=7)
class Atan(_Math):
    code = ATAN


@dsl.op("Sinh", since=9)
class Sinh(_Math):
    code = SINH


@dsl.op("Cosh", since=9)
class Cosh(_Math):
    code = COSH
    keeps_padding = False


@dsl.op("Asinh", since=9)
class Asinh(_Math):
    code = ASINH


@dsl.op("Acosh", since=9)
class Acosh(_Math):
    code = ACOSH
    keeps_padding = False


@dsl.op("Atanh", since=9)
class Atanh(_Math):
    code = ATANH


@dsl.op("Erf", since=9)
class Erf(_Math):
    code = ERF


@dsl.op("BitwiseNot", since=18)
class BitwiseNot(_Math):
    """~x of an integer dtype (every bit flipped)."""
    code = BITWISE_NOT
    allowed = INTEGERS
    keeps_padding = False  # ~0 is -1
