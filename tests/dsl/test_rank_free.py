"""Rank-free specializations (dsl/lang/rank_use.py, dsl/runtime/rank_free.py): a kernel that reads a
tensor only through ``.flat``, ``.size`` or ``vload``/``vstore`` compiles once for every rank of
it, on every backend, and computes what numpy does; a body that can see the rank (``x[i, j]``,
``x.shape[k]``, ``x.ndim``, ``a, b = x.shape``, a ``@dsl.func`` taking the tensor) still compiles
per rank."""
import numpy as np
import pytest

import dsl
from dsl import In, InOut, Out, f32, i32
from dsl.lang import rank_use


@dsl.kernel
def axpb(x: In[f32], y: Out[f32], a: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = a * x.flat[i] + 1.0


@dsl.kernel
def first_rows(x: In[f32], y: Out[f32]):
    """Reads x.shape[0]: its rank is part of what the code does."""
    lo, hi = dsl.split(x.shape[0])
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * 2.0


@dsl.kernel
def count_into(x: In[i32], hist: InOut[i32]):
    """A flat atomic into a tensor of any rank, reading another flat."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        dsl.atomic_add(hist.flat, x.flat[i], 1)


@dsl.func
def first(t: In[f32]):
    return t.flat[0]


def _free(kernel, *args) -> set:
    """The tensors of ``kernel`` the analysis finds rank-free for a launch of ``args`` (no compile)."""
    values, _ = kernel.bind(args, {})
    return set(rank_use.rank_free(kernel.parsed().body, kernel.specialize(values)))


@pytest.fixture
def memory_only(monkeypatch):
    """No disk cache: a front-end record of an earlier run would load each rank's launcher apart
    (the count below is about what this process compiles)."""
    monkeypatch.setenv("OPDSL_NO_DISK_CACHE", "1")


def test_flat_kernel_compiles_once_for_ranks_1_2_4_and_matches_numpy(backend, memory_only):
    rng = np.random.default_rng(3)
    k = dsl.kernel(axpb.fn)  # a kernel of its own: the count starts at zero
    for shape in ((7,), (3, 5), (2, 1, 3, 4), (3, 5)):
        x = rng.standard_normal(shape).astype(np.float32)
        y = np.full_like(x, np.nan)
        for _ in range(3):  # the full path, the fast path, then the one-hop binder on numba
            k(x, y, 1.5, backend=backend) if backend != "numba" else k(x, y, 1.5)
        np.testing.assert_allclose(y, np.float32(1.5) * x + 1, rtol=1e-6, atol=1e-6)
        assert y.shape == shape
    assert k.specializations(backend) == ["x: f32 any rank, y: f32 any rank"]


def test_a_zero_d_tensor_and_an_atomic_into_any_rank(backend, memory_only):
    k = dsl.kernel(count_into.fn)
    for shape in ((4,), (2, 2)):
        x = np.array([0, 3, 3, 1, 3, 0], np.int32)
        hist = np.zeros(shape, np.int32)
        k(x, hist, backend=backend)
        np.testing.assert_array_equal(hist.ravel(), np.bincount(x, minlength=4))
    x0 = np.array(2.0, np.float32)  # a 0-d tensor is one element
    y0 = np.zeros((), np.float32)
    ka = dsl.kernel(axpb.fn)
    ka(x0, y0, 3.0, backend=backend)
    assert y0 == 7.0
    assert k.specializations(backend) == ["x: i32 any rank, hist: i32 any rank"]


def test_a_body_that_reads_the_shape_still_compiles_per_rank(backend, memory_only):
    k = dsl.kernel(first_rows.fn)
    for shape in ((6,), (3, 2)):
        x = np.arange(6, dtype=np.float32).reshape(shape)
        y = np.zeros_like(x)
        k(x, y, backend=backend)
        want = np.zeros(6, np.float32)
        want[:shape[0]] = 2 * np.arange(shape[0])
        np.testing.assert_array_equal(y.ravel(), want)
    assert k.specializations(backend) == ["x: f32 1-D, y: f32 any rank", "x: f32 2-D, y: f32 any rank"]


def test_what_counts_as_reading_the_rank():
    x2, y2 = np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)
    assert _free(axpb, x2, y2, 1.0) == {"x", "y"}
    assert _free(first_rows, x2, y2) == {"y"}

    @dsl.kernel
    def indexed(x: In[f32], y: Out[f32]):
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                y[i, j] = x[i, j]

    @dsl.kernel
    def ndim_read(x: In[f32], y: Out[f32]):
        if x.ndim == 2:
            y.flat[0] = x.flat[0]

    @dsl.kernel
    def unpacked(x: In[f32], y: Out[f32]):
        n, m = x.shape
        y.flat[0] = x.flat[0] + f32(n * 0)

    @dsl.kernel
    def to_func(x: In[f32], y: Out[f32]):
        y.flat[0] = first(x)

    @dsl.kernel
    def lanes(x: In[f32], y: Out[f32]):
        y.vstore(0, x.vload(0, 2))

    @dsl.kernel(debug=True)
    def debugged(x: In[f32], y: Out[f32]):
        y.flat[0] = x.flat[0]

    assert _free(indexed, x2, y2) == set()
    assert _free(ndim_read, x2, y2) == {"y"}  # folded to a constant, found in the parsed body
    assert _free(unpacked, x2, y2) == {"y"}
    assert _free(to_func, x2, y2) == {"y"}
    assert _free(lanes, x2, y2) == {"x", "y"}
    # debug builds keep per-rank code: their out-of-range messages name the tensor's own shape
    assert debugged.request("interpreter", debugged.bind((x2, y2), {})[1], [x2, y2]).kernel.params[0].ndim == 2


def test_a_fixed_rank_in_the_annotation_is_kept():
    @dsl.kernel
    def fixed(x: In[f32, 2], y: Out[f32]):
        y.flat[0] = x.flat[0]
    x2, y3 = np.zeros((2, 3), np.float32), np.zeros((1, 1, 1), np.float32)
    values, key = fixed.bind((x2, y3), {})
    params = fixed.request("interpreter", key, values).kernel.params
    assert (params[0].ndim, params[1].ndim) == (2, 1)


def test_ops_in_models_of_several_ranks(backend, monkeypatch):
    """Feeds of 2-D and 3-D run through compiled models (a model's frozen launch values and its
    rebinding of a caller's feed in place hold the flat views): numpy's results."""
    import ops
    from dsl.opgraph import binding
    monkeypatch.setattr(binding, "MIN_BYTES", 0)  # every feed read in place, however small
    rng = np.random.default_rng(5)
    for shape in ((4, 8), (3, 4, 5)):
        g = dsl.Graph("exp")
        g.output(ops.Exp(g.input("x", shape, dsl.f32)), "y")
        model = g.compile(backend=backend)
        for _ in range(2):
            x = rng.uniform(-3, 3, shape).astype(np.float32)
            np.testing.assert_allclose(model.run({"x": x})["y"], np.exp(x), rtol=2e-6)
