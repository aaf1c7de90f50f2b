"""Backends are found by name: the three built-ins, and any installed ``opdsl.backends`` entry point."""
import subprocess
import sys

import numpy as np
import pytest

import dsl
from dsl import In, Out, f32
from backends import base
from backends.interpreter import InterpreterBackend


class CountingBackend(InterpreterBackend):
    """A third-party backend: the interpreter, counting what it compiles."""

    name = "counting"

    def __init__(self):
        self.compiled = 0

    def compile(self, request):
        self.compiled += 1
        return super().compile(request)


@dsl.kernel(threads=2)
def double(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = 2 * x.flat[i]


def test_an_entry_point_makes_a_third_party_backend_usable_by_name(monkeypatch):
    fake = CountingBackend()
    monkeypatch.setattr(base, "_entry_points", lambda: {"counting": lambda: fake})
    monkeypatch.setattr(base, "_LOADED", {})
    assert base.names() == ["interpreter", "numba", "opencl", "counting"]
    assert base.get("counting") is fake
    x = np.arange(6, dtype=np.float32)
    y = np.empty_like(x)
    double(x, y, backend="counting")
    np.testing.assert_array_equal(y, 2 * x)
    assert fake.compiled == 1


def test_builtins_work_without_installed_metadata_and_unknown_names_list_the_known(monkeypatch):
    monkeypatch.setattr(base, "_entry_points", lambda: {})  # a source checkout, not installed
    monkeypatch.setattr(base, "_LOADED", {})
    assert base.names() == ["interpreter", "numba", "opencl"]
    assert base.get("interpreter").name == "interpreter"
    with pytest.raises(ValueError, match=r"unknown backend 'cuda'; known: interpreter, numba, opencl"):
        base.get("cuda")


def test_a_builtin_name_is_found_without_reading_installed_metadata(monkeypatch):
    """``get``/``is_known`` of a built-in skip the entry-point scan (every distribution's
    metadata, ~40 ms of each load_model); another name still consults the entry points."""
    def no_scan():
        raise AssertionError("installed metadata read for a built-in backend")
    monkeypatch.setattr(base, "_entry_points", no_scan)
    monkeypatch.setattr(base, "_LOADED", {})
    assert base.is_known("interpreter") and base.get("interpreter").name == "interpreter"
    fake = CountingBackend()
    monkeypatch.setattr(base, "_entry_points", lambda: {"counting": lambda: fake})
    assert base.is_known("counting") and not base.is_known("cuda")
    assert base.get("counting") is fake


def test_the_installed_entry_points_name_the_builtins():
    from importlib.metadata import entry_points
    eps = {ep.name: ep.value for ep in entry_points(group=base.ENTRY_POINT_GROUP)}
    assert eps.items() >= {"numba": "backends.numba:BACKEND", "opencl": "backends.opencl:BACKEND",
                           "interpreter": "backends.interpreter:BACKEND"}.items()


def test_importing_backends_does_not_import_numba_or_pyopencl():
    code = ("import sys, backends.base as b; b.names(); "
            "print(sorted(m for m in ('numba', 'pyopencl') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_each_backend_names_its_cache_folder():
    """Backend.cache_tag is the backend's own; ``opdsl cache clear`` must know the folder."""
    from backends import cache
    tags = {name: base.get(name).cache_tag for name in ("interpreter", "numba", "opencl")}
    assert tags == {"interpreter": "", "numba": "numba", "opencl": "opencl"}
    assert all(tag in cache.FOLDERS for tag in tags.values() if tag)
