"""Ctrl-C for compiled launches: a SIGINT counter that generated code polls.

A numba launch runs machine code with the GIL released on the calling thread, and an OpenCL
launch waits in the driver; CPython's own SIGINT handler only sets a flag that the interpreter
looks at between bytecodes, so neither would stop before the kernel ends.  This module
installs a small C-level handler (a few lines of LLVM IR, JIT-compiled once) that increments
``COUNTER[0]`` and then calls the handler it replaced -- CPython's, so the Python-level
handler (``default_int_handler``, ipykernel's, a user's) still runs as usual.

A launch reads the counter before it starts (``arm``) and passes the array and that value to
the kernel as hidden arguments (never a baked-in address: compiled code is shared between
processes through the disk cache).  Loops poll ``COUNTER[0] != start`` with an atomic load and
stop; afterwards ``check`` raises KeyboardInterrupt.  A counter rather than a flag: nothing
ever clears it, so concurrent launches in several threads each see the interrupt, and a
SIGINT that arrived before a launch does not stop it.

The handler is installed lazily, at the first compiled launch made from any thread (sigaction
is process-wide; a program whose main thread only waits for worker threads that launch must
be interruptible too), and again whenever the Python-level handler changed since
(``signal.signal`` replaces the C handler, which is detected by the identity of
``signal.getsignal``).  Where SIGINT is ignored
or has its default action, nothing is installed.  Linux and macOS only (sigaction); elsewhere
launches are not interruptible.
"""
from __future__ import annotations

import _signal  # signal.getsignal's C function: the wrapper's enum conversion costs 1.6 us a call
import ctypes
import signal
import sys
import threading

import numpy as np

COUNTER = np.zeros(1, np.int64)  # process-lifetime: the C handler holds its address
_read = memoryview(COUNTER)      # _read[0]: the counter as a Python int, ~30 ns

_UNSET = object()
_SIGINT = int(signal.SIGINT)
_seen = _UNSET                   # the Python-level SIGINT handler when we last (re)installed
_verified = 0                    # the counter when we last made sure the C handler is ours
_lock = threading.Lock()
_jit = None                      # (engine, handler address, globals) once compiled
_failure = ""                    # why the handler cannot be installed here ('' = it can)

_HANDLER_IR = """
@opdsl_counter = global ptr null
@opdsl_prev = global ptr null
@opdsl_prev_siginfo = global i32 0

define void @opdsl_sigint(i32 %sig, ptr %info, ptr %ctx) {
entry:
  %counter = load volatile ptr, ptr @opdsl_counter
  %old = atomicrmw add ptr %counter, i64 1 seq_cst
  %prev = load volatile ptr, ptr @opdsl_prev
  %siginfo = load volatile i32, ptr @opdsl_prev_siginfo
  %three = icmp ne i32 %siginfo, 0
  br i1 %three, label %call3, label %call1
call3:
  call void %prev(i32 %sig, ptr %info, ptr %ctx)
  ret void
call1:
  call void %prev(i32 %sig)
  ret void
}
"""

if sys.platform.startswith("linux"):
    _SA_SIGINFO = 4
    _SA_RESETHAND = ctypes.c_int(0x80000000).value

    class _Sigaction(ctypes.Structure):  # glibc's struct sigaction (x86-64, aarch64)
        _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                    ("restorer", ctypes.c_void_p)]
elif sys.platform == "darwin":
    _SA_SIGINFO = 0x40
    _SA_RESETHAND = 0x4

    class _Sigaction(ctypes.Structure):  # type: ignore[no-redef]
        _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_uint32), ("flags", ctypes.c_int)]
else:  # pragma: no cover - no sigaction
    _Sigaction = None
    _failure = f"no sigaction on {sys.platform}"


def arm() -> int:
    """Make sure the handler is in place (cheap when nothing changed); the counter's value now.

    Checked again after every SIGINT (the counter moved): the handler we chain to may take itself
    out when it runs -- PoCL's is LLVM's crash-cleanup handler, which restores the handler it
    found (Python's) and re-raises, so without this only the first Ctrl-C of a process stopped an
    OpenCL or numba launch."""
    if _read[0] != _verified or _signal.getsignal(_SIGINT) is not _seen:
        _install()
    return _read[0]


def refresh() -> None:
    """Check SIGINT's C handler again at the next ``arm``: a driver replaced it behind Python's
    back (PoCL installs its own SIGINT handler when its device is created)."""
    global _seen
    _seen = _UNSET


def interrupted(start: int) -> bool:
    return _read[0] != start


def check(start: int) -> None:
    """Raise KeyboardInterrupt if SIGINT arrived since ``start`` (the launch stopped early)."""
    if _read[0] != start:
        raise KeyboardInterrupt("opdsl launch interrupted")


def installed() -> bool:
    """Whether the C-level handler is SIGINT's current handler (tests, diagnostics)."""
    if _jit is None or _Sigaction is None:
        return False
    return _current().handler == _jit[1]


def reason() -> str:
    """'' when launches can be interrupted here, else why not."""
    return _failure


def _libc():
    lib = ctypes.CDLL(None, use_errno=True)
    lib.sigaction.argtypes = [ctypes.c_int, ctypes.POINTER(_Sigaction), ctypes.POINTER(_Sigaction)]
    lib.sigaction.restype = ctypes.c_int
    return lib


def _current() -> "_Sigaction":
    old = _Sigaction()
    if _libc().sigaction(signal.SIGINT, None, ctypes.byref(old)) != 0:
        raise OSError(ctypes.get_errno(), "sigaction(SIGINT) failed")
    return old


def _compile():
    """JIT the handler once; its globals are filled in by _install."""
    global _jit
    if _jit is None:
        import llvmlite.binding as llvm
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        mod = llvm.parse_assembly(_HANDLER_IR)
        mod.verify()
        tm = llvm.Target.from_default_triple().create_target_machine()
        engine = llvm.create_mcjit_compiler(mod, tm)
        engine.finalize_object()
        glob = {n: engine.get_global_value_address(n) for n in ("opdsl_counter", "opdsl_prev", "opdsl_prev_siginfo")}
        ctypes.c_void_p.from_address(glob["opdsl_counter"]).value = COUNTER.ctypes.data
        _jit = (engine, engine.get_function_address("opdsl_sigint"), glob)
    return _jit


def _install() -> None:
    """Put our handler in front of SIGINT's current C handler (from any thread: sigaction is
    process-wide, and the lock keeps two threads from chaining our handler to itself)."""
    global _seen, _failure, _verified
    if _Sigaction is None:
        return
    with _lock:
        python_handler = _signal.getsignal(_SIGINT)
        count = _read[0]
        if python_handler is _seen and count == _verified:
            return  # another thread installed it while this one waited
        try:
            _, ours, glob = _compile()
            old = _current()
            if old.handler not in (None, 0, 1, ours):  # a real handler (not SIG_DFL/SIG_IGN, not already us)
                ctypes.c_void_p.from_address(glob["opdsl_prev"]).value = old.handler
                ctypes.c_int32.from_address(glob["opdsl_prev_siginfo"]).value = 1 if old.flags & _SA_SIGINFO else 0
                new = _Sigaction()
                ctypes.memmove(ctypes.byref(new), ctypes.byref(old), ctypes.sizeof(_Sigaction))
                new.handler = ours
                # we pass (sig, info, ctx) on; other flags as the replaced handler had them, except
                # one-shot (LLVM's handler in PoCL is): ours stays until the one it calls removes it
                new.flags = (old.flags | _SA_SIGINFO) & ~_SA_RESETHAND
                if _libc().sigaction(signal.SIGINT, ctypes.byref(new), None) != 0:
                    raise OSError(ctypes.get_errno(), "sigaction(SIGINT) failed")
            _failure = ""
        except Exception as e:  # never let Ctrl-C support break a launch
            _failure = f"cannot install the SIGINT handler: {type(e).__name__}: {e}"
        _seen = python_handler
        _verified = count
