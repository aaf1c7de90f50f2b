"""Launch plans: the kernel launches an op makes for given input and output specs, as data.

A compiled model (model.py) turns every node into launches bound once (argument checks and
specialization done ahead, values frozen), so a run is a flat list of compiled calls.  It learns
a node's launches from ``op.plan(impl, inputs, outputs, backend)`` (docs/ops.md "Launch plans"),
which answers with a list of ``Launch`` or None.  Its ``inputs``/``outputs`` are ``Ref``s: they
name a tensor by its role (input i, output j), never by its memory, and carry its spec, shape and
dtype, so a plan depends on specs and op params only, and the same plan binds any buffers of
those shapes (each instance of a model's plan pool, each tile of a tiled node).  Arguments of a
launch are Refs (or views of them: ``reshape``, indexing, ``view(dtype)``), ``Scratch`` buffers
the launches share, scalars, or arrays fixed when planning (packed constant weights).

None means "call ``run()`` at every model run": ops whose launches depend on input *values*
(a scalar read from an input, a range check of indices) answer None, as does the default for an
op that overrides ``run`` without declaring ``plan``.  Ops that keep the default ``run`` (one
launch of the selected kernel on the inputs then the outputs) need nothing: ``default_plan``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from dsl.opgraph.spec import VerifyError, describe
from dsl.runtime.cache_lines import address, line_aligned
from dsl.runtime.kernel import Kernel


class Ref:
    """One tensor of a node by role -- ``kind`` "in", "out" or "scratch" and ``index`` -- and the
    view a launch takes of it (``views``: steps applied in order to the bound buffer)."""

    __slots__ = ("kind", "index", "spec", "shape", "dtype", "views", "root", "init")

    def __init__(self, kind: str, index: int, shape: Tuple[int, ...], dtype, spec=None, views: tuple = (),
                 root=None, init=None):
        self.kind, self.index, self.spec = kind, int(index), spec
        self.shape, self.dtype, self.views = tuple(int(d) for d in shape), np.dtype(dtype), views
        # the bound buffer's (shape, dtype, byte strides or None when C-contiguous)
        self.root = (self.shape, self.dtype, None) if root is None else root
        self.init = init  # a scratch buffer's first contents (bytes of its root), None: zeros

    # array-like facts a plan computes launch arguments from
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def _derived(self, step, shape, dtype) -> "Ref":
        return Ref(self.kind, self.index, shape, dtype, self.spec, self.views + (step,), self.root, self.init)

    def reshape(self, *shape) -> "Ref":
        """The same memory as ``shape`` (one -1 allowed); binding fails if numpy would copy."""
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return self._derived(("reshape", tuple(int(d) for d in shape)), _probe(self).reshape(shape).shape, self.dtype)

    def __getitem__(self, key) -> "Ref":
        return self._derived(("index", key), _probe(self)[key].shape, self.dtype)

    def view(self, dtype) -> "Ref":
        """The same bytes read as ``dtype`` (an f16 tensor as uint16)."""
        dtype = np.dtype(dtype)
        return self._derived(("view", dtype), _probe(self).view(dtype).shape, dtype)

    def strided(self, offset: int, shape, strides, dtype) -> "Ref":
        """An explicit view: ``offset`` bytes in, ``shape`` and byte ``strides`` of ``dtype``."""
        return self._derived(("strided", int(offset), tuple(shape), tuple(strides), np.dtype(dtype)),
                             tuple(shape), dtype)

    def bind(self, root: np.ndarray) -> np.ndarray:
        """This view of ``root``, the buffer bound to this role; never a copy."""
        a = root
        for step in self.views:
            op = step[0]
            if op == "reshape":
                b = a.reshape(step[1])
                if b.size and not np.may_share_memory(a, b):
                    raise VerifyError(f"{self}: reshaping a {a.shape} view with strides {a.strides} to {step[1]} "
                                      f"would copy; a launch argument must be a view of the bound buffer")
                a = b
            elif op == "index":
                a = a[step[1]]
            elif op == "view":
                a = a.view(step[1])
            else:
                _, offset, shape, strides, dt = step
                if offset == 0 and shape == a.shape and strides == a.strides and dt == a.dtype:
                    continue
                base = owner(a)
                if not base.flags.c_contiguous:
                    raise VerifyError(f"{self}: the bound buffer's memory is not one contiguous allocation")
                start = address(a) - address(base)
                v = np.ndarray(shape, dt, buffer=base.reshape(-1).view(np.uint8), offset=start + offset,
                               strides=strides)
                if not a.flags.writeable:
                    v.flags.writeable = False
                a = v
        return a

    def __repr__(self) -> str:
        base = {"in": "input", "out": "output", "scratch": "scratch"}[self.kind]
        views = "".join(f".{s[0]}({s[1]!r})" if s[0] != "strided" else f".strided({s[1]}, {s[2]})"
                        for s in self.views)
        return f"<{base} {self.index} {self.dtype}{list(self.shape)}{views}>"

    def __reduce__(self):
        return (Ref, (self.kind, self.index, self.shape, self.dtype, None, self.views, self.root, self.init))


def _probe(ref: Ref) -> np.ndarray:
    """A zero-byte stand-in with ``ref``'s shape: numpy computes the shapes of views of it."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, ref.dtype), ref.shape, (0,) * len(ref.shape),
                                           writeable=False)


def Scratch(index: int, shape, dtype, init: Optional[np.ndarray] = None) -> Ref:
    """A buffer the node's launches write and read; each model plan instance has its own, holding
    ``init`` (an array of that shape and dtype) or zeros when made."""
    if init is not None:
        init = np.ascontiguousarray(init, dtype).reshape(shape).view(np.uint8).reshape(-1)
    return Ref("scratch", index, shape, dtype, init=init)


@dataclass
class Launch:
    """One launch: ``kernel(*args, grid=grid, backend=backend, **kwargs)``.  ``args``/``kwargs``
    hold Refs, scalars, None or fixed arrays; ``backend`` None is the model's backend."""

    kernel: Any
    args: tuple
    kwargs: Dict[str, Any] = field(default_factory=dict)
    grid: Any = None
    backend: Optional[str] = None


def refs(specs: Sequence, kind: str, arrays: Sequence) -> List[Optional[Ref]]:
    """Refs for a node's input (``kind`` "in") or output ("out") specs and the buffers they will
    bind (their physical shape, dtype and strides: NCHWc16, a tile's slice); None stays None."""
    out = []
    for i, (s, a) in enumerate(zip(specs, arrays)):
        if s is None or a is None:
            out.append(None)
            continue
        strides = None if a.flags.c_contiguous else tuple(a.strides)
        out.append(Ref(kind, i, a.shape, a.dtype, s, root=(tuple(a.shape), a.dtype, strides)))
    return out


def plan_key(ins: Sequence[Optional[Ref]], outs: Sequence[Optional[Ref]]) -> tuple:
    """What a node's plan depends on besides the op and kernel: its buffers' layouts and specs."""
    return tuple(None if r is None else (r.root[0], r.root[1].str, r.root[2]) + _spec_key(r.spec)
                 for r in list(ins) + list(outs))


def _spec_key(s) -> tuple:
    """A spec's part of a plan key: logical shape, dtype, format, quantization (never its value)."""
    return () if s is None else (tuple(s.shape), str(s.dtype), s.format, s.quant)


def default_plan(op, impl, inputs, outputs, backend: str) -> Optional[List[Launch]]:
    """``Op.run``'s one launch of a dsl.kernel, as a plan; None for plain-callable kernels."""
    if not isinstance(impl, Kernel):
        return None
    kw = op.kernel_kwargs(impl, backend)
    run_backend = kw.pop("backend", None)
    return [Launch(impl, tuple(inputs) + tuple(outputs), kw, None, run_backend)]


def plan_of(op, impl, inputs, outputs, backend: str, where: str) -> Optional[List[Launch]]:
    """``op.plan(...)`` checked: a list of Launch of dsl.kernels whose Refs exist, or None."""
    if not type(op).replay or not _plan_follows_run(type(op)):
        return None
    got = op.plan(impl, list(inputs), list(outputs), backend)
    if got is None:
        return None
    accepted = "accepted: a list of dsl.opgraph.launch_plan.Launch, or None to call run() at every run"
    if not isinstance(got, (list, tuple)) or not all(isinstance(x, Launch) for x in got):
        raise VerifyError(f"{where}: {describe(op)}.plan returned {got!r}; {accepted}")
    counts = {"in": len(inputs), "out": len(outputs)}
    for k, launch in enumerate(got):
        if not isinstance(launch.kernel, Kernel):
            raise VerifyError(f"{where}: {describe(op)}.plan launch {k} runs {launch.kernel!r}, not a dsl.kernel; "
                              f"a plain callable cannot be bound ahead (return None to call run())")
        for v in list(launch.args) + list(launch.kwargs.values()):
            for r in _refs_in(v):
                if r.kind in counts and not 0 <= r.index < counts[r.kind] or (
                        r.kind == "in" and inputs[r.index] is None):
                    raise VerifyError(f"{where}: {describe(op)}.plan launch {k} uses {r!r}, but the node has "
                                      f"{counts['in']} inputs and {counts['out']} outputs"
                                      + (" (that input is absent)" if r.kind == "in" and r.index < counts['in']
                                         else ""))
    return list(got)


def _plan_follows_run(cls) -> bool:
    """Whether ``cls.plan`` describes ``cls.run``: defined by the class that defines run (or one
    below it), or a plan that records whatever run() is (recorded_plan).  A subclass overriding
    only run() must not inherit its parent's declared launches."""
    run_owner = next(k for k in cls.__mro__ if "run" in k.__dict__)
    plan_owner = next(k for k in cls.__mro__ if "plan" in k.__dict__)
    plan = plan_owner.__dict__["plan"]
    return bool(getattr(plan, "follows_run", False)) or issubclass(plan_owner, run_owner)


def _refs_in(v):
    if isinstance(v, Ref):
        yield v
    elif type(v) in (tuple, list):
        for x in v:
            yield from _refs_in(x)


class ScratchPool:
    """Scratch buffers of one model plan instance, per owner (a node, or one tile of it: tiles
    may run at once).  Zero-filled when made, as a run() allocating ``np.zeros`` would see them,
    and starting on a 64-byte cache line: numpy starts large arrays 16 bytes past one, and a
    packed GEMM panel whose vectors straddle two lines runs 1024³ ~7 % slower."""

    def __init__(self):
        self._bufs: Dict[tuple, np.ndarray] = {}

    def get(self, index: int, root, owner, init=None) -> np.ndarray:
        shape, dtype = root[0], root[1]
        key = (owner, index, shape, dtype.str)
        buf = self._bufs.get(key)
        if buf is None:
            buf = self._bufs[key] = line_aligned(shape, dtype, zero=True)
            if init is not None:
                buf.reshape(-1).view(np.uint8)[:] = init
        return buf


def bind_plan(launches: Sequence[Launch], ins: Sequence, outs: Sequence, scratch: ScratchPool,
              owner=None) -> List[Tuple[Any, tuple, dict, Optional[str]]]:
    """Each launch as (kernel, args, kwargs with grid, backend) on these buffers; ``owner`` keys
    the node's scratch (a tile index, or None for the node as a whole)."""
    local: Dict[int, np.ndarray] = {}

    def value(v):
        if isinstance(v, Ref):
            if v.kind == "in":
                root = ins[v.index]
            elif v.kind == "out":
                root = outs[v.index]
                if root is None:
                    raise VerifyError(f"{v!r}: that output is not written (nothing reads it)")
            else:
                root = local.get(v.index)
                if root is None:
                    root = local[v.index] = scratch.get(v.index, v.root, owner, v.init)
            return v.bind(root)
        if type(v) in (tuple, list):
            return type(v)(value(x) for x in v)
        return v

    bound = []
    for launch in launches:
        kwargs = {k: value(v) for k, v in launch.kwargs.items()}
        if launch.grid is not None:
            kwargs["grid"] = launch.grid
        bound.append((launch.kernel, tuple(value(a) for a in launch.args), kwargs, launch.backend))
    return bound


def owner(a: np.ndarray) -> np.ndarray:
    """The array owning ``a``'s memory, through every level of views."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a
