"""The run-time log threshold: which compiled-in ``dsl.log`` calls print at a launch.

The compile-time floor (``CompileRequest.log_level``) removes the calls below it from the
generated code.  Each call that remains compares its level with the threshold, a hidden launch
argument (a small int) read from the kernel's ``LogGate`` at every launch, so changing the
threshold never recompiles and never changes a cache key.  Kernels without levelled
``dsl.log`` calls (``print()`` always prints) have no such argument and pay nothing.
"""
from __future__ import annotations

from typing import Optional

from dsl import config
from dsl.lang import ir

LEVELS = config.LOG_LEVELS  # debug info warn error off: a level's number is its index
_NUMBER = {name: n for n, name in enumerate(LEVELS)}


def number(level: str) -> int:
    """The int a generated ``dsl.log`` call compares the threshold with."""
    return _NUMBER[level]


def check_level(level, what: str) -> Optional[str]:
    """``level`` if it names a log level (or is None), else a ValueError naming ``what`` and the accepted levels."""
    if level is None or (isinstance(level, str) and level in _NUMBER):
        return level
    raise ValueError(f"{what} = {level!r} is not a log level; accepted: {', '.join(LEVELS)} (or None: follow "
                     f"OPDSL_LOG_LEVEL)")


class LogGate:
    """One kernel's run-time threshold: its own level if set, else its parent's (a variant
    follows the kernel it was made from), else OPDSL_LOG_LEVEL read now, else "warn"."""

    __slots__ = ("level", "parent")

    def __init__(self, level: Optional[str] = None, parent: Optional["LogGate"] = None):
        self.level = level
        self.parent = parent

    def level_name(self) -> str:
        gate = self
        while gate is not None:
            if gate.level is not None:
                return gate.level
            gate = gate.parent
        return config.runtime_log_level()

    def threshold(self) -> int:
        """The hidden argument of one launch (read on every launch of a kernel with dsl.log calls: kept short)."""
        level = self.level
        if level is None:
            level = self.parent.level_name() if self.parent is not None else config.runtime_log_level()
        return _NUMBER[level]


ENVIRONMENT = LogGate()  # launchers compiled without a kernel's gate follow OPDSL_LOG_LEVEL alone


def gate_of(request) -> LogGate:
    """The gate a launcher of ``request`` (a ``backends.base.CompileRequest``) reads."""
    return request.log_gate or ENVIRONMENT


def uses_gate(kernel: ir.Kernel) -> bool:
    """Whether ``kernel`` (its ``@dsl.func`` bodies included) has a levelled ``dsl.log`` call,
    and so takes the threshold as a hidden argument."""
    bodies = [list(kernel.body)] + [list(f.body) for f in kernel.funcs]
    return any(isinstance(n, ir.Log) and n.level != "print" for body in bodies for n in ir.walk(body))


def effective(floor: str, gate: LogGate) -> str:
    """The lowest level that prints in an interpreted launch: the floor or the threshold, the higher."""
    level = gate.level_name()
    return level if _NUMBER[level] > _NUMBER[floor] else floor
