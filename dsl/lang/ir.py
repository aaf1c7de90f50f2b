"""The typed kernel IR every backend consumes.

Small frozen nodes.  The frontend builds them with ``type=None``; the checker
(dsl/lang/check.py) returns a new tree in which

* every ``Expr.type`` is a concrete (non-weak) DType;
* operands of ``Binary`` and ``Compare`` already have the same type (explicit
  ``Cast`` nodes are inserted), ``Binary`` operands have the result type;
* ``If``/``While``/``Select``/``Conditional`` conditions and ``Logical`` operands are bool_;
* tensor indices and ``For`` bounds are i64; ``Store`` values have the
  tensor's compute type (f32 for f16/bf16 storage);
* ``NDim`` and scratch shapes are folded to ``Const``.

Evaluation order is decided here, once, by the node class, never by a flag a backend
re-reads: ``Select`` (``dsl.where``) evaluates all three operands like a call;
``Conditional`` (``a if c else b``) and ``Logical`` (``and``/``or``) short-circuit.

Semantics are Python's: ``//`` and ``%`` floor, ``int()`` truncates, ``For``
iterates ``range(start, stop, step)`` and the loop variable is assigned from a
hidden counter (changing it in the body does not change the iteration).
"""
from __future__ import annotations

from dataclasses import field, fields
from typing import Iterator, Optional, Tuple, Union

from dsl.lang.errors import UNKNOWN, SourceLoc
from dsl.lang.frozen_record import frozen_record
from dsl.lang.types import DType


@frozen_record
class Node:
    pass


# --------------------------------------------------------------------------- expressions

@frozen_record(kw_only=True)
class Expr(Node):
    """Every expression has a type (None until checked) and a source location."""

    type: Optional[DType] = None
    loc: SourceLoc = field(default=UNKNOWN, compare=False)

@frozen_record
class Const(Expr):
    value: Union[int, float, bool]


@frozen_record
class Name(Expr):
    """A local variable or a scalar parameter."""

    name: str


@frozen_record
class TensorRef(Expr):
    """A whole tensor passed to a ``@dsl.func`` (a kernel tensor, scratch, or a function's own
    tensor parameter passed on): appears only as a ``FuncCall`` argument and has no type."""

    tensor: str


@frozen_record
class Load(Expr):
    """``t[i, j]`` (one index per dim) or ``t.flat[i]`` (flat=True, one index)."""

    tensor: str
    index: Tuple[Expr, ...]
    flat: bool = False


@frozen_record
class AtomicFetchAdd(Expr):
    """``old = dsl.atomic_add(t, idx, v)``: t[idx] += v atomically, the value is t[idx] before.

    A side effect, so the frontend builds it only as the whole right side of an assignment
    (evaluated exactly once, in statement order); its type is the tensor's dtype."""

    tensor: str
    index: Tuple[Expr, ...]
    value: Expr
    flat: bool = False


@frozen_record
class Shape(Expr):
    """``t.shape[axis]`` of a tensor parameter (i64, known at run time)."""

    tensor: str
    axis: int


@frozen_record
class Size(Expr):
    """``t.size`` of a tensor parameter (i64)."""

    tensor: str


UNARY_OPS = ("neg", "not", "invert")
BINARY_OPS = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow",
              "bitand", "bitor", "bitxor", "lshift", "rshift")
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne")


@frozen_record
class Unary(Expr):
    op: str  # one of UNARY_OPS
    operand: Expr


@frozen_record
class Binary(Expr):
    op: str  # one of BINARY_OPS
    left: Expr
    right: Expr


@frozen_record
class Compare(Expr):
    op: str  # one of COMPARE_OPS
    left: Expr
    right: Expr


@frozen_record
class Logical(Expr):
    """Short-circuit ``and`` / ``or`` on bools."""

    op: str  # 'and' | 'or'
    left: Expr
    right: Expr


@frozen_record
class Select(Expr):
    """``dsl.where(cond, a, b)``: evaluates cond, a and b like the arguments of a call, then
    picks one.  Never short-circuits.  (The order of a and b is a call's: left to right on the
    interpreter and numba, unspecified in C; docs/language.md, Semantics.)"""

    cond: Expr
    if_true: Expr
    if_false: Expr


@frozen_record
class Conditional(Expr):
    """``a if cond else b``: evaluates cond, then only the taken side."""

    cond: Expr
    if_true: Expr
    if_false: Expr


@frozen_record
class Call(Expr):
    """A call to a builtin registered in dsl/lang/builtins.py (``BUILTINS[name]``, kind
    ``"call"`` or ``"team"``): the registry gives its typing rule and, per target, its
    spelling.  After checking, the arguments have the types the builtin's rule chose."""

    name: str
    args: Tuple[Expr, ...]


@frozen_record
class NDim(Expr):
    """``t.ndim``: the rank of a tensor, vector or scratch buffer.  The checker folds it to
    a ``Const`` (ranks are known per specialization), so backends never see it."""

    tensor: str


@frozen_record
class Cast(Expr):
    """Convert ``value`` to ``type``; float→int truncates toward zero (Python int()),
    int→narrower int wraps (numpy astype).  A Cast to f16/bf16 appears only
    directly inside a Cast to f32: it rounds the value to 16-bit precision."""

    value: Expr


@frozen_record
class FuncCall(Expr):
    """A call to a ``@dsl.func`` device function.

    Before checking ``func`` is the frontend's key for the called ``Func`` (``Parsed.funcs``);
    after checking it is the ``Function.name`` of the specialization called, a key into
    ``Kernel.funcs`` (``Kernel.function(name)``).  It is an opaque key: nobody parses it."""

    func: str
    args: Tuple[Expr, ...]


# --------------------------------------------------------------------------- SIMD values
#
# A SIMD value has a ``types.SimdType`` type.  The checker lowers every vector operation to
# these nodes, so a backend implements exactly them: scalar operands of a vector operation
# arrive already broadcast (``Splat``), vector operands already converted to the result's
# element type (``VecOp("cast")``).

@frozen_record
class VLoad(Expr):
    """``t.vload(i, n)``: ``n`` consecutive elements of ``t.flat`` from ``i`` (f16/bf16 widen to
    f32).  ``lanes`` is the unchecked lane expression; after checking it is None and the lane
    count is ``type.lanes``."""

    tensor: str
    index: Expr
    lanes: Optional[Expr] = None


@frozen_record
class Splat(Expr):
    """``dsl.splat(s, n)``: every lane ``s`` (lanes as for VLoad)."""

    value: Expr
    lanes: Optional[Expr] = None


@frozen_record
class Lane(Expr):
    """``v[k]``: one lane of a SIMD value; after checking ``lane`` is a Const in range."""

    value: Expr
    lane: Expr


VEC_BINARY = ("add", "sub", "mul", "truediv", "bitand", "bitor", "bitxor", "min", "max")
VEC_COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")


@frozen_record
class VecOp(Expr):
    """An element-wise operation on SIMD values of one lane count, result ``type``.

    ``op`` is a binary arithmetic or comparison name (VEC_BINARY, VEC_COMPARE; comparisons give
    bool lanes), ``neg``/``invert``/``not``, ``where`` (mask, a, b), ``cast`` (to ``type``'s
    element type, with scalar Cast semantics per lane), or the name of a registered builtin of
    kind "call" (``fma``, ``exp``...) applied lane by lane with its scalar semantics."""

    op: str
    args: Tuple[Expr, ...]


@frozen_record
class VReduce(Expr):
    """``dsl.reduce_add/max/min(v)``: a scalar of ``v``'s element type."""

    op: str  # 'add' | 'max' | 'min'
    value: Expr


# --------------------------------------------------------------------------- statements

@frozen_record(kw_only=True)
class Stmt(Node):
    loc: SourceLoc = field(default=UNKNOWN, compare=False)


@frozen_record
class Assign(Stmt):
    name: str
    value: Expr


@frozen_record
class Store(Stmt):
    tensor: str
    index: Tuple[Expr, ...]
    value: Expr
    flat: bool = False


@frozen_record
class AtomicAdd(Stmt):
    """``dsl.atomic_add(t, idx, v)``: t[idx] += v, atomic across threads and tiles."""

    tensor: str
    index: Tuple[Expr, ...]
    value: Expr
    flat: bool = False


@frozen_record
class If(Stmt):
    cond: Expr
    body: Tuple[Stmt, ...]
    orelse: Tuple[Stmt, ...] = ()


@frozen_record
class For(Stmt):
    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: Tuple[Stmt, ...]


@frozen_record
class StaticFor(Stmt):
    """``for var in dsl.static_range(start, stop, step)``, as the frontend parses it.

    It exists only in the untyped IR: the checker evaluates the bounds at compile time and
    replaces the loop by one copy of ``body`` per iteration, ``var`` replaced by an int
    literal, so no backend ever sees it (``Kernel.body`` never contains one)."""

    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: Tuple[Stmt, ...]


@frozen_record
class Require(Stmt):
    """A run-time argument check of a builtin: ``value >= least``, else the launch raises
    ``KernelValueError`` naming ``what`` ('split_align') and ``loc``, on every backend (compiled
    code records it in the launch's error record, backends/bounds.py).  The checker drops it when
    ``value`` is known at compile time and accepted, and raises a CompileError when refused."""

    value: Expr
    least: int
    what: str


@frozen_record
class While(Stmt):
    cond: Expr
    body: Tuple[Stmt, ...]


@frozen_record
class Break(Stmt):
    pass


@frozen_record
class Continue(Stmt):
    pass


@frozen_record
class Return(Stmt):
    """In a kernel (value None) the thread ends; in a function it returns ``value``."""

    value: Optional[Expr] = None


@frozen_record
class Sync(Stmt):
    """Team barrier. The checker guarantees it sits in team-uniform control flow."""



@frozen_record
class ExprStmt(Stmt):
    value: Expr


@frozen_record
class VStore(Stmt):
    """``t.vstore(i, v)``: the lanes of ``v`` into ``t.flat[i:i + lanes]`` (f16/bf16 narrow)."""

    tensor: str
    index: Expr
    value: Expr


@frozen_record
class LocalInit(Stmt):
    """``a = dsl.local(shape, dtype)``: (re)start per-thread array ``a``, every element zero.
    Arrays indexed only by compile-time constants never reach a backend: the checker turns
    their elements into locals; the others are ``Kernel.arrays``."""

    name: str


LOG_LEVELS = ("debug", "info", "warn", "error")


@frozen_record
class Log(Stmt):
    """``dsl.log.info("x=%d", v)``: printf-style; below the kernel's level it is never emitted.
    ``level == "print"`` comes from print(a, b): always emitted, args joined by spaces (%s)."""

    level: str
    fmt: str
    args: Tuple[Expr, ...] = ()
    pieces: Tuple = ()  # fmt parsed by dsl/lang/log_format.py: literal text and Spec items


# --------------------------------------------------------------------------- kernel level

@frozen_record
class TensorParam:
    name: str
    dtype: DType  # storage dtype
    ndim: int
    access: str  # 'in' | 'out' | 'inout'


@frozen_record
class ScalarParam:
    name: str
    dtype: DType
    const_value: Optional[object] = None  # set for dsl.const params (specialized on)


@frozen_record
class VecParam:
    """``dsl.Vec[i32, 4]``: passed as a 1-D array of ``length``; read with Load(flat=True)."""

    name: str
    dtype: DType
    length: int


Param = Union[TensorParam, ScalarParam, VecParam]


@frozen_record
class Scratch:
    """``dsl.scratch(shape, dtype)``: team-shared, read/written with Load/Store.

    Its identity is ``index``, its position in ``Kernel.scratch``, given by the frontend in
    declaration order; ``loc`` is the position of the ``dsl.scratch(...)`` call itself (line
    and column), so two declarations on one line are told apart (``Kernel.scratch_at``)."""

    name: str
    dtype: DType
    shape: Tuple[int, ...]
    loc: SourceLoc = field(default=UNKNOWN, compare=False)
    index: int = 0


@frozen_record
class LocalArray:
    """``dsl.local(shape, dtype)`` indexed at run time: a per-thread array (a stack or private
    array), read and written with Load/Store like a scratch buffer."""

    name: str
    dtype: DType
    shape: Tuple[int, ...]
    loc: SourceLoc = field(default=UNKNOWN, compare=False)


@frozen_record
class FuncOrigin:
    """Which Python function a ``@dsl.func`` specialization comes from: its qualified name,
    file and first line (``co_firstlineno``, the first decorator line)."""

    qualname: str
    filename: str
    firstline: int

    @staticmethod
    def of(fn) -> "FuncOrigin":
        code = fn.__code__
        return FuncOrigin(fn.__qualname__, code.co_filename, code.co_firstlineno)


@frozen_record
class TensorArg:
    """The type of a tensor argument of a ``@dsl.func`` specialization (part of its key): storage
    dtype, rank, access inside the function ('in' | 'out' | 'inout'), address space ('global'
    for kernel tensors, 'local' for team scratch, whose compile-time ``shape`` is known)."""

    dtype: DType
    ndim: int
    access: str
    space: str = "global"
    shape: Optional[Tuple[int, ...]] = None

    @property
    def name(self) -> str:  # the part of a specialization's name (check_funcs.func_name)
        where = "" if self.space == "global" else "loc"
        return f"{self.access}{self.ndim}d{where}{self.dtype}"


@frozen_record
class Function:
    """A ``@dsl.func`` specialized for argument types; params are scalars, SIMD values or
    tensors (a ``TensorParam`` for a kernel tensor, a ``Scratch`` for team scratch, read-only
    when its ``arg_types`` entry says access 'in'); ``ret`` is None for a statement function.

    ``(origin, arg_types)`` is the specialization's identity: ``arg_types`` are the types
    it was specialized for, Python-literal arguments keeping their weak type (``T.WEAK_INT``
    for ``f(1)``), while ``params`` have the concrete types the code uses.  ``name`` is a
    valid identifier, unique within the kernel, which ``FuncCall.func`` refers to; backends
    may emit it or derive their own, but never parse it."""

    name: str
    params: Tuple[Union[ScalarParam, TensorParam, Scratch], ...]
    ret: Optional[DType]
    body: Tuple[Stmt, ...]
    locals: Tuple[Tuple[str, DType], ...] = ()  # (name, type) of locals other than params
    origin: Optional[FuncOrigin] = None
    arg_types: Tuple[DType, ...] = ()

    @property
    def tensors(self) -> Tuple[Union[TensorParam, Scratch], ...]:
        return tuple(p for p in self.params if not isinstance(p, ScalarParam))

    def buffer(self, name: str):
        """The tensor parameter named ``name`` (as ``Kernel.buffer`` for a kernel's)."""
        for p in self.tensors:
            if p.name == name:
                return p
        raise KeyError(name)


@frozen_record
class Kernel:
    """One specialization of a kernel: every type and constant known."""

    name: str
    params: Tuple[Param, ...]
    scratch: Tuple[Scratch, ...]
    body: Tuple[Stmt, ...]
    locals: Tuple[Tuple[str, DType], ...]  # every local (not params), with its type
    funcs: Tuple[Function, ...] = ()
    threads: int = 4
    varying: frozenset = frozenset()  # locals whose value may differ between team threads
    filename: str = "<unknown>"
    firstline: int = 1
    arrays: Tuple[LocalArray, ...] = ()  # run-time indexed dsl.local arrays

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def function(self, name: str) -> Function:
        """The specialization a checked ``FuncCall.func`` refers to."""
        for f in self.funcs:
            if f.name == name:
                return f
        raise KeyError(name)

    def scratch_at(self, line: int, col: int) -> Optional[Scratch]:
        """The scratch declared by the ``dsl.scratch(...)`` call at ``line``:``col`` (1-based)."""
        for s in self.scratch:
            if s.loc.line == line and s.loc.col == col:
                return s
        return None

    def buffer(self, name: str):
        """The TensorParam, VecParam, Scratch or LocalArray named ``name``."""
        for p in self.params + self.scratch + self.arrays:
            if p.name == name:
                return p
        raise KeyError(name)


# --------------------------------------------------------------------------- utilities

def children(node: Node) -> Iterator[Node]:
    """Direct child nodes, in field order."""
    for f in fields(node):
        v = getattr(node, f.name)
        if isinstance(v, Node):
            yield v
        elif isinstance(v, tuple):
            for item in v:
                if isinstance(item, Node):
                    yield item


def walk(nodes) -> Iterator[Node]:
    """Every node under ``nodes`` (a node or a sequence of them), pre-order."""
    stack = list(reversed(nodes)) if isinstance(nodes, (tuple, list)) else [nodes]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(list(children(n))))


def contains_sync(nodes) -> bool:
    return any(isinstance(n, Sync) for n in walk(nodes))


def dump(kernel: Kernel) -> str:
    """A readable listing of the IR (``kernel.source("ir")``)."""
    out = [f"kernel {kernel.name}(threads={kernel.threads})"]
    for p in kernel.params:
        out.append(f"  param {p}")
    for s in kernel.scratch:
        out.append(f"  scratch {s.name}: {s.dtype}{list(s.shape)}")
    for a in kernel.arrays:
        out.append(f"  array {a.name}: {a.dtype}{list(a.shape)}")
    for name, t in kernel.locals:
        out.append(f"  local {name}: {t}" + ("  (varying)" if name in kernel.varying else ""))
    for f in kernel.funcs:
        out.append(f"  func {f.name}({', '.join(param_text(p) for p in f.params)}) -> {f.ret}")
        _dump_body(f.body, 2, out)
    out.append("  body:")
    _dump_body(kernel.body, 2, out)
    return "\n".join(out)


def param_text(p) -> str:
    """A function parameter in listings: a value's type, a tensor's access and rank, scratch's shape."""
    if isinstance(p, TensorParam):
        return f"{p.name}: {p.access} {p.dtype} {p.ndim}-d"
    if isinstance(p, Scratch):
        return f"{p.name}: scratch {p.dtype}{list(p.shape)}"
    return f"{p.name}: {p.dtype}"


def _dump_body(stmts, depth: int, out: list) -> None:
    pad = "  " * depth
    for s in stmts:
        if isinstance(s, If):
            out.append(f"{pad}if {fmt(s.cond)}:")
            _dump_body(s.body, depth + 1, out)
            if s.orelse:
                out.append(f"{pad}else:")
                _dump_body(s.orelse, depth + 1, out)
        elif isinstance(s, For):
            out.append(f"{pad}for {s.var} in range({fmt(s.start)}, {fmt(s.stop)}, {fmt(s.step)}):")
            _dump_body(s.body, depth + 1, out)
        elif isinstance(s, While):
            out.append(f"{pad}while {fmt(s.cond)}:")
            _dump_body(s.body, depth + 1, out)
        elif isinstance(s, Assign):
            out.append(f"{pad}{s.name} = {fmt(s.value)}")
        elif isinstance(s, (Store, AtomicAdd)):
            sub = f"{s.tensor}.flat[{fmt(s.index[0])}]" if s.flat else f"{s.tensor}[{', '.join(map(fmt, s.index))}]"
            op = "+=" if isinstance(s, AtomicAdd) else "="
            out.append(f"{pad}{sub} {op} {fmt(s.value)}")
        elif isinstance(s, VStore):
            out.append(f"{pad}{s.tensor}.vstore({fmt(s.index)}, {fmt(s.value)})")
        elif isinstance(s, LocalInit):
            out.append(f"{pad}{s.name} = local(zeros)")
        elif isinstance(s, Require):
            out.append(f"{pad}require {s.what}: {fmt(s.value)} >= {s.least}")
        elif isinstance(s, Return):
            out.append(f"{pad}return" + (f" {fmt(s.value)}" if s.value is not None else ""))
        elif isinstance(s, Log):
            out.append(f"{pad}log.{s.level}({s.fmt!r}{''.join(', ' + fmt(a) for a in s.args)})")
        elif isinstance(s, ExprStmt):
            out.append(f"{pad}{fmt(s.value)}")
        else:
            out.append(f"{pad}{type(s).__name__.lower()}")


_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
            "pow": "**", "bitand": "&", "bitor": "|", "bitxor": "^", "lshift": "<<", "rshift": ">>",
            "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
            "neg": "-", "not": "not ", "invert": "~", "and": "and", "or": "or"}


def fmt(e: Expr) -> str:
    """Python-like text of an expression, for listings and messages."""
    if isinstance(e, Const):
        return repr(e.value)
    if isinstance(e, Name):
        return e.name
    if isinstance(e, TensorRef):
        return e.tensor
    if isinstance(e, Load):
        return f"{e.tensor}.flat[{fmt(e.index[0])}]" if e.flat else f"{e.tensor}[{', '.join(map(fmt, e.index))}]"
    if isinstance(e, AtomicFetchAdd):
        sub = f"{e.tensor}.flat[{fmt(e.index[0])}]" if e.flat else f"{e.tensor}[{', '.join(map(fmt, e.index))}]"
        return f"atomic_add({sub}, {fmt(e.value)})"
    if isinstance(e, Shape):
        return f"{e.tensor}.shape[{e.axis}]"
    if isinstance(e, Size):
        return f"{e.tensor}.size"
    if isinstance(e, Unary):
        return f"({_SYMBOLS[e.op]}{fmt(e.operand)})"
    if isinstance(e, (Binary, Compare, Logical)):
        return f"({fmt(e.left)} {_SYMBOLS[e.op]} {fmt(e.right)})"
    if isinstance(e, Conditional):
        return f"({fmt(e.if_true)} if {fmt(e.cond)} else {fmt(e.if_false)})"
    if isinstance(e, Select):
        return f"where({fmt(e.cond)}, {fmt(e.if_true)}, {fmt(e.if_false)})"
    if isinstance(e, NDim):
        return f"{e.tensor}.ndim"
    if isinstance(e, (Call, FuncCall)):
        name = e.name if isinstance(e, Call) else e.func
        return f"{name}({', '.join(map(fmt, e.args))})"
    if isinstance(e, Cast):
        return f"{e.type}({fmt(e.value)})"
    if isinstance(e, VLoad):
        return f"{e.tensor}.vload({fmt(e.index)}, {e.type.lanes if e.type is not None else fmt(e.lanes)})"
    if isinstance(e, Splat):
        return f"splat({fmt(e.value)}, {e.type.lanes if e.type is not None else fmt(e.lanes)})"
    if isinstance(e, Lane):
        return f"{fmt(e.value)}[{fmt(e.lane)}]"
    if isinstance(e, VecOp):
        if e.op in _SYMBOLS and len(e.args) == 2:
            return f"({fmt(e.args[0])} {_SYMBOLS[e.op]} {fmt(e.args[1])})"
        return f"{e.op if e.op != 'cast' else e.type}({', '.join(map(fmt, e.args))})"
    if isinstance(e, VReduce):
        return f"reduce_{e.op}({fmt(e.value)})"
    return type(e).__name__
