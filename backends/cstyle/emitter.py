"""A C-family emitter for the typed IR: everything plain C about a kernel, once.

This file holds the renderer's table, its entry point (``render``: names, functions, the
kernel's signature and prologue, the result with its line table) and the hooks a target
overrides; the rest is mixed in, a file a responsibility: statements.py and loops.py (``range``
loops with a runtime step), expressions.py (Python floor division and modulo, casts that wrap
like numpy, short-circuit logic), builtin_calls.py, functions.py (``@dsl.func``), simd.py,
tiles.py, helpers.py (the C helper functions), instrument.py (debug bounds checks, Ctrl-C polls).
A target (OpenCL today, plain C or CUDA tomorrow) is a thin subclass that supplies:

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

from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.errors import UNKNOWN, CompileError, SourceLoc
from dsl.lang.tiles import uses_tiles
from dsl.lang.visitor import Visitor
from backends import bounds, log_gate
from backends.bounds import Sites
from backends.cstyle.builtin_calls import CBuiltinCalls
from backends.cstyle.expressions import CExpressions
from backends.cstyle.functions import CFunctions
from backends.cstyle.helpers import CHelpers, Unsupported
from backends.cstyle.instrument import CInstrumentation
from backends.cstyle.loops import CLoops
from backends.cstyle.simd import CSimd
from backends.cstyle.statements import CStatements
from backends.cstyle.tiles import CTiles
from backends.naming import C_RESERVED, CNames, ident

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


class CStyleRenderer(Visitor, CStatements, CLoops, CExpressions, CFunctions, CInstrumentation, CHelpers, CSimd,
                     CBuiltinCalls, CTiles):
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

    # ---- errors ----------------------------------------------------------------------

    def unsupported(self, node, *context):
        raise CompileError(f"the {type(self).__name__} emitter cannot translate {type(node).__name__}",
                           getattr(node, "loc", None))
