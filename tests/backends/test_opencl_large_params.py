"""Large kernel parameters on OpenCL: a long ``dsl.Vec`` travels as one read-only buffer (as
scalars, N=10,000 took minutes to compile and 100,000 was rejected), and a large run-time
indexed ``dsl.local`` is zeroed with a counter wide enough for its element count."""
import numpy as np
import pytest

import dsl
from dsl import In, Out, bool_, f16, f32, i8, i64

N_LONG = 100_000


@pytest.fixture(scope="module", autouse=True)
def opencl():
    from backends import base
    reason = base.get("opencl").available()
    if reason:
        pytest.skip(f"opencl: {reason}")


@dsl.kernel
def gather_long(idx: In[i64], y: Out[f32], w: dsl.Vec[f32, N_LONG]):
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        y[i] = w[idx[i]]


@dsl.kernel
def mixed_vecs(y: Out[f32], a: dsl.Vec[f16, 20], b: dsl.Vec[bool_, 17], c: dsl.Vec[i8, 16], d: dsl.Vec[f32, 3]):
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        k = i % 16
        y[i] = a[k] * f32(2) + (f32(1) if b[k] else f32(0)) + f32(c[k]) + d[k % 3]


def test_a_100000_element_vec_runs_and_matches_numpy_numba_and_the_interpreter():
    rng = np.random.default_rng(3)
    w = rng.standard_normal(N_LONG).astype(np.float32)
    idx = np.concatenate([[0, N_LONG - 1], rng.integers(0, N_LONG, 62)]).astype(np.int64)
    ref = w[idx]
    for backend in ("opencl", "numba", "interpreter"):
        y = np.zeros(idx.size, np.float32)
        gather_long(idx, y, w, backend=backend)
        np.testing.assert_array_equal(y, ref, err_msg=backend)


gather_long_checked = dsl.kernel(debug=True)(gather_long.fn)


def test_a_long_vec_is_one_buffer_parameter_in_the_generated_opencl():
    src = gather_long.source("opencl", np.zeros(4, np.int64), np.zeros(4, np.float32), np.zeros(N_LONG, np.float32))
    assert "__global const float* w" in src
    assert "w_1" not in src and len(src) < 5000  # not 100,000 scalar arguments and an initializer


def test_vec_buffers_of_f16_bool_and_i8_keep_their_values():
    rng = np.random.default_rng(4)
    a = rng.standard_normal(20).astype(np.float16)
    b = rng.integers(0, 2, 17).astype(bool)
    c = rng.integers(-128, 128, 16).astype(np.int8)
    d = np.array([0.5, -1.25, 3.0], np.float32)
    k = np.arange(40) % 16
    ref = (a[k].astype(np.float32) * 2 + b[k].astype(np.float32) + c[k].astype(np.float32)
           + d[np.arange(40) % 16 % 3])
    src = mixed_vecs.source("opencl", np.zeros(40, np.float32), a, b, c, d)
    assert "__global const float* a" in src and "__global const uchar* b" in src and "__global const char* c" in src
    for backend in ("opencl", "interpreter"):
        y = np.zeros(40, np.float32)
        mixed_vecs(y, a, b, c, d, backend=backend)
        np.testing.assert_allclose(y, ref, rtol=1e-6, err_msg=backend)


def test_a_long_vec_index_out_of_range_is_an_index_error_in_debug_mode():
    idx = np.array([0, N_LONG], np.int64)
    with pytest.raises(IndexError, match="w"):
        gather_long_checked(idx, np.zeros(2, np.float32), np.zeros(N_LONG, np.float32), backend="opencl")


@dsl.kernel
def big_local(x: In[f32], y: Out[f32], j: i64):
    a = dsl.local((50_000, 50_000), f32)
    a[j, j] = x[0]
    y[0] = a[j, j]


def test_a_huge_local_is_refused_before_any_opencl_is_emitted():
    """It used to emit a zeroing loop whose int counter never reached 2.5e9 (the launch hung); the
    per-thread dsl.local limit (docs/language.md, Limits) now stops it at compile time."""
    with pytest.raises(dsl.CompileError, match="more than the 16384 bytes"):
        big_local.source("opencl", np.zeros(1, np.float32), np.zeros(1, np.float32), 0)
