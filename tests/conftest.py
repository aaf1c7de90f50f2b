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


def pytest_report_header(config):
    """Name the OpenCL device the run uses (or why there is none) above the results."""
    reason = _unavailable("opencl")
    if reason:
        return ["opencl: no usable device; OpenCL tests skip:", *("  " + ln for ln in reason.splitlines())]
    from backends import base
    return [f"opencl: {base.get('opencl').device()}"]


@pytest.fixture(params=ALL_BACKENDS)
def backend(request):
    """The backend name; a test using it runs once per backend (differential testing).
    OpenCL runs on the best usable device and skips, with every device's reason, when there is none."""
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
    # no model plan cache (dsl/opgraph/plan_cache.py) across tests: a test that patches an op or a
    # pass must build its model; tests/opgraph/test_plan_cache.py turns it on where it is tested
    os.environ.setdefault("OPDSL_PLAN_CACHE", "0")
    yield
