"""The per-launch error record: debug mode's bounds checks, and the always-on run-time argument
checks (a ``range`` step of 0, a ``dsl.split`` align below 1), and the errors made from it.

Compiled code cannot raise reliably from parallel regions (numba's prange/OpenMP) or at all
(OpenCL), so a checked access that fails writes what went wrong into a small int64 array
passed as a hidden argument, and does not touch memory.  The first failing thread wins a
compare-and-swap on slot 0; later failures leave the record alone.  Loops stop at their next
back-edge, teams at their next region boundary; after the launch the launcher turns the
record into a ``KernelIndexError``.

Which access failed is a *site*: an index into the table the code generator builds while it
emits checks (tensor, load/store/atomic, flat or per-axis, source location).  The table is a
pure function of the kernel IR, so a launcher loaded from the disk cache rebuilds the same one.

Argument checks use the same record (kind 'range_step' or 'split_align', the refused value in
INDEX): a kernel gets the record only when it has such a check (``needs_record``) or is a debug
build, so a kernel whose steps and aligns are all known at compile time is compiled exactly as
before.  A thread that fails one records it and goes on with an empty loop or share; the
launch then raises ``KernelValueError``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

import numpy as np

from dsl.lang import builtins as B
from dsl.lang import ir
from dsl.lang.errors import UNKNOWN, LaunchError, SourceLoc
from dsl.lang.errors import KernelIndexError, KernelValueError  # noqa: F401  (every error: dsl/lang/errors.py)

# record layout (int64 slots)
STATE, SITE, AXIS, TID, TILE, INDEX = 0, 1, 2, 3, 4, 5
MAX_RANK = 8                  # index components kept for the message (higher ranks: the failing axis only)
SHAPE = INDEX + MAX_RANK      # the extents checked against: a @dsl.func's tensor parameter has no other shape
RECORD_LEN = SHAPE + MAX_RANK + 3


@dataclass(frozen=True)
class Site:
    tensor: str
    kind: str        # 'load' | 'store' | 'atomic_add'
    flat: bool       # t.flat[i] (checked against the size) rather than t[i, j, ...]
    rank: int        # number of index components
    loc: SourceLoc
    func: str = ""   # the @dsl.func whose tensor parameter ``tensor`` is ("" in the kernel body)


class Sites:
    """The table a code generator fills while emitting checks; ``add`` returns the site id."""

    def __init__(self) -> None:
        self.table: List[Site] = []

    def add(self, tensor: str, kind: str, flat: bool, rank: int, loc, func: str = "") -> int:
        self.table.append(Site(tensor, kind, flat, rank, loc if loc is not None else UNKNOWN, func))
        return len(self.table) - 1


VALUE_KINDS = {"range_step": ("range()", "step", "a step other than 0"),
               "split_align": ("dsl.split(n, align)", "align", "an integer >= 1")}


def step_checked(step: ir.Expr) -> bool:
    """Whether a ``range`` step may be 0 at run time: not a constant and not a builtin that is
    positive by definition (``dsl.num_threads()``).  Only such loops pay for a check."""
    while isinstance(step, ir.Cast):
        step = step.value
    if isinstance(step, ir.Const):
        return False
    return not (isinstance(step, ir.Call) and step.name in B.BUILTINS and B.BUILTINS[step.name].positive)


def has_value_checks(stmts) -> bool:
    return any(isinstance(n, ir.Require) or (isinstance(n, ir.For) and step_checked(n.step))
               for n in ir.walk(list(stmts)))


def needs_record(kernel: ir.Kernel, debug: bool) -> bool:
    """Whether launches of ``kernel`` carry the error record (a hidden argument)."""
    return debug or has_value_checks(kernel.body) or any(has_value_checks(f.body) for f in kernel.funcs)


def record_funcs(kernel: ir.Kernel, debug: bool) -> set:
    """The @dsl.funcs that take the record: with a check of their own, or calling one that takes
    it, or (debug mode) with a tensor parameter."""
    need = {f.name for f in kernel.funcs if (debug and f.tensors) or has_value_checks(f.body)}
    grew = True
    while grew:
        grew = False
        for f in kernel.funcs:
            if f.name not in need and any(isinstance(n, ir.FuncCall) and n.func in need for n in ir.walk(list(f.body))):
                need.add(f.name)
                grew = True
    return need


def value_site(sites: "Sites", what: str, loc, func: str = "") -> int:
    """The site of a run-time argument check (``what``: a key of VALUE_KINDS)."""
    return sites.add("", what, False, 1, loc, func)


def new_record() -> np.ndarray:
    return np.zeros(RECORD_LEN, np.int64)


def shape_of(kernel: ir.Kernel, name: str, args: Sequence) -> tuple:
    """The run-time shape of buffer ``name`` in this launch (tensors from ``args``)."""
    for p, a in zip(kernel.params, args):
        if p.name == name:
            return tuple(int(n) for n in np.shape(a)) if isinstance(p, ir.TensorParam) else (p.length,)
    for s in kernel.scratch + kernel.arrays:
        if s.name == name:
            return tuple(s.shape)
    return ()


def error(record: np.ndarray, sites: Sequence[Site], kernel: ir.Kernel, args: Sequence) -> KernelIndexError:
    """The exception describing a failed record (slot 0 set)."""
    site = sites[int(record[SITE])]
    if site.kind in VALUE_KINDS:
        return value_error(record, site, kernel)
    axis = int(record[AXIS])
    n = min(site.rank, MAX_RANK)
    index = tuple(int(v) for v in record[INDEX:INDEX + n])
    if site.func:  # a @dsl.func's parameter: whatever the call passed, with the extents the check used
        shape = tuple(int(v) for v in record[SHAPE:SHAPE + n])
        what = f"@dsl.func {site.func!r} tensor parameter"
        if site.flat:
            shape = (shape[0],) if shape else ()
    else:
        shape = shape_of(kernel, site.tensor, args)
        buf = kernel.buffer(site.tensor)
        what = ("scratch" if isinstance(buf, ir.Scratch) else "Vec parameter" if isinstance(buf, ir.VecParam)
                else "dsl.local array" if isinstance(buf, ir.LocalArray) else "tensor")
    size = int(np.prod(shape)) if shape else 1
    if site.flat:
        msg = (f"index {index[0]} out of bounds for {site.tensor}.flat: {what} {site.tensor!r} has shape "
               f"{shape} ({size} elements); accepted: 0 <= i < {size}")
    else:
        shown = index[0] if site.rank == 1 else index
        if site.rank > MAX_RANK:
            shown = f"(... {index[axis] if axis < MAX_RANK else '?'} at axis {axis} ...)"
        msg = f"index {shown} out of bounds for {what} {site.tensor!r} of shape {shape}"
        if site.rank > 1 and 0 <= axis < len(shape) and axis < n:
            msg += f" (axis {axis}: {index[axis]} not in 0..{shape[axis] - 1})"
    tid, tile = int(record[TID]), int(record[TILE])
    where = ""
    if site.loc is not UNKNOWN and site.loc.line > 0:
        where = f" at {site.loc}"
        text = site.loc.source_line().strip()
        if text:
            where += f"\n    {text}"
    team = f"thread {tid}" + (f" of tile {tile}" if tile else "")
    err = KernelIndexError(f"{msg}: {site.kind} in kernel {kernel.name!r}, {team}{where}")
    err.tensor, err.index, err.shape, err.loc = site.tensor, index, shape, site.loc
    err.thread_id, err.tile_id = tid, tile
    return err


def _where(site: Site) -> str:
    if site.loc is UNKNOWN or site.loc.line <= 0:
        return ""
    text = site.loc.source_line().strip()
    return f" at {site.loc}" + (f"\n    {text}" if text else "")


def value_error(record: np.ndarray, site: Site, kernel: ir.Kernel) -> KernelValueError:
    """A refused run-time argument: what, the value, the kernel (and @dsl.func), thread and place."""
    call, arg, accepted = VALUE_KINDS[site.kind]
    value, tid, tile = int(record[INDEX]), int(record[TID]), int(record[TILE])
    inside = f"@dsl.func {site.func!r} called from kernel {kernel.name!r}" if site.func else f"kernel {kernel.name!r}"
    team = f"thread {tid}" + (f" of tile {tile}" if tile else "")
    return make_value_error(f"{call}: {arg} is {value} (accepted: {accepted}) in {inside}, {team}{_where(site)}",
                            site.kind, value, site.loc, tid, tile)


def make_value_error(message: str, what: str, value: int, loc, tid: int, tile: int) -> KernelValueError:
    err = KernelValueError(message)
    err.what, err.value, err.loc, err.thread_id, err.tile_id = what, value, loc, tid, tile
    return err
