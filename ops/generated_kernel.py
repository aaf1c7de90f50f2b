"""Kernels made from source text the op library writes (the elementwise families' op-code ladders
from ops/elementwise_table.py, the 4-D broadcast loop, FusedElementwise programs).

The text is registered with linecache under a name derived from its hash, so the frontend,
tracebacks, pdb and pickling read it like a file's, and the disk cache (keyed by the text) finds
it again in the next process.  The kernel's ``__module__`` is the module that asked, so a kernel
kept as that module's attribute of the same name pickles by reference.
"""
from __future__ import annotations

import hashlib
import linecache
import re
import threading
from typing import Dict, List, Optional, Sequence

import dsl

_DTYPES = {t.name: t for t in (dsl.bool_, dsl.i8, dsl.u8, dsl.i16, dsl.u16, dsl.i32, dsl.u32, dsl.i64, dsl.u64,
                               dsl.f16, dsl.bf16, dsl.f32, dsl.f64)}
_KERNELS: Dict[tuple, object] = {}  # (module, source) -> dsl.Kernel
_LOCK = threading.Lock()


def compile_kernel(source: str, name: str, module: str, env: Optional[dict] = None):
    """The ``@dsl.kernel`` named ``name`` that ``source`` defines, made once per text and module.
    ``env``: names the text uses besides dsl, In, Out and the dtype names (TypeVars, constants)."""
    key = (module, source)
    with _LOCK:
        hit = _KERNELS.get(key)
        if hit is not None:
            return hit
        filename = f"<opdsl {module}.{name} {hashlib.sha256(source.encode()).hexdigest()[:16]}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace = {"__name__": module, "dsl": dsl, "In": dsl.In, "Out": dsl.Out, **_DTYPES, **(env or {})}
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 -- text the op library wrote
        hit = _KERNELS[key] = namespace[name]
        return hit


def indent(lines: Sequence[str], depth: int = 1) -> List[str]:
    return ["    " * depth + ln for ln in lines]


def broadcast_loop(out: str, inputs: Sequence[str], row: Sequence[str]) -> List[str]:
    """The body of a kernel over 4-D views whose inputs broadcast along ``out`` (an axis of size 1
    is read with stride 0).  Each thread walks its share of ``out`` one run along the last axis at
    a time, so the index math is done once per row: ``row`` (lines run per run) sees ``base``
    (flat index of the row's first element), ``j0``/``jn`` (the run's part of the last axis) and,
    per input ``a``, ``p_a`` (offset of the row in ``a``) and ``s_a3`` (its last-axis stride)."""
    body = [f"n1 = {out}.shape[1]", f"n2 = {out}.shape[2]", f"n3 = {out}.shape[3]"]
    for a in inputs:  # element strides, 0 along broadcast axes
        body += [f"s_{a}3 = 1 if {a}.shape[3] > 1 else 0",
                 f"s_{a}2 = {a}.shape[3] if {a}.shape[2] > 1 else 0",
                 f"s_{a}1 = {a}.shape[2] * {a}.shape[3] if {a}.shape[1] > 1 else 0",
                 f"s_{a}0 = {a}.shape[1] * {a}.shape[2] * {a}.shape[3] if {a}.shape[0] > 1 else 0"]
    body += [f"lo, hi = dsl.split({out}.size)", "i = lo", "while i < hi:"]
    run = ["r = i // n3", "j0 = i - r * n3", "jn = min(n3, j0 + hi - i)", "i2 = r % n2", "r = r // n2",
           "i1 = r % n1", "i0 = r // n1"]
    run += [f"p_{a} = i0 * s_{a}0 + i1 * s_{a}1 + i2 * s_{a}2" for a in inputs]
    run += ["base = i - j0"] + list(row) + ["i = base + jn"]
    return body + indent(run)


def kernel_text(header: str, doc: str, body: Sequence[str]) -> str:
    """``@dsl.kernel`` + ``def header:`` + docstring + body, as source text."""
    return "\n".join(["@dsl.kernel", f"def {header}:", f'    """{doc}"""'] + indent(body)) + "\n"


def ladder(branches: Sequence[tuple], code: str = "op") -> List[str]:
    """``if code == k: lines`` ... with the last branch as ``else`` (no test): one per (k, lines)."""
    out: List[str] = []
    for n, (k, lines) in enumerate(branches):
        if len(branches) == 1:
            return list(lines)
        if n == 0:
            out.append(f"if {code} == {k}:")
        elif n < len(branches) - 1:
            out.append(f"elif {code} == {k}:")
        else:
            out.append("else:")
        out += indent(lines)
    return out


def with_loads(lines: Sequence[str], loads: Dict[str, str]) -> List[str]:
    """``lines`` reading ``loads`` (name -> load expression): a one-line body that reads each name
    once gets the loads in place (the interpreter runs no extra statement per element), any other
    body assigns them first."""
    if len(lines) == 1 and all(len(re.findall(rf"\b{n}\b", lines[0])) == 1 for n in loads):
        return [re.sub(r"\b(" + "|".join(map(re.escape, loads)) + r")\b", lambda m: loads[m.group(1)], lines[0])]
    return [f"{n} = {e}" for n, e in loads.items()] + list(lines)
