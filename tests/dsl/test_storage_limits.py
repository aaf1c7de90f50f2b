"""Storage a kernel declares is checked at compile time, with exact integers, on every backend.

``dsl.local`` arrays: at most MAX_LOCAL_BYTES per thread (a 100000 x 100000 array used to hang the
OpenCL compile; big run-time-indexed ones crashed PoCL). ``dsl.scratch``: at most MAX_SCRATCH_BYTES
per team, the size multiplied as Python ints (2**32 x 2**32 x 1024 used to wrap to 0 in int64 and
become ``__local float s[0]`` on OpenCL).
"""

import numpy as np
import pytest

import dsl
from dsl import Out, f32, i64
from dsl.lang.check_arrays import MAX_LOCAL_BYTES, MAX_SCRATCH_BYTES

SRC = open(__file__).read().splitlines()
ALL = ("interpreter", "numba", "opencl")


def line_of(marker):
    return next(i + 1 for i, line in enumerate(SRC) if line.rstrip().endswith("# " + marker))


@dsl.kernel(threads=1)
def huge_local(y: Out[f32]):
    a = dsl.local((100000, 100000), f32)  # E-huge-local
    a[1, 2] = 3.0
    y[0] = a[1, 2]


@dsl.kernel(threads=1)
def two_locals_over(y: Out[f32], n: i64):
    a = dsl.local((2048,), f32)
    b = dsl.local((2049,), f32)  # E-second-local
    for i in range(n):
        a[i] = 1.0
        b[i] = 2.0
    y[0] = a[0] + b[0]


@dsl.kernel(threads=1)
def wrapping_scratch(y: Out[f32]):
    s = dsl.scratch((2**32, 2**32, 1024), f32)  # E-wrap
    s[0, 0, 0] = 1.0
    y[0] = s[0, 0, 0]


@dsl.kernel(threads=1)
def at_local_limit(y: Out[f32], n: i64):
    a = dsl.local((MAX_LOCAL_BYTES // 4,), f32)  # the limit exactly, indexed at run time
    for i in range(n):
        a[i] = f32(i)
    total = f32(0)
    for i in range(n):
        total += a[n - 1 - i]
    y[0] = total


@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("kernel,args,marker,words", [
    (huge_local, (), "E-huge-local", ["'a'", "f32[100000x100000]", "40000000000 bytes",
                                     f"{MAX_LOCAL_BYTES} bytes", "per thread", "dsl.scratch"]),
    (two_locals_over, (4,), "E-second-local", ["'b'", "8196 bytes", "16388 bytes", f"{MAX_LOCAL_BYTES}"]),
    (wrapping_scratch, (), "E-wrap", ["'s'", str(2**32 * 2**32 * 1024 * 4) + " bytes", f"{MAX_SCRATCH_BYTES}",
                                      "per team"]),
])
def test_storage_over_the_limit_is_a_compile_error_at_the_declaration(backend, kernel, args, marker, words):
    with pytest.raises(dsl.CompileError) as info:
        kernel(np.zeros(1, np.float32), *args, backend=backend)
    text = str(info.value)
    assert f"test_storage_limits.py:{line_of(marker)}:" in text, text
    for w in words:
        assert w in text, (w, text)


@pytest.mark.parametrize("backend", ALL)
def test_a_local_array_at_the_limit_runs_everywhere(backend):
    n = MAX_LOCAL_BYTES // 4
    y = np.zeros(1, np.float32)
    at_local_limit(y, n, backend=backend)
    assert y[0] == np.float32(np.arange(n, dtype=np.float32).sum(dtype=np.float64))
