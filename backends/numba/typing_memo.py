"""numba's typing of a call, resolved once per (function, argument types) inside one compile.

numba types every call site on its own: for each ``sm.vfma(a, b, c)`` or ``i + 1`` it orders the
function's templates for the target, instantiates them, and asks each in turn (operators first try
NumPy's ufunc rules, which search the ufunc's loops), even when the same function was resolved for
the same argument types a few lines before.  A generated register tile repeats a handful of such
calls hundreds of times: conv_pointwise's ``thread`` makes ~4,200 resolutions of a few hundred
distinct ones.  The answer depends only on the function type, the typing context, the target and
the argument types (literal values included: they are part of a literal type), so inside opdsl's
compiles (``memoized()``, entered by ``link_once.compiling``) a repeated question gets the first
answer.  Failures are not remembered (numba reports them per call site), nor calls with keyword
arguments.  The memo lives for one outermost compile: templates registered later in the process
are seen by the next compile.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Dict, Iterator, Optional

from numba.core.target_extension import get_local_target
from numba.core.types import functions as numba_functions

_original = numba_functions.BaseFunction.get_call_type
_memo: Optional[Dict] = None  # active only inside memoized(), which runs under numba's compiler lock


def _get_call_type(self, context, args, kws):
    memo = _memo
    if memo is None or kws:
        return _original(self, context, args, kws)
    try:
        key = (self, context, get_local_target(context), args)
        sig = memo.get(key)
    except TypeError:  # an unhashable argument type: ask numba
        return _original(self, context, args, kws)
    if sig is None:
        sig = memo[key] = _original(self, context, args, kws)
    return sig


@contextmanager
def memoized() -> Iterator[None]:
    """Call typing remembered inside this block (the caller holds numba's global compiler lock;
    nested blocks share the outermost one's memo)."""
    global _memo
    if _memo is not None:
        yield
        return
    _memo = {}
    before = numba_functions.BaseFunction.get_call_type
    numba_functions.BaseFunction.get_call_type = _get_call_type
    try:
        yield
    finally:
        numba_functions.BaseFunction.get_call_type = before
        _memo = None
