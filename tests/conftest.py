"""Shared fixtures: every kernel test runs on every backend via ``backend``."""
import os

import pytest

os.environ.setdefault("OPDSL_LOG_LEVEL", "warn")

ALL_BACKENDS = ("interpreter", "numba", "opencl")

# Modules whose every case takes 10-30 s in a process of its own (a fresh Jupyter kernel per
# notebook), collected first: under ``-n 2`` they start in the first batches instead of being,
# as the last modules in collection order, the cases one worker finishes while the other idles.
# Only subprocess-run modules move as a whole: in-process ones (doc pages, torch) register ops and
# import libraries that every later case in that worker would see.
RUN_FIRST = ("tests/test_notebooks.py",)

# Then the slowest other cases of a cold run (CI's --durations, 15-70 s each: cold numba compiles
# of the int8 and packed-GEMM kernels, onnxruntime comparisons, a few subprocess runs).  They
# compile and run kernels of the ops every test imports and register nothing, so moving them
# changes nothing later cases see.  Started early, the two workers end on short cases instead of
# one idling through a 60-s compile; kept together, the ones that share a specialization run one
# after the other in one worker's first batch (pytest-xdist hands each worker a run of consecutive
# cases), so the second is a disk-cache hit instead of a concurrent compile.  A name that no
# longer matches only stops moving.  Listed slowest first.
RUN_EARLY = (
    "tests/ops/test_gemm_int8.py::test_conv_int8_packing_on_every_backend",
    "tests/ops/test_gemm_int8.py::test_qlinear_conv_model_matches_onnxruntime",
    "tests/backends/test_cpu_kind.py::test_an_avx2_process_reports_compiles_and_runs_as_avx2",
    "tests/onnx/test_backend_conformance.py::test_case[node/test_qlinearconv]",
    "tests/onnx/test_backend_conformance.py::test_case[node/test_convinteger_without_padding]",
    "tests/ops/test_quant_conv_plans.py::test_packed_conv_is_planned_and_equals_run",
    "tests/ops/test_gemm_packed.py::test_packed_gemm_half_storage",
    "tests/onnx/test_light_models.py::test_light_model",
    "tests/ops/test_gemm_int8.py::test_qlinear_matmul_model_matches_onnxruntime",
    "tests/onnx/test_export_compiled.py::test_conv_bn_relu_add_compiled_export_runs_in_onnxruntime",
    "tests/ops/test_gemm_int8.py::test_dynamic_quantize_matmul_integer_matches_onnxruntime",
    "tests/onnx/test_backend_conformance.py::test_case[pytorch-operator/test_operator_conv]",
    "tests/ops/test_tree_ensemble.py::test_tree_ensemble_regressor",
    "tests/ops/test_gemm_packed.py::test_packed_gemm_implicit_im2col",
    "tests/backends/test_warm_start.py::test_warm_process_skips_the_front_end_and_edits_invalidate",
    "tests/backends/test_differential.py::test_backends_agree_on_random_elementwise_kernels",
    "tests/backends/test_parallel_compile.py::test_a_model_planned_from_main_uses_the_workers",
    "tests/ops/test_unique.py::test_dtypes_and_nan",
)


def _rank(item) -> int:
    """0 for RUN_FIRST modules, 1 + position for RUN_EARLY cases, past them for the rest."""
    if item.nodeid.startswith(RUN_FIRST):
        return 0
    for i, prefix in enumerate(RUN_EARLY):
        if item.nodeid.startswith(prefix):
            return 1 + i
    return 1 + len(RUN_EARLY)


def pytest_collection_modifyitems(session, config, items):
    """Long cases first (a stable sort: the rest keep collection order)."""
    ranks = {id(item): _rank(item) for item in items}
    if len(set(ranks.values())) > 1:
        items.sort(key=lambda item: ranks[id(item)])


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
