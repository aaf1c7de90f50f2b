"""How much work a launch does, from the kernel's loop structure and the launch's shapes.

The serial-or-parallel choice of a small launch (backends/numba/entry_choice.py) must not depend on
a one-time timing that a busy neighbour can skew; it depends on this estimate instead.  ``summarize``
turns a kernel's IR into a small JSON-able *work program*: its statements with their operation
counts, and its loops with their bound expressions.  ``estimate`` runs that program for one launch
(tensor shapes, scalar arguments, grid, team size), evaluating only integer bookkeeping -- shapes,
``dsl.split``, loop bounds -- and adds up the operations the team's threads execute.

A loop runs its body once with its variable at the middle of its range (a triangular nest is
averaged right), times its trip count.  What cannot be known before the launch -- a bound read from
a tensor, a ``while`` condition -- counts ``UNKNOWN_TRIPS`` iterations.  Threads are weighed by the
first and the last of the first tile (``dsl.split`` gives the first the largest share).  The
program is kept in the warm-start record (backends/numba/warm.py), so a warm launcher, which has
no IR, estimates the same.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from dsl.lang import ir

# Hash of this file: a work program kept in a warm-start record by another version is not trusted.
VERSION = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:10]
UNKNOWN_TRIPS = 16  # iterations assumed for a loop whose bounds depend on data
WHILE_STEPS = 4096  # iterations of a ``while`` loop followed one by one, at most (its cond is evaluated)
STEP_BUDGET = 1 << 16  # ``while`` iterations followed in one estimate (nested loops): then the default
_MAX_TRIPS = 1 << 40

Program = Dict[str, Any]  # {"body": [...], "funcs": {name: {"params": [...], "body": [...]}}, "reads": [...]}


# --------------------------------------------------------------------------- IR -> work program

def summarize(kernel: ir.Kernel) -> Program:
    """The work program of ``kernel`` (plain lists, numbers and strings: JSON-able)."""
    reads = _Reads(p.name for p in kernel.params if isinstance(p, ir.VecParam))
    scalars = {p.name for p in kernel.params if isinstance(p, (ir.ScalarParam, ir.VecParam))}
    funcs = {}
    for f in kernel.funcs:
        params = [["t" if isinstance(p, (ir.TensorParam, ir.Scratch)) else "s", p.name] for p in f.params]
        funcs[f.name] = {"params": params, "body": _stmts(f.body, reads)}
    consts = {p.name: _number(p.const_value) for p in kernel.params
              if isinstance(p, ir.ScalarParam) and p.const_value is not None}
    return {"version": VERSION, "body": _stmts(kernel.body, reads), "funcs": funcs, "consts": consts,
            "reads": sorted(reads & scalars - set(consts))}


class _Reads(set):
    """The parameter names a work program reads, and which parameters are ``dsl.Vec`` values."""

    def __init__(self, vecs):
        super().__init__()
        self.vecs = frozenset(vecs)


def _number(v) -> Optional[float]:
    v = v.item() if hasattr(v, "item") else v
    return v if isinstance(v, (bool, int, float)) else None


def _stmts(body: Sequence[ir.Stmt], reads: set) -> List:
    out = []
    for st in body:
        if isinstance(st, (ir.For, ir.StaticFor)):
            out.append(["for", st.var, _expr(st.start, reads), _expr(st.stop, reads), _expr(st.step, reads),
                        _stmts(st.body, reads)])
        elif isinstance(st, ir.While):
            out.append(["while", _expr(st.cond, reads), _cost(st.cond), _calls(st.cond, reads), _stmts(st.body, reads)])
        elif isinstance(st, ir.If):
            out.append(["if", _expr(st.cond, reads), _cost(st.cond), _calls(st.cond, reads),
                        _stmts(st.body, reads), _stmts(st.orelse, reads)])
        elif isinstance(st, ir.Assign):
            out.append(["set", st.name, _expr(st.value, reads), _cost(st.value), _calls(st.value, reads)])
        elif isinstance(st, ir.Return):
            out.append(["ret", _cost(st), _calls(st, reads)])
        elif isinstance(st, ir.Break):
            out.append(["break"])
        else:  # stores, atomics, calls, logs, syncs: their operations count, their values do not
            out.append(["op", _cost(st), _calls(st, reads)])
    return out


def _children(node) -> List:
    """The IR nodes directly inside ``node`` (expressions of a statement, operands of an expression)."""
    out = []
    for f in dataclasses.fields(node):
        if f.name in ("loc", "type", "body", "orelse"):
            continue
        v = getattr(node, f.name)
        for item in (v if isinstance(v, tuple) else (v,)):
            if isinstance(item, ir.Expr):
                out.append(item)
    return out


_MEMORY = (ir.Load, ir.VLoad, ir.AtomicFetchAdd, ir.Store, ir.VStore, ir.AtomicAdd)


def _cost(node) -> int:
    """Operations in ``node``: one per memory access and value computed in floating point, times
    its SIMD lanes (a ``dsl.simd`` FMA of 8 lanes is 8).  Integer bookkeeping (indexes, counters,
    compares) counts nothing: the compiler strength-reduces most of it, and it would make a loop's
    cost depend on how its indexes are spelled."""
    if isinstance(node, (ir.Name, ir.Const)):
        return 0
    t = node.value.type if isinstance(node, ir.VStore) else getattr(node, "type", None)
    lanes = getattr(t, "lanes", None) or 1
    if isinstance(node, (_MEMORY, ir.FuncCall)):
        n = lanes
    elif isinstance(node, ir.Splat):  # broadcasting a value into lanes: hoisted out of loops
        n = 0
    else:  # float arithmetic and math calls (dsl.exp...); integer ones (min of indexes) are free
        n = lanes if getattr(t, "is_float", False) else 0
    return n + sum(_cost(c) for c in _children(node))


def _calls(node, reads: set) -> List:
    """The ``@dsl.func`` calls inside ``node`` (each runs its body's work)."""
    found = []
    for c in _children(node):
        if isinstance(c, ir.FuncCall):
            found.append(_expr(c, reads))
        else:
            found.extend(_calls(c, reads))
    return found


_KNOWN_CALLS = {"min", "max", "abs", "thread_id", "num_threads", "tile_id", "num_tiles"}


def _expr(e: ir.Expr, reads: set) -> List:
    """The integer-bookkeeping view of ``e``: what ``_value`` can evaluate, ``["?"]`` for the rest."""
    if isinstance(e, ir.Const):
        return ["c", _number(e.value)]
    if isinstance(e, ir.Name):
        reads.add(e.name)
        return ["n", e.name]
    if isinstance(e, ir.Load) and len(e.index) == 1 and e.tensor in reads.vecs:
        reads.add(e.tensor)  # a dsl.Vec argument's element: a geometry passed by value
        return ["vec", e.tensor, _expr(e.index[0], reads)]
    if isinstance(e, ir.Shape):
        return ["shape", e.tensor, e.axis]
    if isinstance(e, ir.Size):
        return ["size", e.tensor]
    if isinstance(e, ir.NDim):
        return ["ndim", e.tensor]
    if isinstance(e, ir.Unary):
        return ["u", e.op, _expr(e.operand, reads)]
    if isinstance(e, (ir.Binary, ir.Compare, ir.Logical)):
        return ["b", e.op, _expr(e.left, reads), _expr(e.right, reads)]
    if isinstance(e, (ir.Select, ir.Conditional)):
        return ["sel", _expr(e.cond, reads), _expr(e.if_true, reads), _expr(e.if_false, reads)]
    if isinstance(e, ir.Cast):
        return ["cast", bool(e.type is not None and e.type.is_int), _expr(e.value, reads)]
    if isinstance(e, ir.Call) and e.name in _KNOWN_CALLS:
        return ["call", e.name, [_expr(a, reads) for a in e.args]]
    if isinstance(e, ir.FuncCall):
        return ["f", e.func, [["t", a.tensor] if isinstance(a, ir.TensorRef) else _expr(a, reads) for a in e.args]]
    return ["?"]


# --------------------------------------------------------------------------- one launch's work

_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "truediv": lambda a, b: a / b if b else None, "floordiv": lambda a, b: a // b if b else None,
    "mod": lambda a, b: a % b if b else None, "pow": lambda a, b: a ** b if abs(b) < 64 else None,
    "bitand": lambda a, b: a & b, "bitor": lambda a, b: a | b, "bitxor": lambda a, b: a ^ b,
    "lshift": lambda a, b: a << b if 0 <= b < 64 else None, "rshift": lambda a, b: a >> b if 0 <= b < 64 else None,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "and": lambda a, b: bool(a) and bool(b), "or": lambda a, b: bool(a) or bool(b),
}


class _Launch:
    """What one thread of one launch sees: shapes, its ids, the team and the grid."""

    __slots__ = ("shapes", "tid", "team", "tiles", "funcs", "depth", "steps")

    def __init__(self, shapes, tid, team, tiles, funcs):
        self.shapes, self.tid, self.team, self.tiles, self.funcs, self.depth = shapes, tid, team, tiles, funcs, 0
        self.steps = STEP_BUDGET  # while iterations this estimate may still follow one by one


def _value(e: List, env: Dict, at: _Launch):
    """The value of expression ``e`` (an int, float or bool), None when it depends on data."""
    k = e[0]
    try:
        if k == "c":
            return e[1]
        if k == "n":
            return env.get(e[1])
        if k == "vec":
            vec, i = env.get(e[1]), _value(e[2], env, at)
            return vec[i] if vec is not None and i is not None and 0 <= i < len(vec) else None
        if k == "shape":
            shape = at.shapes.get(env.get("\0" + e[1], e[1]))
            return shape[e[2]] if shape is not None and e[2] < len(shape) else None
        if k == "size":
            shape = at.shapes.get(env.get("\0" + e[1], e[1]))
            return math.prod(shape) if shape is not None else None
        if k == "ndim":
            shape = at.shapes.get(env.get("\0" + e[1], e[1]))
            return len(shape) if shape is not None else None
        if k == "u":
            v = _value(e[2], env, at)
            if v is None:
                return None
            return -v if e[1] == "neg" else (not v) if e[1] == "not" else ~int(v)
        if k == "b":
            a, b = _value(e[2], env, at), _value(e[3], env, at)
            return None if a is None or b is None else _BINARY[e[1]](a, b)
        if k == "sel":
            c = _value(e[1], env, at)
            return None if c is None else _value(e[2] if c else e[3], env, at)
        if k == "cast":
            v = _value(e[2], env, at)
            return int(v) if v is not None and e[1] else v
        if k == "call":
            return _call(e[1], [_value(a, env, at) for a in e[2]], at)
    except (ArithmeticError, TypeError, ValueError, KeyError, IndexError):
        return None
    return None  # "?" (data) and function results


def _call(name: str, args: List, at: _Launch):
    if name == "thread_id":
        return at.tid
    if name == "num_threads":
        return at.team
    if name in ("tile_id", "num_tiles"):
        axis = args[0] if args else 0
        if axis is None or not 0 <= axis < 3:
            return None
        return 0 if name == "tile_id" else at.tiles[axis]
    if any(a is None for a in args) or not args:
        return None
    return min(args) if name == "min" else max(args) if name == "max" else abs(args[0])


def _trips(start, stop, step) -> Optional[int]:
    if start is None or stop is None or step is None or step == 0:
        return None
    try:
        n = math.ceil((stop - start) / step)
    except (TypeError, ValueError, OverflowError):
        return None
    return max(0, min(int(n), _MAX_TRIPS))


_RETURN, _BREAK = "return", "break"


def _work(body: List, env: Dict, at: _Launch) -> Tuple[float, Optional[str]]:
    """(operations one thread executes running ``body``, ``_RETURN``/``_BREAK`` if it leaves that way
    for sure); ``env`` is updated as it goes."""
    total = 0.0
    for st in body:
        k = st[0]
        if k == "set":
            env[st[1]] = _value(st[2], env, at)
            total += st[3] + _calls_work(st[4], env, at)
        elif k == "op":
            total += st[1] + _calls_work(st[2], env, at)
        elif k == "ret":
            return total + st[1] + _calls_work(st[2], env, at), _RETURN
        elif k == "break":
            return total, _BREAK
        elif k == "for":
            start, stop, step = (_value(x, env, at) for x in st[2:5])
            n = _trips(start, stop, step)
            if n is None:
                n = UNKNOWN_TRIPS
                env[st[1]] = None
            elif n == 0:
                continue
            else:
                env[st[1]] = start + ((n - 1) // 2) * step  # the middle iteration stands for all
            total += n * (1 + _work(st[5], env, at)[0])  # a break or return inside: counted as if not taken
        elif k == "while":
            w, left = _while(st, env, at)
            total += w
            if left == _RETURN:
                return total, _RETURN
        elif k == "if":
            cond = _value(st[1], env, at)
            total += st[2] + _calls_work(st[3], env, at)
            if cond is None:  # the heavier branch; it leaves only if both do, the same way
                (a, la), (b, lb) = _work(st[4], dict(env), at), _work(st[5], env, at)
                total += max(a, b)
                if la is not None and la == lb:
                    return total, la
            else:
                w, left = _work(st[4] if cond else st[5], env, at)
                total += w
                if left is not None:
                    return total, left
    return total, None


def _while(st: List, env: Dict, at: _Launch) -> Tuple[float, Optional[str]]:
    """A ``while`` loop followed iteration by iteration while its condition can be evaluated
    (``WHILE_STEPS`` at most, ``STEP_BUDGET`` over the whole estimate), else ``UNKNOWN_TRIPS``
    iterations of its body."""
    cond, cost, calls, body = st[1:5]
    total = 0.0
    for step in range(WHILE_STEPS):
        c = _value(cond, env, at) if at.steps > 0 else None
        at.steps -= 1
        total += cost + _calls_work(calls, env, at)
        if c is None:
            if step == 0:
                return total + UNKNOWN_TRIPS * (1 + cost + _work(body, env, at)[0]), None
            return total, None
        if not c:
            return total, None
        w, left = _work(body, env, at)
        total += 1 + w
        if left is not None:
            return total, (left if left == _RETURN else None)
    return total, None


def _calls_work(calls: List, env: Dict, at: _Launch) -> float:
    total = 0.0
    for call in calls:
        fn = at.funcs.get(call[1])
        if fn is None or at.depth > 8:
            continue
        inner: Dict = {}
        for (kind, name), arg in zip(fn["params"], call[2]):
            if kind == "t":
                inner["\0" + name] = env.get("\0" + arg[1], arg[1]) if arg[0] == "t" else None
            else:
                inner[name] = _value(arg, env, at)
        at.depth += 1
        total += _work(fn["body"], inner, at)[0]
        at.depth -= 1
    return total


def estimate(program: Program, shapes: Dict[str, Tuple[int, ...]], scalars: Dict[str, Any],
             grid, team: int) -> float:
    """Operations a launch executes over all its threads: ``shapes`` by tensor name, ``scalars`` by
    parameter name (those ``program["reads"]`` lists are enough; a ``dsl.Vec`` as a tuple), ``grid`` an int or (gx, gy, gz)."""
    tiles = (grid, 1, 1) if isinstance(grid, int) else tuple(grid)
    teams = tiles[0] * tiles[1] * tiles[2]
    if teams <= 0 or team <= 0:
        return 0.0
    base = dict(program.get("consts", {}))
    base.update(scalars)
    per_thread = []
    for tid in sorted({0, team - 1}):
        at = _Launch(shapes, tid, team, tiles, program.get("funcs", {}))
        per_thread.append(_work(program["body"], dict(base), at)[0])
    return sum(per_thread) / len(per_thread) * team * teams
