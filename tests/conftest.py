"""Shared fixtures: every kernel test runs on every backend via ``backend``."""
import os

import pytest

os.environ.setdefault("OPDSL_LOG_LEVEL", "warn")

ALL_BACKENDS = ("interpreter", "numba", "opencl")

# Modules whose every case takes 10-30 s in a process of its own (a fresh Jupyter kernel per
# notebook), collected first: under ``-n 2`` they start in the first batches instead of being,
# as the last modules in collection order, the cases one worker finishes while the other idles.
# Only subprocess-run modules move: in-process ones (doc pages, torch) register ops and import
# libraries that every later case in that worker would see.
RUN_FIRST = ("tests/test_notebooks.py",)


def pytest_collection_modifyitems(session, config, items):
    first = [item for item in items if item.nodeid.startswith(RUN_FIRST)]
    if first and len(first) < len(items):
        items[:] = first + [item for item in items if not item.nodeid.startswith(RUN_FIRST)]


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
    """Tests share one fresh on-disk cache so runs never see a stale user cache.  Under
    pytest-xdist every worker of the run uses the same one (the run's shared temp root, as
    with an OPDSL_CACHE_DIR set outside): a specialization one worker compiled is a disk hit
    in the other, instead of being compiled once per worker (the cache creates the folder
    0700 and takes concurrent writers)."""
    if "OPDSL_CACHE_DIR" not in os.environ:
        if os.environ.get("PYTEST_XDIST_WORKER"):
            os.environ["OPDSL_CACHE_DIR"] = str(tmp_path_factory.getbasetemp().parent / "opdsl-cache")
        else:
            os.environ["OPDSL_CACHE_DIR"] = str(tmp_path_factory.mktemp("opdsl-cache"))
    # no model plan cache (dsl/opgraph/plan_cache.py) across tests: a test that patches an op or a
    # pass must build its model; tests/opgraph/test_plan_cache.py turns it on where it is tested
    os.environ.setdefault("OPDSL_PLAN_CACHE", "0")
    yield
