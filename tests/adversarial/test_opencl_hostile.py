"""Hostile conditions for the OpenCL backend, each case in its own process (a crash fails that case):
8 threads launching at once, nonsense device settings, a corrupt or unusable cache, a probe child
that crashes, no platform at all."""
import os
import shutil
import stat
import textwrap

import pytest

from tests.adversarial.isolated import run

pytest.importorskip("pyopencl")


def _usable() -> str:
    from backends import base
    return base.get("opencl").available()


needs_device = pytest.mark.skipif(bool(_usable()), reason=f"opencl: {_usable()}")


def _script(tmp_path, code: str, name: str = "case.py") -> str:
    """Kernels must live in a file: write ``code`` to one and return the snippet that runs it."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return f"import runpy; runpy.run_path({str(path)!r}, run_name='__main__')"


LEAKY = """
import numpy as np, dsl
from dsl import In, Out, f32

@dsl.kernel
def leaky(x: In[f32], y: Out[f32], alpha: f32 = 0.01):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        y.flat[i] = v if v > 0 else alpha * v

def check_leaky():
    x = np.linspace(-2, 2, 301).astype(np.float32)
    y = np.zeros_like(x)
    leaky(x, y, alpha=0.5, backend="opencl")
    assert np.array_equal(y, np.where(x > 0, x, np.float32(0.5) * x)), y
    print("LEAKY-OK")
"""


@needs_device
@pytest.mark.parametrize("round_", range(3))
def test_eight_threads_launch_generated_and_raw_kernels_at_once(tmp_path, round_):
    out = run(_script(tmp_path, LEAKY + """
import threading
from ops import opencl as raw_ops

rng = np.random.default_rng(7)
xs = [rng.standard_normal(500 + 37 * k).astype(np.float32) for k in range(8)]
errors = []

def work(k):
    try:
        for _ in range(6):
            y = np.zeros_like(xs[k])
            leaky(xs[k], y, alpha=0.25, backend="opencl")
            assert np.array_equal(y, np.where(xs[k] > 0, xs[k], np.float32(0.25) * xs[k]))
            a = xs[k][:64].reshape(8, 8).copy()
            np.testing.assert_allclose(raw_ops.gemm(a, a), a @ a, rtol=1e-4, atol=1e-4)
    except BaseException as e:
        errors.append(repr(e))

threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
for t in threads: t.start()
for t in threads: t.join()
assert not errors, errors
print("THREADS-OK")
"""), timeout=600)
    assert "THREADS-OK" in out.stdout


@pytest.mark.parametrize("setting", ["nonexistent", "oclgrind:-1", "oclgrind:abc", "oclgrind:99999999999999999999",
                                     "x" * 5000, "\u00e9\u4e2d\u6587", "portable:0:1", ":999"])
def test_nonsense_device_settings_are_reasons_not_crashes(setting):
    out = run("""
        from backends import base
        b = base.get("opencl")
        reason = b.available()
        print("REASON" if reason else "USABLE", repr(reason[:300]))
        print("DEVICE", repr(b.device()))
    """, env={"OPDSL_OPENCL_DEVICE": setting})
    reason_line = out.stdout.splitlines()[0]
    if reason_line.startswith("REASON"):
        assert "OPDSL_OPENCL_DEVICE=" in reason_line, out.stdout
        assert "DEVICE ''" in out.stdout


@pytest.fixture(scope="module")
def probed_cache(tmp_path_factory):
    """A cache folder after one OpenCL launch in a child, its probe entries written: made once for
    the corrupt-entry cases below, each of which corrupts a copy (one child process less per case)."""
    folder = tmp_path_factory.mktemp("probed")
    run(_script(folder, LEAKY + "check_leaky()\n"), env={"OPDSL_CACHE_DIR": str(folder / "cache")})
    return folder / "cache"


@needs_device
@pytest.mark.parametrize("garbage", [b"", b"\x00\xff" * 100, b"not json", b'[1, 2]', b'{"identity": 1}'])
def test_a_corrupt_probe_cache_means_probing_again(tmp_path, garbage, probed_cache):
    cache_dir = tmp_path / "cache"
    shutil.copytree(probed_cache, cache_dir)  # modes too: the cache accepts only a private folder
    entries = list((cache_dir / "opencl-probe").glob("*.json"))
    assert entries
    for e in entries:
        e.write_bytes(garbage)
    out = run(_script(tmp_path, LEAKY + """
from backends import cache
from backends.opencl import devices as d
stored = [d._entry_name(r.identity) for r in d.survey()]
check_leaky()
""" + ("" if not garbage.startswith(b"{") else """
import json
# a well-formed entry naming another identity or a non-string reason is ignored, then replaced
for name in stored:
    data = json.loads(cache.load("opencl-probe", name).decode())
    assert isinstance(data["reason"], str), data
""")), env={"OPDSL_CACHE_DIR": str(cache_dir)})
    assert "LEAKY-OK" in out.stdout


@needs_device
@pytest.mark.parametrize("kind", ["a-file", "read-only", "too-long", "world-writable"])
def test_an_unusable_cache_means_building_in_memory(tmp_path, kind):
    if kind == "a-file":
        where = tmp_path / "file"
        where.write_text("not a folder")
    elif kind == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        where = tmp_path / "ro"
        where.mkdir()
        where.chmod(stat.S_IRUSR | stat.S_IXUSR)
    elif kind == "world-writable":  # fails the cache's ownership checks (docs/cache.md)
        where = tmp_path / "shared"
        where.mkdir()
        where.chmod(0o777)
    else:
        where = tmp_path.joinpath(*[c * 250 for c in "defghijklmnopqrstu"])  # over PATH_MAX (4096)
    out = run(_script(tmp_path, LEAKY + "check_leaky()\ncheck_leaky()\n"), env={"OPDSL_CACHE_DIR": str(where)})
    assert out.stdout.count("LEAKY-OK") == 2
    if kind != "too-long":
        assert not (where / "opencl").exists()  # nothing written into it


@needs_device
def test_a_probe_child_that_crashes_is_that_devices_reason(tmp_path):
    fake = tmp_path / "crashing-python"
    fake.write_text("#!/bin/sh\n"  # argv: -c BOOT FILE pi:di ...; claim the first device, then die
                    'first="$4"; echo "{\\"index\\": [${first%%:*}, ${first##*:}], \\"started\\": true}"\n'
                    "kill -SEGV $$\n")
    fake.chmod(0o755)
    out = run(f"""
        import sys
        from backends.opencl import devices as d
        found, _ = d.discover()
        reports = [r for r, _ in found]
        sys.executable = {str(fake)!r}
        results = d.probe_in_child(reports)
        assert set(results) == {{r.index for r in reports}}, results
        for r in reports:
            assert "crashed the process (signal 11)" in results[r.index], results
        print("CRASH-REASONS-OK")
    """, env={"OPDSL_CACHE_DIR": str(tmp_path / "cache")})
    assert "CRASH-REASONS-OK" in out.stdout


def test_no_platform_at_all_is_a_reason_and_the_demo_skips(tmp_path):
    out = run("""
        import pyopencl as cl
        def none():
            raise cl.LogicError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")
        cl.get_platforms = none
        from backends import base
        reason = base.get("opencl").available()
        assert "no OpenCL platform found" in reason, reason
        assert base.get("opencl").devices() == []
        from dsl.cli import demo
        demo.run(["opencl"])
    """, env={"OPDSL_CACHE_DIR": str(tmp_path / "cache")})
    assert "skipped: no OpenCL platform found" in out.stdout


@needs_device
def test_a_launch_after_a_sanitizer_report_still_works(tmp_path):
    out = run(_script(tmp_path, LEAKY + """
@dsl.kernel(threads=2)
def overread(x: In[f32], y: Out[f32]):
    y.flat[dsl.thread_id()] = x.flat[dsl.thread_id() + 5]

from backends.opencl import runtime as rt
try:
    overread(np.ones(2, np.float32), np.zeros(2, np.float32), backend="opencl")
    print("NO-REPORT", rt.device().report.kind)
except dsl.LaunchError as e:
    print("REPORTED", type(e).__name__)
check_leaky()
"""), env={"OPDSL_OPENCL_DEVICE": "oclgrind"} if "oclgrind" in str(_devices()).lower() else {})
    assert "LEAKY-OK" in out.stdout
    if "REPORTED" not in out.stdout:
        assert "NO-REPORT" in out.stdout and "simulator" not in out.stdout  # only Oclgrind checks accesses


def _devices():
    from backends import base
    return base.get("opencl").devices()
