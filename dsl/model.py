"""``dsl.Model``: a compiled graph, run with ``model.run({name: array}) -> {name: array}``.

Running is a flat list of step closures built once per set of input shapes (at
compile time when every shape is known): each step holds its kernel's compiled
launcher and the argument list already bound (arena views for intermediates), so a
step is one launcher call plus the substitution of per-run arrays (graph inputs,
fresh output arrays).  Graphs with ``None`` dims are re-inferred with the concrete
shapes on the first run of each shape signature and the plan is cached; a graph
whose shapes depend on tensor *values* computed at run time (not constants) runs
node by node, inferring as it goes.

Intermediates live in a shared arena (dsl/passes.py ``plan_memory``); outputs are
fresh arrays owned by the caller.  ``run`` holds a lock, so one Model can be shared
by threads (runs are serialized).
"""
from __future__ import annotations

import difflib
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from dsl import formats as F
from dsl.graph import Graph, Node
from dsl.op import Op, TensorSpec, VerifyError, check_and_infer
from dsl.passes import MemoryPlan, physical_layout, plan_memory
from dsl.types import from_numpy

_DYNAMIC = object()      # plan marker: shapes depend on run-time values
_MAX_PLANS = 32


class _Plan:
    __slots__ = ("env", "fresh", "steps", "memory", "specs")

    def __init__(self, env, fresh, steps, memory, specs):
        self.env, self.fresh, self.steps, self.memory, self.specs = env, fresh, steps, memory, specs


class Model:
    """A compiled graph.  ``inputs``/``outputs``: name -> TensorSpec (None dims allowed)."""

    def __init__(self, graph: Graph, backend: str, impls: Dict[str, Any], stats: Dict[str, int]):
        self.graph = graph
        self.backend = backend
        self.stats = dict(stats)
        self._impls = impls
        self.inputs: Dict[str, TensorSpec] = {t.name: t.spec for t in graph.inputs}
        self.outputs: Dict[str, TensorSpec] = {t.name: t.spec for t in graph.outputs}
        names = list(graph.tensors)
        self._slot = {name: i for i, name in enumerate(names)}
        self._none_slot = len(names)  # env[-1] is None: absent optional inputs
        self._in_slots = [self._slot[t.name] for t in graph.inputs]
        self._in_checks = [(t.name, t.spec.dtype.np, t.spec.shape, t.spec) for t in graph.inputs]
        self._out = [(t.name, self._slot[t.name], t.kind != "node") for t in graph.outputs]
        self._plans: Dict[Tuple, Any] = {}
        self._lock = threading.Lock()
        if all(t.spec.known for t in graph.tensors.values()):
            specs = {name: t.spec for name, t in graph.tensors.items()}
            key = tuple(t.spec.shape for t in graph.inputs)
            self._plans[key] = self._build_plan(specs)

    # ------------------------------------------------------------------ running
    def run(self, feeds: Mapping[str, Any]) -> Dict[str, np.ndarray]:
        """Run the graph on ``feeds`` (input name -> array); returns output name -> array."""
        arrays = self._check_feeds(feeds)
        key = tuple(a.shape for a in arrays)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan_for(arrays, key)
        if plan is _DYNAMIC:
            return self._run_by_node(arrays)
        with self._lock:
            env = plan.env.copy()
            for slot, a in zip(self._in_slots, arrays):
                env[slot] = a
            for slot, shape, dt in plan.fresh:
                env[slot] = np.empty(shape, dt)
            for step in plan.steps:
                step(env)
        return {name: (env[slot].copy() if copy else env[slot]) for name, slot, copy in self._out}

    __call__ = run

    def _check_feeds(self, feeds) -> List[np.ndarray]:
        if not isinstance(feeds, Mapping):
            raise TypeError(f"Model.run takes a dict of input name -> array, got {type(feeds).__name__}")
        extra = [k for k in feeds if k not in self.inputs]
        if extra:
            close = difflib.get_close_matches(str(extra[0]), list(self.inputs), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown input {extra[0]!r} for graph {self.graph.name!r}; "
                             f"inputs: {self._signature()}{hint}")
        arrays = []
        for name, npdt, shape, spec in self._in_checks:
            if name not in feeds:
                raise ValueError(f"missing input {name!r} ({spec}) for graph {self.graph.name!r}; "
                                 f"inputs: {self._signature()}")
            a = feeds[name]
            if not isinstance(a, np.ndarray):
                a = np.asarray(a)
            if a.dtype != npdt:
                raise TypeError(f"input {name!r} has dtype {a.dtype}, expected {spec.dtype} ({npdt}); "
                                f"convert it with .astype(np.{npdt})")
            if a.ndim != len(shape) or any(d is not None and d != s for d, s in zip(shape, a.shape)):
                raise ValueError(f"input {name!r} has shape {a.shape}, expected {_shape_text(shape)}"
                                 + _dim_hint(shape, a.shape))
            if not a.flags.c_contiguous:
                a = np.ascontiguousarray(a)
            arrays.append(a)
        return arrays

    def _signature(self) -> str:
        return ", ".join(f"{n}: {s}" for n, s in self.inputs.items())

    # ------------------------------------------------------------------ planning
    def _plan_for(self, arrays, key):
        specs = self._concrete_specs(arrays)
        plan = _DYNAMIC if specs is None else self._build_plan(specs)
        with self._lock:
            if len(self._plans) >= _MAX_PLANS:
                self._plans.pop(next(iter(self._plans)))
            self._plans[key] = plan
        return plan

    def _concrete_specs(self, arrays) -> Optional[Dict[str, TensorSpec]]:
        """Every tensor's spec for these input shapes; None when a shape needs run-time values."""
        g = self.graph
        specs: Dict[str, TensorSpec] = {}
        for t, a in zip(g.inputs, arrays):
            specs[t.name] = t.spec.with_(shape=a.shape)
        for name in g.constants:
            specs[name] = g.tensors[name].spec
        for n in g.nodes:
            outs = check_and_infer(n.op, [None if t is None else specs[t.name] for t in n.inputs],
                                   where=f"node {n.name!r}")
            for t, s in zip(n.outputs, outs):
                if not s.known:
                    return None
                specs[t.name] = s.with_(format=t.spec.format, value=s.value)
        return specs

    def _build_plan(self, specs: Dict[str, TensorSpec]) -> _Plan:
        g = self.graph
        layout = physical_layout(specs)
        memory = plan_memory(g.nodes, layout, g.outputs)
        arena = [np.empty(max(size, 1), np.uint8) for size in memory.sizes]
        env: List[Any] = [None] * (self._none_slot + 1)
        for name, value in g.constants.items():
            env[self._slot[name]] = value
        dynamic = set(self._in_slots)
        fresh = []
        for t in g.outputs:
            if t.kind == "node":
                shape, dt = layout[t.name]
                fresh.append((self._slot[t.name], shape, dt))
                dynamic.add(self._slot[t.name])
        for n in g.nodes:
            for t in n.outputs:
                slot = self._slot[t.name]
                if slot in dynamic:
                    continue
                shape, dt = layout[t.name]
                if t.name in memory.assign:
                    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
                    env[slot] = arena[memory.assign[t.name]][:nbytes].view(dt).reshape(shape)
                else:
                    env[slot] = np.empty(shape, dt)
        examples = list(env)
        for slot in dynamic:
            name = self._name_of(slot)
            shape, dt = layout[name]
            examples[slot] = np.empty(shape, dt)
        steps = []
        for n in g.nodes:
            if n.outputs and all(int(np.prod(layout[t.name][0], dtype=np.int64)) == 0 for t in n.outputs):
                continue  # every output is empty: nothing to compute (ONNX empty-tensor rule)
            steps.append(self._step(n, examples, dynamic))
            if not type(n.op).keeps_padding:
                for t in n.outputs:
                    if F.needs_padding_fix(specs[t.name]):
                        steps.append(self._launch(F.zero_padding, [self._slot[t.name]],
                                                  {"channels": specs[t.name].shape[1]}, examples, dynamic))
        return _Plan(env, fresh, steps, memory, specs)

    def _name_of(self, slot: int) -> str:
        if not hasattr(self, "_names"):
            self._names = {v: k for k, v in self._slot.items()}
        return self._names[slot]

    def _step(self, n: Node, examples, dynamic):
        op, impl = n.op, self._impls[n.name]
        ins = [self._none_slot if t is None else self._slot[t.name] for t in n.inputs]
        outs = [self._slot[t.name] for t in n.outputs]
        if type(op).run is not Op.run:
            backend = self.backend

            def step(env):
                op.run(impl, [env[i] for i in ins], [env[o] for o in outs], backend)
            return step
        return self._launch(impl, ins + outs, op.kernel_kwargs(impl, self.backend), examples, dynamic)

    def _launch(self, impl, slots, kw, examples, dynamic):
        """A closure running ``impl`` on the arrays in ``slots``; dsl kernels get their
        launcher resolved now so a run skips argument binding."""
        fast = _prepared_kernel(impl, [examples[s] for s in slots], kw, self.backend)
        dyn = [(p, s) for p, s in enumerate(slots) if s in dynamic]
        if fast is not None:
            launcher, values, grid = fast
            if grid == 0:
                return _noop
            if not dyn:
                return lambda env: launcher(values, grid)

            def step(env):
                v = values.copy()
                for p, s in dyn:
                    v[p] = env[s]
                launcher(v, grid)
            return step
        if not dyn:
            fixed = [examples[s] for s in slots]
            return lambda env: impl(*fixed, **kw)
        return lambda env: impl(*[env[s] for s in slots], **kw)

    def _run_by_node(self, arrays) -> Dict[str, np.ndarray]:
        """Shapes depend on run-time values: infer, allocate and launch node by node."""
        g = self.graph
        vals: Dict[str, np.ndarray] = dict(g.constants)
        specs: Dict[str, TensorSpec] = {name: g.tensors[name].spec for name in g.constants}
        for t, a in zip(g.inputs, arrays):
            vals[t.name], specs[t.name] = a, TensorSpec.of(a)
        for n in g.nodes:
            ins = [None if t is None else vals[t.name] for t in n.inputs]
            in_specs = [None if t is None else specs[t.name].with_(
                value=vals[t.name] if specs[t.name].format == "plain" else None) for t in n.inputs]
            outs = check_and_infer(n.op, in_specs, where=f"node {n.name!r}")
            outs = [s.with_(format=t.spec.format) for s, t in zip(outs, n.outputs)]
            arrs = [np.empty(F.physical_shape(s.shape, s.format), s.dtype.np) for s in outs]
            if not arrs or any(a.size for a in arrs):
                n.op.run(self._impls[n.name], ins, arrs, self.backend)
                if not type(n.op).keeps_padding:
                    for s, a in zip(outs, arrs):
                        if F.needs_padding_fix(s):
                            F.fix_padding(a, s.shape[1], self.backend)
            for t, s, a in zip(n.outputs, outs, arrs):
                vals[t.name], specs[t.name] = a, s
        return {t.name: (vals[t.name].copy() if t.kind != "node" else vals[t.name]) for t in g.outputs}

    # ------------------------------------------------------------------ introspection
    def memory_plan(self, **shapes) -> Optional[MemoryPlan]:
        """The memory plan for the static shapes (or the first planned shape signature)."""
        for plan in self._plans.values():
            if plan is not _DYNAMIC:
                return plan.memory
        return None

    def __repr__(self) -> str:
        return (f"<dsl.Model {self.graph.name!r} backend={self.backend}: {len(self.graph.nodes)} nodes, "
                f"inputs ({self._signature()})>")

    def __str__(self) -> str:
        g = self.graph
        lines = [f"model {g.name} [{self.backend}] ({self._signature()}) -> "
                 f"({', '.join(f'{n}: {s}' for n, s in self.outputs.items())})",
                 "  passes: " + ", ".join(f"{k}={v}" for k, v in self.stats.items())]
        mem = self.memory_plan()
        shared = {} if mem is None else mem.assign
        for n in g.nodes:
            impl = self._impls[n.name]
            impl_name = next((k for k, v in n.op.kernels.items() if v is impl), "?")
            bufs = ", ".join(f"{t.name}->buf{shared[t.name]}" for t in n.outputs if t.name in shared)
            ins = ", ".join("_" if t is None else f"{t.name}:{t.spec}" for t in n.inputs)
            lines.append(f"  {n.name}: {n.op!r}({ins}) -> "
                         f"{', '.join(f'{t.name}:{t.spec}' for t in n.outputs)}  impl={impl_name}"
                         + (f"  [{bufs}]" if bufs else ""))
        if mem is not None:
            lines.append(f"  memory: arena {mem.arena_bytes} B in {len(mem.sizes)} buffers "
                         f"(one buffer per tensor: {mem.naive_bytes} B), in-place: {len(mem.inplace)}")
        return "\n".join(lines)


def _noop(env):
    return None


def _prepared_kernel(impl, arrays, kw, backend):
    """(launcher, bound values, grid) for a dsl.kernel, or None for other callables.

    Uses ``Kernel.bind`` (public) and the kernel's variant cache; when that protocol is
    missing, the step falls back to calling the kernel (argument checks every run)."""
    try:
        from dsl.kernel import Kernel
    except ImportError:  # pragma: no cover
        return None
    if not isinstance(impl, Kernel) or not hasattr(impl, "_compile"):
        return None
    kw = {k: v for k, v in kw.items() if k != "backend"}
    values, key = impl.bind(tuple(arrays), kw)
    launcher = impl._variants.get((backend, key)) or impl._compile(backend, key, values)
    grid = impl.grid
    if callable(grid):
        grid = grid(dict(zip([p.name for p in impl.params], values)))
    return launcher, values, int(grid)


def _shape_text(shape) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + (",)" if len(shape) == 1 else ")")


def _dim_hint(want, got) -> str:
    if len(want) != len(got):
        return f": rank {len(got)}, expected rank {len(want)}"
    for i, (w, g) in enumerate(zip(want, got)):
        if w is not None and w != g:
            return f": dim {i} is {g}, expected {w}"
    return ""
