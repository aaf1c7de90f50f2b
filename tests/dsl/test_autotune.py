"""@dsl.autotune: every config is timed once per (backend, key), the winner is remembered in memory
and on disk, OPDSL_AUTOTUNE=0 skips timing, a corrupt record is survived, and wrong configs or
keys are errors at decoration.  Which config wins is decided by replacing the timer, never by
measuring: nothing here asserts a speed."""
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dsl
from backends import cache
from dsl import In, InOut, Out, f32, i32
from dsl.runtime import autotune as tuning
from dsl.runtime.tuning_cache import TuningCacheWarning

CONFIGS = [{"TILE": 2}, {"TILE": 4}, {"TILE": 8}]


@dsl.kernel
def scale(x: In[f32], y: Out[f32], alpha: f32, TILE: dsl.const[i32]):
    """y = alpha * x, TILE elements at a time: the same result for every TILE."""
    lo, hi = dsl.split(x.size, grid=True)
    i = lo
    while i < hi:
        for j in range(i, min(i + TILE, hi)):
            y.flat[j] = alpha * x.flat[j]
        i += TILE


@dsl.kernel
def accumulate(x: In[f32], acc: InOut[f32], TILE: dsl.const[i32]):
    """acc += x: running it more than once on the caller's array would show."""
    lo, hi = dsl.split(x.size)
    i = lo
    while i < hi:
        for j in range(i, min(i + TILE, hi)):
            acc.flat[j] += x.flat[j]
        i += TILE


def tuned_scale(configs=CONFIGS, key=("x.size", "alpha")):
    """A new tuner around the same kernel: empty memory, same disk records (like a new process)."""
    return dsl.autotune(configs=configs, key=list(key))(scale)


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """Each test starts with no autotuning records (compiled variants stay in the kernels' memory)."""
    monkeypatch.setenv("OPDSL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OPDSL_AUTOTUNE", raising=False)
    cache.reset()
    yield tmp_path / "cache"
    cache.reset()


@pytest.fixture
def timed(monkeypatch):
    """Replace the timer: each config runs once and 'takes' SECONDS[TILE]; returns the TILEs timed."""
    seconds = {2: 3.0, 4: 1.0, 8: 2.0}  # TILE=4 wins
    calls = []

    def fake(run, config, reps):
        run()
        calls.append(config["TILE"])
        return seconds[config["TILE"]]
    monkeypatch.setattr(tuning, "measure", fake)
    return calls


@pytest.fixture
def no_timing(monkeypatch):
    def refuse(run, config, reps):
        raise AssertionError(f"config {config} was timed")
    monkeypatch.setattr(tuning, "measure", refuse)


def data(n=37):
    x = np.arange(n, dtype=np.float32) - 5
    return x, np.zeros_like(x)


def records(root):
    return sorted((root / "numba").glob("autotune-*.json"))


def test_result_is_numpys_on_every_backend(backend):
    tuned = tuned_scale()
    x, y = data()
    tuned(x, y, alpha=1.5, backend=backend)
    np.testing.assert_array_equal(y, 1.5 * x)
    assert tuned.best_config(x, y, alpha=1.5, backend=backend) in CONFIGS


def test_each_config_is_timed_once_then_the_winner_is_remembered(timed):
    tuned = tuned_scale()
    x, y = data()
    tuned(x, y, alpha=2.0, backend="numba")
    assert timed == [2, 4, 8]
    np.testing.assert_array_equal(y, 2.0 * x)
    assert tuned.best_config(x, y, alpha=2.0, backend="numba") == {"TILE": 4}
    y2 = np.zeros_like(y)
    tuned(x.copy(), y2, alpha=2.0, backend="numba")  # same key values: no timing
    np.testing.assert_array_equal(y2, 2.0 * x)
    y3 = np.zeros_like(y)
    tuned[3](x, y3, alpha=2.0, backend="numba")      # a grid per launch, as for the kernel
    np.testing.assert_array_equal(y3, 2.0 * x)
    assert timed == [2, 4, 8]


def test_new_key_values_and_backends_are_tuned_separately(timed):
    tuned = tuned_scale()
    x, y = data(37)
    tuned(x, y, alpha=2.0, backend="numba")
    tuned(x, y, alpha=3.0, backend="numba")       # alpha is in the key
    x5, y5 = data(5)
    tuned(x5, y5, alpha=3.0, backend="numba")     # so is x.size
    tuned(x5, y5, alpha=3.0, backend="interpreter")
    assert timed == [2, 4, 8] * 4
    tuned(x5 + 1, y5, alpha=3.0, backend="numba")  # other contents, same key
    assert len(timed) == 12


def test_the_callers_arrays_see_one_launch_of_the_winner(timed):
    tuned = dsl.autotune(configs=CONFIGS, key=["x.shape[0]"])(accumulate)
    x = np.arange(11, dtype=np.float32)
    acc = np.full_like(x, 100)
    tuned(x, acc, backend="interpreter")
    assert timed == [2, 4, 8]
    np.testing.assert_array_equal(acc, 100 + x)
    before = acc.copy()
    assert tuned.best_config(x, acc, backend="interpreter") == {"TILE": 4}
    np.testing.assert_array_equal(acc, before)  # best_config never writes


def test_best_config_tunes_without_writing_outputs(timed):
    tuned = tuned_scale()
    x, y = data()
    assert tuned.best_config(x, y, alpha=2.0, backend="numba") == {"TILE": 4}
    assert not y.any()
    assert timed == [2, 4, 8]


def test_a_new_tuner_reads_the_winner_from_disk(timed, fresh_cache, monkeypatch):
    x, y = data()
    tuned_scale()(x, y, alpha=2.0, backend="numba")
    [path] = records(fresh_cache)
    saved = json.loads(path.read_text())
    assert saved["best"] == 1 and saved["key"] == {"x.size": 37, "alpha": 2.0}
    assert saved["kernel"].endswith("test_autotune.scale") and saved["backend"] == "numba"

    monkeypatch.setattr(tuning, "measure", lambda *a: pytest.fail("timed again"))
    again = tuned_scale()
    assert again.best_config(x, y, alpha=2.0, backend="numba") == {"TILE": 4}
    y[:] = 0
    again(x, y, alpha=2.0, backend="numba")
    np.testing.assert_array_equal(y, 2.0 * x)


def test_a_new_process_reads_the_winner_from_disk(timed, fresh_cache):
    x, y = data()
    tuned_scale()(x, y, alpha=2.0, backend="numba")
    module = json.loads(records(fresh_cache)[0].read_text())["kernel"].rsplit(".", 1)[0]
    here = Path(__file__).resolve().parent
    code = ("import importlib, numpy as np, dsl\n"
            "from dsl.runtime import autotune\n"
            "def refuse(*a): raise SystemExit('timed again')\n"
            "autotune.measure = refuse\n"
            f"m = importlib.import_module({module!r})\n"
            "x, y = m.data()\n"
            "print(m.tuned_scale().best_config(x, y, alpha=2.0, backend='numba'))\n")
    env = {**os.environ, "OPDSL_CACHE_DIR": str(fresh_cache),
           "PYTHONPATH": os.pathsep.join([str(here.parents[1]), str(here)])}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "{'TILE': 4}"


def test_other_configs_are_another_record(timed, fresh_cache):
    x, y = data()
    tuned_scale()(x, y, alpha=2.0, backend="numba")
    tuned_scale(configs=[{"TILE": 8}, {"TILE": 4}])(x, y, alpha=2.0, backend="numba")
    assert timed == [2, 4, 8, 8, 4]
    assert len(records(fresh_cache)) == 2


def test_no_disk_cache_means_memory_only(timed, fresh_cache, monkeypatch):
    monkeypatch.setenv("OPDSL_NO_DISK_CACHE", "1")
    x, y = data()
    tuned_scale()(x, y, alpha=2.0, backend="numba")
    tuned_scale()(x, y, alpha=2.0, backend="numba")
    assert timed == [2, 4, 8] * 2
    assert not records(fresh_cache)


def test_autotune_off_uses_the_first_config_without_timing(timed, fresh_cache, monkeypatch):
    tuned = tuned_scale()
    x, y = data()
    tuned(x, y, alpha=3.0, backend="numba")  # a winner (TILE=4) found before it is turned off
    os.remove(records(fresh_cache)[0])
    timed.clear()
    monkeypatch.setenv("OPDSL_AUTOTUNE", "0")
    assert tuned.best_config(x, y, alpha=3.0, backend="numba") == CONFIGS[0]
    tuned(x, y, alpha=2.0, backend="numba")
    np.testing.assert_array_equal(y, 2.0 * x)
    assert tuned.best_config(x, y, alpha=2.0, backend="numba") == CONFIGS[0]
    assert not records(fresh_cache) and not timed


@pytest.mark.parametrize("damage", [b"{not json", b"", b"\xff\xfe", b'{"best": 1}', b"[1, 2]"])
def test_a_corrupt_record_is_ignored_and_rewritten(timed, fresh_cache, damage):
    x, y = data()
    tuned_scale()(x, y, alpha=2.0, backend="numba")
    [path] = records(fresh_cache)
    good = json.loads(path.read_text())
    path.write_bytes(damage)
    with pytest.warns(TuningCacheWarning, match="unreadable"):
        assert tuned_scale().best_config(x, y, alpha=2.0, backend="numba") == {"TILE": 4}
    assert timed == [2, 4, 8] * 2
    assert json.loads(path.read_text())["best"] == good["best"]


def test_a_record_naming_a_config_that_does_not_exist_is_ignored(timed, fresh_cache):
    x, y = data()
    tuned_scale()(x, y, alpha=2.0, backend="numba")
    [path] = records(fresh_cache)
    path.write_text(json.dumps({**json.loads(path.read_text()), "best": 99}))
    with pytest.warns(TuningCacheWarning, match="99"):
        assert tuned_scale().best_config(x, y, alpha=2.0, backend="numba") == {"TILE": 4}


def test_a_config_may_set_the_grid(timed):
    configs = [{"TILE": 2, "grid": 1}, {"TILE": 4, "grid": lambda a: 3}, {"TILE": 8, "grid": 2}]
    tuned = dsl.autotune(configs=configs, key=["x.size"])(scale)
    x, y = data()
    tuned(x, y, alpha=2.0, backend="numba")
    np.testing.assert_array_equal(y, 2.0 * x)
    assert tuned.best_config(x, y, alpha=2.0, backend="numba") is not configs[1]
    assert tuned.best_config(x, y, alpha=2.0, backend="numba")["TILE"] == 4
    with pytest.raises(TypeError, match="grid is chosen by @dsl.autotune"):
        tuned(x, y, alpha=2.0, backend="numba", grid=2)


def test_key_entries_read_shapes_dtypes_and_scalars(timed, fresh_cache):
    key = ["x.shape", "x.shape[-1]", "x.size", "x.ndim", "x.dtype", "alpha"]
    x, y = data()
    dsl.autotune(configs=CONFIGS, key=key)(scale)(x, y, 2.0, backend="numba")  # alpha passed by position
    [path] = records(fresh_cache)
    assert json.loads(path.read_text())["key"] == {"x.shape": [37], "x.shape[-1]": 37, "x.size": 37, "x.ndim": 1,
                                                   "x.dtype": "float32", "alpha": 2.0}


def test_progress_is_logged_at_debug_level(timed, caplog):
    caplog.set_level(logging.DEBUG, logger="dsl.runtime.autotune")
    x, y = data()
    tuned_scale()(x, y, alpha=2.0, backend="numba")
    text = caplog.text
    assert all(f"config {c} took" in text for c in CONFIGS)
    assert "config {'TILE': 4} wins" in text


def test_the_api_forwards_to_the_kernel():
    tuned = tuned_scale()
    assert tuned.kernel is scale and tuned.configs == CONFIGS and tuned.key == ["x.size", "alpha"]
    assert tuned.__name__ == "scale"
    assert tuned.source("numba") == scale.source("numba")
    x, y = data()
    ir = tuned.source("ir", x, y, alpha=2.0)
    assert "scale" in ir


# ---------------------------------------------------------------------- errors

def test_a_config_naming_a_non_const_parameter_is_an_error_at_decoration():
    for bad in ("BM", "alpha", "x"):
        with pytest.raises(ValueError) as e:
            dsl.autotune(configs=[{"TILE": 4}, {bad: 4}], key=["x.size"])(scale)
        msg = str(e.value)
        assert "scale" in msg and repr(bad) in msg and "dsl.const parameters (TILE)" in msg


def test_threads_in_a_config_is_an_error_that_explains_why():
    with pytest.raises(ValueError, match=r"'threads'.*fixed per kernel.*threads=4"):
        dsl.autotune(configs=[{"TILE": 4, "threads": 8}], key=[])(scale)


def test_configs_must_set_the_same_const_parameters():
    @dsl.kernel
    def two(x: In[f32], y: Out[f32], A: dsl.const[i32] = 1, B: dsl.const[i32] = 1):
        y[0] = x[0]
    with pytest.raises(ValueError, match="same dsl.const"):
        dsl.autotune(configs=[{"A": 1}, {"A": 2, "B": 2}], key=[])(two)


@pytest.mark.parametrize("entry", ["nope", "x", "x.foo", "alpha.shape", "x.size[0]", "TILE", "x.shape[a]", ""])
def test_a_bad_key_entry_is_an_error_at_decoration(entry):
    with pytest.raises(ValueError) as e:
        dsl.autotune(configs=CONFIGS, key=["x.size", entry])(scale)
    msg = str(e.value)
    assert f"bad key entry {entry!r}" in msg and "x.shape[i]" in msg and "(alpha)" in msg and "(x, y)" in msg


@pytest.mark.parametrize("configs, key", [([], ["x.size"]), ({"TILE": 4}, ["x.size"]), ([4], ["x.size"]),
                                          (CONFIGS, "x.size"), (CONFIGS, [1])])
def test_malformed_arguments_are_type_errors(configs, key):
    with pytest.raises(TypeError):
        dsl.autotune(configs=configs, key=key)


def test_autotune_goes_above_a_kernel():
    def plain(x: In[f32]):
        pass
    with pytest.raises(TypeError, match="above @dsl.kernel"):
        dsl.autotune(configs=CONFIGS, key=[])(plain)


def test_a_bad_grid_in_a_config_is_an_error_at_decoration():
    with pytest.raises(ValueError, match="grid must be"):
        dsl.autotune(configs=[{"TILE": 4, "grid": -1}], key=[])(scale)


def test_call_errors_are_the_kernels_own(no_timing):
    tuned = tuned_scale()
    x, y = data()
    with pytest.raises(TypeError, match="missing argument 'y'"):
        tuned(x, alpha=2.0, backend="numba")
    with pytest.raises(TypeError, match="must be a numpy array"):
        tuned([1.0], y, alpha=2.0, backend="numba")
    with pytest.raises(TypeError, match="'TILE' is chosen by @dsl.autotune"):
        tuned(x, y, alpha=2.0, TILE=4, backend="numba")
    with pytest.raises(ValueError, match="overlap"):
        tuned(x, x, alpha=2.0, backend="numba")
