"""Definite assignment: every read of a local happens after an assignment on every path.

Compiled backends declare each local up front (zero-initialised), so a read on a
path that never assigned the local would silently see 0 while the interpreter
raises ``UnboundLocalError``.  The rule is Java's and C#'s, on the typed IR:

* an ``if`` assigns what both branches assign (a branch that ends in
  ``return``/``break``/``continue`` does not reach the join and imposes nothing);
* a ``for`` or ``while`` body may run zero times, so it assigns nothing after the
  loop (the loop variable included); ``while True`` is left only by ``break``;
* inside a loop, a local assigned later in the body is not yet assigned at the top.

A ``@dsl.func`` must also return on every path: compiled code has no value to give
when the end of the body is reached.
"""
from __future__ import annotations

from typing import FrozenSet, Iterable, List, Optional, Sequence

from dsl.lang import ir
from dsl.lang.errors import CompileError, SourceLoc

State = Optional[FrozenSet[str]]  # names assigned on every path; None: unreachable


def check(body: Sequence[ir.Stmt], locals_: Iterable[str], *, is_func: bool, loc: Optional[SourceLoc]) -> None:
    """Raise a CompileError at the first read of a local that may be unassigned."""
    flow = _Flow(frozenset(locals_), body)
    end = flow.block(body, frozenset())
    if is_func and end is not None:
        last = body[-1].loc if body else loc
        raise CompileError("this @dsl.func can reach the end of its body without returning a value", last,
                           "every path must end in 'return value' (add a final return)")


def _meet(a: State, b: State) -> State:
    if a is None:
        return b
    if b is None:
        return a
    return a & b


class _Flow:
    def __init__(self, locals_: FrozenSet[str], body):
        self.locals = locals_
        self.breaks: List[List[State]] = []
        self.sites = {}  # name -> lines that assign it, for the note
        for n in ir.walk(list(body)):
            if isinstance(n, ir.Assign):
                self.sites.setdefault(n.name, []).append(n.loc.line)
            elif isinstance(n, ir.For):
                self.sites.setdefault(n.var, []).append(n.loc.line)

    def read(self, exprs, state: State) -> None:
        if state is None:
            return
        for e in exprs:
            if e is None:
                continue
            for n in ir.walk(e):
                if isinstance(n, ir.Name) and n.name in self.locals and n.name not in state:
                    self.fail(n)

    def fail(self, n: ir.Name) -> None:
        lines = sorted(set(self.sites.get(n.name, ())))
        where = f"line {lines[0]}" if len(lines) == 1 else "lines " + ", ".join(map(str, lines))
        raise CompileError(
            f"local '{n.name}' may be used before it is assigned: some path reaches this read without assigning it",
            n.loc,
            f"'{n.name}' is assigned on {where} only on some paths (an if without else, or a loop that may run "
            f"zero times); assign it before, e.g. {n.name} = 0, so every path sets it")

    def block(self, stmts: Sequence[ir.Stmt], state: State) -> State:
        for s in stmts:
            state = self.stmt(s, state)
        return state

    def stmt(self, s: ir.Stmt, state: State) -> State:
        if isinstance(s, ir.Assign):
            self.read([s.value], state)
            return None if state is None else state | {s.name}
        if isinstance(s, (ir.Store, ir.AtomicAdd)):
            self.read(list(s.index) + [s.value], state)
            return state
        if isinstance(s, ir.If):
            self.read([s.cond], state)
            return _meet(self.block(s.body, state), self.block(s.orelse, state))
        if isinstance(s, ir.For):
            self.read([s.start, s.stop, s.step], state)
            self.loop(s.body, None if state is None else state | {s.var})
            return state
        if isinstance(s, ir.While):
            self.read([s.cond], state)
            breaks = self.loop(s.body, state)
            if isinstance(s.cond, ir.Const) and s.cond.value:  # while True: left only by break
                out: State = None
                for b in breaks:
                    out = _meet(out, b)
                return out
            return state
        if isinstance(s, ir.Break):
            if self.breaks:
                self.breaks[-1].append(state)
            return None
        if isinstance(s, ir.Continue):
            return None
        if isinstance(s, ir.Return):
            self.read([s.value], state)
            return None
        if isinstance(s, ir.Log):
            self.read(s.args, state)
            return state
        if isinstance(s, (ir.ExprStmt, ir.Require)):
            self.read([s.value], state)
            return state
        return state

    def loop(self, body, state: State) -> List[State]:
        self.breaks.append([])
        self.block(body, state)
        return self.breaks.pop()
