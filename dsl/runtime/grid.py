"""Launch grids as users write them, checked and put in the form launchers take.

A user writes ``grid=n``, ``grid=(gx, gy)`` or ``grid=(gx, gy, gz)`` (or a callable returning one
of these).  Launchers get a ``dsl.lang.grid.Grid``: an int for a 1-d grid, so the common launch
stays an int all the way down, and ``(gx, gy, gz)`` only when a second or third axis has more
than one team.  A grid with no team at all is ``0``: nothing runs.
"""
from __future__ import annotations

import numpy as np

from dsl.lang.grid import AXES, Grid, size

MAX_AXES = len(AXES)  # dsl.tile_id(axis) takes axis 0, 1 or 2

ACCEPTED = ("a non-negative int, a tuple of 2 or 3 of them such as grid=(gx, gy), or a callable "
            "returning one of these")


def normalize(kname: str, grid) -> Grid:
    """``grid`` as a launcher takes it; a ValueError naming kernel ``kname`` and what is accepted."""
    if _is_int(grid):
        if grid < 0:
            raise ValueError(f"{kname}: grid={grid} is negative; grid must be {ACCEPTED}")
        return int(grid)
    if not isinstance(grid, (tuple, list)):
        raise ValueError(f"{kname}: grid must be {ACCEPTED}, got {grid!r}")
    if not 1 <= len(grid) <= MAX_AXES:
        raise ValueError(f"{kname}: grid={tuple(grid)!r} has {len(grid)} axes; a grid has 1 to {MAX_AXES} "
                         f"(gx, gy, gz): grid must be {ACCEPTED}")
    for axis, n in enumerate(grid):
        if not _is_int(n) or n < 0:
            what = "negative" if _is_int(n) else f"a {type(n).__name__}, not an int"
            raise ValueError(f"{kname}: grid={tuple(grid)!r}: axis {axis} ({n!r}) is {what}; "
                             f"grid must be {ACCEPTED}")
    gx, gy, gz = (tuple(int(n) for n in grid) + (1, 1))[:MAX_AXES]
    if gx * gy * gz == 0:
        return 0
    return gx if gy == gz == 1 else (gx, gy, gz)


def describe(grid: Grid) -> str:
    """``8`` or ``(2, 3, 1) = 6 teams``, for messages."""
    return f"{grid!r} = {size(grid)} teams" if isinstance(grid, tuple) else str(grid)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
