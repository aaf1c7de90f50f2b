"""Typed IR → the Python source of a numba module.

The generated module is meant to be read (``kernel.source("numba")``): one
``@njit`` function per ``@dsl.func``, one per thread body (or per region between
``sync()`` calls, see backends/numba/regions.py), and two entry points:
``launch_serial`` and ``launch_parallel`` (``parallel=True`` + ``prange``).

Values keep their IR type exactly: numba widens small-int arithmetic to
int64, so such results are wrapped back (``np.int32(a + b)``) to get numpy's
wrap-around; f16/bf16 live in uint16 arrays and are converted on load/store.
Tensors arrive as C-contiguous arrays and are flattened once per launch; the
thread code indexes them with row-major offsets from their shape, as unsigned
``ix(offset)``: no negative-index wrap-around check, so inner loops vectorize.
Out-of-range indexes are undefined, as in C.

Math: f32 ``exp``/``erf``/``tanh`` (and under ``fastmath=True`` f32 ``log``) call the inlined
polynomials of backends/numba/math.py, which vectorize, instead of libm.  With
``fastmath=True`` every function also gets numba's ``fastmath`` flags FASTMATH
(reassociation, so float sums vectorize; no ``nnan``/``ninf``: NaN and inf keep their
meaning) and float ``min``/``max``/``clamp`` become NaN-propagating llvm.minimum /
llvm.maximum, so a running maximum vectorizes too.
"""
from __future__ import annotations

import ast
import math
from typing import Callable, Dict, List, Optional, Sequence, Set

from dsl.lang import builtins as B
from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.errors import CompileError
from backends.numba import format as F
from backends.numba.simd_codegen import WIDE_REGISTERS, SimdGen, uses_simd
from backends.numba.tile_codegen import TileGen
from backends.numba.typecode import const, ctype, np_type, storage_np  # noqa: F401  (re-exported)
from dsl.lang import log_format as LF
from dsl.lang.visitor import Visitor
from backends import bounds, log_gate
from backends.bounds import Sites
from backends.func_view import FuncView
from backends.naming import PyNames, ident
from backends.spelling import row_major

LOG_ARG = "_loglvl"  # hidden argument: the run-time dsl.log threshold (backends/log_gate.py)

# The generated module's imports, written once here: the module header is made from them and the
# names they bind are reserved, so a kernel local called ``sm`` or ``np`` is renamed rather than
# shadowing a module the generated code calls.
MODULE_IMPORTS = ("import math", "", "import numpy as np", "from numba import njit, prange", "",
                  "from backends.numba import arith as ar", "from backends.numba import format as fmt",
                  "from backends.numba import math as nm", "from backends.numba import runtime as rt",
                  "from backends.numba import simd as sm", "from backends.numba import pipeline as pl", "from backends.numba import views as vw",
                  "from backends.numba import tiles as tl")
# The functions and constants every generated module defines at its top level (helpers of the
# form ``_x``, ``region_N`` and ``func_x`` are covered by naming.PYTHON_INTERNAL).
MODULE_DEFINES = ("CACHE", "JIT", "BODY", "ix", "thread", "dispatch", "run_threads", "launch_team", "team_serial",
                  "launch_serial", "launch_parallel", "launch_serial_nd", "launch_parallel_nd")


def _bound_by(lines: Sequence[str]) -> Set[str]:
    tree = ast.parse("\n".join(lines))
    return {a.asname or a.name.split(".")[0] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names}


MODULE_NAMES = frozenset(_bound_by(MODULE_IMPORTS)) | frozenset(MODULE_DEFINES)


def Names(user: Sequence[str]) -> PyNames:
    """User names -> generated-module names, never one the module itself binds (MODULE_NAMES)."""
    return PyNames(user, reserved=MODULE_NAMES)

# numba's fastmath flags for fastmath=True kernels: all of LLVM's "fast" but nnan and ninf,
# which would let LLVM assume no NaN/inf ever appears (and fold isnan-style checks away).
FASTMATH = ("afn", "arcp", "contract", "nsz", "reassoc")

# Innermost loops poll Ctrl-C once per this many iterations (see Gen.strip_mined): ~10 us of
# streaming work on one core, so a stop takes far less than a millisecond.
POLL_CHUNK = 16384

_BINARY = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
           "pow": "**", "bitand": "&", "bitor": "|", "bitxor": "^", "lshift": "<<", "rshift": ">>"}
_COMPARE = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}

# f32 builtins computed by backends/numba/math.py: always, or only under fastmath=True.  A faster
# implementation of a registered builtin (within an ulp of it), not a spelling: every builtin is
# spelled from its entry in dsl/lang/builtins.py (target "numba").
_F32_MATH = {"exp": "nm.exp_f32({0})", "erf": "nm.erf_f32({0})", "tanh": "nm.tanh_f32({0})"}
_F32_FAST_MATH = {"log": "nm.log_f32({0})"}

def cast(code: str, src: T.DType, dst: T.DType) -> str:
    """Convert generated ``code`` of type ``src`` to ``dst`` like numpy's astype (ints wrap)."""
    if dst.name == "f16" or dst.name == "bf16":  # f16(v): round through 16 bits, stay f32
        return f"rt.round_{'f16' if dst.name == 'f16' else 'bf16'}({cast(code, src, T.f32)})"
    src, dst = ctype(src), ctype(dst)
    if src == dst:
        return code
    if dst.is_bool:
        return f"({code} != 0)"
    if src.is_float and dst.is_int:  # truncate, saturate, NaN -> 0 (arith.f2i)
        if dst == T.u64:
            return f"ar.f2u64({code}, {const(2.0 ** 64, src)})"
        lo, hi = T.int_range(dst)
        code = f"ar.f2i({code}, {lo}, {hi}, {const(float(lo), src)}, {const(float(hi + 1), src)})"
        return code if dst == T.i64 else f"{np_type(dst)}({code})"
    return f"{np_type(dst)}({code})"


WIDE_VECTORS = "    nm.prefer_wide_vectors()  # compute-bound loops: LLVM may use 512-bit vectors here"


def _nan_propagating(name: str, args: List[str]) -> str:
    """fastmath float min/max/clamp as nm.minimum/nm.maximum calls (vectorizable reductions)."""
    if name == "clamp":
        return f"nm.minimum(nm.maximum({args[0]}, {args[1]}), {args[2]})"
    fn = "nm.maximum" if name == "max" else "nm.minimum"
    code = args[0]
    for a in args[1:]:
        code = f"{fn}({code}, {a})"
    return code


def _same_numbers(e: ir.Call) -> bool:
    """Whether min/max call ``e`` takes ints or floats of its own result type only (arith.min2/max2)."""
    t = ctype(e.type)
    return (t.is_int or t.is_float) and all(ctype(a.type) == t for a in e.args)


def _pairwise(fn: str, args: List[str]) -> str:
    """``fn`` folded over ``args`` left to right, as numba's min/max reduce their arguments."""
    code = args[0]
    for a in args[1:]:
        code = f"{fn}({code}, {a})"
    return code


def _wraps(t: T.DType) -> bool:
    """Whether numba's result of int arithmetic on ``t`` must be narrowed back to ``t``."""
    return t.is_int and t.bits < 64


class Scope:
    """How one generated function spells team queries and locals.

    ``local(name)`` gives the code reading a local (a plain variable, or thread
    ``lead``'s copy in a per-thread array at team level).
    """

    def __init__(self, names: Names, tid: str = "_tid", local: Optional[Callable[[str], str]] = None):
        self.names = names
        self.tid = tid
        self._local = local

    def local(self, name: str) -> str:
        return self._local(name) if self._local else self.names[name]


class Hooks:
    """What Return/Break/Continue become in one kind of function (thread, region, func)."""

    in_func = False  # a @dsl.func: no tensors, so no error record to poll

    def stop(self, gen: "Gen") -> List[str]:
        """Leaving the function after Ctrl-C or a failed bounds check (the team checks again)."""
        return ["return"]

    def ret(self, stmt: ir.Return, gen: "Gen", scope: Scope) -> List[str]:
        return ["return"]

    def escape(self, kind: str) -> List[str]:  # a break/continue leaving the function's own code
        return [kind]


class Gen(SimdGen, TileGen, Visitor):
    """Emits expressions (``visit`` returns their code) and statements (``visit`` appends lines) of
    one kernel specialization."""

    def __init__(self, kernel: ir.Kernel, log_level: str = "debug", fastmath: bool = False, debug: bool = False,
                 interrupt: bool = True):
        self.k = kernel
        self.log_level = log_level
        self.fastmath = fastmath
        self.debug = debug          # bounds-check every access into the error record _err
        self.interrupt = interrupt  # poll the Ctrl-C counter _intr at loop back-edges
        self.gated = log_gate.uses_gate(kernel)  # dsl.log calls compare their level with _loglvl
        self.sites = Sites()        # what each check reports (backends/bounds.py)
        self.record = bounds.needs_record(kernel, debug)  # _err is a hidden argument of every function
        self.stmt_loc = None        # the statement being emitted: where a failed check points
        self.types: Dict[str, T.DType] = {n: t for n, t in kernel.locals}
        self.params = {p.name: p for p in kernel.params}
        self.scratch = {s.name: s for s in kernel.scratch}
        self.funcs = {f.name: f for f in kernel.funcs}
        for p in kernel.params:
            if isinstance(p, ir.ScalarParam):
                self.types.setdefault(p.name, p.dtype)
        user = [p.name for p in kernel.params] + [s.name for s in kernel.scratch] + [a.name for a in kernel.arrays] \
            + [n for n, _ in kernel.locals]
        self.names = Names(user)
        # scalar params the body assigns to behave as locals initialized from the argument
        self.assigned_params = {s.name for s in ir.walk(list(kernel.body))
                                if isinstance(s, ir.Assign) and s.name in self.params}
        self.local_names = {n for n, _ in kernel.locals} | self.assigned_params
        self.func_names = {f.name: "func_" + ident(f.name, "") for f in kernel.funcs}
        # the context of a statement walk (see ``block``)
        self.out: List[str] = []
        self.depth, self.loops, self.hooks, self.line = 0, 0, Hooks(), [None]
        self.simd_helpers: Dict[str, List[str]] = {}  # generated lane-by-lane functions (SimdGen)

    def inlined_math(self, e: ir.Call) -> Optional[str]:
        """The backends.numba.math template computing builtin call ``e``, if it has one here."""
        if ctype(e.type) != T.f32:
            return None
        return _F32_MATH.get(e.name) or (_F32_FAST_MATH.get(e.name) if self.fastmath else None)

    def wide_vectors(self, stmts: Sequence[ir.Stmt], seen: Optional[Set[str]] = None) -> List[str]:
        """The first line of a generated function whose code calls the inlined polynomial math
        (directly or through a @dsl.func): allow 512-bit vectors there.

        LLVM defaults to 256-bit on AVX-512 CPUs.  Wider vectors help where arithmetic
        dominates but slow streaming loops, because numpy's arrays start 16 bytes past a
        cache line, so every 64-byte access straddles two lines (benchmarks/RESULTS.md)."""
        seen = set() if seen is None else seen
        if uses_simd(stmts):
            return [WIDE_REGISTERS]
        for n in ir.walk(list(stmts)):
            if isinstance(n, ir.Call) and self.inlined_math(n):
                return [WIDE_VECTORS]
            if isinstance(n, ir.FuncCall) and n.func not in seen:
                seen.add(n.func)
                if self.wide_vectors(self.funcs[n.func].body, seen):
                    return [WIDE_VECTORS]
        return []

    # ----------------------------------------------------------------- buffers

    def shape_names(self, tensor: str) -> List[str]:
        p = self.k.buffer(tensor)
        if isinstance(p, ir.TensorParam):
            return [f"{self.names[tensor]}_shape{d}" for d in range(p.ndim)]
        if isinstance(p, ir.VecParam):
            return [str(p.length)]
        return [str(n) for n in p.shape]

    def size_code(self, tensor: str) -> str:
        p = self.k.buffer(tensor)
        if isinstance(p, ir.TensorParam):
            return f"{self.names[tensor]}_size"
        if isinstance(p, ir.VecParam):
            return str(p.length)
        return str(math.prod(p.shape))

    def offset(self, tensor: str, index: Sequence[ir.Expr], flat: bool, scope: Scope) -> str:
        idx = [self.visit(i, scope) for i in index]
        if flat:
            return idx[0]
        return row_major(idx, self.shape_names(tensor))

    def checked_args(self, node, kind: str, scope: Scope, middle: str = "") -> str:
        """Arguments of a backends.numba.runtime *_checked call: index and shape tuples, [middle,] record, site, team."""
        idx = [f"np.int64({self.visit(i, scope)})" for i in node.index]
        shape = [self.size_code(node.tensor)] if node.flat else self.shape_names(node.tensor)
        loc = node.loc if getattr(node, "loc", None) is not None and node.loc.line > 0 else self.stmt_loc
        site = self.sites.add(node.tensor, kind, node.flat, len(idx), loc, getattr(self.k, "func_name", ""))
        tup = lambda xs: f"({xs[0]},)" if len(xs) == 1 else f"({', '.join(xs)})"  # noqa: E731
        mid = f", {middle}" if middle else ""
        return f"{tup(idx)}, {tup(shape)}{mid}, _err, {site}, {scope.tid}, _tile"

    def stop_condition(self, hooks: "Hooks") -> str:
        """Code true when this function should stop: Ctrl-C, or (debug) a failed bounds check."""
        conds = ["rt.interrupted(_intr, _intr0)"] if self.interrupt else []
        if self.debug and not hooks.in_func:
            conds.append("_err[0] != 0")
        return " or ".join(conds)

    def poll(self, hooks: "Hooks", pad: str, out: List[str], guard: str = "") -> None:
        """A back-edge poll: leave the function if stop_condition holds (and ``guard``, if given)."""
        cond = self.stop_condition(hooks)
        if cond:
            cond = f"{guard} and ({cond})" if guard else cond
            out.append(f"{pad}if {cond}:  # Ctrl-C{' or a failed bounds check' if self.debug else ''}: stop")
            out.extend(f"{pad}    {x}" for x in hooks.stop(self))

    def storage(self, tensor: str) -> T.DType:
        b = self.k.buffer(tensor)
        return b.dtype

    # ----------------------------------------------------------------- expressions

    def typed(self, e: ir.Expr, want: T.DType, scope: Scope) -> str:
        """``e`` converted to ``want`` when the IR types differ."""
        return cast(self.visit(e, scope), e.type, want)

    def visit_Const(self, e, scope):
        return const(e.value, e.type)

    def visit_Name(self, e, scope):
        return scope.local(e.name) if e.name in self.local_names else self.names[e.name]

    def visit_Load(self, e, scope):
        arr = self.names[e.tensor]
        st = self.storage(e.tensor)
        if self.debug:
            zero = f"{storage_np(st)}(0)"
            code = f"rt.load_checked({arr}, {self.checked_args(e, 'load', scope, zero)})"
        else:
            code = f"{arr}[ix({self.offset(e.tensor, e.index, e.flat, scope)})]"
        if st.is_storage_only:
            code = f"rt.{st.name}_to_f32({code})"
        return cast(code, st, e.type)

    def visit_AtomicFetchAdd(self, e, scope):
        arr = self.names[e.tensor]
        st = self.storage(e.tensor)
        v = self.typed(e.value, ctype(st), scope)
        if self.debug:
            zero = f"{storage_np(st)}(0)"
            return f"rt.fetch_add_checked({arr}, {self.checked_args(e, 'atomic_add', scope, f'{v}, {zero}')})"
        return f"rt.fetch_add({arr}, {self.offset(e.tensor, e.index, e.flat, scope)}, {v})"

    def visit_Shape(self, e, scope):
        return self.shape_names(e.tensor)[e.axis]

    def visit_Size(self, e, scope):
        return self.size_code(e.tensor)

    def visit_Unary(self, e, scope):
        v = self.visit(e.operand, scope)
        t = ctype(e.type)
        if e.op == "not" or (e.op == "invert" and t.is_bool):
            return f"(not {v})"
        code = f"(-{v})" if e.op == "neg" else f"(~{v})"
        return f"{np_type(t)}{code}" if _wraps(t) else code

    def visit_Binary(self, e, scope):
        t = ctype(e.type)
        a, b = self.typed(e.left, t, scope), self.typed(e.right, t, scope)
        code = self.int_edge(e.op, t, a, b, e.right) or f"({a} {_BINARY[e.op]} {b})"
        return f"{np_type(t)}{code}" if _wraps(t) else code

    @staticmethod
    def int_edge(op: str, t: T.DType, a: str, b: str, right: ir.Expr) -> Optional[str]:
        """A backends.numba.arith call for integer ``a op b`` when ``right`` may reach an edge whose plain
        numba result differs from the documented one (INT_MIN // -1, shift counts outside
        [0, bits), negative exponents); None when the plain operator is exact."""
        if not t.is_int:
            return None
        k = right.value if isinstance(right, ir.Const) else None
        if k is None and b.isdigit():  # a team query spelled as a literal (dsl.split's num_threads())
            k = int(b)
        if op in ("floordiv", "mod") and t == T.i64 and k in (None, 0, -1):
            return f"(ar.{op}_i64({a}, {b}))"
        if op in ("lshift", "rshift") and not (k is not None and 0 <= k < t.bits):
            fn = "shl" if op == "lshift" else "shr_signed" if t.kind == "i" else "shr_unsigned"
            return f"(ar.{fn}({a}, {b}, {t.bits}))"
        if op == "pow" and not (k is not None and k >= 0):
            return f"(ar.ipow({a}, {b}, {const(1, t)}))"
        return None

    def visit_Compare(self, e, scope):
        lt, rt_ = ctype(e.left.type), ctype(e.right.type)
        t = lt if lt == rt_ else T.promote(lt, rt_)
        return f"({self.typed(e.left, t, scope)} {_COMPARE[e.op]} {self.typed(e.right, t, scope)})"

    def visit_Logical(self, e, scope):
        return f"({self.typed(e.left, T.bool_, scope)} {e.op} {self.typed(e.right, T.bool_, scope)})"

    def visit_Select(self, e, scope):
        """dsl.where: a call, so every operand is evaluated, left to right."""
        t = ctype(e.type)
        return (f"ar.where({self.typed(e.cond, T.bool_, scope)}, {self.typed(e.if_true, t, scope)}, "
                f"{self.typed(e.if_false, t, scope)})")

    def visit_Conditional(self, e, scope):
        """a if c else b: only the taken side is evaluated."""
        t = ctype(e.type)
        return (f"({self.typed(e.if_true, t, scope)} if {self.typed(e.cond, T.bool_, scope)} "
                f"else {self.typed(e.if_false, t, scope)})")

    def visit_Cast(self, e, scope):
        return cast(self.visit(e.value, scope), e.value.type, e.type)

    TARGETS = ("numba",)  # where this backend looks up builtin spellings (dsl/lang/builtins.py)

    def visit_Call(self, e, scope):
        """A registered builtin, spelled from its registry entry: a format string over the
        argument code, or a ``builtin_<name>`` method of this generator (``B.Helper``)."""
        if B.BUILTINS[e.name].kind == "tile":
            return self.builtin_tile(e, scope)
        if B.BUILTINS[e.name].kind == "hint":  # a tensor passes whole: its Helper method spells it
            return getattr(self, "builtin_" + B.spelling(e.name, self.TARGETS, e.loc).name)(e, [], scope)
        t = ctype(e.type)
        spelled = B.spelling(e.name, self.TARGETS, e.loc)
        args = [self.typed(a, ctype(a.type), scope) for a in e.args]
        if isinstance(spelled, B.Helper):
            code = getattr(self, "builtin_" + spelled.name)(e, args, scope)
        elif self.inlined_math(e):
            code = self.inlined_math(e).format(*args)
        else:
            code = spelled.format(*args, T=np_type(t))
        return f"{np_type(t)}({code})" if _wraps(t) else code

    # Helper spellings (B.Helper): (call, argument code, scope) -> code
    def builtin_thread_id(self, e, args, scope):
        return scope.tid

    def builtin_num_threads(self, e, args, scope):
        return str(self.k.threads)

    def builtin_tile_id(self, e, args, scope):
        # _tile is the flat team index, _ntiles the grid shape (gx, gy, gz); axis 0 varies fastest
        return ("(_tile % _ntiles[0])", "(_tile // _ntiles[0] % _ntiles[1])",
                "(_tile // (_ntiles[0] * _ntiles[1]))")[B.grid_axis(e)]

    def builtin_num_tiles(self, e, args, scope):
        return f"_ntiles[{B.grid_axis(e)}]"

    def builtin_min(self, e, args, scope):
        if self.fastmath and ctype(e.type).is_float:
            return _nan_propagating("min", args)
        if _same_numbers(e):  # an intrinsic: numba's min would compile its generic version as a function
            return _pairwise("ar.min2", args)
        return f"min({', '.join(args)})"

    def builtin_max(self, e, args, scope):
        if self.fastmath and ctype(e.type).is_float:
            return _nan_propagating("max", args)
        if _same_numbers(e):
            return _pairwise("ar.max2", args)
        return f"max({', '.join(args)})"

    def builtin_clamp(self, e, args, scope):
        if self.fastmath and ctype(e.type).is_float:
            return _nan_propagating("clamp", args)
        return f"min(max({args[0]}, {args[1]}), {args[2]})"

    def builtin_prefetch(self, e, args, scope):
        """llvm.prefetch of the element's address (the tensor passes whole, ``args`` is empty); no
        bounds check: a hint never faults."""
        return f"sm.prefetch({self.names[e.args[0].tensor]}, {self.typed(e.args[1], T.i64, scope)})"

    def builtin_fma(self, e, args, scope):
        if ctype(e.type).is_float:
            return f"sm.fma({', '.join(args)})"
        return f"({args[0]} * {args[1]} + {args[2]})"

    def builtin_dot4(self, e, args, scope):
        return f'sm.dot4({", ".join(args)}, "generic")'

    def builtin_dot4_sat(self, e, args, scope):
        return f'sm.dot4_sat({", ".join(args)}, "generic")'

    def builtin_dot2_i16(self, e, args, scope):
        return f'sm.dot2_i16({", ".join(args)}, "generic")'

    def builtin_pow(self, e, args, scope):
        return self.int_edge("pow", ctype(e.type), args[0], args[1], e.args[1]) or f"({args[0]} ** {args[1]})"

    def tensor_args(self, tensor: str) -> List[str]:
        """What passes a tensor to a @dsl.func: the flat array, then (a kernel tensor) its shape and size."""
        b = self.k.buffer(tensor)
        if isinstance(b, ir.TensorParam):
            return [self.names[tensor], *self.shape_names(tensor), self.size_code(tensor)]
        return [self.names[tensor]]

    def visit_FuncCall(self, e, scope):
        f = self.funcs[e.func]
        args = (["_err"] if self.record else []) + ([LOG_ARG] if self.gated else [])
        for a, p in zip(e.args, f.params):
            if isinstance(a, ir.TensorRef):
                args += self.tensor_args(a.tensor)
                continue
            code = self.typed(a, p.dtype, scope)
            if isinstance(a, ir.Const) and ctype(p.dtype) in (T.i64, T.bool_):
                code = f"{np_type(p.dtype)}({code})"  # a literal would make numba compile a copy per value
            args.append(code)
        return f"{self.func_names[e.func]}({', '.join([scope.tid, '_tile', '_ntiles', '_intr', '_intr0'] + args)})"

    # ----------------------------------------------------------------- statements
    #
    # A walk over statements keeps its context on the generator: ``out`` (the lines so far),
    # ``depth`` (indentation levels), ``loops`` (enclosing loops of this function: a break at 0
    # leaves the function's own code), ``hooks`` (what return/break/continue become) and ``line``
    # (the Python line last commented).  ``nested`` saves and restores them around a body.

    def block(self, stmts: Sequence[ir.Stmt], scope: Scope, hooks: Hooks, depth: int,
              loops: int = 0, out: Optional[List[str]] = None, line: Optional[list] = None) -> List[str]:
        """Lines (indented ``depth`` levels) for ``stmts``; ``loops`` counts enclosing loops of this function."""
        saved = self.out, self.depth, self.loops, self.hooks, self.line
        self.out = [] if out is None else out
        self.depth, self.loops, self.hooks = depth, loops, hooks
        self.line = [None] if line is None else line
        try:
            self._body(stmts, scope)
            return self.out
        finally:
            self.out, self.depth, self.loops, self.hooks, self.line = saved

    def nested(self, stmts: Sequence[ir.Stmt], scope: Scope, indent: int = 1, loop: bool = False) -> None:
        """The body of a compound statement, ``indent`` levels deeper (inside one more loop if ``loop``)."""
        saved = self.depth, self.loops
        self.depth += indent
        self.loops += loop
        try:
            self._body(stmts, scope)
        finally:
            self.depth, self.loops = saved

    def _body(self, stmts: Sequence[ir.Stmt], scope: Scope) -> None:
        out, pad = self.out, self.pad
        start = len(out)
        for s in stmts:
            self._comment(s, pad, out, self.line)
            if getattr(s, "loc", None) is not None and s.loc.line > 0:
                self.stmt_loc = s.loc
            self.visit(s, scope)
        if len(out) == start or all(x.lstrip().startswith("#") for x in out[start:]):
            out.append(pad + "pass")

    @property
    def pad(self) -> str:
        return "    " * self.depth

    def emit(self, *lines: str) -> None:
        """Lines at the current indentation."""
        self.out.extend(self.pad + x for x in lines)

    def unsupported(self, node, *context):
        what = "statements" if isinstance(node, ir.Stmt) else "expressions"
        raise CompileError(f"the numba backend cannot compile {type(node).__name__} {what}",
                           getattr(node, "loc", None))

    def _comment(self, s: ir.Stmt, pad: str, out: List[str], line: list) -> None:
        loc = getattr(s, "loc", None)
        if loc is None or loc.line <= 0 or loc.line == line[0]:
            return
        line[0] = loc.line
        text = loc.source_line().strip()
        out.append(f"{pad}# py:{loc.line}  {text}" if text else f"{pad}# py:{loc.line}")

    def visit_Assign(self, s, scope):
        t = self.types.get(s.name, s.value.type)
        self.emit(f"{self.names[s.name]} = {self.typed(s.value, t, scope)}")

    def store_code(self, tensor: str, index, flat: bool, value: ir.Expr, scope: Scope) -> str:
        st = self.storage(tensor)
        v = self.typed(value, ctype(st), scope)
        if st.is_storage_only:
            v = f"rt.f32_to_{st.name}({v})"
        return f"{self.names[tensor]}[ix({self.offset(tensor, index, flat, scope)})] = {v}"

    def visit_Store(self, s, scope):
        if self.debug:
            st = self.storage(s.tensor)
            v = self.typed(s.value, ctype(st), scope)
            if st.is_storage_only:
                v = f"rt.f32_to_{st.name}({v})"
            elif st.is_bool:
                v = f"np.bool_({v})"
            self.emit(f"rt.store_checked({self.names[s.tensor]}, {self.checked_args(s, 'store', scope, v)})")
            return
        self.emit(self.store_code(s.tensor, s.index, s.flat, s.value, scope))

    def visit_AtomicAdd(self, s, scope):
        st = self.storage(s.tensor)
        if st.is_bool:
            raise CompileError(f"atomic_add on {s.tensor!r} of type bool_: accepted are integer and float "
                               "tensors", s.loc)
        fn = f"rt.atomic_add_{st.name}" if st.is_storage_only else "rt.atomic_add"
        v = self.typed(s.value, ctype(st), scope)
        if self.debug:
            self.emit(f"_off = rt.checked_offset({self.checked_args(s, 'atomic_add', scope)})",
                      "if _off >= 0:", f"    {fn}({self.names[s.tensor]}, _off, {v})")
            return
        self.emit(f"{fn}({self.names[s.tensor]}, {self.offset(s.tensor, s.index, s.flat, scope)}, {v})")

    def visit_If(self, s, scope):
        self.emit(f"if {self.typed(s.cond, T.bool_, scope)}:")
        self.nested(s.body, scope)
        if s.orelse:
            self.emit("else:")
            self.nested(s.orelse, scope)

    def visit_For(self, s, scope):
        if self.strip_mined(s):
            self._strip_mined_for(s, scope)
            return
        pad, depth = self.pad, self.depth
        var = self.names[s.var]
        vt = self.types.get(s.var, T.i64)
        start, stop, step = (self.typed(x, T.i64, scope) for x in (s.start, s.stop, s.step))
        if isinstance(s.step, ir.Const) and s.step.value in (1, -1):
            value = f"_i{depth}"
            self.emit(f"for {value} in range({start}, {stop}, {step}):")
        else:  # numba's own range count overflows near the int64 limits: count exactly, then step
            self.emit(f"_a{depth} = {start}", f"_s{depth} = {step}")
            self.refuse_zero_step(s, f"_s{depth}", scope)
            self.emit(f"for _k{depth} in range(rt.trip_count(_a{depth}, {stop}, _s{depth})):")
            value = f"_a{depth} + _k{depth} * _s{depth}"
        self.emit(f"    {var} = {value if ctype(vt) == T.i64 else cast(value, T.i64, vt)}")
        self.poll(self.hooks, pad + "    ", self.out)
        self.nested(s.body, scope, loop=True)

    def refuse_zero_step(self, s: ir.For, step: str, scope) -> None:
        """A step known at run time only: 0 runs no iteration (rt.trip_count) and is recorded, so
        the launch raises KernelValueError naming this loop (backends/bounds.py)."""
        if bounds.step_checked(s.step):
            self.refuse(f"{step} == 0", step, "range_step", s.loc, scope)

    def refuse(self, cond: str, value: str, what: str, loc, scope) -> None:
        loc = loc if loc is not None and loc.line > 0 else self.stmt_loc
        site = bounds.value_site(self.sites, what, loc, getattr(self.k, "func_name", ""))
        self.emit(f"if {cond}:  # {what}: refused, the launch raises",
                  f"    rt.refuse(_err, {site}, np.int64({value}), {scope.tid}, _tile)")

    def visit_Require(self, s, scope):
        value = self.typed(s.value, T.i64, scope)
        self.refuse(f"{value} < {s.least}", value, s.what, s.loc, scope)

    def strip_mined(self, s: ir.For) -> bool:
        """Whether ``s`` polls once per POLL_CHUNK iterations instead of at every back-edge.

        An exit branch in an innermost loop stops LLVM vectorizing it, so such a loop runs in
        chunks: the chunk loop polls, the loop inside it does not.  Loops with a ``break``
        (never vectorized) and debug builds (a failed check must stop the loop soon) poll
        every iteration; loops that contain loops poll at each iteration, which costs nothing
        next to their inner loop."""
        if not self.interrupt or self.debug:
            return False
        return not any(isinstance(n, (ir.For, ir.While, ir.Break)) for n in ir.walk(list(s.body)))

    def _strip_mined_for(self, s, scope):
        pad, depth = self.pad, self.depth
        var = self.names[s.var]
        vt = self.types.get(s.var, T.i64)
        start, stop, step = (self.typed(x, T.i64, scope) for x in (s.start, s.stop, s.step))
        a, n, o, k = f"_a{depth}", f"_n{depth}", f"_o{depth}", f"_k{depth}"
        literal_step = isinstance(s.step, ir.Const)
        st = step if literal_step else f"_s{depth}"
        self.emit(f"{a} = {start}  # range({start}, {stop}, {step}) in chunks of {POLL_CHUNK}: "
                  "Ctrl-C is polled between chunks")
        if not literal_step:
            self.emit(f"{st} = {step}")
            self.refuse_zero_step(s, st, scope)
        if st in ("1", "np.int64(1)"):  # the count inline: a helper call is a whole numba compile more
            self.emit(f"{n} = ar.count_up({a}, {stop})")  # exact at the int64 limits, as rt.trip_count
        else:
            self.emit(f"{n} = rt.trip_count({a}, {stop}, {st})")
        self.emit(f"for {o} in range(0, {n}, {POLL_CHUNK}):")
        self.poll(self.hooks, pad + "    ", self.out, guard=f"{o} != 0")  # the first chunk: the enclosing loop just polled
        value = f"{a} + {k}" if st in ("1", "np.int64(1)") else f"{a} + {k} * {st}"
        self.emit(f"    for {k} in range({o}, {o} + ar.min2(np.int64({POLL_CHUNK}), {n} - {o})):",
                  f"        {var} = {cast(value, T.i64, vt) if ctype(vt) != T.i64 else value}")
        self.nested(s.body, scope, indent=2, loop=True)

    def visit_While(self, s, scope):
        self.emit(f"while {self.typed(s.cond, T.bool_, scope)}:")
        self.poll(self.hooks, self.pad + "    ", self.out)
        self.nested(s.body, scope, loop=True)

    def visit_Break(self, s, scope):
        self.emit(*(["break"] if self.loops else self.hooks.escape("break")))

    def visit_Continue(self, s, scope):
        self.emit(*(["continue"] if self.loops else self.hooks.escape("continue")))

    def visit_Return(self, s, scope):
        self.emit(*self.hooks.ret(s, self, scope))

    def visit_Sync(self, s, scope):
        raise CompileError("sync() inside code the numba backend runs per thread: the checker should "
                           "only allow it in team-uniform control flow", s.loc)

    def visit_ExprStmt(self, s, scope):
        self.emit(self.visit(s.value, scope))

    def visit_Log(self, s, scope):  # the frontend already dropped calls below the compile-time floor
        if s.level == "print":
            self.emit(*self.log_lines(s, scope))
            return
        self.emit(f"if {LOG_ARG} <= {log_gate.number(s.level)}:  # dsl.log.{s.level}: at or above the run-time level")
        self.emit(*("    " + line for line in self.log_lines(s, scope)))

    # ----------------------------------------------------------------- logging

    def log_lines(self, s: ir.Log, scope: Scope) -> List[str]:
        """Statements printing one log line, prefixed like the interpreter's ``[name t=.. tile=..]``.

        The line is formatted into a byte buffer ``_b`` (end ``_p``) by backends.numba.format helpers.
        """
        pieces = list(s.pieces)  # parsed and counted by the frontend (dsl/lang/log_format.py)
        values = [(self.visit(a, scope), ctype(a.type)) for a in s.args]
        if s.level != "print":  # print() is the user's own line; logs carry the team prefix
            d = LF.Spec("", 0, -1, "d")
            pieces = [f"[{self.k.name} t=", d, " tile=", d, "] "] + pieces
            values = [(scope.tid, T.i64), ("_tile", T.i64)] + values
        kinds = ["b" if t.is_bool else "f" if t.is_float else "u" if t == T.u64 else "i" for _, t in values]
        specs = [p for p in pieces if isinstance(p, LF.Spec)]
        cap = 64 + sum(len(p.encode()) for p in pieces if isinstance(p, str)) + sum(
            400 + p.width + max(p.prec, 0) for p in specs)
        lines = [f"_b = np.empty({cap}, np.uint8)", "_p = 0"]

        def num(kind, k):
            code = values[k][0]
            return f"np.float64({code})" if kind == "f" else (
                f"np.uint64({code})" if kinds[k] == "u" else f"np.int64({code})")

        for step in F.plan(pieces, kinds):
            if step[0] == "c":
                _, cfmt, cargs = step
                vals = [num(kind, k) for kind, k in cargs]
                tup = "()" if not vals else f"({vals[0]},)" if len(vals) == 1 else f"({', '.join(vals)})"
                lines.append(f"_p = fmt.put_c(_b, _p, {cfmt!r}, {tup})")
            else:
                lines += self._log_spec(step[1], values[step[2]], s.loc)
        lines.append("fmt.emit(_b, _p)")
        return lines

    def _log_spec(self, p: LF.Spec, value, loc) -> List[str]:
        """A conversion C's snprintf does not do Python's way."""
        v, t = value
        if p.conv in "oxX":  # the checker rejected float arguments, as Python does
            spec = p
            return [f"_p = fmt.put_radix(_b, _p, np.int64({v}), np.int64({F.radix_spec(spec)}))"
                    f"  # {p.c(p.conv)}"]
        if p.conv in F.FLOAT_CONVS:  # 0-flagged: inf/nan get zeros in Python, spaces in C
            bare = LF.Spec(p.flags.replace("0", ""), 0, p.prec, p.conv).c(p.conv)
            x = f"np.float64({v})"
            return [f"if np.isfinite({x}):", f"    _p = fmt.put_c(_b, _p, {p.c(p.conv)!r}, ({x},))", "else:",
                    f"    _p = fmt.zero_pad(_b, _p, fmt.put_c(_b, _p, {bare!r}, ({x},)), np.int64({p.width}))"]
        # %s: str() of the value, then width / precision
        if t.is_bool:
            put = f"fmt.put_bool(_b, _p, {v})"
        elif t.is_float:
            put = f"fmt.put_repr{'32' if t == T.f32 else '64'}(_b, _p, np.float64({v}))"
        else:
            put = (f"fmt.put_c(_b, _p, '%llu', (np.uint64({v}),))" if t == T.u64
                   else f"fmt.put_c(_b, _p, '%lld', (np.int64({v}),))")
        if not (p.width or p.prec >= 0):
            return [f"_p = {put}"]
        return ["_q = _p", f"_p = {put}",
                f"_p = fmt.pad(_b, _q, _p, np.int64({p.width}), np.int64({p.prec}), np.bool_({'-' in p.flags}))"]


# --------------------------------------------------------------------------- functions

class FuncHooks(Hooks):
    in_func = True

    def __init__(self, f: ir.Function):
        self.f = f

    def stop(self, gen):
        return ["return"] if self.f.ret is None else [f"return {const(0, self.f.ret)}"]

    def ret(self, stmt, gen, scope):
        if stmt.value is None or self.f.ret is None:
            return ["return"]
        return [f"return {gen.typed(stmt.value, self.f.ret, scope)}"]


def emit_function(gen: Gen, f: ir.Function) -> List[str]:
    """A ``@dsl.func`` as its own njit function (team queries passed in as hidden arguments; a
    tensor parameter as the kernel passes its own tensors: flat array, shape, size)."""
    names = Names([p.name for p in f.params] + [n for n, _ in f.locals])
    sub = Gen.__new__(Gen)
    sub.__dict__.update(gen.__dict__)
    sub.k = FuncView(gen.k, f)
    sub.names = names
    sub.types = {p.name: p.dtype for p in f.params if isinstance(p, ir.ScalarParam)}
    sub.types.update(dict(f.locals))
    sub.local_names = set(sub.types)
    sub.params = {}
    scope = Scope(names)
    hidden = ["_tid", "_tile", "_ntiles", "_intr", "_intr0"] + (["_err"] if gen.record else []) + (
        [LOG_ARG] if gen.gated else [])
    plist = []
    for p in f.params:
        plist += sub.tensor_args(p.name) if not isinstance(p, ir.ScalarParam) else [names[p.name]]
    out = ["@njit(**BODY)", f"def {gen.func_names[f.name]}({', '.join(hidden + plist)}):"]
    doc = f"    \"\"\"@dsl.func {f.name}({', '.join(ir.param_text(p) for p in f.params)}) -> {f.ret}\"\"\""
    out.append(doc)
    out += gen.wide_vectors(f.body)
    sub.block(f.body, scope, FuncHooks(f), 1, out=out)
    if f.ret is not None and not (f.body and isinstance(f.body[-1], ir.Return)):
        zero = (f"sm.vsplat({const(0, f.ret.elem)}, {f.ret.lanes})" if isinstance(f.ret, T.SimdType)
                else const(0, f.ret))
        out.append(f"    return {zero}")  # never reached: the checker proved every path returns
    return out
