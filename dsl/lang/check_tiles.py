"""Typing of the tile builtins (``dsl.tile_*``, dsl/lang/tiles.py), mixed into the checker.

A tile index must fold to a literal 0..7 (the backends name the register in the instruction);
a tensor a tile moves must hold 1-byte or 4-byte integers (64 bytes a row: 64 u8/i8 or 16 i32);
offsets and row strides are integers, counted in elements of that tensor."""
from __future__ import annotations

from dsl.lang import ir
from dsl.lang import tiles
from dsl.lang import types as T
from dsl.lang.errors import TypeMismatch
from dsl.lang.fold import fold as _fold

_TILE_ARGS = {"tile_zero": (0,), "tile_load": (0,), "tile_store": (0,), "tile_dot_u8i8": (0, 1, 2)}
_TILE_DTYPES = ("u8", "i8", "i32", "u32")


class TileRules:
    """``tile_call``: a typed ``ir.Call`` of a tile builtin; ``self`` is the checker."""

    def tile_call(self, e: ir.Call):
        args = []
        for j, a in enumerate(e.args):
            if isinstance(a, ir.TensorRef):
                args.append(self.tile_tensor(e, a))
            elif j in _TILE_ARGS[e.name]:
                args.append(self.tile_index(e, a, j))
            else:
                v, t = self.expr(a)
                if t is not None and (isinstance(t, T.SimdType) or not t.is_int):
                    what = ("offset", "row_stride")[j - 2]
                    raise self.error(a, f"dsl.{e.name}(): {what} must be an integer (elements of the tensor), got {t}",
                                     kind=TypeMismatch)
                args.append(self.cast(v, T.i64) if t is not None else v)
        return ir.Call(e.name, tuple(args), type=T.i32, loc=e.loc), T.i32

    def tile_index(self, e: ir.Call, a: ir.Expr, j: int) -> ir.Const:
        v, t = self.expr(a)
        n = _fold(v)
        if n is None and not self.final:
            return ir.Const(0, type=T.i64, loc=a.loc)  # typed again in the final pass
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n < tiles.TILES:
            got = repr(n) if n is not None else f"a value known only at run time ({t.strong if t else '?'})"
            raise self.error(a, f"dsl.{e.name}(): tile {j + 1} must be an integer literal 0..{tiles.TILES - 1} (a "
                                f"kernel thread has {tiles.TILES} tile registers), got {got}",
                             note="a literal, a dsl.const parameter, a module-level int or a dsl.static_range variable",
                             kind=TypeMismatch)
        return ir.Const(n, type=T.i64, loc=a.loc)

    def tile_tensor(self, e: ir.Call, a: ir.TensorRef) -> ir.TensorRef:
        b = self.buffer(a.tensor, a)
        dtype = getattr(b, "dtype", None)
        if dtype is None or dtype.name not in _TILE_DTYPES:
            raise self.error(a, f"dsl.{e.name}(): tensor '{a.tensor}' holds {dtype}; a tile row is 64 bytes of "
                                f"1-byte or 4-byte integers ({', '.join(_TILE_DTYPES)})", kind=TypeMismatch)
        return a
