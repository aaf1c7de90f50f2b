"""A plan's launch values, frozen once so that every later launch of them skips the per-call work.

A model replays the same launches with the same argument objects on every run.  ``NumbaLauncher``
spends ~3 µs of a ~5 µs launch on things those arguments decide once and for all: adapting the
scalars to their exact numpy types, adding up the tensors' sizes (the serial-or-parallel test)
and numba's dispatcher typing all ~30 arguments to find the compiled entry point.  ``freeze``
does the first two once and checks that the values have exactly the types of the launcher's
compiled signature; a ``Frozen`` tuple then goes straight to the entry point's machine code.

Calling an entry point without the dispatcher is only safe for values of the compiled types (a
wrong rank would be read as garbage), which is why only ``freeze`` makes ``Frozen`` tuples, and
only after ``matches`` confirms every value; immutability keeps them that way.  ``matches`` is not
an argument check -- a user's arguments were checked, and their errors raised, once by
dsl/runtime/arg_check.py when ``Kernel.prepare`` bound them -- but the machine-code guard this
backend owes its entry points whoever calls ``freeze``.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numba
import numpy as np
from numba import types as nbt


class Frozen(tuple):
    """Launch values, adapted and type-checked once (``freeze``); ``size``: their tensors' elements."""

    size: int

    def with_values(self, values: Sequence) -> "Frozen":
        """The same launch with other arrays of the very same types (dtype, rank, C-contiguous):
        a model run binding the caller's feeds and fresh outputs (dsl/opgraph/binding.py).  The
        caller guarantees the types (``dsl.runtime.arg_check.rebinds``); nothing is checked here."""
        out = Frozen(values)
        out.size = self.size
        return out


def matches(values: Sequence, sig: Tuple) -> bool:
    """Whether ``values`` have exactly the numba types of ``sig``, one for one (arrays:
    C-contiguous, same dtype and rank, read-only allowed; scalars: the same type)."""
    if len(values) != len(sig):
        return False
    for v, want in zip(values, sig):
        if isinstance(want, nbt.Array):
            if (type(v) is not np.ndarray or not v.flags.c_contiguous or v.ndim != want.ndim
                    or numba.from_dtype(v.dtype) != want.dtype):
                return False
        elif isinstance(v, np.ndarray) or numba.typeof(v) != want:
            return False
    return True


def freeze(values: Sequence, tensors: Sequence[int], sig: Tuple) -> Optional[Frozen]:
    """``values`` (already adapted) as a ``Frozen`` tuple, or None if they do not match ``sig``
    (the kernel parameters' types, without the grid and hidden arguments)."""
    if not matches(values, sig):
        return None
    out = Frozen(values)
    out.size = sum(values[i].size for i in tensors)
    return out
