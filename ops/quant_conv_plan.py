"""Declared launch plans for the packed 2-D QLinearConv and ConvInteger (docs/ops.md "Launch plans").

The packed paths (ops/conv_int8.py) launch two to four kernels per call: one or two that repack
the image x (NCHW4c words, space-to-depth, im2col panels, a zero-point border), then the
convolution or GEMM that reads the repacked copy.  ``dsl.recorded_plan`` records only the selected
kernel and refuses a packing launch on an activation, so those nodes called ``run()`` at every model
run.  Here the op's own ``run()`` is called once on stand-ins with a ``LaunchLog`` in place of every
launch (none runs), and each logged launch becomes a ``dsl.Launch``: arrays inside input i or output
j become that Ref's view, memory some launch writes (the repacked image, the GEMM's panels) becomes
a ``dsl.Scratch`` buffer of each plan instance, and anything else (packed constant weights, the
multipliers) stays a fixed array.  run() reads the scales, zero points, weights and bias in numpy,
so a plan is only made when they are constants; x must be C-contiguous (run() would otherwise hand
the packing a numpy copy of it).  The portable kernel keeps ``dsl.recorded_plan``.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

import dsl
from dsl.opgraph.launch_plan import owner
from dsl.opgraph.recorded_plan import plan_value, written_owners
from ops.gemm_int8 import qgemm_packed
from ops.gemm_int8_amx import qgemm_amx


class LaunchLog:
    """Stands in for every kernel run() launches: ``log(kernel)(*args, **kwargs)`` keeps the launch."""

    def __init__(self):
        self.calls: list = []

    def __call__(self, kernel):
        def keep(*args, **kwargs):
            self.calls.append((kernel, args, kwargs))
        return keep


def packed_or_recorded_plan(recorded: Sequence[int], packed: Sequence[int]):
    """An ``Op.plan``: the declared packed launches when the selected kernel is a packed GEMM (dot4 or tiles) and
    the inputs at ``packed`` are constants (or absent), else ``dsl.recorded_plan_when_constant``
    of ``recorded``."""
    fallback = dsl.recorded_plan_when_constant(*recorded)

    def plan(op, impl, inputs, outputs, backend):
        if impl != qgemm_packed and impl != qgemm_amx:
            return fallback(op, impl, inputs, outputs, backend)
        return packed_conv_plan(op, impl, inputs, outputs, backend, packed)
    return plan


def packed_conv_plan(op, impl, inputs, outputs, backend: str, constants: Sequence[int]) -> Optional[List]:
    """The launches of ``op.run`` on the packed path as ``dsl.Launch``es, or None (run() at every
    run) when an input at ``constants`` is not a constant or x is not C-contiguous."""
    for i in constants:
        r = inputs[i] if i < len(inputs) else None
        if r is not None and (r.spec is None or _constant(r) is None):
            return None
    x = inputs[0]
    if x is None or x.root[2] is not None or any(o is not None and o.root[2] is not None for o in outputs):
        return None
    ins = [None if r is None else (_constant(r) if _constant(r) is not None else np.zeros(r.shape, r.dtype))
           for r in inputs]
    outs = [None if r is None else np.empty(r.shape, r.dtype) for r in outputs]
    log = LaunchLog()
    op.run(impl, ins, outs, backend, launch=log)
    roots = [(r, a) for r, a in zip(list(inputs) + list(outputs), ins + outs) if r is not None and _varies(r)]
    written = written_owners(log.calls)
    if not all(id(owner(o)) in written for o in outs if o is not None):
        return None  # run() wrote an output itself: no plan
    scratch: dict = {}
    launches = []
    for kernel, args, kwargs in log.calls:
        kwargs = dict(kwargs)
        grid = kwargs.pop("grid", None)
        run_backend = kwargs.pop("backend", None)
        launches.append(dsl.Launch(kernel, tuple(plan_value(a, roots, written, scratch, keep_contents=False) for a in args),
                                   {k: plan_value(v, roots, written, scratch, keep_contents=False) for k, v in kwargs.items()},
                                   grid, run_backend))
    return launches


def _constant(ref) -> Optional[np.ndarray]:
    """A constant input's value laid out as its buffer (C-contiguous, its shape and dtype), else None."""
    v = None if ref.spec is None else ref.spec.value
    if isinstance(v, np.ndarray) and v.shape == ref.shape and v.dtype == ref.dtype and v.flags.c_contiguous:
        return v
    return None


def _varies(ref) -> bool:
    """Outputs and non-constant inputs: bound to a plan's buffers, never frozen."""
    return ref.kind == "out" or _constant(ref) is None
