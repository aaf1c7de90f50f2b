"""Run a benchmark script in a process that Linux never grants AMX, so onnxruntime (MLAS) takes
the AVX-512 VNNI kernels it runs on a CPU without AMX, such as AMD Zen 4 (issue 29's reference).

``OPDSL_CPU`` (docs/ops.md) restricts what opdsl compiles for; onnxruntime reads the CPU itself
and asks Linux for the AMX tile data (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``),
using AMX only when that is granted.  A seccomp filter installed here makes every
``arch_prctl`` asking for or reading that permission fail with EPERM (the process and whatever it
starts); all other system calls pass.  Linux x86-64 only.

Usage: PYTHONPATH=. OPDSL_CPU=zen4 python -m benchmarks.without_amx benchmarks/bench_int8.py 10 "" 1
"""
import ctypes
import errno
import runpy
import struct
import sys

SYS_ARCH_PRCTL = 158
ARCH_GET_XCOMP_PERM, ARCH_REQ_XCOMP_PERM = 0x1022, 0x1023
AUDIT_ARCH_X86_64 = 0xC000003E
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
# classic BPF opcodes: load a word of seccomp_data, jump if equal, return
LD_W_ABS, JEQ_K, RET_K = 0x20, 0x15, 0x06
NR, ARCH, ARG0 = 0, 4, 16  # offsets in struct seccomp_data


def _filter() -> bytes:
    """allow unless (x86-64 and arch_prctl and arg0 in {GET, REQ} XCOMP_PERM): then EPERM."""
    deny = SECCOMP_RET_ERRNO | errno.EPERM
    prog = [
        (LD_W_ABS, 0, 0, ARCH),
        (JEQ_K, 0, 5, AUDIT_ARCH_X86_64),      # another ABI: allow
        (LD_W_ABS, 0, 0, NR),
        (JEQ_K, 0, 3, SYS_ARCH_PRCTL),         # another call: allow
        (LD_W_ABS, 0, 0, ARG0),
        (JEQ_K, 2, 0, ARCH_REQ_XCOMP_PERM),
        (JEQ_K, 1, 0, ARCH_GET_XCOMP_PERM),
        (RET_K, 0, 0, SECCOMP_RET_ALLOW),
        (RET_K, 0, 0, deny),
    ]
    return b"".join(struct.pack("HBBI", *ins) for ins in prog)


def deny_amx() -> None:
    """Install the filter in this process (irreversible; inherited by threads and children)."""
    libc = ctypes.CDLL(None, use_errno=True)
    code = _filter()
    buf = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(code) // 8, ctypes.addressof(buf))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    deny_amx()
    script, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
