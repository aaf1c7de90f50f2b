"""Pad (ops/pad.py) on every backend against numpy.pad: modes, negative pads, axes, opsets, errors."""
import ml_dtypes
import numpy as np
import pytest

import dsl
import ops
from ops.pad import Pad1, Pad2, Pad11

RNG = np.random.default_rng(5)
NP_MODE = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes(backend, mode):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    pads = np.array([0, 2, 1, 1, 1, 3], np.int64)  # begins then ends
    kw = {"constant_values": 1.5} if mode == "constant" else {}
    want = np.pad(x, ((0, 1), (2, 1), (1, 3)), mode=NP_MODE[mode], **kw)
    got = ops.Pad(x, pads, np.array(1.5, np.float32), mode=mode, backend=backend)
    np.testing.assert_array_equal(got, want)


def test_pad_negative_crops_and_axes(backend):
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    got = ops.Pad(x, np.array([-1, 2, 1, -2], np.int64), backend=backend)
    np.testing.assert_array_equal(got, np.pad(x, ((0, 1), (2, 0)))[1:, :-2])
    got = ops.Pad(x, np.array([1, 2], np.int64), None, np.array([-1], np.int64), mode="edge", backend=backend)
    np.testing.assert_array_equal(got, np.pad(x, ((0, 0), (1, 2)), mode="edge"))


def test_pad_dtypes_and_old_opsets(backend):
    for dt in (np.bool_, ml_dtypes.bfloat16):
        x = RNG.integers(0, 2, (3, 2)).astype(dt)
        got = ops.Pad(x, np.array([1, 0, 0, 1], np.int64), backend=backend)
        np.testing.assert_array_equal(got, np.pad(x, ((1, 0), (0, 1))))
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(Pad2(x, pads=[1, 1, 0, 0], value=3.0, backend=backend),
                                  np.pad(x, ((1, 0), (1, 0)), constant_values=3.0))
    np.testing.assert_array_equal(Pad1(x, paddings=[0, 2, 0, 1], mode="reflect", backend=backend),
                                  np.pad(x, ((0, 0), (2, 1)), mode="reflect"))


def test_pad_graph_with_runtime_pads(backend):
    g = dsl.Graph("pad")
    xi = g.input("x", (2, 3), dsl.f32)
    pi = g.input("pads", (4,), dsl.i64)
    g.output(ops.Pad(xi, pi, mode="wrap"), "y")
    model = g.compile(backend=backend)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    for p in ([1, 0, 0, 2], [0, 4, 1, 0]):
        got = model.run({"x": x, "pads": np.array(p, np.int64)})["y"]
        np.testing.assert_array_equal(got, np.pad(x, ((p[0], p[2]), (p[1], p[3])), mode="wrap"))


def test_pad_errors():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(dsl.VerifyError, match=r"Pad pads \[1, 1\] must have 2 \* rank = 4 entries"):
        ops.Pad(x, np.array([1, 1], np.int64))
    with pytest.raises(dsl.VerifyError, match="mode 'wrap' is not accepted at opsets 11-17"):
        Pad11(x, np.array([0, 0, 0, 0], np.int64), mode="wrap")
    with pytest.raises(dsl.VerifyError, match="crop axis 1 of size 3 below zero"):
        ops.Pad(x, np.array([0, -2, 0, -2], np.int64))
    with pytest.raises(dsl.VerifyError, match="constant_value .* must have data's dtype f32"):
        ops.Pad(x, np.array([0, 0, 0, 0], np.int64), np.array(1, np.int64))


def test_center_crop_pad(backend):
    x = np.arange(5 * 6 * 3, dtype=np.float32).reshape(5, 6, 3)
    y = ops.CenterCropPad(x, np.array([3, 9], np.int64), axes=(0, 1), backend=backend)
    want = np.zeros((3, 9, 3), np.float32)
    want[:, 1:7] = x[1:4]                      # crop 5 -> 3 drops 1 leading row; pad 6 -> 9 adds 1 leading
    np.testing.assert_array_equal(y, want)
    y = ops.CenterCropPad(x, np.array([4, 6, 2], np.int64), backend=backend)  # every axis
    np.testing.assert_array_equal(y, x[0:4, :, 0:2])
