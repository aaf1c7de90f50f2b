"""DFT, STFT and the window generators on every backend against numpy.fft and the formulas."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(21)


def as_pairs(z):
    return np.stack([z.real, z.imag], axis=-1)


def test_dft_forward_inverse_and_onesided(backend):
    x = RNG.standard_normal((2, 12, 3, 1)).astype(np.float32)           # real signal along axis 1
    y = ops.DFT17(x, axis=1, backend=backend)
    np.testing.assert_allclose(y, as_pairs(np.fft.fft(x[..., 0], axis=1)), rtol=1e-4, atol=1e-4)
    half = ops.DFT17(x, axis=1, onesided=1, backend=backend)
    np.testing.assert_allclose(half, as_pairs(np.fft.rfft(x[..., 0], axis=1)), rtol=1e-4, atol=1e-4)
    z = RNG.standard_normal((3, 10, 2)).astype(np.float32)               # complex, axis -2 (opset 20)
    zc = z[..., 0] + 1j * z[..., 1]
    inv = ops.DFT(z, None, np.array(-2, np.int64), inverse=1, backend=backend)
    np.testing.assert_allclose(inv, as_pairs(np.fft.ifft(zc, axis=1)), rtol=1e-4, atol=1e-5)
    padded = ops.DFT(z, np.array(16, np.int64), np.array(1, np.int64), backend=backend)
    np.testing.assert_allclose(padded, as_pairs(np.fft.fft(zc, n=16, axis=1)), rtol=1e-4, atol=1e-4)
    spectrum = as_pairs(np.fft.rfft(x[0, :, 0, 0])).astype(np.float32)[None]   # (1, 7, 2)
    back = ops.DFT(spectrum, None, np.array(1, np.int64), inverse=1, onesided=1, backend=backend)
    np.testing.assert_allclose(back[0, :, 0], x[0, :, 0, 0], rtol=1e-4, atol=1e-5)


def test_stft_matches_framed_fft(backend):
    sig = RNG.standard_normal((2, 40, 1)).astype(np.float32)
    win = np.hanning(16).astype(np.float32)
    y = ops.STFT(sig, np.array(8, np.int64), win, backend=backend)
    frames = np.stack([sig[:, f * 8:f * 8 + 16, 0] * win for f in range(4)], axis=1)
    np.testing.assert_allclose(y, as_pairs(np.fft.rfft(frames, axis=-1)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(backend, periodic):
    size = np.array(10, np.int64)
    n = np.arange(10)
    big_n = 10 if periodic else 9
    want = {ops.HannWindow: np.sin(np.pi * n / big_n) ** 2,
            ops.HammingWindow: 25 / 46 - 21 / 46 * np.cos(2 * np.pi * n / big_n),
            ops.BlackmanWindow: 0.42 - 0.5 * np.cos(2 * np.pi * n / big_n) + 0.08 * np.cos(4 * np.pi * n / big_n)}
    for op, ref in want.items():
        np.testing.assert_allclose(op(size, periodic=periodic, backend=backend), ref, rtol=1e-5, atol=1e-6)


def test_window_size_known_at_run_time():
    g = dsl.Graph("w")
    size = g.input("size", (), dsl.i64)
    g.output(ops.HannWindow(size), "w")
    model = g.compile(backend="numba")
    np.testing.assert_allclose(model.run({"size": np.array(6, np.int64)})["w"],
                               np.sin(np.pi * np.arange(6) / 6) ** 2, atol=1e-6)


def test_errors():
    with pytest.raises(VerifyError, match="must end in a real \\(1\\) or complex \\(2\\) axis"):
        ops.DFT17(np.zeros((2, 3), np.float32), axis=0, backend="interpreter")
    with pytest.raises(VerifyError, match="needs a window or a frame_length"):
        ops.STFT(np.zeros((1, 8, 1), np.float32), np.array(2, np.int64), backend="interpreter")
