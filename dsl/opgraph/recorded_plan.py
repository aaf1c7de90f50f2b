"""``recorded_plan``: an op's launch plan written by its own ``run()``, for ops that declare that
run()'s launches depend on specs, params and constant inputs only.

Conv, MatMul, pooling and many more compute launch geometry, weight packing and views in
helpers shared with their eager call.  Writing that again as a plan would duplicate it, so such
an op says ``plan = recorded_plan``: its run() is called once on stand-in arrays of the
node's shapes (constant inputs as their values, so weights are packed once), with a recorder in
place of the selected kernel, and each recorded launch becomes a ``Launch`` whose array
arguments are mapped back to roles by memory: inside input i or output j -> that Ref's view;
memory a launch writes that is neither -> a Scratch buffer; anything else -> a fixed array
(packed weights, a zero bias).

Only the selected kernel is recorded; other kernels run() launches run now, which is right only
when they read constant inputs (packing weights).  That is checked, not promised: while run() is
recorded every other launch is watched (``dsl.runtime.kernel.watching_launches``), and one whose array
arguments overlap a non-constant input's stand-in or an output's gets no plan (None: the node
calls run() at every run, always correct).  So does an ``impl`` launch on a buffer another
kernel packed from an activation: that packing launch read the stand-in.  Outputs are also
filled with a byte pattern that must survive the recording, so a run() writing an output
itself (numpy, or another kernel) gets no plan.  What stays the op's promise is that run()'s
numpy code reads no non-constant input's values (``recorded_plan_when_constant`` answers None
unless the named inputs are constants) and copies none into a launch argument.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from dsl.opgraph.launch_plan import Launch, Ref, Scratch, owner
from dsl.runtime.cache_lines import address
from dsl.opgraph.op import run_op
from dsl.runtime.kernel import Kernel, watching_launches

_PATTERN = 0xA5  # output stand-ins hold this byte; run() must leave it for the launches to write


class _Recorder:
    """Stands in for the selected kernel while run() is recorded: keeps launches, runs none."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.calls: list = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self(*args, grid=grid, **kwargs)

    def __getattr__(self, name):
        return getattr(self.kernel, name)

    def __eq__(self, other):  # a run() choosing by `impl == some_kernel` sees its kernel
        return other is self or other is self.kernel

    def __hash__(self):
        return hash(self.kernel)


def recorded_plan(op, impl, inputs: List[Optional[Ref]], outputs: List[Optional[Ref]], backend: str):
    """``Op.plan`` for ops whose run() launches depend on specs and constant inputs only."""
    if not isinstance(impl, Kernel):
        return None
    ins = [None if r is None else _stand_in(r) for r in inputs]
    outs = [None if r is None else _patterned(r) for r in outputs]
    rec = _Recorder(impl)
    specs = [None if r is None else r.spec for r in inputs]
    varying = [a for r, a in zip(inputs, ins) if a is not None and a is not getattr(r.spec, "value", None)]
    guard = _Guard(varying + [o for o in outs if o is not None])
    try:
        with watching_launches(guard):
            run_op(op, rec, ins, outs, backend, specs)
    except (_Refused, Exception):
        if guard.refused:  # _Refused, or what run() made of it (never a Ctrl-C)
            return None
        raise
    if guard.refused:  # run() caught _Refused, or the launch ran on another thread
        return None
    if any(o is not None and o.size and _changed(o) for o in outs):
        return None  # run() wrote an output itself (numpy, or a kernel other than impl): run() at every run
    roots = [(r, a) for r, a in zip(list(inputs) + list(outputs), ins + outs) if r is not None and a is not None]
    writes = written_owners((impl, args, kwargs) for args, kwargs in rec.calls)
    scratch: dict = {}
    launches = []
    for args, kwargs in rec.calls:
        kwargs = dict(kwargs)
        grid = kwargs.pop("grid", None)
        run_backend = kwargs.pop("backend", None)
        mapped = tuple(plan_value(a, roots, writes, scratch) for a in args)
        launches.append(Launch(impl, mapped, {k: plan_value(v, roots, writes, scratch) for k, v in kwargs.items()},
                               grid, run_backend))
    return launches


class _Refused(BaseException):
    """Raised into run() at a launch that would make the recording wrong (not an Exception: a
    run() catching errors to try another path must not swallow it)."""


class _Guard:
    """Watches run()'s launches of kernels other than the recorded one: refuses any whose array
    arguments overlap ``watched`` memory (non-constant inputs' and outputs' stand-ins)."""

    def __init__(self, watched):
        self.watched = [a for a in watched if a.size]
        self.refused = False

    def __call__(self, kernel, args, kwargs):
        for v in list(args) + list(kwargs.values()):
            if any(np.may_share_memory(a, w) for a in _arrays(v) for w in self.watched):
                self.refused = True
                raise _Refused(kernel)


def _arrays(v):
    if isinstance(v, np.ndarray):
        yield v
    elif type(v) in (tuple, list):
        for x in v:
            yield from _arrays(x)


recorded_plan.follows_run = True  # describes whatever run() the class has (launch_plan.plan_of)


def recorded_plan_when_constant(*positions: int):
    """A ``plan`` recording run() when the inputs at ``positions`` are constants or absent (run()
    reads their values: packs weights, broadcasts a scale), else None (run() at every run)."""
    def plan(op, impl, inputs, outputs, backend):
        for i in positions:
            r = inputs[i] if i < len(inputs) else None
            if r is not None and (r.spec is None or r.spec.value is None):
                return None
        return recorded_plan(op, impl, inputs, outputs, backend)
    plan.follows_run = True
    return plan


def _stand_in(ref: Ref) -> np.ndarray:
    """A constant input's own value (read-only: run() may pack it once), else zeros, laid out
    as the buffer the plan will bind."""
    v = None if ref.spec is None else ref.spec.value
    shape, dtype, strides = ref.root
    if isinstance(v, np.ndarray) and v.shape == shape and v.dtype == dtype and strides is None and (
            v.flags.c_contiguous):
        return v
    return _laid_out(ref.root, 0)


def _patterned(ref: Ref) -> np.ndarray:
    return _laid_out(ref.root, _PATTERN)


def _laid_out(root, fill: int) -> np.ndarray:
    """An array of ``root``'s shape, dtype and strides, every byte it spans set to ``fill``."""
    shape, dtype, strides = root
    if strides is None:
        a = np.empty(shape, dtype)
        a.reshape(-1).view(np.uint8).fill(fill)  # a 0-d array cannot change its itemsize: flatten first
        return a
    extent = dtype.itemsize + sum((d - 1) * abs(s) for d, s in zip(shape, strides)) if all(shape) else 0
    low = sum((d - 1) * s for d, s in zip(shape, strides) if s < 0) if all(shape) else 0
    buf = np.full(max(extent, 1), fill, np.uint8)
    return np.ndarray(shape, dtype, buffer=buf, offset=-low, strides=strides)


def _changed(a: np.ndarray) -> bool:
    """Whether some byte of ``a`` lost the pattern."""
    b = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    return bool(np.any(b != _PATTERN))


def written_owners(calls) -> set:
    """ids of the arrays owning memory some launch ``(kernel, args, kwargs)`` in ``calls`` binds
    to an Out/InOut parameter."""
    found = set()
    for kernel, args, kwargs in calls:
        writable = {p.name for p in kernel.params if p.kind == "tensor" and getattr(p.annotation, "writable", False)}
        for name, v in list(zip([p.name for p in kernel.params], args)) + list(kwargs.items()):
            if name in writable and isinstance(v, np.ndarray):
                found.add(id(owner(v)))
    return found


def plan_value(v, roots, writes: set, scratch: dict, keep_contents: bool = True):
    """A recorded argument as a plan value: a Ref view of a root, a Scratch view, or itself.
    A buffer some launch writes (``writes``, from ``written_owners``) becomes a Scratch: each plan
    instance gets its own, starting with what run() put there when ``keep_contents`` (packed
    weights a kernel reads through an InOut parameter), else zero-filled."""
    if type(v) in (tuple, list):
        return type(v)(plan_value(x, roots, writes, scratch, keep_contents) for x in v)
    if not isinstance(v, np.ndarray):
        return v
    p = address(v)
    base = owner(v)
    for ref, root in roots:
        if owner(root) is base:
            return ref.strided(p - address(root), v.shape, v.strides, v.dtype)
    if id(base) in writes:
        k, ref = scratch.get(id(base), (None, None))
        if ref is None:
            flat = base.reshape(-1).view(np.uint8) if keep_contents and base.flags.c_contiguous else None
            init = None if flat is None or not flat.any() else flat.copy()
            k, ref = scratch[id(base)] = (len(scratch), Scratch(len(scratch), (base.nbytes,), np.uint8, init))
        return ref.strided(p - address(base), v.shape, v.strides, v.dtype)
    return v
