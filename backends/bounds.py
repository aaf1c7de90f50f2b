"""Debug mode's bounds checks: the per-launch error record and the IndexError made from it.

Compiled code cannot raise reliably from parallel regions (numba's prange/OpenMP) or at all
(OpenCL), so a checked access that fails writes what went wrong into a small int64 array
passed as a hidden argument, and does not touch memory.  The first failing thread wins a
compare-and-swap on slot 0; later failures leave the record alone.  Loops stop at their next
back-edge, teams at their next region boundary; after the launch the launcher turns the
record into a ``KernelIndexError``.

Which access failed is a *site*: an index into the table the code generator builds while it
emits checks (tensor, load/store/atomic, flat or per-axis, source location).  The table is a
pure function of the kernel IR, so a launcher loaded from the disk cache rebuilds the same one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

import numpy as np

from dsl.lang import ir
from dsl.lang.errors import UNKNOWN, LaunchError, SourceLoc
from dsl.lang.errors import KernelIndexError  # noqa: F401  (every error: dsl/lang/errors.py)

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
