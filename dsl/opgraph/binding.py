"""Rebinding a plan's graph inputs and outputs to the caller's arrays, so ``Model.run`` copies nothing.

A plan (model.py ``_build_plan``) has its own buffer for every graph input and graph output, and
its steps are bound to those buffers.  Copying a feed in and an output out costs what a small
kernel costs (a 64x56x56 f32 conv: ~36 us of 275 us), which onnxruntime does not pay: it reads a
contiguous feed in place.  ``Binding`` finds, once per plan, every place a step's arguments hold
such a buffer or a view of it (a Reshape, a tile's slice, an f16 tensor's uint16 view).  Input and
output buffers are their own ``np.empty`` allocations, so "data pointer inside that allocation"
identifies the views exactly; each is recorded as (byte offset, shape, strides, dtype).  A run
then rebuilds only the argument tuples of the steps that hold one, with the caller's feed (or a
fresh array per output, on a 64-byte line: ``line_aligned``) or the same view of it in its place.  Launch values frozen for
numba (backends/numba/frozen.py) stay frozen: a feed of the same dtype, shape and C-contiguity
has the same numba type, so nothing is checked again.

The rules are strict; a buffer keeps the copy when any of them fails:

- Every step must be one this module understands: a backend launcher with its values (also a
  numba launcher's ``run_serial``, as tiles run), the model's ``op.run`` call, the tile runner
  with its work, the no-op.  Any other step (or an argument of an unknown type) could hold a
  buffer where it cannot be seen, and the whole plan keeps copying.
- A graph input must never be written: a launch that binds it to an Out/InOut parameter, a
  tile copy into it, or an ``op.run`` call (which may do anything with its arrays) pins it.
- A feed must be an exact, C-contiguous, aligned ``np.ndarray`` of the buffer's dtype and shape
  (``arg_check.rebinds``: the only argument check a bound launch repeats); a read-only feed only
  where every use of it is a frozen launch (any other launch would type it again as read-only
  and compile another variant).
- Outputs that are graph inputs or constants, outputs listed twice, and buffers smaller than
  ``MIN_BYTES`` (where the rebuilt tuples cost more than the copy) keep the copy.
"""
from __future__ import annotations

import os
from sys import getrefcount
from typing import Callable, Dict, List, Optional, Sequence, Tuple
from weakref import getweakrefcount

import numpy as np

from backends.base import Launcher
from dsl.opgraph import tiling as tiles
from dsl.runtime import arg_check
from dsl.runtime.cache_lines import address, line_aligned

# Buffers smaller than this keep the copy: rebinding a launch costs ~1 us, as much as copying
# ~32 KB in and out (benchmarks/RESULTS.md "Model.run without copies").  OPDSL_BIND_MIN_BYTES=0
# rebinds every buffer (tests run the whole suite's small models through this path that way).
MIN_BYTES = int(os.environ.get("OPDSL_BIND_MIN_BYTES", 32 * 1024))

_SCALARS = (bool, int, float, complex, str, bytes, np.generic, np.dtype, type(None))


class Opaque(Exception):
    """A step or argument this module does not understand: the plan keeps copying."""


class _View:
    """One reference to a root buffer: the same view is made of the run's array."""

    __slots__ = ("root", "offset", "shape", "strides", "dtype", "whole")

    def __init__(self, root: int, a: np.ndarray, base: np.ndarray):
        self.root = root
        self.offset = address(a) - address(base)
        self.shape, self.strides, self.dtype = a.shape, a.strides, a.dtype
        self.whole = (self.offset == 0 and a.shape == base.shape and a.dtype == base.dtype)

    def make(self, arrays: List[Optional[np.ndarray]]) -> Optional[np.ndarray]:
        a = arrays[self.root]
        if a is None:  # not rebound this run: the plan's own buffer stays
            return None
        if self.whole and a.strides == self.strides:
            return a
        return np.ndarray(self.shape, self.dtype, buffer=a, offset=self.offset, strides=self.strides)


class Binding:
    """Which roots (graph input and output buffers) a plan's steps hold, and where.

    ``roots``: the candidate buffers, each its own allocation; ``inputs``: how many of them (the
    first ones) are graph inputs; ``run_fns``: the model's functions that call ``op.run``;
    ``noop``: its no-op step."""

    def __init__(self, steps: Sequence, roots: Sequence[np.ndarray], inputs: int,
                 run_fns: Sequence[Callable], noop: Callable):
        self.roots = list(roots)
        self.inputs = inputs
        self._run_fns = tuple(run_fns)
        self._noop = noop
        self._spans = [(address(r), address(r) + r.nbytes) for r in self.roots]
        self.pinned = set()          # roots that keep the copy
        self.frozen_only = [True] * len(self.roots)  # every use a frozen launch (read-only feeds ok)
        self.patches: List[Tuple[int, dict]] = []  # (step index, patch tree) for steps holding a root
        self._launches = set()  # ids of the patch trees of launcher steps
        for k, step in enumerate(steps):
            tree = self._step(step)
            if tree:
                self.patches.append((k, tree))
                if isinstance(step[0], Launcher) or _launcher_method(step[0]):
                    self._launches.add(id(tree))
        # per patched step: (index, [(value position, view)] for a launch of plain values, else None, tree)
        self._fast = []
        for k, tree in self.patches:
            inner = tree[1][0] if list(tree) == [1] and list(tree[1]) == [0] else None
            flat = (sorted(inner.items()) if id(tree) in self._launches and isinstance(inner, dict)
                    and all(type(v) is _View for v in inner.values()) else None)
            self._fast.append((k, flat, tree))

    # ------------------------------------------------------------------ finding references
    def _root_of(self, a: np.ndarray) -> Optional[int]:
        p = address(a)
        for i, (lo, hi) in enumerate(self._spans):
            if lo <= p < hi:
                return i
        return None

    def _step(self, step) -> dict:
        """The patch tree of one ``(fn, args)`` step (``{}``: it holds no root)."""
        if type(step) is not tuple or len(step) != 2:
            raise Opaque(f"step {step!r}")
        fn, args = step
        if fn is self._noop:
            return {}
        if isinstance(fn, Launcher) or _launcher_method(fn):
            launcher = fn if isinstance(fn, Launcher) else fn.__self__
            return _nest(1, self._launch(launcher, args, frozen_ok=isinstance(fn, Launcher)))
        if any(fn is f for f in self._run_fns):
            return _nest(1, self._op_run(args))
        if fn is tiles.run_tiles or fn is tiles.run_tiles_in_order:
            if type(args) is not tuple or len(args) != 1 or type(args[0]) is not tuple:
                raise Opaque("tile work")
            return _nest(1, _nest(0, self._tiles(args[0])))
        raise Opaque(f"step function {fn!r}")

    def _launch(self, launcher, args, frozen_ok: bool) -> dict:
        if type(args) is not tuple or len(args) != 2:
            raise Opaque(f"launch arguments of {launcher!r}")
        values, grid = args
        ints = (int, np.integer)
        if not (isinstance(grid, ints) or (type(grid) is tuple and all(isinstance(g, ints) for g in grid))):
            raise Opaque(f"grid {grid!r}")
        rebuildable = type(values) in (tuple, list) or (isinstance(values, tuple) and hasattr(values, "with_values"))
        if not rebuildable:
            raise Opaque(f"launch values {type(values).__name__}")
        frozen = frozen_ok and type(values) is not tuple and type(values) is not list
        access = _param_access(launcher)
        tree = {}
        for i, v in enumerate(values):
            sub = self._value(v)
            if not sub:
                continue
            tree[i] = sub
            for leaf in _leaves({0: sub}):
                if leaf.root < self.inputs and (access is None or i >= len(access) or access[i] != "in"):
                    self.pinned.add(leaf.root)  # a launch that may write a graph input
                if not frozen:
                    self.frozen_only[leaf.root] = False
        return _nest(0, tree) if tree else {}

    def _op_run(self, args) -> dict:
        """``(op, impl, ins, outs, backend, specs)``: op.run gets the arrays as they are."""
        if type(args) is not tuple or len(args) != 6:
            raise Opaque("op.run step")
        tree = {}
        for pos in (2, 3):
            arrs = args[pos]
            if type(arrs) is not list:
                raise Opaque("op.run arrays")
            sub = {}
            for i, a in enumerate(arrs):
                if a is None:
                    continue
                if type(a) is not np.ndarray:
                    raise Opaque(f"op.run array {type(a).__name__}")
                r = self._root_of(a)
                if r is None:
                    continue
                if r < self.inputs:
                    self.pinned.add(r)  # run() may do anything with its arrays
                self.frozen_only[r] = False
                sub[i] = _View(r, a, self.roots[r])
            if sub:
                tree[pos] = sub
        return tree

    def _tiles(self, work: tuple) -> dict:
        tree = {}
        for t, tile in enumerate(work):
            if type(tile) is not tuple or len(tile) != 3:
                raise Opaque("tile")
            before, steps, after = tile
            sub = {}
            for pos, copies in ((0, before), (2, after)):
                csub = {}
                for j, pair in enumerate(copies):
                    if type(pair) is not tuple or len(pair) != 2 or not all(type(a) is np.ndarray for a in pair):
                        raise Opaque("tile copy")
                    psub = {}
                    for side, a in enumerate(pair):
                        r = self._root_of(a)
                        if r is None:
                            continue
                        if side == 0 and r < self.inputs:
                            self.pinned.add(r)  # a copy into a graph input
                        self.frozen_only[r] = False
                        psub[side] = _View(r, a, self.roots[r])
                    if psub:
                        csub[j] = psub
                if csub:
                    sub[pos] = csub
            ssub = {}
            for j, step in enumerate(steps):
                st = self._step(step)
                if st:
                    ssub[j] = st
            if ssub:
                sub[1] = ssub
            if sub:
                tree[t] = sub
        return tree

    def _value(self, v):
        """A launch value's patch: a _View, a nested tree, or None."""
        if type(v) is np.ndarray:
            r = self._root_of(v)
            return None if r is None else _View(r, v, self.roots[r])
        if isinstance(v, _SCALARS):
            return None
        if type(v) in (tuple, list):
            tree = {i: s for i, s in ((i, self._value(x)) for i, x in enumerate(v)) if s}
            return tree or None
        raise Opaque(f"launch value {type(v).__name__}")

    # ------------------------------------------------------------------ running
    def bind(self, steps: Sequence, arrays: List[Optional[np.ndarray]]) -> list:
        """``steps`` with every rebound root replaced by ``arrays[root]`` (None: keep the plan's)."""
        out = list(steps)
        for k, step in self.rebound(steps, arrays):
            out[k] = step
        return out

    def rebound(self, steps: Sequence, arrays: List[Optional[np.ndarray]]) -> list:
        """[(step index, the step rebound to ``arrays``)] for the steps that hold a root."""
        out = []
        for k, flat, tree in self._fast:
            if flat is None:
                out.append((k, _apply(steps[k], tree, arrays)))
                continue
            fn, (values, grid) = steps[k]
            items = list(values)
            for i, view in flat:
                a = view.make(arrays)
                if a is not None:
                    items[i] = a
            out.append((k, (fn, (values.with_values(items) if type(values) not in (tuple, list)
                                 else type(values)(items), grid))))
        return out


def _apply(obj, tree, arrays):
    if type(tree) is _View:
        new = tree.make(arrays)
        return obj if new is None else new
    items = list(obj)
    for i, sub in tree.items():
        items[i] = _apply(items[i], sub, arrays)
    if type(obj) is tuple:
        return tuple(items)
    if type(obj) is list:
        return items
    return obj.with_values(items)  # a Frozen tuple: same types, so still frozen


def _nest(pos: int, tree) -> dict:
    return {pos: tree} if tree else {}


def _leaves(tree):
    if type(tree) is _View:
        yield tree
        return
    for sub in tree.values():
        yield from _leaves(sub)


def _launcher_method(fn) -> bool:
    """A launcher's ``run_serial``/``run_parallel`` (tiles run on the serial entry)."""
    return isinstance(getattr(fn, "__self__", None), Launcher) and getattr(fn, "__name__", "") in (
        "run_serial", "run_parallel")


def _param_access(launcher) -> Optional[List[str]]:
    """Per kernel parameter: 'in', 'out', 'inout' or '' (not a tensor); None if unknown."""
    from dsl.lang import ir
    k = launcher.kernel_ir if isinstance(launcher, Launcher) else None
    if k is None:
        return None
    return [p.access if isinstance(p, ir.TensorParam) else "" for p in k.params]



def build(steps: Sequence, inputs: Sequence[np.ndarray], outputs: Sequence[Tuple[str, np.ndarray]],
          constants: Sequence[np.ndarray], run_fns: Sequence[Callable], noop: Callable,
          min_bytes: Optional[int] = None) -> Optional["RunBinding"]:
    """The plan's rebinding, or None when nothing is worth (or safe) to rebind."""
    min_bytes = MIN_BYTES if min_bytes is None else min_bytes
    ids_in = {id(a) for a in inputs}
    ids_const = {id(a) for a in constants}
    count: Dict[int, int] = {}
    for _, buf in outputs:
        count[id(buf)] = count.get(id(buf), 0) + 1
    roots = list(inputs)
    out_roots = []  # per output: root index or None (copied)
    for _, buf in outputs:
        if (id(buf) in ids_in or id(buf) in ids_const or count[id(buf)] > 1 or buf.nbytes < min_bytes
                or not buf.flags.c_contiguous or buf.base is not None):
            out_roots.append(None)
        else:
            out_roots.append(len(roots))
            roots.append(buf)
    try:
        b = Binding(steps, roots, len(inputs), run_fns, noop)
    except Opaque:
        return None
    live = [i for i in range(len(roots)) if i not in b.pinned
            and (i >= len(inputs) or (roots[i].nbytes >= min_bytes and roots[i].base is None))]
    if not live:
        return None
    return RunBinding(b, set(live), out_roots, [next((k for k, a in enumerate(inputs) if a is buf), None)
                                               for _, buf in outputs], outputs)


class RunBinding:
    """What ``Model.run`` uses per run of one plan instance: which feeds go in place, which
    outputs are fresh arrays, and the steps to rebind."""

    __slots__ = ("binding", "live", "out_roots", "_feeds", "_fresh", "_outs", "_roots", "_given")

    def __init__(self, binding: Binding, live: set, out_roots: list, out_inputs: list,
                 outputs: Sequence[Tuple[str, np.ndarray]]):
        self.binding, self.live = binding, live
        self.out_roots = [r if r in live else None for r in out_roots]
        roots = binding.roots
        self._roots = len(roots)
        # per graph input: (its plan buffer, rebound when the feed allows, read-only feeds allowed)
        self._feeds = [(roots[i], i in live, binding.frozen_only[i]) for i in range(binding.inputs)]
        self._fresh = [(r, roots[r].shape, roots[r].dtype) for r in self.out_roots if r is not None]
        self._given: List[Optional[np.ndarray]] = [None] * len(self._fresh)  # per fresh output: the last one
        # per output: (name, fresh root or None, the graph input it is or None, the plan's buffer)
        self._outs = [(name, r, k, buf) for (name, buf), r, k in zip(outputs, self.out_roots, out_inputs)]

    def run(self, steps: Sequence, feeds: Sequence[np.ndarray], flat=None) -> Dict[str, np.ndarray]:
        """Feed, run and collect: rebound feeds used in place, the others copied into the plan.
        ``flat``: the plan's steps as prepared calls (flat_run.py), run with the rebound ones."""
        arrays: List[Optional[np.ndarray]] = [None] * self._roots
        i = 0
        for (buf, live, ro_ok), a in zip(self._feeds, feeds):
            if live and arg_check.rebinds(a, buf, ro_ok):
                arrays[i] = a
            else:
                np.copyto(buf, a)
            i += 1
        given = self._given
        for j, (r, shape, dt) in enumerate(self._fresh):
            # the array this output was last run: the caller let go of it (this list holds the
            # only reference, no weak ones): its pages are mapped and warm, where a new one would
            # fault each page in again (~4 us a page here; 128 KiB outputs paid 20-130 us)
            # (a view of it holds its base, line_aligned's buffer, not it)
            if given[j] is not None and getrefcount(given[j]) == 2 and not getweakrefcount(given[j]) and (
                    given[j].base is None or getrefcount(given[j].base) == 2):
                arrays[r] = given[j]
            else:
                arrays[r] = given[j] = line_aligned(shape, dt)
        if flat is not None:
            flat.run(self.binding.rebound(steps, arrays))
        else:
            for fn, args in self.binding.bind(steps, arrays):
                fn(*args)
        result = {}
        for name, r, k, buf in self._outs:
            if r is not None:
                result[name] = arrays[r]
            elif k is not None and arrays[k] is not None:  # an output that is a rebound graph input
                result[name] = np.array(arrays[k], order="C")
            else:
                result[name] = buf.copy()
        return result
