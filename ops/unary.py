"""Unary math ops: Neg, Abs, Sign (integers and floats), Reciprocal, Sqrt, Exp, Log, Floor,
Ceil, Round, Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Erf (floats),
BitwiseNot (integers): the ``math`` rows of ops/elementwise_table.py, whose classes and kernels are
made here.

Two kernels serve the whole family, one for floats and one for integers, specialized by
dtype through a TypeVar; the function is a run-time code, tested once outside the loops, so
every float op of one dtype shares one compiled variant.  Their op-code ladders are written from
the table's rows (one branch per row, in table order).  f16/bf16 load as f32, are computed in
f32 and stored rounded; f64 is computed in f64.  Special values follow IEEE/numpy: NaN
passes through, Sqrt/Log/Asin... outside their domain give NaN, Log(0) and Reciprocal(0)
give -inf/inf, Round rounds half to even, and -0.0 keeps its sign (Neg, Floor, Ceil, Round,
Sin...).  Integers wrap as numpy does (Neg and Abs of the smallest value give it back).

A math row registered after the library loaded gets kernels of its own, written the same way
with only its branch.
"""
from __future__ import annotations

from typing import Dict, List

import dsl
from ops import elementwise_table as table
from ops.elementwise import FLOATS, require_dtype
from ops.generated_kernel import compile_kernel, indent, kernel_text, ladder, with_loads

F = dsl.TypeVar("F")
I = dsl.TypeVar("I")  # noqa: E741

CODES = table.codes("math")  # ONNX name -> op code of float_math_kernel / int_math_kernel
NEG = CODES["Neg"]
EXP = CODES["Exp"]

_FLOAT_DOC = ("y = f(x) for a float dtype, f chosen by ``op``.  The choice is made once, outside the\n"
              "    loops, so each loop is simple enough to vectorize (Exp, Sqrt, Neg... run at memory speed).")
_INT_DOC = "Neg, Abs, Sign, BitwiseNot of an integer dtype (wrapping as numpy: -(-128) is -128 in i8)."


def _math_kernel(name: str, tv: str, rows: List[table.Elementwise], ints: bool, doc: str):
    """The kernel of ``rows`` (their codes in CODES, or 0 for a single row) over TypeVar ``tv``."""
    branches = []
    for row in rows:
        expr = row.int_expr if ints else row.expr
        if expr is None:
            continue
        code = CODES.get(row.onnx, 0) if len(rows) > 1 else 0
        store = with_loads([f"y.flat[i] = {expr.format('v')}"], {"v": "x.flat[i]"})
        branches.append((code, ["for i in range(lo, hi):"] + indent(store)))
    body = ["lo, hi = dsl.split(x.size)"] + ladder(branches)
    source = kernel_text(f"{name}(x: In[{tv}], y: Out[{tv}], op: i32)", doc, body)
    return compile_kernel(source, name, __name__, {"F": F, "I": I})


_BUILTIN = table.rows("math")
float_math_kernel = _math_kernel("float_math_kernel", "F", _BUILTIN, False, _FLOAT_DOC)
int_math_kernel = _math_kernel("int_math_kernel", "I", _BUILTIN, True, _INT_DOC)


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

    plan = dsl.recorded_plan  # launches from shapes and params only


@table.builder("math")
def math_class(row: table.Elementwise) -> type:
    """The op class of a math row: a code into the shared kernels for the library's own rows, a
    kernel pair of its own for a row added later."""
    attrs: Dict[str, object] = {"allowed": row.dtypes, "keeps_padding": row.keeps_padding,
                                "__module__": __name__, "__qualname__": row.class_name,
                                "__doc__": row.doc or f"{row.onnx}(x) elementwise."}
    if row in _BUILTIN:
        attrs["code"] = CODES[row.onnx]
    else:
        attrs["code"] = 0
        stem = f"{row.class_name.lower()}_kernel"
        made = {"float": row.expr and _math_kernel(f"{stem}_float", "F", [row], False, f"{row.onnx} of a float dtype."),
                "int": row.int_expr and _math_kernel(f"{stem}_int", "I", [row], True, f"{row.onnx} of an integer dtype.")}
        attrs["kernels"] = {k: v for k, v in made.items() if v}
    cls = type(row.class_name, (_Math,), attrs)
    return dsl.op(row.onnx, since=row.since, until=row.until)(cls)


def _declare() -> None:
    for row in _BUILTIN:
        globals()[row.class_name] = table.register(row)


_declare()
