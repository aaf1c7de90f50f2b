"""Declarative tiling: a compiled model runs an op that says how its outputs split (the Cloud
AI 100 guide's setTileConfig / mapTiles) as independent tiles across the cores.

An op declares, through two hooks (docs/ops.md "Tiling"):

- ``tiling(self, *input_specs)`` -> per output ``{axis: alignment}``: the axes the output may be
  cut along, and the multiple every tile's extent on that axis must be (the last tile takes
  the remainder); ``None`` runs the op untiled.
- ``map_tiles(self, out_tile, *input_specs)`` -> per input a tuple of slices (one per axis) or
  ``None`` (the whole input): what the output tile ``out_tile`` (per output, one slice per
  axis) reads.  Tiles must be independent: no tile reads what another one writes.

``plan_tiles`` turns these into concrete tiles for a node's shapes; ``tile_steps`` turns one
node into a single plan step that runs every tile's launches (``run_tiles``).  Each tile's
kernel sees numpy views of the node's inputs and outputs; a slice that is not C-contiguous (a
cut along an inner axis) is copied into a tile buffer before the launch, or out of one after.

How the tiles run in parallel (numba's rules: docs "The Threading Layers"; numba issue #10491):
numba's parallel entry is an OpenMP ``prange``, ``numba.set_num_threads`` is per thread, and
every Python thread that calls a parallel function drives its own OpenMP team, so tiles on
Python threads that each take the parallel entry put 2 x cores threads on the cores.  Tiles
therefore run one per core on Python threads (the compiled code releases the GIL,
``nogil=True``), each launch on the kernel's *serial* entry: its team of threads loops on that
core.  benchmarks/bench_tiling.py times the ways on the same buffers; on 2 cores this was the
fastest (1.9x over the untiled launch), parallel entries on threads a little slower, tiles in
order with parallel entries about 1x.  OpenCL launches hold the device lock for their whole
run (and PoCL already spreads one launch's work-groups over the cores), and the interpreter is
for debugging, so on those backends the tiles run one after another, with the same result.
"""
from __future__ import annotations

import os
import queue
import threading
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from backends import base
from backends.base import Launcher
from dsl import config
from dsl.opgraph.op import Op
from dsl.opgraph.spec import TensorSpec, VerifyError, describe

# The hook names a package's functions.py may define (the package loader copies them onto the op).
HOOKS = ("tiling", "map_tiles")

# With ``tiling=True`` a node is tiled only when its outputs hold at least this many elements:
# below it one launch takes tens of microseconds, and handing tiles to threads (~10-20 us)
# eats most of the gain (bench_tiling --quick: 131K elements, 1.6x for the node alone).
MIN_ELEMENTS = 1 << 16



def runs_tiles_concurrently(backend: str) -> bool:
    """The backend's launchers run across the host's cores (``Backend.parallel``); elsewhere
    tiles only add launches (see the module docstring)."""
    return base.get(backend).parallel

Slices = Tuple[slice, ...]


def cores() -> int:
    """The cores this process may run on: the default number of tiles."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def resolve(tiling) -> int:
    """``compile(tiling=...)`` -> how many tiles at most (0: off; negative: cores, auto size).

    ``None``: on unless OPDSL_NO_TILING=1; ``True``: one tile per core for large enough
    outputs; ``False``: off; an int n >= 1: up to n tiles whatever the size (1: off)."""
    if tiling is None:
        tiling = config.tiling_enabled()
    if tiling is True:
        return -cores()
    if tiling is False:
        return 0
    if isinstance(tiling, (int, np.integer)) and not isinstance(tiling, (bool, np.bool_)) and tiling >= 1:
        return 0 if tiling == 1 else int(tiling)
    raise ValueError(f"compile(tiling={tiling!r}): accepted None (default: on unless OPDSL_NO_TILING=1), "
                     "True, False, or an int >= 1 (at most that many tiles per op)")


# --------------------------------------------------------------------------- planning

def declared(op) -> bool:
    """Whether the op's class (or its package's functions.py) defines a ``tiling`` hook."""
    return type(op).tiling is not Op.tiling


def plan_tiles(op, in_specs: Sequence[Optional[TensorSpec]], out_specs: Sequence[TensorSpec],
               limit: int, where: str, backend: str = "numba"
               ) -> Optional[List[Tuple[Tuple[Slices, ...], List[Optional[Slices]]]]]:
    """The tiles of one node -> [(per output slices, per input slices or None)], or None to run
    it untiled.  ``limit`` comes from ``resolve``; automatic tiling (``limit`` < 0) applies on
    the backends whose tiles run concurrently only (elsewhere they would just add launches).
    Bad hook results are VerifyErrors naming the op, ``where`` (the node), the hook and what
    it accepts."""
    if limit == 0 or not declared(op) or not out_specs:
        return None
    if limit < 0 and not runs_tiles_concurrently(backend):
        return None
    if any(s is not None and s.format != "plain" for s in (*in_specs, *out_specs)):
        return None  # slices are logical: a channel-blocked tensor is not cut
    if limit < 0 and sum(s.size for s in out_specs) < MIN_ELEMENTS:
        return None
    name = f"{describe(op)} ({where})"
    axes = _check_tiling(_call(name, "tiling", op.tiling, in_specs), out_specs, name)
    if axes is None:
        return None
    count, chosen = _tile_count(axes, out_specs, abs(limit))
    if count < 2:
        return None
    tiles = []
    for k in range(count):
        out_tile = tuple(_tile_slices(spec.shape, axis, chunk, k) for spec, (axis, chunk) in zip(out_specs, chosen))
        in_tile = _check_map(_call(name, f"map_tiles({_show(out_tile)})", op.map_tiles, in_specs, out_tile),
                             in_specs, out_tile, name)
        tiles.append((out_tile, in_tile))
    return tiles


def _call(name: str, hook: str, fn, in_specs, *first):
    """A hook's result; an exception inside it (a bug in the op) names the op, node and hook."""
    try:
        return fn(*first, *in_specs)
    except (VerifyError, NotImplementedError):
        raise
    except Exception as e:
        shown = ", ".join("None" if s is None else str(s) for s in in_specs)
        raise VerifyError(f"{name}: {hook} failed on inputs ({shown}): {type(e).__name__}: {e}") from e


def _check_tiling(result, out_specs, name):
    """The ``tiling`` result as per output [(axis, alignment)], or None (untiled)."""
    accepted = ("accepted: None (untiled), or per output a dict {axis: alignment} with int axes "
                "and int alignments >= 1 (a dict alone for a single output)")
    if result is None:
        return None
    if isinstance(result, dict):
        result = (result,)
    if not isinstance(result, (list, tuple)) or len(result) != len(out_specs):
        raise VerifyError(f"{name}: tiling() returned {result!r} for {len(out_specs)} output(s); {accepted}")
    axes = []
    for k, (decl, spec) in enumerate(zip(result, out_specs)):
        if not isinstance(decl, dict) or not decl:
            raise VerifyError(f"{name}: tiling() output {k} is {decl!r}; {accepted}")
        pairs = []
        for axis, align in decl.items():
            if not _is_int(axis) or not -spec.ndim <= axis < spec.ndim:
                raise VerifyError(f"{name}: tiling() output {k} axis {axis!r} is not an axis of its "
                                  f"shape {spec.shape} (rank {spec.ndim}); {accepted}")
            if not _is_int(align) or align < 1:
                raise VerifyError(f"{name}: tiling() output {k} axis {axis} alignment {align!r}; {accepted}")
            pairs.append((int(axis) % spec.ndim, int(align)))
        axes.append(sorted(pairs))
    return axes


def _tile_count(axes, out_specs, limit: int):
    """(tile count, per output (axis, chunk)): every output is cut into the same number of tiles.
    Each output uses the outermost declared axis that gives the most tiles up to ``limit``
    (outer axes give contiguous views); chunks are multiples of the alignment."""
    count = limit
    while True:
        chosen, counts = [], []
        for pairs, spec in zip(axes, out_specs):
            best = None
            for axis, align in pairs:
                chunk, n = _chunk(spec.shape[axis], align, count)
                if best is None or n > best[2]:
                    best = (axis, chunk, n)
            chosen.append(best[:2])
            counts.append(best[2])
        if all(n == count for n in counts) or count < 2:
            return count, chosen
        count = min(counts)


def _chunk(extent: int, align: int, count: int) -> Tuple[int, int]:
    """(tile extent, number of tiles) cutting ``extent`` into at most ``count`` aligned tiles."""
    if extent == 0:
        return 1, 0
    chunk = align * -(-extent // (count * align))
    return chunk, -(-extent // chunk)


def _tile_slices(shape, axis: int, chunk: int, k: int) -> Slices:
    return tuple(slice(k * chunk, min((k + 1) * chunk, d)) if a == axis else slice(0, d)
                 for a, d in enumerate(shape))


def _check_map(result, in_specs, out_tile, name) -> List[Optional[Slices]]:
    """The ``map_tiles`` result for ``out_tile`` as per input full slices or None."""
    accepted = ("accepted: a list with one entry per input, each None (the whole input) or a tuple "
                "of slices with step 1, one per axis, within the input's shape")
    if not isinstance(result, (list, tuple)) or len(result) != len(in_specs):
        raise VerifyError(f"{name}: map_tiles({_show(out_tile)}) returned {result!r} for "
                          f"{len(in_specs)} input(s); {accepted}")
    out: List[Optional[Slices]] = []
    for i, (sl, spec) in enumerate(zip(result, in_specs)):
        if sl is None or spec is None:
            out.append(None)
            continue
        if isinstance(sl, slice):
            sl = (sl,)
        if not isinstance(sl, (list, tuple)) or len(sl) != spec.ndim or not all(isinstance(s, slice) for s in sl):
            raise VerifyError(f"{name}: map_tiles({_show(out_tile)}) input {i} is {sl!r}, for shape "
                              f"{spec.shape}; {accepted}")
        full = []
        for a, (s, d) in enumerate(zip(sl, spec.shape)):
            start = 0 if s.start is None else s.start
            stop = d if s.stop is None else s.stop
            if (s.step not in (None, 1) or not _is_int(start) or not _is_int(stop)
                    or not 0 <= start <= stop <= d):
                raise VerifyError(f"{name}: map_tiles({_show(out_tile)}) input {i} axis {a} is {s!r}, "
                                  f"outside its extent {d}; {accepted}")
            full.append(slice(int(start), int(stop)))
        out.append(tuple(full))
    return out


def _show(tile) -> str:
    return "(" + ", ".join("[" + ", ".join(f"{s.start}:{s.stop}" for s in t) + "]" for t in tile) + ")"


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


# --------------------------------------------------------------------------- running

def tile_arrays(ins, outs, tile):
    """Views of one tile -> (kernel inputs, kernel outputs, copies before, copies after).
    A view that is not C-contiguous gets a tile buffer and a copy."""
    out_tile, in_tile = tile
    before, after = [], []
    tile_ins = []
    for a, sl in zip(ins, in_tile):
        if a is None or sl is None or a.ndim == 0:  # (a 0-d array indexed by () is a scalar)
            tile_ins.append(a)
            continue
        v = a[sl]
        if not v.flags.c_contiguous:
            buf = np.empty(v.shape, v.dtype)
            before.append((buf, v))
            v = buf
        tile_ins.append(v)
    tile_outs = []
    for a, sl in zip(outs, out_tile):
        v = a[sl]
        if not v.flags.c_contiguous:
            buf = np.empty(v.shape, v.dtype)
            after.append((v, buf))
            v = buf
        tile_outs.append(v)
    return tile_ins, tile_outs, before, after


def tile_steps(op, impl, ins, outs, tiles, backend: str,
               capture: Callable) -> Tuple[Callable, tuple]:
    """One plan step running every tile of a node.  ``capture(op, impl, ins, outs)`` -> the
    tile's launch steps [(fn, args)] (the model's launch capture, or a plain ``op.run``)."""
    parallel = runs_tiles_concurrently(backend)
    work = []
    for tile in tiles:
        t_ins, t_outs, before, after = tile_arrays(ins, outs, tile)
        steps = [(_serial_entry(fn) if parallel else fn, args) for fn, args in capture(op, impl, t_ins, t_outs)]
        work.append((tuple(before), tuple(steps), tuple(after)))
    return (run_tiles if parallel else run_tiles_in_order), (tuple(work),)


def _serial_entry(fn):
    """A launcher's serial entry: one core per tile, its team taking turns on it."""
    return fn.run_serial if isinstance(fn, Launcher) else fn


def _run_tile(tile) -> None:
    before, steps, after = tile
    for dst_src in before:
        np.copyto(*dst_src)
    for fn, args in steps:
        fn(*args)
    for dst_src in after:
        np.copyto(*dst_src)


def run_tiles_in_order(work) -> None:
    for tile in work:
        _run_tile(tile)


class _Workers:
    """Tile threads, one per core but the caller's: a shared task queue, a reply queue per run
    (a SimpleQueue hand-off costs ~13 us, a ThreadPoolExecutor future ~40 us).  Daemon
    threads: they only ever wait between runs, and a run's caller waits for its tiles."""

    def __init__(self, count: int):
        self.count = count
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        for i in range(count):
            threading.Thread(target=self._loop, name=f"opdsl-tile-{i}", daemon=True).start()

    def _loop(self) -> None:
        _inside.worker = True
        while True:
            tile, reply = self.tasks.get()
            try:
                _run_tile(tile)
            except BaseException as e:  # handed to the run's caller
                reply.put(e)
            else:
                reply.put(None)


_pool: Optional[_Workers] = None
_pool_lock = threading.Lock()
_inside = threading.local()


def _workers() -> Optional[_Workers]:
    """The tile threads, made on first use; None on one core (tiles then run in order)."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = _Workers(cores() - 1)
    return _pool if _pool.count > 0 else None


def _forget_pool() -> None:
    """A forked child has none of the parent's threads: it makes its own on first use."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def run_tiles(work) -> None:
    """Run the tiles concurrently: the caller takes the first, the tile threads the others.  A
    tile that itself runs a tiled model (on a tile thread) runs its tiles in order: waiting
    on the tile threads from one of them could deadlock."""
    pool = _workers()
    if pool is None or len(work) == 1 or getattr(_inside, "worker", False):
        run_tiles_in_order(work)
        return
    reply: queue.SimpleQueue = queue.SimpleQueue()
    for tile in work[1:]:
        pool.tasks.put((tile, reply))
    error = None
    try:
        _run_tile(work[0])
    except BaseException as e:  # still wait for the others: they write into the caller's buffers
        error = e
    for _ in range(len(work) - 1):
        e = reply.get()
        error = error or e
    if error is not None:
        raise error
