"""Shared fixtures: every kernel test runs on every backend via ``backend``."""
import os

import pytest

os.environ.setdefault("OPDSL_LOG_LEVEL", "warn")

ALL_BACKENDS = ("interpreter", "numba", "opencl")


def _unavailable(name: str) -> str:
    from backends import base
    try:
        return base.get(name).available()
    except ImportError as e:  # backend module or its dependency missing
        return f"{name} backend cannot be imported: {e}"


@pytest.fixture(params=ALL_BACKENDS)
def backend(request):
    """The backend name; a test using it runs once per backend (differential testing)."""
    reason = _unavailable(request.param)
    if reason:
        pytest.skip(f"{request.param}: {reason}")
    return request.param


@pytest.fixture(params=("numba", "opencl"))
def compiled_backend(request):
    reason = _unavailable(request.param)
    if reason:
        pytest.skip(f"{request.param}: {reason}")
    return request.param


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Tests share one fresh on-disk cache so runs never see a stale user cache."""
    if "OPDSL_CACHE_DIR" not in os.environ:
        os.environ["OPDSL_CACHE_DIR"] = str(tmp_path_factory.mktemp("opdsl-cache"))
    yield
