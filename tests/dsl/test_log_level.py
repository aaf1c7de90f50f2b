"""The run-time dsl.log threshold: kernel.log_level and OPDSL_LOG_LEVEL read at launch filter the
calls compiled in (at or above the compile-time floor) without recompiling, on every backend."""
import re
import warnings

import numpy as np
import pytest

import dsl
from dsl import In, Out, f32
from backends import base

SCALE = 1.0  # a module constant the variant test overrides
LEVELS = ("debug", "info", "warn", "error")


@dsl.func
def noted(v: f32) -> f32:
    dsl.log.info("lvl-info-func %d", 7)  # a @dsl.func's calls read the same threshold
    return v * SCALE


@dsl.kernel(threads=2, log_floor="debug")
def every_level(x: In[f32], y: Out[f32]):
    i = dsl.thread_id()
    dsl.log.debug("lvl-debug %d", i)
    dsl.log.info("lvl-info %d", i)
    dsl.log.warn("lvl-warn %d", i)
    dsl.log.error("lvl-error %d", i)
    print("plain-print", i)
    y[i] = noted(x[i])


@dsl.kernel(threads=2, log_level="warn")
def warn_floor(x: In[f32], y: Out[f32]):
    i = dsl.thread_id()
    dsl.log.debug("lvl-debug %d", i)
    dsl.log.info("lvl-info %d", i)
    dsl.log.warn("lvl-warn %d", i)
    y[i] = x[i]


@dsl.kernel(threads=2)
def silent(x: In[f32], y: Out[f32]):
    i = dsl.thread_id()
    print("plain-print", i)  # print() always prints: no threshold argument for it
    y[i] = x[i] * 2.0


X = np.array([1.5, -2.0], np.float32)


def launch(kernel, backend, capfd):
    """The set of (message tag, thread) lines a launch printed; checks the result too."""
    y = np.zeros(2, np.float32)
    kernel(X, y, backend=backend)
    out = capfd.readouterr().out
    return {(m.group(1), int(m.group(2))) for m in re.finditer(r"(lvl-[a-z]+(?:-func)?|plain-print) (\d+)", out)}, y


def tags(seen):
    return {t for t, _ in seen}


def expected(threshold):
    """What every_level prints at run-time ``threshold``: each thread, every level at or above it."""
    keep = LEVELS[LEVELS.index(threshold):] if threshold != "off" else ()
    out = {f"lvl-{lv}" for lv in keep} | {"plain-print"}
    if "info" in keep:
        out.add("lvl-info-func")
    return out


@pytest.fixture
def reset_levels():
    yield
    for k in (every_level, warn_floor):
        k.log_level = None if k is every_level else "warn"


def test_threshold_changes_output_without_recompiling(backend, capfd, monkeypatch, reset_levels):
    monkeypatch.setenv("OPDSL_LOG_LEVEL", "warn")
    seen, y = launch(every_level, backend, capfd)  # compiled here, once
    np.testing.assert_array_equal(y, X * SCALE)
    assert tags(seen) == expected("warn") and {t for _, t in seen} == {0, 1}
    launchers = dict(every_level._variants)
    key = next(k for b, k in launchers if b == backend)
    cache_key = every_level.cache_key(backend, key)

    def no_compile(request):
        raise AssertionError("a run-time log level must not recompile")
    monkeypatch.setattr(base.get(backend), "compile", no_compile)
    for level in ("error", "debug", "off", "info", "warn"):
        every_level.log_level = level
        seen, _ = launch(every_level, backend, capfd)
        assert tags(seen) == expected(level), level
        assert every_level.cache_key(backend, key) == cache_key
    assert every_level._variants == launchers


def test_env_var_is_read_at_each_launch_and_the_kernel_level_wins(backend, capfd, monkeypatch, reset_levels):
    for level in ("error", "info", "off"):
        monkeypatch.setenv("OPDSL_LOG_LEVEL", level)
        assert tags(launch(every_level, backend, capfd)[0]) == expected(level)
    monkeypatch.setenv("OPDSL_LOG_LEVEL", "ERROR")  # any case, as at compile time
    assert tags(launch(every_level, backend, capfd)[0]) == expected("error")
    every_level.log_level = "debug"  # explicit kernel.log_level > OPDSL_LOG_LEVEL > "warn"
    assert tags(launch(every_level, backend, capfd)[0]) == expected("debug")
    monkeypatch.delenv("OPDSL_LOG_LEVEL")
    every_level.log_level = None
    assert every_level.log_level is None
    assert tags(launch(every_level, backend, capfd)[0]) == expected("warn")


def test_variants_follow_their_kernel_unless_given_their_own(backend, capfd, monkeypatch, reset_levels):
    monkeypatch.setenv("OPDSL_LOG_LEVEL", "warn")
    doubled = every_level.variant(defines={"SCALE": 2.0})
    assert doubled.log_level is None and doubled.log_floor == "debug"
    every_level.log_level = "error"
    seen, y = launch(doubled, backend, capfd)
    np.testing.assert_array_equal(y, X * 2.0)
    assert tags(seen) == expected("error")
    doubled.log_level = "info"
    assert tags(launch(doubled, backend, capfd)[0]) == expected("info")
    assert tags(launch(every_level, backend, capfd)[0]) == expected("error")


def test_floor_still_removes_code_and_the_threshold_is_never_below_it(backend, capfd, reset_levels):
    with pytest.warns(UserWarning, match=r"below the kernel's compile-time floor 'warn'.*log_floor='debug'"):
        warn_floor.log_level = "debug"
    assert warn_floor.log_floor == "warn"
    assert tags(launch(warn_floor, backend, capfd)[0]) == {"lvl-warn"}
    if backend == "interpreter":
        return
    src = warn_floor.source(backend, X, np.zeros(2, np.float32))
    assert "lvl-warn" in src and "lvl-info" not in src and "lvl-debug" not in src
    gate = {"numba": "if _loglvl <= 2:", "opencl": "if (opdsl_loglvl <= 2) printf("}[backend]
    assert gate in src


def test_kernels_without_levelled_logs_take_no_hidden_argument(compiled_backend, capfd):
    src = silent.source(compiled_backend, X, np.zeros(2, np.float32))
    assert "loglvl" not in src
    seen, y = launch(silent, compiled_backend, capfd)
    assert tags(seen) == {"plain-print"}
    np.testing.assert_array_equal(y, X * 2.0)
    src = every_level.source(compiled_backend, X, np.zeros(2, np.float32))
    assert src.count("loglvl") >= 6  # the argument, the calls of the @dsl.func, its 5 compared calls


def test_bad_levels_are_value_errors_naming_the_accepted_ones(backend, capfd, monkeypatch, reset_levels):
    with pytest.raises(ValueError, match=r"every_level.log_level = 'verbose' is not a log level; accepted: "
                                         r"debug, info, warn, error, off"):
        every_level.log_level = "verbose"
    with pytest.raises(ValueError, match=r"every_level.log_level = 7 is not a log level"):
        every_level.log_level = 7
    assert every_level.log_level is None
    with pytest.raises(ValueError, match=r"@dsl.kernel\(log_floor\) = 'loud' is not a log level; accepted: debug"):
        dsl.kernel(log_floor="loud")(every_level.fn)
    with pytest.raises(ValueError, match=r"@dsl.kernel\(log_level\) = 'INFO' is not a log level"):
        dsl.kernel(log_level="INFO")(every_level.fn)
    launch(every_level, backend, capfd)  # compiled before the variable goes bad
    monkeypatch.setenv("OPDSL_LOG_LEVEL", "7")
    y = np.zeros(2, np.float32)
    with pytest.raises(ValueError, match=r"OPDSL_LOG_LEVEL='7'; accepted: debug, info, warn, error, off"):
        every_level(X, y, backend=backend)
    assert not y.any() and capfd.readouterr().out == ""  # raised before anything ran
    every_level.log_level = "warn"  # an explicit level does not read the variable
    assert tags(launch(every_level, backend, capfd)[0]) == expected("warn")


class LoggedScale(dsl.Op):
    kernels = {"default": every_level}

    def infer(self, x):
        return x.spec


def test_ops_and_models_follow_their_kernels_level(compiled_backend, capfd, monkeypatch, reset_levels):
    monkeypatch.setenv("OPDSL_LOG_LEVEL", "warn")
    g = dsl.Graph("logged")
    g.output(LoggedScale(g.input("x", (2,), dsl.f32)), "y")
    model = g.compile(backend=compiled_backend, fuse=False)
    capfd.readouterr()

    def run():
        y = model.run({"x": X})["y"]
        np.testing.assert_array_equal(y, X * SCALE)
        out = capfd.readouterr().out
        return {t for t in re.findall(r"lvl-[a-z]+(?:-func)?|plain-print", out)}
    assert run() == expected("warn")
    LoggedScale.set_log_level("error")
    assert every_level.log_level == "error"
    assert run() == expected("error")
    monkeypatch.setenv("OPDSL_LOG_LEVEL", "debug")  # the op's kernel has its own level now
    assert run() == expected("error")
    LoggedScale.set_log_level(None)
    assert run() == expected("debug")
    with pytest.raises(ValueError, match="accepted: debug, info, warn, error, off"):
        LoggedScale.set_log_level("loud")


def test_set_log_level_on_an_op_without_kernels_says_so():
    class NoKernels(dsl.Op):
        def infer(self, x):
            return x.spec
    with pytest.raises(ValueError, match=r"NoKernels.set_log_level\('info'\): the op has no dsl.kernel"):
        NoKernels.set_log_level("info")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        NoKernels.set_log_level(None)


def test_levels_survive_pickling_by_value():
    import pickle

    @dsl.kernel(threads=2, log_floor="debug", log_level="error")
    def local_logger(x: In[f32], y: Out[f32]):
        i = dsl.thread_id()
        dsl.log.info("lvl-info %d", i)
        y[i] = x[i]

    back = pickle.loads(pickle.dumps(local_logger))
    assert back is not local_logger and back.log_floor == "debug" and back.log_level == "error"
    local_logger.log_level = None
    back = pickle.loads(pickle.dumps(local_logger))
    assert back.log_floor == "debug" and back.log_level is None


@dsl.kernel(threads=2, log_floor="debug")
def team_logger(x: In[f32], y: Out[f32]):
    s = dsl.scratch((2,), f32)
    i = dsl.thread_id()
    s[i] = x[i]
    dsl.log.debug("lvl-debug %d", i)
    dsl.sync()  # the numba backend splits the body into regions: each takes the threshold
    dsl.log.error("lvl-error %d", i)
    y[i] = s[1 - i]


def test_team_kernels_with_sync_pass_the_threshold_to_every_region(backend, capfd, reset_team):
    y = np.zeros(2, np.float32)
    for level, want in (("error", {"lvl-error"}), ("debug", {"lvl-debug", "lvl-error"}), ("off", set())):
        team_logger.log_level = level
        team_logger(X, y, backend=backend)
        out = capfd.readouterr().out
        assert set(re.findall(r"lvl-[a-z]+", out)) == want, level
        np.testing.assert_array_equal(y, X[::-1])


@pytest.fixture
def reset_team():
    yield
    team_logger.log_level = None


def test_debug_mode_takes_the_threshold_after_its_error_record(compiled_backend, capfd):
    checked = dsl.kernel(threads=2, log_floor="debug", log_level="info", debug=True)(every_level.fn)
    seen, y = launch(checked, compiled_backend, capfd)
    assert tags(seen) == expected("info")
    np.testing.assert_array_equal(y, X * SCALE)
    with pytest.raises(IndexError, match="out of bounds for tensor 'y'"):
        checked(X, np.zeros(1, np.float32), backend=compiled_backend)  # the record still reports
    capfd.readouterr()
