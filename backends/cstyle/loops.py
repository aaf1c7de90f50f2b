"""``for ... in range(...)`` and ``while`` in C with Python's meaning: bounds evaluated once, a
hidden counter the body cannot disturb, the step's sign decided at run time when unknown, an
exact trip count (near the int64 limits too) for steps other than ±1, a zero step refused at
run time, and the Ctrl-C poll at each back-edge.

A mixin of ``CStyleRenderer`` (``self`` has ``emit``, ``block``, ``bare``, ``operand_text``,
``names``, ``helper``, ``poll`` and ``refuse_if``)."""
from __future__ import annotations

from dsl.lang import builtins as B
from dsl.lang import ir
from backends import bounds
from backends.cstyle.expressions import PRECEDENCE


class CLoops:
    """``visit_For`` / ``visit_While`` and the ``trip_count`` helper."""

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
        stop = self.operand_text(s.stop, PRECEDENCE["lt"])
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
            step = self.operand_text(s.step, PRECEDENCE["lt"])
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
