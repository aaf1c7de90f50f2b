"""The numba backend's front-end record (backends/warm_start.py): the generated module, the
compile-cache key that names its machine code, and the few facts a launcher reads from the IR
(with the work program of its loop nest, which weighs its launches: backends/numba/launch_work.py).

A warm process rebuilds the launcher from it: it executes the recorded module (as a cold one
executes the module it generated) and numba loads each entry's machine code from the disk cache,
whose index is stamped with the hash of that same source.  Launches that carry an error record
(debug mode, run-time value checks) need the IR to explain an error, so they keep no record.
"""
from __future__ import annotations

import hashlib
from typing import Callable, Optional

from dsl.lang import ir
from dsl.lang import types as T

_PARAM_KINDS = {"tensor": ir.TensorParam, "scalar": ir.ScalarParam, "vec": ir.VecParam}
_CONST_TYPES = (bool, int, float, type(None))


def _param(p) -> list:
    if isinstance(p, ir.TensorParam):
        return ["tensor", p.name, p.dtype.name, p.ndim, p.access]
    if isinstance(p, ir.VecParam):
        return ["vec", p.name, p.dtype.name, p.length]
    value = p.const_value.item() if hasattr(p.const_value, "item") else p.const_value
    if not isinstance(value, _CONST_TYPES):
        raise TypeError(f"const value {value!r}")
    return ["scalar", p.name, p.dtype.name, value]


def _unparam(row) -> ir.Param:
    kind, name, dtype = row[0], row[1], T.BY_NAME[row[2]]
    if kind == "tensor":
        if row[4] not in ("in", "out", "inout") or not isinstance(row[3], int):
            raise ValueError(f"tensor parameter {name!r}: {row!r}")
        return ir.TensorParam(name, dtype, row[3], row[4])
    if kind == "vec":
        return ir.VecParam(name, dtype, int(row[3]))
    if kind == "scalar":
        return ir.ScalarParam(name, dtype, row[3])
    raise ValueError(f"parameter kind {kind!r}")


def record(request, launcher) -> Optional[dict]:
    """The record of ``launcher`` (a NumbaLauncher just built for ``request``), or None."""
    if launcher._sites is not None or launcher._debug or not launcher._source:
        return None
    try:
        params = [_param(p) for p in request.kernel.params]
    except TypeError:
        return None
    source = launcher._source
    return {"backend": "numba", "cache_key": request.key, "name": request.kernel.name,
            "threads": request.kernel.threads, "params": params, "source": source,
            "source_sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(),
            "facts": {"gate": launcher._gate is not None, "work": launcher._work,
                      "serial_first": launcher._serial_first},
            "log_level": request.log_level, "fastmath": request.fastmath, "interrupt": request.interrupt}


def restore(record: dict, pyfunc: Callable, log_gate):
    """(request, generated module, launcher facts) ``record`` describes, for ``lazy_launcher``;
    ValueError/KeyError/TypeError if it does not hold together."""
    from backends.base import CompileRequest
    source = record["source"]
    if record["backend"] != "numba" or not isinstance(source, str) or \
            hashlib.sha256(source.encode("utf-8")).hexdigest() != record["source_sha256"]:
        raise ValueError("its generated module does not match its digest")
    facts = record["facts"]
    kernel = ir.Kernel(name=str(record["name"]), params=tuple(_unparam(r) for r in record["params"]), scratch=(),
                       body=(), locals=(), threads=int(record["threads"]))
    request = CompileRequest(kernel, pyfunc, str(record["cache_key"]), str(record["log_level"]),
                             bool(record["fastmath"]), False, bool(record["interrupt"]), log_gate=log_gate)
    work = facts["work"]  # the loop nest's work program (launch_work.py), or None
    if work is not None and not (isinstance(work, dict) and isinstance(work.get("body"), list)):
        raise ValueError("its work program is not one")
    return request, source, {"gate": bool(facts["gate"]), "serial_first": bool(facts["serial_first"]), "work": work}
