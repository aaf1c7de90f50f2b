"""@dsl.func device functions that take tensors (docs/language.md, "Device functions"): reads,
writes, shapes, SIMD blocks, scratch, TypeVars and fetch-and-add through a function, on every
backend against numpy; and the compile errors of misuse."""
import pickle

import numpy as np
import pytest

import dsl
from dsl import In, InOut, Out, f32, f64, i32, i64

T = dsl.TypeVar("T")


# --------------------------------------------------------------------------- reads and writes

@dsl.func
def twice(x, i):                       # unannotated: specialized from the tensor it is given
    return x.flat[i] * 2.0


@dsl.func
def put(y: Out[f32], i, v):            # a statement function: no 'return value'
    y.flat[i] = v


@dsl.func
def put_twice(x: In[f32], y: Out[f32], i):
    put(y, i, twice(x, i) + 1.0)       # a function passing its tensors on to others


@dsl.func
def put_positive(y, i, v):
    if v <= 0.0:
        return                         # a bare return leaves a statement function early
    y.flat[i] = v


@dsl.kernel(threads=2)
def through_funcs(x: In[f32], y: Out[f32], z: Out[f32], w: InOut[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        put(y, i, twice(x, i))
        put_twice(x, z, i)
        put_positive(w, i, x.flat[i])


def test_read_and_write_through_functions(backend):
    x = np.arange(10, dtype=np.float32) - 3
    y, z, w = np.zeros_like(x), np.zeros_like(x), np.full_like(x, -1)
    through_funcs(x, y, z, w, backend=backend)
    assert np.array_equal(y, 2 * x) and np.array_equal(z, 2 * x + 1)
    assert np.array_equal(w, np.where(x > 0, x, -1))


@dsl.func
def row_stats(x: In[f32, 2], r):
    """Sum of row r, weighted by the tensor's rank and size (metadata reads in a function)."""
    acc = 0.0
    for j in range(x.shape[1]):
        acc += x[r, j]
    return acc * x.ndim + x.size * 0.0 + x.shape[0]


@dsl.func
def put_row(y: Out[f32, 2], r, v):
    for j in range(y.shape[-1]):
        y[r, j] = v + j


@dsl.kernel(threads=1)
def rows(x: In[f32, 2], y: Out[f32, 2]):
    for r in range(x.shape[0]):
        put_row(y, r, row_stats(x, r))


def test_multi_d_indexing_and_shapes(backend):
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    y = np.zeros((3, 4), np.float32)
    rows(x, y, backend=backend)
    want = (x.sum(1, dtype=np.float32) * 2 + 3)[:, None] + np.arange(4, dtype=np.float32)
    assert np.allclose(y, want, rtol=1e-6, atol=1e-5)


# --------------------------------------------------------------------------- SIMD blocks

@dsl.func
def store_block(y: Out[f32], base, n, v: dsl.simd(f32, 16)):
    """The 16 lanes of v from y.flat[base]; only the first n where the block is padded."""
    if n >= 16:
        y.vstore(base, v)
    else:
        for k in dsl.static_range(16):
            if k < n:
                y.flat[base + k] = v[k]


@dsl.kernel(threads=1)
def relu_blocks(x: In[f32], y: Out[f32]):  # x padded to whole blocks of 16, y not
    for base in range(0, x.size, 16):
        store_block(y, base, min(y.size - base, 16), max(x.vload(base, 16), 0.0))


def test_vload_vstore_of_a_padded_block(backend):
    x = np.random.default_rng(1).standard_normal(48).astype(np.float32)
    y = np.zeros(40, np.float32)
    relu_blocks(x, y, backend=backend)
    assert np.array_equal(y, np.maximum(x[:40], 0))


# --------------------------------------------------------------------------- scratch in a team

@dsl.func
def publish(s, t, v):                  # s: the team's scratch (OpenCL: a __local pointer)
    s[t] = v


@dsl.func
def neighbour(s: In[f32], t):
    return s.flat[(t + 1) % s.size]


@dsl.kernel(threads=4)
def pass_left(x: In[f32], y: Out[f32]):
    s = dsl.scratch((4,), f32)
    t = dsl.thread_id()
    base = dsl.tile_id() * 4
    publish(s, t, x[base + t] * 10.0)
    dsl.sync()
    y[base + t] = neighbour(s, t)


def test_scratch_passed_to_functions_around_sync(backend):
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    pass_left(x, y, grid=2, backend=backend)
    assert np.array_equal(y, 10 * np.roll(x.reshape(2, 4), -1, axis=1).ravel())


# --------------------------------------------------------------------------- TypeVars and atomics

@dsl.func
def axpy_at(x: In[T], y: InOut[T], i, a: T):
    y.flat[i] = a * x.flat[i] + y.flat[i]


@dsl.kernel(threads=2)
def axpy(x: In[T], y: InOut[T], a: T):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        axpy_at(x, y, i, a)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.float16])
def test_typevar_tensor_parameters_across_dtypes(backend, dtype):
    x = np.arange(9).astype(dtype)
    y = (np.arange(9) * 3).astype(dtype)
    want = dtype(2) * x + y
    axpy(x, y, dtype(2), backend=backend)
    assert y.dtype == dtype and np.array_equal(y, want)


@dsl.func
def claim(counter: InOut[i32], taken: Out[i32]):
    slot = dsl.atomic_add(counter, 0, 1)   # fetch-and-add: the old value is this thread's slot
    taken[slot] = dsl.thread_id() + 100 * dsl.tile_id()
    return slot


@dsl.kernel(threads=4)
def claims(counter: dsl.Zeroed[i32], taken: Out[i32], slots: Out[i32]):
    slots[dsl.tile_id() * 4 + dsl.thread_id()] = claim(counter, taken)


def test_fetch_and_add_in_a_function(backend):
    counter, taken, slots = np.zeros(1, np.int32), np.full(8, -1, np.int32), np.zeros(8, np.int32)
    claims(counter, taken, slots, grid=2, backend=backend)
    assert counter[0] == 8 and sorted(slots.tolist()) == list(range(8))
    assert sorted(taken.tolist()) == [0, 1, 2, 3, 100, 101, 102, 103]
    assert all(taken[s] == (k % 4) + 100 * (k // 4) for k, s in enumerate(slots))


# --------------------------------------------------------------------------- debug, source, pickling

@dsl.kernel(threads=1, debug=True)
def put_at(y: Out[f32], at: i64):
    put(y, at, 1.0)


def test_bounds_are_checked_inside_a_function_in_debug_mode(backend):
    y = np.zeros(4, np.float32)
    with pytest.raises((IndexError, dsl.LaunchError)) as info:
        put_at(y, 4, backend=backend)
    assert "'y'" in str(info.value) and "index 4" in str(info.value)
    put_at(y, 2, backend=backend)
    assert y.tolist() == [0, 0, 1, 0]


def test_source_shows_tensor_parameters():
    args = [np.zeros(4, np.float32)] * 4
    text = through_funcs.source("opencl", *args)
    assert "__global const float* x" in text and "__global float* y" in text and "static void put" in text
    text = pass_left.source("opencl", np.zeros(8, np.float32), np.zeros(8, np.float32))
    assert "__local float* s" in text
    text = through_funcs.source("numba", *args)
    assert "def func_twice_in1df32_int(_tid, _tile, _ntiles, _intr, _intr0, x, x_shape0, x_size, i)" in text


def test_a_kernel_calling_tensor_functions_pickles_by_value():
    @dsl.func
    def bump(y, i):                    # defined in a function body: pickled by value
        y.flat[i] = y.flat[i] + 1

    @dsl.kernel(threads=1)
    def bump_all(y: InOut[i32]):
        for i in range(y.size):
            bump(y, i)

    back = pickle.loads(pickle.dumps(bump_all))
    assert back is not bump_all
    y = np.arange(5, dtype=np.int32)
    back(y, backend="interpreter")
    assert y.tolist() == [1, 2, 3, 4, 5]


# --------------------------------------------------------------------------- errors

@dsl.func
def write_in(x: In[f32], i):
    x.flat[i] = 0.0


@dsl.kernel
def calls_write_in(x: In[f32]):
    write_in(x, 0)


@dsl.func
def write_any(x, i):
    x.flat[i] = 0.0


@dsl.kernel
def in_to_unannotated_writer(x: In[f32]):
    write_any(x, 0)


@dsl.kernel
def in_to_out(x: In[f32], y: Out[f32]):
    put(x, 0, 1.0)


@dsl.func
def give_back(x):
    return x


@dsl.kernel
def returns_tensor(x: In[f32], y: Out[f32]):
    y[0] = give_back(x)


@dsl.kernel
def wrong_rank(x: In[f32], y: Out[f32, 2]):
    y[0, 0] = row_stats(x, 0)


@dsl.kernel
def void_as_value(x: In[f32], y: Out[f32]):
    y[0] = put(y, 0, 1.0)


@dsl.kernel
def value_for_tensor(x: In[f32], y: Out[f32]):
    put(1.0, 0, 1.0)


@dsl.kernel
def tensor_for_value(x: In[f32], y: Out[f32]):
    y[0] = dsl.clamp(x[0], 0.0, 1.0) + twice_value(x)


@dsl.func
def twice_value(v: f32):
    return v * 2.0


@dsl.kernel(threads=2)
def sync_under_scratch_read(x: In[f32], y: Out[f32]):
    s = dsl.scratch((4,), f32)
    s[dsl.thread_id()] = x[dsl.thread_id()]
    dsl.sync()
    if neighbour(s, 0) > 0.0:          # scratch other threads write: thread-dependent
        dsl.sync()
    y[dsl.thread_id()] = neighbour(x, 0)


@dsl.kernel(threads=2)
def sync_under_input_read(x: In[f32], y: Out[f32]):
    if neighbour(x, 0) > 0.0:          # an In tensor: the same for every thread
        dsl.sync()
    y[dsl.thread_id()] = 1.0


@dsl.kernel
def mixed_typevar(x: In[f32], y: InOut[f64]):
    axpy_at(x, y, 0, 1.0)


@dsl.func
def zeroed_param(c: dsl.Zeroed[i32]):
    c[0] = 1


@dsl.kernel
def passes_zeroed(c: InOut[i32]):
    zeroed_param(c)


@dsl.kernel
def passes_local(y: Out[f32]):
    a = dsl.local((4,), f32)
    for i in range(4):
        a[i] = 1.0
    y[0] = twice(a, 0)


def _error(kernel, *args):
    with pytest.raises(dsl.CompileError) as info:
        kernel(*args, backend="interpreter")
    return str(info.value)


def test_errors():
    x, y, y2 = np.zeros(4, np.float32), np.zeros(4, np.float32), np.zeros((2, 2), np.float32)
    msg = _error(calls_write_in, x)
    assert "test_func_tensors.py:" in msg and "writing to 'x', which is In[dsl.f32] in @dsl.func 'write_in'" in msg
    msg = _error(in_to_unannotated_writer, x)
    assert "writing to 'x', which is read-only in @dsl.func 'write_any'" in msg and "x.flat[i] = 0.0" in msg
    msg = _error(in_to_out, x, y)
    assert "put() parameter 'y' (Out[dsl.f32]) writes its tensor, but 'x' is read-only" in msg and "put(x, 0" in msg
    msg = _error(returns_tensor, x, y)
    assert "a @dsl.func cannot return tensor 'x'" in msg and "return x" in msg
    msg = _error(wrong_rank, x, y2)
    assert "row_stats() parameter 'x' (In[dsl.f32, 2]) has 2 dimension(s), got 'x' with 1" in msg
    msg = _error(void_as_value, x, y)
    assert "@dsl.func 'put' returns no value" in msg and "call it as a statement" in msg
    msg = _error(value_for_tensor, x, y)
    assert "put() parameter 'y' is a tensor (Out[dsl.f32]), got a value" in msg
    msg = _error(sync_under_scratch_read, x, y)
    assert "dsl.sync() under thread-dependent control flow" in msg and "if neighbour(s, 0) > 0.0" in msg
    sync_under_input_read(x + 1, y, backend="interpreter")
    assert y.tolist()[:2] == [1, 1]
    msg = _error(mixed_typevar, x, x.astype(np.float64))
    assert "TypeVar dsl.TypeVar('T') is already f32 in this call, got 'y' of f64" in msg
    msg = _error(passes_zeroed, np.zeros(1, np.int32))
    assert "zeroed_param() parameter 'c'" in msg and "a @dsl.func parameter is In, Out or InOut" in msg
    msg = _error(passes_local, y)
    assert "'a' is a dsl.local array" in msg and "twice(a, 0)" in msg
    msg = _error(tensor_for_value, x, y)
    assert "twice_value() parameter 'v' takes a value (dsl.f32), got tensor 'x'" in msg


@dsl.func
def length(x):
    return len(x)


@dsl.kernel(threads=1)
def lengths(x: In[f32, 2], y: Out[i64]):
    y[0] = length(x)


def test_len_of_a_tensor_parameter_and_the_ir_listing():
    y = np.zeros(1, np.int64)
    lengths(np.zeros((3, 2), np.float32), y, backend="interpreter")
    assert y[0] == 3
    listing = lengths.source("ir", np.zeros((3, 2), np.float32), y)
    assert "func length_in2df32(x: in f32 2-d) -> i64" in listing


@dsl.func
def lane_scale(v):                     # v[0] of a SIMD value: not a tensor, though it is indexed
    return v * v[0]


@dsl.kernel(threads=1)
def scaled_by_first(x: In[f32], y: Out[f32]):
    y.vstore(0, lane_scale(x.vload(0, 4)))


def test_an_indexed_simd_parameter_is_still_a_value():
    x, y = np.arange(1, 5, dtype=np.float32), np.zeros(4, np.float32)
    scaled_by_first(x, y, backend="interpreter")
    assert np.array_equal(y, x * x[0])
