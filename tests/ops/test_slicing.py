"""Concat, Split, Slice and Tile on every backend against numpy."""
import numpy as np
import pytest

import dsl
import ops

RNG = np.random.default_rng(5)


def i64(*v):
    return np.array(v, np.int64)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.float16], ids=lambda d: np.dtype(d).name)
def test_concat_dtypes(backend, dtype):
    a = RNG.integers(0, 2, (2, 3, 4)).astype(dtype)
    b = RNG.integers(0, 2, (2, 1, 4)).astype(dtype)
    c = RNG.integers(0, 2, (2, 2, 4)).astype(dtype)
    np.testing.assert_array_equal(ops.Concat(a, b, c, axis=1, backend=backend), np.concatenate([a, b, c], 1))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_concat_axes_and_empty(backend, axis):
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = np.zeros((2, 3, 4), np.float32)
    shp = list(a.shape)
    shp[axis] = 0
    e = np.zeros(shp, np.float32)  # an empty input adds nothing
    np.testing.assert_array_equal(ops.Concat(a, e, b, axis=axis, backend=backend), np.concatenate([a, e, b], axis))
    np.testing.assert_array_equal(ops.ConcatV1(a, a, backend=backend), np.concatenate([a, a], 1))  # default axis 1
    np.testing.assert_array_equal(ops.Concat(a, axis=axis, backend=backend), a)


def test_split(backend):
    x = RNG.standard_normal((4, 7)).astype(np.float32)
    parts = ops.Split(x, i64(2, 0, 5), axis=1, backend=backend)
    for got, want in zip(parts, np.split(x, [2, 2], axis=1)):
        np.testing.assert_array_equal(got, want)
    parts = ops.Split(x, num_outputs=3, axis=-1, backend=backend)  # opset 18: 3, 3, 1
    assert [p.shape[1] for p in parts] == [3, 3, 1]
    np.testing.assert_array_equal(np.concatenate(parts, 1), x)
    parts = ops.SplitV1(x, split=(1, 3), backend=backend)
    np.testing.assert_array_equal(parts[1], x[1:])
    parts = ops.Split(x, num_outputs=2, backend=backend)
    np.testing.assert_array_equal(parts[0], x[:2])


SLICES = [  # starts, ends, axes, steps
    ((1,), (3,), None, None),
    ((0, 1), (2, -1), (0, 2), None),
    ((-1,), (-1000,), (1,), (-1,)),              # negative step back to the start
    ((10,), (-10,), (2,), (-2,)),                # out-of-range start clamps to the last element
    ((-100, 2), (100, 1000), (-3, -2), (3, 2)),  # clamped both ends
    ((2,), (1,), (0,), (1,)),                    # empty
    ((0,), (9223372036854775807,), (1,), (1,)),  # INT64_MAX end
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES, ids=str)
def test_slice(backend, starts, ends, axes, steps):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    index = [slice(None)] * 3
    for k, (s, e) in enumerate(zip(starts, ends)):
        a = k if axes is None else axes[k]
        index[a] = slice(s, e, 1 if steps is None else steps[k])
    args = [i64(*starts), i64(*ends)]
    if axes is not None:
        args.append(i64(*axes))
    if steps is not None:
        args.append(i64(*steps))
    np.testing.assert_array_equal(ops.Slice(x, *args, backend=backend), x[tuple(index)])


def test_slice_v1_and_int32_params(backend):
    x = RNG.integers(-5, 5, (4, 6)).astype(np.int64)
    np.testing.assert_array_equal(ops.SliceV1(x, starts=(1, 2), ends=(3, 100), backend=backend), x[1:3, 2:])
    np.testing.assert_array_equal(ops.SliceV1(x, starts=(-2,), ends=(10,), axes=(1,), backend=backend), x[:, -2:])
    s = np.array([3], np.int32)
    np.testing.assert_array_equal(ops.Slice(x, s, s + 2, backend=backend), x[3:5])


def test_slice_params_known_at_run_time(backend):
    g = dsl.Graph("dyn")
    x = g.input("x", (4, 6), dsl.f32)
    st = g.input("starts", (2,), dsl.i64)
    y = ops.Slice(x, st, g.constant("ends", i64(4, 6)))
    assert y.shape == (None, None)
    g.output(y, "y")
    model = g.compile(backend=backend)
    xv = RNG.standard_normal((4, 6)).astype(np.float32)
    for starts in ((1, 2), (3, -1)):
        np.testing.assert_array_equal(model.run({"x": xv, "starts": i64(*starts)})["y"], xv[starts[0]:, starts[1]:])


@pytest.mark.parametrize("in_shape,reps", [((2, 3), (2, 2)), ((3,), (4,)), ((2, 1, 3), (1, 3, 2)),
                                           ((2, 2), (0, 3)), ((1, 2, 1, 2, 1, 2, 1), (2, 1, 2, 1, 2, 1, 2))], ids=str)
def test_tile(backend, in_shape, reps):
    x = RNG.standard_normal(in_shape).astype(np.float32)
    np.testing.assert_array_equal(ops.Tile(x, i64(*reps), backend=backend), np.tile(x, reps))


def test_slicing_errors():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(dsl.VerifyError, match=r"Concat along axis 0: input 1 f32\[2,2\] differs from input 0 "
                                              r"f32\[2,3\] on axis 1"):
        ops.Concat(x, np.ones((2, 2), np.float32), axis=0)
    with pytest.raises(dsl.VerifyError, match="Concat inputs need one dtype"):
        ops.Concat(x, np.ones((2, 3), np.int64), axis=0)
    with pytest.raises(dsl.VerifyError, match="Concat axis 2 is out of range for rank 2"):
        ops.Concat(x, x, axis=2)
    with pytest.raises(dsl.VerifyError, match=r"Split sizes \[1, 1\] add up to 2, but the axis has 3"):
        ops.Split(x, i64(1, 1), axis=1)
    with pytest.raises(dsl.VerifyError, match="Split needs its split sizes"):
        ops.Split(x)
    with pytest.raises(dsl.VerifyError, match="Slice step along axis 1 is 0"):
        ops.Slice(x, i64(0), i64(1), i64(1), i64(0))
    with pytest.raises(dsl.VerifyError, match=r"Slice axes \[1, -1\] repeat an axis"):
        ops.Slice(x, i64(0, 0), i64(1, 1), i64(1, -1))
    with pytest.raises(dsl.VerifyError, match="Tile repeats has 1 entries, the input .* has 2 axes"):
        ops.Tile(x, i64(2))


def test_slice_property():
    """Random starts/ends/steps (out of range, negative) agree with numpy's slicing on numba."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    x = RNG.standard_normal((4, 5, 3)).astype(np.float32)
    bound = st.integers(-8, 8) | st.sampled_from([-2**63, 2**63 - 1])
    one = st.tuples(st.integers(-3, 2), bound, bound, st.integers(-3, 3).filter(bool))

    @hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
    @hypothesis.given(st.lists(one, min_size=1, max_size=3, unique_by=lambda t: t[0] % 3))
    def check(spec):
        index = [slice(None)] * 3
        for a, s, e, step in spec:
            index[a] = slice(s, e, step)
        cols = [i64(*(t[k] for t in spec)) for k in (1, 2, 0, 3)]
        np.testing.assert_array_equal(ops.Slice(x, *cols, backend="numba"), x[tuple(index)])
    check()


def test_reverse_sequence(backend):
    x = np.arange(4 * 3 * 2, dtype=np.float32).reshape(4, 3, 2)          # (time, batch, feature)
    lens = np.array([4, 0, 2], np.int64)
    y = ops.ReverseSequence(x, lens, backend=backend)
    want = x.copy()
    for b, n in enumerate(lens):
        want[:n, b] = x[:n, b][::-1]
    np.testing.assert_array_equal(y, want)
    xb = np.ascontiguousarray(x.transpose(1, 0, 2))                      # (batch, time, feature)
    yb = ops.ReverseSequence(xb, lens, batch_axis=0, time_axis=1, backend=backend)
    np.testing.assert_array_equal(yb, want.transpose(1, 0, 2))
    with pytest.raises(ValueError, match=r"sequence_lens \[5, 0, 2\] must lie in \[0, 4\]"):
        ops.ReverseSequence(x, np.array([5, 0, 2], np.int64), backend=backend)
