"""OpenCL device discovery: the probe, the ranking, the simulator fallback, reasons for unusable
devices, driver failures told apart from kernel errors, scratch against local memory."""
import io
import os
import warnings

import numpy as np
import pytest

import dsl
from dsl import In, Out, f32

pyopencl = pytest.importorskip("pyopencl")

from backends.opencl import devices as devices  # noqa: E402
from backends.opencl import runtime as rt  # noqa: E402
from tests.adversarial.isolated import run as isolated  # noqa: E402


def _report(kind, index, platform="P", name="D"):
    return devices.DeviceReport(platform, f"{name}{index[1]}", kind, f"{platform}|{name}|{index}", index)


@pytest.fixture
def fake_machine(monkeypatch):
    """Devices with given kinds and probe reasons, instead of this machine's; restores the real device after."""
    state = {}

    def install(specs):
        found = [(_report(kind, (0, i)), object()) for i, (kind, _) in enumerate(specs)]
        reasons = {(0, i): why for i, (_, why) in enumerate(specs)}
        state["probed"] = []

        def fake_probe(reports):
            state["probed"] += [r.index for r in reports]
            return {r.index: reasons[r.index] for r in reports}

        monkeypatch.setattr(devices, "discover", lambda: (found, []))
        monkeypatch.setattr(devices, "probe_in_child", fake_probe)
        monkeypatch.setattr(devices, "probe_here_by_index", lambda index: reasons[index])
        monkeypatch.setattr(devices, "_warned_simulator", False)
        monkeypatch.setattr(devices, "_remember", lambda identity, reason: None)
        monkeypatch.setattr(devices, "_load_remembered", lambda identity: None)
        devices.forget()
        return state

    yield install
    devices.forget()  # the real device of this process (rt.device()) is left alone


def test_kinds_simulator_by_platform_name_even_with_the_gpu_bit():
    t = pyopencl.device_type
    assert devices.kind_of("Oclgrind", t.ALL) == "simulator"
    assert devices.kind_of("NVIDIA CUDA", t.GPU) == "gpu"
    assert devices.kind_of("Portable Computing Language", t.CPU) == "cpu"
    assert devices.kind_of("Xilinx", t.ACCELERATOR) == "accelerator"


def test_ranking_gpu_then_accelerator_then_cpu_then_simulator(fake_machine):
    fake_machine([("simulator", ""), ("cpu", ""), ("gpu", ""), ("accelerator", ""), ("gpu", "")])
    order = [r.index for r, _ in devices.ranked(devices.discover()[0])]
    assert order == [(0, 2), (0, 4), (0, 3), (0, 1), (0, 0)]


def test_first_usable_in_rank_order_and_better_devices_keep_their_reason(fake_machine):
    state = fake_machine([("cpu", ""), ("gpu", "clBuildProgram: LLVM ERROR"), ("simulator", "")])
    _, report, reports = devices.choose("")
    assert report.index == (0, 0) and report.chosen and report.usable
    by_index = {r.index: r for r in reports}
    assert by_index[(0, 1)].usable is False and "LLVM ERROR" in by_index[(0, 1)].reason
    assert by_index[(0, 2)].usable is None  # never probed: a better device works
    assert state["probed"] == [(0, 1), (0, 0)]


def test_simulator_fallback_warns_once_with_a_filterable_category(fake_machine):
    fake_machine([("cpu", "error: unknown target CPU 'generic'"), ("simulator", "")])
    with pytest.warns(devices.SimulatorWarning, match="unknown target CPU") as seen:
        _, report, _ = devices.choose("")
        devices.choose("")
    assert report.kind == "simulator" and len(seen) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        devices.choose("")  # no second warning in this process


def test_no_usable_device_lists_every_reason(fake_machine):
    fake_machine([("gpu", "the probe crashed the process (signal 11)"), ("cpu", "unknown target CPU 'generic'")])
    with pytest.raises(devices.NoDevice) as e:
        devices.choose("")
    msg = str(e.value)
    assert "no usable OpenCL device" in msg and "signal 11" in msg and "unknown target CPU" in msg
    assert "'D0' on 'P' (gpu)" in msg and "'D1' on 'P' (cpu)" in msg and "OPDSL_OPENCL_DEVICE" in msg


def test_forced_device_is_probed_too(fake_machine):
    fake_machine([("gpu", ""), ("cpu", "the probe program does not build: error: unknown target CPU")])
    with pytest.raises(devices.NoDevice, match=r"OPDSL_OPENCL_DEVICE='p:1' picks 'D1' on 'P', which is unusable: .*"
                                                r"unknown target CPU"):
        devices.choose("p:1")
    _, report, _ = devices.choose("P:0")
    assert report.chosen and report.index == (0, 0)


def test_this_machine_picks_the_best_usable_device():
    reason = rt.unavailable_reason()
    if reason:
        assert "no usable OpenCL device" in reason or "OPDSL_OPENCL_DEVICE" in reason or "platform" in reason
        pytest.skip(f"opencl: {reason}")
    reports = rt.reports()
    chosen = [r for r in reports if r.chosen]
    assert len(chosen) == 1 and chosen[0].usable and rt.device().identity == chosen[0].identity
    for r in reports:
        assert r.usable is not False or r.reason  # an unusable device always says why
    if not os.environ.get("OPDSL_OPENCL_DEVICE"):
        better = [r for r in reports if devices.RANKS.index(r.kind) < devices.RANKS.index(chosen[0].kind)]
        assert all(r.usable is False for r in better)
    from backends import base
    assert chosen[0].description in base.get("opencl").device()


def test_probe_in_a_child_survives_a_failing_child_and_goes_on():
    found, _ = devices.discover()
    real = [r for r, _ in found]
    bogus = devices.DeviceReport("P", "ghost", "gpu", "ghost-identity", (99, 0))
    results = devices.probe_in_child([bogus, *real])
    assert "the probe process failed" in results[(99, 0)] and "IndexError" in results[(99, 0)]
    assert set(results) == {(99, 0), *(r.index for r in real)}
    assert (99, 0) in devices._TRANSIENT  # not a driver verdict: never remembered on disk
    devices._TRANSIENT.discard((99, 0))


def test_probe_results_are_remembered_on_disk(tmp_path):
    code = """
        import json, subprocess
        from backends import base, cache
        from backends.opencl import devices as d
        calls = []
        real = subprocess.run
        def spy(*a, **k):
            calls.append(a)
            return real(*a, **k)
        subprocess.run = spy
        reason = base.get("opencl").available()
        print(json.dumps({"children": len(calls), "usable": not reason,
                          "entries": len(list((cache.cache_root() / "opencl-probe").glob("*.json")))}))
    """
    env = {"OPDSL_CACHE_DIR": str(tmp_path / "cache"), "OPDSL_OPENCL_PROBE": None}
    import json
    first = json.loads(isolated(code, env=env).stdout.strip().splitlines()[-1])
    second = json.loads(isolated(code, env=env).stdout.strip().splitlines()[-1])
    if not first["entries"]:
        pytest.skip("no OpenCL device to probe here")
    assert first["children"] >= 1 and second["children"] == 0
    assert first["usable"] == second["usable"] and second["entries"] == first["entries"]


def test_in_process_probe_gives_the_same_verdicts(monkeypatch):
    found, _ = devices.discover()
    child = devices.probe_in_child([r for r, _ in found])
    for r, dev in found:
        assert (devices.probe_here(dev) == "") == (child[r.index] == "")


def test_driver_failure_is_told_apart_from_a_program_error():
    reason = rt.unavailable_reason()
    if reason:
        pytest.skip(f"opencl: {reason}")
    dev = rt.device().device
    assert "driver failed" in devices.driver_failure("error: unknown target CPU 'generic'", dev)
    assert devices.driver_failure("<source>:3:5: error: use of undeclared identifier 'q'", dev) == ""


# ---------------------------------------------------------------- through the backend

@dsl.kernel(threads=4)
def copy_kernel(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i]


@pytest.fixture
def opencl():
    reason = rt.unavailable_reason()
    if reason:
        pytest.skip(f"opencl: {reason}")


@dsl.kernel(threads=2)
def typo_kernel(x: Out[f32]):
    dsl.sync()
    x.flat[0] = 1.0


def test_a_driver_failure_is_a_driver_error_not_a_compile_error(opencl, monkeypatch):
    from backends.opencl import render as opencl
    monkeypatch.setattr(opencl.OpenCLRenderer, "barrier", "barrier_typo(CLK_LOCAL_MEM_FENCE);")
    monkeypatch.setattr(rt, "_build_log", lambda prg, dev, fallback: "error: unknown target CPU 'generic'")
    with pytest.raises(rt.DriverError) as e:
        typo_kernel(np.zeros(1, np.float32), backend="opencl")
    assert not isinstance(e.value, dsl.CompileError)
    assert rt.device().description in str(e.value) and "unknown target CPU" in str(e.value)


def test_a_kernel_build_error_names_the_device(opencl, monkeypatch):
    from backends.opencl import render as opencl
    monkeypatch.setattr(opencl.OpenCLRenderer, "barrier", "barrier_typo(CLK_LOCAL_MEM_FENCE);")
    with pytest.raises(dsl.CompileError) as e:
        typo_kernel(np.zeros(1, np.float32), backend="opencl")
    assert rt.device().description in str(e.value) and "barrier_typo" in str(e.value)


def _script(tmp_path, code):
    """Kernels must live in a file: write ``code`` to one and return the snippet that runs it."""
    import textwrap
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(code))
    return f"import runpy; runpy.run_path({str(path)!r}, run_name='__main__')"


def test_no_device_is_not_reported_as_a_fault_in_the_kernel(tmp_path):
    out = isolated(_script(tmp_path, """
        import numpy as np, dsl
        from dsl import In, Out, f32
        @dsl.kernel
        def k(x: In[f32], y: Out[f32]):
            y.flat[0] = x.flat[0]
        try:
            k(np.ones(1, np.float32), np.zeros(1, np.float32), backend="opencl")
        except dsl.CompileError as e:
            print("COMPILE-ERROR", e)
        except RuntimeError as e:
            print(type(e).__name__, e)
    """), env={"OPDSL_OPENCL_DEVICE": "no-such-platform"})
    assert "COMPILE-ERROR" not in out.stdout
    assert out.stdout.startswith("NoDevice") and "no platform name contains 'no-such-platform'" in out.stdout


def test_scratch_larger_than_local_memory_is_a_compile_error_naming_it(opencl, monkeypatch):
    @dsl.kernel(threads=2)
    def big_scratch(x: In[f32], y: Out[f32]):
        small = dsl.scratch((16,), f32)
        huge = dsl.scratch((300,), f32)  # 1200 bytes: more than the 1 KiB device below
        t = dsl.thread_id()
        small[t] = x[t]
        huge[t] = x[t]
        dsl.sync()
        y[t] = small[1 - t] + huge[1 - t]

    x = np.array([1, 2], np.float32)
    y = np.zeros(2, np.float32)
    monkeypatch.setattr(rt.device(), "local_mem_size", 1024)
    with pytest.raises(dsl.CompileError) as e:
        big_scratch(x, y, backend="opencl")
    msg = str(e.value)
    assert "scratch 'huge'" in msg and "1200 bytes" in msg and "1264 bytes" in msg and "1024 bytes" in msg
    assert rt.device().description in msg and "huge = dsl.scratch((300,), f32)" in msg  # the buffer's line
    monkeypatch.undo()
    big_scratch(x, y, backend="opencl")  # fits the real device
    np.testing.assert_array_equal(y, 2 * x[::-1])


def test_demo_and_html_repr_name_the_device(opencl):
    from dsl.cli import demo
    out = io.StringIO()
    assert demo.run(["opencl"], repeat=1, out=out) == 0
    where = rt.device().description
    assert f"runs on {where}" in out.getvalue()
    y = np.zeros(3, np.float32)
    copy_kernel(np.ones(3, np.float32), y, backend="opencl")
    assert where.replace("'", "&#x27;") in copy_kernel._repr_html_()


def test_demo_names_each_reason_when_no_device_is_usable():
    out = isolated("from dsl.cli import demo; demo.run(['opencl'])",
                   env={"OPDSL_OPENCL_DEVICE": "no-such-platform"}, expect_ok=False)
    assert "opencl" in out.stdout and "skipped: OPDSL_OPENCL_DEVICE='no-such-platform'" in out.stdout
