"""Launch grids: what a grid of teams is, for every layer.

A kernel launches ``gx * gy * gz`` teams.  Team ``flat`` (the order the teams are numbered in,
axis 0 fastest, as OpenCL's group ids and CUDA's blockIdx) sits at
``(flat % gx, flat // gx % gy, flat // (gx * gy))``: that is ``dsl.tile_id(axis)``, and
``dsl.num_tiles(axis)`` is the grid's extent along ``axis``.  A launcher receives a ``Grid``: an
int for a 1-d grid (the common launch stays an int all the way down) or ``(gx, gy, gz)``.
"""
from __future__ import annotations

from typing import Tuple, Union

AXES = (0, 1, 2)
"""The axes ``dsl.tile_id(axis)`` and ``dsl.num_tiles(axis)`` take; axis 0 is the default."""

Grid = Union[int, Tuple[int, int, int]]


def shape(grid: Grid) -> Tuple[int, int, int]:
    """``(gx, gy, gz)`` of a grid: ``n`` is ``(n, 1, 1)``."""
    return grid if isinstance(grid, tuple) else (grid, 1, 1)


def size(grid: Grid) -> int:
    """Teams in a grid: ``gx * gy * gz``."""
    if isinstance(grid, tuple):
        gx, gy, gz = grid
        return gx * gy * gz
    return grid


def tile_coords(flat: int, grid_shape: Tuple[int, int, int]) -> Tuple[int, int, int]:
    """``(tile_id(0), tile_id(1), tile_id(2))`` of team ``flat``."""
    gx, gy, _ = grid_shape
    return flat % gx, flat // gx % gy, flat // (gx * gy)
