"""The tile builtins (``dsl.tile_*``, dsl/lang/tiles.py) in C: a per-work-item tile file.

No C target has matrix tiles, so each kernel thread keeps its 8 tiles of 16 × 64 bytes in a
private byte array (``TILE_FILE``, declared at the kernel's top when its body uses tiles) and the
operations are loops over it with the interpreter's meaning: bytes moved as they lie in memory
(little-endian), the product ``tdpbusd``'s, i32 sums wrapping.  A mixin of ``CStyleRenderer``."""
from __future__ import annotations

from dsl.lang import ir
from dsl.lang import tiles as _lang
from dsl.lang import types as T

TILE_FILE = "opdsl_tilefile"
_TILE = _lang.TILE_ROWS * _lang.TILE_BYTES


class CTiles:
    """``builtin_tile`` (an ``ir.Call`` of a tile builtin, as a statement) and its helper functions."""

    def tile_file_decl(self) -> str:
        return f"{self.stype(T.u8)} {TILE_FILE}[{_lang.TILES * _TILE}];  // dsl.tile_*: this thread's tile registers"

    def builtin_tile(self, e: ir.Call) -> str:
        """A tile builtin (``Helper("tile")``) as a helper call on this thread's tile file."""
        if e.name in ("tile_load", "tile_store"):
            tensor = e.args[1].tensor
            buf = self.k.buffer(tensor)
            space = "global" if isinstance(buf, ir.TensorParam) else "local" if isinstance(buf, ir.Scratch) else "private"
            fn = self.helper(e.name, buf.dtype, space)
            args = [self.bare(e.args[0]), self.pointer(tensor), self.bare(e.args[2]), self.bare(e.args[3])]
        else:
            fn = self.helper(e.name)
            args = [self.bare(a) for a in e.args]
        return f"{fn}({', '.join([TILE_FILE] + args)})"

    def _tile_space(self, extra: str) -> str:
        return {"global": self.buffer_prefix, "local": self.local_prefix, "private": ""}[extra]

    def helper_tile_zero(self, name, t, dtype, extra):
        return (f"{self.func_prefix}void {name}(uchar* tf, long t) {{\n"
                f"  for (int i = 0; i < {_TILE}; i++) tf[t * {_TILE} + i] = 0;\n}}")

    def helper_tile_load(self, name, t, dtype, extra):
        size = dtype.bits // 8
        return (f"{self.func_prefix}void {name}(uchar* tf, long t, {self._tile_space(extra)}const {t}* a, long off, "
                f"long stride) {{\n"
                f"  // 16 rows of 64 bytes, row r from element off + r * stride, bytes little-endian\n"
                f"  for (int r = 0; r < {_lang.TILE_ROWS}; r++)\n"
                f"    for (int j = 0; j < {_lang.TILE_BYTES // size}; j++) {{\n"
                f"      uint v = (uint)a[off + r * stride + j];\n"
                f"      for (int q = 0; q < {size}; q++) tf[t * {_TILE} + r * {_lang.TILE_BYTES} + j * {size} + q] "
                f"= (uchar)(v >> (8 * q));\n"
                f"    }}\n}}")

    def helper_tile_store(self, name, t, dtype, extra):
        size = dtype.bits // 8
        return (f"{self.func_prefix}void {name}(uchar* tf, long t, {self._tile_space(extra)}{t}* a, long off, "
                f"long stride) {{\n"
                f"  for (int r = 0; r < {_lang.TILE_ROWS}; r++)\n"
                f"    for (int j = 0; j < {_lang.TILE_BYTES // size}; j++) {{\n"
                f"      uint v = 0;\n"
                f"      for (int q = 0; q < {size}; q++) v |= (uint)tf[t * {_TILE} + r * {_lang.TILE_BYTES} + j * {size} "
                f"+ q] << (8 * q);\n"
                f"      a[off + r * stride + j] = ({t})v;\n"
                f"    }}\n}}")

    def helper_tile_dot_u8i8(self, name, t, dtype, extra):
        return (f"{self.func_prefix}void {name}(uchar* tf, long c, long a, long b) {{\n"
                f"  // C[16 x 16 i32] += A[16 x 64 u8] . B[16 rows x 16 cols x 4 i8] (tdpbusd), wrapping\n"
                f"  for (int m = 0; m < 16; m++)\n"
                f"    for (int n = 0; n < 16; n++) {{\n"
                f"      uchar* cp = tf + c * {_TILE} + m * 64 + n * 4;\n"
                f"      uint s = (uint)cp[0] | (uint)cp[1] << 8 | (uint)cp[2] << 16 | (uint)cp[3] << 24;\n"
                f"      for (int k = 0; k < 64; k++)\n"
                f"        s += (uint)((int)tf[a * {_TILE} + m * 64 + k] * (int)(char)tf[b * {_TILE} + (k / 4) * 64 + n * 4 "
                f"+ k % 4]);\n"
                f"      for (int q = 0; q < 4; q++) cp[q] = (uchar)(s >> (8 * q));\n"
                f"    }}\n}}")
