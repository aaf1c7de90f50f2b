"""Every environment knob opdsl reads, in one place.

OPDSL_BACKEND       default backend for launches (numba); read at import, see set_default_backend
OPDSL_CACHE_DIR     on-disk compile cache (default ~/.cache/opdsl); a relative path is made absolute
                    once, at first use (a later os.chdir does not move it); see docs/cache.md
OPDSL_LOG_LEVEL     dsl.log level: debug|info|warn|error|off (default warn); read when a kernel compiles
                    (the lowest level compiled in, unless @dsl.kernel gives log_level or log_floor) and
                    at every launch (the run-time threshold of kernels whose log_level is not set)
OPDSL_OPENCL_DEVICE "platform-substring[:device-index]" choosing the OpenCL device
OPDSL_OPENCL_PROBE  how OpenCL devices are probed: subprocess (default; a crashing driver is a reason) | inprocess
OPDSL_NO_DISK_CACHE set to 1 to keep compiled code in memory only
OPDSL_MAX_TENSOR_BYTES  largest tensor a graph or ONNX model may make opdsl allocate (folded
                    constants, initializers, planned buffers); default 4 GiB; suffixes K M G T (x1024)
OPDSL_DEBUG         set to 1 to bounds-check every compiled kernel, as @dsl.kernel(debug=True) does
OPDSL_NO_INTERRUPT  set to 1 to compile launches without Ctrl-C polling (measuring its cost)
OPDSL_AUTOTUNE      set to 0 to make @dsl.autotune use its first config without timing any (read per call)
OPDSL_NO_FUSION     set to 1 to compile graphs without graph rewrites (Conv+BatchNormalization folding,
                    activation and residual epilogues) unless compile(fuse=True) asks for them
OPDSL_NO_TILING     set to 1 to run ops that declare tiling untiled unless compile(tiling=...) asks for it
OPDSL_INPLACE_ALL   set to 1 to let models run every op that declares ``inplace`` in place (smallest
                    arena; their loops run scalar); default: only ops whose in-place run is a no-op
                    (dsl/opgraph/memory.py); read when a model is built
OPDSL_CPU           zen4 | avx2-vnni | avx2 | host: compile and choose kernels as if on that kind of CPU
                    (this host's features less what it lacks; read at import by backends/cpu_kind.py,
                    which fills numba's NUMBA_CPU_NAME/NUMBA_CPU_FEATURES); see docs/ops.md
OPDSL_HUGE_PAGES    set to 0 to keep a model's buffers and plan-cache weights off 2 MiB pages (no
                    MADV_HUGEPAGE advice; dsl/runtime/huge_pages.py); read when the memory is allocated
OPDSL_COMPILE_WORKERS  processes that compile a model's numba kernels side by side (default: the core
                    count, at most 4); 0 compiles every kernel in the calling process
"""
from __future__ import annotations

import os
from pathlib import Path

LOG_LEVELS = ("debug", "info", "warn", "error", "off")


_default_backend = os.environ.get("OPDSL_BACKEND", "numba")


def default_backend() -> str:
    """Read once at import (every launch asks, and os.environ lookups cost a microsecond)."""
    return _default_backend


def set_default_backend(name: str) -> None:
    """Change the backend used by launches that do not pass ``backend=``."""
    global _default_backend
    _default_backend = name


_cache_dirs: dict = {}  # OPDSL_CACHE_DIR as written -> the absolute path it meant at first use


def default_cache_dir() -> Path:
    return Path(os.path.abspath(Path.home() / ".cache" / "opdsl"))


def cache_dir() -> Path:
    """The compile cache folder, absolute; a relative OPDSL_CACHE_DIR is resolved against the
    working directory of its first use and kept, so a later chdir does not move the cache."""
    raw = os.environ.get("OPDSL_CACHE_DIR", "")
    found = _cache_dirs.get(raw)
    if found is None:
        found = _cache_dirs[raw] = (Path(os.path.abspath(os.path.expanduser(raw))) if raw
                                    else default_cache_dir())
    return found


def reset_cache_dir() -> None:
    """Forget resolved cache paths (tests; see backends.cache.reset)."""
    _cache_dirs.clear()


def disk_cache_enabled() -> bool:
    return os.environ.get("OPDSL_NO_DISK_CACHE", "") not in ("1", "true", "yes")


def fusion_enabled() -> bool:
    """Whether ``Graph.compile(fuse=None)`` and ``dsl.load_onnx`` run the graph rewrites."""
    return os.environ.get("OPDSL_NO_FUSION", "") not in ("1", "true", "yes")


def tiling_enabled() -> bool:
    """Whether ``Graph.compile(tiling=None)`` runs ops that declare tiling as tiles (dsl/opgraph/tiling.py)."""
    return not _flag("OPDSL_NO_TILING")


def inplace_all() -> bool:
    """Whether new models plan every op's ``inplace`` (OPDSL_INPLACE_ALL=1), not only no-op ones."""
    return _flag("OPDSL_INPLACE_ALL")


def log_level() -> str:
    level = os.environ.get("OPDSL_LOG_LEVEL", "warn").lower()
    if level not in LOG_LEVELS:
        raise ValueError(f"OPDSL_LOG_LEVEL={level!r}; accepted: {', '.join(LOG_LEVELS)}")
    return level


_runtime_levels: dict = {}  # OPDSL_LOG_LEVEL as stored -> its checked, lower-case level
try:  # CPython keeps os.environ in a dict of encoded keys: reading it directly costs a tenth of .get()
    _LOG_KEY = os.environ.encodekey("OPDSL_LOG_LEVEL")
except AttributeError:  # pragma: no cover - another Python
    _LOG_KEY = None


def runtime_log_level() -> str:
    """OPDSL_LOG_LEVEL as read at a launch (every launch of a kernel with dsl.log calls asks, so
    each spelling is checked once); a bad value is a ValueError naming the variable."""
    data = getattr(os.environ, "_data", None)
    raw = data.get(_LOG_KEY) if data is not None and _LOG_KEY is not None else os.environ.get("OPDSL_LOG_LEVEL")
    level = _runtime_levels.get(raw)
    if level is None:
        level = log_level()
        _runtime_levels[raw] = level
    return level


def level_passes(level: str, threshold: str) -> bool:
    """Whether a message at ``level`` is kept when the kernel's threshold is ``threshold``.
    ``print()`` in a kernel has level "print" and is always kept."""
    if level == "print":
        return True
    return LOG_LEVELS.index(level) >= LOG_LEVELS.index(threshold)


def opencl_device() -> str:
    return os.environ.get("OPDSL_OPENCL_DEVICE", "")


OPENCL_PROBES = ("subprocess", "inprocess")


def opencl_probe() -> str:
    how = os.environ.get("OPDSL_OPENCL_PROBE", "subprocess").strip().lower() or "subprocess"
    if how not in OPENCL_PROBES:
        raise ValueError(f"OPDSL_OPENCL_PROBE={how!r}; accepted: {', '.join(OPENCL_PROBES)}")
    return how


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def debug() -> bool:
    """OPDSL_DEBUG=1: kernels without an explicit ``debug=`` are compiled bounds-checked."""
    return _flag("OPDSL_DEBUG")


def interrupt_polling() -> bool:
    """Whether compiled code polls the Ctrl-C flag (OPDSL_NO_INTERRUPT=1 turns it off)."""
    return not _flag("OPDSL_NO_INTERRUPT")


def autotune() -> bool:
    """Whether @dsl.autotune times its configs (OPDSL_AUTOTUNE=0 makes it use the first one)."""
    return os.environ.get("OPDSL_AUTOTUNE", "").strip().lower() not in ("0", "false", "no", "off")


DEFAULT_MAX_TENSOR_BYTES = 4 << 30


def max_tensor_bytes() -> int:
    """OPDSL_MAX_TENSOR_BYTES: the size cap that keeps a hostile model from asking for terabytes."""
    raw = os.environ.get("OPDSL_MAX_TENSOR_BYTES", "").strip()
    if not raw:
        return DEFAULT_MAX_TENSOR_BYTES
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(raw[-1].upper(), 1)
    digits = raw[:-1] if scale > 1 else raw
    if not digits.isdigit() or int(digits) <= 0:
        raise ValueError(f"OPDSL_MAX_TENSOR_BYTES={raw!r}; accepted: a positive number of bytes, optionally "
                         "with a K, M, G or T suffix (e.g. 512M)")
    return int(digits) * scale


def huge_pages() -> bool:
    """Whether a model's buffers and weights are advised onto 2 MiB pages (OPDSL_HUGE_PAGES=0: not)."""
    return os.environ.get("OPDSL_HUGE_PAGES", "").strip().lower() not in ("0", "false", "no", "off")


def compile_workers() -> int:
    """OPDSL_COMPILE_WORKERS: how many worker processes compile a model's kernels at once (0: none)."""
    raw = os.environ.get("OPDSL_COMPILE_WORKERS", "").strip()
    if not raw:
        return min(os.cpu_count() or 1, 4)
    if not raw.isdigit() or int(raw) > 64:
        raise ValueError(f"OPDSL_COMPILE_WORKERS={raw!r}; accepted: a whole number from 0 (compile in the "
                         "calling process) to 64")
    return int(raw)
