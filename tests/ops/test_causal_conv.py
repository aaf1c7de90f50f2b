"""CausalConvWithState on every backend against numpy: state carry, bias, SiLU, decode steps."""
import numpy as np
import pytest

import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(13)


def ref(x, w, bias=None, past=None, silu=False):
    b, c, n = x.shape
    k = w.shape[2]
    past = np.zeros((b, c, k - 1)) if past is None else past
    padded = np.concatenate([past, x], axis=2).astype(np.float64)
    y = np.stack([(padded[:, :, t:t + k] * w[None, :, 0, :]).sum(-1) for t in range(n)], axis=-1)
    if bias is not None:
        y += bias[None, :, None]
    if silu:
        y = y / (1 + np.exp(-y))
    return y, padded[:, :, n:]


def test_prefill_then_decode_carries_state(backend):
    x = RNG.standard_normal((2, 3, 6)).astype(np.float32)
    w = RNG.standard_normal((3, 1, 4)).astype(np.float32)
    bias = RNG.standard_normal(3).astype(np.float32)
    y, state = ops.CausalConvWithState(x, w, bias, activation="silu", backend=backend)
    want_y, want_state = ref(x, w, bias, silu=True)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(state, want_state)
    step = RNG.standard_normal((2, 3, 1)).astype(np.float32)     # one decode step continues the sequence
    y1, state1 = ops.CausalConvWithState(step, w, bias, state, activation="silu", backend=backend)
    full, _ = ref(np.concatenate([x, step], axis=2), w, bias, silu=True)
    np.testing.assert_allclose(y1[:, :, 0], full[:, :, -1], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(state1, np.concatenate([x, step], axis=2)[:, :, -3:])


def test_errors():
    x = np.zeros((1, 3, 5), np.float32)
    with pytest.raises(VerifyError, match=r"weight must be \(channels, 1, k\) = \(3, 1, k\)"):
        ops.CausalConvWithState(x, np.zeros((2, 1, 3), np.float32), backend="interpreter")
    with pytest.raises(VerifyError, match="activation 'gelu' is not one of"):
        ops.CausalConvWithState(x, np.zeros((3, 1, 3), np.float32), activation="gelu", backend="interpreter")
