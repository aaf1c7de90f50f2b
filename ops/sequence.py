"""Sequence ops: SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt, SequenceErase,
SequenceLength, SplitToSequence, ConcatFromSequence and SequenceMap.

A sequence is a host value, a Python list of arrays (dsl/opgraph/host_values.py).  Making,
indexing and editing one moves references to tensors that kernels computed, so those ops
are ``run_host`` only; the two that copy data (SplitToSequence, ConcatFromSequence) launch
shape.py's ``strided_copy_kernel``, the kernel Split and Concat use, so they add no compile.
SequenceMap runs its body graph once per element (like Loop, ops/control_flow.py).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

import dsl
from dsl.opgraph.body import Body
from dsl.opgraph.host_values import HOST, SequenceSpec, is_host, kind_name, merged_elem_shape
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.shape import contiguous_strides, launch_strided, norm_axis, strided_copy_kernel

_INDEX_TYPES = (dsl.i32, dsl.i64)


def _sequence(spec, op: str, name: str = "input_sequence") -> SequenceSpec:
    if not isinstance(spec, SequenceSpec):
        raise VerifyError(f"{op} input {name!r} must be a sequence, got {kind_name(spec)} ({spec})")
    return spec


def _tensor(spec, op: str, name: str) -> TensorSpec:
    if is_host(spec):
        raise VerifyError(f"{op} input {name!r} must be a tensor, got {kind_name(spec)} ({spec})")
    return spec


def _position_spec(spec, op: str) -> None:
    """``position``: a scalar (or one-element) i32/i64 tensor."""
    if spec is None:
        return
    _tensor(spec, op, "position")
    if spec.dtype not in _INDEX_TYPES or (spec.size is not None and spec.size != 1) or spec.ndim > 1:
        raise VerifyError(f"{op} input 'position' must be a scalar i32 or i64 tensor, got {spec}")


def _position(value: Optional[np.ndarray], length: int, op: str, insert: bool = False) -> Optional[int]:
    """A run-time position made non-negative; accepted: -n..n-1 (-n..n for an insert)."""
    if value is None:
        return None
    p = int(np.asarray(value).reshape(-1)[0])
    hi = length if insert else length - 1
    if not -length <= p <= hi:
        raise VerifyError(f"{op} position {p} is out of range for a sequence of {length} tensors; "
                          f"accepted: {-length}..{hi}")
    return p + length if p < 0 else p


def _element_of(seq: SequenceSpec, x: TensorSpec, op: str, what: str) -> None:
    if x.dtype != seq.dtype:
        raise VerifyError(f"{op}: {what} is {x}, but the sequence holds {seq.dtype} tensors; both must "
                          f"have one dtype")


class _SequenceOp(dsl.Op):
    """Host ops: they move references, so nothing is folded or planned for them."""

    host_values = "always"
    kernels = {"host": HOST}
    foldable = False
    replay = False


@dsl.op("SequenceEmpty", since=11)
class SequenceEmpty(_SequenceOp):
    """An empty sequence of ``dtype`` tensors (float by default)."""

    dtype: Optional[dsl.DType] = None

    def infer(self):  # known to be empty: the first insert gives the element shape
        return SequenceSpec(self.dtype or dsl.f32, value=())

    def run_host(self, inputs, backend):
        return [[]]


@dsl.op("SequenceConstruct", since=11)
class SequenceConstruct(_SequenceOp):
    """A sequence of the inputs (one dtype), in order."""

    def verify(self, *xs):
        if not xs:
            raise VerifyError("SequenceConstruct needs at least one input tensor")
        for k, x in enumerate(xs):
            _tensor(x, "SequenceConstruct", f"inputs[{k}]")
            if x.dtype != xs[0].dtype:
                raise VerifyError(f"SequenceConstruct inputs need one dtype: input 0 is {xs[0]}, input {k} is {x}")

    def infer(self, *xs):
        shape = xs[0].shape
        for x in xs[1:]:
            shape = merged_elem_shape(shape, x.shape)
        return SequenceSpec(xs[0].dtype, shape)

    def run_host(self, inputs, backend):
        return [list(inputs)]


@dsl.op("SequenceInsert", since=11)
class SequenceInsert(_SequenceOp):
    """The sequence with ``tensor`` inserted at ``position`` (default: at the end)."""

    def verify(self, seq, tensor, position=None):
        s = _sequence(seq, "SequenceInsert")
        _element_of(s, _tensor(tensor, "SequenceInsert", "tensor"), "SequenceInsert", "input 'tensor'")
        _position_spec(position, "SequenceInsert")

    def infer(self, seq, tensor, position=None):
        if seq.value is not None and not seq.value:  # into a known-empty sequence: its shape alone
            return SequenceSpec(seq.dtype, tensor.shape)
        return SequenceSpec(seq.dtype, merged_elem_shape(seq.elem_shape, tensor.shape))

    def run_host(self, inputs, backend):
        seq, tensor = list(inputs[0]), inputs[1]
        p = _position(inputs[2] if len(inputs) > 2 else None, len(seq), "SequenceInsert", insert=True)
        seq.insert(len(seq) if p is None else p, tensor)
        return [seq]


@dsl.op("SequenceAt", since=11)
class SequenceAt(_SequenceOp):
    """The tensor at ``position`` (negative counts from the back)."""

    def verify(self, seq, position):
        _sequence(seq, "SequenceAt")
        if position is None:
            raise VerifyError("SequenceAt needs its 'position' input")
        _position_spec(position, "SequenceAt")

    def infer(self, seq, position):
        if seq.value is not None and position.value is not None:
            return TensorSpec(seq.value[_position(position.value, len(seq.value), "SequenceAt")].shape, seq.dtype)
        if seq.elem_shape is None:
            raise VerifyError(f"SequenceAt of {seq}: the rank of the sequence's tensors is unknown; declare "
                              f"the sequence's element shape (at least its rank)")
        return TensorSpec(seq.elem_shape, seq.dtype)

    def run_host(self, inputs, backend):
        seq = inputs[0]
        return [seq[_position(inputs[1], len(seq), "SequenceAt")]]


@dsl.op("SequenceErase", since=11)
class SequenceErase(_SequenceOp):
    """The sequence without the tensor at ``position`` (default: the last one)."""

    def verify(self, seq, position=None):
        _sequence(seq, "SequenceErase")
        _position_spec(position, "SequenceErase")

    def infer(self, seq, position=None):
        return seq.with_()

    def run_host(self, inputs, backend):
        seq = list(inputs[0])
        if not seq:
            raise VerifyError("SequenceErase of an empty sequence: there is no tensor to erase")
        p = _position(inputs[1] if len(inputs) > 1 else None, len(seq), "SequenceErase")
        del seq[len(seq) - 1 if p is None else p]
        return [seq]


@dsl.op("SequenceLength", since=11)
class SequenceLength(_SequenceOp):
    """The number of tensors in the sequence, as an i64 scalar."""

    def verify(self, seq):
        _sequence(seq, "SequenceLength")

    def infer(self, seq):
        return TensorSpec((), dsl.i64)

    def run_host(self, inputs, backend):
        return [np.array(len(inputs[0]), np.int64)]


# --------------------------------------------------------------------------- copies

@dsl.op("SplitToSequence", since=11)
class SplitToSequence(_SequenceOp):
    """``input`` cut along ``axis`` into a sequence: parts of the sizes in a 1-D ``split``,
    parts of a scalar ``split``'s size (the last one smaller), or without ``split`` one part
    per index, whose axis is dropped unless ``keepdims``."""

    axis: int = 0
    keepdims: int = 1

    def verify(self, x, split=None):
        _tensor(x, "SplitToSequence", "input")
        norm_axis("SplitToSequence", self.axis, max(x.ndim, 1))
        if split is not None:
            _tensor(split, "SplitToSequence", "split")
            if split.dtype not in _INDEX_TYPES or split.ndim > 1:
                raise VerifyError(f"SplitToSequence input 'split' must be a scalar or 1-D i32/i64 tensor, got {split}")
        if self.keepdims not in (0, 1):
            raise VerifyError(f"SplitToSequence attribute 'keepdims' must be 0 or 1, got {self.keepdims}")

    def infer(self, x, split=None):
        axis = norm_axis("SplitToSequence", self.axis, x.ndim)
        if split is None:
            shape = x.shape if self.keepdims else x.shape[:axis] + x.shape[axis + 1:]
            return SequenceSpec(x.dtype, shape[:axis] + (1,) + shape[axis + 1:] if self.keepdims else shape)
        return SequenceSpec(x.dtype, x.shape[:axis] + (None,) + x.shape[axis + 1:])

    def _sizes(self, dim: int, split: Optional[np.ndarray]) -> List[int]:
        if split is None:
            return [1] * dim
        s = np.asarray(split).astype(np.int64)
        if s.ndim == 0:
            n = int(s)
            if n <= 0:
                raise VerifyError(f"SplitToSequence scalar 'split' must be positive, got {n}")
            return [n] * (dim // n) + ([dim % n] if dim % n else [])
        sizes = [int(v) for v in s]
        if any(v < 0 for v in sizes) or sum(sizes) != dim:
            raise VerifyError(f"SplitToSequence sizes {sizes} must be >= 0 and add up to the axis length {dim}")
        return sizes

    def run_host(self, inputs, backend):
        x, split = inputs[0], inputs[1] if len(inputs) > 1 else None
        axis = norm_axis("SplitToSequence", self.axis, x.ndim)
        xs = contiguous_strides(x.shape)
        parts, at = [], 0
        for size in self._sizes(x.shape[axis], split):
            y = np.empty(x.shape[:axis] + (size,) + x.shape[axis + 1:], x.dtype)
            launch_strided(strided_copy_kernel, x, y, y.shape, xs, contiguous_strides(y.shape), at * xs[axis], 0,
                           backend=backend)
            at += size
            if split is None and not self.keepdims:
                y = y.reshape(x.shape[:axis] + x.shape[axis + 1:])
            parts.append(y)
        return [parts]


@dsl.op("ConcatFromSequence", since=11)
class ConcatFromSequence(_SequenceOp):
    """The sequence's tensors joined along ``axis``, or stacked along a new ``axis`` with
    ``new_axis=1`` (then ``axis`` may also be the rank, to stack last)."""

    axis: int
    new_axis: int = 0

    def verify(self, seq):
        s = _sequence(seq, "ConcatFromSequence")
        if self.new_axis not in (0, 1):
            raise VerifyError(f"ConcatFromSequence attribute 'new_axis' must be 0 or 1, got {self.new_axis}")
        if s.elem_shape is not None:
            self._axis(len(s.elem_shape))

    def _axis(self, rank: int) -> int:
        return norm_axis("ConcatFromSequence", self.axis, rank + self.new_axis)

    def infer(self, seq):
        if seq.elem_shape is None:
            raise VerifyError(f"ConcatFromSequence of {seq}: the rank of the sequence's tensors is unknown")
        axis, shape = self._axis(len(seq.elem_shape)), list(seq.elem_shape)
        if self.new_axis:
            shape.insert(axis, None)
        else:
            shape[axis] = None
        return TensorSpec(tuple(shape), seq.dtype)

    def run_host(self, inputs, backend):
        seq = inputs[0]
        if not seq:
            raise VerifyError("ConcatFromSequence of an empty sequence: there is nothing to join (its "
                              "output's shape would be unknown)")
        rank = seq[0].ndim
        axis = self._axis(rank)
        parts = [a.reshape(a.shape[:axis] + (1,) + a.shape[axis:]) if self.new_axis else a for a in seq]
        first = parts[0]
        for k, a in enumerate(parts):
            if a.ndim != first.ndim or any(p != q for d, (p, q) in enumerate(zip(a.shape, first.shape))
                                           if d != axis) or (self.new_axis and seq[k].shape != seq[0].shape):
                raise VerifyError(f"ConcatFromSequence along axis {axis}: tensor {k} has shape {seq[k].shape}, "
                                  f"tensor 0 {seq[0].shape}; only the concat axis may differ"
                                  + (" (none may with new_axis=1)" if self.new_axis else ""))
        shape = list(first.shape)
        shape[axis] = sum(a.shape[axis] for a in parts)
        y = np.empty(tuple(shape), first.dtype)
        ys, at = contiguous_strides(y.shape), 0
        for a in parts:
            launch_strided(strided_copy_kernel, a, y, a.shape, contiguous_strides(a.shape), ys, 0, at * ys[axis],
                           backend=backend)
            at += a.shape[axis]
        return [y]


# --------------------------------------------------------------------------- SequenceMap

@dsl.op("SequenceMap", since=17)
class SequenceMap(_SequenceOp):
    """``body`` applied to each element of ``input_sequence``: sequence inputs after it give
    their element at the same index (all as long), tensor inputs are passed whole; each body
    output becomes a sequence of the per-element results.  The node's inputs after the
    declared ones are the values the body captures (dsl/onnx/subgraph.py)."""

    body: Body

    @classmethod
    def body_formals(cls, attr, attrs, specs):
        return [s.element if isinstance(s, SequenceSpec) else s.with_() for s in specs]

    @classmethod
    def relax(cls, attr, attrs, formals, outs):
        return formals

    @classmethod
    def never_run(cls, specs):
        return {}

    def verify(self, seq, *rest):
        _sequence(seq, "SequenceMap")
        b = self.body
        if len(rest) + 1 != b.n_formal + b.n_captures:
            raise VerifyError(f"SequenceMap body takes {b.n_formal} inputs and captures {b.n_captures} values; "
                              f"the node gives {len(rest) + 1}")
        for k, out in enumerate(b.output_specs):
            if is_host(out):
                raise VerifyError(f"SequenceMap body output {k} is {kind_name(out)}; each body output must be "
                                  f"a tensor (it becomes one element of an output sequence)")

    def infer(self, seq, *rest):
        return tuple(SequenceSpec(s.dtype, s.shape) for s in self.body.output_specs)

    def run_host(self, inputs, backend):
        n = self.body.n_formal
        formals, captures = list(inputs[:n]), list(inputs[n:])
        length = len(formals[0])
        for k, v in enumerate(formals):
            if isinstance(v, list) and len(v) != length:
                raise VerifyError(f"SequenceMap: sequence input {k} has {len(v)} tensors, input_sequence "
                                  f"{length}; every sequence input must be as long")
        results: List[list] = [[] for _ in self.body.output_specs]
        for i in range(length):
            outs = self.body.run(backend, [v[i] if isinstance(v, list) else v for v in formals], captures)
            for r, o in zip(results, outs):
                r.append(o)
        return results
