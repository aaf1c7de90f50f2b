"""Loop fission of the gradient's accumulations, so that the reversed loops vectorize.

A reversed loop adds terms into adjoints of values computed before it (``adj_s = adj_s + t``,
the gradient of a row sum or maximum).  Without reassociation (strict math) LLVM keeps such a
loop-carried float sum scalar, and with it every ``exp`` of the loop: about 20x dearer than the
vector ``exp`` of a loop that carries no sum.  This pass splits each such innermost loop into
chunks of ``CHUNK`` iterations: the first loop of a chunk runs the body and stores each term in a
per-thread array (one array per accumulation statement), with no carried sum, so it vectorizes;
the second adds the stored terms into the adjoints, one at a time, in the original order.

The result is bitwise the same as the unsplit loop: every adjoint receives the same terms in
the same order.  A term under a branch not taken is stored as ``-0.0``, the exact identity of
IEEE addition (``a + -0.0 == a`` for every ``a``, ``+0.0`` and ``-0.0`` included).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from dsl.lang import ir
from dsl.lang import types as T

CHUNK = 64  # iterations per chunk: the stored terms of a chunk stay in L1

_PLAIN = (ir.Assign, ir.Store, ir.AtomicAdd, ir.ExprStmt, ir.Log)


def split_accumulations(body: Sequence[ir.Stmt], types: Dict[str, object],
                        fresh: Callable[[str, object], str]) -> Tuple[Tuple[ir.Stmt, ...], List[ir.LocalArray]]:
    """(``body`` with its accumulating innermost loops split, the per-thread arrays they use).
    ``types`` gives each local's type; ``fresh(base, type)`` makes a new local name."""
    pool = _Pool(fresh)
    out = _block(tuple(body), types, pool)
    if not pool.arrays:
        return tuple(body), []
    decls = tuple(ir.LocalInit(a.name) for a in pool.arrays)
    return decls + out, list(pool.arrays)


class _Pool:
    """The per-thread term arrays, shared by every split loop (a loop uses them only within itself)."""

    def __init__(self, fresh):
        self.fresh = fresh
        self.arrays: List[ir.LocalArray] = []

    def get(self, k: int, dtype: T.DType) -> str:
        """The ``k``-th array of ``dtype`` (made when missing)."""
        same = [a.name for a in self.arrays if a.dtype == dtype]
        if k < len(same):
            return same[k]
        name = self.fresh("terms", dtype)
        self.arrays.append(ir.LocalArray(name, dtype, (CHUNK,)))
        return name


def _block(stmts: Tuple[ir.Stmt, ...], types, pool: _Pool) -> Tuple[ir.Stmt, ...]:
    out: List[ir.Stmt] = []
    for s in stmts:
        if isinstance(s, ir.For):
            split = _split(s, types, pool)
            out.extend(split if split is not None else [replace(s, body=_block(s.body, types, pool))])
        elif isinstance(s, ir.If):
            out.append(replace(s, body=_block(s.body, types, pool), orelse=_block(s.orelse, types, pool)))
        elif isinstance(s, ir.While):
            out.append(replace(s, body=_block(s.body, types, pool)))
        else:
            out.append(s)
    return tuple(out)


def _names(node) -> List[str]:
    return [n.name for n in ir.walk(node) if isinstance(n, ir.Name)]


def _straight(stmts) -> bool:
    """Only plain statements and branches: no nested loop, no early exit."""
    return all(isinstance(s, _PLAIN) or (isinstance(s, ir.If) and _straight(s.body) and _straight(s.orelse))
               for s in stmts)


def _accumulations(stmts, conditional: bool, found: List[Tuple[ir.Assign, bool]]) -> None:
    for s in stmts:
        if isinstance(s, ir.Assign) and isinstance(s.value, ir.Binary) and s.value.op == "add" \
                and isinstance(s.value.left, ir.Name) and s.value.left.name == s.name:
            found.append((s, conditional))
        elif isinstance(s, ir.If):
            _accumulations(s.body, True, found)
            _accumulations(s.orelse, True, found)


def _accumulators(f: ir.For, types) -> List[Tuple[ir.Assign, bool]]:
    """The statements ``a = a + t`` of ``f``'s body whose ``a`` is an f32/f64 scalar the body touches
    nowhere else (so ``a`` is carried by the loop and only summed into), with whether each is
    under a branch."""
    found: List[Tuple[ir.Assign, bool]] = []
    _accumulations(f.body, False, found)
    candidates = {s.name for s, _ in found if types.get(s.name) in (T.f32, T.f64)}
    own = {id(s) for s, _ in found}
    if len(own) != len(found):  # one statement object in two places: its slot would be ambiguous
        return []
    touched: Set[str] = set()
    _touched(f.body, own, touched)
    return [(s, c) for s, c in found if s.name in candidates and s.name not in touched]


def _touched(stmts, own: Set[int], out: Set[str]) -> None:
    """Every local the statements read or assign, except an accumulation's own ``a = a + ...``."""
    for s in stmts:
        if id(s) in own:
            out.update(_names(s.value.right))
        elif isinstance(s, ir.If):
            out.update(_names(s.cond))
            _touched(s.body, own, out)
            _touched(s.orelse, own, out)
        else:
            out.update(_names(s))
            if isinstance(s, ir.Assign):
                out.add(s.name)


def _split(f: ir.For, types, pool: _Pool) -> Optional[List[ir.Stmt]]:
    if not (isinstance(f.step, ir.Const) and f.step.value == 1 and _straight(f.body)):
        return None
    acc = _accumulators(f, types)
    if not acc:
        return None
    it = f.step.type
    lo, hi, c0, c1, k = (pool.fresh(b, it) for b in (f"{f.var}_lo", f"{f.var}_hi", f"{f.var}_chunk",
                                                     f"{f.var}_end", f"{f.var}_k"))
    slot = ir.Binary("sub", ir.Name(f.var, type=it), ir.Name(c0, type=it), type=it)
    per_dtype: Dict[T.DType, int] = {}
    buffers: Dict[int, str] = {}
    for s, _ in acc:
        t = types[s.name]
        buffers[id(s)] = pool.get(per_dtype.get(t, 0), t)
        per_dtype[t] = per_dtype.get(t, 0) + 1
    clear = [ir.Store(buffers[id(s)], (slot,), ir.Const(-0.0, type=types[s.name]), loc=s.loc)
             for s, conditional in acc if conditional]
    body = tuple(clear) + _store_terms(f.body, buffers, slot)
    add = tuple(ir.Assign(s.name, ir.Binary("add", ir.Name(s.name, type=types[s.name]),
                                            ir.Load(buffers[id(s)], (ir.Name(k, type=it),), type=types[s.name]),
                                            type=types[s.name]), loc=s.loc)
                for s, _ in acc)
    chunk = ir.Const(CHUNK, type=it)
    end = ir.Call("min", (ir.Binary("add", ir.Name(c0, type=it), chunk, type=it), ir.Name(hi, type=it)), type=it)
    count = ir.Binary("sub", ir.Name(c1, type=it), ir.Name(c0, type=it), type=it)
    zero = ir.Const(0, type=it)
    return [
        ir.Assign(lo, f.start, loc=f.loc),
        ir.Assign(hi, f.stop, loc=f.loc),
        ir.For(c0, ir.Name(lo, type=it), ir.Name(hi, type=it), chunk, (
            ir.Assign(c1, end, loc=f.loc),
            replace(f, start=ir.Name(c0, type=it), stop=ir.Name(c1, type=it), body=body),
            ir.For(k, zero, count, f.step, add, loc=f.loc),
        ), loc=f.loc),
    ]


def _store_terms(stmts, buffers: Dict[int, str], slot: ir.Expr) -> Tuple[ir.Stmt, ...]:
    out: List[ir.Stmt] = []
    for s in stmts:
        if id(s) in buffers:
            out.append(ir.Store(buffers[id(s)], (slot,), s.value.right, loc=s.loc))
        elif isinstance(s, ir.If):
            out.append(replace(s, body=_store_terms(s.body, buffers, slot),
                               orelse=_store_terms(s.orelse, buffers, slot)))
        else:
            out.append(s)
    return tuple(out)
