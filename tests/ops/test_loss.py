"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss on every backend against numpy."""
import numpy as np
import pytest

import ops

RNG = np.random.default_rng(3)


def ref_nll(logp, target, weight=None, ignore=None, reduction="mean"):
    n, c = logp.shape[:2]
    lp = logp.reshape(n, c, -1)
    t = target.reshape(n, -1)
    w = np.ones(c) if weight is None else weight.astype(np.float64)
    keep = np.ones_like(t, bool) if ignore is None else t != ignore
    tc = np.where(keep, t, 0)
    picked = np.take_along_axis(lp, tc[:, None, :], axis=1)[:, 0, :]
    ww = np.where(keep, w[tc], 0.0)
    loss = -picked * ww
    if reduction == "none":
        return loss.reshape(target.shape)
    return loss.sum() if reduction == "sum" else loss.sum() / ww.sum()


def log_softmax(x):
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_nll_loss_with_weights_and_ignore(backend, reduction):
    x = RNG.standard_normal((4, 5, 3)).astype(np.float32)
    t = RNG.integers(0, 5, (4, 3)).astype(np.int64)
    t[1, 2] = -100
    w = RNG.uniform(0.5, 2, 5).astype(np.float32)
    y = ops.NegativeLogLikelihoodLoss(x, t, w, reduction=reduction, ignore_index=-100, backend=backend)
    want = ref_nll(x.astype(np.float64), t, w, -100, reduction)
    assert y.shape == np.shape(want) and y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_softmax_cross_entropy_outputs_log_prob(backend):
    x = (RNG.standard_normal((3, 6)) * 5).astype(np.float32)
    t = RNG.integers(0, 6, (3,)).astype(np.int32)
    loss, logp = ops.SoftmaxCrossEntropyLoss(x, t, backend=backend)
    np.testing.assert_allclose(logp, log_softmax(x.astype(np.float64)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss, ref_nll(log_softmax(x.astype(np.float64)), t), rtol=1e-5)
    x4 = RNG.standard_normal((2, 3, 2, 2)).astype(np.float64)
    t4 = RNG.integers(0, 3, (2, 2, 2)).astype(np.int64)
    loss, _ = ops.SoftmaxCrossEntropyLoss(x4, t4, reduction="sum", backend=backend)
    np.testing.assert_allclose(loss, ref_nll(log_softmax(x4), t4, reduction="sum"), rtol=1e-5)


def test_bad_targets_are_errors():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"target value 3 is outside the classes \[0, 3\)"):
        ops.NegativeLogLikelihoodLoss(x, np.array([0, 3]), backend="interpreter")
    with pytest.raises(ValueError, match="target .* must have shape"):
        ops.NegativeLogLikelihoodLoss(x, np.zeros((3,), np.int64), backend="interpreter")
    with pytest.raises(ValueError, match="reduction 'avg' is not one of none, sum, mean"):
        ops.SoftmaxCrossEntropyLoss(x, np.zeros((2,), np.int64), reduction="avg", backend="interpreter")


def test_two_classes_in_a_graph():
    """Targets are checked at every run, not at model build (where inputs hold placeholders)."""
    import dsl
    g = dsl.Graph("loss")
    x = g.input("x", (None, 2), dsl.f32)
    t = g.input("t", (None,), dsl.i64)
    g.output(ops.SoftmaxCrossEntropyLoss(x, t, reduction="sum")[0], "loss")
    model = g.compile(backend="numba")
    xv = RNG.standard_normal((5, 2)).astype(np.float32)
    tv = np.array([0, 1, 1, 0, 1])
    np.testing.assert_allclose(model.run({"x": xv, "t": tv})["loss"],
                               ref_nll(log_softmax(xv.astype(np.float64)), tv, reduction="sum"), rtol=1e-5)
    with pytest.raises(ValueError, match="target value 2 is outside"):
        model.run({"x": xv, "t": np.array([0, 1, 2, 0, 1])})
