"""ops/work_split.py: the grid a team kernel's items are spread over (few workers, even cores)."""
import pytest

import dsl
from ops import work_split
from ops.work_split import _best_grid


def busiest_core(items, grid, team, cores):
    """Items the first (busiest) core runs: ⌈workers / cores⌉ workers of ⌈items / workers⌉ items."""
    workers = grid * team
    return min(items, -(-workers // cores) * -(-items // workers))


@pytest.mark.parametrize("items, fmas", [(212, 448), (416, 14336), (53, 448), (4000, 448), (7, 100)])
@pytest.mark.parametrize("cores", [1, 2, 8])
def test_few_workers_and_even_cores(items, fmas, cores):
    grid = _best_grid(items, fmas, 4, cores, 64)
    assert 1 <= grid <= 64
    if cores <= 4:  # a team of 4 already covers the cores: one team, not one worker per item
        assert grid == 1
    else:
        assert grid * 4 >= cores or items < cores  # every core gets a worker
    # no other grid leaves the busiest core much less to do
    best = min(busiest_core(items, g, 4, cores) for g in range(1, 65))
    assert busiest_core(items, grid, 4, cores) <= best * 1.1 + 1


def test_starts_weigh_against_tiny_items():
    """Items far cheaper than a worker's start: the fewest workers that keep the cores busy."""
    assert _best_grid(4096, 1, 4, 8, 64) == 2
    # items far dearer than a start: the grid that splits them most evenly (13 items on 8 cores:
    # 2 teams leave a core 2 items, as any grid must)
    assert busiest_core(13, _best_grid(13, 10 ** 6, 4, 8, 64), 4, 8) == 2


def test_worker_grid_reads_the_targets_cores():
    cores = max(1, dsl.target("numba").compute_units or 1)
    assert work_split.worker_grid(212, 448, 4, "numba") == _best_grid(212, 448, 4, cores, 64)
