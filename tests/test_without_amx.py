"""benchmarks/without_amx.py: the script it runs is refused the AMX permission (what keeps
onnxruntime off AMX) and nothing else."""
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
def arch_prctl(code, arg):
    ok = libc.syscall(ctypes.c_long(158), ctypes.c_long(code), arg) == 0
    return "ok" if ok else f"errno {ctypes.get_errno()}"
mask = ctypes.c_ulong(0)
fs = ctypes.c_ulong(0)
print(arch_prctl(0x1023, ctypes.c_long(18)), arch_prctl(0x1022, ctypes.byref(mask)),
      arch_prctl(0x1003, ctypes.byref(fs)), sys.argv[1:])
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64", reason="Linux x86-64 only")
def test_the_amx_permission_is_refused_and_other_calls_pass(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    done = subprocess.run([sys.executable, "-m", "benchmarks.without_amx", str(script), "a", "b"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0 and "prctl(PR_SET_" in done.stderr:  # a kernel or sandbox without seccomp filters
        pytest.skip(f"this host cannot install a seccomp filter: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
    # ARCH_REQ_XCOMP_PERM and ARCH_GET_XCOMP_PERM: EPERM (1); ARCH_GET_FS passes; the arguments reach the script
    assert done.stdout.split("\n")[0] == "errno 1 errno 1 ok ['a', 'b']"
