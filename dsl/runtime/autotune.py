"""``@dsl.autotune``: run a kernel with whichever of several ``dsl.const`` settings is fastest
for the arguments at hand.

A config binds ``dsl.const`` parameters by name (and may set the launch ``grid``).  The first
time a (backend, key values) pair is seen, each config is compiled, run once to warm up and
timed on copies of the Out/InOut arrays; the winner is remembered in memory and on disk
(tuning_cache.py), and the user's arrays see exactly one launch, of the winner.
``OPDSL_AUTOTUNE=0`` skips the timing and uses the first config.

``threads`` cannot be tuned: it is fixed per ``@dsl.kernel(threads=...)`` and part of the
compiled code, not a launch option (see docs/language.md, "Autotuning").
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import re
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from dsl import config
from dsl.lang import types as T
from dsl.runtime import pickling, tuning_cache
from dsl.runtime.kernel import Kernel
from dsl.version import __version__

log = logging.getLogger(__name__)

LAUNCH_OPTIONS = ("grid",)  # what a config may set besides dsl.const parameters
TIMED_RUNS = 3


def measure(run: Callable[[], None], config_: Dict[str, Any], reps: int) -> float:
    """Seconds one launch of ``config_`` takes: the best of ``reps`` timed runs (the warm-up that
    compiled it is done).  A module function so that tests can decide which config wins."""
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


class Autotuner:
    """A kernel plus its configs; call it like the kernel (``tuned(x, y, n=...)``)."""

    def __init__(self, kernel: Kernel, configs: Sequence[Dict[str, Any]], key: Sequence[str] = (),
                 reps: int = TIMED_RUNS):
        if not isinstance(kernel, Kernel):
            raise TypeError(f"@dsl.autotune got {kernel!r}; stack it above @dsl.kernel:\n"
                            "    @dsl.autotune(configs=[...], key=[...])\n    @dsl.kernel\n    def k(...): ...")
        if not isinstance(reps, int) or reps < 1:
            raise ValueError(f"@dsl.autotune(reps={reps!r}): reps must be a positive int")
        self.kernel = kernel
        functools.update_wrapper(self, kernel.fn)
        self.configs: List[Dict[str, Any]] = _checked_configs(kernel, configs)
        self.key: List[str] = list(_checked_key(key))
        self.reps = reps
        self._tuned_names = sorted({n for c in self.configs for n in c if n not in LAUNCH_OPTIONS})
        self._grid_tuned = any("grid" in c for c in self.configs)
        self._readers = [_key_reader(kernel, entry, self._tuned_names) for entry in self.key]
        self._params = [p.name for p in kernel.params]
        self._defaults = {p.name: p.default for p in kernel.params if p.default is not inspect.Parameter.empty}
        self._winners: Dict[Tuple[str, Tuple], int] = {}  # (backend, key values) -> config index
        self._lock = threading.RLock()

    def __reduce__(self):
        """The kernel and configs; winners are found again (or read from disk) where it lands."""
        by_value = (type(self), (self.kernel, pickling.portable(self.configs), self.key, self.reps))
        ref = pickling.by_reference(self)
        return pickling.with_fallback(ref, *by_value) if ref else by_value

    def __copy__(self) -> "Autotuner":
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo) -> "Autotuner":
        return self

    # ------------------------------------------------------------------ launching
    def __call__(self, *args, backend: Optional[str] = None, grid: Any = None, **kwargs) -> None:
        __tracebackhide__ = True
        backend = backend or config.default_backend()
        best = self.configs[self._choose(backend, args, kwargs, grid)]
        self.kernel(*args, backend=backend, grid=best.get("grid", grid), **kwargs, **_consts(best))

    def __getitem__(self, grid) -> Callable:
        """``tuned[grid](args...)``, as for a kernel."""
        return functools.partial(self.__call__, grid=grid)

    def best_config(self, *args, backend: Optional[str] = None, grid: Any = None, **kwargs) -> Dict[str, Any]:
        """The config used for these arguments (a copy).  Tunes first if needed, on copies of the
        Out/InOut arrays: the arguments are never written."""
        __tracebackhide__ = True
        backend = backend or config.default_backend()
        return dict(self.configs[self._choose(backend, args, kwargs, grid)])

    def source(self, backend: str = "numba", *args, **kwargs) -> str:
        """Generated code: with example arguments, of the config they would run (tuning if needed);
        without, the kernel's own ``source(backend)``."""
        if not (args or kwargs):
            return self.kernel.source(backend)
        best = self.best_config(*args, backend=None if backend == "ir" else backend, **kwargs)
        return self.kernel.source(backend, *args, **kwargs, **_consts(best))

    def signature(self) -> str:
        return self.kernel.signature()

    def __repr__(self) -> str:
        return f"<dsl.autotune of {self.kernel.signature()}: {len(self.configs)} configs, key={self.key}>"

    # ------------------------------------------------------------------ choosing
    def _choose(self, backend: str, args: tuple, kwargs: dict, grid: Any) -> int:
        """The index of the config for this call: remembered, read from disk, or timed now."""
        __tracebackhide__ = True
        self._check_call(kwargs, grid)
        values = self._key_values(args, kwargs)
        if not config.autotune():  # asked per call: turning it off wins over winners already found
            return 0
        found = self._winners.get((backend, values))
        if found is not None:
            return found
        with self._lock:
            found = self._winners.get((backend, values))
            if found is None:
                found = self._tune(backend, values, args, kwargs, grid)
                self._winners[(backend, values)] = found
            return found

    def _check_call(self, kwargs: dict, grid: Any) -> None:
        set_here = [n for n in self._tuned_names if n in kwargs]
        if set_here:
            raise TypeError(f"{self.__name__}(): {', '.join(map(repr, set_here))} is chosen by @dsl.autotune from "
                            f"its configs; do not pass it (or remove it from the configs)")
        if grid is not None and self._grid_tuned:
            raise TypeError(f"{self.__name__}(): grid is chosen by @dsl.autotune (a config sets it); do not pass "
                            "grid= (or remove grid from the configs)")

    def _key_values(self, args: tuple, kwargs: dict) -> Tuple:
        """The key entries' values for this call; a wrong call gets the kernel's own error."""
        __tracebackhide__ = True
        if not self._readers:
            return ()
        named = dict(self._defaults)
        named.update(zip(self._params, args))
        named.update(kwargs)
        try:
            return tuple(read(named) for read in self._readers)
        except (KeyError, AttributeError, TypeError):
            # a missing or wrongly typed argument: the kernel's own check explains it
            self.kernel.bind(args, {**kwargs, **_consts(self.configs[0])})
            raise

    def _tune(self, backend: str, values: Tuple, args: tuple, kwargs: dict, grid: Any) -> int:
        if len(self.configs) == 1:
            return 0
        folder = _cache_folder(backend)
        rec = tuning_cache.record(folder, self._identity(backend, values), len(self.configs)) if folder else None
        best = tuning_cache.load(rec)
        if best is not None:
            log.debug("%s on %s, key %s: config %s from %s", self.__name__, backend, values, self.configs[best],
                      rec.path)
            return best
        # the caller's own arrays pass every launch check (overlap included) before copies are timed
        self.kernel.prepare(args, {**kwargs, **_consts(self.configs[0])}, backend=backend,
                            grid=self.configs[0].get("grid", grid))
        seconds = [self._time(backend, c, args, kwargs, grid) for c in self.configs]
        best = min(range(len(seconds)), key=seconds.__getitem__)
        log.debug("%s on %s, key %s: config %s wins", self.__name__, backend, values, self.configs[best])
        tuning_cache.store(rec, best, seconds)
        return best

    def _time(self, backend: str, config_: Dict[str, Any], args: tuple, kwargs: dict, grid: Any) -> float:
        """Compile and warm up ``config_`` on copies of the writable arrays, then time it."""
        args, kwargs = _copy_writable(self.kernel, args, kwargs)
        try:
            launcher, bound, teams = self.kernel.prepare(args, {**kwargs, **_consts(config_)}, backend=backend,
                                                         grid=config_.get("grid", grid))

            def run() -> None:
                if teams:
                    launcher(bound, teams)
            run()
            seconds = measure(run, config_, self.reps)
        except Exception as e:
            if hasattr(e, "add_note"):
                e.add_note(f"(while @dsl.autotune timed {self.__name__} with config {config_})")
            raise
        log.debug("%s on %s: config %s took %.3g ms", self.__name__, backend, config_, seconds * 1e3)
        return seconds

    def _identity(self, backend: str, values: Tuple) -> Dict[str, Any]:
        """Everything a stored winner depends on: the kernel's code and options, the backend and
        its hardware, the configs and the key values."""
        from dsl.runtime.target import target
        k = self.kernel
        t = target(backend)
        source = hashlib.sha256(k.parsed().source.encode()).hexdigest()[:16]
        return {"kernel": f"{k.fn.__module__}.{k.fn.__qualname__}", "source": source, "threads": k.threads,
                "fastmath": k.fastmath, "debug": k._debug(), "opdsl": __version__, "backend": backend,
                "target": f"{t.device} | cpu {t.cpu or '-'} | {t.compute_units} units",
                "target_features": hashlib.sha256(",".join(sorted(t.features)).encode()).hexdigest()[:16],
                "configs": [_describe(c) for c in self.configs], "key": dict(zip(self.key, values)),
                **({"defines": repr(k.defines), "features": sorted(k.features)}  # Kernel.variant
                   if k.defines or k.features else {})}


def autotune(configs: Sequence[Dict[str, Any]], key: Sequence[str] = (), reps: int = TIMED_RUNS):
    """``@dsl.autotune(configs=[{"BM": 4}, {"BM": 8}], key=["x.size"])`` above ``@dsl.kernel``.

    Each config binds ``dsl.const`` parameters by name and may set ``grid``; ``key`` names what
    makes a new tuning necessary: a scalar parameter, or ``x.shape``, ``x.shape[i]``, ``x.size``,
    ``x.dtype``, ``x.ndim`` of a tensor parameter ``x``.  ``reps`` timed runs follow one warm-up."""
    checked = _checked_config_list(configs)
    keys = _checked_key(key)
    return lambda kernel: Autotuner(kernel, checked, keys, reps)


# ---------------------------------------------------------------------- checks at decoration

def _checked_config_list(configs) -> List[Dict[str, Any]]:
    if isinstance(configs, dict) or not isinstance(configs, (list, tuple)) or not configs:
        raise TypeError(f"@dsl.autotune(configs={configs!r}): configs must be a non-empty list of dicts, e.g. "
                        "[{'BM': 4}, {'BM': 8}]")
    for c in configs:
        if not isinstance(c, dict) or not all(isinstance(n, str) for n in c):
            raise TypeError(f"@dsl.autotune: config {c!r} must be a dict from parameter names to values")
    return [dict(c) for c in configs]


def _checked_key(key) -> Tuple[str, ...]:
    if isinstance(key, str) or not isinstance(key, (list, tuple)) or not all(isinstance(k, str) for k in key):
        raise TypeError(f"@dsl.autotune(key={key!r}): key must be a list of strings, e.g. ['x.size', 'n']")
    return tuple(key)


def _checked_configs(kernel: Kernel, configs) -> List[Dict[str, Any]]:
    configs = _checked_config_list(configs)
    consts = [p.name for p in kernel.params if isinstance(p.annotation, T.ConstSpec)]
    accepted = (f"its dsl.const parameters ({', '.join(consts)})" if consts else "no dsl.const parameters (it has none)")
    for c in configs:
        for name, value in c.items():
            if name == "threads":
                raise ValueError(f"@dsl.autotune of {kernel.__name__}: config {c!r} sets 'threads', which is fixed "
                                 f"per kernel (@dsl.kernel(threads={kernel.threads})) and not a launch option; "
                                 f"configs accept {accepted} and the launch option grid")
            if name == "grid":
                if not (callable(value) or (isinstance(value, (int, np.integer)) and not isinstance(value, bool)
                                            and value >= 0)):
                    raise ValueError(f"@dsl.autotune of {kernel.__name__}: config {c!r}: grid must be a "
                                     f"non-negative int or a callable, got {value!r}")
            elif name not in consts:
                raise ValueError(f"@dsl.autotune of {kernel.__name__}: config {c!r} names {name!r}, which is not "
                                 f"a dsl.const parameter of {kernel.signature()}; configs accept {accepted} and "
                                 "the launch option grid")
    names = [sorted(n for n in c if n not in LAUNCH_OPTIONS) for c in configs]
    for c, n in zip(configs, names):
        if n != names[0]:
            raise ValueError(f"@dsl.autotune of {kernel.__name__}: every config must set the same dsl.const "
                             f"parameters; {configs[0]!r} sets {names[0]} but {c!r} sets {n}")
    return configs


_KEY_PATTERN = re.compile(r"^([A-Za-z_]\w*)(?:\.(shape|size|dtype|ndim)(?:\[(-?\d+)\])?)?$")


def _key_reader(kernel: Kernel, entry: str, tuned: List[str]) -> Callable[[Dict[str, Any]], Any]:
    """A function of the named arguments giving ``entry``'s value, as plain JSON-able data."""
    tensors = [p.name for p in kernel.params if p.kind == "tensor"]
    scalars = [p.name for p in kernel.params if p.kind != "tensor" and p.name not in tuned]
    accepted = ("accepted: a scalar parameter's name" + (f" ({', '.join(scalars)})" if scalars else "")
                + ", or x.shape, x.shape[i], x.size, x.dtype, x.ndim of a tensor parameter x"
                + (f" ({', '.join(tensors)})" if tensors else ""))
    m = _KEY_PATTERN.match(entry)
    name, fact, index = m.groups() if m else (None, None, None)
    bad = (m is None or (fact is None and name not in scalars) or (fact is not None and name not in tensors)
           or (index is not None and fact != "shape"))
    if bad:
        why = (f"{name!r} is chosen by the configs" if name in tuned else
               f"{name!r} is a tensor" if fact is None and name in tensors else "")
        raise ValueError(f"@dsl.autotune of {kernel.__name__}: bad key entry {entry!r}"
                         f"{' (' + why + ')' if why else ''}; {accepted}")
    if fact is None:
        return lambda named: _plain(named[name])
    if index is not None:
        k = int(index)

        def shape_at(named):
            shape = named[name].shape
            if not -len(shape) <= k < len(shape):
                raise ValueError(f"{kernel.__name__}(): @dsl.autotune key {entry!r}: '{name}' has "
                                 f"{len(shape)} dimension(s)")
            return int(shape[k])
        return shape_at
    if fact == "dtype":
        return lambda named: str(named[name].dtype)
    if fact == "shape":
        return lambda named: tuple(int(n) for n in named[name].shape)
    return lambda named: int(getattr(named[name], fact))


def _plain(v: Any) -> Any:
    """A scalar or Vec argument as hashable, JSON-able Python data."""
    if isinstance(v, np.ndarray):
        return tuple(x.item() for x in v.ravel()) if v.ndim else v.item()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return tuple(_plain(x) for x in v)
    return v


# ---------------------------------------------------------------------- helpers

def _consts(config_: Dict[str, Any]) -> Dict[str, Any]:
    return {n: v for n, v in config_.items() if n not in LAUNCH_OPTIONS}


def _describe(config_: Dict[str, Any]) -> Dict[str, Any]:
    """A config as JSON-able text: a callable grid by its qualified name."""
    return {n: (f"<callable {getattr(v, '__qualname__', type(v).__name__)}>" if callable(v) else _plain(v))
            for n, v in sorted(config_.items())}


def _cache_folder(backend: str) -> str:
    from backends import base
    return base.get(backend).cache_tag


def _copy_writable(kernel: Kernel, args: tuple, kwargs: dict) -> Tuple[tuple, dict]:
    """The same arguments with every Out/InOut array replaced by a copy, so timing runs never
    write the caller's arrays (anything else is passed on for the kernel to check)."""
    writable = {p.name for p in kernel.params if p.kind == "tensor" and p.annotation.writable}

    def copied(name: str, v: Any) -> Any:
        return v.copy() if name in writable and isinstance(v, np.ndarray) else v
    names = [p.name for p in kernel.params]
    args = tuple(copied(n, v) for n, v in zip(names, args)) + tuple(args[len(names):])
    return args, {n: copied(n, v) for n, v in kwargs.items()}
