"""The one grammar of ``dsl.log`` formats, parsed once in the frontend.

A format is literal text and conversions ``%[flags][width][.precision]conv`` with flags
from ``-+ #0`` and ``conv`` one of ``ACCEPTED``; ``%%`` is a literal ``%``.  Anything
else (``%p``, ``%n``, ``%*d``, length modifiers like ``%ld``, a lone ``%``) is a
CompileError at the format string.  ``ir.Log.pieces`` holds the parsed form; every
backend prints from it, and the interpreter's Python ``%`` operator is the reference
for what each conversion prints.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Tuple, Union

ACCEPTED = "d i u x X o e E f F g G c s"
INT_CONVS = "diuoxX"
FLOAT_CONVS = "eEfFgG"
NEEDS_INTEGER = "oxXc"  # Python raises TypeError for a float here
MAX_WIDTH = 1000  # width and precision: a log line is built in a fixed buffer

_SPEC = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>\d+)?(?:\.(?P<prec>\d+))?(?P<conv>[diouxXeEfFgGcs%])")


@dataclass(frozen=True)
class Spec:
    """One conversion: flags, width (0 when absent), precision (-1 when absent), letter."""

    flags: str
    width: int
    prec: int
    conv: str

    def c(self, conv: str, drop: str = "") -> str:
        """This conversion in printf syntax with letter ``conv``, without the flags in ``drop``."""
        flags = "".join(f for f in self.flags if f not in drop)
        return ("%" + flags + (str(self.width) if self.width else "")
                + (f".{self.prec}" if self.prec >= 0 else "") + conv)


Piece = Union[str, Spec]


class FormatError(ValueError):
    """What is wrong with a format; the frontend turns it into a CompileError at the string."""


def parse(fmt: str) -> Tuple[Piece, ...]:
    """Literal text and ``Spec`` items of ``fmt`` (``%%`` already folded into the text)."""
    out: List[Piece] = []
    pos, lit = 0, ""
    while pos < len(fmt):
        i = fmt.find("%", pos)
        if i < 0:
            lit += fmt[pos:]
            break
        lit += fmt[pos:i]
        m = _SPEC.match(fmt, i)
        if m is None:
            bad = re.match(r"%[-+ #0]*\d*(?:\.\d*)?.?", fmt[i:]).group(0)
            raise FormatError(f"log format {fmt!r}: unsupported conversion {bad!r}; accepted: "
                              f"{' '.join('%' + c for c in ACCEPTED.split())} with flags -+ #0, a width and a "
                              ".precision, and %% for a literal %")
        for part in ("width", "prec"):
            if m.group(part) is not None and int(m.group(part)) > MAX_WIDTH:
                raise FormatError(f"log format {fmt!r}: {part} {m.group(part)} is larger than {MAX_WIDTH}")
        if m.group("conv") == "%":
            lit += "%"
        else:
            if lit:
                out.append(lit)
                lit = ""
            out.append(Spec(m.group("flags") or "", int(m.group("width") or 0),
                            int(m.group("prec")) if m.group("prec") is not None else -1, m.group("conv")))
        pos = m.end()
    if lit:
        out.append(lit)
    return tuple(out)


def specs(pieces) -> List[Spec]:
    return [p for p in pieces if isinstance(p, Spec)]
