"""dsl.prefetch, the cache hint (docs/language.md, "Prefetching"): results never change on any
backend, offsets past either end of a tensor are allowed, and each backend lowers it as it says
(numba ``prefetcht0``, OpenCL ``prefetch`` of global memory, nothing in the interpreter)."""
import platform
import runpy

import numpy as np
import pytest

import dsl
from dsl import In, Out, f16, f32, i64

AHEAD = 64


@dsl.kernel(threads=2)
def scaled_ahead(x: In[f32], h: In[f16], y: Out[f32], ahead: i64):
    """y = 2·x + h, prefetching ``ahead`` elements on (past the end at the tail), behind (before
    the start at the head) and into a scratch row."""
    row = dsl.scratch((2, 16), f32)
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        dsl.prefetch(x, i + ahead)
        dsl.prefetch(x, i - ahead)
        dsl.prefetch(h, i + ahead)
        dsl.prefetch(row, i % 16)
        y[i] = 2 * x[i] + f32(h[i])


def test_prefetch_leaves_results_unchanged_even_past_the_ends(backend):
    x = np.random.default_rng(29).standard_normal(1000).astype(np.float32)
    h = np.linspace(-4, 4, 1000).astype(np.float16)
    y = np.zeros_like(x)
    scaled_ahead(x, h, y, AHEAD, backend=backend)
    np.testing.assert_array_equal(y, 2 * x + h.astype(np.float32))


def test_numba_lowers_to_llvm_prefetch():
    numba = pytest.importorskip("numba")
    from backends.numba import simd as sm
    assert "sm.prefetch(" in scaled_ahead.source("numba")

    @numba.njit
    def touch(a, i):
        sm.prefetch(a, i)
        sm.prefetch(a, -i)  # before the array: no fault
        return a[0]

    a = np.arange(8, dtype=np.float32)
    assert touch(a, 1 << 20) == 0
    if platform.machine() in ("x86_64", "AMD64"):
        asm = next(iter(touch.inspect_asm().values()))
        assert "prefetcht0" in asm


def test_opencl_prefetches_global_buffers_only():
    src = scaled_ahead.source("opencl")
    assert src.count("prefetch((__global const uchar*)") == 3, src  # x twice and h; not the scratch row (local)


@pytest.mark.parametrize("call, words", [
    ("dsl.prefetch(x, 0.5)", ["prefetch", "index", "integer", "f"]),
    ("dsl.prefetch(n, 0)", ["prefetch", "must be a tensor", "'n'"]),
    ("dsl.prefetch(x)", ["prefetch"]),
    ("y[0] = dsl.prefetch(x, 0)", ["prefetch", "statement"]),
    ("dsl.prefetch(v, 0)", ["prefetch", "dsl.Vec", "'v'"]),
])
def test_prefetch_errors_name_the_call_and_what_it_takes(call, words, tmp_path):
    src = f'''
import dsl
from dsl import In, Out, f32, i32, i64
@dsl.kernel(threads=1)
def bad(x: In[f32], y: Out[f32], v: dsl.Vec[i64, 2], n: i32):
    {call}
'''
    path = tmp_path / "bad_prefetch.py"
    path.write_text(src)
    scope = runpy.run_path(str(path))
    with pytest.raises(dsl.CompileError) as err:
        scope["bad"].source("numba")
    text = str(err.value)
    assert "bad_prefetch.py:6" in text, text
    for w in words:
        assert w in text, text


def test_prefetch_in_a_func_is_refused(tmp_path):
    src = '''
import dsl
from dsl import In, Out, f32
@dsl.func
def helper(x, i):
    dsl.prefetch(x, i)
    return x[i]
@dsl.kernel(threads=1)
def uses(x: In[f32], y: Out[f32]):
    y[0] = helper(x, 0)
'''
    path = tmp_path / "func_prefetch.py"
    path.write_text(src)
    scope = runpy.run_path(str(path))
    with pytest.raises(dsl.CompileError, match="kernel body"):
        scope["uses"].source("numba")
