"""The numba backend: typed IR → readable Python (backends/numba/regions.py) → ``numba.njit``.

Each specialization becomes a module executed from the generated source in
memory; with a usable disk cache (backends/cache.py) a copy is saved as
``<cache>/numba/<key>.py`` for reading, and numba's machine code is kept beside
it (backends/numba/cache.py), so a second process loads it without compiling.  Two entry points are compiled:
``launch_serial`` eagerly (cheap, used for small launches where starting
worker threads costs more than it saves) and ``launch_parallel`` on the first
large launch.  Parallel code runs on a thread-safe threading layer (OpenMP or
TBB) so several Python threads may launch kernels at once.
"""
from __future__ import annotations

import hashlib
import linecache
import os
import sys
import threading
import types as pytypes
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numba
import numpy as np
from numba import types as nbt

from dsl.lang import ir
from dsl.lang.grid import Grid
from dsl.lang import types as T
from dsl.lang.errors import CompileError
from backends import cache, compile_batch
from backends.numba import cache as machine_cache
from backends.base import Backend, CompileRequest, DirectEntry, Launcher, TargetInfo
from backends import host
from backends import bounds, interrupt, log_gate
from backends.numba import entry_choice
from backends.numba import frozen as frz
from backends.numba import launch_work
from backends.numba import link_once, parallel_compile
from backends.numba import deferred_module, warm_bytecode, worker_cores
from backends.numba.regions import Program

# A launch runs serially when its tensors hold fewer elements than this in total and the
# team count is small: below it, waking the worker threads costs more than it saves.
# Back-to-back launches of one kernel (leaky_relu, 2 cores) break even near 8K elements per
# tensor, but in a model every launch wakes sleeping workers (OMP_WAIT_POLICY=PASSIVE, ~50 us):
# the BERT layer of benchmarks/models.py (elementwise nodes of 32K-131K elements) ran in 5.8 ms
# with 2^14, 4.3 ms with 2^17 and 3.9 ms with 2^18; 2^17 keeps a compute-heavy 64K-element
# in -> out kernel parallel.
# Kernels with nested loops may do much work on few elements: their small launches go parallel
# when the work their loop nest does for those shapes pays for waking the workers (entry_choice.py).
SERIAL_MAX_ELEMENTS = 1 << 17
SERIAL_MAX_THREADS = 64
# A light kernel (no nested loops) whose parallel entry is not compiled yet runs its first big launch
# on the serial entry when its tensors hold fewer elements than this: the serial entry compiles in
# about 60 % of the parallel one's time (no parfor passes, no gufunc), and a single-loop pass over
# 16M elements takes ~10 ms on one core, far less than the compile it saves.  The parallel entry
# compiles at the next big launch (time to the first result, issue 28).
SERIAL_FIRST_MAX_ELEMENTS = 1 << 24
# The same for a kernel with nested loops, whose tensors' sizes say little about its work: its first
# big launch runs serially when its estimated work (backends/numba/launch_work.py) is at most this
# many operations, ~15 ms on one core at entry_choice.SECONDS_PER_OP; the parallel entry would cost
# a second or more of compiling (row softmax 256x256: ~1M operations, a fraction of a millisecond).
SERIAL_FIRST_MAX_WORK = 5e8

_SAFE_LAYERS = ("threadsafe", "tbb", "omp", "safe")

# Passive workers still spin this many rounds (libgomp's GOMP_SPINCOUNT, ~0.1 ms) before they
# sleep: long enough to bridge the gap between one model's launches, short enough to give the
# cores back right after a run.  The BERT layer of benchmarks/models.py ran in 1.9-2.9 ms with
# no spin and 1.35-1.4 ms with it (onnxruntime 1.37-1.41 ms), same process, quiet machine.
SPIN_COUNT = 3000


def _configure_threading() -> None:
    """Pick a thread-safe layer before numba starts one (concurrent launches from Python threads),
    and let its OpenMP workers sleep between launches after a short spin (``SPIN_COUNT``).

    libgomp's default wait policy spins for milliseconds after each parallel launch, holding
    cores that threads with real work need; fully passive workers cost 10-50 us of wake-up per
    launch instead, which a model of a few dozen launches pays on every run (benchmarks/RESULTS.md,
    "OpenMP wait policy" and "Short spin").
    ``setdefault``: a user's own ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` (ACTIVE on a
    dedicated machine) wins.  libgomp reads it when it is loaded, so it has no effect if
    OpenMP was loaded before (numba parallel code or torch ran first), and it also applies
    to OpenMP libraries loaded later in this process.
    """
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from numba.np.ufunc import parallel as npp
    if not getattr(npp, "_is_initialized", False) and numba.config.THREADING_LAYER not in _SAFE_LAYERS:
        numba.config.THREADING_LAYER = "threadsafe"


_configure_threading()


def _codegen_version() -> str:
    """Hash of the code generator and runtime: a change to them must not reuse cached modules."""
    h = hashlib.sha256(numba.__version__.encode())
    here = Path(__file__).resolve().parent
    for name in ("codegen.py", "regions.py", "runtime.py", "format.py", "math.py", "arith.py", "simd.py",
                 "simd_codegen.py", "typecode.py", "views.py", "pipeline.py", "link_once.py", "ir_simplify.py", "typing_memo.py", "../naming.py", "../spelling.py", "../bounds.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()[:10]


CODEGEN_VERSION = _codegen_version()
CACHE_TAG = machine_cache.CACHE_TAG  # the disk-cache folder of this backend (Backend.cache_tag)

# --------------------------------------------------------------------------- types


def _nb_scalar(t: T.DType):
    t = T.f32 if t.is_storage_only else t
    return nbt.boolean if t.is_bool else numba.from_dtype(t.np)


def _nb_storage(t: T.DType):
    return nbt.uint16 if t.is_storage_only else _nb_scalar(t)


def signature(kernel: ir.Kernel, record: bool = False, nd: bool = False, gate: Optional[bool] = None) -> Tuple:
    """numba argument types of the entry points, for the arrays/scalars the launcher passes
    (then the grid: the team count, or gx, gy, gz for the ``_nd`` entries; then the hidden
    arguments: Ctrl-C counter and its start value, error record, run-time log threshold;
    ``gate``: whether it takes the threshold, when the caller knows)."""
    out: List = []
    for p in kernel.params:  # writable types: a read-only input array makes numba compile once more
        if isinstance(p, ir.TensorParam):
            out.append(nbt.Array(_nb_storage(p.dtype), p.ndim, "C"))
        elif isinstance(p, ir.VecParam):
            out.append(nbt.Array(_nb_storage(p.dtype), 1, "C"))
        else:
            out.append(_nb_scalar(p.dtype))
    out += [nbt.int64] * (3 if nd else 1) + [nbt.Array(nbt.int64, 1, "C"), nbt.int64]
    if record:  # debug mode, or a run-time argument check (backends/bounds.py)
        out.append(nbt.Array(nbt.int64, 1, "C"))
    if log_gate.uses_gate(kernel) if gate is None else gate:
        out.append(nbt.int64)
    return tuple(out)


def _arg_plan(kernel: ir.Kernel):
    """(scalar index, numpy type) pairs and indexes of f16/bf16 arrays, which travel as uint16 bits."""
    scalars, halves = [], []
    for i, p in enumerate(kernel.params):
        if isinstance(p, (ir.TensorParam, ir.VecParam)):
            if p.dtype.is_storage_only:
                halves.append(i)
        else:
            scalars.append((i, np.float32 if p.dtype.is_storage_only else p.dtype.np.type))
    return tuple(scalars), tuple(halves)


# --------------------------------------------------------------------------- modules

_modules: Dict[str, Tuple[pytypes.ModuleType, Optional[Path]]] = {}  # stem -> what load() returns
_modules_lock = threading.Lock()
_parallel_lock = threading.Lock()  # serializes parallel launches only if numba fell back to workqueue
_serialize_parallel = False


def _module_name(stem: str) -> str:
    return "opdsl_numba_" + stem


def _exec_source(source: str, stem: str, file: Optional[Path] = None) -> pytypes.ModuleType:
    """A module from the generated source held in memory, never from a file someone could swap.

    It runs with ``CACHE = False`` so numba never picks a cache folder by itself (see
    backends/numba/cache.py); tracebacks read the lines from ``linecache``, not from disk.
    """
    name = _module_name(stem)
    filename = str(file) if file is not None else f"<opdsl numba {stem}>"
    mod = pytypes.ModuleType(name)
    mod.__file__ = filename
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    sys.modules[name] = mod  # numba rebuilds cached functions' environments from the module by name
    try:
        text = source.replace("\nCACHE = True", "\nCACHE = False", 1)
        exec(warm_bytecode.code_of(text, filename, stem), mod.__dict__)  # its bytecode cached beside it
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def _compile_entry(dispatcher, sig, kernel: ir.Kernel, which: str) -> None:
    try:
        with link_once.compiling():  # LLVM optimizes and emits the entry's whole chain once
            dispatcher.compile(sig)
    except CompileError:
        raise
    except Exception as err:  # a numba failure on generated code is a bug: say where to look
        msg = str(err).strip().splitlines()
        raise CompileError(
            f"numba could not compile the generated {which} for kernel '{kernel.name}': "
            f"{msg[0] if msg else type(err).__name__}",
            note="read the generated code with kernel.source('numba'); please report this") from err
    _accept_read_only(dispatcher, tuple(sig), kernel)


# In parameters of more than this many (read-only or not) combinations get only the all-read-only one
_MAX_READ_ONLY_SUBSETS = 64


def _accept_read_only(dispatcher, sig: Tuple, kernel: ir.Kernel) -> None:
    """Let read-only arrays (a model's constants and weights) reach ``sig``'s machine code through In
    parameters.  numba types a read-only array apart and dispatches on exact types, so without this
    it compiles the whole entry point again at the first such call (light_resnet50 compiled its packed
    GEMM and direct convolution twice: 135 of 265 s of a cold compile).  The code never writes an In
    parameter (the language rejects it) and an array's data model does not depend on the flag, so
    the compiled function is registered for those argument types as well (numba's own
    ``add_overload`` does the same registration; tests/backends/test_parallel_compile.py checks it)."""
    cres = dispatcher.overloads.get(sig)
    ins = [i for i, p in enumerate(kernel.params) if isinstance(p, ir.TensorParam) and p.access == "in"]
    if cres is None or not ins:
        return
    masks = range(1, 1 << len(ins)) if (1 << len(ins)) <= _MAX_READ_ONLY_SUBSETS else ((1 << len(ins)) - 1,)
    for mask in masks:
        args = list(sig)
        for bit, i in enumerate(ins):
            if mask >> bit & 1:
                t = args[i]  # not t.copy(readonly=True): that type is not the one typeof() gives
                args[i] = nbt.Array(t.dtype, t.ndim, t.layout, readonly=True)
        if tuple(args) not in dispatcher.overloads:
            _read_only_types.update(args)  # numba interns types weakly: a dropped one comes back with a new code
            dispatcher._insert([a._code for a in args], cres.entry_point, cres.objectmode)


_read_only_types: set = set()


def load(request: CompileRequest, source: str, made=None,
         gate: Optional[bool] = None) -> Tuple[pytypes.ModuleType, Optional[Path]]:
    """(module, path of the readable copy or None) for this specialization, ``launch_serial`` compiled.

    With a usable disk cache, numba's machine code is loaded from (or saved to) opdsl's private
    numba folder under the key's lock, and the source is saved beside it for reading; without
    one (or if the disk fails midway) everything stays in memory.  ``made``: the (module, path)
    ``_make_module`` already returned for it.
    """
    k = request.kernel
    stem = f"{request.key}_{CODEGEN_VERSION}"
    with _modules_lock:
        hit = _modules.get(stem)
    if hit is not None:
        return hit
    sig = signature(k, bounds.needs_record(k, request.debug), gate=gate)
    with cache.lock(CACHE_TAG, f"{stem}.launch_serial"):  # the entry's lock, as a compile worker takes it
        mod, path = made or _make_module(stem, source)
        _compile_entry(mod.launch_serial, sig, k, "launch_serial")
    with _modules_lock:
        _modules[stem] = (mod, path)
    return mod, path


def _make_module(stem: str, source: str) -> Tuple[pytypes.ModuleType, Optional[Path]]:
    """The module executed from ``source`` with its dispatchers on the disk cache; nothing compiled yet."""
    path = _save_source(stem, source)
    return _exec_module(stem, source, path), path


def _exec_module(stem: str, source: str, path: Optional[Path]) -> pytypes.ModuleType:
    mod = _exec_source(source, stem, path)
    if path is not None:
        machine_cache.attach(mod, path.parent, machine_cache.source_stamp(source), stem)
    return mod


def _save_source(stem: str, source: str) -> Optional[Path]:
    """``<cache>/numba/<stem>.py`` holding ``source`` (for people and tracebacks), or None without a disk cache."""
    if not cache.enabled():
        return None
    try:
        path = cache.path(CACHE_TAG, stem + ".py")
        if cache.read_private(path) != source.encode("utf-8"):
            cache.atomic_write(path, source)
        return path
    except OSError as e:
        cache.write_failed(e, f"numba/{stem}.py")
        return None


# --------------------------------------------------------------------------- launching


def _entries_of(mod) -> Dict[str, Callable]:
    """The module's entries besides ``launch_serial``.  grid > 1 (or no sync): tiles/threads in one
    prange; one team with sync: launch_team; an n-d grid (gx, gy, gz): the _nd entries, compiled
    on first use like the parallel ones."""
    entries = {"launch_parallel": mod.launch_parallel, "launch_serial_nd": mod.launch_serial_nd,
               "launch_parallel_nd": mod.launch_parallel_nd}
    if hasattr(mod, "launch_team"):
        entries["launch_team"] = mod.launch_team
    return entries


class NumbaLauncher(Launcher):
    """Runs one specialization; the per-launch Python work is a few attribute reads."""

    can_run_parallel = True  # a serial and a parallel entry point (run_serial / run_parallel)

    def __init__(self, mod, request: CompileRequest, path, sites=None, source: str = "", pending: bool = False,
                 facts: Optional[Dict[str, bool]] = None):
        k = request.kernel
        # facts: what a front-end record says of the IR (backends/numba/warm.py); else read from it
        facts = facts or _facts(k)
        self._sites = sites  # with an error record: what each check reports (backends/bounds.py)
        self._debug = request.debug
        # kernels with dsl.log calls: where each launch reads the run-time threshold (backends/log_gate.py)
        self._gate = log_gate.gate_of(request) if facts["gate"] else None
        if self._gate is not None:
            self._run = self._run_logged
        self.name = k.name
        self.kernel_ir = k
        self._request = request
        self._stem = f"{request.key}_{CODEGEN_VERSION}"
        self._ready: Dict[str, Callable] = {}
        self._lock = threading.RLock()
        self._scalars, self._halves = _arg_plan(k)
        self._tensors = [i for i, p in enumerate(k.params) if isinstance(p, ir.TensorParam)]
        self._team = k.threads
        self._choice = entry_choice.EntryChoice()  # small launches: serial or parallel, by their work (entry_choice.py)
        self._sig = signature(k, sites is not None or request.debug, gate=facts["gate"])
        self._entry_sigs: Dict[str, Tuple] = {}  # entry name -> its signature, for note_launch
        self._nparams = len(k.params)
        # nested loops: small launches weigh their work (launch_work.py), which names what it reads
        self._work = facts["work"]
        self._weighed = self._work is not None
        self._serial_first = facts["serial_first"]
        if self._weighed:
            names = [p.name for p in k.params]
            self._shape_of = tuple((p.name, i) for i, p in enumerate(k.params) if isinstance(p, (ir.TensorParam, ir.VecParam)))
            self._reads = tuple((n, names.index(n)) for n in self._work["reads"] if n in names)
        # entry point -> its job in a compile worker (backends/numba/parallel_compile.py)
        self._jobs: Dict[str, parallel_compile.Job] = {}
        self._source = source  # the generated module (what a compile worker gets)
        self._pending = pending  # launch_serial not compiled yet (compiled on first use, or by a compile batch)
        self._bind(mod, path)
        if pending:  # the first serial launch waits for its worker job, or compiles it here
            self._serial = self._serial_when_ready

    def _bind(self, mod, path) -> None:
        self._module = mod
        self._direct: Dict[str, Callable] = {}  # entry name -> its compiled entry point (Frozen launches)
        self._disk = path is not None
        self.source_path = path
        if mod is None:  # a warm launcher's module runs on first need (_module_ready), not at load
            self._serial = self._serial_when_ready
            self._entries = dict.fromkeys(deferred_module.entry_names(self._source))
            return
        self._serial = mod.launch_serial
        self._entries = _entries_of(mod)

    def _module_ready(self) -> pytypes.ModuleType:
        """The generated module, executed now if ``lazy_launcher(deferred=True)`` left it for later:
        a model loaded from its plans binds ~70 launches, whose ~80 dispatchers it never all runs.
        ``_serial`` stays ``_serial_when_ready`` (the module is deferred only while it is pending)."""
        if self._module is None:
            with self._lock:
                if self._module is None:
                    mod = _exec_module(self._stem, self._source, self.source_path)
                    self._entries = _entries_of(mod)
                    self._module = mod  # last: readers test it without the lock
        return self._module

    # ------------------------------------------------------------------ compile batches
    def which(self, args: Sequence, grid: Grid) -> str:
        """The entry point ``self(args, grid)`` runs (the same tests as ``__call__``)."""
        if type(grid) is tuple:
            few = grid[0] * grid[1] * grid[2] * self._team <= SERIAL_MAX_THREADS
            small = few and sum(args[i].size for i in self._tensors) < SERIAL_MAX_ELEMENTS
            return "launch_serial_nd" if small else "launch_parallel_nd"
        if grid * self._team <= SERIAL_MAX_THREADS:
            if _workers() == 1:
                return "launch_serial"
            n = sum(args[i].size for i in self._tensors)
            if n < SERIAL_MAX_ELEMENTS and not (self._weighed and self._small_goes_parallel(args, grid)):
                return "launch_serial"
        return "launch_team" if grid == 1 and "launch_team" in self._entries else "launch_parallel"

    def note_launch(self, args: Sequence, grid: Grid, batch) -> None:
        """A launch was prepared inside a compile batch: send the entry point it will run to a
        compile worker unless it is compiled, on disk or already asked for."""
        if not grid:
            return
        which = self.which(args, grid)
        if which in self._ready or which in self._jobs or not self._disk:
            return
        if which == "launch_serial" and not self._pending:
            return
        sig = self._entry_sigs.get(which)
        if sig is None:  # a model notes ~70 launches of ~10 entries while it loads: types built once each
            sig = self._entry_sigs[which] = signature(self.kernel_ir, self._sites is not None,
                                                      nd=which.endswith("_nd"), gate=self._gate is not None)
        if self._module is None and deferred_module.on_disk(self._stem, self._source, which):
            return  # a deferred module's entry the cache holds: loaded on first use, nothing to send
        fn = self._module_ready().launch_serial if which == "launch_serial" else self._entries[which]
        if not parallel_compile.wanted() or machine_cache.cached(fn, sig):
            return
        self._jobs[which] = parallel_compile.submit(batch, self._stem, self._source, self.name, which, sig)
        batch.add(self)

    def outstanding(self) -> int:
        return len(self._jobs)

    def finish_compile(self) -> None:
        """Wait for this launcher's worker jobs and load what they compiled (compiling in-process
        what they could not, which raises its CompileError here)."""
        for which in list(self._jobs):
            if which == "launch_serial":
                self._serial_ready()
            else:
                self._compile_lazily(which)

    def _serial_ready(self) -> None:
        with self._lock:
            if not self._pending:
                return
            parallel_compile.wait(self._jobs.pop("launch_serial", None))
            mod, path = load(self._request, self._source, (self._module_ready(), self.source_path), self._gate is not None)
            self._bind(mod, path)
            self._pending = False

    def _serial_when_ready(self, *args) -> None:
        self._serial_ready()
        self._serial(*args)

    def _adapt(self, args: Sequence) -> Sequence:
        """Scalars as their exact numpy type (numba would compile another variant), halves as bits."""
        out = None
        for i, t in self._scalars:
            if type(args[i]) is not t:
                if out is None:
                    out = list(args)
                out[i] = t(args[i])
        if self._halves:
            out = list(args) if out is None else out
            for i in self._halves:
                out[i] = out[i].view(np.uint16)
        return args if out is None else out

    def freeze(self, values: Sequence) -> Sequence:
        """``values`` as a model's plan keeps them for every run: adapted once and, when they have
        exactly the compiled types, a ``Frozen`` tuple that later launches take straight to the
        entry point's machine code (backends/numba/frozen.py); else the adapted values."""
        values = self._adapt(values)
        if self._debug:  # debug launches keep the dispatcher's checks (an argument-check record is fine)
            return values
        return frz.freeze(values, self._tensors, self._sig[:len(values)] if len(values) == self._nparams
                          else ()) or values

    def direct_entry(self, values: Sequence, grid: Grid):
        """The serial entry's machine code for small launches of ``grid`` teams like ``values``
        (a kernel's one-hop binder, dsl/runtime/hop.py): only where ``__call__`` would run it with
        nothing else to do (no error record, no log threshold, no entry choice to weigh, no f16 bits, compiled)."""
        if (self._sites is not None or self._gate is not None or (self._weighed and grid * self._team > 1) or self._pending or self._halves or type(grid) is not int
                or not 0 < grid * self._team <= SERIAL_MAX_THREADS or len(values) != self._nparams):
            return None
        cres = getattr(self._serial, "overloads", {}).get(self._sig)
        if cres is None:
            return None
        return DirectEntry(cres.entry_point, grid, SERIAL_MAX_ELEMENTS, interrupt.COUNTER)

    def prepared_entry(self, values: Sequence, grid: Grid):
        """The serial entry for a small launch of ``Frozen`` values (exactly the compiled types,
        backends/numba/frozen.py) that ``__call__`` would run there with nothing else to do."""
        if type(values) is not frz.Frozen or values.size >= SERIAL_MAX_ELEMENTS and _workers() > 1:
            return None
        return self.direct_entry(values, grid)

    def _entry(self, which: str, args: Sequence, grid: int):
        """What runs entry ``which``: its compiled entry point for ``Frozen`` values (the
        dispatcher's typing skipped), else the dispatcher."""
        if type(args) is frz.Frozen and which == "launch_serial" and self._pending:
            # loaded (or compiled) first, so this launch too runs the entry point: the dispatcher
            # would type each argument (numba's typeof imports numpy.ma for its masked-array check)
            self._serial_ready()
        fn = self._serial if which == "launch_serial" else self._parallel_entry(grid)
        if type(args) is not frz.Frozen:
            return fn
        ep = self._direct.get(which)
        if ep is None:
            cres = getattr(fn, "overloads", {}).get(self._sig)
            if cres is None:
                return fn
            ep = self._direct[which] = cres.entry_point
        return ep

    def __call__(self, args: Sequence, grid: Grid) -> None:
        frozen = type(args) is frz.Frozen
        if not frozen:
            args = self._adapt(args)
        if type(grid) is tuple:  # n-d; an int grid (the common launch) pays nothing more for it
            self._run_nd(args, grid, grid[0] * grid[1] * grid[2] * self._team <= SERIAL_MAX_THREADS)
            return
        threads = grid * self._team
        if threads <= SERIAL_MAX_THREADS:
            if _workers() == 1:  # one core: the parallel entry would add its own cost and nothing else
                self._run(self._entry("launch_serial", args, grid) if frozen else self._serial, args, grid)
                return
            if frozen:
                n = args.size
            else:
                n = 0
                for i in self._tensors:
                    n += args[i].size
            if n < SERIAL_MAX_ELEMENTS and not (self._weighed and self._small_goes_parallel(args, grid)):
                self._run(self._entry("launch_serial", args, grid) if frozen else self._serial, args, grid)
                return
        if self._serial_first and not frozen and self._first_big_launch_serial(args, grid):
            self._run(self._serial, args, grid)
            return
        self._run_parallel(args, grid)

    def _first_big_launch_serial(self, args: Sequence, grid: int) -> bool:
        """Whether this big launch runs on the serial entry because it is the first and no parallel
        entry is compiled, loading or on disk, and it is light enough (SERIAL_FIRST_MAX_ELEMENTS for a
        single loop, SERIAL_FIRST_MAX_WORK for nested loops).  Asked once: the next big launch
        compiles the parallel entry.  Except while a model is built (a compile batch is open): its
        launches then are one-shot -- folding a constant, packing a weight -- so every light one
        stays serial (light_resnet50 compiled the parallel entries of its fill and packing kernels
        for ~50 launches that take ~0.1 s serially together: ~1 s of CPU before planning went on)."""
        if compile_batch.current() is None:
            self._serial_first = False
        which = "launch_team" if grid == 1 and "launch_team" in self._entries else "launch_parallel"
        self._module_ready()
        if which in self._ready or which in self._jobs or self._sites is not None \
                or self._sig in self._entries[which].overloads:  # compiled by another launcher of this module
            return False
        if self._weighed:
            if self.work(args, grid) > SERIAL_FIRST_MAX_WORK:
                return False
        elif sum(args[i].size for i in self._tensors) >= SERIAL_FIRST_MAX_ELEMENTS:
            return False
        return not (self._disk and machine_cache.cached(self._entries[which], self._sig))

    def _small_goes_parallel(self, args: Sequence, grid: int) -> bool:
        """The entry choice of a small launch of a kernel with nested loops (entry_choice.py): decided
        once per launch signature -- grid, shapes and the scalars its loop bounds read -- from its work."""
        frozen = type(args) is frz.Frozen
        if frozen:  # a plan's launch: decided once for these very values (a Frozen tuple never changes)
            memo = args.__dict__.get("entry_choice")
            if memo is not None and memo[0] == grid:
                return memo[1]
        key = (grid, *[args[i].shape for _, i in self._shape_of], *[_plain(args[i]) for _, i in self._reads])
        got = self._choice.parallel(key, lambda: self.work(args, grid), grid * self._team, _workers())
        if frozen:
            args.entry_choice = (grid, got)
        return got

    def work(self, args: Sequence, grid: Grid) -> Optional[float]:
        """The operations a launch of ``args`` over ``grid`` executes, estimated from the kernel's
        loop nest (backends/numba/launch_work.py); None for a kernel without nested loops."""
        if not self._weighed:
            return None
        shapes = {name: tuple(args[i].shape) for name, i in self._shape_of}
        scalars = {name: _plain(args[i]) for name, i in self._reads}
        return launch_work.estimate(self._work, shapes, scalars, grid, self._team)

    def goes_parallel(self, grid: int, elements: int, args: Optional[Sequence] = None) -> bool:
        """Whether a launch of ``grid`` teams over tensors of ``elements`` elements in total runs
        the parallel entry (tests, benchmarks); ``args``: the launch's values, which a kernel with
        nested loops needs to weigh a small launch (without them it says serial)."""
        if grid * self._team > SERIAL_MAX_THREADS:
            return True
        if _workers() == 1:
            return False
        if elements >= SERIAL_MAX_ELEMENTS:
            return True
        return self._weighed and args is not None and self._small_goes_parallel(self._adapt(args), grid)

    def run_serial(self, args: Sequence, grid: Grid) -> None:
        """Force the serial variant (tests, benchmarks)."""
        if type(grid) is tuple:
            self._run_nd(self._adapt(args), grid, True)
        else:
            self._run(self._serial, self._adapt(args), grid)

    def run_parallel(self, args: Sequence, grid: Grid) -> None:
        """Force the parallel variant (compiled on first use)."""
        if type(grid) is tuple:
            self._run_nd(self._adapt(args), grid, False)
        else:
            self._run_parallel(self._adapt(args), grid)

    def _parallel_entry(self, grid: int):
        which = "launch_team" if grid == 1 and "launch_team" in self._entries else "launch_parallel"
        return self._ready.get(which) or self._compile_lazily(which)

    def _run_parallel(self, args: Sequence, grid: int) -> None:
        which = "launch_team" if grid == 1 and "launch_team" in self._entries else "launch_parallel"
        fn = self._entry(which, args, grid)
        worker_cores.before_parallel_launch()  # its workers off this thread's core
        if _serialize_parallel:
            with _parallel_lock:
                self._run(fn, args, grid)
        else:
            self._run(fn, args, grid)

    def _run_nd(self, args: Sequence, shape: Tuple[int, int, int], few_threads: bool) -> None:
        """An n-d grid (gx, gy, gz): the ``_nd`` entries take the shape where the others take the
        team count; small launches run serially, as for an int grid."""
        serial = few_threads and sum(args[i].size for i in self._tensors) < SERIAL_MAX_ELEMENTS
        which = "launch_serial_nd" if serial else "launch_parallel_nd"
        fn = self._ready.get(which) or self._compile_lazily(which)
        gx, gy, gz = shape
        nd_args = (*args, gx, gy)  # the _nd entries take gx, gy, gz where the others take the team count
        if not serial:
            worker_cores.before_parallel_launch()
        if _serialize_parallel and not serial:
            with _parallel_lock:
                self._run(fn, nd_args, gz, args)
        else:
            self._run(fn, nd_args, gz, args)

    def hidden_args(self, grid: int, start: int = 0) -> tuple:
        """The arguments every compiled entry takes after the kernel's own, in order: the grid, the
        Ctrl-C counter and its value at arming, then a fresh error record and the run-time log
        threshold where this kernel takes them.  ``_run`` passes the same (it builds them inline:
        it is the launch path); benchmarks that call an entry directly use this."""
        return (grid, interrupt.COUNTER, start) + (
            (bounds.new_record(),) if self._sites is not None else ()) + (
            (np.int64(self._gate.threshold()),) if self._gate is not None else ())

    def _run(self, fn, args: Sequence, grid: int, kernel_args: Sequence = None) -> None:
        """One launch with its grid and hidden arguments; KeyboardInterrupt if SIGINT stopped it,
        IndexError (debug mode) if an access was out of range (``kernel_args``: the kernel's own
        arguments, when ``args`` carries more)."""
        start = interrupt.arm()
        if self._sites is None:
            fn(*args, grid, interrupt.COUNTER, start)
        else:
            record = bounds.new_record()
            fn(*args, grid, interrupt.COUNTER, start, record)
            if record[bounds.STATE]:
                interrupt.check(start)  # an interrupt first: the record may be one of its casualties
                raise bounds.error(record, self._sites, self.kernel_ir,
                                   args if kernel_args is None else kernel_args).with_traceback(None)
        interrupt.check(start)

    def _run_logged(self, fn, args: Sequence, grid: int, kernel_args: Sequence = None) -> None:
        """``_run`` for kernels with dsl.log calls (it replaces ``_run`` on their launchers, so the
        others run exactly the code above): the run-time log threshold follows the other hidden
        arguments, last (backends/numba/regions.py)."""
        level = self._gate.threshold()  # a bad OPDSL_LOG_LEVEL raises before anything runs
        NumbaLauncher._run(self, lambda *hidden: fn(*hidden, level), args, grid, kernel_args)

    def _compile_lazily(self, which: str):
        with self._lock:
            if which not in self._ready:
                parallel_compile.wait(self._jobs.pop(which, None))  # then a cache hit, unless it failed there
                self._module_ready()
                fn = self._entries[which]
                sig = signature(self.kernel_ir, self._sites is not None, nd=which.endswith("_nd"), gate=self._gate is not None)
                if self._disk:
                    with cache.lock(CACHE_TAG, f"{self._stem}.{which}"):  # one lock name per entry everywhere
                        _compile_entry(fn, sig, self.kernel_ir, which)
                else:
                    _compile_entry(fn, sig, self.kernel_ir, which)
                _check_threading_layer()
                self._ready[which] = fn
        return self._ready[which]


def _facts(k: ir.Kernel) -> Dict:
    """What a launcher reads from the IR: the log threshold argument, and how it picks entries."""
    nested = _loop_depth(k.body) > 1 or any(_loop_depth(f.body) for f in k.funcs)
    return {"gate": log_gate.uses_gate(k),
            # only kernels with nested loops can do much work on few elements: the others' small
            # launches are serial; theirs weigh the work of the loop nest (launch_work.py)
            "work": launch_work.summarize(k) if nested else None,
            # a first big launch may run serially while no parallel entry exists (SERIAL_FIRST_...)
            "serial_first": True}


def _plain(v):
    """A scalar argument as a Python number, a dsl.Vec one as a tuple of them (hashable, JSON-able)."""
    if isinstance(v, np.ndarray):
        return tuple(v.tolist())
    return v.item() if hasattr(v, "item") else v


_WORKERS: List[int] = []


def _workers() -> int:
    """Cores numba's parallel entries run on: the target's compute units, at most numba's thread count."""
    if not _WORKERS:
        _WORKERS.append(max(1, min(host.host().compute_units or 1, numba.config.NUMBA_NUM_THREADS)))
    return _WORKERS[0]


def _loop_depth(body) -> int:
    """How deeply loops nest in ``body`` (ifs looked into)."""
    depth = 0
    for st in body:
        if isinstance(st, (ir.For, ir.While)):
            depth = max(depth, 1 + _loop_depth(st.body))
        elif isinstance(st, ir.If):
            depth = max(depth, _loop_depth(st.body), _loop_depth(st.orelse))
    return depth


def _check_threading_layer() -> None:
    """If numba could only start the workqueue layer, parallel launches must not overlap."""
    global _serialize_parallel
    from numba.np.ufunc import parallel as npp
    try:
        npp._launch_threads()
    except ValueError:  # no thread-safe layer here (no OpenMP/TBB): fall back, serialized
        numba.config.THREADING_LAYER = "workqueue"
        npp._launch_threads()
    try:
        _serialize_parallel = numba.threading_layer() == "workqueue"
    except ValueError:  # pragma: no cover - layer not reported: stay on the safe side
        _serialize_parallel = True


def lazy_launcher(request: CompileRequest, source: str, sites, facts: Optional[Dict[str, bool]] = None,
                  deferred: bool = False) -> NumbaLauncher:
    """A launcher whose entry points compile on first use: the first launch compiles only the entry
    it runs (a big first launch never pays for ``launch_serial``; each entry re-optimizes the
    kernel's body with it, so an unneeded one costs about a third of a cold first call).  Inside a
    compile batch the same launcher sends the entry a prepared launch will run to a compile worker
    (``note_launch``), and loads it from the disk cache when it is there.  ``deferred`` (a warm
    launcher, with a disk cache): the module itself is executed on first need (``_module_ready``)."""
    stem = f"{request.key}_{CODEGEN_VERSION}"
    with _modules_lock:
        hit = _modules.get(stem)
    if hit is not None:
        return NumbaLauncher(*hit[:1], request, hit[1], sites, source, facts=facts)
    if deferred and cache.enabled():
        path = _save_source(stem, source)
        if path is not None:
            return NumbaLauncher(None, request, path, sites, source, pending=True, facts=facts)
    mod, path = _make_module(stem, source)
    return NumbaLauncher(mod, request, path, sites, source, pending=True, facts=facts)


class NumbaBackend(Backend):
    name = "numba"
    parallel = True  # team threads run across the cores (parallel entry points)
    packed_kernels = True
    fastmath_keeps_inf_nan = True
    cache_tag = CACHE_TAG
    generator_version = CODEGEN_VERSION

    def source(self, request: CompileRequest) -> str:
        return self.program(request).source()

    @staticmethod
    def program(request: CompileRequest) -> Program:
        return Program(request.kernel, request.log_level, request.key, request.fastmath, request.debug,
                       request.interrupt)

    def compile(self, request: CompileRequest) -> Launcher:
        program = self.program(request)
        source = program.source()
        sites = program.gen.sites.table if program.gen.record else None  # launches carry an error record
        return lazy_launcher(request, source, sites)

    def warm_record(self, request: CompileRequest, launcher: Launcher) -> Optional[dict]:
        from backends.numba import warm
        return warm.record(request, launcher) if isinstance(launcher, NumbaLauncher) else None

    def warm_launcher(self, record: dict, pyfunc, log_gate) -> Optional[Launcher]:
        from backends.numba import warm
        facts = record.get("facts", {})
        if "work" not in facts or (isinstance(facts["work"], dict) and facts["work"].get("version") != launch_work.VERSION):
            return None  # written before launches were weighed, or by another launch_work.py: compile, rewrite
        request, source, facts = warm.restore(record, pyfunc, log_gate)
        return lazy_launcher(request, source, None, facts, deferred=True)

    def available(self) -> str:
        return ""

    def target(self) -> TargetInfo:
        """The host CPU as LLVM sees it: numba compiles for exactly these features."""
        return host.host()


BACKEND = NumbaBackend()
