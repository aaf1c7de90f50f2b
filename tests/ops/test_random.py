"""Random generators on every backend: the exact numbers of the counter-based generator
(a numpy SplitMix64 reference), their distributions, seeds, seedless runs, graphs; errors."""
import struct

import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

M64 = (1 << 64) - 1


def uniform_ref(seed, n, offset=0, stride=1):
    """u[i] = mix64(key + (stride·i + offset + 1)·golden) >> 11 scaled to [0, 1), in Python ints."""
    key = struct.unpack("<Q", struct.pack("<d", float(seed)))[0]
    out = []
    for i in range(n):
        z = (key + (stride * i + offset + 1) * 0x9E3779B97F4A7C15) & M64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        out.append((z >> 11) / 2.0 ** 53)
    return np.array(out)


def test_exact_numbers(backend):
    u = ops.RandomUniform(shape=(3, 4), low=-2.0, high=3.0, seed=7.0)(backend=backend)
    assert u.shape == (3, 4) and u.dtype == np.float32
    np.testing.assert_allclose(u.ravel(), -2 + 5 * uniform_ref(7.0, 12), rtol=1e-6)
    z = ops.RandomNormal(shape=(5,), mean=1.0, scale=2.0, seed=7.0, dtype=11)(backend=backend)
    u1, u2 = uniform_ref(7.0, 5, 0, 2), uniform_ref(7.0, 5, 1, 2)
    np.testing.assert_allclose(z, 1 + 2 * np.sqrt(-2 * np.log1p(-u1)) * np.cos(2 * np.pi * u2), rtol=1e-12)
    p = np.linspace(0, 1, 9).astype(np.float32)
    b = ops.Bernoulli(p, seed=3.0, backend=backend)
    np.testing.assert_array_equal(b, (uniform_ref(3.0, 9) < p).astype(np.float32))


def test_distributions(backend):
    x = np.zeros((100, 100), np.float16)
    u = ops.RandomUniformLike(x, low=1.0, high=2.0, seed=1.0, backend=backend)
    assert u.dtype == np.float16 and u.shape == x.shape
    assert 1 <= u.min() and u.max() <= 2 and abs(u.astype(np.float64).mean() - 1.5) < 0.01
    z = ops.RandomNormalLike(x.astype(np.int32), dtype=1, mean=3.0, scale=0.5, seed=2.0, backend=backend)
    assert z.dtype == np.float32 and abs(z.mean() - 3) < 0.02 and abs(z.std() - 0.5) < 0.02
    b = ops.Bernoulli(np.full((100, 100), 0.25), dtype=9, seed=4.0, backend=backend)   # bool draws from f64 p
    assert b.dtype == bool and abs(b.mean() - 0.25) < 0.02


def test_seeds_and_graph_runs(backend):
    a = ops.RandomUniform(shape=(64,), seed=5.0)(backend=backend)
    np.testing.assert_array_equal(a, ops.RandomUniform(shape=(64,), seed=5.0)(backend=backend))
    assert not np.array_equal(a, ops.RandomUniform(shape=(64,), seed=6.0)(backend=backend))
    g = dsl.Graph("noise")
    x = g.input("x", (64,), dsl.f32)
    g.output(ops.Add(x, ops.RandomNormal(shape=(64,))(graph=g)), "y")   # seedless: new numbers every run
    model = g.compile(backend=backend)
    zero = np.zeros(64, np.float32)
    r1, r2 = model.run({"x": zero})["y"], model.run({"x": zero})["y"]
    assert not np.array_equal(r1, r2) and abs(r1.mean()) < 0.5


def test_errors():
    with pytest.raises(VerifyError, match="RandomUniform dtype 6 is not accepted; accepted: f16, bf16, f32, f64"):
        ops.RandomUniform(shape=(2,), dtype=6)(backend="interpreter")
    with pytest.raises(VerifyError, match="RandomUniformLike without a dtype attribute takes the input's dtype"):
        ops.RandomUniformLike(np.zeros(3, np.int64), backend="interpreter")
    with pytest.raises(VerifyError, match="Bernoulli input must hold float probabilities"):
        ops.Bernoulli(np.zeros(3, np.int32), backend="interpreter")


def test_multinomial(backend):
    logits = np.log(np.array([[0.1, 0.2, 0.7], [0.5, 0.5, 1e-12]]))
    y = ops.Multinomial(logits, sample_size=4000, seed=3.0, dtype=7, backend=backend)
    assert y.shape == (2, 4000) and y.dtype == np.int64
    for row, p in zip(y, ([0.1, 0.2, 0.7], [0.5, 0.5, 0.0])):
        np.testing.assert_allclose(np.bincount(row, minlength=3) / 4000, p, atol=0.03)
    # exact draws: sample i takes the first class whose cumulative probability exceeds u_i
    u = uniform_ref(3.0, 8)
    cum = np.cumsum(np.exp(logits[0]) / np.exp(logits[0]).sum())
    want = [int(np.argmax(cum > v)) for v in u]
    np.testing.assert_array_equal(ops.Multinomial(logits[:1], sample_size=8, seed=3.0, backend=backend)[0], want)
    with pytest.raises(VerifyError, match=r"Multinomial input must be \(batch_size, class_size\)"):
        ops.Multinomial(np.zeros(3, np.float32), backend="interpreter")
