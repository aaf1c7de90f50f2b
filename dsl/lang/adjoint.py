"""Reverse-mode differentiation of a checked kernel: the body of its gradient kernel.

Each thread replays its forward (values renamed so that none is overwritten: every assignment
makes a new name, branches join through copies), then runs the adjoint statements in reverse:
``adj_v`` holds d(loss)/d(v) for every float local, and a store ``y[i] = e`` of the forward
seeds ``e`` with ``grad_y[i]``.  Loops run backwards; each reversed iteration first replays its
own body.  Values carried from one iteration to the next need no tape when they are
accumulations (``acc += e``: the adjoint passes through unchanged; ``m = max(m, e)``: the
gradient goes to the element equal to the final maximum); any other carried value is
recomputed from the loop's entry.  An input element read by one thread only (the same index as
that thread's own output element) gets its gradient with a plain ``+=``; any other with
``dsl.atomic_add``, so threads sharing an input (a broadcast bias, a gather) never race.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Set, Tuple

from dsl.lang import adjoint_first, adjoint_fission, derivatives
from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.adjoint_prepare import NOTE, prepare, rebuild, rename
from dsl.lang.errors import NotDifferentiable
from dsl.lang.visitor import Visitor


# --------------------------------------------------------------------------- analysis (original names)

def uses(e) -> Set[str]:
    return {n.name for n in ir.walk(e) if isinstance(n, ir.Name)}


def stmt_uses(s: ir.Stmt) -> Set[str]:
    out: Set[str] = set()
    for n in ir.children(s):
        if isinstance(n, ir.Expr):
            out |= uses(n)
    return out


def assigned(stmts) -> Set[str]:
    out: Set[str] = set()
    for n in ir.walk(tuple(stmts)):
        if isinstance(n, ir.Assign):
            out.add(n.name)
        elif isinstance(n, ir.For):
            out.add(n.var)
    return out


class Liveness:
    """Names live after each ``For`` (``after[id(loop)]``), by the usual backward data flow."""

    def __init__(self):
        self.after: Dict[int, Set[str]] = {}

    def block(self, stmts, live: Set[str]) -> Set[str]:
        for s in reversed(stmts):
            live = self.stmt(s, live)
        return live

    def stmt(self, s, live: Set[str]) -> Set[str]:
        if isinstance(s, ir.Assign):
            return (live - {s.name}) | uses(s.value)
        if isinstance(s, ir.If):
            return uses(s.cond) | self.block(s.body, set(live)) | self.block(s.orelse, set(live))
        if isinstance(s, (ir.For, ir.While)):
            self.after[id(s)] = set(live) | self.after.get(id(s), set())
            head = set(live)
            while True:
                inner = self.block(s.body, set(head))
                new = head | (inner - ({s.var} if isinstance(s, ir.For) else set()))
                if new == head:
                    break
                head = new
            bounds = uses(s.start) | uses(s.stop) | uses(s.step) if isinstance(s, ir.For) else uses(s.cond)
            return head | bounds
        return live | stmt_uses(s)


def accumulation(v: str, body) -> Optional[str]:
    """'add', 'max' or 'min' when every assignment of ``v`` in ``body`` is ``v = v + e`` (or -, or
    ``max(v, e)``, ``min(v, e)``) with ``v`` read nowhere else; else None."""
    kinds, reads, updates = set(), 0, 0
    for n in ir.walk(tuple(body)):
        if isinstance(n, ir.Name) and n.name == v:
            reads += 1
        if isinstance(n, ir.For) and n.var == v:
            return None
        if isinstance(n, ir.Assign) and n.name == v:
            kind = update_kind(v, n.value)
            if kind is None:
                return None
            kinds.add(kind)
            updates += 1
    return kinds.pop() if len(kinds) == 1 and reads == updates else None


def update_kind(v: str, e: ir.Expr) -> Optional[str]:
    if isinstance(e, ir.Cast):
        e = e.value
    if isinstance(e, ir.Binary) and e.op in ("add", "sub"):
        if _is(e.left, v) and v not in uses(e.right):
            return "add"
        if e.op == "add" and _is(e.right, v) and v not in uses(e.left):
            return "add"
    if isinstance(e, ir.Call) and e.name in ("max", "min") and len(e.args) == 2:
        a, b = e.args
        if (_is(a, v) and v not in uses(b)) or (_is(b, v) and v not in uses(a)):
            return e.name
    return None


def _is(e, v: str) -> bool:
    return isinstance(e, ir.Name) and e.name == v


# --------------------------------------------------------------------------- renamed program

@dataclass
class Carry:
    orig: str
    loop: str              # the name the loop body reads at an iteration's start
    entry: Optional[str]   # its value before the loop (None: first defined in the loop)
    last: str              # its value at the end of the body
    kind: Optional[str]    # 'add' | 'max' | 'min' (an accumulation) | None (recomputed)


@dataclass
class RFor:
    """A renamed range loop: ``var`` over range(start, stop, step), the values it carries."""

    var: str
    start: ir.Expr
    stop: ir.Expr
    step: ir.Expr
    body: Tuple
    carries: List[Carry]
    loc: object = None


@dataclass
class RWhile:
    """A while loop that touches no differentiated value: replayed, never reversed."""

    stmt: ir.While


def zero(t: T.DType) -> ir.Const:
    return ir.Const(0.0 if t.is_float else (False if t.is_bool else 0), type=t)


def bin_(op: str, a: ir.Expr, b: ir.Expr) -> ir.Binary:
    return ir.Binary(op, a, b, type=a.type)


def i64(v: int) -> ir.Const:
    return ir.Const(v, type=T.i64)


class Adjoint(Visitor):
    """Builds the gradient kernel's body from a checked forward kernel (``run``)."""

    def __init__(self, kernel: ir.Kernel, grads: Dict[str, str], seeds: Dict[str, str]):
        self.kernel = kernel
        self.grads = grads    # differentiated input tensor -> its grad_ tensor (InOut)
        self.seeds = seeds    # differentiated output tensor -> its grad_ tensor (In)
        self.types: Dict[str, T.DType] = {}
        self.taken_names = set(p.name for p in kernel.params) | set(grads.values()) | set(seeds.values())
        self.counter = itertools.count()
        self.orig_of: Dict[str, str] = {}
        self.adj: Dict[str, str] = {}
        self.loop_keys: Dict[str, tuple] = {}   # renamed loop var -> its range, for the ownership test
        self.owned: Dict[str, bool] = {}
        self.pending: Dict[tuple, tuple] = {}  # owned gradient elements the current statement adds to
        self.through: Dict[str, dict] = {}  # accumulations of the loops being reversed, by original name

    # ------------------------------------------------------------------ names
    def fresh(self, base: str, t: T.DType) -> str:
        while True:
            name = f"{base}_{next(self.counter)}"
            if name not in self.taken_names:
                self.taken_names.add(name)
                self.types[name] = t
                return name

    def adj_of(self, name: str) -> str:
        a = self.adj.get(name)
        if a is None:
            a = self.adj[name] = self.fresh(f"adj_{self.orig_of.get(name, name)}", self.types[name])
        return a

    # ------------------------------------------------------------------ entry point
    def run(self) -> Tuple[ir.Stmt, ...]:
        body, self.orig_types = prepare(self.kernel)
        self.taken_names |= set(self.orig_types) | assigned(body)
        self.check_tensors(body)
        self.live = Liveness()
        self.live.block(body, set())
        env = {p.name: p.name for p in self.kernel.params if isinstance(p, ir.ScalarParam)}
        renamed = self.ssa(body, env)
        self.decide_ownership(renamed)
        forward = self.replay(renamed)
        backward = self.rev(renamed, frozenset())
        init = [ir.Assign(a, zero(self.types[a])) for a in self.adj.values()]
        # every local starts defined: the adjoint of a branch reads values its forward branch made,
        # and the checker cannot know the two take the same side (dead_code drops the unneeded)
        defined = [ir.Assign(n, zero(t)) for n, t in self.types.items() if isinstance(t, T.DType)]
        body, _ = dead_code(tuple(defined) + tuple(forward) + tuple(init) + tuple(backward), set())
        return body

    def check_tensors(self, body) -> None:
        stored = {}
        for n in ir.walk(tuple(body)):
            if isinstance(n, ir.Store) and n.tensor not in stored:
                stored[n.tensor] = n.loc
        for n in ir.walk(tuple(body)):
            if isinstance(n, ir.Load):
                p = self.kernel.buffer(n.tensor)
                if isinstance(p, ir.TensorParam) and p.access == "out":
                    raise NotDifferentiable(f"reading Out tensor '{n.tensor}' is not differentiable: the gradient "
                                            "kernel does not recompute the forward's outputs; keep the value in a "
                                            "local", n.loc, NOTE)
                if isinstance(p, ir.TensorParam) and p.access == "inout" and n.tensor in stored:
                    raise NotDifferentiable(f"InOut tensor '{n.tensor}' is read and written: the forward overwrites "
                                            "the values its gradient depends on; take the input and the output as "
                                            "separate In and Out tensors", stored[n.tensor], NOTE)

    # ------------------------------------------------------------------ renaming (SSA)
    def sub(self, e: ir.Expr, env: Dict[str, str]) -> ir.Expr:
        def f(n):
            if isinstance(n, ir.Name) and n.name in env:
                return replace(n, name=env[n.name])
            return n
        return rebuild(e, f)

    def version(self, orig: str, t: T.DType) -> str:
        name = self.fresh(orig, t)
        self.orig_of[name] = orig
        return name

    def ssa(self, stmts, env: Dict[str, str]) -> List:
        out: List = []
        for s in stmts:
            if isinstance(s, ir.Assign):
                value = self.sub(s.value, env)
                value = self.hoist(value, out, top=True)
                name = env[s.name] = self.version(s.name, s.value.type)
                out.append(ir.Assign(name, value, loc=s.loc))
            elif isinstance(s, ir.Store):
                value = self.hoist(self.sub(s.value, env), out, top=True)
                out.append(replace(s, index=tuple(self.sub(i, env) for i in s.index), value=value))
            elif isinstance(s, ir.If):
                out.extend(self.ssa_if(s, env))
            elif isinstance(s, ir.For):
                out.append(self.ssa_for(s, env))
            elif isinstance(s, ir.While):
                out.extend(self.ssa_while(s, env))
            elif isinstance(s, (ir.ExprStmt, ir.Log, ir.Require)):
                continue  # no value flows out of them (a Require is not repeated in the adjoint)
            else:
                raise NotDifferentiable(f"{type(s).__name__} statements are not differentiable", s.loc, NOTE)
        return out

    def hoist(self, e: ir.Expr, out: List, top: bool = False) -> ir.Expr:
        """``e`` with each float builtin call computed first into a local of its own, so that the
        adjoint reads its value (d exp(x) = exp(x)) instead of calling it again.  Sides of a
        conditional expression stay in place: only the taken one runs."""
        if isinstance(e, ir.Conditional):
            return replace(e, cond=self.hoist(e.cond, out))
        if isinstance(e, ir.Logical):
            return replace(e, left=self.hoist(e.left, out))
        changes = {}
        for name in ("operand", "left", "right", "value", "cond", "if_true", "if_false"):
            v = getattr(e, name, None)
            if isinstance(v, ir.Expr):
                changes[name] = self.hoist(v, out)
        if isinstance(e, ir.Call):
            changes["args"] = tuple(self.hoist(a, out) for a in e.args)
        e = replace(e, **changes) if changes else e
        costly = (isinstance(e, ir.Call) and derivatives.formulas_or_none(e.name) not in (None, derivatives.PICK)
                  or isinstance(e, ir.Binary) and e.op in ("truediv", "pow"))
        if not top and costly and e.type is not None and e.type.is_float:
            name = self.version("call", e.type)
            out.append(ir.Assign(name, e, loc=e.loc))
            return ir.Name(name, type=e.type, loc=e.loc)
        return e

    def ssa_if(self, s: ir.If, env) -> List:
        cond = self.fresh("cond", T.bool_)
        pre = ir.Assign(cond, self.sub(s.cond, env), loc=s.loc)
        env_b, env_o = dict(env), dict(env)
        body, orelse = self.ssa(s.body, env_b), self.ssa(s.orelse, env_o)
        for v in sorted(set(env_b) | set(env_o)):
            b, o = env_b.get(v), env_o.get(v)
            if b == env.get(v) and o == env.get(v):
                continue
            if b is None or o is None:
                env[v] = b or o
                continue
            j = self.version(v, self.types.get(b) or self.types[o])
            body.append(ir.Assign(j, ir.Name(b, type=self.types[j])))
            orelse.append(ir.Assign(j, ir.Name(o, type=self.types[j])))
            env[v] = j
        return [pre, ir.If(ir.Name(cond, type=T.bool_), tuple(body), tuple(orelse), loc=s.loc)]

    def ssa_for(self, s: ir.For, env) -> RFor:
        start, stop, step = (self.sub(e, env) for e in (s.start, s.stop, s.step))
        live_after = self.live.after.get(id(s), set())
        inner = assigned(s.body) - {s.var}
        exposed = Liveness().block(s.body, set())
        carried = sorted(v for v in inner if v in live_after or v in exposed)
        carries = []
        for v in carried:
            t = self.orig_types.get(v)
            loop = self.version(v, t)
            carries.append(Carry(v, loop, env.get(v), "", accumulation(v, s.body) if t.is_float else None))
            env[v] = loop
        var = env[s.var] = self.version(s.var, T.i64)
        self.loop_keys[var] = (ir.fmt(start), ir.fmt(stop), ir.fmt(step))
        body_env = dict(env)
        body = self.ssa(s.body, body_env)
        loop = RFor(var, start, stop, step, tuple(body), carries, s.loc)
        for c in carries:
            c.last = body_env[c.orig]
        for v in inner - set(carried):
            if v in body_env and v != s.var:
                env[v] = body_env[v]
        return loop

    def ssa_while(self, s: ir.While, env) -> List:
        floats = [n for n in ir.walk(s.cond) if isinstance(n, ir.Expr) and n.type is not None and n.type.is_float]
        if floats:
            raise NotDifferentiable("a while loop whose trip count depends on a differentiated (float) value is not "
                                    "differentiable; loop over a range and guard the body with if", s.loc, NOTE)
        for n in ir.walk(s.body):
            if (isinstance(n, ir.Assign) and n.value.type.is_float) or isinstance(n, ir.Store):
                raise NotDifferentiable("a while loop that computes float values or stores is not differentiable; "
                                        "write it as a range loop", n.loc, NOTE)
        mine = assigned(s.body)
        out = []
        names = {}
        for v in sorted(mine):
            names[v] = self.fresh(f"w_{v}", self.orig_types[v])
            if v in env:
                out.append(ir.Assign(names[v], ir.Name(env[v], type=self.orig_types[v])))
        inner_env = dict(env)
        inner_env.update(names)
        body = rename(s.body, inner_env, {})
        out.append(RWhile(ir.While(self.sub(s.cond, inner_env), body, loc=s.loc)))
        env.update(names)
        return out

    # ------------------------------------------------------------------ ownership
    def decide_ownership(self, renamed) -> None:
        """A grad_ tensor takes plain += when every read of its input is at an element this thread
        itself writes in one output (so no other thread reads it); else atomic adds."""
        loads: Dict[str, List] = {t: [] for t in self.grads}
        stores: Dict[str, List] = {}
        for n in _walk_all(renamed):
            if isinstance(n, ir.Load) and n.tensor in loads:
                loads[n.tensor].append(n)
            elif isinstance(n, ir.Store):
                stores.setdefault(n.tensor, []).append(n)
        for t, ls in loads.items():
            self.owned[t] = any(all(any(self.covers(st, ld) for st in sts) for ld in ls)
                                for sts in stores.values()) and bool(ls)

    def key(self, e: ir.Expr):
        if isinstance(e, ir.Name) and e.name in self.loop_keys:
            return ("range",) + self.loop_keys[e.name]
        return ("expr", ir.fmt(e))

    def covers(self, store: ir.Store, load: ir.Load) -> bool:
        if store.flat != load.flat or len(store.index) != len(load.index):
            return False
        loop_vars = [e.name for e in store.index if isinstance(e, ir.Name) and e.name in self.loop_keys]
        if len(set(loop_vars)) != len(loop_vars):
            return False
        return all(self.key(a) == self.key(b) for a, b in zip(store.index, load.index))

    # ------------------------------------------------------------------ forward replay
    def replay(self, stmts) -> List[ir.Stmt]:
        out: List[ir.Stmt] = []
        for s in stmts:
            if isinstance(s, ir.Assign):
                out.append(s)
            elif isinstance(s, ir.If):
                b, o = self.replay(s.body), self.replay(s.orelse)
                if b or o:
                    out.append(replace(s, body=tuple(b), orelse=tuple(o)))
            elif isinstance(s, RFor):
                out.extend(self.forward_loop(s))
            elif isinstance(s, RWhile):
                out.append(s.stmt)
        return out

    def forward_loop(self, f: RFor) -> List[ir.Stmt]:
        out = [ir.Assign(c.loop, self.entry_value(c)) for c in f.carries]
        ends = [ir.Assign(c.loop, ir.Name(c.last, type=self.types[c.loop])) for c in f.carries]
        out.append(ir.For(f.var, f.start, f.stop, f.step, tuple(self.replay(f.body)) + tuple(ends), loc=f.loc))
        return out

    def entry_value(self, c: Carry) -> ir.Expr:
        t = self.types[c.loop]
        return ir.Name(c.entry, type=t) if c.entry is not None else zero(t)

    # ------------------------------------------------------------------ reverse
    def rev(self, stmts, accumulating: frozenset) -> List[ir.Stmt]:
        out: List[ir.Stmt] = []
        for s in reversed(stmts):
            out.extend(self.visit(s, accumulating))
        return out

    def visit_Assign(self, s: ir.Assign, acc) -> List[ir.Stmt]:
        t = self.types[s.name]
        if not t.is_float:
            return []
        self.pending = {}
        through = self.through.get(self.orig_of.get(s.name))
        if through is not None:  # an accumulation's update: its adjoint is the loop's, unchanged
            return self.flush(self.accumulated(s, through))
        a = self.adj_of(s.name)
        seed = self.fresh("seed", t)
        out: List[ir.Stmt] = [ir.Assign(seed, ir.Name(a, type=t)), ir.Assign(a, zero(t))]
        self.expr(s.value, ir.Name(seed, type=t), out, result=ir.Name(s.name, type=t))
        return self.flush(out)

    def visit_Store(self, s: ir.Store, acc) -> List[ir.Stmt]:
        g = self.seeds.get(s.tensor)
        if g is None or not s.value.type.is_float:
            return []
        out: List[ir.Stmt] = []
        self.pending = {}
        self.expr(s.value, ir.Load(g, s.index, s.flat, type=s.value.type, loc=s.loc), out)
        return self.flush(out)

    def flush(self, out: List[ir.Stmt]) -> List[ir.Stmt]:
        """One read-modify-write per owned gradient element a statement contributes to (its
        leaves added into a local first)."""
        init, stores = [], []
        for (g, _, flat), (local, index, t) in self.pending.items():
            init.append(ir.Assign(local, zero(t)))
            cur = ir.Load(g, index, flat, type=t)
            stores.append(ir.Store(g, index, bin_("add", cur, ir.Name(local, type=t)), flat))
        self.pending = {}
        return init + out + stores

    def visit_If(self, s: ir.If, acc) -> List[ir.Stmt]:
        b, o = self.rev(s.body, acc), self.rev(s.orelse, acc)
        return [replace(s, body=tuple(b), orelse=tuple(o))] if b or o else []

    def visit_RWhile(self, s, acc) -> List[ir.Stmt]:
        return []

    def visit_RFor(self, f: RFor, acc) -> List[ir.Stmt]:
        out: List[ir.Stmt] = []
        saved = dict(self.through)
        mine = []  # accumulations this loop is the outermost of
        for c in f.carries:
            if c.kind is None:
                continue
            if c.orig in self.through:  # nested in a loop accumulating the same value
                self.through[c.orig] = {**self.through[c.orig], "final": c.loop}
                continue
            ty = self.types[c.loop]
            through = {"kind": c.kind, "final": c.loop, "seed": self.fresh(f"adj_{c.orig}_through", ty)}
            out.append(ir.Assign(through["seed"], ir.Name(self.adj_of(c.loop), type=ty)))
            if c.kind in ("max", "min"):
                through["flag"] = self.fresh(f"taken_{c.orig}", T.bool_)
                out.append(ir.Assign(through["flag"], ir.Const(False, type=T.bool_)))
            self.through[c.orig] = through
            mine.append((c, through))
        general = [c for c in f.carries if c.kind is None]
        body: List[ir.Stmt] = []
        if general:  # iterations depend on each other: run them backwards, each restoring its carry
            trips = self.fresh("trips", T.i64)
            out.append(ir.Assign(trips, self.trip_count(f)))
            t = self.fresh("rev", T.i64)
            tn = ir.Name(t, type=T.i64)
            at = ir.Assign(f.var, bin_("add", f.start, bin_("mul", tn, f.step)))
            t2 = self.fresh("redo", T.i64)
            body.append(at)
            body += [ir.Assign(c.loop, self.entry_value(c)) for c in general]
            redo = [ir.Assign(f.var, bin_("add", f.start, bin_("mul", ir.Name(t2, type=T.i64), f.step)))]
            redo += self.replay(f.body)
            redo += [ir.Assign(c.loop, ir.Name(c.last, type=self.types[c.loop])) for c in general]
            body.append(ir.For(t2, i64(0), tn, i64(1), tuple(redo)))
            body.append(at)
        body += self.replay(f.body)
        for c in general:
            ty = self.types[c.loop]
            if not ty.is_float:
                continue
            al, ae = self.adj_of(c.loop), self.adj_of(c.last)
            body.append(ir.Assign(ae, bin_("add", ir.Name(ae, type=ty), ir.Name(al, type=ty))))
            body.append(ir.Assign(al, zero(ty)))
        body += self.rev(f.body, acc)
        self.through = saved
        if general:
            out.append(ir.For(t, bin_("sub", ir.Name(trips, type=T.i64), i64(1)), i64(-1), i64(-1), tuple(body),
                              loc=f.loc))
        else:
            # only accumulations cross iterations and their adjoints pass through unchanged, so the
            # reversed iterations may run in the forward's order (which vectorizes like it)
            out.append(ir.For(f.var, f.start, f.stop, f.step, tuple(body), loc=f.loc))
        for c in f.carries:
            ty = self.types[c.loop]
            if not ty.is_float or (c.kind is not None and c.orig in saved):
                continue
            al = self.adj_of(c.loop)
            if c.entry is not None and c.entry in self.types:
                ae = self.adj_of(c.entry)
                add = ir.Assign(ae, bin_("add", ir.Name(ae, type=ty), ir.Name(al, type=ty)))
                through = {id(k): v for k, v in mine}.get(id(c))
                if through is not None and "flag" in through:  # no element was the extreme: the entry was
                    out.append(ir.If(ir.Unary("not", ir.Name(through["flag"], type=T.bool_), type=T.bool_), (add,)))
                else:
                    out.append(add)
            out.append(ir.Assign(al, zero(ty)))
        return out

    def trip_count(self, f: RFor) -> ir.Expr:
        lo, hi, st = f.start, f.stop, f.step

        def count(a, b, s):  # (b - a + s - 1) // s when b > a, else 0
            n = bin_("floordiv", bin_("sub", bin_("add", bin_("sub", b, a), s), i64(1)), s)
            return ir.Conditional(ir.Compare("gt", b, a, type=T.bool_), n, i64(0), type=T.i64)
        up = count(lo, hi, st)
        if isinstance(st, ir.Const):
            return up if st.value > 0 else count(hi, lo, i64(-st.value))
        down = count(hi, lo, ir.Unary("neg", st, type=T.i64))
        return ir.Conditional(ir.Compare("gt", st, i64(0), type=T.bool_), up, down, type=T.i64)

    def accumulated(self, s: ir.Assign, through: dict) -> List[ir.Stmt]:
        """The adjoint of an update of an accumulation ``v`` (``v = v + e``, ``v = max(v, e)``):
        ``e`` gets the loop's adjoint of ``v`` (for max/min only the one ``e`` equal to the final
        value, the first met); copies of ``v`` between branches pass it on unchanged."""
        value = s.value.value if isinstance(s.value, ir.Cast) else s.value
        orig = self.orig_of[s.name]
        seed = ir.Name(through["seed"], type=self.types[through["seed"]])
        mine = [isinstance(x, ir.Name) and self.orig_of.get(x.name) == orig for x in getattr(value, "args", ())]
        out: List[ir.Stmt] = []
        if isinstance(value, ir.Binary):
            mine = [isinstance(x, ir.Name) and self.orig_of.get(x.name) == orig for x in (value.left, value.right)]
            e = value.right if mine[0] else value.left
            self.expr(e, _as(seed if value.op == "add" else ir.Unary("neg", seed, type=seed.type), e.type), out)
        elif isinstance(value, ir.Call):
            e = value.args[1] if mine[0] else value.args[0]
            flag = ir.Name(through["flag"], type=T.bool_)
            final = ir.Name(through["final"], type=self.types[through["final"]])
            take: List[ir.Stmt] = []
            self.expr(e, _as(seed, e.type), take)
            take = self.flush(take)  # the gradient element is written in this branch only
            take.append(ir.Assign(flag.name, ir.Const(True, type=T.bool_)))
            cond = ir.Logical("and", ir.Unary("not", flag, type=T.bool_),
                              ir.Compare("eq", _as(e, final.type), final, type=T.bool_), type=T.bool_)
            out.append(ir.If(cond, tuple(take), (), loc=s.loc))
        return out

    # ------------------------------------------------------------------ expressions
    def share(self, seed: ir.Expr, out: List[ir.Stmt]) -> ir.Expr:
        if isinstance(seed, (ir.Name, ir.Const)):
            return seed
        name = self.fresh("d", seed.type)
        out.append(ir.Assign(name, seed))
        return ir.Name(name, type=seed.type)

    def expr(self, e: ir.Expr, seed: ir.Expr, out: List[ir.Stmt], result: Optional[ir.Expr] = None) -> None:
        """Statements adding ``seed`` * d(e)/d(leaf) into every leaf's adjoint (``result``: a local
        holding the value of ``e``, when there is one)."""
        if e.type is None or not e.type.is_float:
            return
        if isinstance(e, ir.Name):
            if e.name in self.orig_of:
                a = self.adj_of(e.name)
                out.append(ir.Assign(a, bin_("add", ir.Name(a, type=e.type), seed)))
            return
        if isinstance(e, ir.Load):
            g = self.grads.get(e.tensor)
            if g is None:
                return
            if self.owned.get(e.tensor):
                key = (g, tuple(ir.fmt(i) for i in e.index), e.flat)
                if key not in self.pending:
                    self.pending[key] = (self.fresh(f"g_{e.tensor}", e.type), e.index, e.type)
                local = self.pending[key][0]
                out.append(ir.Assign(local, bin_("add", ir.Name(local, type=e.type), seed)))
            else:
                out.append(ir.AtomicAdd(g, e.index, seed, e.flat, loc=e.loc))
            return
        if isinstance(e, ir.Unary) and e.op == "neg":
            self.expr(e.operand, ir.Unary("neg", seed, type=seed.type), out)
            return
        if isinstance(e, ir.Cast):
            v = e.value
            if isinstance(v, ir.Cast) and v.type.is_storage_only:
                v = v.value
            if v.type is not None and v.type.is_float:
                self.expr(v, ir.Cast(seed, type=v.type), out)
            return
        if isinstance(e, ir.Binary):
            self.binary(e, seed, out, result or e)
            return
        if isinstance(e, (ir.Select, ir.Conditional)):
            seed = self.share(seed, out)
            b, o = [], []
            self.expr(e.if_true, seed, b)
            self.expr(e.if_false, seed, o)
            if b or o:
                out.append(ir.If(e.cond, tuple(b), tuple(o), loc=e.loc))
            return
        if isinstance(e, ir.Call):
            self.call(e, seed, out, result or e)
            return
        if isinstance(e, (ir.Const, ir.Shape, ir.Size)):
            return
        raise NotDifferentiable(f"{ir.fmt(e)} ({type(e).__name__}) is not differentiable", e.loc, NOTE)

    def binary(self, e: ir.Binary, seed: ir.Expr, out: List[ir.Stmt], result: ir.Expr) -> None:
        a, b = e.left, e.right
        if e.op in ("add", "sub"):
            seed = self.share(seed, out)
            self.expr(a, seed, out)
            self.expr(b, seed if e.op == "add" else ir.Unary("neg", seed, type=seed.type), out)
        elif e.op == "mul":
            seed = self.share(seed, out)
            self.expr(a, bin_("mul", seed, b), out)
            self.expr(b, bin_("mul", seed, a), out)
        elif e.op == "truediv":
            seed = self.share(seed, out)
            q = self.share(bin_("truediv", seed, b), out)
            self.expr(a, q, out)
            self.expr(b, ir.Unary("neg", bin_("mul", q, result), type=e.type), out)
        elif e.op == "pow":
            self.call(ir.Call("pow", (a, b), type=e.type, loc=e.loc), seed, out, result)
        elif e.op == "mod":  # a - floor(a / b) * b
            seed = self.share(seed, out)
            self.expr(a, seed, out)
            fl = ir.Call("floor", (bin_("truediv", a, b),), type=e.type)
            self.expr(b, ir.Unary("neg", bin_("mul", seed, fl), type=e.type), out)
        elif e.op == "floordiv":
            return  # piecewise constant
        else:
            raise NotDifferentiable(f"operator {e.op} is not differentiable", e.loc, NOTE)

    def call(self, e: ir.Call, seed: ir.Expr, out: List[ir.Stmt], result: ir.Expr) -> None:
        try:
            spec = derivatives.formulas(e.name)
        except derivatives.NoDerivative:
            raise NotDifferentiable(f"builtin {e.name}() declares no derivative, so dsl.grad cannot differentiate "
                                    "it", e.loc, "add derivative=(...) to its entry in dsl/lang/builtins.py "
                                    "(builtins.DERIVATIVES)") from None
        seed = self.share(seed, out)
        if spec == derivatives.PICK:  # the first argument equal to the result gets the gradient
            branches = None
            for arg in reversed(e.args):
                body: List[ir.Stmt] = []
                self.expr(arg, seed, body)
                cond = ir.Compare("eq", arg, e, type=T.bool_)
                branches = [ir.If(cond, tuple(body), tuple(branches or ()), loc=e.loc)] if branches is not None \
                    else body
            out.extend(branches or [])
            return
        for arg, d in zip(e.args, derivatives.partials(e, result)):
            if d is not None:
                self.expr(arg, bin_("mul", seed, d), out)


def dead_code(stmts, live: Set[str]) -> Tuple[Tuple[ir.Stmt, ...], Set[str]]:
    """``stmts`` without assignments nobody reads and loops and branches left empty -> (stmts, live
    before them).  The replayed forward computes much the adjoint never reads."""
    out: List[ir.Stmt] = []
    live = set(live)
    for s in reversed(stmts):
        if isinstance(s, ir.Assign):
            if s.name in live:
                live = (live - {s.name}) | uses(s.value)
                out.append(s)
        elif isinstance(s, ir.If):
            b, lb = dead_code(s.body, live)
            o, lo = dead_code(s.orelse, live)
            if b or o:
                out.append(replace(s, body=b, orelse=o))
                live = lb | lo | uses(s.cond)
        elif isinstance(s, ir.For):
            head = set(live)
            while True:
                _, inner = dead_code(s.body, head)
                new = head | (inner - {s.var})
                if new == head:
                    break
                head = new
            body, _ = dead_code(s.body, head)
            if body:
                out.append(replace(s, body=body))
                live = head | uses(s.start) | uses(s.stop) | uses(s.step)
        else:
            out.append(s)
            live |= {n.name for n in ir.walk(s) if isinstance(n, ir.Name)}
    return tuple(reversed(out)), live


def _as(e: ir.Expr, t: T.DType) -> ir.Expr:
    return e if e.type == t else ir.Cast(e, type=t)


def _walk_all(stmts):
    """Every ir node of a renamed body, inside branches and loops too."""
    for s in stmts:
        if isinstance(s, RFor):
            for e in (s.start, s.stop, s.step):
                yield from ir.walk(e)
            yield from _walk_all(s.body)
        elif isinstance(s, RWhile):
            yield from ir.walk(s.stmt)
        elif isinstance(s, ir.If):
            yield s
            yield from ir.walk(s.cond)
            yield from _walk_all(s.body)
            yield from _walk_all(s.orelse)
        else:
            yield from ir.walk(s)


def differentiate(kernel: ir.Kernel, grads: Dict[str, str], seeds: Dict[str, str], split: bool = True):
    """(body, its per-thread arrays) of the gradient of ``kernel``: ``grads`` maps each
    differentiated input to its gradient tensor, ``seeds`` each differentiated output to its
    incoming gradient.  With ``split``, reversed loops that add into row adjoints are split so
    that they vectorize under strict math (dsl/lang/adjoint_fission.py); under fast math the
    compiler vectorizes the whole loops itself, faster."""
    a = Adjoint(kernel, grads, seeds)
    body = adjoint_first.search_first_extremes(a.run(), a.fresh)
    if not split:
        return body, []
    return adjoint_fission.split_accumulations(body, a.types, a.fresh)
