"""The interface every backend implements, and the lookup by name.

A backend turns one checked specialization (``CompileRequest``) into a
``Launcher``; ``dsl.kernel`` owns argument checking, specialization keys and
the in-memory cache, so a backend never sees a wrong argument.
"""
from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence

from dsl.lang import ir
from dsl.lang.grid import Grid
from backends import host
from backends.host import TargetInfo  # noqa: F401  (re-exported: what target() returns)


@dataclass(frozen=True)
class CompileRequest:
    kernel: ir.Kernel        # typed, checked IR of this specialization
    pyfunc: Callable         # the user's Python function (the interpreter runs it)
    key: str                 # hex digest naming this specialization for on-disk caches
    log_level: str = "warn"  # dsl.log calls below this level were removed by the frontend
    fastmath: bool = False   # @dsl.kernel(fastmath=True): reassociation and approximate math allowed
    debug: bool = False      # @dsl.kernel(debug=True) / OPDSL_DEBUG=1: bounds-check every access
    interrupt: bool = True   # poll the Ctrl-C flag at loop back-edges (backends/interrupt.py)
    # the run-time log threshold launchers read at each launch (backends/log_gate.py); not part
    # of what the code is: every threshold runs the same compiled code
    log_gate: Optional[object] = field(default=None, compare=False, hash=False)


MAX_LOGICAL_THREADS = 2 ** 63 - 1
"""The most logical threads (grid x team size) a launch may have: thread indexes (tile * threads
+ thread) are i64 on every backend, and a larger launch would wrap around (numba's prange over
grid * threads ran zero iterations for grid=2**62).  A device may allow fewer
(``Launcher.max_logical_threads``)."""


class Launcher(ABC):
    """A compiled specialization, ready to run: the launcher protocol.

    Every launcher implements ``__call__``.  The other members are optional capabilities; the
    defaults here say what a launcher without them means, so the layers above (kernel launches,
    model plans, tiling) ask the launcher what it can do and never test a backend's name:

    * ``kernel_ir``: the typed IR it runs (which tensors it reads and writes), or None;
    * ``max_logical_threads``: the most logical threads (grid x team) one launch may have;
    * ``can_run_parallel``: ``run_serial`` (the team's threads take turns on one core) and
      ``run_parallel`` (they run across the cores) are distinct entries; a model runs its tiles
      concurrently, each on the serial entry.  Without it both entries are ``__call__``;
    * ``freeze(values)``: the values a model's plan launches on every run, prepared once (numba
      checks them against the compiled signature so runs skip its dispatcher); by default the
      values themselves;
    * ``direct_entry(values, grid)``: machine code that launches like these values and grid may
      call straight (dsl/runtime/hop.py), or None; by default None;
    * ``prepared_entry(values, grid)``: for values ``freeze`` returned, the machine code that runs
      exactly this launch as ``__call__`` would, called with the values as they are (a model's
      flat run, dsl/opgraph/flat_run.py), or None; by default None.
    """

    kernel_ir: Optional[ir.Kernel] = None
    max_logical_threads: int = MAX_LOGICAL_THREADS
    can_run_parallel: bool = False

    @abstractmethod
    def __call__(self, args: Sequence, grid: Grid) -> None:
        """Run ``grid`` teams: an int, or ``(gx, gy, gz)`` for an n-d grid (dsl/lang/grid.py).
        ``args`` follow ``kernel.params``: C-contiguous numpy arrays of the param dtype for
        tensors, 1-D arrays for Vec params, numpy scalars of the param dtype for scalars.
        Outputs are written in place."""

    def run_serial(self, args: Sequence, grid: Grid) -> None:
        """The launch with the team's threads on one core (tiles running side by side use it)."""
        self(args, grid)

    def run_parallel(self, args: Sequence, grid: Grid) -> None:
        """The launch with the team's threads across the cores."""
        self(args, grid)

    def freeze(self, values: Sequence) -> Sequence:
        """``values`` as a model plan keeps them for every run of this launch."""
        return values

    def direct_entry(self, values: Sequence, grid: Grid) -> Optional["DirectEntry"]:
        """How a generated binder may run launches like this one without this launcher's Python
        work, or None (then every launch goes through ``__call__``)."""
        return None

    def prepared_entry(self, values: Sequence, grid: Grid) -> Optional["DirectEntry"]:
        """How a model's plan may run this very launch of frozen ``values`` (``freeze``'s) with no
        check and no Python work of this launcher, or None (the plan then calls the launcher)."""
        return None


class DirectEntry(NamedTuple):
    """A compiled entry a kernel's one-hop binder calls as ``fn(*values, grid, counter, start)``
    (values of exactly the compiled types), for launches of ``grid`` teams whose tensors hold
    fewer than ``max_elements`` elements in total; ``counter``: the Ctrl-C counter it polls."""
    fn: Callable
    grid: int
    max_elements: int
    counter: Any


class Backend(ABC):
    name: str = ""
    # Its launchers run a team's threads across the host's cores (``Launcher.can_run_parallel``),
    # so a model cuts big nodes into tiles that run side by side (dsl/opgraph/tiling.py); a backend
    # that runs elsewhere (a device) or one thread at a time leaves it False.
    parallel: bool = False
    # Its SIMD register tiles (``dsl.simd`` values) become the host's vector registers, so kernels
    # that pack their operands once (ops/gemm_packed.py, the im2col convolution) are the fast path;
    # elsewhere they run, correctly, slower than the plain kernels.
    packed_kernels: bool = False
    # ``fastmath=True`` only reorders float arithmetic here: inf and NaN keep their meaning (numba
    # gives LLVM no nnan/ninf flags; OpenCL's -cl-fast-relaxed-math drops them as well).
    fastmath_keeps_inf_nan: bool = False
    # The folder of the on-disk compile cache (backends/cache.py) under which this backend keeps its
    # compiled code, each entry named from ``CompileRequest.key`` plus whatever version of its own
    # code generator the backend adds; "" for a backend that keeps nothing on disk.  ``opdsl cache
    # clear`` deletes only folders listed in ``cache.FOLDERS``, so a new tag is added there too.
    cache_tag: str = ""
    # A version of this backend's own code generator (a hash of its sources).  Front-end records
    # (backends/warm_start.py) hold generated code, so one made by another generator is not used.
    generator_version: str = ""

    @abstractmethod
    def compile(self, request: CompileRequest) -> Launcher:
        """Build (or load from the disk cache) the code for one specialization."""

    @abstractmethod
    def source(self, request: CompileRequest) -> str:
        """The generated code, as a user would read it."""

    def warm_record(self, request: CompileRequest, launcher: Launcher) -> Optional[dict]:
        """What a later process needs to rebuild ``launcher`` without the front end (JSON data,
        backends/warm_start.py), or None when this backend or specialization has no such record."""
        return None

    def warm_launcher(self, record: dict, pyfunc: Callable, log_gate) -> Optional[Launcher]:
        """The launcher ``record`` (from ``warm_record``) describes, or None to compile as usual."""
        return None

    def available(self) -> str:
        """'' when usable here, else the reason (e.g. no OpenCL device)."""
        return ""

    def target(self) -> TargetInfo:
        """What the hardware kernels run on can do (``dsl.target(name)`` makes it public).

        The default is the host CPU (``backends.host``), right for any backend that runs there; a
        device backend answers for the device it uses, and raises its usual unavailability error
        (the reason) when there is none."""
        return host.host()


ENTRY_POINT_GROUP = "opdsl.backends"
# The built-in backends, also declared as entry points in pyproject.toml: this table keeps them
# working from a source checkout without installed metadata.  Modules import on first use only.
_BUILTIN: Dict[str, str] = {
    "interpreter": "backends.interpreter:BACKEND",
    "numba": "backends.numba:BACKEND",
    "opencl": "backends.opencl:BACKEND",
}
_LOADED: Dict[str, Backend] = {}


def _entry_points() -> Dict[str, Callable[[], Backend]]:
    """name -> loader of each backend installed under the ``opdsl.backends`` entry-point group."""
    from importlib.metadata import entry_points
    return {ep.name: ep.load for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _load_builtin(target: str) -> Backend:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _known() -> Dict[str, Callable[[], Backend]]:
    """Every backend name -> its loader: the built-ins, then installed entry points."""
    known: Dict[str, Callable[[], Backend]] = {
        name: (lambda target=target: _load_builtin(target)) for name, target in _BUILTIN.items()}
    for name, load in _entry_points().items():
        if name not in _BUILTIN:  # opdsl's own entry points name the same objects as the table
            known[name] = load
    return known


def get(name: str) -> Backend:
    """The backend called ``name``: a built-in or one installed as an ``opdsl.backends`` entry
    point (``name = "package.module:BACKEND"``), imported on first use."""
    if name not in _LOADED and name in _BUILTIN:  # the built-ins win over entry points: no metadata scan
        _LOADED[name] = _load_builtin(_BUILTIN[name])
    if name not in _LOADED:
        known = _known()
        if name not in known:
            raise ValueError(f"unknown backend {name!r}; known: {', '.join(sorted(known))}")
        _LOADED[name] = known[name]()
    return _LOADED[name]


def is_known(name: str) -> bool:
    """Whether ``get(name)`` finds a backend; a built-in name is answered without reading installed
    packages' metadata (~40 ms: every distribution's entry points)."""
    return name in _BUILTIN or name in _LOADED or name in _known()


def names() -> list:
    """The built-in backends, then installed third-party ones."""
    return list(_known())
