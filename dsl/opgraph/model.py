"""``dsl.Model``: a compiled graph, run with ``model.run({name: array}) -> {name: array}``.

Running is a flat list of ``(callable, args)`` built once per set of input shapes (at
compile time when every shape is known).  Every buffer of the plan is allocated then:
inputs have staging buffers, intermediates live in a shared arena (memory.py
``plan_memory``), outputs have buffers of their own.  Large feeds are then read in place
and large outputs written straight into fresh caller-owned arrays: the plan's steps are
rebound to them per run (binding.py); the others are copied in and out.
Because every array is fixed, each node's launches are bound (argument checks,
specialization lookup, frozen values) ahead of time from what its op *declares*:
``op.plan(impl, inputs, outputs, backend)`` lists the launches for those specs
(launch_plan.py; computed once per node and layout, then bound to each plan instance's
buffers), so a step is one compiled launcher call.  Nodes whose op answers None (launches
that depend on input values, plain-callable kernels, ``replay = False``, a custom ``run``
without a ``plan``) call ``op.run`` on the fixed arrays at every run.
Graphs with ``None`` dims are planned on the first run of each shape signature; small
values computed from shapes alone (Shape -> Gather -> Concat -> Reshape) are evaluated
while planning (``shape_values``), so such graphs still get a plan.  A graph whose
shapes depend on tensor *values* of the inputs runs node by node, inferring as it goes,
with every input's value visible to ``infer`` as ``spec.value``.

Threads: one Model may be run from many threads at once, and runs really overlap.  A
plan's buffers are the state of one run, so each shape signature keeps a pool of plan
instances: a run checks one out (building another when every instance is busy) and
returns it afterwards.  The pool therefore grows to the peak number of concurrent runs
of that signature, each instance with its own arena.  ``_run_by_node`` allocates per
run and shares nothing.

Sequences and optionals (host_values.py) are never planned: a graph holding any runs node by
node, its host ops through ``run_host``.
"""
from __future__ import annotations

import contextlib
import difflib
import threading
import uuid
import weakref
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from dsl import config
from dsl.opgraph import formats as F
from dsl.opgraph import binding, lazy_constants, reorder
from dsl.opgraph.concat_inplace import concat_views
from dsl.opgraph.flat_run import FlatRun
from dsl.opgraph.launch_plan import ScratchPool, bind_plan, plan_key, plan_of, refs
from dsl.opgraph.limits import check_tensor_bytes, tensor_limit
from dsl.opgraph.host_values import check_value, is_host, runs_on_host
from dsl.opgraph.memory import MemoryPlan, copies_onto_itself, physical_layout, plan_memory, written_as_outputs
from dsl.opgraph.op import Op, check_and_infer, node_runs, run_op
from dsl.opgraph.spec import TensorSpec, VerifyError, describe
from dsl.opgraph import tiling as tiles
from dsl.opgraph.values import shape_values
from backends import compile_batch
from dsl.runtime import huge_pages
from dsl.runtime.kernel import inplace_launches

_DYNAMIC = object()      # plan marker: shapes depend on run-time values
_MAX_PLANS = 32


class _Plan:
    """Everything one shape signature needs: fixed buffers and a flat step list."""

    __slots__ = ("inputs", "outputs", "steps", "memory", "specs", "planned", "spans", "tiled", "binding", "flat")

    def __init__(self, inputs, outputs, steps, memory, specs, planned, spans=(), tiled=None, binding=None):
        self.inputs, self.outputs, self.steps = inputs, outputs, steps
        self.binding = binding  # feeds read in place, outputs written in place (binding.py), or None
        self.memory, self.specs = memory, specs
        self.planned = planned  # nodes run from their declared launch plan (the others call run())
        self.spans = spans  # (node, first step, end step): which steps are whose (profile.py)
        self.tiled = tiled or {}  # node name -> number of tiles it runs as (tiling.py)
        self.flat = None  # the steps as prepared calls (flat_run.py), made after this instance's first run


class _PlanPool:
    """Plan instances of one shape signature; each is used by one run at a time."""

    __slots__ = ("build", "free", "lock", "first")

    def __init__(self, build, first: _Plan):
        self.build, self.first = build, first  # first: for introspection (memory_plan, str)
        self.free: List[_Plan] = [first]
        self.lock = threading.Lock()

    def checkout(self) -> _Plan:
        with self.lock:
            if self.free:
                return self.free.pop()
        return self.build()  # every instance is busy: another thread is running this signature

    def checkin(self, plan: _Plan) -> None:
        with self.lock:
            self.free.append(plan)


class Model:
    """A compiled graph.  ``inputs``/``outputs``: name -> TensorSpec (None dims allowed), or a
    SequenceSpec / OptionalSpec for values fed and returned as lists of arrays / None."""

    def __init__(self, graph, backend: str, impls: Dict[str, Any], stats: Dict[str, int],
                 max_tensor_bytes: Optional[int] = None, tiling=None, concat_inplace: bool = True,
                 launch_plans: Optional[Dict[Tuple, Any]] = None):
        self.graph = graph
        self.concat_inplace = concat_inplace  # Concat inputs written in place (concat_inplace.py)
        self.inplace_all = config.inplace_all()  # every op's `inplace` honoured (memory.py), else no-op ones only
        self.tiling = tiles.resolve(tiling)  # most tiles per op (0: off, < 0: one per core when large)
        self.max_tensor_bytes = tensor_limit(max_tensor_bytes)  # no buffer of a run may be larger
        self.backend = backend
        self.rebind = True  # run on the caller's feeds and into fresh outputs (binding.py); False: copy
        self.stats = dict(stats)
        self._impls = impls
        self.inputs: Dict[str, TensorSpec] = {t.name: t.spec for t in graph.inputs}
        self.outputs: Dict[str, TensorSpec] = {t.name: t.spec for t in graph.outputs}
        self._in_checks = [(t.name, t.spec.dtype.np, None if is_host(t.spec) else t.spec.shape, t.spec)
                           for t in graph.inputs]
        self._named_dims = [(k, axis, dim) for k, t in enumerate(graph.inputs)
                            for axis, dim in enumerate(t.dim_names) if dim is not None]
        # every input a tensor of known shape: a run's feeds are checked by one comparison each
        # (the full check costs ~3 us a run, 5 % of a 55 us attention GEMM)
        self._exact_feeds = None
        if graph.inputs and all(not is_host(t.spec) and t.spec.known for t in graph.inputs):
            self._exact_feeds = [(t.name, t.spec.dtype.np, tuple(t.spec.shape)) for t in graph.inputs]
        self._plans: Dict[Tuple, Any] = {}  # input shapes -> _PlanPool or _DYNAMIC
        # sequences / optionals anywhere: nothing can be planned ahead, every run goes node by node
        self._host = any(is_host(t.spec) for t in graph.tensors.values()) or any(
            type(n.op).host_values == "always" for n in graph.nodes)
        # nodes whose compile-time input specs had unknown dims: select runs again per run-time shape
        self._reselect = {n.name for n in graph.nodes if any(t is not None and not t.spec.known for t in n.inputs)}
        self._chosen: Dict[Tuple, Any] = {}  # (node name, input shapes) -> implementation
        # (node, id(impl), layouts) -> its declared launches or None; seeded from the plan cache (plan_cache.py)
        self._launch_plans: Dict[Tuple, Any] = dict(launch_plans or {})
        self._lock = threading.Lock()       # guards _plans only; runs do not take it
        if not self._host and all(t.spec.known for t in graph.tensors.values()):
            specs = {name: t.spec for name, t in graph.tensors.items()}
            key = tuple(t.spec.shape for t in graph.inputs)
            self._plans[key] = self._pool(specs)

    def __reduce__(self):
        """The compiled graph and options, never compiled code: the receiving process selects
        the kernels again and compiles them (or loads them from its own disk cache).  The same
        model arriving again in a process (every compute of a Dask graph) is the same model there,
        with its plans already built."""
        token = self.__dict__.setdefault("_pickle_token", uuid.uuid4().hex)
        tiling = False if self.tiling == 0 else True if self.tiling < 0 else self.tiling  # per core there
        return (_unpickle_model, (type(self), token, self.graph, self.backend, self.stats, self.max_tensor_bytes,
                                  tiling, self.concat_inplace))

    def save(self, path, source=None, feeds=None, options=None, packages=()):
        """Write this model as one ``.opdsl`` file -- graph, launch plans, weights and its kernels'
        machine code for this CPU -- that ``dsl.load_model(path)`` opens without compiling
        (dsl/opgraph/artifact_save.py, docs/onnx.md).  ``source``: the ONNX file it came from,
        carried to rebuild it under another opdsl version; ``feeds``: inputs for the one
        run that collects its kernels (default zeros); ``packages``: the op packages its custom
        ops come from (registered again where it is loaded)."""
        from dsl.opgraph.artifact_save import save
        return save(self, path, source=source, feeds=feeds, options=options, packages=packages)

    # ------------------------------------------------------------------ running
    def run(self, feeds: Mapping[str, Any], trace=None) -> Dict[str, np.ndarray]:
        """Run the graph on ``feeds`` (input name -> array); returns output name -> array.

        Feeds are never written; large C-contiguous ones are read where they are (no copy),
        and every output is a new array per run, large ones written in place (binding.py).
        ``trace``: a callable or a folder given every node's inputs, outputs and params in
        order (dsl/opgraph/trace.py); the run then goes node by node."""
        arrays = self._check_feeds(feeds)
        if trace is not None:
            from dsl.opgraph.trace import traced_run
            return traced_run(self, arrays, trace)
        if self._host:
            return self._run_by_node(arrays)
        key = tuple(a.shape for a in arrays)
        pool = self._plans.get(key)
        if pool is None:
            pool = self._plan_for(arrays, key)
        if pool is _DYNAMIC:
            return self._run_by_node(arrays)
        plan = pool.checkout()
        try:
            if plan.binding is not None and self.rebind:
                out = plan.binding.run(plan.steps, arrays, plan.flat)
                if plan.flat is None:  # after the first run, as below
                    plan.flat = FlatRun(plan.steps)
                return out
            for buf, a in zip(plan.inputs, arrays):
                np.copyto(buf, a)
            if plan.flat is not None:
                plan.flat.run()
            else:  # the first run of this instance compiles what its launches need; then prepare them
                for fn, args in plan.steps:
                    fn(*args)
                plan.flat = FlatRun(plan.steps)
            return {name: buf.copy() for name, buf in plan.outputs}
        finally:
            pool.checkin(plan)

    __call__ = run

    def run_dask(self, feeds: Mapping[str, Any], batch_axis: int = 0, chunks=None):
        """{output name: lazy dask array}: ``run`` on each chunk of the feeds along ``batch_axis``,
        on Dask's local scheduler or the ``dask.distributed.Client`` in scope (docs/dask.md).
        Feeds are dask arrays, or numpy arrays cut into ``chunks`` rows per chunk."""
        from dsl.dask import run_dask
        return run_dask(self, feeds, batch_axis=batch_axis, chunks=chunks)

    def profile(self, feeds: Mapping[str, Any], repeat: int = 10, warmup: int = 1):
        """Per-node timing of ``repeat`` runs on ``feeds`` -> ``dsl.opgraph.profile.Profile``
        (``.rows``, ``print(...)``, ``.to_markdown()``)."""
        from dsl.opgraph.profile import profile_model
        return profile_model(self, feeds, repeat=repeat, warmup=warmup)

    def _check_feeds(self, feeds) -> List[np.ndarray]:
        exact = self._exact_feeds
        if exact is not None and type(feeds) is dict and len(feeds) == len(exact):
            arrays = []
            for name, npdt, shape in exact:
                a = feeds.get(name)
                if type(a) is not np.ndarray or a.shape != shape or a.dtype != npdt:
                    break
                arrays.append(a)
            else:
                return arrays
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
            if is_host(spec) or a is None or (isinstance(a, (list, tuple)) and a and all(
                    isinstance(x, np.ndarray) for x in a)):  # a sequence / optional, or one given for a tensor
                arrays.append(check_value(a, spec, f"input {name!r}"))
                continue
            if not isinstance(a, np.ndarray):
                a = np.asarray(a)
            if a.dtype != npdt:
                raise TypeError(f"input {name!r} has dtype {a.dtype}, expected {spec.dtype} ({npdt}); "
                                f"convert it with .astype(np.{npdt})")
            if a.ndim != len(shape) or any(d is not None and d != s for d, s in zip(shape, a.shape)):
                raise ValueError(f"input {name!r} has shape {a.shape}, expected {_shape_text(shape)}"
                                 + _dim_hint(shape, a.shape))
            arrays.append(a)
        seen: Dict[str, Tuple[str, int]] = {}
        for k, axis, dim in self._named_dims:
            if is_host(self._in_checks[k][3]):
                continue
            size = arrays[k].shape[axis]
            first = seen.setdefault(dim, (self._in_checks[k][0], size))
            if first[1] != size:
                raise ValueError(f"inputs {first[0]!r} and {self._in_checks[k][0]!r} disagree on dimension "
                                 f"{dim!r}: {first[1]} vs {size}")
        return arrays

    def _signature(self) -> str:
        return ", ".join(f"{n}: {s}" for n, s in self.inputs.items())

    # ------------------------------------------------------------------ planning
    def _plan_for(self, arrays, key):
        specs = self._concrete_specs(arrays)
        pool = _DYNAMIC if specs is None else self._pool(specs)
        with self._lock:
            if key in self._plans:  # another thread planned this signature meanwhile: share its pool
                return self._plans[key]
            if len(self._plans) >= _MAX_PLANS:
                self._plans.pop(next(iter(self._plans)))
            self._plans[key] = pool
        return pool

    def _pool(self, specs: Dict[str, TensorSpec]) -> _PlanPool:
        with compile_batch.batch():  # the plan's kernels compile side by side (backends/compile_batch.py)
            first = self._build_ready(specs)
        return _PlanPool(lambda: self._build_ready(specs), first)

    def _build_ready(self, specs: Dict[str, TensorSpec]) -> _Plan:
        """``_build_plan``, reading the graph's constants still in their artifact first when an
        op is asked for a plan (lazy_constants.py: a model loaded on the same CPU reads none)."""
        try:
            return self._build_plan(specs)
        except lazy_constants.NeedsWeights:
            return self._build_plan(lazy_constants.load_all(self.graph, specs))

    def _concrete_specs(self, arrays) -> Optional[Dict[str, TensorSpec]]:
        """Every tensor's spec for these input shapes; None when a shape needs run-time values."""
        g = self.graph
        specs: Dict[str, TensorSpec] = {}
        for t, a in zip(g.inputs, arrays):
            specs[t.name] = t.spec.with_(shape=a.shape)
        for name in g.constants:
            specs[name] = g.tensors[name].spec
        for n in g.nodes:
            in_specs = [None if t is None else specs[t.name] for t in n.inputs]
            outs = check_and_infer(n.op, in_specs, where=f"node {n.name!r}")
            outs = shape_values(n.op, in_specs, outs, self.backend)
            for t, s in zip(n.outputs, outs):
                if not s.known:
                    return None
                specs[t.name] = s.with_(format=t.spec.format, value=s.value)
        return specs

    def _impl_for(self, node, in_specs):
        """The node's implementation for these run-time input specs.  Nodes whose compiled input
        specs had ``None`` dims ask ``select`` again with the dims filled in, once per distinct
        input shape signature (cached); the others keep the choice made at compile time."""
        if node.name not in self._reselect:
            return self._impls[node.name]
        key = (node.name, tuple(None if s is None else (s.shape, s.dtype, s.format) for s in in_specs))
        impl = self._chosen.get(key)
        if impl is None:
            try:
                impl = node.op.implementation(in_specs, self.backend)
            except VerifyError as e:
                raise VerifyError(f"node {node.name!r}: {e}") from None
            with self._lock:
                if len(self._chosen) >= _MAX_PLANS * max(1, len(self._reselect)):
                    self._chosen.pop(next(iter(self._chosen)))
                self._chosen[key] = impl
        return impl

    def selected(self, feeds: Mapping[str, Any]) -> Dict[str, str]:
        """node name -> the ``kernels`` key each node runs for these feeds' shapes (what
        ``select`` chose; docs/ops.md "Choosing a kernel")."""
        arrays = self._check_feeds(feeds)
        specs = None if self._host else self._concrete_specs(arrays)
        out = {}
        for n in self.graph.nodes:
            if specs is None:
                impl = self._impls[n.name]
            else:
                impl = self._impl_for(n, [None if t is None else specs[t.name] for t in n.inputs])
            out[n.name] = next((k for k, v in n.op.kernels.items() if v is impl), "?")
        return out

    def _free_inplace(self, n, specs: Dict[str, TensorSpec]) -> Dict[int, int]:
        """``Op.free_inplace`` for the node's chosen kernel; only ops that override it are asked
        (selecting a kernel for every node here would also ask nodes that never run)."""
        if type(n.op).free_inplace is Op.free_inplace:
            return {}
        return n.op.free_inplace(self._impl_for(n, [None if t is None else specs[t.name] for t in n.inputs]),
                                 self.backend)

    def _build_plan(self, specs: Dict[str, TensorSpec]) -> _Plan:
        """Allocate every buffer once and turn each node into launches with bound arguments."""
        g = self.graph
        layout = physical_layout(specs)
        for t in g.inputs:
            check_tensor_bytes(*layout[t.name], f"graph {g.name!r} input {t.name!r}", self.max_tensor_bytes)
        for n in g.nodes:
            for t in n.outputs:
                check_tensor_bytes(*layout[t.name], f"node {n.name!r} ({describe(n.op)}) output {t.name!r}",
                                   self.max_tensor_bytes)
        views = concat_views(g.nodes, layout, specs, g.outputs) if self.concat_inplace else {}
        memory = plan_memory(g.nodes, layout, g.outputs, views, self.inplace_all,
                             free_inplace=lambda n: self._free_inplace(n, specs))
        arena = huge_pages.carve(memory.sizes)  # one block, each buffer on a page, 2 MiB pages
        arrays: Dict[str, np.ndarray] = dict(g.constants)
        for t in g.inputs:
            arrays[t.name] = np.empty(*layout[t.name])
        for n in g.nodes:
            for t in n.outputs:
                shape, dt = layout[t.name]
                nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
                if t.name in memory.views:  # a Concat input, inside the Concat's output
                    holder, at = memory.views[t.name]
                    arrays[t.name] = arena[memory.assign[holder]][at:at + nbytes].view(dt).reshape(shape)
                elif t.name in memory.assign:
                    arrays[t.name] = arena[memory.assign[t.name]][:nbytes].view(dt).reshape(shape)
                else:  # graph outputs (copied out after each run) and empty tensors
                    arrays[t.name] = np.empty(shape, dt)
        # an output Identity (Reshape...) of a result only it reads: the result is written there
        direct = written_as_outputs(g.nodes, g.outputs, memory, layout, _read_counts(g))
        for src, out in direct.items():
            arrays[src] = arrays[out].reshape(layout[src][0])
        skipped = {out for out in direct.values()}
        steps, planned, spans, tiled = [], 0, [], {}
        scratch = ScratchPool()  # this instance's scratch buffers
        inplace_outputs = {out for out, _ in memory.inplace}
        read = _read_tensors(g)
        for n in g.nodes:
            first = len(steps)
            if n.outputs and n.outputs[0].name in skipped:
                spans.append((n, first, first))
                planned += 1  # nothing to run, no run() call either
                continue  # its input was written into its output's buffer
            if n.outputs and all(arrays[t.name].size == 0 for t in n.outputs):
                spans.append((n, first, first))
                continue  # every output is empty: nothing to compute (ONNX empty-tensor rule)
            in_specs = tuple(None if t is None else specs[t.name] for t in n.inputs)
            if not node_runs(n.op, in_specs, f"node {n.name!r}"):
                outs = [arrays[t.name] for t in n.outputs]
                steps.append((_run, (_Skipped(n.op), None, [], outs, self.backend, ())))
                spans.append((n, first, len(steps)))
                continue  # can_execute said no: its outputs are zero-filled at every run
            if n.inputs and all(t is not None and t.name in memory.views for t in n.inputs):
                spans.append((n, first, first))
                continue  # a Concat whose inputs were written in place: nothing left to copy
            if copies_onto_itself(n, arrays, memory, read):
                spans.append((n, first, first))
                continue  # a Reshape run in place: its output already holds its input's bytes
            ins = [None if t is None else arrays[t.name] for t in n.inputs]
            outs = _outputs_to_write(n, arrays, read)
            inplace = any(t.name in inplace_outputs for t in n.outputs)  # launches may bind In == Out
            impl = self._impl_for(n, list(in_specs))
            out_specs = [specs[t.name] for t in n.outputs]
            node_steps = None if inplace else self._tiled(n, impl, ins, outs, specs, tiled, in_specs, scratch)
            if node_steps is None:
                node_steps = self._planned(n, impl, ins, outs, in_specs, out_specs, inplace, scratch, n.name)
            if node_steps is None:
                lazy_constants.require_loaded(ins)  # run() at every run reads them
                run = _run_inplace if inplace else _run
                node_steps = [(run, (n.op, impl, ins, outs, self.backend, in_specs))]
            else:
                planned += 1
            steps += node_steps
            if not type(n.op).keeps_padding:
                for t in n.outputs:
                    if F.needs_padding_fix(specs[t.name]):
                        steps.append(_prepare(reorder.zero_padding, (arrays[t.name],),
                                              {"channels": specs[t.name].shape[1]}, self.backend))
            spans.append((n, first, len(steps)))
        inputs = [arrays[t.name] for t in g.inputs]
        outputs = [(t.name, arrays[t.name]) for t in g.outputs]
        bound = binding.build(steps, inputs, outputs, list(g.constants.values()), (_run, _run_inplace), _noop)
        return _Plan(inputs, outputs, steps, memory, specs, planned, spans, tiled, bound)

    def _planned(self, n, impl, ins, outs, in_specs, out_specs, inplace, scratch, owner) -> Optional[list]:
        """The node's declared launches (``op.plan``, asked once per layout) bound to these
        buffers and prepared; None when the op has no plan for them (it calls run() each run)."""
        in_refs = refs(in_specs, "in", ins)
        out_refs = refs(out_specs, "out", outs)
        key = (n.name, id(impl), plan_key(in_refs, out_refs))
        hit = self._launch_plans.get(key, self._launch_plans)
        if hit is self._launch_plans:
            lazy_constants.require_loaded(ins)  # the op packs real arrays
            hit = plan_of(n.op, impl, in_refs, out_refs, self.backend, f"node {n.name!r}")
            with self._lock:
                if len(self._launch_plans) >= _MAX_PLANS * max(1, len(self.graph.nodes)):
                    self._launch_plans.clear()  # many shape signatures: forget, as _plans does
                self._launch_plans[key] = hit
        if hit is None:
            return None
        steps = []
        with inplace_launches() if inplace else contextlib.nullcontext():
            for kernel, args, kwargs, backend in bind_plan(hit, ins, outs, scratch, owner):
                steps.append(_prepare(kernel, args, kwargs, backend or self.backend))
        return steps

    def _tiled(self, n, impl, ins, outs, specs, tiled, in_specs, scratch) -> Optional[list]:
        """The node as one step running its tiles (tiling.py), or None when it runs untiled.
        A node the memory plan runs in place is never tiled: a tile could overwrite what
        another tile still reads."""
        if not self.tiling:
            return None
        plan = tiles.plan_tiles(n.op, [None if t is None else specs[t.name] for t in n.inputs],
                                [specs[t.name] for t in n.outputs], self.tiling, f"node {n.name!r}",
                                self.backend)
        if plan is None:
            return None
        lazy_constants.require_loaded(ins)  # tiles slice their inputs
        backend = self.backend
        count = [0]

        def capture(op, impl, t_ins, t_outs):  # a tile's plan sees its inputs' tile shapes
            t_specs = tuple(None if s is None or a is None else s.with_(shape=a.shape, quant=s.quant)
                            for s, a in zip(in_specs, t_ins))
            o_specs = [specs[t.name].with_(shape=a.shape) if a is not None else specs[t.name]
                       for t, a in zip(n.outputs, t_outs)]
            count[0] += 1  # tiles may run at once: each has its own scratch
            return (self._planned(n, impl, t_ins, t_outs, t_specs, o_specs, False, scratch, (n.name, count[0]))
                    or [(_run, (op, impl, t_ins, t_outs, backend, t_specs))])
        tiled[n.name] = len(plan)
        return [tiles.tile_steps(n.op, impl, ins, outs, plan, backend, capture)]

    def _run_by_node(self, arrays, on_node=None) -> Dict[str, np.ndarray]:
        """Shapes depend on run-time values: infer, allocate and launch node by node.
        ``on_node(node, values)`` before each node and ``on_node(None, values)`` at the end
        (values: tensor name -> array so far): the profiler's clock."""
        g = self.graph
        lazy_constants.load_all(g)  # every op's run() reads its inputs
        vals: Dict[str, np.ndarray] = dict(g.constants)
        specs: Dict[str, TensorSpec] = {name: g.tensors[name].spec for name in g.constants}
        read = _read_tensors(g)
        host_made = set()  # outputs of host ops: references to other values, copied when output
        for t, a in zip(g.inputs, arrays):
            vals[t.name] = a
            specs[t.name] = (t.spec.with_(value=a) if is_host(t.spec)
                             else TensorSpec.of(a).with_(quant=t.spec.quant, value=a))
        for n in g.nodes:
            if on_node is not None:
                on_node(n, vals)
            ins = [None if t is None else vals[t.name] for t in n.inputs]
            in_specs = [None if t is None else specs[t.name].with_(
                value=vals[t.name] if specs[t.name].format == "plain" else None) for t in n.inputs]
            outs = check_and_infer(n.op, in_specs, where=f"node {n.name!r}")
            if runs_on_host(n.op, in_specs, outs):
                for t, s, v in zip(n.outputs, outs, self._run_host(n, ins)):
                    vals[t.name] = v
                    specs[t.name] = s if is_host(s) else TensorSpec.of(v, with_value=False)
                    host_made.add(t.name)
                continue
            impl = self._impl_for(n, in_specs)
            if not all(s.known for s in outs) and hasattr(n.op, "run_dynamic"):
                arrs = run_data_dependent(n.op, impl, ins, self.backend, f"node {n.name!r}",
                                          self.max_tensor_bytes)
                for t, a in zip(n.outputs, arrs):
                    vals[t.name], specs[t.name] = a, TensorSpec.of(a, with_value=False)
                continue
            outs = [s.with_(format=t.spec.format) for s, t in zip(outs, n.outputs)]
            for s, t in zip(outs, n.outputs):
                check_tensor_bytes(F.physical_shape(s.shape, s.format), s.dtype.np,
                                   f"node {n.name!r} ({describe(n.op)}) output {t.name!r}", self.max_tensor_bytes)
            arrs = [np.empty(F.physical_shape(s.shape, s.format), s.dtype.np) for s in outs]
            if arrs and not any(a.size for a in arrs):
                pass  # every output is empty: nothing to compute
            elif not node_runs(n.op, in_specs, f"node {n.name!r}"):
                for a in arrs:
                    a.fill(0)
            else:
                run_op(n.op, impl, ins, _outputs_to_write(n, dict(zip(
                    (t.name for t in n.outputs), arrs)), read), self.backend, in_specs)
                if not type(n.op).keeps_padding:
                    for s, a in zip(outs, arrs):
                        if F.needs_padding_fix(s):
                            reorder.fix_padding(a, s.shape[1], self.backend)
            for t, s, a in zip(n.outputs, outs, arrs):
                vals[t.name], specs[t.name] = a, s
        if on_node is not None:
            on_node(None, vals)
        return {t.name: (_detached(vals[t.name]) if t.kind != "node" or t.name in host_made else vals[t.name])
                for t in g.outputs}

    def _run_host(self, n, ins) -> list:
        """A node that takes or gives sequences / optionals: ``op.run_host`` moves references
        (its tensor math launches kernels itself); arrays it makes are checked against the cap."""
        outs = list(n.op.run_host(list(ins), self.backend))
        if len(outs) != len(n.outputs):
            raise VerifyError(f"node {n.name!r} ({describe(n.op)}): run_host gave {len(outs)} values for "
                              f"{len(n.outputs)} outputs")
        for t, v in zip(n.outputs, outs):
            for a in (v if isinstance(v, list) else [] if v is None else [v]):
                check_tensor_bytes(a.shape, a.dtype, f"node {n.name!r} ({describe(n.op)}) output {t.name!r}",
                                   self.max_tensor_bytes)
        return outs

    # ------------------------------------------------------------------ introspection
    def memory_plan(self, **shapes) -> Optional[MemoryPlan]:
        """The memory plan for the static shapes (or the first planned shape signature)."""
        for pool in list(self._plans.values()):
            if pool is not _DYNAMIC:
                return pool.first.memory
        return None

    def _repr_html_(self) -> str:
        import html
        return (f"<div>{self.graph._repr_svg_()}<pre>{html.escape(str(self))}</pre></div>")

    def __repr__(self) -> str:
        return (f"<dsl.Model {self.graph.name!r} backend={self.backend}: {len(self.graph.nodes)} nodes, "
                f"inputs ({self._signature()})>")

    def __str__(self) -> str:
        g = self.graph
        lines = [f"model {g.name} [{self.backend}] ({self._signature()}) -> "
                 f"({', '.join(f'{n}: {s}' for n, s in self.outputs.items())})",
                 "  passes: " + ", ".join(f"{k}={v}" for k, v in self.stats.items())]
        mem = self.memory_plan()
        plan = next((p.first for p in list(self._plans.values()) if p is not _DYNAMIC), None)
        if plan is not None:
            lines.append(f"  launches: {len(plan.steps)} steps, {plan.planned} of "
                         f"{len(g.nodes)} nodes planned")
        shared = {} if mem is None else mem.assign
        for n in g.nodes:
            impl = self._impls[n.name]
            impl_name = next((k for k, v in n.op.kernels.items() if v is impl), "?")
            if n.name in self._reselect:
                impl_name += " (chosen again per run-time shape)"
            bufs = ", ".join(f"{t.name}->buf{shared[t.name]}" for t in n.outputs if t.name in shared)
            ins = ", ".join("_" if t is None else f"{t.name}:{t.spec}" for t in n.inputs)
            ntiles = 0 if plan is None else plan.tiled.get(n.name, 0)
            lines.append(f"  {n.name}: {n.op!r}({ins}) -> "
                         f"{', '.join(f'{t.name}:{t.spec}' for t in n.outputs)}  impl={impl_name}"
                         + (f"  [{bufs}]" if bufs else "") + (f"  tiles={ntiles}" if ntiles else ""))
        if mem is not None:
            lines.append(f"  memory: arena {mem.arena_bytes} B in {len(mem.sizes)} buffers "
                         f"(one buffer per tensor: {mem.naive_bytes} B), in-place: {len(mem.inplace)}")
        return "\n".join(lines)


_UNPICKLED: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()  # pickle token -> model made here


def _unpickle_model(cls, token: str, graph, backend: str, stats, max_tensor_bytes, tiling,
                    concat_inplace: bool = True) -> "Model":
    hit = _UNPICKLED.get(token)
    if hit is not None:
        return hit
    impls = {}
    for n in graph.nodes:  # what passes.select_kernels chose where the model was compiled
        try:
            impls[n.name] = n.op.implementation([None if t is None else t.spec for t in n.inputs], backend)
        except VerifyError as e:
            raise VerifyError(f"node {n.name!r}: {e}") from None
    model = _UNPICKLED[token] = cls(graph, backend, impls, stats, max_tensor_bytes=max_tensor_bytes, tiling=tiling,
                                    concat_inplace=concat_inplace)
    model._pickle_token = token
    return model


def _detached(v):
    """A graph output the caller owns: arrays copied, sequences as new lists of copies."""
    if v is None:
        return None
    if isinstance(v, list):
        return [a.copy() for a in v]
    return v.copy()


def run_data_dependent(op: Op, impl, ins, backend: str, where: str = "eager call",
                       limit: Optional[int] = None) -> List[np.ndarray]:
    """Run a node whose output *shapes* depend on input *values* (NonZero: one column per
    non-zero element).  Such an op leaves those dims ``None`` in ``infer`` even on concrete
    inputs and defines ``run_dynamic(impl, inputs, backend) -> [output arrays]``, which
    launches its kernels (typically count, then fill) and allocates the outputs itself.
    ``_run_by_node`` calls this for such nodes (the model runs node by node, since nothing
    after them can be planned ahead); the op's eager call uses it too.  Outputs are plain
    format and checked against the size cap."""
    outs = [np.ascontiguousarray(a) for a in op.run_dynamic(impl, ins, backend)]
    for k, a in enumerate(outs):
        check_tensor_bytes(a.shape, a.dtype, f"{where} ({describe(op)}) output {k}", tensor_limit(limit))
    return outs




def _read_tensors(g) -> set:
    """Names of the tensors some node or the graph's outputs read."""
    return {t.name for n in g.nodes for t in n.inputs if t is not None} | {t.name for t in g.outputs}


def _read_counts(g) -> Dict[str, int]:
    """Tensor name -> how many node inputs and graph outputs read it."""
    counts: Dict[str, int] = {}
    for t in [t for n in g.nodes for t in n.inputs if t is not None] + list(g.outputs):
        counts[t.name] = counts.get(t.name, 0) + 1
    return counts


def _outputs_to_write(node, arrays, read) -> list:
    """The node's output buffers, ``None`` for the ones nothing reads when its op skips those."""
    skip = type(node.op).skips_unused_outputs
    return [None if skip and t.name not in read else arrays[t.name] for t in node.outputs]


class _Skipped:
    """Stands in a plan for a node ``can_execute`` declined: its run zero-fills the outputs
    (a plan's buffers are reused, so skipping must still define them at every run)."""

    def __init__(self, op: Op):
        self.op = op

    def run(self, impl, inputs, outputs, backend) -> None:
        for o in outputs:
            o.fill(0)


def _run(op: Op, impl, ins, outs, backend, specs) -> None:
    run_op(op, impl, ins, outs, backend, specs)


def _run_inplace(op: Op, impl, ins, outs, backend, specs) -> None:
    """A node the memory plan runs in place: its launches may bind one buffer as In and Out."""
    with inplace_launches():
        run_op(op, impl, ins, outs, backend, specs)


def _prepare(kernel, args, kwargs, backend):
    """(launcher, (bound values, grid)) for one kernel launch, checked once now."""
    kwargs = dict(kwargs)
    grid = kwargs.pop("grid", None)
    launcher, values, grid = kernel.prepare(args, kwargs, backend=backend, grid=grid)
    if grid == 0:
        return _noop, ()
    return launcher, (launcher.freeze(values), grid)  # every run launches these very values


def _noop():
    return None


def _shape_text(shape) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + (",)" if len(shape) == 1 else ")")


def _dim_hint(want, got) -> str:
    if len(want) != len(got):
        return f": rank {len(got)}, expected rank {len(want)}"
    for i, (w, g) in enumerate(zip(want, got)):
        if w is not None and w != g:
            return f": dim {i} is {g}, expected {w}"
    return ""
