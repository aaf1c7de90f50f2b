"""Comparison and logical ops: Equal, Less, LessOrEqual, Greater, GreaterOrEqual, And, Or,
Xor (bool results, ONNX multidirectional broadcasting), Not, Where, IsNaN, IsInf.

Three kernels serve the family.  ``compare_kernel`` and ``where_kernel`` use the 4-D
broadcast scheme of ops/elementwise.py (``launch_broadcast`` collapses any number of
inputs' broadcast patterns, so Where's three-way broadcast is the same machinery);
``predicate_kernel`` is a flat loop.  The op code is a ``dsl.const``: each variant holds
only its own test.  The comparisons and And/Or/Xor are the ``compare`` rows of
ops/elementwise_table.py (their classes and ``compare_kernel``'s ladder are made from them);
Not, IsNaN and Where bind to ``custom`` rows.
"""
from __future__ import annotations

import dsl
from dsl import In, Out, bool_, i32
from dsl.opgraph.spec import TensorSpec
from ops import elementwise_table as table
from ops.elementwise import (FLOATS, INTEGERS, MAX_RANK, NUMERIC, broadcast_shape, launch_broadcast,
                             require_dtype, same_dtype)
from ops.generated_kernel import broadcast_loop, compile_kernel, indent, kernel_text, ladder

T = dsl.TypeVar("T")

# op codes of predicate_kernel
ISNAN = 0
ISINF = 1
NOT = 2

BOOL = table.BOOL


# --------------------------------------------------------------------------- kernels

def compare_kernel_of(name: str, rows, doc: str):
    """The 4-D broadcast kernel of ``compare`` rows (bool result), the code a ``dsl.const``."""
    first = {}
    for r in rows:  # versions of one op share its branch
        first.setdefault(r.onnx, r)
    branches = [(CODES.get(o, 0), [f"y.flat[base + j] = {r.expr.format('va', 'vb')}"]) for o, r in first.items()]
    inner = ["for j in range(j0, jn):", "    va = a.flat[p_a + j * s_a3]", "    vb = b.flat[p_b + j * s_b3]"]
    body = broadcast_loop("y", ("a", "b"), inner + indent(ladder(branches)))
    header = f"{name}(a: In[T, 4], b: In[T, 4], y: Out[bool_, 4], op: dsl.const[i32])"
    return compile_kernel(kernel_text(header, doc, body), name, __name__, {"T": T})


CODES = table.codes("compare")  # ONNX name -> op code of compare_kernel
compare_kernel = compare_kernel_of("compare_kernel", table.rows("compare"),
                                   """y = a (op) b as bool; an axis of size 1 in a or b is broadcast along y.  NaN
    compares unequal to everything (IEEE).""")
where_kernel = compile_kernel(kernel_text(
    "where_kernel(c: In[bool_, 4], a: In[T, 4], b: In[T, 4], y: Out[T, 4])",
    "y = a where c else b, each of the three broadcast along y.",
    broadcast_loop("y", ("c", "a", "b"), [
        "for j in range(j0, jn):",
        "    y.flat[base + j] = dsl.where(c.flat[p_c + j * s_c3], a.flat[p_a + j * s_a3], b.flat[p_b + j * s_b3])"])),
    "where_kernel", __name__, {"T": T})


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
    code = 0
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

    plan = dsl.recorded_plan  # launches from shapes and params only


@table.builder("compare")
def compare_class(row: table.Elementwise) -> type:
    """The comparisons and And/Or/Xor; a compare row added later gets a kernel of its own."""
    attrs = {"allowed": row.dtypes, "__module__": __name__, "__qualname__": row.class_name,
             "__doc__": row.doc or f"{row.onnx}(a, b) -> bool with numpy broadcasting."}
    if row in table.ROWS:
        attrs["code"] = CODES[row.onnx]
    else:
        attrs["code"] = 0
        attrs["kernels"] = {"default": compare_kernel_of(f"{row.class_name.lower()}_kernel", [row], row.onnx)}
    return dsl.op(row.onnx, since=row.since, until=row.until)(type(row.class_name, (_Compare,), attrs))


def _declare() -> None:
    for row in table.rows("compare"):
        globals()[row.class_name] = table.register(row)


_declare()


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

    plan = dsl.recorded_plan  # launches from shapes and params only


@table.implements
@dsl.op("Not", since=1)
class Not(_Predicate):
    code = NOT
    allowed = BOOL
    inplace = {0: 0}


@table.implements
@dsl.op("IsNaN", since=9)
class IsNaN(_Predicate):
    code = ISNAN


@dsl.op("IsInf", since=10)
class IsInf(_Predicate):
    """x is +inf (when detect_positive) or -inf (when detect_negative)."""
    code = ISINF
    detect_negative: int = 1
    detect_positive: int = 1


@table.implements
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

    plan = dsl.recorded_plan  # launches from shapes and params only

