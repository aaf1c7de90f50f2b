"""The gradient of ``m = max(m, e)`` (or ``min``) found by a search loop that vectorizes.

The adjoint gives the gradient to the first ``e`` equal to the final ``m``; written directly, the
reversed loop carries a flag (``if not taken and e == m: ...; taken = True``), which keeps it
scalar: a whole extra scalar pass over the row, the larger part of a fast-math softmax backward.
When such a loop holds nothing but the replayed values and that branch, this pass rewrites it as

    if not taken:
        first = BIG
        for j in range(...):        # an integer min reduction: vectorizes under strict math too
            <replayed values>
            first = min(first, j if e == m else BIG)    (as dsl.where)
        if first != BIG:
            j = first
            <replayed values>
            <the branch's body, taken = True included>

which gives the gradient to the same element, so the result is the same bit for bit.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, List, Optional, Tuple

from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.adjoint_prepare import rebuild, rename

_BIG = 2 ** 62  # no index reaches it


def search_first_extremes(body, fresh: Callable[[str, object], str]) -> Tuple[ir.Stmt, ...]:
    """``body`` with every flag-carrying extreme loop rewritten as a search (see the module doc)."""
    out: List[ir.Stmt] = []
    for s in body:
        if isinstance(s, ir.For):
            found = _rewrite(s, fresh)
            out.extend(found if found is not None else [replace(s, body=search_first_extremes(s.body, fresh))])
        elif isinstance(s, ir.If):
            out.append(replace(s, body=search_first_extremes(s.body, fresh),
                               orelse=search_first_extremes(s.orelse, fresh)))
        elif isinstance(s, ir.While):
            out.append(replace(s, body=search_first_extremes(s.body, fresh)))
        else:
            out.append(s)
    return tuple(out)


def _flag_branch(s) -> Optional[Tuple[str, ir.Expr]]:
    """(flag, test) when ``s`` is ``if (not flag) and test: ...; flag = True``."""
    if not (isinstance(s, ir.If) and not s.orelse and s.body and isinstance(s.cond, ir.Logical)
            and s.cond.op == "and"):
        return None
    neg, test = s.cond.left, s.cond.right
    last = s.body[-1]
    if not (isinstance(neg, ir.Unary) and neg.op == "not" and isinstance(neg.operand, ir.Name)):
        return None
    flag = neg.operand.name
    if not (isinstance(last, ir.Assign) and last.name == flag and isinstance(last.value, ir.Const)
            and last.value.value is True):
        return None
    if any(isinstance(n, (ir.For, ir.While, ir.Break, ir.Continue, ir.Return, ir.AtomicFetchAdd))
           for n in ir.walk(s.body)):
        return None
    return flag, test


def _pure(s) -> bool:
    return isinstance(s, ir.Assign) and not any(isinstance(n, (ir.AtomicFetchAdd, ir.FuncCall))
                                                for n in ir.walk(s.value))


def _rewrite(f: ir.For, fresh) -> Optional[List[ir.Stmt]]:
    if not (f.body and isinstance(f.step, ir.Const) and f.step.value > 0):
        return None
    *replayed, branch = f.body
    found = _flag_branch(branch)
    if found is None or not all(_pure(s) for s in replayed):
        return None
    flag, test = found
    if any(isinstance(n, ir.Name) and n.name == flag for s in replayed for n in ir.walk(s)) \
            or any(s.name in (flag, f.var) for s in replayed) \
            or any(isinstance(n, ir.Name) and n.name == flag for n in ir.walk(test)):
        return None
    it = f.step.type
    # the search and the one taken iteration use names of their own: values of the loop's body
    # (and its variable) that code after the loop may read keep what the whole loop left there
    names = {a.name: fresh(a.name, a.value.type) for a in replayed}
    names[f.var] = var = fresh(f.var, it)
    replayed = list(rename(replayed, names, {}))
    test = rebuild(test, lambda n: replace(n, name=names[n.name]) if isinstance(n, ir.Name) and n.name in names
                   else n)
    first = fresh(f"first_{f.var}", it)
    big = ir.Const(_BIG, type=it)
    here = ir.Select(test, ir.Name(var, type=it), big, type=it)
    search = replace(f, var=var, body=tuple(replayed) + (
        ir.Assign(first, ir.Call("min", (ir.Name(first, type=it), here), type=it), loc=branch.loc),))
    take = (ir.Assign(var, ir.Name(first, type=it), loc=f.loc),) + tuple(replayed) \
        + rename(branch.body, names, {})
    found_one = ir.Compare("ne", ir.Name(first, type=it), big, type=T.bool_)
    return [ir.If(ir.Unary("not", ir.Name(flag, type=T.bool_), type=T.bool_), (
        ir.Assign(first, big, loc=f.loc),
        search,
        ir.If(found_one, take, (), loc=branch.loc),
    ), (), loc=f.loc)]
