"""Warm starts skip the front end (backends/warm_start.py, dsl/runtime/warm_key.py): a process
with a warm disk cache reaches a kernel's compiled entry without parsing, checking or
specializing it; a changed kernel, ``@dsl.func`` or captured constant misses; a damaged
record is a miss with one warning."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import dsl
from backends import base, cache, warm_start
from dsl.lang import frontend

ROOT = Path(__file__).resolve().parents[2]

KERNELS = '''
import numpy as np
import dsl
from dsl import In, Out, f32

SCALE = {scale}

@dsl.func
def helper(v):
    return v * SCALE + {offset}

@dsl.kernel
def scaled(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = helper(x.flat[i]){tail}
'''

# run in a fresh process: the kernel's first call, counting front-end and code-generator work
CHILD = '''
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
from dsl.lang import frontend, check
from backends.numba import backend as nb
counts = {"parse": 0, "check": 0, "generate": 0}
def counted(name, fn):
    def wrapper(*a, **k):
        counts[name] += 1
        return fn(*a, **k)
    return wrapper
frontend.parse = counted("parse", frontend.parse)
check.check_kernel = counted("check", check.check_kernel)
nb.NumbaBackend.program = staticmethod(counted("generate", nb.NumbaBackend.program))
import warm_kernels
x = np.arange(64, dtype=np.float32)
y = np.zeros_like(x)
warm_kernels.scaled(x, y)
print(counts["parse"], counts["check"], counts["generate"], " ".join(map(repr, y[:3].tolist())))
'''


def _write(folder: Path, scale="2.0", offset="1.0", tail="") -> None:
    (folder / "warm_kernels.py").write_text(KERNELS.format(scale=scale, offset=offset, tail=tail))
    # an edit of the same size within the mtime's second passes Python's .pyc check, and the
    # module would run the old bytecode (scale 2.0) beside the new source: no .pyc to trust
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)


def _run(folder: Path, cache_dir: Path):
    env = {k: v for k, v in os.environ.items() if k != "OPDSL_NO_DISK_CACHE"}
    env.update(OPDSL_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT), OPDSL_COMPILE_WORKERS="0")
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder)], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    parse, checks, generate, *ys = out.stdout.split()
    return (int(parse), int(checks), int(generate)), [float(v) for v in ys]


def test_warm_process_skips_the_front_end_and_edits_invalidate(tmp_path):
    src, cache_dir = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    x = np.arange(3, dtype=np.float32)
    _write(src)
    cold, y = _run(src, cache_dir)
    assert cold[0] > 0 and cold[1] == 1 and cold[2] == 1  # the first process parses, checks, generates
    assert y == (x * 2 + 1).tolist()
    assert list((cache_dir / "numba-frontend").glob("*.json"))
    warm, y = _run(src, cache_dir)
    assert warm == (0, 0, 0), "a warm process ran the front end"
    assert y == (x * 2 + 1).tolist()
    # each edit: the front end runs again and the new code gives the new result
    for edit, want in ((dict(scale="3.0"), x * 3 + 1),            # a captured global constant
                       (dict(scale="3.0", offset="5.0"), x * 3 + 5),  # the @dsl.func's source
                       (dict(scale="3.0", offset="5.0", tail=" - 1.0"), x * 3 + 4)):  # the kernel's source
        _write(src, **edit)
        counts, y = _run(src, cache_dir)
        assert counts[0] > 0 and counts[1] == 1, edit
        assert y == want.tolist(), edit
        assert _run(src, cache_dir)[0] == (0, 0, 0), edit  # and that version is warm from then on


# ---------------------------------------------------------------------- in one process

def _load(folder: Path, name: str, **edit):
    _write(folder, **edit)
    spec = importlib.util.spec_from_file_location(name, folder / "warm_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fresh(kernel):
    """The same function as a new kernel object: nothing compiled in memory for it."""
    return dsl.kernel(kernel.fn, threads=kernel.threads)


def test_record_hit_in_process_runs_no_front_end(cache_dir, tmp_path, monkeypatch):
    mod = _load(tmp_path, "warm_a")
    x = np.linspace(-1, 1, 50).astype(np.float32)
    y = np.empty_like(x)
    mod.scaled(x, y)
    np.testing.assert_allclose(y, x * 2 + 1)
    hits = warm_start.hits
    k = _fresh(mod.scaled)
    monkeypatch.setattr(frontend, "parse", lambda *a, **kw: pytest.fail("the front end ran"))
    y2 = np.empty_like(x)
    k(x, y2)
    assert warm_start.hits == hits + 1
    np.testing.assert_array_equal(y2, y)


def test_record_of_another_code_generator_is_not_used(cache_dir, tmp_path, monkeypatch):
    """A record holds generated code: after a change to the numba code generator (its
    ``generator_version``) the old record is not found, and the kernel is generated again."""
    from backends.numba import backend as nb
    mod = _load(tmp_path, "warm_v")
    x = np.linspace(-1, 1, 40).astype(np.float32)
    y = np.empty_like(x)
    mod.scaled(x, y)
    monkeypatch.setattr(nb.NumbaBackend, "generator_version", "another")
    hits, generated = warm_start.hits, []
    program = nb.NumbaBackend.program
    monkeypatch.setattr(nb.NumbaBackend, "program", staticmethod(lambda *a: generated.append(1) or program(*a)))
    y2 = np.empty_like(x)
    _fresh(mod.scaled)(x, y2)
    assert warm_start.hits == hits and generated
    np.testing.assert_array_equal(y2, y)


def test_other_backends_keep_no_record_and_match(cache_dir, tmp_path):
    mod = _load(tmp_path, "warm_b")
    x = np.linspace(-1, 1, 20).astype(np.float32)
    y = np.empty_like(x)
    before = warm_start.writes
    mod.scaled(x, y, backend="interpreter")
    np.testing.assert_allclose(y, x * 2 + 1)
    assert warm_start.writes == before
    assert type(base.get("interpreter")).warm_record is base.Backend.warm_record


def test_debug_kernels_keep_no_record(cache_dir, tmp_path):
    mod = _load(tmp_path, "warm_c")
    k = dsl.kernel(mod.scaled.fn, debug=True)
    assert k.warm_key("numba", ()) is None


def _record_files(cache_dir: Path):
    return sorted((cache_dir / "numba-frontend").glob("*.json"))


def test_swapped_record_is_a_miss_with_one_warning(cache_dir, tmp_path):
    a = _load(tmp_path, "warm_d", scale="2.0")
    x = np.linspace(-1, 1, 40).astype(np.float32)
    y = np.empty_like(x)
    a.scaled(x, y)
    first = _record_files(cache_dir)
    b = _load(tmp_path, "warm_e", scale="7.0")
    b.scaled(x, y)
    np.testing.assert_allclose(y, x * 7 + 1)
    second = [p for p in _record_files(cache_dir) if p not in first]
    assert len(first) == 1 and len(second) == 1
    first[0].write_bytes(second[0].read_bytes())  # kernel a's record now holds b's code
    k = _fresh(a.scaled)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        k(x, y)
    np.testing.assert_allclose(y, x * 2 + 1)  # a's code ran, not b's
    hostile = [w for w in seen if issubclass(w.category, cache.CacheEntryWarning)]
    assert len(hostile) == 1 and "another key" in str(hostile[0].message)


@pytest.mark.parametrize("damage", ["not json", "wrong key", "source digest"])
def test_inconsistent_record_is_a_miss_with_one_warning(cache_dir, tmp_path, damage):
    mod = _load(tmp_path, f"warm_f_{damage.replace(' ', '_')}")
    x = np.linspace(-1, 1, 30).astype(np.float32)
    y = np.empty_like(x)
    mod.scaled(x, y)
    (path,) = _record_files(cache_dir)
    record = json.loads(cache.load("numba-frontend", path.name).decode())
    if damage == "not json":
        data = b"{not json"
    elif damage == "wrong key":
        data = json.dumps({**record, "key": "0" * 32}).encode()
    else:  # a record whose module is not the one its digest names: never executed
        data = json.dumps({**record, "source": record["source"] + "\nimport os\n"}).encode()
    cache.store("numba-frontend", path.name, data)
    k = _fresh(mod.scaled)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        k(x, y)
    np.testing.assert_allclose(y, x * 2 + 1)
    hostile = [w for w in seen if issubclass(w.category, cache.CacheEntryWarning)]
    assert len(hostile) == 1 and "front-end record" in str(hostile[0].message)
    assert _record_files(cache_dir)  # rewritten by the compile that followed the miss


def test_truncated_record_is_a_silent_miss(cache_dir, tmp_path):
    mod = _load(tmp_path, "warm_g")
    x = np.linspace(-1, 1, 30).astype(np.float32)
    y = np.empty_like(x)
    mod.scaled(x, y)
    (path,) = _record_files(cache_dir)
    path.write_bytes(path.read_bytes()[:40])
    k = _fresh(mod.scaled)
    hits = warm_start.hits
    k(x, y)
    np.testing.assert_allclose(y, x * 2 + 1)
    assert warm_start.hits == hits


# ---------------------------------------------------------------------- the key itself

def _key_of(source: str, **globals_):
    from dsl.runtime import warm_key
    ns = dict(globals_)
    filename = f"<warm key test {abs(hash((source, tuple(sorted(map(repr, globals_.items()))))))}>"
    import linecache
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), ns)
    k = ns["k"]
    return warm_key.source_key(k.fn, k.params)


BODY = textwrap.dedent("""
    import dsl
    from dsl import In, Out, f32
    @dsl.kernel
    def k(x: In[f32], y: Out[f32]):
        y[0] = x[0] * C + cfg.LIMIT
""")


def test_key_follows_constants_and_module_attributes():
    import types
    cfg = types.ModuleType("cfg")
    cfg.LIMIT = 1.5
    base_key = _key_of(BODY, C=2.0, cfg=cfg)
    assert _key_of(BODY, C=2.0, cfg=cfg) == base_key  # deterministic
    assert _key_of(BODY, C=3.0, cfg=cfg) != base_key   # a captured constant
    assert _key_of(BODY, C=2, cfg=cfg) != base_key     # its type
    cfg.LIMIT = 2.5
    assert _key_of(BODY, C=2.0, cfg=cfg) != base_key   # a module attribute the kernel reads
    assert _key_of(BODY.replace("* C", "* C * 1.0"), C=2.0, cfg=cfg) != _key_of(BODY, C=2.0, cfg=cfg)


def test_key_follows_class_attributes():
    class Cfg:
        LIMIT = 1.0
    first = _key_of(BODY, C=2.0, cfg=Cfg)
    Cfg.LIMIT = 4.0  # a class constant the front end would fold: the generated code changes with it
    assert _key_of(BODY, C=2.0, cfg=Cfg) != first


def test_key_follows_closures_and_nested_funcs():
    src = textwrap.dedent("""
        import dsl
        from dsl import In, Out, f32
        def make(c):
            @dsl.func
            def inner(v):
                return v + c
            @dsl.func
            def outer(v):
                return inner(v) * 2.0
            @dsl.kernel
            def k(x: In[f32], y: Out[f32]):
                y[0] = outer(x[0])
            return k
        k = make(C)
    """)
    assert _key_of(src, C=1.0) != _key_of(src, C=2.0)  # a closure cell two @dsl.funcs down


MULTILINE = textwrap.dedent("""
    import dsl
    from dsl import In, Out, f32
    @dsl.kernel(
        threads=2)
    def k(x: In[f32],
          y: Out[f32]):
        lo, hi = dsl.split(x.size)
        for i in range(lo, hi):
            y.flat[i] = (x.flat[i] * 2.0 +
                         1.0)
        # a trailing comment
    z = 1
""")


def test_key_reads_the_whole_block_from_the_code_object():
    """The key's source text runs from the first decorator line to the last line the code spans
    (``warm_key.source_text``, no tokenizing): what inspect reads, and an edit on the last line of
    a multi-line expression or on a decorator line changes the key."""
    import inspect
    import linecache
    from dsl.runtime import warm_key
    filename = "<warm key multiline test>"
    linecache.cache[filename] = (len(MULTILINE), None, MULTILINE.splitlines(True), filename)
    ns = {}
    exec(compile(MULTILINE, filename, "exec"), ns)
    text = warm_key.source_text(ns["k"].fn)
    assert text.startswith("@dsl.kernel(\n") and text.rstrip().endswith("1.0)")
    assert text == "".join(inspect.getsourcelines(ns["k"].fn)[0]).split("    # a trailing")[0]
    base = _key_of(MULTILINE)
    assert _key_of(MULTILINE.replace("1.0)", "3.0)")) != base
    assert _key_of(MULTILINE.replace("threads=2", "threads=3")) != base
