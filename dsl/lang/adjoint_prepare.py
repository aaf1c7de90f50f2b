"""Before ``dsl.grad`` differentiates a checked kernel: refuse what cannot be differentiated, inline
``@dsl.func`` calls, and remove early exits.

The adjoint (dsl/lang/adjoint.py) works on structured code only: every ``return`` of a kernel or
function and every ``continue`` becomes an ``else`` branch holding the statements after it, and
each call to a helper becomes its body, so gradients flow through helpers like through the kernel.
"""
from __future__ import annotations

import itertools
from dataclasses import fields, replace
from typing import Callable, Dict, List, Tuple

from dsl.lang import ir
from dsl.lang.errors import NotDifferentiable

_SIMD = (ir.VLoad, ir.VStore, ir.Splat, ir.Lane, ir.VecOp, ir.VReduce)
NOTE = "docs/language.md, section Gradients, lists what dsl.grad differentiates"


def rebuild(node, f: Callable):
    """``node`` with every sub-node rebuilt bottom-up, then passed through ``f``."""
    changes = {}
    for fld in fields(node):
        v = getattr(node, fld.name)
        if isinstance(v, ir.Node):
            nv = rebuild(v, f)
        elif isinstance(v, tuple) and v and isinstance(v[0], ir.Node):
            nv = tuple(rebuild(x, f) for x in v)
        else:
            continue
        if nv is not v:
            changes[fld.name] = nv
    return f(replace(node, **changes) if changes else node)


def rename(stmts, names: Dict[str, str], tensors: Dict[str, str]) -> Tuple[ir.Stmt, ...]:
    """``stmts`` with locals renamed by ``names`` and tensors by ``tensors`` (missing keys unchanged)."""
    def f(n):
        if isinstance(n, ir.Name) and n.name in names:
            return replace(n, name=names[n.name])
        if isinstance(n, ir.Assign) and n.name in names:
            return replace(n, name=names[n.name])
        if isinstance(n, ir.For) and n.var in names:
            return replace(n, var=names[n.var])
        if hasattr(n, "tensor") and getattr(n, "tensor") in tensors:
            return replace(n, tensor=tensors[n.tensor])
        return n
    return tuple(rebuild(s, f) for s in stmts)


def refuse(kernel: ir.Kernel) -> None:
    """A NotDifferentiable error at the first construct ``dsl.grad`` cannot differentiate."""
    for s in kernel.scratch:
        raise NotDifferentiable(f"team scratch '{s.name}' is not differentiable: threads exchange values through it",
                                s.loc, NOTE)
    for a in kernel.arrays:
        raise NotDifferentiable(f"dsl.local array '{a.name}' is indexed at run time, which dsl.grad does not "
                                "differentiate (index it with constants or dsl.static_range)", a.loc, NOTE)
    bodies = [kernel.body] + [f.body for f in kernel.funcs]
    for n in itertools.chain.from_iterable(ir.walk(b) for b in bodies):
        if isinstance(n, ir.Sync):
            raise NotDifferentiable("dsl.sync() is not differentiable: the adjoint of a barrier would have to run "
                                    "the team's threads in reverse together", n.loc, NOTE)
        if isinstance(n, (ir.AtomicAdd, ir.AtomicFetchAdd)):
            raise NotDifferentiable(f"dsl.atomic_add on '{n.tensor}' is not differentiable: its result depends on "
                                    "the order threads ran in", n.loc, NOTE)
        if isinstance(n, _SIMD):
            raise NotDifferentiable("SIMD values are not differentiable; write the kernel with scalars (the "
                                    "compiled backends vectorize scalar loops)", n.loc, NOTE)
        if isinstance(n, ir.Break):
            raise NotDifferentiable("break in a differentiated kernel: its loop's trip count depends on values; "
                                    "loop over the whole range and guard the body with if", n.loc, NOTE)
        if isinstance(n, ir.LocalInit):
            raise NotDifferentiable(f"dsl.local array '{n.name}' is not differentiable", n.loc, NOTE)


class Inliner:
    """Replaces every ``FuncCall`` by the called function's body (renamed apart), in evaluation order."""

    def __init__(self, kernel: ir.Kernel):
        self.funcs = {f.name: f for f in kernel.funcs}
        self.count = itertools.count()
        self.types: Dict[str, object] = {}  # locals the inlined bodies introduce

    def block(self, stmts) -> Tuple[ir.Stmt, ...]:
        out: List[ir.Stmt] = []
        for s in stmts:
            out.extend(self.stmt(s))
        return tuple(out)

    def stmt(self, s: ir.Stmt) -> List[ir.Stmt]:
        pre: List[ir.Stmt] = []
        if isinstance(s, ir.ExprStmt) and isinstance(s.value, ir.FuncCall):
            self.call(s.value, pre, want_result=False)
            return pre
        if isinstance(s, ir.If):
            return pre_then(pre, replace(s, cond=self.expr(s.cond, pre), body=self.block(s.body),
                                         orelse=self.block(s.orelse)))
        if isinstance(s, ir.For):
            return pre_then(pre, replace(s, start=self.expr(s.start, pre), stop=self.expr(s.stop, pre),
                                         step=self.expr(s.step, pre), body=self.block(s.body)))
        if isinstance(s, ir.While):
            if any(isinstance(n, ir.FuncCall) for n in ir.walk(s.cond)):
                raise NotDifferentiable("a @dsl.func call in a while condition is not differentiable", s.loc, NOTE)
            return [replace(s, body=self.block(s.body))]
        changes = {}
        for fld in fields(s):
            v = getattr(s, fld.name)
            if isinstance(v, ir.Expr):
                changes[fld.name] = self.expr(v, pre)
            elif isinstance(v, tuple) and v and isinstance(v[0], ir.Expr):
                changes[fld.name] = tuple(self.expr(x, pre) for x in v)
        return pre_then(pre, replace(s, **changes) if changes else s)

    def expr(self, e: ir.Expr, pre: List[ir.Stmt]) -> ir.Expr:
        def f(n):
            return self.call(n, pre, want_result=True) if isinstance(n, ir.FuncCall) else n
        return rebuild(e, f)

    def call(self, c: ir.FuncCall, pre: List[ir.Stmt], want_result: bool):
        fn = self.funcs[c.func]
        k = next(self.count)
        prefix = f"{fn.name}_{k}_"
        names = {n: prefix + n for n, _ in fn.locals}
        tensors: Dict[str, str] = {}
        for p, a in zip(fn.params, c.args):
            if isinstance(p, ir.ScalarParam):
                names[p.name] = prefix + p.name
                self.types[prefix + p.name] = p.dtype
                pre.append(ir.Assign(prefix + p.name, a, loc=c.loc))
            else:
                if isinstance(p, ir.Scratch):
                    raise NotDifferentiable("team scratch passed to a @dsl.func is not differentiable", c.loc, NOTE)
                tensors[p.name] = a.tensor
        for n, t in fn.locals:
            self.types[prefix + n] = t
        result = prefix + "result"
        if fn.ret is not None:
            self.types[result] = fn.ret
        body = rename(fn.body, names, tensors)
        body = Inliner.block(self, body)
        body, _ = structure(body, ir.Return, result)
        pre.extend(body)
        return ir.Name(result, type=fn.ret, loc=c.loc) if want_result else None


def pre_then(pre: List[ir.Stmt], s: ir.Stmt) -> List[ir.Stmt]:
    return pre + [s]


def structure(stmts, term, result: str = "") -> Tuple[Tuple[ir.Stmt, ...], bool]:
    """``stmts`` without ``term`` statements (Return, or Continue in a loop body): the statements
    after a conditional exit move into the branch that does not exit.  -> (statements, always exits).
    A function's ``return v`` becomes ``result = v``."""
    out: List[ir.Stmt] = []
    for k, s in enumerate(stmts):
        if isinstance(s, term):
            if isinstance(s, ir.Return) and s.value is not None:
                out.append(ir.Assign(result, s.value, loc=s.loc))
            return tuple(out), True
        if isinstance(s, ir.If):
            body, b_exits = structure(s.body, term, result)
            orelse, o_exits = structure(s.orelse, term, result)
            if b_exits and o_exits:
                out.append(replace(s, body=body, orelse=orelse))
                return tuple(out), True
            if b_exits or o_exits:
                rest, r_exits = structure(stmts[k + 1:], term, result)
                if b_exits:
                    orelse = orelse + rest
                else:
                    body = body + rest
                out.append(replace(s, body=body, orelse=orelse))
                return tuple(out), r_exits
            out.append(replace(s, body=body, orelse=orelse))
            continue
        if isinstance(s, (ir.For, ir.While)):
            for n in ir.walk(s.body):
                if isinstance(n, ir.Return):
                    raise NotDifferentiable("return inside a loop is not differentiable: the loop's trip count "
                                            "would depend on values; guard the loop body with if instead", n.loc, NOTE)
            body, _ = structure(s.body, ir.Continue)
            out.append(replace(s, body=body))
            continue
        out.append(s)
    return tuple(out), False


def prepare(kernel: ir.Kernel) -> Tuple[Tuple[ir.Stmt, ...], Dict[str, object]]:
    """The kernel body ready to differentiate, and the types of every local in it."""
    refuse(kernel)
    inl = Inliner(kernel)
    body = inl.block(kernel.body)
    body, _ = structure(body, ir.Return)
    types = dict(kernel.locals)
    types.update(inl.types)
    return body, types
