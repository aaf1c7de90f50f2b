"""``dsl.static_range`` unrolling, mixed into the checker (dsl/lang/check.py): the bounds must be
known at compile time, each loop and each function has an unroll limit, and every copy of the
body is checked like straight-line code with the loop variable replaced by an int literal."""
from __future__ import annotations

import dataclasses
from typing import List

from dsl.lang import ir
from dsl.lang.errors import TypeMismatch
from dsl.lang.fold import fold as _fold

MAX_UNROLL = 128
"""Most iterations of one ``dsl.static_range`` loop: numba's compile time grows faster than the
copies (256 in one loop took 18 s, 1024 copies 91 s), so a reachable limit must compile in
seconds (docs/language.md, Unrolled loops)."""
MAX_UNROLL_TOTAL = 512
"""Most unrolled body copies in one kernel or @dsl.func, nested loops counted per copy (ops'
largest tile, conv_pointwise's, unrolls to 351)."""


class StaticUnroll:
    """``self`` is the checker (``expr``, ``stmts``, ``error``, ``final``, ``unrolled``)."""

    def visit_StaticFor(self, s: ir.StaticFor):
        """Unroll: one copy of the body per iteration, the variable replaced by an int literal
        (weakly typed, like a Python int in a kernel), each copy checked like straight-line code."""
        bounds = []
        for label, b in (("start", s.start), ("stop", s.stop), ("step", s.step)):
            e, t = self.expr(b)
            v = _fold(e)
            if t is not None and not (t.is_int or t.is_bool) or isinstance(v, float):
                raise self.error(b, f"dsl.static_range {label} must be an integer, got {t}", kind=TypeMismatch)
            if v is None:
                raise self.error(b, f"dsl.static_range {label} is not known at compile time",
                                 "accepted: integer literals, dsl.const parameters, module-level int constants, "
                                 "variables of an enclosing dsl.static_range and arithmetic of these; use range(...) "
                                 "for a loop with run-time bounds")
            bounds.append(int(v))
        if bounds[2] == 0:
            raise self.error(s.step, "dsl.static_range() step must not be zero")
        iterations = range(*bounds)
        if len(iterations) > MAX_UNROLL:
            raise self.error(s, f"dsl.static_range{tuple(bounds)} unrolls to {len(iterations)} iterations; the limit "
                                f"is {MAX_UNROLL} per loop (MAX_UNROLL in dsl/lang/check_unroll.py)",
                             "use range(...) for long loops")
        self.unrolled += len(iterations)
        if self.unrolled > MAX_UNROLL_TOTAL:
            raise self.error(s, f"dsl.static_range loops unroll to more than {MAX_UNROLL_TOTAL} body copies in this "
                                "function (MAX_UNROLL_TOTAL in dsl/lang/check_unroll.py; nested loops count once per copy)",
                             "use range(...) for some of them")
        out: List[ir.Stmt] = []
        for v in iterations:
            out.extend(self.stmts(_substitute(s.body, s.var, v)))
        return out if self.final else None


def _substitute(node, var: str, value: int):
    """``node`` (a node or a tuple) with every read of ``var`` replaced by the literal ``value``."""
    if isinstance(node, tuple):
        items = tuple(_substitute(x, var, value) for x in node)
        return node if all(a is b for a, b in zip(items, node)) else items
    if not isinstance(node, ir.Node):
        return node
    if isinstance(node, ir.Name) and node.name == var:
        return ir.Const(value, loc=node.loc)
    changes = {}
    for f in dataclasses.fields(node):
        old = getattr(node, f.name)
        if isinstance(old, (ir.Node, tuple)):
            new = _substitute(old, var, value)
            if new is not old:
                changes[f.name] = new
    return dataclasses.replace(node, **changes) if changes else node
