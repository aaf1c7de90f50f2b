"""Control flow: ONNX If, Loop and Scan.

Each op holds its body (or branches) as a ``dsl.opgraph.body.Body`` param: a ``dsl.Graph``
whose inputs are the formal body inputs followed by the outer values it captures (the
importer appends those to the node's inputs, dsl/onnx/subgraph.py).  The body is compiled
once per backend and run per branch taken / iteration / scan step, so its math is the
DSL kernels of its own nodes; these ops only decide what runs, slice scan inputs (views)
and stack per-step outputs.

How many iterations a Loop makes, and which branch an If takes, depend on input values,
so these are data-dependent ops (``ops.gather.DataDependent``): outputs whose shapes are
not known from specs alone are ``None`` dims and the model runs node by node.  Scan's
shapes follow from its inputs' shapes, and an If whose branches agree on shapes (or whose
condition is a constant) has known outputs, so such graphs are planned as usual.

The importer builds a body with its formal inputs' specs from ``body_formals`` and, for
loop-carried values whose shapes change between iterations, widens them with ``relax``
(differing dims become ``None``) and builds again.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

import dsl
from dsl.opgraph.body import Body
from dsl.opgraph.host_values import OptionalSpec, SequenceSpec, kind_name, merged_elem_shape
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.gather import DataDependent


def merge_specs(a: TensorSpec, b: TensorSpec, what: str) -> TensorSpec:
    """One spec covering both: equal dims kept, differing ones ``None`` (dtypes must agree).
    Ranks that differ give the larger rank with every dim unknown: a spec cannot say "rank
    unknown", and unknown dims at least make the model infer again with the real values."""
    if isinstance(a, OptionalSpec) != isinstance(b, OptionalSpec):  # a value of T is a present optional(T)
        opt, other = (a, b) if isinstance(a, OptionalSpec) else (b, a)
        return OptionalSpec(merge_specs(opt.elem, other, what))
    if type(a) is not type(b):
        raise VerifyError(f"{what}: {kind_name(a)} ({a}) vs {kind_name(b)} ({b}); both must be the same kind")
    if a.dtype != b.dtype:
        raise VerifyError(f"{what}: dtype {a.dtype} vs {b.dtype}; both must be the same")
    if isinstance(a, SequenceSpec):
        return SequenceSpec(a.dtype, merged_elem_shape(a.elem_shape, b.elem_shape))
    if isinstance(a, OptionalSpec):
        return OptionalSpec(merge_specs(a.elem, b.elem, what))
    if a.ndim != b.ndim:
        return TensorSpec((None,) * max(a.ndim, b.ndim), a.dtype)
    return TensorSpec(tuple(x if x == y else None for x, y in zip(a.shape, b.shape)), a.dtype)


def _widened(formals: List[TensorSpec], outs: List[TensorSpec], what: str) -> List[TensorSpec]:
    """Formal specs of fed-back values, widened to fit the body outputs fed back into them
    (those missing or of another dtype are left for verify to report)."""
    return [merge_specs(f, outs[k], f"{what} {k}") if k < len(outs) and outs[k].dtype == f.dtype else f
            for k, f in enumerate(formals)]


def _scalar_value(a: np.ndarray, what: str):
    if a.size != 1:
        raise VerifyError(f"{what} must hold exactly one element, got shape {a.shape}")
    return a.reshape(-1)[0]


def _one_element(spec: Optional[TensorSpec], dtype, what: str) -> None:
    if spec is None:
        return
    if spec.dtype != dtype:
        raise VerifyError(f"{what} must be {dtype}, got {spec}")
    if spec.size is not None and spec.size != 1:
        raise VerifyError(f"{what} must hold exactly one element, got {spec}")


def _stack(steps: List[np.ndarray], axis: int, spec: TensorSpec) -> np.ndarray:
    """Per-step outputs stacked along a new ``axis`` (an empty one of the body's shape when
    there were no steps); every step must have the same shape."""
    if not steps:
        inner = [0 if d is None else d for d in spec.shape]
        inner.insert(axis, 0)
        return np.empty(tuple(inner), spec.dtype.np)
    first = steps[0].shape
    for k, s in enumerate(steps):
        if s.shape != first:
            raise VerifyError(f"scan output changes shape between iterations: {first} at step 0, "
                              f"{s.shape} at step {k}; every step must give the same shape")
    return np.stack(steps, axis=axis)


def _copy_out(results: Sequence[np.ndarray], outputs: Sequence[np.ndarray], what: str) -> None:
    """Results of a run with known output shapes into the model's buffers."""
    for k, (o, r) in enumerate(zip(outputs, results)):
        if o is None:
            continue
        if o.shape != r.shape:
            raise VerifyError(f"{what} output {k}: the body gave shape {r.shape}, the graph planned {o.shape}")
        np.copyto(o, r)


class ControlFlow(DataDependent):
    """Shared behaviour: the implementation is evaluating the body; results computed by
    ``run_dynamic`` fill the planned buffers when every output shape was known.  Values
    that are sequences or optionals pass through ``run_host`` (host_values.py)."""
    kernels = {"body": Body.run}
    foldable = True
    host_values = True

    def run_host(self, inputs, backend):
        return self.run_dynamic(None, inputs, backend)

    @classmethod
    def body_formals(cls, attr: str, attrs: dict, specs: Sequence[Optional[TensorSpec]]) -> List[TensorSpec]:
        """Specs of the formal inputs of body ``attr`` for a node with these input specs."""
        return []

    @classmethod
    def relax(cls, attr: str, attrs: dict, formals: List[TensorSpec], outs: List[TensorSpec]) -> List[TensorSpec]:
        """Formal specs widened so the values fed back from ``outs`` fit them (loops)."""
        return formals

    @classmethod
    def never_run(cls, specs: Sequence[Optional[TensorSpec]]) -> dict:
        """{body param: the body param that runs instead} for bodies these inputs can never run."""
        return {}

    def run(self, impl, inputs, outputs, backend):
        _copy_out(self.run_dynamic(impl, inputs, backend), outputs, self.op_type)


# --------------------------------------------------------------------------- If

@dsl.op("If", since=1)
class If(ControlFlow):
    """Runs ``then_branch`` when ``cond`` is true, else ``else_branch``; the node's inputs
    after ``cond`` are the values the branches capture (then's, then else's)."""
    then_branch: Body
    else_branch: Body

    @classmethod
    def never_run(cls, specs):
        cond = specs[0] if specs else None
        if cond is None or cond.value is None or cond.value.size != 1:
            return {}
        return {"else_branch": "then_branch"} if bool(cond.value.reshape(-1)[0]) else {"then_branch": "else_branch"}

    def _split(self, captures):
        n = self.then_branch.n_captures
        return captures[:n], captures[n:]

    def verify(self, cond, *captures):
        _one_element(cond, dsl.bool_, "If input 'cond'")
        t, e = self.then_branch, self.else_branch
        for name, b in (("then_branch", t), ("else_branch", e)):
            if b.n_formal:
                raise VerifyError(f"If {name} takes no formal inputs, its graph declares {b.n_formal}")
        if len(captures) != t.n_captures + e.n_captures:
            raise VerifyError(f"If takes cond and the {t.n_captures + e.n_captures} captured values of its "
                              f"branches, got {len(captures)} inputs after cond")
        if len(t.output_specs) != len(e.output_specs):
            raise VerifyError(f"If branches give different numbers of outputs: then_branch "
                              f"{len(t.output_specs)}, else_branch {len(e.output_specs)}")
        for k, (a, b) in enumerate(zip(t.output_specs, e.output_specs)):
            if a.dtype != b.dtype:
                raise VerifyError(f"If output {k}: then_branch gives {a.dtype}, else_branch {b.dtype}; "
                                  f"both branches must give the same dtype")

    def infer(self, cond, *captures):
        if cond.value is not None:  # a known condition: that branch's shapes exactly
            body = self.then_branch if bool(_scalar_value(cond.value, "If cond")) else self.else_branch
            return tuple(s.with_() for s in body.output_specs)
        return tuple(merge_specs(a, b, f"If output {k}") for k, (a, b) in
                     enumerate(zip(self.then_branch.output_specs, self.else_branch.output_specs)))

    def run_dynamic(self, impl, inputs, backend):
        then_caps, else_caps = self._split(list(inputs[1:]))
        if bool(_scalar_value(inputs[0], "If input 'cond'")):
            return self.then_branch.run(backend, [], then_caps)
        return self.else_branch.run(backend, [], else_caps)


# --------------------------------------------------------------------------- Loop

@dsl.op("Loop", since=1)
class Loop(ControlFlow):
    """``for i in range(M) while cond``: the body maps (i, cond, carried...) to (cond,
    carried..., scan outputs...); scan outputs are stacked along a new first axis.  ``M``
    and ``cond`` are optional (absent: no trip limit / always true)."""
    body: Body

    @classmethod
    def body_formals(cls, attr, attrs, specs):
        return [TensorSpec((), dsl.i64), TensorSpec((), dsl.bool_)] + [s.with_() for s in specs[2:]]

    @classmethod
    def relax(cls, attr, attrs, formals, outs):
        return formals[:2] + _widened(formals[2:], outs[1:], "Loop carried value")

    @property
    def n_carried(self) -> int:
        return self.body.n_formal - 2

    def verify(self, M=None, cond=None, *rest):
        _one_element(M, dsl.i64, "Loop input 'M' (trip count)")
        _one_element(cond, dsl.bool_, "Loop input 'cond'")
        b = self.body
        if b.n_formal < 2:
            raise VerifyError(f"Loop body must take (iteration_num, condition, carried values...), its graph "
                              f"declares {b.n_formal} inputs")
        n = self.n_carried
        if len(rest) != n + b.n_captures:
            raise VerifyError(f"Loop takes M, cond, {n} carried values and {b.n_captures} captured values, "
                              f"got {len(rest)} inputs after M and cond")
        outs = b.output_specs
        if len(outs) < 1 + n:
            raise VerifyError(f"Loop body must give (condition, {n} carried values, scan outputs...), it gives "
                              f"{len(outs)} outputs")
        if outs[0].dtype != dsl.bool_:
            raise VerifyError(f"Loop body output 0 (the condition) must be bool, got {outs[0]}")
        for k, s in enumerate(outs[1 + n:]):
            if not isinstance(s, TensorSpec):
                raise VerifyError(f"Loop scan output {k} is {kind_name(s)} ({s}); scan outputs are stacked, so "
                                  f"they must be tensors (carry a sequence as a loop-carried value instead)")
        for k in range(n):
            if rest[k].dtype != outs[1 + k].dtype:
                raise VerifyError(f"Loop carried value {k}: initial {rest[k].dtype}, body output "
                                  f"{outs[1 + k].dtype}; the body must keep each carried value's dtype")

    def infer(self, M=None, cond=None, *rest):
        n = self.n_carried
        outs = self.body.output_specs
        final = [merge_specs(rest[k], outs[1 + k], f"Loop carried value {k}") for k in range(n)]
        scans = [TensorSpec((None,) + s.shape, s.dtype) for s in outs[1 + n:]]
        return tuple(final + scans)

    def run_dynamic(self, impl, inputs, backend):
        M, cond, rest = inputs[0], inputs[1] if len(inputs) > 1 else None, list(inputs[2:])
        n = self.n_carried
        carried, captures = rest[:n], rest[n:]
        trips = None if M is None else int(_scalar_value(M, "Loop input 'M'"))
        keep = True if cond is None else bool(_scalar_value(cond, "Loop input 'cond'"))
        specs = self.body.output_specs
        steps: List[List[np.ndarray]] = [[] for _ in specs[1 + n:]]
        i = 0
        while keep and (trips is None or i < trips):
            outs = self.body.run(backend, [np.array(i, np.int64), np.array(keep)] + carried, captures)
            keep = bool(_scalar_value(outs[0], "Loop body output 0 (the condition)"))
            carried = outs[1:1 + n]
            for k, v in enumerate(outs[1 + n:]):
                steps[k].append(v)
            i += 1
        return list(carried) + [_stack(s, 0, spec) for s, spec in zip(steps, specs[1 + n:])]


# --------------------------------------------------------------------------- Scan

def _axes(values: Optional[Tuple[int, ...]], count: int, what: str) -> List[int]:
    if values is None:
        return [0] * count
    if len(values) != count:
        raise VerifyError(f"Scan {what} has {len(values)} entries, expected {count}")
    return list(values)


def _norm(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise VerifyError(f"Scan {what} {axis} is out of range for rank {rank}; accepted: {-rank}..{rank - 1}")
    return axis % rank


def _directions(values, count: int, what: str) -> List[int]:
    out = _axes(values, count, what)
    bad = [d for d in out if d not in (0, 1)]
    if bad:
        raise VerifyError(f"Scan {what} must be 0 (forward) or 1 (reverse), got {bad[0]}")
    return out


def _drop(shape, axis: int):
    return tuple(d for k, d in enumerate(shape) if k != axis)


def _take(a: np.ndarray, axis: int, index: int) -> np.ndarray:
    return a[(slice(None),) * axis + (index,)]


def _num_scan_inputs(scan) -> int:
    """Scan's ``num_scan_inputs``, checked against its body (both opset forms)."""
    m, n_formal = scan.num_scan_inputs, scan.body.n_formal
    if not 0 < m <= n_formal:
        raise VerifyError(f"Scan num_scan_inputs {m} must be in 1..{n_formal} (the body's formal inputs)")
    return m


@dsl.op("Scan", since=9)
class Scan(ControlFlow):
    """Iterates the body over slices of the scan inputs along ``scan_input_axes`` (reversed
    where ``scan_input_directions`` is 1), threading N state values through; per-step
    outputs are stacked along ``scan_output_axes`` (reversed per ``scan_output_directions``)."""
    host_values = False  # scans slice tensors only
    body: Body
    num_scan_inputs: int
    scan_input_axes: Optional[Tuple[int, ...]] = None
    scan_input_directions: Optional[Tuple[int, ...]] = None
    scan_output_axes: Optional[Tuple[int, ...]] = None
    scan_output_directions: Optional[Tuple[int, ...]] = None

    @classmethod
    def body_formals(cls, attr, attrs, specs):
        m = int(attrs.get("num_scan_inputs", 0))
        if not 0 < m <= len(specs):
            raise VerifyError(f"Scan num_scan_inputs must be in 1..{len(specs)} (the node's inputs), got {m}")
        n = len(specs) - m
        axes = attrs.get("scan_input_axes") or [0] * m
        formals = [s.with_() for s in specs[:n]]
        for s, axis in zip(specs[n:], axes):
            formals.append(TensorSpec(_drop(s.shape, _norm(axis, s.ndim, "scan_input_axes entry")), s.dtype))
        return formals

    @classmethod
    def relax(cls, attr, attrs, formals, outs):
        n = len(formals) - int(attrs.get("num_scan_inputs", 0))
        return _widened(formals[:n], outs, "Scan state") + formals[n:]

    @property
    def n_states(self) -> int:
        return self.body.n_formal - self.num_scan_inputs

    def _layout(self, specs):
        """(input axes, input directions, output axes, output directions), checked."""
        n, m = self.n_states, self.num_scan_inputs
        outs = self.body.output_specs[n:]
        in_axes = [_norm(a, s.ndim, "scan_input_axes entry")
                   for a, s in zip(_axes(self.scan_input_axes, m, "scan_input_axes"), specs[n:n + m])]
        out_axes = [_norm(a, s.ndim + 1, "scan_output_axes entry")
                    for a, s in zip(_axes(self.scan_output_axes, len(outs), "scan_output_axes"), outs)]
        return (in_axes, _directions(self.scan_input_directions, m, "scan_input_directions"), out_axes,
                _directions(self.scan_output_directions, len(outs), "scan_output_directions"))

    def verify(self, *inputs):
        b, m = self.body, _num_scan_inputs(self)
        n = self.n_states
        if len(inputs) != n + m + b.n_captures:
            raise VerifyError(f"Scan takes {n} initial states, {m} scan inputs and {b.n_captures} captured "
                              f"values, got {len(inputs)} inputs")
        outs = b.output_specs
        if len(outs) < n:
            raise VerifyError(f"Scan body must give {n} states and then scan outputs, it gives {len(outs)} outputs")
        for k in range(n):
            if inputs[k].dtype != outs[k].dtype:
                raise VerifyError(f"Scan state {k}: initial {inputs[k].dtype}, body output {outs[k].dtype}; the "
                                  f"body must keep each state's dtype")
        in_axes = self._layout(inputs)[0]
        lengths = {inputs[n + j].shape[a] for j, a in enumerate(in_axes)} - {None}
        if len(lengths) > 1:
            raise VerifyError(f"Scan inputs have different lengths along their scan axes: {sorted(lengths)}")

    def infer(self, *inputs):
        n = self.n_states
        in_axes, _, out_axes, _ = self._layout(inputs)
        lengths = [inputs[n + j].shape[a] for j, a in enumerate(in_axes)]
        steps = next((d for d in lengths if d is not None), None)
        outs = self.body.output_specs
        states = [merge_specs(inputs[k], outs[k], f"Scan state {k}") for k in range(n)]
        scans = []
        for s, axis in zip(outs[n:], out_axes):
            shape = list(s.shape)
            shape.insert(axis, steps)
            scans.append(TensorSpec(tuple(shape), s.dtype))
        return tuple(states + scans)

    def run_dynamic(self, impl, inputs, backend):
        n, m = self.n_states, self.num_scan_inputs
        in_axes, in_dirs, out_axes, out_dirs = self._layout([TensorSpec.of(a, False) for a in inputs])
        states, xs, captures = list(inputs[:n]), inputs[n:n + m], list(inputs[n + m:])
        steps = xs[0].shape[in_axes[0]]
        collected: List[List[np.ndarray]] = [[] for _ in out_axes]
        for t in range(steps):
            slices = [_take(x, a, steps - 1 - t if d else t) for x, a, d in zip(xs, in_axes, in_dirs)]
            outs = self.body.run(backend, states + slices, captures)
            states = outs[:n]
            for k, v in enumerate(outs[n:]):
                collected[k].append(v)
        specs = self.body.output_specs[n:]
        return states + [_stack(c[::-1] if d else c, a, s)
                         for c, a, d, s in zip(collected, out_axes, out_dirs, specs)]


@dsl.op("Scan", since=8, until=8)
class Scan8(ControlFlow):
    """Scan of opset 8: every input has a batch axis 0 and scans along axis 1; the optional
    first input ``sequence_lens`` (i32, one per batch entry) stops a batch entry early, its
    scan outputs zero past its length."""
    host_values = False  # scans slice tensors only
    body: Body
    num_scan_inputs: int
    directions: Optional[Tuple[int, ...]] = None

    @classmethod
    def body_formals(cls, attr, attrs, specs):
        rest = list(specs[1:])
        m = int(attrs.get("num_scan_inputs", 0))
        if not 0 < m <= len(rest):
            raise VerifyError(f"Scan num_scan_inputs must be in 1..{len(rest)} (the node's inputs after "
                              f"sequence_lens), got {m}")
        n = len(rest) - m
        return ([TensorSpec(s.shape[1:], s.dtype) for s in rest[:n]]
                + [TensorSpec(s.shape[2:], s.dtype) for s in rest[n:]])

    @classmethod
    def relax(cls, attr, attrs, formals, outs):
        return Scan.relax(attr, attrs, formals, outs)

    @property
    def n_states(self) -> int:
        return self.body.n_formal - self.num_scan_inputs

    def verify(self, sequence_lens=None, *rest):
        b, m = self.body, _num_scan_inputs(self)
        n = self.n_states
        if len(rest) != n + m + b.n_captures:
            raise VerifyError(f"Scan takes sequence_lens, {n} initial states, {m} scan inputs and "
                              f"{b.n_captures} captured values, got {len(rest)} inputs after sequence_lens")
        if sequence_lens is not None and (sequence_lens.dtype != dsl.i64 or sequence_lens.ndim != 1):
            raise VerifyError(f"Scan input 'sequence_lens' must be a 1-D i64 tensor, got {sequence_lens}")
        for k, x in enumerate(rest[:n + m]):
            if x.ndim < (1 if k < n else 2):
                raise VerifyError(f"Scan (opset 8) inputs carry a batch axis (scan inputs: and a sequence "
                                  f"axis), got {x}")
        _directions(self.directions, m, "directions")
        if len(b.output_specs) < n:
            raise VerifyError(f"Scan body must give {n} states and then scan outputs, it gives "
                              f"{len(b.output_specs)} outputs")

    def infer(self, sequence_lens=None, *rest):
        n, m = self.n_states, self.num_scan_inputs
        batch = next((x.shape[0] for x in rest[:n + m] if x.shape[0] is not None), None)
        steps = next((x.shape[1] for x in rest[n:n + m] if x.shape[1] is not None), None)
        outs = self.body.output_specs
        states = [merge_specs(TensorSpec(rest[k].shape[1:], rest[k].dtype), outs[k], f"Scan state {k}")
                  for k in range(n)]
        return tuple([TensorSpec((batch,) + s.shape, s.dtype) for s in states]
                     + [TensorSpec((batch, steps) + s.shape, s.dtype) for s in outs[n:]])

    def run_dynamic(self, impl, inputs, backend):
        lens, rest = inputs[0], list(inputs[1:])
        n, m = self.n_states, self.num_scan_inputs
        dirs = _directions(self.directions, m, "directions")
        states, xs, captures = rest[:n], rest[n:n + m], rest[n + m:]
        batch, steps = xs[0].shape[0], xs[0].shape[1]
        specs = self.body.output_specs[n:]
        finals, scans = [], []
        for b in range(batch):
            count = steps if lens is None else int(lens[b])
            if not 0 <= count <= steps:
                raise VerifyError(f"Scan sequence_lens[{b}] = {count} is outside 0..{steps} (the sequence axis)")
            st = [s[b] for s in states]
            per: List[List[np.ndarray]] = [[] for _ in specs]
            for t in range(count):
                slices = [x[b, count - 1 - t if d else t] for x, d in zip(xs, dirs)]
                outs = self.body.run(backend, st + slices, captures)
                st = outs[:n]
                for k, v in enumerate(outs[n:]):
                    per[k].append(v)
            finals.append(st)
            scans.append(per)
        out = [np.stack([f[k] for f in finals]) if batch else np.empty((0,) + states[k].shape[1:], states[k].dtype)
               for k in range(n)]
        for k, spec in enumerate(specs):
            shape = next((p[k][0].shape for p in scans if p[k]), tuple(0 if d is None else d for d in spec.shape))
            y = np.zeros((batch, steps) + shape, spec.dtype.np)
            for b, per in enumerate(scans):
                if per[k]:
                    y[b, :len(per[k])] = np.stack(per[k])
            out.append(y)
        return out
