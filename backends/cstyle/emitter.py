"""A C-family emitter for the typed IR: everything plain C about a kernel, once.

Python floor division and modulo, casts that wrap like numpy, ``range`` loops with a runtime
step, short-circuit logic, device functions, debug bounds checks and Ctrl-C polls live here;
a target (OpenCL today, plain C or CUDA tomorrow) is a thin subclass that supplies:

* table attributes: ``kernel_prefix``, ``buffer_prefix`` (address space of tensor pointers),
  ``local_prefix`` (of scratch arrays), ``func_prefix``, ``type_map``/``storage_map``,
  ``scratch_storage``, ``code_for_team`` (thread_id, num_threads, tile_id and num_tiles with an
  ``{axis}`` field, flat_tile_id: the team's index in the flattened grid),
  ``targets`` (the names its builtin spellings are looked up under, dsl/lang/builtins.py), ``reserved``/``owned_prefixes``/``reserved_pattern`` (backends/naming.py);
* hooks: ``preamble()``, ``kernel_header()``, ``kernel_signature(params)``, ``sync()``,
  ``load_f16``/``store_f16``, ``helper_round_f16``, ``atomic_add(ptr, dtype, value, space)``,
  ``log(stmt)``, ``claim``/``read_claim`` (the debug error record, backends/cstyle/instrument.py)
  and ``bits_to_float``/``float_to_bits`` (backends/cstyle/helpers.py).

A hook the target leaves alone raises ``Unsupported`` (reported at the user's line) or emits a
comment.  The output is meant to be read: one C statement per IR statement, stable names,
``// py:LINE source`` before the code of each new Python line, and a line table (C line ->
Python SourceLoc) so a C compiler error can point at the user's code.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from dsl.lang import builtins as B
from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.errors import UNKNOWN, CompileError, SourceLoc
from dsl.lang.tiles import uses_tiles
from dsl.lang.visitor import Visitor
from backends import bounds, log_gate
from backends.bounds import Sites
from backends.cstyle.builtin_calls import CBuiltinCalls
from backends.cstyle.functions import CFunctions
from backends.cstyle.helpers import CHelpers, Unsupported
from backends.cstyle.instrument import CInstrumentation
from backends.cstyle.simd import CSimd
from backends.cstyle.tiles import CTiles
from backends.naming import C_RESERVED, CNames, ident
from backends.spelling import row_major, row_major_static, special_float

# --------------------------------------------------------------------------- result


@dataclass(frozen=True)
class Arg:
    """How one kernel parameter travels to the C function.

    kind: 'tensor' (a buffer then ``ndim`` i64 shape values), 'scalar', 'vec'
    (``length`` scalars), 'vec_buffer' (a long vec: one read-only buffer of ``length``
    elements of the scalar argument type), or 'const' (specialized: compiled in, passes nothing).
    """

    kind: str
    name: str
    dtype: T.DType
    ndim: int = 0
    access: str = "in"
    length: int = 0


@dataclass
class Rendered:
    source: str
    name: str                           # C name of the kernel function
    args: Tuple[Arg, ...]
    line_locs: Dict[int, SourceLoc]     # 1-based C line -> the Python statement it came from
    features: frozenset = frozenset()   # what the code needs of the device, e.g. 'fp64' (named by the target)
    feature_locs: Dict[str, SourceLoc] = field(default_factory=dict)  # where each feature is first used
    hidden: Tuple[str, ...] = ()        # trailing arguments after the params: 'interrupt' (counter, start),
                                        # 'errors', 'log_level' (the run-time dsl.log threshold)
    sites: tuple = ()                   # debug mode: what each bounds check reports (backends/bounds.py)

    def loc_of_line(self, line: int) -> Optional[SourceLoc]:
        return self.line_locs.get(line)


class _Features(dict):
    """feature -> SourceLoc of its first use; ``add`` keeps set-like call sites."""

    def __init__(self, where):
        super().__init__()
        self._where = where

    def add(self, name: str) -> None:
        self.setdefault(name, self._where())


# --------------------------------------------------------------------------- the renderer


def _float_text(value: float, single: bool) -> str:
    """Shortest decimal that rounds back to the value in the target precision."""
    v = np.float32(value) if single else np.float64(value)
    special = special_float(float(v))
    if special == "nan":
        return "NAN" if single else "(double)NAN"
    if special is not None:
        s = "INFINITY" if single else "(double)INFINITY"
        return s if special == "inf" else f"(-{s})"
    a = abs(float(v))
    if a != 0 and (a < 1e-4 or a >= 1e16):
        text = np.format_float_scientific(v, unique=True, trim="0")
    else:
        text = np.format_float_positional(v, unique=True, trim="0")
    if text.endswith("."):
        text += "0"
    text += "f" if single else ""
    return f"({text})" if text.startswith("-") else text  # never '--' after a unary minus


_BINARY_C = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "bitand": "&", "bitor": "|", "bitxor": "^",
             "lshift": "<<", "rshift": ">>"}
_COMPARE_C = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_WRAPPING = ("add", "sub", "mul", "lshift", "neg", "invert")
_PREC = {"mul": 10, "truediv": 10, "add": 9, "sub": 9, "lt": 7, "le": 7, "gt": 7, "ge": 7, "eq": 6, "ne": 6,
         "and": 2, "or": 1}  # C precedence of the operators printed without redundant parentheses


class CStyleRenderer(Visitor, CFunctions, CInstrumentation, CHelpers, CSimd, CBuiltinCalls, CTiles):
    """Typed ir.Kernel -> C-family source.  Subclasses fill in the table below."""

    # ---- the table ------------------------------------------------------------
    kernel_prefix = "void"
    buffer_prefix = ""            # address space of tensor pointers
    local_prefix = "static "      # address space of scratch arrays
    func_prefix = "static "
    reserved = C_RESERVED         # names user identifiers must not take (backends/naming.py)
    owned_prefixes = ("opdsl_", "__")  # prefixes of names the emitter or target generates
    reserved_pattern = None       # a regex of further reserved names (e.g. vector types)
    size_type = "long"            # shape arguments, loop counters
    vec_buffer_min = 0            # a dsl.Vec this long or longer travels as a buffer (0: always as scalars)
    type_map: Dict[str, str] = {
        "bool_": "bool", "i8": "char", "u8": "uchar", "i16": "short", "u16": "ushort", "i32": "int",
        "u32": "uint", "i64": "long", "u64": "ulong", "f16": "float", "bf16": "float", "f32": "float",
        "f64": "double",
    }
    storage_map: Dict[str, str] = {**type_map, "bool_": "uchar", "f16": "half", "bf16": "ushort"}
    scratch_storage: Dict[str, str] = {}  # scratch dtypes declared as other bits (cast at each use)
    code_for_team: Dict[str, str] = {"thread_id": "0", "num_threads": "1", "tile_id": "0", "num_tiles": "1",
                                     "flat_tile_id": "0"}  # tile_id/num_tiles: format strings over {axis}
    targets: Tuple[str, ...] = ("c",)  # builtin spellings: the registry's entries for these, first wins
    helper_prefix = "opdsl_"

    def __init__(self, log_level: str = "warn", debug: bool = False, interrupt: bool = False):
        self.log_level = log_level
        self.debug = debug          # bounds-check every access into the error record (hidden argument)
        self.interrupt = interrupt  # poll the Ctrl-C counter (hidden arguments) at loop back-edges

    # ---- entry point ----------------------------------------------------------
    def render(self, kernel: ir.Kernel) -> Rendered:
        self.k = kernel
        self.names = CNames(self.reserved, self.owned_prefixes, self.reserved_pattern)
        self.helpers: Dict[str, str] = {}      # name -> C definition, in first-use order
        self.features = _Features(lambda: self.cur_loc)
        self.out: List[Tuple[str, SourceLoc]] = []
        self.depth = 0
        self.cur_loc: SourceLoc = UNKNOWN
        self.last_py: Optional[Tuple[str, int]] = None
        self.func_ret: Optional[T.DType] = None
        self.sites = Sites()
        self.in_func = False
        self.gated = log_gate.uses_gate(kernel)  # dsl.log calls compare their level with a hidden argument
        self.record = bounds.needs_record(kernel, self.debug)  # the error record is a hidden argument
        self.record_funcs = bounds.record_funcs(kernel, self.debug)
        for p in kernel.params:                # reserve user names first: they keep their spelling
            self.names.user(p.name)
        for s in kernel.scratch + kernel.arrays:
            self.names.user(s.name)
        for name, _ in kernel.locals:
            self.names.user(name)
        self.fnames = {f.name: self.names.fresh(ident(f.name)) for f in kernel.funcs}
        self.kname = self.names.fresh(ident(kernel.name))
        self.shape_names = {}
        self.func_shapes: Dict[Tuple[str, str], List[str]] = {}  # (function, tensor parameter) -> shape names
        self.args: List[Arg] = []
        for p in kernel.params:
            if isinstance(p, ir.TensorParam):
                self.shape_names[p.name] = [self.names.fresh(f"{self.names.user(p.name)}_shape{d}")
                                            for d in range(p.ndim)]
        self.size_names = {p.name: self.names.fresh(f"{self.names.user(p.name)}_size")
                           for p in kernel.params if isinstance(p, ir.TensorParam)}

        funcs_text: List[Tuple[str, SourceLoc]] = []
        for f in kernel.funcs:
            self._function(f)
            funcs_text += self.out
            self.out = []
            self.last_py = None
        self._kernel_body()
        body = self.out
        head = [(line, UNKNOWN) for line in self.preamble()]
        head += [(ln, UNKNOWN) for h in self.helpers.values() for ln in h.split("\n") + [""]]
        if kernel.funcs:
            for f in kernel.funcs:
                head.append((self._func_signature(f) + ";", UNKNOWN))
            head.append(("", UNKNOWN))
        lines = head + funcs_text + body
        text = "\n".join(ln for ln, _ in lines) + "\n"
        locs = {i + 1: loc for i, (_, loc) in enumerate(lines) if loc is not UNKNOWN}
        hidden = (("interrupt",) if self.interrupt else ()) + (("errors",) if self.record else ()) + (
            ("log_level",) if self.gated else ())
        return Rendered(text, self.kname, tuple(self.args), locs, frozenset(self.features), dict(self.features),
                        hidden, tuple(self.sites.table))

    # ---- hooks a target overrides ----------------------------------------------
    def preamble(self) -> List[str]:
        return [f"// opdsl kernel {self.k.name} from {self.k.filename}:{self.k.firstline} "
                f"(threads={self.k.threads})"]

    def kernel_header(self) -> List[str]:
        """Lines before the kernel's signature (attributes)."""
        return []

    def kernel_signature(self, params: Sequence[str]) -> List[str]:
        first = f"{self.kernel_prefix} {self.kname}("
        pad = " " * len(first)
        if not params:
            return [first + ")"]
        return [(first if i == 0 else pad) + p + ("," if i < len(params) - 1 else ")")
                for i, p in enumerate(params)]

    def load_f16(self, ptr: str, off: str) -> str:
        raise Unsupported(f"f16 storage is not supported by the {type(self).__name__} target")

    def store_f16(self, ptr: str, off: str, value: str) -> str:
        raise Unsupported(f"f16 storage is not supported by the {type(self).__name__} target")

    def helper_round_f16(self, name, t, dtype, extra):
        raise Unsupported(f"f16 casts are not supported by the {type(self).__name__} target")

    def atomic_add(self, ptr: str, dtype: T.DType, value: str, space: str) -> str:
        """A statement adding ``value`` to ``*ptr`` atomically; ``space`` is 'tensor' or 'scratch'."""
        return self.atomic_fetch_add(ptr, dtype, value, space) + ";"

    def atomic_fetch_add(self, ptr: str, dtype: T.DType, value: str, space: str) -> str:
        """An expression adding ``value`` to ``*ptr`` atomically, whose value is ``*ptr`` before."""
        raise Unsupported(f"dsl.atomic_add is not supported by the {type(self).__name__} target")

    def sync(self) -> str:
        """The statement every thread of the team waits at (``dsl.sync()``)."""
        return "/* sync */"

    def log(self, s: ir.Log) -> str:
        """The statement printing one ``dsl.log``/``print`` line."""
        return f"/* log.{s.level}: {s.fmt} */"

    # ---- kernel and functions -----------------------------------------------------
    def ctype(self, dtype: T.DType) -> str:
        if isinstance(dtype, T.SimdType):
            return self.vtype(dtype)
        return self.type_map[dtype.strong.name]

    def stype(self, dtype: T.DType) -> str:
        return self.storage_map[dtype.strong.name]

    def _note_type(self, dtype: Optional[T.DType]) -> None:
        if isinstance(dtype, T.SimdType):
            dtype = dtype.elem
        if dtype is not None and dtype.strong.name == "f64":
            self.features.add("fp64")

    def _kernel_body(self) -> None:
        k = self.k
        params: List[str] = []
        consts: List[str] = []
        for p in k.params:
            self._note_type(p.dtype)
            cname = self.names.user(p.name)
            if isinstance(p, ir.TensorParam):
                const = "const " if p.access == "in" else ""
                params.append(", ".join([f"{self.buffer_prefix}{const}{self.stype(p.dtype)}* {cname}"]
                                        + [f"{self.size_type} {s}" for s in self.shape_names[p.name]]))
                self.args.append(Arg("tensor", p.name, p.dtype, p.ndim, p.access))
            elif self.vec_is_buffer(p):
                # one read-only buffer: a kernel argument per element makes compile time explode
                params.append(f"{self.buffer_prefix}const {self.arg_type(p.dtype)}* {cname}")
                self.args.append(Arg("vec_buffer", p.name, p.dtype, length=p.length))
            elif isinstance(p, ir.VecParam):
                elems = [self.names.fresh(f"{cname}_{i}") for i in range(p.length)]
                params.append(", ".join(f"{self.arg_type(p.dtype)} {e}" for e in elems))
                conv = ", ".join(self.scalar_arg_value(p.dtype, e) for e in elems)
                consts.append(f"const {self.ctype(p.dtype.compute)} {cname}[{p.length}] = {{{conv}}};")
                self.args.append(Arg("vec", p.name, p.dtype, length=p.length))
            elif p.const_value is not None:
                value = self.const(p.const_value, p.dtype.compute)
                consts.append(f"const {self.ctype(p.dtype.compute)} {cname} = {value};  // dsl.const")
                self.args.append(Arg("const", p.name, p.dtype))
            else:
                arg = cname if self.arg_type(p.dtype) == self.ctype(p.dtype.compute) else self.names.fresh(cname + "_arg")
                params.append(f"{self.arg_type(p.dtype)} {arg}")
                if arg != cname:
                    consts.append(f"const {self.ctype(p.dtype.compute)} {cname} = {self.scalar_arg_value(p.dtype, arg)};")
                self.args.append(Arg("scalar", p.name, p.dtype))
        params += self.hidden_params()
        for line in self.kernel_header() + self.kernel_signature(params):
            self.emit(line)
        self.emit("{")
        self.depth += 1
        for s in k.scratch:
            self.cur_loc = s.loc
            self._note_type(s.dtype)
            n = int(np.prod(s.shape)) if s.shape else 1
            self.emit(f"{self.local_prefix}{self.scratch_storage.get(s.dtype.name, self.stype(s.dtype))} "
                      f"{self.names.user(s.name)}[{n}];"
                      f"  // scratch {list(s.shape)} {s.dtype}")
        for a in k.arrays:  # run-time indexed dsl.local arrays: private, zeroed where declared (LocalInit)
            self.cur_loc = a.loc
            self._note_type(a.dtype)
            self.emit(f"{self.stype(a.dtype)} {self.names.user(a.name)}[{int(np.prod(a.shape))}];"
                      f"  // dsl.local {list(a.shape)} {a.dtype}")
        if uses_tiles(k.body):
            self.emit(self.tile_file_decl())
        for line in consts + self.team_poll_state():
            self.emit(line)
        used_sizes = {n.tensor for n in ir.walk(list(k.body) + [b for f in k.funcs for b in f.body])
                      if isinstance(n, ir.Size)}
        for p in k.params:
            if isinstance(p, ir.TensorParam) and p.name in used_sizes:
                prod = " * ".join(self.shape_names[p.name]) or "1"
                self.emit(f"const {self.size_type} {self.size_names[p.name]} = {prod};")
        self._declare_locals(k.locals)
        self.func_ret = None
        self.block(k.body)
        self.depth -= 1
        self.emit("}")

    def arg_type(self, dtype: T.DType) -> str:
        """C type of a scalar argument (bool travels as uchar, f16/bf16 as float)."""
        return self.stype(dtype) if dtype.is_bool else self.ctype(dtype.compute)

    def scalar_arg_value(self, dtype: T.DType, arg: str) -> str:
        return f"({arg} != 0)" if dtype.is_bool else arg

    def _declare_locals(self, locals_) -> None:
        for name, t in locals_:
            self._note_type(t)
            self.emit(f"{self.ctype(t.compute)} {self.names.user(name)} = {self.zero(t.compute)};")

    def zero(self, t: T.DType) -> str:
        if isinstance(t, T.SimdType):
            return self.vzero(t)
        return "false" if t.is_bool else self.const(0, t)

    # ---- statements ------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.out.append(("  " * self.depth + line if line else "", self.cur_loc))

    def block(self, stmts: Sequence[ir.Stmt]) -> None:
        for s in stmts:
            self.stmt(s)

    def stmt(self, s: ir.Stmt) -> None:
        loc = s.loc
        if loc is not UNKNOWN and loc.line > 0:
            self.cur_loc = loc
            if (loc.file, loc.line) != self.last_py:
                self.last_py = (loc.file, loc.line)
                # a trailing backslash (a Python line continuation) would continue the C comment
                # onto the next line of code
                text = loc.source_line().strip().rstrip("\\").rstrip()
                self.emit(f"// py:{loc.line} {text}" if text else f"// py:{loc.line}")
        try:
            self.visit(s)
        except Unsupported as e:  # the target cannot express it: point at the user's line
            raise CompileError(str(e), s.loc) from None

    def visit_Assign(self, s: ir.Assign) -> None:
        self.emit(f"{self.names.user(s.name)} = {self.bare(s.value)};")

    def visit_ExprStmt(self, s: ir.ExprStmt) -> None:
        self.emit(f"{self.expr(s.value)};")

    def _checked(self, node, kind: str, emit_with) -> None:
        """Debug mode: run ``emit_with(offset)`` only when the index is in range."""
        if not self.debug:
            emit_with(self.offset(node.tensor, node.index, node.flat))
            return
        self.emit(f"{{ const long opdsl_o = {self.checked_offset(node, kind)};")
        self.depth += 1
        self.emit("if (opdsl_o >= 0)")
        self.depth += 1
        emit_with("opdsl_o")
        self.depth -= 2
        self.emit("}")

    def visit_Store(self, s: ir.Store) -> None:
        self._checked(s, "store", lambda off: self._store(s, off))

    def _store(self, s: ir.Store, off: str) -> None:
        buf = self.k.buffer(s.tensor)
        ptr = self.pointer(s.tensor)
        value = self.bare(s.value)
        name = buf.dtype.name
        if name == "f16":
            self.emit(self.store_f16(ptr, off, value))
        elif name == "bf16":
            self.emit(f"{ptr}[{off}] = {self.helper('f32_to_bf16')}({value});")
        elif name == "bool_":
            self.emit(f"{ptr}[{off}] = (uchar)({value});")
        else:
            self.emit(f"{ptr}[{off}] = {value};")

    def visit_LocalInit(self, s: ir.LocalInit) -> None:
        """dsl.local(...) of an array indexed at run time: every element zero each time it runs."""
        a = self.k.buffer(s.name)
        n = int(np.prod(a.shape))
        # a size_type counter: an int one never reaches a count above 2**31 - 1 (the launch never returned)
        self.emit(f"for ({self.size_type} opdsl_z = 0; opdsl_z < {n}L; opdsl_z++) {self.names.user(s.name)}[opdsl_z] = 0;")

    def visit_AtomicAdd(self, s: ir.AtomicAdd) -> None:
        buf = self.k.buffer(s.tensor)
        space = "scratch" if isinstance(buf, ir.Scratch) else "tensor"
        self._checked(s, "atomic_add", lambda off: self.emit(
            self.atomic_add(f"&{self.names.user(s.tensor)}[{off}]", buf.dtype, self.bare(s.value), space)))

    def visit_If(self, s: ir.If) -> None:
        self.emit(f"if ({self.bare(s.cond)}) {{")
        self._nested(s.body)
        orelse = s.orelse
        while len(orelse) == 1 and isinstance(orelse[0], ir.If):  # elif chains stay flat
            inner = orelse[0]
            if inner.loc is not UNKNOWN and inner.loc.line > 0:
                self.cur_loc = inner.loc
            self.emit(f"}} else if ({self.bare(inner.cond)}) {{")
            self._nested(inner.body)
            orelse = inner.orelse
        if orelse:
            self.emit("} else {")
            self._nested(orelse)
        self.emit("}")

    def _nested(self, stmts) -> None:
        self.depth += 1
        self.block(stmts)
        self.depth -= 1

    def visit_While(self, s: ir.While) -> None:
        self.emit(f"while ({self.bare(s.cond)}) {{")
        self.depth += 1
        self.poll(s.body)
        self.depth -= 1
        self._nested(s.body)
        self.emit("}")

    def visit_For(self, s: ir.For) -> None:
        """range() semantics: bounds evaluated once, a hidden counter, runtime step sign."""
        var = self.names.user(s.var)
        it = self.names.fresh(f"{var}_it")
        st = self.size_type
        start = self.bare(s.start)
        assigned = {n.name for n in ir.walk(list(s.body)) if isinstance(n, ir.Assign)} | \
                   {n.var for n in ir.walk(list(s.body)) if isinstance(n, ir.For)} | {s.var}
        step_c = self._known_step(s.step)
        if step_c not in (1, -1):
            self._counted_for(s, var, start)
            return
        inits = [f"{st} {it} = {start}"]
        stop = self.operand_text(s.stop, _PREC["lt"])
        if not self._invariant(s.stop, assigned):
            end = self.names.fresh(f"{var}_end")
            inits.append(f"{end} = {self.bare(s.stop)}")
            stop = end
        if step_c is not None:
            cond = f"{it} < {stop}" if step_c > 0 else f"{it} > {stop}"
            inc = f"{it}++" if step_c == 1 else f"{it}--" if step_c == -1 else f"{it} += {self.bare(s.step)}"
            if step_c not in (1, -1) and not self._invariant(s.step, assigned):
                sv = self.names.fresh(f"{var}_step")
                inits.append(f"{sv} = {self.bare(s.step)}")
                inc = f"{it} += {sv}"
        else:
            step = self.operand_text(s.step, _PREC["lt"])
            if not self._invariant(s.step, assigned):
                sv = self.names.fresh(f"{var}_step")
                inits.append(f"{sv} = {self.bare(s.step)}")
                step = sv
            cond = f"({step} > 0 && {it} < {stop}) || ({step} < 0 && {it} > {stop})"
            inc = f"{it} += {step}"
        self.emit(f"for ({', '.join(inits)}; {cond}; {inc}) {{")
        self.depth += 1
        self.poll(s.body)
        self.emit(f"{var} = {it};")
        self.block(s.body)
        self.depth -= 1
        self.emit("}")

    def _counted_for(self, s: ir.For, var: str, start: str) -> None:
        """A step other than 1 or -1: the trip count first (exact near the int64 limits, where
        ``i += step`` would wrap and never reach ``stop``), then ``var = start + k * step``."""
        k, n = self.names.fresh(f"{var}_k"), self.names.fresh(f"{var}_n")
        a, step = self.names.fresh(f"{var}_start"), self.names.fresh(f"{var}_step")
        self.emit(f"{{ const long {a} = {start}, {step} = {self.bare(s.step)};")
        if bounds.step_checked(s.step):  # 0 runs no iteration (trip_count) and the launch raises
            self.refuse_if(f"{step} == 0", step, "range_step", s.loc)
        self.emit(f"for (ulong {k} = 0, {n} = {self.helper('trip_count')}({a}, {self.bare(s.stop)}, {step}); "
                  f"{k} < {n}; {k}++) {{")
        self.depth += 1
        self.poll(s.body)
        self.emit(f"{var} = (long)((ulong){a} + {k} * (ulong){step});")
        self.block(s.body)
        self.depth -= 1
        self.emit("}}")

    def helper_trip_count(self, name, t, dtype, extra):
        return (f"{self.func_prefix}ulong {name}(long a, long b, long s) {{\n"
                f"  // len(range(a, b, s)), exact for every long (the distance taken unsigned); 0 when s == 0\n"
                f"  if (s > 0) return b > a ? ((ulong)b - (ulong)a - 1) / (ulong)s + 1 : 0;\n"
                f"  if (s < 0) return a > b ? ((ulong)a - (ulong)b - 1) / (0 - (ulong)s) + 1 : 0;\n"
                f"  return 0;\n}}")

    def visit_Require(self, s: ir.Require) -> None:
        """A run-time argument check (its value is a name or a constant: evaluating it twice is free)."""
        value = f"(long)({self.bare(s.value)})"
        self.refuse_if(f"{value} < {s.least}", value, s.what, s.loc)

    def _known_step(self, e: ir.Expr):
        """The step's value when known at compile time (its sign is what matters)."""
        if isinstance(e, ir.Const) and e.value != 0:
            return e.value
        if isinstance(e, ir.Call) and e.name in B.BUILTINS and B.BUILTINS[e.name].positive:
            return 2  # positive, not 1
        if isinstance(e, ir.Cast):
            return self._known_step(e.value)
        return None

    def _invariant(self, e: ir.Expr, assigned: set) -> bool:
        for n in ir.walk(e):
            if isinstance(n, (ir.Load, ir.FuncCall)):
                return False
            if isinstance(n, ir.Name) and n.name in assigned:
                return False
        return True

    def visit_Break(self, s) -> None:
        self.emit("break;")

    def visit_Continue(self, s) -> None:
        self.emit("continue;")

    def visit_Return(self, s: ir.Return) -> None:
        if s.value is None:
            self.emit("return;")
        else:
            self.emit(f"return {self.bare(s.value)};")

    def visit_Sync(self, s) -> None:
        self.emit(self.sync())

    def visit_Log(self, s: ir.Log) -> None:  # the frontend already dropped calls below the compile-time floor
        if s.level == "print":
            self.emit(self.log(s))
        else:  # at or above the run-time level only
            self.emit(f"if ({self.log_name} <= {log_gate.number(s.level)}) {self.log(s)}")

    # ---- expressions -------------------------------------------------------------------
    def bare(self, e: ir.Expr) -> str:
        """An expression without its outer parentheses (for conditions and initializers)."""
        text = self.expr(e)
        if text.startswith("(") and text.endswith(")") and self._balanced(text[1:-1]):
            return text[1:-1]
        return text

    @staticmethod
    def _balanced(text: str) -> bool:
        depth = 0
        for ch in text:
            depth += ch == "("
            depth -= ch == ")"
            if depth < 0:
                return False
        return depth == 0

    def expr(self, e: ir.Expr) -> str:
        self._note_type(e.type)
        return self.visit(e)

    def unsupported(self, node, *context):
        raise CompileError(f"the {type(self).__name__} emitter cannot translate {type(node).__name__}",
                           getattr(node, "loc", None))

    def const(self, value, t: T.DType) -> str:
        t = t.strong
        if t.is_bool:
            return "true" if value else "false"
        if t.is_float:
            return _float_text(float(value), single=t.bits < 64)
        v = int(value)
        ct = self.ctype(t)
        if t.bits == 64:
            if t.kind == "i" and v == -(1 << 63):
                return "(-9223372036854775807L - 1L)"
            return f"{v}{'UL' if t.kind == 'u' else 'L'}" if v >= 0 else f"({v}L)"
        if t.bits == 32:
            if t.kind == "u":
                return f"{v}U"
            return str(v) if v >= 0 else ("(-2147483647 - 1)" if v == -(1 << 31) else f"({v})")
        return f"(({ct}){v})"

    def visit_Const(self, e: ir.Const) -> str:
        return self.const(e.value, e.type)

    def visit_Name(self, e: ir.Name) -> str:
        return self.names.user(e.name)

    def offset(self, tensor: str, index: Sequence[ir.Expr], flat: bool) -> str:
        if flat:
            return self.bare(index[0])
        buf = self.k.buffer(tensor)
        if isinstance(buf, (ir.Scratch, ir.LocalArray)):
            return row_major_static([self.expr(i) for i in index], buf.shape)
        return row_major([self.expr(i) for i in index], self.shape_names[tensor])

    def pointer(self, name: str) -> str:
        """The C expression addressing buffer ``name`` (scratch kept as raw bits is cast back)."""
        buf = self.k.buffer(name)
        cname = self.names.user(name)
        if isinstance(buf, ir.Scratch) and buf.dtype.name in self.scratch_storage:
            return f"(({self.local_prefix}{self.stype(buf.dtype)}*){cname})"
        return cname

    def visit_Load(self, e: ir.Load) -> str:
        buf = self.k.buffer(e.tensor)
        ptr = self.pointer(e.tensor)
        if self.debug:
            return self.checked_load(e, buf, ptr)
        off = self.offset(e.tensor, e.index, e.flat)
        name = buf.dtype.name
        if name == "f16" and not isinstance(buf, ir.VecParam):
            return self.load_f16(ptr, off)
        if name == "bf16" and not isinstance(buf, ir.VecParam):
            return f"{self.helper('bf16_to_f32')}({ptr}[{off}])"
        if name == "bool_" and not isinstance(buf, ir.VecParam):
            return f"({ptr}[{off}] != 0)"
        return f"{ptr}[{off}]"

    def vec_is_buffer(self, p) -> bool:
        """A dsl.Vec param long enough to travel as one read-only buffer (``vec_buffer_min``)."""
        return isinstance(p, ir.VecParam) and bool(self.vec_buffer_min) and p.length >= self.vec_buffer_min

    def visit_AtomicFetchAdd(self, e: ir.AtomicFetchAdd) -> str:
        buf = self.k.buffer(e.tensor)
        space = "scratch" if isinstance(buf, ir.Scratch) else "tensor"
        ptr, value = self.names.user(e.tensor), self.bare(e.value)
        if self.debug:  # a failed check adds 0 to element 0 (every buffer has one) and the launch raises
            fn = self.helper("fetch_add_checked", buf.dtype, space)
            return f"{fn}({ptr}, {self.checked_offset(e, 'atomic_add')}, {value})"
        return self.atomic_fetch_add(f"&{ptr}[{self.offset(e.tensor, e.index, e.flat)}]", buf.dtype, value, space)

    def helper_fetch_add_checked(self, name, t, dtype, space):
        qual = self.address_space(space)
        add = self.atomic_fetch_add("&p[o < 0 ? 0 : o]", dtype, f"o < 0 ? ({t})0 : v", space)
        return (f"{self.func_prefix}{t} {name}({qual}{t}* p, long o, {t} v) {{\n"
                f"  // debug mode: o < 0 is an index that failed its check (recorded); add 0 to element 0\n"
                f"  return {add};\n}}")

    def address_space(self, space: str) -> str:
        """The pointer qualifier of a tensor ('tensor') or scratch ('scratch') element in helpers."""
        return ""

    def visit_Shape(self, e: ir.Shape) -> str:
        return self.shape_names[e.tensor][e.axis]

    def visit_Size(self, e: ir.Size) -> str:
        return self.size_names[e.tensor]

    def _wrap(self, t: T.DType, text: str) -> str:
        """Results of narrow integer arithmetic wrap like numpy (C computes them in int)."""
        if self._narrow(t):
            return f"(({self.ctype(t)}){text})"
        return text

    def visit_Unary(self, e: ir.Unary) -> str:
        x = self.expr(e.operand)
        t = e.type
        if e.op == "not":
            return f"(!{x})"
        if e.op == "invert":
            return f"(!{x})" if t.is_bool else self._wrap(t, f"(~{x})")
        return self._wrap(t, f"(-{x})" if not x.startswith("-") else f"(- {x})")

    def visit_Binary(self, e: ir.Binary) -> str:
        t = e.type
        infix = self._infix(e)
        if infix is not None:
            return f"({infix[0]})"
        shift = self._pow2(e.right) if t.kind == "i" else None
        if shift is not None and e.op == "floordiv":
            return f"({self.expr(e.left)} >> {shift})"  # an arithmetic shift rounds toward -inf, like //
        if shift is not None and e.op == "mod":  # two's complement masking keeps Python's sign rule
            return f"({self.expr(e.left)} & {self.const((1 << shift) - 1, t)})"
        k = e.right.value if isinstance(e.right, ir.Const) and t.is_int else None
        if e.op in ("floordiv", "mod"):
            if t.is_bool or (t.kind == "u" and k not in (None, 0)):
                return f"({self.expr(e.left)} {'/' if e.op == 'floordiv' else '%'} {self.expr(e.right)})"
            return f"{self.helper(e.op, t)}({self.bare(e.left)}, {self.bare(e.right)})"
        if e.op in ("lshift", "rshift") and not (k is not None and 0 <= k < t.bits):
            fn = self.helper("shl" if e.op == "lshift" else "shr", t)  # count may leave [0, bits)
            return f"{fn}({self.bare(e.left)}, {self.bare(e.right)})"
        if e.op == "pow":
            return self._pow(t, e.left, e.right)
        if e.op == "truediv" and not t.is_float:
            raise CompileError(f"'/' on {t} operands reached the C emitter uncast", e.loc)
        text = f"({self.expr(e.left)} {_BINARY_C[e.op]} {self.expr(e.right)})"
        return self._wrap(t, text) if e.op in _WRAPPING else text

    def _infix(self, e: ir.Expr):
        """(text without outer parentheses, C precedence) for arithmetic, comparisons and logic.

        Parentheses are kept only where C would group differently from the IR, so
        ``((a + b) * c + d)`` reads ``(a + b) * c + d``; evaluation order is unchanged.
        """
        if isinstance(e, ir.Binary) and e.op in _PREC and not self._narrow(e.type) \
                and (e.op != "truediv" or e.type.is_float):
            sym = _BINARY_C[e.op]
        elif isinstance(e, ir.Compare):
            sym = _COMPARE_C[e.op]
        elif isinstance(e, ir.Logical):
            sym = "&&" if e.op == "and" else "||"
        else:
            return None
        self._note_type(e.type)
        prec = _PREC[e.op]
        return f"{self._operand(e.left, e, prec, False)} {sym} {self._operand(e.right, e, prec, True)}", prec

    def _operand(self, child: ir.Expr, parent: ir.Expr, prec: int, right: bool) -> str:
        inner = self._infix(child)
        if inner is None:
            return self.expr(child)
        text, cprec = inner
        if isinstance(parent, ir.Logical) and isinstance(child, ir.Logical) and child.op != parent.op:
            return f"({text})"  # 'a && b || c' is legal C, but nobody should have to remember why
        if cprec > prec or (cprec == prec and not right):
            return text
        return f"({text})"

    def operand_text(self, e: ir.Expr, prec: int) -> str:
        """``e`` as the right operand of an operator of C precedence ``prec``."""
        inner = self._infix(e)
        if inner is None:
            return self.expr(e)
        return inner[0] if inner[1] > prec else f"({inner[0]})"

    def _narrow(self, t: T.DType) -> bool:
        return t.is_bool or (t.is_int and t.bits < 32)

    @staticmethod
    def _pow2(e: ir.Expr):
        """k when ``e`` is the constant 2**k (k >= 1)."""
        if isinstance(e, ir.Const) and not isinstance(e.value, bool) and isinstance(e.value, int) \
                and e.value > 1 and e.value & (e.value - 1) == 0:
            return e.value.bit_length() - 1
        return None

    def visit_Compare(self, e: ir.Compare) -> str:
        return f"({self._infix(e)[0]})"

    def visit_Logical(self, e: ir.Logical) -> str:
        return f"({self._infix(e)[0]})"

    def visit_Select(self, e: ir.Select) -> str:
        """dsl.where: a call, so every operand is evaluated."""
        fn = self.helper("where", e.type)
        return f"{fn}({', '.join(self.bare(x) for x in (e.cond, e.if_true, e.if_false))})"

    def visit_Conditional(self, e: ir.Conditional) -> str:
        """a if c else b: only the taken side is evaluated."""
        parts = [self._operand(x, e, 0, False) for x in (e.cond, e.if_true, e.if_false)]
        return f"({parts[0]} ? {parts[1]} : {parts[2]})"

    def visit_Cast(self, e: ir.Cast) -> str:
        return self.cast(e.value, e.type)

    def cast(self, value: ir.Expr, dst: T.DType) -> str:
        src = value.type.strong
        dst = dst.strong
        x = self.expr(value)
        if dst.name == "f16":
            return f"{self.helper('round_f16')}({self._as_f32(src, x)})"
        if dst.name == "bf16":
            return f"{self.helper('round_bf16')}({self._as_f32(src, x)})"
        if src.compute == dst:
            return x
        if dst.is_bool:
            return f"({x} != 0)"
        if dst.is_int and src.is_float:  # truncate, saturate, NaN -> 0
            return f"{self.helper('f2i', dst, self.ctype(src))}({self.bare(value)})"
        return f"(({self.ctype(dst)}){x})"

    def float_literal(self, value: float, single: bool) -> str:
        return _float_text(value, single)

    def int_literal(self, value: int, t: T.DType) -> str:
        return self.const(value, t)

    def _as_f32(self, src: T.DType, x: str) -> str:
        return x if src.compute.name == "f32" else f"((float){x})"

