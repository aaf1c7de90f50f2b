"""TensorScatter on every backend against a numpy reference: linear and circular writes,
axes, default write indices, integer and bool caches, decode steps in a graph; errors."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(9)


def reference(past, update, write=None, mode="linear", axis=-2):
    axis %= past.ndim
    out = past.copy()
    write = np.zeros(past.shape[0], np.int64) if write is None else write
    for prefix in np.ndindex(past.shape[:axis]):
        for s in range(update.shape[axis]):
            pos = write[prefix[0]] + s
            if mode == "circular":
                pos %= past.shape[axis]
            out[prefix + (pos,)] = update[prefix + (s,)]
    return out


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_modes_and_axes(backend, mode):
    past = RNG.standard_normal((3, 2, 6, 4)).astype(np.float32)
    update = RNG.standard_normal((3, 2, 3, 4)).astype(np.float32)
    write = np.array([0, 3, 2] if mode == "linear" else [4, 5, 1], np.int64)
    y = ops.TensorScatter(past, update, write, mode=mode, backend=backend)
    np.testing.assert_array_equal(y, reference(past, update, write, mode))
    # axis 1 of a rank-3 cache, default write indices, an integer dtype
    past_i = RNG.integers(-9, 9, (2, 5, 3)).astype(np.int64)
    upd_i = RNG.integers(-9, 9, (2, 2, 3)).astype(np.int64)
    y = ops.TensorScatter(past_i, upd_i, mode=mode, axis=1, backend=backend)
    np.testing.assert_array_equal(y, reference(past_i, upd_i, None, mode, axis=1))


def test_bool_and_f16(backend):
    past = np.zeros((2, 4, 1), bool)
    update = np.ones((2, 1, 1), bool)
    y = ops.TensorScatter(past, update, np.array([3, 1], np.int64), axis=1, backend=backend)
    np.testing.assert_array_equal(y, reference(past, update, np.array([3, 1]), axis=1))
    past16 = RNG.standard_normal((1, 4, 2)).astype(np.float16)
    upd16 = RNG.standard_normal((1, 4, 2)).astype(np.float16)
    np.testing.assert_array_equal(ops.TensorScatter(past16, upd16, backend=backend), upd16)


def test_decode_steps_in_a_graph(backend):
    g = dsl.Graph("kv")
    c = g.input("cache", (2, 8, 4), dsl.f32)
    u = g.input("update", (2, 1, 4), dsl.f32)
    w = g.input("write", (2,), dsl.i64)
    g.output(ops.TensorScatter(c, u, w, axis=1, mode="circular"), "present")
    model = g.compile(backend=backend)
    cache = np.zeros((2, 8, 4), np.float32)
    want = cache.copy()
    for step in range(3):
        upd = np.full((2, 1, 4), step + 1, np.float32)
        write = np.array([6 + step, step], np.int64)
        cache = model.run({"cache": cache, "update": upd, "write": write})["present"]
        want = reference(want, upd, write, "circular", axis=1)
        np.testing.assert_array_equal(cache, want)


def test_errors():
    past = np.zeros((2, 4, 3), np.float32)
    with pytest.raises(VerifyError, match=r"write_indices \[2, 3\] out of range; accepted: \[0, 2\]"):
        ops.TensorScatter(past, np.zeros((2, 2, 3), np.float32), np.array([2, 3], np.int64), backend="interpreter")
    with pytest.raises(VerifyError, match="does not fit past_cache"):
        ops.TensorScatter(past, np.zeros((2, 5, 3), np.float32), backend="interpreter")
    with pytest.raises(VerifyError, match="axis 0 must name a sequence axis"):
        ops.TensorScatter(past, np.zeros((1, 4, 3), np.float32), axis=0, backend="interpreter")
    with pytest.raises(VerifyError, match="mode 'ring' is not one of linear, circular"):
        ops.TensorScatter(past, past, mode="ring", backend="interpreter")
