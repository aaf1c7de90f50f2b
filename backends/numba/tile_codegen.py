"""Generated code for the tile builtins (``dsl.tile_*``) on numba (mixed into codegen.Gen).

The lowering is chosen once per generated module from the host (backends/numba/tiles.py
``lowering``) and written into the code, so a cached module never asks again: "amx" calls the AMX
intrinsics (``tl.amx_*``), "portable" the loops over the thread's tile file ``_tilefile``."""
from __future__ import annotations

from typing import List, Sequence

from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.tiles import uses_tiles
from backends.host import host
from backends.numba import tiles as numba_tiles

TILE_FILE = "_tilefile"  # the portable lowering's per-thread tile registers


class TileGen:
    """``builtin_tile`` and the first/last lines of a function using tiles; ``self`` is a codegen.Gen."""

    def tile_lowering(self) -> str:
        return numba_tiles.lowering(host().features)

    def tile_prologue(self, stmts: Sequence[ir.Stmt]) -> List[str]:
        if not uses_tiles(stmts):
            return []
        if self.tile_lowering() == "amx":
            return ["    tl.amx_config()  # dsl.tile_*: AMX, every tile 16 rows x 64 bytes"]
        return [f"    {TILE_FILE} = tl.portable_file()  # dsl.tile_*: this thread's tile registers (no AMX here)"]

    def tile_epilogue(self, stmts: Sequence[ir.Stmt]) -> List[str]:
        if uses_tiles(stmts) and self.tile_lowering() == "amx":
            return ["    tl.amx_release()"]
        return []

    def builtin_tile(self, e: ir.Call, scope) -> str:
        """A tile builtin (``Helper("tile")``): its tensor passes whole, its tile numbers as literals."""
        args = [a.tensor if isinstance(a, ir.TensorRef) else a for a in e.args]
        code = [self.names[a] if isinstance(a, str) else
                str(a.value) if isinstance(a, ir.Const) and a.type == T.i64 and j in _TILE_SLOTS[e.name] else
                self.typed(a, T.i64, scope) for j, a in enumerate(args)]
        op = e.name[len("tile_"):]
        if self.tile_lowering() == "amx":
            return f"tl.amx_{op}({', '.join(code)})"
        return f"tl.portable_{op}({', '.join([TILE_FILE] + code)})"


_TILE_SLOTS = {"tile_zero": (0,), "tile_load": (0,), "tile_store": (0,), "tile_dot_u8i8": (0, 1, 2)}
