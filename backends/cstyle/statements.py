"""IR statements in C: one C statement per IR statement, each new Python line announced by a
``// py:LINE source`` comment (the line table behind compile errors at the user's line), stores
through the target's f16/bf16/bool spellings, bounds-checked accesses in debug mode, ``if`` /
``elif`` chains kept flat.  Loops are in loops.py.

A mixin of ``CStyleRenderer`` (``self`` has ``out``, ``depth``, ``cur_loc``, ``names``, ``k``,
``bare``, ``expr``, ``pointer``, ``offset`` and the target's hooks)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from dsl.lang import ir
from dsl.lang.errors import UNKNOWN, CompileError
from backends import log_gate
from backends.cstyle.helpers import Unsupported


class CStatements:
    """``stmt`` (the line comment, then ``visit``), ``emit``/``block`` and the straight-line and
    ``if`` statements."""

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

    def visit_Require(self, s: ir.Require) -> None:
        """A run-time argument check (its value is a name or a constant: evaluating it twice is free)."""
        value = f"(long)({self.bare(s.value)})"
        self.refuse_if(f"{value} < {s.least}", value, s.what, s.loc)

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
