"""n-d launch grids: grid=(gx, gy[, gz]) with dsl.tile_id(axis) / dsl.num_tiles(axis), on every
backend, against numpy.

Axis 0 varies fastest: team ``flat`` of a ``(gx, gy, gz)`` grid sits at
``(flat % gx, flat // gx % gy, flat // (gx * gy))``.  The kernels are module-level and few, so
each backend compiles each of them once for the whole file.
"""
import numpy as np
import pytest

import dsl
from dsl import In, Out, f32, i32, i64

SRC = open(__file__).read().splitlines()
THREADS = 2
TILE = 4  # the tiled kernels' square tile: TILE threads, one row or column each


def line_of(marker: str) -> int:
    hits = [k + 1 for k, line in enumerate(SRC) if line.rstrip().endswith("# " + marker)]
    assert len(hits) == 1, marker
    return hits[0]


def grid_shape(grid):
    return (grid, 1, 1) if isinstance(grid, int) else tuple(grid) + (1,) * (3 - len(grid))


# --------------------------------------------------------------------------- the kernels

@dsl.func
def flat_tile():
    """The flat team index, from inside a @dsl.func (team queries reach functions too)."""
    return dsl.tile_id(0) + dsl.num_tiles(0) * (dsl.tile_id(1) + dsl.num_tiles(1) * dsl.tile_id(2))


@dsl.kernel(threads=THREADS)
def grid_facts(out: Out[i64, 2]):
    """One row per (team, thread): tile_id(0..2), num_tiles(0..2), thread_id, tile_id()."""
    row = flat_tile() * dsl.num_threads() + dsl.thread_id()
    out[row, 0] = dsl.tile_id(0)
    out[row, 1] = dsl.tile_id(1)
    out[row, 2] = dsl.tile_id(2)
    for axis in dsl.static_range(3):  # a static_range variable is a compile-time axis
        out[row, 3 + axis] = dsl.num_tiles(axis)
    out[row, 6] = dsl.thread_id()
    out[row, 7] = dsl.tile_id()


def expected_facts(grid) -> np.ndarray:
    gx, gy, gz = grid_shape(grid)
    flat = np.arange(gx * gy * gz).repeat(THREADS)
    tx, ty, tz = flat % gx, flat // gx % gy, flat // (gx * gy)
    n = flat.size
    return np.stack([tx, ty, tz, np.full(n, gx), np.full(n, gy), np.full(n, gz),
                     np.tile(np.arange(THREADS), n // THREADS), tx], axis=1)


@dsl.kernel(threads=TILE)
def tiled_transpose(x: In[f32, 2], y: Out[f32, 2]):
    """y = x.T through a TILE x TILE scratch tile: team (tile_id(0), tile_id(1)) owns the tile at
    column block tile_id(0), row block tile_id(1) of x; thread t loads row t, then writes column t."""
    tile = dsl.scratch((TILE, TILE), f32)
    t = dsl.thread_id()
    r0 = dsl.tile_id(1) * TILE
    c0 = dsl.tile_id(0) * TILE
    for j in range(TILE):
        tile[t, j] = x[r0 + t, c0 + j]
    dsl.sync()
    for j in range(TILE):
        y[c0 + t, r0 + j] = tile[j, t]


@dsl.kernel(threads=TILE)
def tiled_add(a: In[f32, 3], b: In[f32, 3], c: Out[f32, 3]):
    """c = a + b, team (i, j, k) adding the TILE x TILE block (i, j) of plane k; thread t a row."""
    r = dsl.tile_id(1) * TILE + dsl.thread_id()
    c0 = dsl.tile_id(0) * TILE
    k = dsl.tile_id(2)
    for j in range(c0, c0 + TILE):
        c[k, r, j] = a[k, r, j] + b[k, r, j]


@dsl.kernel(threads=3)
def owners(owner: Out[i32]):
    """owner[i] = the worker (flat team * threads + thread) whose dsl.split(grid=True) share holds i."""
    lo, hi = dsl.split(owner.size, grid=True)
    worker = flat_tile() * dsl.num_threads() + dsl.thread_id()
    for i in range(lo, hi):
        owner[i] = i32(worker)


def expected_owners(n: int, workers: int) -> np.ndarray:
    chunk = -(-n // workers)
    return (np.arange(n) // chunk).astype(np.int32)


# --------------------------------------------------------------------------- semantics

@pytest.mark.parametrize("grid", [5, (3, 2), (2, 3, 2), (5, 4, 3)], ids=str)
def test_tile_ids_and_counts_per_axis(backend, grid):
    # (5, 4, 3): 120 logical threads, numba's parallel launch; the others its serial one
    want = expected_facts(grid)
    out = np.full(want.shape, -1, np.int64)
    grid_facts(out, grid=grid, backend=backend)
    np.testing.assert_array_equal(out, want)


def test_subscript_launch_with_a_tuple(backend):
    want = expected_facts((2, 3))
    out = np.full(want.shape, -1, np.int64)
    grid_facts[(2, 3)](out, backend=backend)
    np.testing.assert_array_equal(out, want)


def test_one_d_grid_as_a_tuple_is_the_int_grid(backend):
    want = expected_facts(4)
    for grid in ((4,), (4, 1), (4, 1, 1)):
        out = np.full(want.shape, -1, np.int64)
        grid_facts(out, grid=grid, backend=backend)
        np.testing.assert_array_equal(out, want)


def test_a_grid_without_teams_runs_nothing(backend):
    out = np.full((4, 8), -1, np.int64)
    for grid in ((2, 0), (0, 3, 2), (3, 2, 0)):
        grid_facts(out, grid=grid, backend=backend)
    assert (out == -1).all()


@pytest.mark.parametrize("rows, cols", [(8, 12), (24, 40)], ids=["serial", "parallel"])
def test_tiled_transpose_over_a_2d_grid(backend, rows, cols):
    # 24 x 40: 60 teams of 4 threads, numba's parallel launch of a kernel with sync()
    x = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
    y = np.full((cols, rows), np.nan, np.float32)
    tiled_transpose(x, y, grid=(cols // TILE, rows // TILE), backend=backend)
    np.testing.assert_array_equal(y, x.T)


def test_tiled_add_over_a_3d_grid_from_a_callable(backend):
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((3, 8, 12)).astype(np.float32) for _ in range(2))
    c = np.full_like(a, np.nan)

    def blocks(args):  # the launch's arguments by name -> (gx, gy, gz)
        planes, rows, cols = args["c"].shape
        return cols // TILE, rows // TILE, planes

    tiled_add(a, b, c, grid=blocks, backend=backend)
    np.testing.assert_array_equal(c, a + b)


# the same function as a kernel whose decorator gives the grid (one compile: the code is the same)
transpose_by_tiles = dsl.kernel(threads=TILE, grid=lambda args: (args["x"].shape[1] // TILE,
                                                                 args["x"].shape[0] // TILE))(tiled_transpose.fn)


def test_grid_callable_given_to_the_decorator(backend):
    x = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)
    y = np.zeros((12, 8), np.float32)
    transpose_by_tiles(x, y, backend=backend)
    np.testing.assert_array_equal(y, x.T)


@pytest.mark.parametrize("grid", [(2, 3), (3, 2, 2), 7], ids=str)
def test_split_over_the_whole_grid(backend, grid):
    n = 101
    owner = np.full(n, -1, np.int32)
    owners(owner, grid=grid, backend=backend)
    gx, gy, gz = grid_shape(grid)
    np.testing.assert_array_equal(owner, expected_owners(n, gx * gy * gz * 3))


# --------------------------------------------------------------------------- errors

def assert_compile_error_at(kernel, args, marker: str, col_text: str, *words):
    with pytest.raises(dsl.CompileError) as info:
        kernel(*args)
    text = str(info.value)
    line = line_of(marker)
    col = SRC[line - 1].index(col_text) + 1
    assert f"test_grid_nd.py:{line}:{col}: error:" in text, text
    for w in words:
        assert w in text, (w, text)


@dsl.kernel(threads=1)
def axis_three(out: Out[i64]):
    out[0] = dsl.tile_id(3)  # axis-three


@dsl.kernel(threads=1)
def axis_at_run_time(out: Out[i64], axis: i64):
    out[0] = dsl.num_tiles(axis)  # axis-run-time


@dsl.kernel(threads=1)
def axis_float(out: Out[i64]):
    out[0] = dsl.tile_id(1.0)  # axis-float


@dsl.kernel(threads=1)
def axis_const(out: Out[i64], axis: dsl.const[i64]):
    out[0] = dsl.num_tiles(axis)


def test_axis_out_of_range_is_a_compile_error(backend):
    out = np.zeros(1, np.int64)
    assert_compile_error_at(lambda o: axis_three(o, backend=backend), (out,), "axis-three", "3)",
                            "dsl.tile_id()", "0, 1 or 2", "got 3")


def test_axis_known_only_at_run_time_is_a_compile_error(backend):
    out = np.zeros(1, np.int64)
    assert_compile_error_at(lambda o: axis_at_run_time(o, 1, backend=backend), (out,), "axis-run-time", "axis)",
                            "dsl.num_tiles()", "0, 1 or 2", "known only at run time")


def test_float_axis_is_a_compile_error(backend):
    out = np.zeros(1, np.int64)
    assert_compile_error_at(lambda o: axis_float(o, backend=backend), (out,), "axis-float", "1.0)",
                            "dsl.tile_id()", "0, 1 or 2", "got 1.0")


def test_axis_from_a_const_parameter(backend):
    out = np.zeros(1, np.int64)
    axis_const(out, 2, grid=(2, 3, 4), backend=backend)
    assert out[0] == 4
    with pytest.raises(dsl.CompileError, match=r"dsl.num_tiles\(\) takes an integer literal 0, 1 or 2.*got 5"):
        axis_const(out, 5, backend=backend)


@pytest.mark.parametrize("grid, words", [
    ((2, -1), ["grid=(2, -1)", "axis 1 (-1) is negative"]),
    ((1, 2, 3, 4), ["grid=(1, 2, 3, 4) has 4 axes", "1 to 3"]),
    (-3, ["grid=-3 is negative"]),
    ((2.0, 3), ["axis 0 (2.0) is a float, not an int"]),
    ((2, True), ["axis 1 (True) is a bool, not an int"]),
    ("4", ["got '4'"]),
], ids=str)
def test_bad_grids_are_value_errors_naming_the_kernel(backend, grid, words):
    out = np.zeros((4, 8), np.int64)
    with pytest.raises(ValueError) as info:
        grid_facts(out, grid=grid, backend=backend)
    text = str(info.value)
    assert text.startswith("grid_facts: "), text
    assert "a tuple of 2 or 3 of them" in text, text
    for w in words:
        assert w in text, (w, text)


def test_bad_grid_from_a_callable(backend):
    out = np.zeros((4, 8), np.int64)
    with pytest.raises(ValueError, match="grid_facts: grid=\\(1, 2, 3, 4\\) has 4 axes"):
        grid_facts(out, grid=lambda args: (1, 2, 3, 4), backend=backend)


def test_thread_cap_uses_the_product_of_the_axes(backend):
    out = np.zeros((4, 8), np.int64)
    with pytest.raises(ValueError, match=r"grid_facts: grid=\(4294967296, 4294967296, 1\) = 18446744073709551616 "
                                         r"teams x threads=2 .* exceeds"):
        grid_facts(out, grid=(2 ** 32, 2 ** 32), backend=backend)


@dsl.kernel(threads=2, debug=True)
def store_by_worker(y: Out[i64]):
    y[flat_tile() * dsl.num_threads() + dsl.thread_id()] = dsl.tile_id(1)


def test_debug_errors_name_the_flat_tile(backend):
    y = np.zeros(7, np.int64)  # grid (2, 2) of 2 threads: worker 7, thread 1 of team 3, is out of range
    with pytest.raises(dsl.LaunchError) as info:
        store_by_worker(y, grid=(2, 2), backend=backend)
    assert (info.value.tile_id, info.value.thread_id) == (3, 1)
    np.testing.assert_array_equal(y, [0, 0, 0, 0, 1, 1, 1])
