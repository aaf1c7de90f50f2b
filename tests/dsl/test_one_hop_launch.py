"""The one-hop launch (dsl/runtime/hop.py): after a small launch, ``kernel(...)`` with the same
argument types goes straight to the serial entry's machine code.  It must compute what the full
path computes and never skip a check: every refused launch falls back to ``Kernel.bind``, whose
errors are the ones users see."""
import numpy as np
import pytest

import dsl
from dsl import In, Out, f32, i32


@dsl.kernel
def scale_shift(x: In[f32], y: Out[f32], a: f32, n: i32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = a * x.flat[i] + f32(n)


@dsl.kernel
def add_rows(x: In[f32, 2], y: Out[f32, 2]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] + 1.0


def _want(x, a, n):
    return np.float32(a) * x + np.float32(n)


def _fresh(kernel):
    """A copy of ``kernel`` sharing its compiled variants but without a one-hop binder."""
    import copy
    k = copy.copy(kernel)
    k._hop = None
    return k


def test_launches_after_the_first_go_straight_to_machine_code_on_numba(backend, monkeypatch):
    from dsl import config
    monkeypatch.setattr(config, "_default_backend", backend)
    k = _fresh(scale_shift)
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    y = np.zeros_like(x)
    k(x, y, 2.0, 3)
    k(x, y, 2.0, 3)  # the fast path (the first launch compiled): the binder is made here
    assert (k._hop is not None) == (backend == "numba")  # the others offer no direct entry
    for a, n in ((0.1, 7), (np.float32(-2.5), np.int32(-4)), (3, np.int64(5)), (np.float64(1e-3), 2**31 - 1)):
        y.fill(np.nan)
        k(x, y, a, n)
        np.testing.assert_array_equal(y, _want(x, a, n))  # a Python float rounds to f32 once, as numpy does


def test_every_rank_and_dtype_keeps_its_own_checks():
    k = _fresh(add_rows)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.zeros_like(x)
    k(x, y, backend="numba")
    k(x, y)
    k(x, y)
    assert k._hop is not None
    np.testing.assert_array_equal(y, x + 1)
    flat = np.zeros(12, np.float32)
    with pytest.raises(ValueError, match="argument 'x' has 1 dimension"):
        k(x.ravel(), flat)  # another rank: refused by the binder, explained by bind


def test_big_launches_take_the_parallel_entry_and_keyword_launches_the_full_path():
    from backends.numba.backend import SERIAL_MAX_ELEMENTS
    k = _fresh(scale_shift)
    small = np.ones(32, np.float32)
    out = np.zeros_like(small)
    k(small, out, 1.0, 1, backend="numba")
    k(small, out, 1.0, 1)
    hop = k._hop
    assert hop is not None
    big = np.linspace(0, 1, SERIAL_MAX_ELEMENTS, dtype=np.float32)
    big_out = np.zeros_like(big)
    assert hop(big, big_out, 2.0, 1) is False  # too big for the serial entry
    k(big, big_out, 2.0, 1)
    np.testing.assert_array_equal(big_out, _want(big, 2.0, 1))
    k(small, out, a=4.0, n=2)
    np.testing.assert_array_equal(out, _want(small, 4.0, 2))


@pytest.mark.parametrize("call,exc,words", [
    (lambda k, x, y: k(x.astype(np.float64), y, 1.0, 1), TypeError, ("'x'", "expected f32")),
    (lambda k, x, y: k(x[::2], y[::2], 1.0, 1), ValueError, ("not C-contiguous",)),
    (lambda k, x, y: k(x, y, 1.0, 2**40), ValueError, ("does not fit i32",)),
    (lambda k, x, y: k(x, y, 1.0, -2**31 - 1), ValueError, ("does not fit i32",)),
    (lambda k, x, y: k(x, y, 1.0, np.int64(2**40)), ValueError, ("does not fit i32",)),
    (lambda k, x, y: k(x, y, "2", 1), TypeError, ("'a' is f32",)),
    (lambda k, x, y: k(x, y, 1.0, True), TypeError, ("'n' is i32",)),
    (lambda k, x, y: k(x, x, 1.0, 1), ValueError, ("overlap in memory",)),
    (lambda k, x, y: k(y[:16], y[8:24], 1.0, 1), ValueError, ("overlap in memory",)),
    (lambda k, x, y: k(x, _read_only(y), 1.0, 1), ValueError, ("read-only",)),
])
def test_checks_still_apply_once_launches_take_one_hop(call, exc, words):
    k = _fresh(scale_shift)
    x = np.ones(32, np.float32)
    y = np.zeros(32, np.float32)
    k(x, y, 1.0, 1, backend="numba")
    k(x, y, 1.0, 1)
    assert k._hop is not None
    with pytest.raises(exc) as info:
        call(k, x, y)
    for w in words:
        assert w in str(info.value)
    np.testing.assert_array_equal(y, 2.0)  # nothing ran


def _read_only(a):
    v = a.view()
    v.flags.writeable = False
    return v


def test_the_default_backend_is_read_at_every_launch(monkeypatch):
    from dsl import config
    k = _fresh(scale_shift)
    x = np.ones(16, np.float32)
    y = np.zeros_like(x)
    monkeypatch.setattr(config, "_default_backend", "numba")
    k(x, y, 1.0, 1)
    k(x, y, 1.0, 1)
    assert k._hop is not None
    monkeypatch.setattr(config, "_default_backend", "interpreter")
    y.fill(0)
    k(x, y, 1.0, 2)
    np.testing.assert_array_equal(y, 3.0)
    assert any(b == "interpreter" for b, _ in k._variants)  # it ran there, not on the numba binder


def test_a_sigint_during_the_launch_raises_keyboard_interrupt(monkeypatch):
    """The binder checks the Ctrl-C counter after the entry returns, as every launch does."""
    from backends import interrupt
    from dsl.runtime import hop as hop_mod
    k = _fresh(scale_shift)
    x = np.ones(16, np.float32)
    y = np.zeros_like(x)
    k(x, y, 1.0, 1, backend="numba")
    k(x, y, 1.0, 1)
    assert k._hop is not None
    entry = k._hop.entry

    def entry_hit_by_sigint(*args):
        entry(*args)
        interrupt.COUNTER[0] += 1  # what the C handler does when SIGINT arrives
    launcher = next(v for (b, _), v in k._variants.items() if b == "numba")
    values = [x, y, np.float32(1.0), np.int32(1)]
    real = launcher.direct_entry(values, 1)
    made = hop_mod.build(k.params, values, real._replace(fn=entry_hit_by_sigint))
    with pytest.raises(KeyboardInterrupt):
        made(x, y, 1.0, 1)


T = dsl.TypeVar("T")


@dsl.kernel
def generic_double(x: In[T], y: Out[T]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] + x.flat[i]


def test_a_generic_kernel_takes_one_hop_per_dtype_and_falls_back_for_another(backend, monkeypatch):
    """In[T] tensors: the binder checks the dtype this launch bound T to (it once read the
    annotation's dtype, which a TypeVar does not have); another dtype takes the full path."""
    from dsl import config
    monkeypatch.setattr(config, "_default_backend", backend)
    k = _fresh(generic_double)
    for dtype in (np.float32, np.float32, np.float64, np.int32, np.float32, np.float64):
        x = np.arange(-8, 8).astype(dtype)
        y = np.zeros_like(x)
        k(x, y)
        np.testing.assert_array_equal(y, x + x)
