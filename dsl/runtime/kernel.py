"""``@dsl.kernel`` and ``@dsl.func``: binding launch arguments, specialization,
the in-memory variant cache and the disk-cache key.

A launch checks every argument before any code runs (the error names the
parameter), turns the argument types into a specialization key, looks the
compiled variant up (compiling it once, under a lock, if needed) and runs it.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import html
import inspect
import os
import sys
import threading
import types
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from dsl import config
from backends import compile_batch
from backends import warm_start
from backends import log_gate
from dsl.runtime import arg_check
from dsl.runtime import fastpath
from dsl.runtime import hop as hop_binder
from dsl.runtime import foreign
from dsl.runtime import pickling
from dsl.runtime import rank_free
from dsl.runtime import warm_key
from dsl.runtime import grid as launch_grid
from dsl.lang import frontend
from dsl.lang.signature import param_decls
from dsl.lang import types as T
from dsl.lang.errors import CompileError
from dsl.lang.func import Func, require_function

_EMPTY = inspect.Parameter.empty


def _require_function(fn, decorator: str) -> None:
    if isinstance(fn, Kernel):
        raise TypeError(f"{decorator} got {fn!r}, which is already a @dsl.kernel; decorate the plain function once")
    require_function(fn, decorator)


def func(fn: Callable) -> Func:
    """Mark a helper callable from kernels; it takes and returns scalars and is compiled per argument types."""
    return Func(fn)


class Kernel:
    """A compiled-on-demand kernel. Call it like the Python function it decorates."""

    defines: Tuple[Tuple[str, Any], ...] = ()  # module constants overridden (Kernel.variant)
    features: frozenset = frozenset()          # target features this implementation needs
    _hop = None  # the last small launch's types straight to machine code (dsl/runtime/hop.py)
    _fast = fastpath.LazyBinder()  # built on the first launch: the op library defines ~100 kernels at import
    # id(launcher) -> indices of the tensors it takes as 1-D views (dsl/runtime/rank_free.py);
    # read-only here for subclasses that build their own state (dsl.grad's kernels)
    _flat: Dict[int, Tuple[int, ...]] = types.MappingProxyType({})
    _shared: Dict[Tuple, Any] = types.MappingProxyType({})
    _free_sets: frozenset = frozenset()

    def __init__(self, fn: Callable, threads: int = 4, grid: Any = 1, log_level: Optional[str] = None,
                 fastmath: bool = False, debug: Optional[bool] = None, log_floor: Optional[str] = None):
        _require_function(fn, "@dsl.kernel")
        if not isinstance(threads, int) or not 1 <= threads <= 1024:
            raise ValueError(f"@dsl.kernel(threads={threads!r}): threads must be an int from 1 to 1024")
        log_gate.check_level(log_level, "@dsl.kernel(log_level)")
        log_gate.check_level(log_floor, "@dsl.kernel(log_floor)")
        self.fn = fn
        functools.update_wrapper(self, fn)
        self.threads = threads
        self.grid = grid
        # dsl.log: the compile-time floor (None: OPDSL_LOG_LEVEL when a specialization compiles)
        # and the run-time threshold every launch reads (backends/log_gate.py)
        self._floor_option = log_floor or log_level
        self._gate = log_gate.LogGate(log_level)
        self.fastmath = bool(fastmath)
        self.debug = debug  # None: OPDSL_DEBUG decides at compile time
        lines, firstline, filename = frontend.header_of(fn)
        self.params = param_decls(fn, filename, firstline, lines)
        self._names = [p.name for p in self.params]
        self._index = {p.name: k for k, p in enumerate(self.params)}
        self._parsed: Dict[str, frontend.Parsed] = {}
        self._variants: Dict[Tuple, Any] = {}
        self._fast_variants: Dict[Tuple, Any] = {}  # (backend, fast key) -> (launcher, flat), for checked arg types
        self._shared: Dict[Tuple, Any] = {}  # (backend, key with ANY_RANK) -> launcher every rank of it shares
        self._flat: Dict[int, Tuple[int, ...]] = {}
        self._free_sets: set = set()  # the tuples of rank-free tensors shared keys were made with
        self._lock = threading.RLock()

    def variant(self, *, defines: Optional[Dict[str, Any]] = None, features=None) -> "Kernel":
        """This kernel compiled with other options, for an op's ``kernels`` mapping (docs/ops.md,
        "Compile options per implementation"): ``defines`` overrides module-level constants
        (``{"TILE": 32}``), each distinct set compiling and caching its own specializations;
        ``features`` names target features (``dsl.target(backend).features``) it needs."""
        from backends.options import check_features
        from dsl.runtime import variant as V
        owner = self.__name__
        merged = {**dict(self.defines), **dict(V.check_defines(owner, self.base.fn, defines))}
        k = Kernel(V.with_defines(self.base.fn, tuple(sorted(merged.items()))), threads=self.threads,
                   grid=self.grid, fastmath=self.fastmath, debug=self.debug)
        k.follow_log_level(self)
        k.base = self.base
        k.defines = tuple(sorted(merged.items()))
        k.features = self.features | check_features(owner, features)
        return k

    # ------------------------------------------------------------------ dsl.log levels
    @property
    def log_level(self) -> Optional[str]:
        """The run-time ``dsl.log`` threshold set on this kernel (None: it follows the kernel it
        was made from, else ``OPDSL_LOG_LEVEL`` read at each launch, else "warn").  Setting it
        filters the calls compiled in (those at or above ``log_floor``) without recompiling."""
        return self._gate.level

    @log_level.setter
    def log_level(self, level: Optional[str]) -> None:
        log_gate.check_level(level, f"{self.__name__}.log_level")
        if level is not None and log_gate.number(level) < log_gate.number(self.log_floor):
            warnings.warn(f"{self.__name__}.log_level = {level!r} is below the kernel's compile-time floor "
                          f"{self.log_floor!r}: dsl.log calls below {self.log_floor!r} are not in its code; "
                          f"decorate with @dsl.kernel(log_floor={level!r}) to keep them", stacklevel=2)
        self._gate.level = level

    @property
    def log_floor(self) -> str:
        """The lowest ``dsl.log`` level compiled in: ``@dsl.kernel(log_floor=...)``, else its
        ``log_level=``, else ``OPDSL_LOG_LEVEL`` when a specialization compiles, else "warn"."""
        return self._level()

    @property
    def log_floor_option(self) -> Optional[str]:
        """The floor this kernel was given (``log_floor=`` or ``log_level=``), None to read OPDSL_LOG_LEVEL."""
        return self._floor_option

    def follow_log_level(self, other: "Kernel") -> None:
        """Compile with ``other``'s floor and follow its run-time threshold unless one is set here
        (variants and gradients of a kernel)."""
        self._floor_option = other._floor_option
        self._gate = log_gate.LogGate(parent=other._gate)

    def __reduce__(self):
        """Pickles by reference when importable, else by source (dsl/runtime/pickling.py)."""
        return pickling.reduce_kernel(self)

    def __copy__(self) -> "Kernel":
        """A shallow copy sharing the compiled variants (not the pickling path: copying stays in-process)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo) -> "Kernel":
        return self  # code, not data: a deep copy of something holding a kernel shares it

    @property
    def base(self) -> "Kernel":
        """The kernel as decorated (a variant's origin)."""
        return self.__dict__.get("base", self)

    @base.setter
    def base(self, value: "Kernel") -> None:
        self.__dict__["base"] = value

    def supported(self, backend: Optional[str] = None) -> bool:
        """Whether ``backend``'s target has every feature this implementation needs."""
        return self.unsupported(backend) is None

    def unsupported(self, backend: Optional[str] = None) -> Optional[str]:
        """Why this implementation cannot run on ``backend`` (missing target features), or None."""
        from backends.options import features_error
        return features_error(f"kernel {self.__name__!r}", self.features, backend or config.default_backend())

    # ------------------------------------------------------------------ launching
    def __getitem__(self, grid) -> Callable:
        """``kernel[grid](args...)``: launch ``grid`` independent teams (``kernel[8]``, ``kernel[(gx, gy)]``)."""
        return functools.partial(self.__call__, grid=grid)

    def __call__(self, *args, backend: Optional[str] = None, grid: Any = None, **kwargs) -> None:
        __tracebackhide__ = True  # pytest and IPython hide this frame: errors point at user code
        if _watchers:  # a plan is being recorded (dsl/opgraph/recorded_plan.py): it sees this launch
            _notify(self, args, kwargs)
        # one hop: the last small launch's types, straight to its machine code (dsl/runtime/hop.py)
        hop = self._hop
        if (hop is not None and len(args) == hop.arity and grid is None and backend is None and not kwargs
                and config.default_backend() == hop.backend and hop(*args)):
            return
        # the fast path: seen argument types and a plain int grid (the kernel's, or one given here
        # that needs no check beyond its sign and the launcher's thread limit)
        g = self.grid if grid is None else grid
        if self._fast is not None and type(g) is int and g >= 0:
            if self._fast_launch(args, kwargs, backend, g):
                return
            views = self._foreign_views(args, kwargs)  # torch tensors...: numpy views, then the fast path again
            if views is not None and self._fast_launch(views[0], views[1], backend, g):
                return
        launcher, values, g = self.prepare(args, kwargs, backend=backend, grid=grid, now=True)
        if self._fast is not None and type(g) is int:
            # these types passed the full check: later launches of them take the fast path, also
            # when the specialization was compiled by a launch the fast binder refused
            self._remember_fast(args, kwargs, backend or config.default_backend(), launcher)
        if g:
            launcher(values, g)

    def _fast_launch(self, args, kwargs, backend, g: int) -> bool:
        """Launch through the fast binder when it knows these argument types; False otherwise."""
        try:
            hit = self._fast(*args, **kwargs)
        except Exception:  # any binding problem: the full check explains it
            return False
        if hit is None:
            return False
        known = self._fast_variants.get((backend or config.default_backend(), hit[1]))
        if known is None:
            return False
        launcher, flat = known
        if g * self.threads > launcher.max_logical_threads:
            return False
        if g:
            values = rank_free.flatten(hit[0], flat) if flat else hit[0]
            launcher(values, g)
            if g is self.grid and not kwargs and len(args) == len(self.params):
                self._learn_hop(launcher, values, g, backend or config.default_backend(), hit[0], flat)
        return True

    def _learn_hop(self, launcher, values, g: int, backend: str, shaped=None, flat: Tuple[int, ...] = ()) -> None:
        """After a fast-path launch: let launches of the same types go straight to the launcher's
        machine code (dsl/runtime/hop.py) when it offers one for them; built once per entry.
        ``shaped``: the launch's own values when ``values`` has the ``flat`` tensors as 1-D views."""
        entry = launcher.direct_entry(values, g)
        if entry is None or (self._hop is not None and self._hop.entry is entry.fn):
            return
        made = hop_binder.build(self.params, values if shaped is None else shaped, entry, flat)
        if made is not None:
            made.backend, made.entry = backend, entry.fn
            self._hop = made

    def _foreign_views(self, args: tuple, kwargs: dict):
        """(args, kwargs) with other libraries' arrays as numpy views, or None when there are none
        or one is refused (``bind`` then says why)."""
        params = self.params
        found = False

        def view(p, v):
            nonlocal found
            if p.kind != "tensor" or isinstance(v, np.ndarray) or not foreign.is_foreign(v):
                return v
            found = True
            return foreign.as_numpy(self.__name__, p.name, p.annotation, v)
        try:
            new_args = tuple(view(p, v) for p, v in zip(params, args))
            new_kwargs = {k: view(params[self._index[k]], v) if k in self._index else v for k, v in kwargs.items()}
        except (TypeError, ValueError):
            return None
        return (new_args + tuple(args[len(params):]), new_kwargs) if found else None

    def prepare(self, args: tuple, kwargs: dict, backend: Optional[str] = None, grid: Any = None, *,
                now: bool = False):
        """Check and bind a launch without running it -> (launcher, values, grid).

        ``launcher(values, grid)`` then runs it; graphs record this once per node and replay it.  The
        grid is an int (1-d, 0 when no team runs) or ``(gx, gy, gz)`` (dsl/runtime/grid.py).
        ``now``: the caller runs it at once (``__call__``; already shown to launch watchers), so a
        compile batch is not told: its workers would compile the entry while this process waits."""
        __tracebackhide__ = True
        if _watchers and not now:
            _notify(self, args, kwargs)
        backend = backend or config.default_backend()
        values, key = self.bind(args, kwargs)
        launcher = self._variants.get((backend, key))
        if launcher is None:
            try:
                launcher = self._compile(backend, key, values)
            except CompileError as e:  # the message points at user code; compiler frames are noise
                raise e.with_traceback(None) from None
            self._remember_fast(args, kwargs, backend, launcher)
            views = self._foreign_views(args, kwargs)
            if views is not None:
                self._remember_fast(views[0], views[1], backend, launcher)
        g = self.grid if grid is None else grid
        if callable(g):
            g = g(dict(zip(self._names, values)))
        g = launch_grid.normalize(self.__name__, g)
        limit = launcher.max_logical_threads
        total = launch_grid.size(g) * self.threads
        if total > limit:
            from backends.base import MAX_LOGICAL_THREADS
            raise ValueError(f"{self.__name__}: grid={launch_grid.describe(g)} x threads={self.threads} = {total} "
                             f"logical threads exceeds the {backend} backend's limit of {limit} (thread indexes are "
                             f"{'64-bit signed' if limit == MAX_LOGICAL_THREADS else 'limited by the device'})")
        arg_check.check_overlap(self.__name__, self.params, values, _INPLACE_OK.get())
        flat = self._flat.get(id(launcher))
        if flat:  # a specialization shared by every rank of these tensors: they travel as 1-D views
            values = rank_free.flatten(values, flat)
        batch = None if now else compile_batch.current()
        if batch is not None:  # planning a model: the entry point this launch runs may compile elsewhere now
            batch.note(launcher, values, g)
        return launcher, values, g

    def _remember_fast(self, args, kwargs, backend, launcher) -> None:
        """After a full check, let the fast path launch these argument types directly."""
        if self._fast is not None:
            try:
                hit = self._fast(*args, **kwargs)
            except Exception:
                hit = None
            if hit is not None:
                self._fast_variants[(backend, hit[1])] = (launcher, self._flat.get(id(launcher), ()))

    def bind(self, args: tuple, kwargs: dict) -> Tuple[List[Any], Tuple]:
        """Validate and convert arguments -> (values in param order, specialization key)."""
        params = self.params
        if len(args) > len(params):
            raise TypeError(f"{self.__name__}() takes {len(params)} argument(s) ({', '.join(self._names)}), "
                            f"got {len(args)} positional")
        raw: List[Any] = list(args) + [_EMPTY] * (len(params) - len(args))
        for k, v in kwargs.items():
            i = self._index.get(k)
            if i is None:
                raise TypeError(f"{self.__name__}() got an unexpected argument '{k}'; parameters: "
                                f"{', '.join(self._names)}")
            if raw[i] is not _EMPTY:
                raise TypeError(f"{self.__name__}() got multiple values for argument '{k}'")
            raw[i] = v
        typevars: Dict[T.TypeVar, T.DType] = {}
        key: List[Any] = []
        # tensors first: they bind TypeVars that scalars may use
        for i, (p, v) in enumerate(zip(params, raw)):
            if p.kind != "tensor":
                continue
            if v is _EMPTY:
                raise TypeError(f"{self.__name__}() missing argument '{p.name}' ({p.annotation!r})")
            hint = None
            if not isinstance(v, np.ndarray) and foreign.is_foreign(v):  # torch, JAX, buffers: a zero-copy view
                hint = foreign.contiguity_hint(v, p.name)
                v = raw[i] = foreign.as_numpy(self.__name__, p.name, p.annotation, v)
            dt = arg_check.check_tensor(self.__name__, p, v, typevars, hint)
            key.append((dt, v.ndim))
        values: List[Any] = []
        for p, v in zip(params, raw):
            if p.kind == "tensor":
                values.append(v)
                continue
            if v is _EMPTY:
                v = p.default
                if v is _EMPTY:
                    raise TypeError(f"{self.__name__}() missing argument '{p.name}' ({p.annotation!r})")
            if p.kind == "vec":
                values.append(arg_check.vec_value(self.__name__, p, v))
                continue
            ann = p.annotation.dtype if isinstance(p.annotation, T.ConstSpec) else p.annotation
            if isinstance(ann, T.TypeVar):
                if ann not in typevars:
                    typevars[ann] = arg_check.infer_scalar_dtype(self.__name__, p, v)
                ann = typevars[ann]
            sv = arg_check.scalar_value(self.__name__, p.name, ann, v)
            values.append(sv)
            if isinstance(p.annotation, T.ConstSpec):
                key.append(("const", p.name, sv.item() if isinstance(sv, np.generic) else sv))
        for tv, dt in typevars.items():
            if tv.allowed and dt not in tv.allowed:
                raise TypeError(f"{self.__name__}(): {tv.name} = {dt} is not one of "
                                f"{', '.join(map(str, tv.allowed))}")
        key.append(tuple(sorted((tv.name, dt.name) for tv, dt in typevars.items())))
        return values, tuple(key)

    # ------------------------------------------------------------------ compiling
    def _level(self) -> str:
        return self._floor_option or config.log_level()

    def parsed(self) -> frontend.Parsed:
        level = self._level()
        p = self._parsed.get(level)
        if p is None:
            p = self._parsed[level] = frontend.parse(self.fn, is_kernel=True, log_level=level)
        return p

    def specialize(self, values: List[Any]):
        """The typed IR for these (already bound) argument values."""
        parsed = self.parsed()
        typevars: Dict[T.TypeVar, T.DType] = {}
        ndims, consts = [], []
        for p, v in zip(self.params, values):
            if p.kind == "tensor":
                ndims.append((p.name, v.ndim))
                a = p.annotation.dtype
                if isinstance(a, T.TypeVar):
                    typevars[a] = T.from_numpy(v.dtype)
            elif p.kind == "scalar":
                ann = p.annotation.dtype if isinstance(p.annotation, T.ConstSpec) else p.annotation
                if isinstance(ann, T.TypeVar) and ann not in typevars:
                    typevars[ann] = T.from_numpy(np.asarray(v).dtype)
                if isinstance(p.annotation, T.ConstSpec):
                    consts.append((p.name, v.item() if isinstance(v, np.generic) else v))
        for s in parsed.scratch:  # a scratch dtype may name a TypeVar no argument binds
            if isinstance(s.dtype, T.TypeVar) and s.dtype not in typevars:
                raise CompileError(f"scratch '{s.name}' has dtype {s.dtype!r}, which no argument binds", s.loc)
        from dsl.lang import check  # the checker: not imported by a process whose kernels all have records
        binding = check.Binding(tuple(typevars.items()), tuple(ndims), tuple(consts))
        level = self._level()
        return check.check_kernel(parsed, binding, self.threads,
                                  lambda f, tensors=frozenset(): frontend.parse_func(f, level, tensors))

    def _compile(self, backend: str, key: Tuple, values: List[Any]):
        from backends import base
        with self._lock:
            launcher = self._variants.get((backend, key))
            if launcher is not None:
                return launcher
            problem = self.unsupported(backend) if self.features else None
            if problem:
                raise CompileError(problem)
            be = base.get(backend)
            shared_hit = self._shared_launcher(backend, key)
            if shared_hit is not None:  # another rank of flat-read tensors compiled it: no front end
                launcher, flat = shared_hit
                self._flat[id(launcher)] = flat
                self._variants[(backend, key)] = launcher
                return launcher
            warm = self.warm_key(backend, key)  # a record of this specialization: no front end (docs/cache.md)
            launcher = warm_start.lookup(be, warm, self.fn, self._gate) if warm else None
            if launcher is not None:  # its IR says which tensors it takes flat
                flat = rank_free.flattened_by(self.params, launcher.kernel_ir, values)
            else:
                if type(self).request is Kernel.request:
                    request, shared, flat = self._plan(backend, key, values)
                else:
                    request, shared, flat = self.request(backend, key, values), None, ()
                launcher = self._shared.get((backend, shared)) if shared else None
                if launcher is None:
                    launcher = be.compile(request)
                    if shared:
                        self._shared[(backend, shared)] = launcher
                        self._free_sets.add(flat)
                if warm:
                    warm_start.remember(be, warm, request, launcher)
            if flat:
                self._flat[id(launcher)] = flat
            self._variants[(backend, key)] = launcher
            return launcher

    def warm_key(self, backend: str, key: Tuple) -> Optional[str]:
        """The front-end record's key of a specialization (backends/warm_start.py): the code cache
        key's parts with the source and captures hashed without parsing (dsl/runtime/warm_key.py);
        None where no record is kept (debug builds, kernels whose compile a subclass redefines)."""
        cls = type(self)
        if (cls.request is not Kernel.request or cls.specialize is not Kernel.specialize
                or cls.cache_key is not Kernel.cache_key or self._debug()):
            return None
        text = self.__dict__.get("_source_key")
        if text is None:
            try:
                text = self._source_key = warm_key.source_key(self.fn, self.params)
            except Exception:  # an unreadable source: the front end reports it as it always has
                return None
        h = hashlib.sha256()
        for part in (text, repr(key), self.threads, self._level(), self.fastmath, backend, _environment_tag(),
                     config.interrupt_polling(), self.defines, sorted(self.features)):
            h.update(repr(part).encode())
            h.update(b"\0")
        return h.hexdigest()[:32]

    def request(self, backend: str, key: Tuple, values: List[Any]):
        return self._plan(backend, key, values)[0]

    def _shared_launcher(self, backend: str, key: Tuple):
        """(launcher, flat tensors) of a shared specialization ``key`` falls under, or None.  A
        set of rank-free tensors found for one key holds for every key that differs only in their
        ranks (nothing in the code reads them), so ``key`` with those ranks erased finds it."""
        for free in self._free_sets:
            launcher = self._shared.get((backend, rank_free.shared_key(key, self.params, free)))
            if launcher is not None:
                return launcher, free
        return None

    def _plan(self, backend: str, key: Tuple, values: List[Any]):
        """(compile request, shared key or None, indices of tensors passed flat) of a launch's
        specialization: tensors whose rank the body cannot observe are compiled as 1-D under a key
        without their rank, which every rank of them shares (dsl/runtime/rank_free.py)."""
        from backends import base
        kernel_ir = self.specialize(values)  # at the launch's own ranks: its errors read as always
        free = () if self._debug() else rank_free.free_params(self.params, self.parsed().body, kernel_ir)
        shared = None
        if free:
            shared = rank_free.shared_key(key, self.params, free)
            if any(values[i].ndim != 1 for i in free):
                kernel_ir = self.specialize(rank_free.flatten(values, free))
        return (base.CompileRequest(kernel_ir, self.fn, self.cache_key(backend, shared or key), self._level(),
                                    self.fastmath, self._debug(), config.interrupt_polling(), log_gate=self._gate),
                shared, free)

    def _debug(self) -> bool:
        return config.debug() if self.debug is None else bool(self.debug)

    def cache_key(self, backend: str, key: Tuple) -> str:
        """Hex digest of everything the generated code depends on: the compile cache's ``<key>`` (docs/cache.md)."""
        parsed = self.parsed()
        h = hashlib.sha256()
        for part in (parsed.source, repr(key), self.threads, self._level(), self.fastmath, backend, _environment_tag(),
                     self._debug(), config.interrupt_polling(),
                     _captured_text(parsed)) + ((self.defines, sorted(self.features))
                                                if self.defines or self.features else ()):
            h.update(repr(part).encode())
            h.update(b"\0")
        return h.hexdigest()[:32]

    # ------------------------------------------------------------------ introspection
    def source(self, backend: str = "numba", *args, **kwargs) -> str:
        """Generated code for ``backend`` ('numba', 'opencl', 'interpreter' or 'ir').

        Pass example arguments to pick the specialization; without them TypeVars must be
        unbound-free and unranked tensors are taken as 1-D."""
        __tracebackhide__ = True
        values, key = self.bind(args, kwargs) if (args or kwargs) else self.example_args()
        from backends import base
        try:
            if backend == "ir":
                from dsl.lang import ir
                return ir.dump(self.specialize(values))
            return base.get(backend).source(self.request(backend, key, values))
        except CompileError as e:
            raise e.with_traceback(None) from None

    def example_args(self):
        """(values, key) of a specialization from the annotations alone (for source() and `opdsl compile`)."""
        args = {}
        for p in self.params:
            if p.kind != "tensor":
                continue
            a = p.annotation
            if isinstance(a.dtype, T.TypeVar):
                raise TypeError(f"{self.__name__}.source(): parameter '{p.name}' has dtype {a.dtype!r}; pass example "
                                f"arguments, e.g. {self.__name__}.source('numba', {p.name}=np.zeros(4, np.float32), ...)")
            args[p.name] = np.zeros((1,) * (a.ndim if a.ndim is not None else 1), a.dtype.np)
        for p in self.params:
            if p.kind != "tensor" and p.default is _EMPTY:
                ann = p.annotation.dtype if isinstance(p.annotation, T.ConstSpec) else p.annotation
                if p.kind == "vec":
                    args[p.name] = [0] * p.annotation.length
                elif isinstance(ann, T.DType):
                    args[p.name] = ann.np.type(0) if not ann.is_bool else False
                else:
                    raise TypeError(f"{self.__name__}.source(): pass a value for '{p.name}' ({p.annotation!r})")
        return self.bind((), args)

    def signature(self) -> str:
        parts = []
        for p in self.params:
            s = f"{p.name}: {p.annotation!r}"
            if p.default is not _EMPTY:
                s += f" = {p.default!r}"
            parts.append(s)
        return f"{self.__name__}({', '.join(parts)})"

    def specializations(self, backend: Optional[str] = None) -> List[str]:
        """The specializations compiled (or loaded) in this process for ``backend`` (default: the
        default backend), one line each as ``'x: f32 any rank, y: f32 any rank'``: launches at
        several ranks of tensors the body reads only flat share one (docs/language.md)."""
        backend = backend or config.default_backend()
        shared = {id(v): k for (b, k), v in self._shared.items() if b == backend}
        lines = {}
        for (b, key), launcher in self._variants.items():
            if b == backend and id(launcher) not in lines:
                lines[id(launcher)] = self._describe(shared.get(id(launcher), key))
        return sorted(lines.values())

    def _describe(self, key: Tuple) -> str:
        """'x: f32 1-D, y: f32 1-D, k=3' for a specialization key ('any rank' where it is shared)."""
        tensors = [p.name for p in self.params if p.kind == "tensor"]
        parts = [f"{n}: {dt} {'any rank' if nd == rank_free.ANY_RANK else f'{nd}-D'}"
                 for n, (dt, nd) in zip(tensors, key)]
        parts += [f"{item[1]}={item[2]!r}" for item in key[len(tensors):] if item and item[0] == "const"]
        return ", ".join(parts)

    def __repr__(self) -> str:
        options = "".join(f" {k}={v!r}" for k, v in self.defines) + (
            f" features={{{', '.join(sorted(self.features))}}}" if self.features else "")
        return f"<dsl.kernel {self.signature()} threads={self.threads}{options}>"

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td><code>{html.escape(p.name)}</code></td><td><code>{html.escape(repr(p.annotation))}"
                       f"</code></td><td>{'' if p.default is _EMPTY else html.escape(repr(p.default))}</td></tr>"
                       for p in self.params)
        variants = "".join(f"<li>{html.escape(b)}: {html.escape(self._describe(k))}</li>" for b, k in self._variants)
        opencl = ""
        if "backends.opencl.runtime" in sys.modules:  # OpenCL was used: name its device, or why there is none
            from backends import base
            device = base.get("opencl").device()
            opencl = (f"<div>opencl runs on {html.escape(device)}</div>" if device else
                      f"<div>opencl is unavailable:<pre>{html.escape(base.get('opencl').available())}</pre></div>")
        return (f"<div><b>dsl.kernel</b> <code>{html.escape(self.__name__)}</code> "
                f"(threads={self.threads})<table><tr><th>param</th><th>type</th><th>default</th></tr>{rows}</table>"
                f"<div>compiled variants:</div><ul>{variants or '<li>none yet</li>'}</ul>{opencl}"
                f"<div>see <code>.source('numba' | 'opencl' | 'ir')</code></div></div>")


def kernel(fn: Optional[Callable] = None, *, threads: int = 4, grid: Any = 1, log_level: Optional[str] = None,
           fastmath: bool = False, debug: Optional[bool] = None, log_floor: Optional[str] = None):
    """``@dsl.kernel`` or ``@dsl.kernel(threads=4, grid=1, log_level=None, fastmath=False, debug=None, log_floor=None)``.

    ``grid`` is the teams a call launches when it does not say: an int, ``(gx, gy)`` or
    ``(gx, gy, gz)`` (``dsl.tile_id(axis)``), or a callable of the arguments by name returning one.

    ``fastmath=True`` lets compiled backends reassociate float arithmetic (vectorized
    reductions) and use approximate math functions: faster, not bit-identical.
    ``debug=True`` (default: ``OPDSL_DEBUG``) bounds-checks every access in compiled code: an
    out-of-range index raises IndexError naming the tensor, index, shape and line.
    ``log_level`` is the ``dsl.log`` level: the lowest compiled in and the run-time threshold
    (``kernel.log_level = ...`` changes the latter without recompiling); ``log_floor`` compiles
    lower levels in, for a threshold lowered later (docs/language.md, Logging)."""
    options = dict(threads=threads, grid=grid, log_level=log_level, fastmath=fastmath, debug=debug,
                   log_floor=log_floor)
    if fn is None:
        return lambda f: Kernel(f, **options)
    return Kernel(fn, **options)


# Callables that see every launch (any thread) before it runs, while a plan is recorded
# (dsl/opgraph/recorded_plan.py guards it); empty otherwise, so a launch pays one truth test.
_watchers: tuple = ()
_watchers_lock = threading.Lock()


@contextlib.contextmanager
def watching_launches(watcher: Callable[["Kernel", tuple, dict], None]):
    """Within this block ``watcher(kernel, args, kwargs)`` sees each launch first; raising refuses it."""
    global _watchers
    with _watchers_lock:
        _watchers = _watchers + (watcher,)
    try:
        yield
    finally:
        with _watchers_lock:
            _watchers = tuple(w for w in _watchers if w is not watcher)


def _notify(kernel: "Kernel", args: tuple, kwargs: dict) -> None:
    for watcher in _watchers:
        watcher(kernel, args, kwargs)


# Set by dsl.Model around launches whose output the memory plan put in place of an input
# (the op's ``inplace`` promise): exactly coinciding In and Out memory is then allowed.
_INPLACE_OK: contextvars.ContextVar = contextvars.ContextVar("opdsl_inplace_ok", default=False)


@contextlib.contextmanager
def inplace_launches():
    """Within this block an In and an Out may be the very same memory (not a partial overlap)."""
    token = _INPLACE_OK.set(True)
    try:
        yield
    finally:
        _INPLACE_OK.reset(token)


# ---------------------------------------------------------------------- cache key parts

@functools.lru_cache(maxsize=1)
def _environment_tag() -> str:
    """opdsl, numba, llvmlite, numpy versions and the CPU: compiled code depends on all of them."""
    import platform

    from dsl.version import __version__
    parts = [__version__, np.__version__, platform.machine()]
    try:
        import llvmlite
        import llvmlite.binding as llvm
        import numba
        # the CPU numba compiles for: the host, or NUMBA_CPU_NAME / NUMBA_CPU_FEATURES (OPDSL_CPU)
        name, features = os.environ.get("NUMBA_CPU_NAME"), os.environ.get("NUMBA_CPU_FEATURES")
        parts += [numba.__version__, llvmlite.__version__, name or llvm.get_host_cpu_name(),
                  llvm.get_host_cpu_features().flatten() if features is None else features]
    except Exception:  # pragma: no cover - numba is a hard dependency
        pass
    return "|".join(parts)


def _captured_text(parsed: frontend.Parsed, seen=None) -> str:
    """Values of globals the kernel reads and the sources of the functions it calls, recursively."""
    seen = set() if seen is None else seen
    out = []
    for name, value in sorted(parsed.captured.items(), key=lambda kv: kv[0]):
        if isinstance(value, Func):
            if value in seen:
                continue
            seen.add(value)
            sub = frontend.parse(value.fn, is_kernel=False, log_level=parsed.log_level, tensors=None)
            out.append(f"{name}=func:{sub.source}:{_captured_text(sub, seen)}")
        elif isinstance(value, (int, float, bool, np.generic, T.DType, T.TypeVar)):
            out.append(f"{name}={value!r}")
        else:
            out.append(f"{name}:{type(value).__name__}")
    return ";".join(out)
