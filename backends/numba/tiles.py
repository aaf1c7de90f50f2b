"""Tile registers on numba (``dsl.tile_*``, dsl/lang/tiles.py): Intel AMX, or a portable tile file.

"amx": the x86 intrinsics with immediate tile numbers (``llvm.x86.tileloadd64``, ``tdpbusd``,
``tilestored64``, ``tilezero``), after ``ldtilecfg`` of palette 1 with all 8 tiles 16 rows × 64
bytes at the top of each generated thread function, and ``tilerelease`` at its end.  Only where
``dsl.target`` lists "amx" (backends/host.py: the CPU has amx-tile and amx-int8 and Linux granted
this process the tile data), so the instructions never fault.

"portable": the same operations on a per-thread byte array (``_tiles``, made by the thread
function's first line), in plain loops LLVM vectorizes: correct on every CPU, far slower.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir as llir
from numba import njit, types
from numba.extending import intrinsic

from backends.host import host
from dsl.lang import tiles as _lang

# Linux grants the tile data per process: ask (backends/host.py ``amx_granted``) whenever a generated
# module is loaded, since its code may come from a cache an earlier process compiled with AMX.
host()

LOWERINGS = ("amx", "portable")
TILE_FILE_BYTES = _lang.TILES * _lang.TILE_ROWS * _lang.TILE_BYTES

_I8 = llir.IntType(8)
_I64 = llir.IntType(64)
_PTR = _I8.as_pointer()


def lowering(features) -> str:
    """How tile operations are lowered for a target with ``features``."""
    return "amx" if "amx" in features else "portable"


def config_bytes() -> bytes:
    """``ldtilecfg``'s 64-byte operand: palette 1, start row 0, then colsb (u16) and rows (u8) per
    tile; every one of the 8 tiles TILE_ROWS × TILE_BYTES."""
    cfg = bytearray(64)
    cfg[0] = 1
    for t in range(_lang.TILES):
        cfg[16 + 2 * t] = _lang.TILE_BYTES
        cfg[48 + t] = _lang.TILE_ROWS
    return bytes(cfg)


def _call(builder, name: str, params, args) -> None:
    fn = builder.module.globals.get(name)
    if fn is None:
        fn = llir.Function(builder.module, llir.FunctionType(llir.VoidType(), params), name)
    builder.call(fn, args)


def _tile_number(t):
    n = getattr(t, "literal_value", None)
    return n if isinstance(n, int) and 0 <= n < _lang.TILES else None


# --------------------------------------------------------------------------- AMX

@intrinsic
def amx_config(typingctx):
    """``ldtilecfg`` (every tile 16 × 64 bytes; their contents become zero)."""
    def codegen(context, builder, sig, args):
        ty = llir.ArrayType(_I8, 64)
        slot = builder.alloca(ty)
        slot.align = 64
        builder.store(llir.Constant(ty, bytearray(config_bytes())), slot)
        _call(builder, "llvm.x86.ldtilecfg", [_PTR], [builder.bitcast(slot, _PTR)])
        return context.get_dummy_value()
    return types.void(), codegen


@intrinsic
def amx_release(typingctx):
    """``tilerelease``: the tile state back to its initial (cheap to context-switch) state."""
    def codegen(context, builder, sig, args):
        _call(builder, "llvm.x86.tilerelease", [], [])
        return context.get_dummy_value()
    return types.void(), codegen


@intrinsic(prefer_literal=True)
def amx_zero(typingctx, t):
    n = _tile_number(t)
    if n is None:
        return None

    def codegen(context, builder, sig, args):
        _call(builder, "llvm.x86.tilezero", [_I8], [llir.Constant(_I8, n)])
        return context.get_dummy_value()
    return types.void(t), codegen


def _amx_move(name: str):
    """``tileloadd``/``tilestored`` of tile ``t`` at element ``offset`` of 1-d ``arr``, rows
    ``row_stride`` elements apart (the instruction's stride is in bytes)."""
    def typer(typingctx, t, arr, offset, row_stride):
        n = _tile_number(t)
        if n is None or not isinstance(arr, types.Array):
            return None

        def codegen(context, builder, sig, args):
            size = context.get_abi_sizeof(context.get_data_type(arr.dtype))
            data = context.make_array(arr)(context, builder, args[1]).data
            ptr = builder.bitcast(builder.gep(data, [args[2]]), _PTR)
            stride = builder.mul(args[3], llir.Constant(_I64, size))
            _call(builder, name, [_I8, _PTR, _I64], [llir.Constant(_I8, n), ptr, stride])
            return context.get_dummy_value()
        return types.void(t, arr, offset, row_stride), codegen
    typer.__name__ = name.rsplit(".", 1)[1]
    return intrinsic(prefer_literal=True)(typer)


amx_load = _amx_move("llvm.x86.tileloadd64")
amx_store = _amx_move("llvm.x86.tilestored64")


@intrinsic(prefer_literal=True)
def amx_dot_u8i8(typingctx, c, a, b):
    ns = [_tile_number(x) for x in (c, a, b)]
    if None in ns:
        return None

    def codegen(context, builder, sig, args):
        _call(builder, "llvm.x86.tdpbusd", [_I8] * 3, [llir.Constant(_I8, v) for v in ns])
        return context.get_dummy_value()
    return types.void(c, a, b), codegen


# --------------------------------------------------------------------------- portable

ROWS, ROW_BYTES, TILE = _lang.TILE_ROWS, _lang.TILE_BYTES, _lang.TILE_ROWS * _lang.TILE_BYTES


@njit(inline="always", nogil=True)
def portable_file():
    return np.zeros(TILE_FILE_BYTES, np.uint8)


@njit(nogil=True)
def portable_zero(tiles, t):
    tiles[t * TILE:(t + 1) * TILE] = 0


@njit(nogil=True)
def portable_load(tiles, t, arr, offset, row_stride):
    per_row = ROW_BYTES // arr.itemsize
    for r in range(ROWS):
        base = offset + r * row_stride
        out = t * TILE + r * ROW_BYTES
        for j in range(per_row):
            v = np.int64(arr[base + j])
            for q in range(arr.itemsize):
                tiles[out + j * arr.itemsize + q] = np.uint8((v >> (8 * q)) & 0xFF)


@njit(nogil=True)
def portable_store(tiles, t, arr, offset, row_stride):
    per_row = ROW_BYTES // arr.itemsize
    for r in range(ROWS):
        base = offset + r * row_stride
        src = t * TILE + r * ROW_BYTES
        for j in range(per_row):
            v = np.int64(0)
            for q in range(arr.itemsize):
                v |= np.int64(tiles[src + j * arr.itemsize + q]) << (8 * q)
            arr[base + j] = v


@njit(nogil=True)
def portable_dot_u8i8(tiles, c, a, b):
    acc = tiles.view(np.int32)
    for m in range(ROWS):
        for n in range(16):
            s = np.int64(acc[c * 256 + m * 16 + n])
            for k in range(ROW_BYTES):
                s += np.int64(tiles[a * TILE + m * ROW_BYTES + k]) * \
                    np.int64(np.int8(tiles[b * TILE + (k // 4) * ROW_BYTES + n * 4 + k % 4]))
            acc[c * 256 + m * 16 + n] = np.int32(s)
