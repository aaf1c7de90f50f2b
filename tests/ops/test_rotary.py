"""RotaryEmbedding on every backend against a numpy rotation written here."""
import numpy as np
import pytest

import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(8)


def ref_rotary(x4, cos, sin, interleaved, rot):
    """x4 (batch, seq, heads, head); cos/sin (batch, seq, rot/2)."""
    y = x4.astype(np.float64).copy()
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    xr = x4[..., :rot].astype(np.float64)
    x1, x2 = (xr[..., 0::2], xr[..., 1::2]) if interleaved else np.split(xr, 2, axis=-1)
    real, imag = c * x1 - s * x2, s * x1 + c * x2
    if interleaved:
        y[..., 0:rot:2], y[..., 1:rot:2] = real, imag
    else:
        y[..., :rot] = np.concatenate([real, imag], axis=-1)
    return y


@pytest.mark.parametrize("interleaved", [0, 1])
def test_4d_with_position_ids_and_partial_rotation(backend, interleaved):
    x = RNG.standard_normal((2, 3, 4, 8)).astype(np.float32)       # (batch, heads, seq, head)
    angles = RNG.uniform(0, 6, (10, 3))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    pos = RNG.integers(0, 10, (2, 4)).astype(np.int64)
    y = ops.RotaryEmbedding(x, cos, sin, pos, interleaved=interleaved, rotary_embedding_dim=6, backend=backend)
    want = ref_rotary(x.transpose(0, 2, 1, 3), cos[pos], sin[pos], interleaved, 6).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_3d_with_per_token_caches(backend):
    x = RNG.standard_normal((2, 5, 3 * 4)).astype(np.float32)      # (batch, seq, heads * head)
    angles = RNG.uniform(0, 6, (2, 5, 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    y = ops.RotaryEmbedding(x, cos, sin, num_heads=3, backend=backend)
    want = ref_rotary(x.reshape(2, 5, 3, 4), cos, sin, 0, 4).reshape(2, 5, 12)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_errors():
    x = np.zeros((1, 2, 3, 8), np.float32)
    cache = np.zeros((4, 4), np.float32)
    with pytest.raises(ValueError, match=r"position_ids must lie in \[0, 4\)"):
        ops.RotaryEmbedding(x, cache, cache, np.full((1, 3), 4, np.int64), backend="interpreter")
    with pytest.raises(VerifyError, match="needs the num_heads attribute"):
        ops.RotaryEmbedding(np.zeros((1, 3, 8), np.float32), cache, cache, np.zeros((1, 3), np.int64),
                            backend="interpreter")
    with pytest.raises(VerifyError, match="last dim must be rotary_embedding_dim/2 = 4"):
        ops.RotaryEmbedding(x, cache[:, :3], cache[:, :3], np.zeros((1, 3), np.int64), backend="interpreter")
