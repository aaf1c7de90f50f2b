"""OpenCL backend specifics: team mapping, storage dtypes, atomics, logging, readable and
stable source, build errors mapped to Python lines, device capability errors, caching."""
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import dsl
from dsl import In, InOut, Out, bf16, f16, f32, f64, i32, i64, u32

pytestmark = pytest.mark.usefixtures("opencl")


@pytest.fixture(scope="module")
def opencl():
    from backends import base
    reason = base.get("opencl").available()
    if reason:
        pytest.skip(f"opencl: {reason}")


# ---------------------------------------------------------------- team model

@dsl.kernel(threads=4, grid=3)
def team_sum(x: In[f32, 2], out: Out[f32]):
    """One tile per row: each thread sums a strided share, then a tree reduction in scratch."""
    buf = dsl.scratch((4,), f32)
    t = dsl.thread_id()
    row = dsl.tile_id()
    acc = 0.0
    for j in range(t, x.shape[1], dsl.num_threads()):
        acc += x[row, j]
    buf[t] = acc
    dsl.sync()
    step = dsl.num_threads() // 2
    while step > 0:
        if t < step:
            buf[t] = buf[t] + buf[t + step]
        dsl.sync()
        step = step // 2
    if t == 0:
        out[row] = buf[0]


def test_scratch_sync_and_grid():
    x = np.random.default_rng(1).standard_normal((3, 37)).astype(np.float32)
    out = np.zeros(3, np.float32)
    team_sum(x, out, backend="opencl")
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-5)


@dsl.kernel(threads=4)
def neighbours(out: Out[i64]):
    """Thread t reads what thread t+1 wrote before the barrier."""
    buf = dsl.scratch((4,), i64)
    t = dsl.thread_id()
    buf[t] = t * 10 + dsl.tile_id()
    dsl.sync()
    out[dsl.tile_id() * 4 + t] = buf[(t + 1) % dsl.num_threads()]


def test_neighbour_reads_after_sync_across_tiles():
    out = np.zeros(8, np.int64)
    neighbours(out, backend="opencl", grid=2)
    np.testing.assert_array_equal(out, [10, 20, 30, 0, 11, 21, 31, 1])


@dsl.kernel(threads=4, grid=2)
def atomics(x: In[f32], fsum: InOut[f32], isum: InOut[i32], usum: InOut[u32], lsum: InOut[i64],
            dsum: InOut[f64]):
    n = x.size
    per = (n + dsl.num_tiles() - 1) // dsl.num_tiles()
    for i in range(dsl.tile_id() * per + dsl.thread_id(), min((dsl.tile_id() + 1) * per, n), dsl.num_threads()):
        v = x.flat[i]
        dsl.atomic_add(fsum, 0, v)
        dsl.atomic_add(isum, 0, i32(i))
        dsl.atomic_add(usum, 0, u32(1))
        dsl.atomic_add(lsum, 0, i)
        dsl.atomic_add(dsum, 0, f64(v))


def test_atomic_add_all_dtypes():
    x = np.linspace(-1, 2, 101).astype(np.float32)
    f, i, u, l, d = (np.zeros(1, t) for t in (np.float32, np.int32, np.uint32, np.int64, np.float64))
    atomics(x, f, i, u, l, d, backend="opencl")
    np.testing.assert_allclose(f[0], x.sum(), rtol=1e-5)
    assert i[0] == l[0] == sum(range(101)) and u[0] == 101
    np.testing.assert_allclose(d[0], x.astype(np.float64).sum(), rtol=1e-12)


@dsl.kernel(threads=2)
def atomic_i64(x: InOut[i64]):
    dsl.atomic_add(x, 0, dsl.thread_id())


def test_64_bit_atomics_need_the_device_extension(monkeypatch):
    from backends.opencl import runtime as rt
    dev = rt.device()
    monkeypatch.setattr(dev, "extensions", dev.extensions - {"cl_khr_int64_base_atomics"})
    with pytest.raises(dsl.CompileError) as e:
        atomic_i64(np.zeros(1, np.int64), backend="opencl")
    assert "cl_khr_int64_base_atomics" in str(e.value) and dev.device.name.strip() in str(e.value)
    monkeypatch.undo()
    x = np.zeros(1, np.int64)
    atomic_i64(x, backend="opencl")
    assert x[0] == 0 + 1


# ---------------------------------------------------------------- storage dtypes

@dsl.kernel
def halves(a: In[f16], b: In[bf16], c: Out[f16], d: Out[bf16], e: Out[f32]):
    lo, hi = dsl.split(a.size)
    for i in range(lo, hi):
        c.flat[i] = a.flat[i] * 3.0
        d.flat[i] = b.flat[i] + 0.1
        e.flat[i] = f16(a.flat[i] / 3.0) + dsl.bf16(b.flat[i] / 3.0)


def test_f16_and_bf16_storage_round_like_numpy():
    import ml_dtypes
    rng = np.random.default_rng(2)
    a = (rng.standard_normal(50) * 100).astype(np.float16)
    b = (rng.standard_normal(50) * 100).astype(ml_dtypes.bfloat16)
    c, d, e = np.zeros(50, np.float16), np.zeros(50, ml_dtypes.bfloat16), np.zeros(50, np.float32)
    halves(a, b, c, d, e, backend="opencl")
    af, bf = a.astype(np.float32), b.astype(np.float32)
    np.testing.assert_array_equal(c, (af * np.float32(3)).astype(np.float16))
    np.testing.assert_array_equal(d.view(np.uint16), (bf + np.float32(0.1)).astype(ml_dtypes.bfloat16).view(np.uint16))
    ref = (af / np.float32(3)).astype(np.float16).astype(np.float32) + \
        (bf / np.float32(3)).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(e, ref)


# ---------------------------------------------------------------- loops, functions, names

@dsl.func
def poly(x: f32, k: i32) -> f32:
    acc = 0.0
    for j in range(k):
        acc = acc * x + 1.0
    return acc


@dsl.kernel(threads=1)
def loops(n: i64, step: i64, out: Out[i64], fout: Out[f32]):
    long = 0  # a C keyword as a Python name
    for i in range(n, -n, step):  # runtime, possibly negative step
        out[long] = i
        long += 1
        i = 100  # rebinding the loop variable does not change the iteration
    out[out.size - 1] = long
    fout[0] = poly(2.0, 3)


def test_runtime_negative_step_hidden_counter_funcs_and_keywords():
    out = np.zeros(12, np.int64)
    fout = np.zeros(1, np.float32)
    loops(5, -3, out, fout, backend="opencl")
    assert list(out[:4]) == [5, 2, -1, -4] and out[-1] == 4
    assert fout[0] == 7.0
    out[:] = -7
    loops(-2, 2, out, fout, backend="opencl")
    assert list(out[:2]) == [-2, 0] and out[-1] == 2
    with pytest.raises(dsl.KernelValueError, match="step is 0"):  # as on every backend (docs/language.md)
        loops(3, 0, out, fout, backend="opencl")
    src = loops.source("opencl", 5, -3, out, fout)
    assert "long long_ = " in src  # mangled, not a C syntax error


# ---------------------------------------------------------------- logging

@dsl.kernel(threads=2, log_level="info")
def chatty(x: In[f32]):
    dsl.log.info("t%d sees %.2f of %d", dsl.thread_id(), x.flat[dsl.thread_id()], x.size)
    dsl.log.debug("never compiled in: %d", x.size)


def test_log_is_printf_with_prefix_and_filtered_at_compile_time(capfd):
    chatty(np.array([1.5, 2.25], np.float32), backend="opencl")
    out = capfd.readouterr().out
    assert "[chatty t=0 tile=0] t0 sees 1.50 of 2" in out
    assert "[chatty t=1 tile=0] t1 sees 2.25 of 2" in out
    src = chatty.source("opencl", np.zeros(2, np.float32))
    assert "printf(" in src and "never compiled in" not in src


# ---------------------------------------------------------------- readable, stable source

@dsl.kernel
def leaky(x: In[f32], y: Out[f32], alpha: f32 = 0.01):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        y.flat[i] = v if v > 0 else alpha * v


def test_source_is_readable_and_stable():
    x = np.zeros(4, np.float32)
    src = leaky.source("opencl", x, x)
    assert src == leaky.source("opencl", x, x)
    assert "__kernel __attribute__((reqd_work_group_size(4, 1, 1)))" in src
    assert "void leaky(__global const float* x, long x_shape0," in src
    assert "__global float* y, long y_shape0," in src
    assert "// py:" in src and "v = x.flat[i]" in src
    assert "v = x[i];" in src and "y[i] = v > 0.0f ? v : alpha * v;" in src
    lines = src.splitlines()
    body = lines[lines.index("{") + 1:-1]
    assert all(ln.startswith("  ") for ln in body if ln)


def test_cli_style_source_for_2d_and_scratch():
    src = team_sum.source("opencl", np.zeros((3, 5), np.float32), np.zeros(3, np.float32))
    assert "__local float buf[4];" in src
    assert "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);" in src
    assert "x[row * x_shape1 + j]" in src
    assert "(long)get_group_id(0)" in src and "(long)get_local_id(0)" in src


# ---------------------------------------------------------------- errors

@dsl.kernel(threads=2)
def with_sync(x: InOut[f32]):
    x.flat[dsl.thread_id()] = 1.0
    dsl.sync()  # the line the build error must point at
    x.flat[0] = x.flat[1]


def test_build_error_points_at_python_and_generated_line(monkeypatch):
    from backends.opencl import render as opencl
    monkeypatch.setattr(opencl.OpenCLRenderer, "barrier", "barrier_with_typo(CLK_LOCAL_MEM_FENCE);")
    with pytest.raises(dsl.CompileError) as e:
        with_sync(np.zeros(2, np.float32), backend="opencl")
    text = str(e.value)
    assert "OpenCL compiler rejected the generated code on" in text
    assert "dsl.sync()  # the line the build error must point at" in text
    assert "test_opencl.py:" in text
    assert "generated OpenCL line" in text and "barrier_with_typo" in text
    assert e.value.loc.line == with_sync.fn.__code__.co_firstlineno + 3


def test_missing_device_capability_names_dtype_and_device(monkeypatch):
    from backends.opencl import runtime as rt

    @dsl.kernel
    def double_it(x: InOut[f32]):
        lo, hi = dsl.split(x.size)
        for i in range(lo, hi):
            x.flat[i] = f32(f64(x.flat[i]) * 2.0)

    dev = rt.device()
    monkeypatch.setattr(dev, "extensions", dev.extensions - {"cl_khr_fp64"})
    with pytest.raises(dsl.CompileError) as e:
        double_it(np.ones(3, np.float32), backend="opencl")
    msg = str(e.value)
    assert "f64" in msg and dev.device.name.strip() in msg and "cl_khr_fp64" in msg
    assert "x.flat[i] = f32(f64(x.flat[i]) * 2.0)" in msg  # the first line computing in f64


# ---------------------------------------------------------------- runtime

def test_zero_size_and_concurrent_launches():
    leaky(np.zeros(0, np.float32), np.zeros(0, np.float32), backend="opencl")
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(1000 + k).astype(np.float32) for k in range(8)]
    ys = [np.zeros_like(x) for x in xs]
    errors = []

    def work(k):
        try:
            for _ in range(5):
                leaky(xs[k], ys[k], alpha=0.5, backend="opencl")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for x, y in zip(xs, ys):
        np.testing.assert_array_equal(y, np.where(x > 0, x, np.float32(0.5) * x))


def test_scalar_param_passed_positionally():
    y = np.zeros(8, np.float32)
    x = np.arange(-4, 4, dtype=np.float32)
    leaky(x, y, 2.0, backend="opencl")
    np.testing.assert_array_equal(y, np.where(x > 0, x, 2 * x))


def test_second_process_loads_the_binary_from_disk(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, dsl
        from dsl import In, Out, f32
        from backends.opencl import runtime as rt
        import pyopencl as cl
        built = []
        orig = cl.Program.build
        def spy(self, *a, **k):
            built.append("source" if k.get("cache_dir") is False else "binary")
            return orig(self, *a, **k)
        cl.Program.build = spy
        @dsl.kernel
        def scale(x: In[f32], y: Out[f32]):
            lo, hi = dsl.split(x.size)
            for i in range(lo, hi):
                y.flat[i] = x.flat[i] * 2.0
        x = np.arange(5, dtype=np.float32); y = np.zeros_like(x)
        scale(x, y, backend="opencl")
        assert (y == 2 * x).all()
        print("from-" + "+".join(built))
    """)
    path = tmp_path / "k.py"
    path.write_text(script)
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, OPDSL_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    runs = [subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, cwd=root)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert runs[0].stdout.strip() == "from-source"
    assert runs[1].stdout.strip() == "from-binary"  # no C compilation in the second process
    assert list((tmp_path / "cache" / "opencl").glob("*.bin"))


@dsl.kernel(threads=1)
def negatives(out: Out[f32]):
    a = -0.0
    out[0] = -f32(-0.0) * 2.0 - (-a)
    out[1] = -(-(-1.5))


def test_negative_literals_never_form_a_decrement():
    out = np.zeros(2, np.float32)
    negatives(out, backend="opencl")
    assert out[0] == 0.0 and not np.signbit(out[0]) and out[1] == -1.5


@dsl.kernel(threads=1)
def odd_names(out: Out[f32]):
    get_local_id = 1.0
    __x = 2.0
    opdsl_min_float = 3.0
    float4 = 4.0
    out[0] = get_local_id + __x + opdsl_min_float + float4 + min(out[0], 0.0)


def test_names_clashing_with_opencl_builtins_and_helpers_are_renamed():
    out = np.zeros(1, np.float32)
    odd_names(out, backend="opencl")
    assert out[0] == 10.0
    src = odd_names.source("opencl", out)
    assert "ufloat4 = " in src and "uget_local_id = " in src


@dsl.kernel(threads=2)
def narrow_scratch(x: In[f32], o: Out[f32]):
    h = dsl.scratch((2,), f16)
    b = dsl.scratch((2,), bf16)
    m = dsl.scratch((2,), dsl.bool_)
    t = dsl.thread_id()
    h[t] = x[t] / 3.0
    b[t] = x[t] / 3.0
    m[t] = x[t] > 1.0
    dsl.sync()
    o[t] = h[1 - t] + b[1 - t] + (1.0 if m[1 - t] else 0.0)


def test_f16_bf16_bool_scratch():
    import ml_dtypes
    x = np.array([1.0, 2.0], np.float32)
    o = np.zeros(2, np.float32)
    narrow_scratch(x, o, backend="opencl")
    third = x[::-1] / np.float32(3)
    ref = third.astype(np.float16).astype(np.float32) + third.astype(ml_dtypes.bfloat16).astype(np.float32) \
        + (x[::-1] > 1).astype(np.float32)
    np.testing.assert_array_equal(o, ref)


@dsl.kernel(threads=1)
def tricky_bounds(n: i64, flag: dsl.bool_, out: Out[i64]):
    c = 0
    for i in range(0, n if flag else 2, 1 if n > 0 else -1):
        c += 1
    for j in range(n - 1 if flag else 0, -1, -1 if flag else 1):
        c += 10
    out[0] = c


def test_loop_bounds_that_are_conditional_expressions():
    out = np.zeros(1, np.int64)
    for n, flag in [(5, True), (5, False), (-3, True)]:
        tricky_bounds(n, flag, out, backend="opencl")
        c = len(range(0, n if flag else 2, 1 if n > 0 else -1)) + \
            10 * len(range(n - 1 if flag else 0, -1, -1 if flag else 1))
        assert out[0] == c, (n, flag)


def test_device_choice_by_environment():
    from backends.opencl import devices as opencl_devices, runtime as rt
    dev = rt.device()
    platform = dev.device.platform.name
    found, _ = opencl_devices.discover()
    report, chosen = opencl_devices._forced(platform[:6].lower(), found)  # a case-insensitive substring
    assert chosen.platform.name == platform and report.platform == platform.strip()
    with pytest.raises(rt.NoDevice, match="no platform name contains 'no-such-platform'; platforms: "):
        opencl_devices._forced("no-such-platform", found)
    with pytest.raises(rt.NoDevice, match="device index 99 out of range"):
        opencl_devices._forced(f"{platform[:6]}:99", found)
    with pytest.raises(rt.NoDevice, match="is not an integer"):
        opencl_devices._forced(f"{platform[:6]}:x", found)


def test_unavailable_reason_names_the_bad_setting(tmp_path):
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, OPDSL_OPENCL_DEVICE="no-such-platform",
               PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    code = "from backends import base; print(base.get('opencl').available())"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root)
    assert r.returncode == 0, r.stderr
    assert "OPDSL_OPENCL_DEVICE='no-such-platform'" in r.stdout and "platforms:" in r.stdout


def test_unaligned_views_are_read_and_written_in_place():
    big = np.arange(1001, dtype=np.float32)
    out = np.zeros(1001, np.float32)
    x, y = big[1:], out[1:]  # 4 bytes past an allocation: not device-aligned
    leaky(x, y, 0.5, backend="opencl")
    np.testing.assert_array_equal(y, x)  # all positive
    assert out[0] == 0.0
    x[:] = -2.0
    leaky(x, y, 0.5, backend="opencl")
    assert np.all(y == -1.0)


@dsl.kernel(threads=1)
def continued_condition(x: In[f32], out: Out[f32]):
    for i in range(x.size):
        if x[i] > 0 and \
                x[i] < 10:
            out[i] = x[i]
        else:
            out[i] = -1.0


def test_a_python_line_continuation_does_not_swallow_the_next_c_line():
    """The `// py:N` comment of a line ending in a backslash must not continue onto the code."""
    x = np.array([-1, 5, 20], np.float32)
    out = np.zeros(3, np.float32)
    continued_condition(x, out, backend="opencl")
    np.testing.assert_array_equal(out, [-1, 5, -1])


@dsl.kernel(threads=1)
def convert_values(x: In[f32], out: Out[f32]):
    as_float4 = f32(2)
    for i in range(x.size):
        out[i] = x[i] * as_float4


def test_names_that_look_like_opencl_builtins_are_renamed():
    """A kernel or local named like an OpenCL conversion or vector type (convert_*, as_*) is
    renamed once; suffixes alone could never make it legal."""
    x = np.arange(3, dtype=np.float32)
    out = np.zeros(3, np.float32)
    convert_values(x, out, backend="opencl")
    np.testing.assert_array_equal(out, 2 * x)
    src = convert_values.source("opencl", x, out)
    assert "void uconvert_values(" in src and "uas_float4" in src


@dsl.func
def dot(a, b):
    return a * b


@dsl.kernel(threads=1)
def rotate(x: In[f32], out: Out[f32]):
    length = f32(3)
    for i in range(x.size):
        out[i] = dot(x[i], length)


def test_kernels_and_functions_named_like_opencl_builtin_functions_run():
    """A kernel named ``rotate`` would overload OpenCL's integer built-in of that name (PoCL then
    renames it and the launch finds no kernel); such names are renamed like any reserved word."""
    x = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    rotate(x, out, backend="opencl")
    np.testing.assert_array_equal(out, 3 * x)
    code = [line for line in rotate.source("opencl", x, out).splitlines() if not line.lstrip().startswith("//")]
    assert not any(re.search(r"\b(rotate|length|dot)\b", line) for line in code), code
