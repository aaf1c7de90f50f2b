"""One argument check (dsl/runtime/arg_check.py) on every road a launch takes: the first eager
call (``Kernel.bind``), later eager calls (the fast binder and, on numba, the one-hop binder),
a prepared launch (what a model's plan freezes) and a model run reading its feeds in place.
Each rule refuses its bad argument with the same message on each road, before anything runs."""
import numpy as np
import pytest

import dsl
import ops
from dsl import In, Out, f32, i32
from dsl.opgraph import binding
from dsl.runtime import arg_check


@dsl.kernel
def axpy(x: In[f32, 1], y: Out[f32, 1], a: f32, n: i32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y[i] = a * x[i] + f32(n)


def _good():
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    return x, np.zeros_like(x)


def _read_only(a):
    a.flags.writeable = False
    return a


# rule -> (arguments from (x, y), error type, words of the message)
BAD = {
    "dtype": (lambda x, y: (x.astype(np.float64), y, 2.0, 1), TypeError, "argument 'x' has dtype f64"),
    "rank": (lambda x, y: (x.reshape(8, 8), y, 2.0, 1), ValueError, "argument 'x' has 2 dimension(s); expected 1"),
    "contiguity": (lambda x, y: (np.repeat(x, 2)[::2], y, 2.0, 1), ValueError, "argument 'x' is not C-contiguous"),
    "read-only output": (lambda x, y: (x, _read_only(y.copy()), 2.0, 1), ValueError, "the array is read-only"),
    "overlap": (lambda x, y: (y[:64], y, 2.0, 1), ValueError, "arguments 'x' (In[dsl.f32, 1]) and 'y' (Out[dsl.f32, 1]) overlap"),
    "scalar kind": (lambda x, y: (x, y, "2", 1), TypeError, "argument 'a' is f32; got str"),
    "scalar range": (lambda x, y: (x, y, 2.0, 2 ** 31), ValueError, "argument 'n' = 2147483648 does not fit i32"),
    "scalar range (numpy)": (lambda x, y: (x, y, 2.0, np.int64(-2 ** 40)), ValueError, "does not fit i32"),
}


def _expect_refused(call, rule, x, y):
    make, err, words = BAD[rule]
    args = make(x, y)
    out = args[1]
    before = out.copy()
    with pytest.raises(err, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        call(*args)
    np.testing.assert_array_equal(out, before)  # nothing ran


@pytest.mark.parametrize("rule", list(BAD))
def test_each_rule_refuses_the_first_eager_call(rule, backend, monkeypatch):
    import copy
    from dsl import config
    monkeypatch.setattr(config, "_default_backend", backend)
    k = copy.copy(axpy)
    k._hop = None
    x, y = _good()
    _expect_refused(k, rule, x, y)


@pytest.mark.parametrize("rule", list(BAD))
def test_each_rule_refuses_a_call_after_warm_launches(rule, backend, monkeypatch):
    """After good launches the fast binder (and on numba the one-hop binder) takes these types;
    a bad argument must still reach Kernel.bind and its message."""
    from dsl import config
    monkeypatch.setattr(config, "_default_backend", backend)
    x, y = _good()
    for _ in range(3):
        axpy(x, y, 2.0, 1)
    np.testing.assert_allclose(y, 2 * x + 1, rtol=1e-6)
    if backend == "numba":
        assert axpy._hop is not None
    _expect_refused(axpy, rule, x, y)


@pytest.mark.parametrize("rule", list(BAD))
def test_each_rule_refuses_a_prepared_launch(rule, backend):
    """``Kernel.prepare`` is how a model plan binds each launch once, before freezing it."""
    x, y = _good()
    _expect_refused(lambda *a: axpy.prepare(a, {}, backend=backend), rule, x, y)


def test_generated_binders_paste_the_rules():
    """The fast binder of a kernel with an Out and an i32 carries the contiguity, writability,
    overlap and range lines; the full rules raise what those lines only refuse."""
    x, y = _good()
    fast = axpy._fast
    assert fast(x, y, 2.0, 1) is not None
    assert fast(x, _read_only(y.copy()), 2.0, 1) is None
    assert fast(y[:64], y, 2.0, 1) is None
    assert fast(x, y, 2.0, 2 ** 31) is None
    assert fast(x, y, 2.0, np.int64(2 ** 31)) is None
    assert fast(x, y, True, 1) is None
    assert fast(x, y, np.float64(2.0), np.int8(3)) is not None


def test_rebinds_accepts_only_what_the_bound_launch_was_checked_with():
    buf = np.zeros((4, 8), np.float32)
    assert arg_check.rebinds(np.ones((4, 8), np.float32), buf, False)
    assert not arg_check.rebinds(np.ones((4, 8), np.float64), buf, False)
    assert not arg_check.rebinds(np.ones((8, 4), np.float32), buf, False)
    assert not arg_check.rebinds(np.ones((4, 16), np.float32)[:, ::2], buf, False)
    assert not arg_check.rebinds(np.ma.masked_array(np.ones((4, 8), np.float32)), buf, False)
    ro = _read_only(np.ones((4, 8), np.float32))
    assert not arg_check.rebinds(ro, buf, False) and arg_check.rebinds(ro, buf, True)
    raw = np.zeros(4 * 8 * 4 + 1, np.uint8)[1:].view(np.float32).reshape(4, 8)  # misaligned
    assert not arg_check.rebinds(raw, buf, True)


@pytest.fixture(scope="module")
def relu_models():
    out = {}
    for b in ("interpreter", "numba", "opencl"):
        g = dsl.Graph("relu_feed")
        x = g.input("x", (4, 64), dsl.f32)
        g.output(ops.Relu(ops.Neg(x)), "y")
        try:
            out[b] = g.compile(backend=b)
        except Exception as e:  # pragma: no cover - a backend missing here
            out[b] = e
    return out


@pytest.mark.parametrize("feed", ["plain", "strided", "read-only", "misaligned"])
def test_a_model_run_reads_only_feeds_the_rules_accept_in_place(feed, backend, relu_models, monkeypatch):
    """Feeds that fail ``rebinds`` are copied into the plan's buffer instead: the result is the
    same and the feed is never written."""
    monkeypatch.setattr(binding, "MIN_BYTES", 0)
    model = relu_models[backend]
    if isinstance(model, Exception):
        pytest.skip(str(model))
    model._plans.clear()  # plans built with MIN_BYTES = 0
    want = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    if feed == "strided":
        a = np.repeat(want, 2, axis=1)[:, ::2]
    elif feed == "misaligned":
        a = np.zeros(want.nbytes + 1, np.uint8)[1:].view(np.float32).reshape(want.shape)
        a[...] = want
    else:
        a = want.copy()
    if feed == "read-only":
        _read_only(a)
    before = a.copy()
    for _ in range(2):
        np.testing.assert_array_equal(model.run({"x": a})["y"], np.maximum(-want, 0))
    np.testing.assert_array_equal(a, before)
