"""The elementwise ops declared once: one row per (ONNX op, opset range), saying which dtypes it
takes, what one element computes, which builtin the fused kernel calls, whether and how it fuses,
and how a fused program exports.  Everything else is made from these rows:

* the op classes of the ``math`` (ops/unary.py), ``arith`` (Add/Sub/Mul, ops/elementwise.py),
  ``bitwise`` (ops/binary.py) and ``compare`` (ops/logic.py) families, registered with
  ``dsl.op``; ``custom`` rows name a hand-written class (parameters, several inputs, versions)
  that binds itself to its row with ``@implements``;
* the op-code ladders of the shared kernels of those families (one compiled variant per dtype
  serves every op of a family: a row is a branch, not a kernel);
* how each op fuses (``row.fusion()``): the step of a FusedElementwise program
  (dsl/lang/expr_tree.py) the fusion pass (ops/elementwise_fusion.py) makes of a node, the
  kernel text ops/fused_elementwise.py writes for it, and the first opset where
  ops/fused_elementwise_export.py may write it back as its ONNX op (``export_since``).

Adding a fusable, exportable op is one ``register(Elementwise(...))`` (plus, for a new math
function, its builtin in dsl/lang/builtins.py); ``unregister(cls)`` takes it back.  A row added
after the library loaded runs through a kernel generated for it (the shared ladders are made
from the rows the library declares).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple, Union

import dsl
from dsl.opgraph import registry
from ops import elementwise_emitters as em

FLOATS = (dsl.f16, dsl.bf16, dsl.f32, dsl.f64)
SIGNED = (dsl.i8, dsl.i16, dsl.i32, dsl.i64)
UNSIGNED = (dsl.u8, dsl.u16, dsl.u32, dsl.u64)
INTEGERS = (dsl.i8, dsl.u8, dsl.i16, dsl.u16, dsl.i32, dsl.u32, dsl.i64, dsl.u64)
NUMERIC = INTEGERS + FLOATS
BOOL = (dsl.bool_,)

FAMILIES = ("math", "arith", "bitwise", "compare", "custom")


@dataclass(frozen=True)
class Elementwise:
    """One elementwise op version.

    ``expr`` is one element's value over ``{0}``, ``{1}`` (the inputs, already loaded); the
    family's kernel computes it, and unless ``fuse`` says otherwise the fusion pass writes it.
    ``int_expr``: the integer dtypes' version where it differs (math family).  ``builtin``: the
    call ``expr`` makes (``"dsl.sqrt"``, ``"abs"``).  ``fuse``: True (fuse ``expr``), False, or a
    template / a tuple of step templates / a ``Fusion`` (ops/elementwise_emitters.py).
    ``export_since``: the first opset where a fused program may write this op (default: the
    lowest ``since`` among the rows of this op that take f32, or among all of them)."""
    onnx: str
    since: int
    until: Optional[int] = None
    family: str = "math"
    expr: Optional[str] = None
    int_expr: Optional[str] = None
    dtypes: Tuple = FLOATS
    builtin: Optional[str] = None
    fuse: Union[bool, str, Tuple[str, ...], em.Fusion] = False
    keeps_padding: bool = True  # f(0) == 0 (the nchwc16 padding lanes stay zero)
    export_since: Optional[int] = None
    name: Optional[str] = None  # the Python class name; default the ONNX name
    doc: str = ""

    @property
    def class_name(self) -> str:
        return self.name or self.onnx

    def fusion(self) -> Optional[em.Fusion]:
        """How this op fuses (ops/elementwise_emitters.py), or None when it does not."""
        hit = _FUSIONS.get(id(self))
        if hit is None or hit[0] is not self:
            if self.fuse is False:
                made = None
            elif self.fuse is True:
                made = em.template(self.expr)
            elif isinstance(self.fuse, (str, tuple)):
                made = em.template(self.fuse)
            else:
                made = self.fuse
            hit = _FUSIONS[id(self)] = (self, made)
        return hit[1]


_FUSIONS: Dict[int, Tuple["Elementwise", Optional[em.Fusion]]] = {}  # id(row) -> (row, its fusion), made once


_SIGN = "1.0 if {0} > 0 else (-1.0 if {0} < 0 else ({0} if {0} != {0} else 0.0))"  # numpy's: NaN stays NaN
_SIGMOID = ("dsl.exp(-abs({0}))", "1 / (1 + {p0})", "{p1} if {0} >= 0 else {p0} * {p1}")  # never overflows


def _math(onnx, since, expr, builtin=None, fuse=False, keeps_padding=True, dtypes=FLOATS, int_expr=None, doc=""):
    return Elementwise(onnx, since, family="math", expr=expr, int_expr=int_expr, dtypes=dtypes, builtin=builtin,
                       fuse=fuse, keeps_padding=keeps_padding, doc=doc)


def _custom(onnx, since, until=None, name=None, fuse=False, builtin=None, dtypes=FLOATS, export_since=None):
    return Elementwise(onnx, since, until, family="custom", dtypes=dtypes, builtin=builtin, fuse=fuse,
                       export_since=export_since, name=name)


def _compare(onnx, since, expr, dtypes=NUMERIC, until=None, name=None, doc=""):
    return Elementwise(onnx, since, until, family="compare", expr=expr, dtypes=dtypes, name=name, doc=doc)


# The built-in rows.  Within a family the order is the order of the shared kernel's op codes.
ROWS: Tuple[Elementwise, ...] = (
    # unary math (ops/unary.py): float_math_kernel / int_math_kernel
    _math("Neg", 6, "-{0}", int_expr="-{0}", dtypes=SIGNED + FLOATS, fuse=True,
          doc="-x for signed integers (wrapping) and floats."),
    _math("Abs", 6, "abs({0})", int_expr="abs({0})", dtypes=SIGNED + UNSIGNED + FLOATS, builtin="abs", fuse=True,
          doc="|x| for every integer (wrapping at the smallest signed value) and float dtype."),
    _math("Sign", 9, _SIGN, int_expr="i64({0} > 0) - i64({0} < 0)", dtypes=SIGNED + UNSIGNED + FLOATS,
          doc="-1, 0 or 1 (NaN stays NaN) for every integer and float dtype."),
    _math("Reciprocal", 6, "1 / {0}", fuse=True, keeps_padding=False),
    _math("Sqrt", 6, "dsl.sqrt({0})", "dsl.sqrt", fuse=True),
    _math("Exp", 6, "dsl.exp({0})", "dsl.exp", fuse=True, keeps_padding=False),
    _math("Log", 6, "dsl.log({0})", "dsl.log", fuse=True, keeps_padding=False),
    _math("Floor", 6, "dsl.floor({0})", "dsl.floor", fuse=True),
    _math("Ceil", 6, "dsl.ceil({0})", "dsl.ceil", fuse=True),
    _math("Round", 11, "dsl.rint({0})", "dsl.rint", fuse=True, doc="Nearest integral value, halves to even (numpy's rint)."),
    _math("Sin", 7, "dsl.sin({0})", "dsl.sin", fuse=True),
    _math("Cos", 7, "dsl.cos({0})", "dsl.cos", fuse=True, keeps_padding=False),
    _math("Tan", 7, "dsl.tan({0})", "dsl.tan"),
    _math("Asin", 7, "dsl.asin({0})", "dsl.asin"),
    _math("Acos", 7, "dsl.acos({0})", "dsl.acos", keeps_padding=False),
    _math("Atan", 7, "dsl.atan({0})", "dsl.atan"),
    _math("Sinh", 9, "dsl.sinh({0})", "dsl.sinh"),
    _math("Cosh", 9, "dsl.cosh({0})", "dsl.cosh", keeps_padding=False),
    _math("Asinh", 9, "dsl.asinh({0})", "dsl.asinh"),
    _math("Acosh", 9, "dsl.acosh({0})", "dsl.acosh", keeps_padding=False),
    _math("Atanh", 9, "dsl.atanh({0})", "dsl.atanh"),
    _math("Erf", 9, "dsl.erf({0})", "dsl.erf", fuse=True),
    _math("BitwiseNot", 18, None, int_expr="~{0}", dtypes=INTEGERS, keeps_padding=False,
          doc="~x of an integer dtype (every bit flipped)."),  # ~0 is -1
    # Add, Sub, Mul (ops/elementwise.py): binary_kernel
    Elementwise("Add", 7, family="arith", expr="{0} + {1}", dtypes=NUMERIC, fuse=True,
                doc="a + b with numpy broadcasting (integers wrap)."),
    Elementwise("Sub", 7, family="arith", expr="{0} - {1}", dtypes=NUMERIC, fuse=True,
                doc="a - b with numpy broadcasting."),
    Elementwise("Mul", 7, family="arith", expr="{0} * {1}", dtypes=NUMERIC, fuse=True,
                doc="a * b with numpy broadcasting."),
    # bitwise (ops/binary.py): binary_op_kernel, through i64 so the bits wrap back into T
    Elementwise("BitwiseAnd", 18, family="bitwise", expr="dsl.i64({0}) & dsl.i64({1})", dtypes=INTEGERS),
    Elementwise("BitwiseOr", 18, family="bitwise", expr="dsl.i64({0}) | dsl.i64({1})", dtypes=INTEGERS),
    Elementwise("BitwiseXor", 18, family="bitwise", expr="dsl.i64({0}) ^ dsl.i64({1})", dtypes=INTEGERS),
    # comparisons and logic -> bool (ops/logic.py): compare_kernel
    _compare("Equal", 7, "{0} == {1}", BOOL + INTEGERS, until=10, name="EqualV7", doc="Equal of opsets 7-10: bool and integers."),
    _compare("Equal", 11, "{0} == {1}", BOOL + NUMERIC, doc="a == b; every numeric dtype and bool (opset 11+)."),
    _compare("Less", 7, "{0} < {1}", FLOATS, until=8, name="LessV7", doc="Less of opsets 7-8: floats."),
    _compare("Less", 9, "{0} < {1}"),
    _compare("LessOrEqual", 12, "{0} <= {1}"),
    _compare("Greater", 7, "{0} > {1}", FLOATS, until=8, name="GreaterV7", doc="Greater of opsets 7-8: floats."),
    _compare("Greater", 9, "{0} > {1}"),
    _compare("GreaterOrEqual", 12, "{0} >= {1}"),
    _compare("And", 7, "bool({0}) and bool({1})", BOOL, doc="Logical and of bool tensors."),  # bool(): well typed for every T
    _compare("Or", 7, "bool({0}) or bool({1})", BOOL),
    _compare("Xor", 7, "bool({0}) != bool({1})", BOOL),
    # hand-written classes (parameters, optional inputs, versions): they bind with @implements
    _custom("Div", 7, fuse="{0} / {1}", dtypes=NUMERIC),
    _custom("Pow", 7, fuse="dsl.pow({0}, {1})", builtin="dsl.pow", dtypes=NUMERIC),
    _custom("Max", 8, fuse=em.max_min(">="), dtypes=NUMERIC),
    _custom("Min", 8, fuse=em.max_min("<="), dtypes=NUMERIC),
    _custom("Relu", 6, fuse="{0} if {0} > 0 or {0} != {0} else 0", dtypes=NUMERIC),
    _custom("LeakyRelu", 6, fuse=em.leaky_relu),
    _custom("Sigmoid", 6, fuse=_SIGMOID),
    _custom("Tanh", 6, fuse="dsl.tanh({0})", builtin="dsl.tanh"),
    _custom("Clip", 6, 10, name="ClipV6", fuse=em.clip_v6),
    _custom("Clip", 11, fuse=em.clip, dtypes=NUMERIC),
    _custom("Where", 9, fuse=em.template("{1} if {0} else {2}", conditions=(0,)), dtypes=BOOL + NUMERIC),
    _custom("IsNaN", 9),
    _custom("Not", 1, dtypes=BOOL),
    _custom("Cast", 6, 12, name="CastV6", fuse=em.cast, export_since=9),
    _custom("Cast", 13, fuse=em.cast, export_since=9),
)

_ROWS: List[Elementwise] = list(ROWS)
_CLASS: Dict[Elementwise, type] = {}   # row -> its op class
_ROW_OF: Dict[type, Elementwise] = {}  # op class -> its row
_BUILDERS: Dict[str, Callable[[Elementwise], type]] = {}  # family -> makes and registers a row's class
_FUSING: Dict[Tuple[str, Optional[int]], Optional[Elementwise]] = {}  # fusing_row's answers until a row changes


def rows(family: Optional[str] = None) -> List[Elementwise]:
    """The rows declared so far (of one family)."""
    return [r for r in _ROWS if family is None or r.family == family]


def codes(family: str) -> Dict[str, int]:
    """ONNX name -> the op code of the family's shared kernel (versions of one op share it)."""
    out: Dict[str, int] = {}
    for r in ROWS:
        if r.family == family and r.onnx not in out:
            out[r.onnx] = len(out)
    return out


def class_of(row: Elementwise) -> Optional[type]:
    """The op class made from or bound to ``row``, None before that."""
    return _CLASS.get(row)


def row_of(cls: type) -> Optional[Elementwise]:
    """The row an op class was made from or bound to (exactly that class: a subclass may mean
    something else), None for any other class."""
    return _ROW_OF.get(cls)


def builder(family: str):
    """Decorator: ``fn(row) -> class`` makes (and registers with dsl.op) the class of a row of
    ``family``; the family's module installs it, then registers its built-in rows."""
    def deco(fn):
        _BUILDERS[family] = fn
        return fn
    return deco


def register(row: Elementwise) -> type:
    """Declare ``row``: make its op class (its family's builder), register it with ``dsl.op``, and
    tell fusion and export about it.  Returns the class."""
    if row.family not in FAMILIES or row.family == "custom":
        raise ValueError(f"Elementwise row {row.onnx!r}: family {row.family!r} cannot be generated; "
                         f"accepted: {', '.join(f for f in FAMILIES if f != 'custom')} "
                         f"(a hand-written class binds to a 'custom' row with @implements)")
    if row.family not in _BUILDERS:  # the op library loads per op: its family's module installs the builder
        from dsl.opgraph import registry
        registry.load_builtin_library()
    if row.family not in _BUILDERS:
        raise ValueError(f"Elementwise row {row.onnx!r}: the {row.family!r} family is not loaded")
    if row.expr is None and row.int_expr is None:
        raise ValueError(f"Elementwise row {row.onnx!r}: needs expr (or int_expr for an integer-only op)")
    if row.fuse is True and row.expr is None:
        raise ValueError(f"Elementwise row {row.onnx!r}: fuse=True needs expr (fused programs are float)")
    if row not in _ROWS:
        _ROWS.append(row)
    cls = _BUILDERS[row.family](row)
    _bind(row, cls)
    return cls


def implements(cls: type) -> type:
    """Class decorator (above ``@dsl.op``): binds a hand-written op class to its ``custom`` row."""
    for row in _ROWS:
        if row.family == "custom" and (row.onnx, row.since) == (cls.op_type, cls.since):
            _bind(row, cls)
            return cls
    raise ValueError(f"@implements {cls.__name__}: no custom row for {cls.op_type} since {cls.since} "
                     f"in ops/elementwise_table.py; add one")


def unregister(cls: type) -> None:
    """Take back a row added with ``register``: its class, its fusion and its export entries."""
    row = _ROW_OF.pop(cls, None)
    if row is None:
        return
    _CLASS.pop(row, None)
    if row in _ROWS and row not in ROWS:
        _ROWS.remove(row)
    registry.unregister(cls)
    _FUSING.clear()


def _bind(row: Elementwise, cls: type) -> None:
    old = _CLASS.get(row)
    if old is not None:
        _ROW_OF.pop(old, None)
    _CLASS[row], _ROW_OF[cls] = cls, row
    _FUSING.clear()


# --------------------------------------------------------------------------- what others read

def fusing_row(onnx: str, since: Optional[int] = None) -> Optional[Elementwise]:
    """The row a program's step ``onnx`` (of version ``since``; None: the newest) stands for: the
    latest declared row of that op and version that has a class and fuses, None when none does."""
    key = (onnx, since)
    if key not in _FUSING:
        _FUSING[key] = _find_fusing_row(onnx, since)
    return _FUSING[key]


def _find_fusing_row(onnx: str, since: Optional[int]) -> Optional[Elementwise]:
    best = None
    for r in _bound():  # declaration order: a row registered later wins a tie
        if r.onnx == onnx and r.fuse is not False and (since is None or r.since == since):
            if best is None or r.since >= best.since or since is not None:
                best = r
    return best


def fusing_ops() -> List[str]:
    """'Op@since' of every row that fuses now: what a program's steps may call."""
    return sorted({f"{r.onnx}@{r.since}" for r in _bound() if r.fuse is not False})


def _bound() -> List[Elementwise]:
    return [r for r in _ROWS if r in _CLASS]


def export_since(onnx: str) -> Optional[int]:
    """The first ai.onnx opset where a fused program may write ``onnx`` (None: no row has it)."""
    mine = [r for r in _bound() if r.onnx == onnx]
    if not mine:
        return None
    given = [r.export_since for r in mine if r.export_since is not None]
    if given:
        return min(given)
    floats = [r.since for r in mine if dsl.f32 in r.dtypes]
    return min(floats or [r.since for r in mine])
