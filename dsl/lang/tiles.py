"""Matrix tile registers in kernels (``dsl.tile_*``): their shape and their meaning.

A kernel thread has ``TILES`` tile registers, each ``TILE_ROWS`` rows of ``TILE_BYTES`` bytes, named
by literal indexes 0..7: the register file of Intel AMX (palette 1 with every tile at its largest,
16 × 64 bytes), which numba uses where the CPU has it and the OS grants it.  Elsewhere, and on the
interpreter and OpenCL, the same operations run on a per-thread array with the same meaning, so a
kernel written with tiles is correct on every CPU.

The functions here are the interpreter's semantics (the reference): a per-thread tile file of
numpy bytes.  Tiles are untyped bytes, as in hardware: ``tile_dot_u8i8`` reads them as u8, i8 and
i32 whatever loaded them.  A tile's contents are undefined at a kernel's start and after a
``dsl.sync()``.
"""
from __future__ import annotations

import threading

import numpy as np

TILES = 8
TILE_ROWS = 16
TILE_BYTES = 64
OPS = ("tile_zero", "tile_load", "tile_store", "tile_dot_u8i8")  # the builtins, registered in builtins.py


def uses_tiles(stmts) -> bool:
    """Whether ``stmts`` (checked IR) call a tile builtin: the code around them needs a tile file."""
    from dsl.lang import ir
    return any(isinstance(n, ir.Call) and n.name in OPS for n in ir.walk(list(stmts)))

_file = threading.local()


def _tiles() -> np.ndarray:
    """This thread's tile file: TILES × TILE_ROWS × TILE_BYTES bytes (the interpreter runs each team
    thread on its own Python thread)."""
    t = getattr(_file, "tiles", None)
    if t is None:
        t = _file.tiles = np.zeros((TILES, TILE_ROWS, TILE_BYTES), np.uint8)
    return t


def _bytes_of(a, offset, row_stride, what: str):
    """(flat array of ``a``, its item size, the flat index of each row's first element)."""
    arr = np.asarray(getattr(a, "array", a)).reshape(-1)
    size = arr.dtype.itemsize
    per_row = TILE_BYTES // size
    starts = int(offset) + int(row_stride) * np.arange(TILE_ROWS)
    lo, hi = int(starts.min()), int(starts.max()) + per_row
    if lo < 0 or hi > arr.size:
        name = getattr(a, "name", "array")
        raise IndexError(f"dsl.{what}: the 16 rows of {per_row} elements at offset {int(offset)}, row stride "
                         f"{int(row_stride)} reach elements {lo}..{hi - 1} of '{name}', which has {arr.size}")
    return arr, size, starts, per_row


def tile_zero(t):
    """Set every byte of tile ``t`` (a literal 0..7) to zero (AMX ``tilezero``)."""
    _tiles()[int(t)] = 0


def tile_load(t, a, offset, row_stride):
    """Load tile ``t``: 16 rows of 64 bytes from tensor ``a`` (1-byte or 4-byte integers), row r from
    flat element ``offset + r * row_stride`` (both counted in elements of ``a``; AMX ``tileloadd``)."""
    arr, size, starts, per_row = _bytes_of(a, offset, row_stride, "tile_load")
    rows = np.stack([arr[s:s + per_row] for s in starts])
    _tiles()[int(t)] = np.ascontiguousarray(rows).view(np.uint8).reshape(TILE_ROWS, TILE_BYTES)


def tile_store(t, a, offset, row_stride):
    """Store tile ``t`` into tensor ``a`` (1-byte or 4-byte integers), row r at flat element
    ``offset + r * row_stride`` (AMX ``tilestored``)."""
    if getattr(a, "access", "out") == "in":
        raise PermissionError(f"dsl.tile_store: '{getattr(a, 'name', 'array')}' is an In tensor")
    arr, size, starts, per_row = _bytes_of(a, offset, row_stride, "tile_store")
    rows = _tiles()[int(t)].view(arr.dtype)
    for r, s in enumerate(starts):
        arr[s:s + per_row] = rows[r]


def tile_dot_u8i8(c, a, b):
    """Tile ``c`` (16 × 16 i32) += tile ``a`` (16 × 64 u8) · tile ``b`` (i8, 16 rows of 16 columns ×
    4 bytes: element (k, n) of the 64 × 16 matrix is byte 4·n + k % 4 of row k // 4), i32 sums
    wrapping (AMX ``tdpbusd``)."""
    tiles = _tiles()
    ua = tiles[int(a)].astype(np.int64)                                             # [16, 64]
    sb = tiles[int(b)].view(np.int8).reshape(TILE_ROWS, 16, 4).transpose(0, 2, 1)   # [k/4, k%4, n]
    prod = ua @ sb.reshape(TILE_BYTES, 16).astype(np.int64)                          # [16, 16]
    acc = tiles[int(c)].view(np.int32).astype(np.int64) + prod
    tiles[int(c)] = ((acc + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32).view(np.uint8)
