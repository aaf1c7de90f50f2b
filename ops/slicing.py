"""Slicing and joining: Concat, Split, Slice and Tile.

Every one is one or more launches of shape.py's ``strided_copy_kernel``: Concat copies
each input into the output at an offset along the axis, Split copies each output's
part of the input, Slice reads the input with an offset and strides (negative ones
for negative steps), Tile reads an interleaved (repeat, dim, repeat, dim...) index
space with stride 0 along the repeats.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

import dsl
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.shape import (_shape_value, contiguous_strides, launch_strided, norm_axes, norm_axis,
                       strided_copy_kernel)


def _int_input(what: str, name: str, spec, allowed=(dsl.i32, dsl.i64)) -> None:
    if spec is not None and (spec.dtype not in allowed or spec.ndim != 1):
        raise VerifyError(f"{what} {name} input must be a 1-D tensor of {' or '.join(map(str, allowed))}, "
                          f"got {spec}")


# --------------------------------------------------------------------------- Concat

class _Concat(dsl.Op):
    """Concat's checks, shapes and copies (one strided copy per input)."""

    keeps_quant = True  # moves data: a quantized input's quant carries over (when all share one)
    keeps_padding = True  # blocked: whole 16-channel blocks are copied, padding zeros included
    op_type = "Concat"
    formats = ("plain", "nchwc16")
    kernels = {"default": strided_copy_kernel}

    def verify(self, *xs):
        if not xs:
            raise VerifyError("Concat needs at least one input")
        first = xs[0]
        axis = norm_axis("Concat", self.axis, max(first.ndim, 1))
        for k, x in enumerate(xs[1:], 1):
            if x.dtype != first.dtype:
                raise VerifyError(f"Concat inputs need one dtype: input 0 is {first}, input {k} is {x}")
            if x.ndim != first.ndim:
                raise VerifyError(f"Concat inputs need one rank: input 0 is {first}, input {k} is {x}")
            for a, (p, q) in enumerate(zip(first.shape, x.shape)):
                if a != axis and p is not None and q is not None and p != q:
                    raise VerifyError(f"Concat along axis {axis}: input {k} {x} differs from input 0 {first} "
                                      f"on axis {a} ({q} vs {p}); only the concat axis may differ")

    def infer(self, *xs):
        axis = norm_axis("Concat", self.axis, xs[0].ndim)
        dims = []
        for a in range(xs[0].ndim):
            col = [x.shape[a] for x in xs]
            if a == axis:
                dims.append(None if None in col else sum(col))
            else:
                dims.append(next((d for d in col if d is not None), None))
        return TensorSpec(tuple(dims), xs[0].dtype)

    def concat_axis(self, *xs) -> int:
        """The output is the inputs side by side along this axis: the memory plan may have
        producers write into it directly (dsl/opgraph/concat_inplace.py)."""
        return norm_axis("Concat", self.axis, max(xs[0].ndim, 1))

    def select_format(self, *xs):
        """NCHWc16 along the channels when every input is blocked and all but the last have
        whole blocks (a CNN's Concat of branches, squeezenet's expands): the blocks are copied
        as they are, or the producers write into the output (concat_inplace.py)."""
        if (len(xs) > 1 and all(x.ndim == 4 and x.format == "nchwc16" for x in xs)
                and norm_axis("Concat", self.axis, 4) == 1
                and all(x.shape[1] is not None and x.shape[1] % 16 == 0 for x in xs[:-1])):
            return ("nchwc16",) * len(xs), "nchwc16"
        return ("plain",) * len(xs), "plain"

    def run(self, impl, inputs, outputs, backend, specs=()):
        y = outputs[0]
        if specs and specs[0] is not None and specs[0].format == "nchwc16":
            axis = 1  # y is (N, C/16, H, W, 16): the blocks join along axis 1
        else:
            axis = norm_axis("Concat", self.axis, y.ndim)
        ys = contiguous_strides(y.shape)
        at = 0
        for x in inputs:
            launch_strided(impl, x, y, x.shape, contiguous_strides(x.shape), ys, 0, at * ys[axis],
                           backend=backend)
            at += x.shape[axis]

    plan = dsl.recorded_plan  # offsets and strides from shapes only


@dsl.op("Concat", since=1, until=3)
class ConcatV1(_Concat):
    """Join along ``axis`` (default 1 before opset 4)."""

    axis: int = 1


@dsl.op("Concat", since=4)
class Concat(_Concat):
    """Join the inputs (one dtype, same dims but along ``axis``) along ``axis``."""

    axis: int


# --------------------------------------------------------------------------- Split

def split_sizes(dim: Optional[int], split: Optional[Sequence[int]], num_outputs: Optional[int]) -> List:
    """The part sizes along the axis: ``split`` as given, else ``num_outputs`` parts of
    ceil(dim / num_outputs), the last one smaller (opset 18's uneven split)."""
    if split is not None:
        split = [int(s) for s in split]
        if any(s < 0 for s in split):
            raise VerifyError(f"Split sizes {split} have a negative entry")
        if dim is not None and sum(split) != dim:
            raise VerifyError(f"Split sizes {split} add up to {sum(split)}, but the axis has {dim} elements")
        return split
    if num_outputs is None:
        raise VerifyError("Split needs its split sizes (attribute or input) or num_outputs to know how many "
                          "outputs to make")
    if num_outputs < 1:
        raise VerifyError(f"Split num_outputs must be >= 1, got {num_outputs}")
    if dim is None:
        return [None] * num_outputs
    chunk = -(-dim // num_outputs)
    last = dim - chunk * (num_outputs - 1)
    if last < 0:
        raise VerifyError(f"Split of {dim} elements into {num_outputs} outputs of {chunk} leaves "
                          f"nothing for the last ones; accepted: num_outputs with (num_outputs - 1) * "
                          f"ceil(dim / num_outputs) <= dim")
    sizes = [chunk] * (num_outputs - 1) + [last]
    return sizes


class _Split(dsl.Op):
    """Split's part sizes, shapes and copies (one strided copy per output)."""

    keeps_quant = True  # moves data: a quantized input's quant carries over
    op_type = "Split"
    kernels = {"default": strided_copy_kernel}

    def _sizes(self, x, split):
        axis = norm_axis("Split", self.axis, x.ndim)
        return axis, split_sizes(x.shape[axis], split, self.num_outputs)

    def _specs(self, x, split):
        axis, sizes = self._sizes(x, split)
        return tuple(TensorSpec(x.shape[:axis] + (s,) + x.shape[axis + 1:], x.dtype) for s in sizes)

    def run(self, impl, inputs, outputs, backend):
        x = inputs[0]
        axis = norm_axis("Split", self.axis, x.ndim)
        xs = contiguous_strides(x.shape)
        at = 0
        for y in outputs:
            launch_strided(impl, x, y, y.shape, xs, contiguous_strides(y.shape), at * xs[axis], 0,
                           backend=backend)
            at += y.shape[axis]


@dsl.op("Split", since=1, until=12)
class SplitV1(_Split):
    """Split along ``axis`` into the ``split`` sizes (attribute; opset 1 also took an input).

    Without sizes the parts are equal; their number is ``num_outputs`` (which the ONNX
    loader would have to pass from the node's output count)."""

    axis: int = 0
    split: Optional[Tuple[int, ...]] = None
    num_outputs: Optional[int] = None

    def infer(self, x, split=None):
        sizes = self.split if split is None else _shape_value(split)
        if split is not None and sizes is None:
            axis = norm_axis("Split", self.axis, x.ndim)
            return tuple(TensorSpec(x.shape[:axis] + (None,) + x.shape[axis + 1:], x.dtype)
                         for _ in range(split.shape[0] or 0))
        return self._specs(x, sizes)


@dsl.op("Split", since=13)
class Split(_Split):
    """Split along ``axis`` into the sizes of the optional i64 ``split`` input, or into
    ``num_outputs`` parts (opset 18; the last part may be smaller)."""

    axis: int = 0
    num_outputs: Optional[int] = None

    def verify(self, x, split=None):
        _int_input("Split", "split", split, (dsl.i64,))
        if split is not None and self.num_outputs is not None:
            raise VerifyError("Split takes either a split input or num_outputs, not both")

    def infer(self, x, split=None):
        if split is not None:
            sizes = _shape_value(split)
            if sizes is None:
                if split.shape[0] is None:
                    raise VerifyError(f"Split needs the length of its split input to know the output count, "
                                      f"got {split}")
                axis = norm_axis("Split", self.axis, x.ndim)
                return tuple(TensorSpec(x.shape[:axis] + (None,) + x.shape[axis + 1:], x.dtype)
                             for _ in range(split.shape[0]))
            return self._specs(x, sizes)
        return self._specs(x, None)


# --------------------------------------------------------------------------- Slice

def slice_plan(shape: Sequence[Optional[int]], starts: Sequence[int], ends: Sequence[int],
               axes: Optional[Sequence[int]], steps: Optional[Sequence[int]]):
    """ONNX Slice -> (output shape, {axis: (start, step)}) with numpy's clamping: a start
    or end past either side is clamped to the axis (to -1 / dim-1 for negative steps)."""
    n = len(starts)
    if len(ends) != n:
        raise VerifyError(f"Slice starts {list(starts)} and ends {list(ends)} differ in length")
    axes = list(range(n)) if axes is None else list(axes)
    steps = [1] * n if steps is None else list(steps)
    if len(axes) != n or len(steps) != n:
        raise VerifyError(f"Slice starts, ends, axes and steps need one length: {n}, {n}, {len(axes)}, "
                          f"{len(steps)}")
    axes = norm_axes("Slice", axes, len(shape))
    out = list(shape)
    picks = {}
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise VerifyError(f"Slice step along axis {a} is 0")
        if shape[a] is None:
            out[a] = None
            continue
        start, stop, step = slice(int(s), int(e), int(st)).indices(shape[a])
        out[a] = len(range(start, stop, step))
        picks[a] = (start, step)
    return tuple(out), picks


def launch_slice(impl, x: np.ndarray, y: np.ndarray, picks, backend) -> None:
    xs = contiguous_strides(x.shape)
    offset = sum(start * xs[a] for a, (start, _) in picks.items())
    strides = [s * picks[a][1] if a in picks else s for a, s in enumerate(xs)]
    launch_strided(impl, x, y, y.shape, strides, contiguous_strides(y.shape), offset, 0, backend=backend)


@dsl.op("Slice", since=1, until=9)
class SliceV1(dsl.Op):
    """Slice with ``starts``/``ends``/``axes`` attributes (step 1)."""

    keeps_quant = "per_tensor"  # moves data; may reorder along any axis (per-axis quant dropped)

    op_type = "Slice"
    starts: Tuple[int, ...]
    ends: Tuple[int, ...]
    axes: Optional[Tuple[int, ...]] = None
    kernels = {"default": strided_copy_kernel}

    def infer(self, x):
        return TensorSpec(slice_plan(x.shape, self.starts, self.ends, self.axes, None)[0], x.dtype)

    def run(self, impl, inputs, outputs, backend):
        _, picks = slice_plan(inputs[0].shape, self.starts, self.ends, self.axes, None)
        launch_slice(impl, inputs[0], outputs[0], picks, backend)

    plan = dsl.recorded_plan  # launches from shapes and params only


@dsl.op("Slice", since=10)
class Slice(dsl.Op):
    """x[starts:ends:steps] along ``axes``; the four are 1-D i32/i64 inputs (read at run time
    when they are not constants)."""

    keeps_quant = "per_tensor"  # moves data; may reorder along any axis (per-axis quant dropped)

    kernels = {"default": strided_copy_kernel}
    replay = False  # run() turns the starts/ends/axes/steps values into launch offsets and strides

    def verify(self, x, starts, ends, axes=None, steps=None):
        for name, spec in (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps)):
            _int_input("Slice", name, spec)

    def infer(self, x, starts, ends, axes=None, steps=None):
        vals = [_shape_value(s) for s in (starts, ends)]
        ax = None if axes is None else _shape_value(axes)
        st = None if steps is None else _shape_value(steps)
        if None in vals or (axes is not None and ax is None) or (steps is not None and st is None):
            if axes is not None and ax is None:  # which axes change is unknown
                return TensorSpec((None,) * x.ndim, x.dtype)
            n = starts.shape[0]
            sliced = range(n or x.ndim) if ax is None else norm_axes("Slice", ax, x.ndim)
            return TensorSpec(tuple(None if a in sliced else d for a, d in enumerate(x.shape)), x.dtype)
        return TensorSpec(slice_plan(x.shape, vals[0], vals[1], ax, st)[0], x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x = inputs[0]
        args = [None if a is None else [int(v) for v in a.reshape(-1)] for a in list(inputs[1:]) + [None] * 2]
        _, picks = slice_plan(x.shape, args[0], args[1], args[2], args[3])
        launch_slice(impl, x, outputs[0], picks, backend)


# --------------------------------------------------------------------------- Tile

@dsl.op("Tile", since=6)
class Tile(dsl.Op):
    """Repeat the input ``repeats[d]`` times along each axis d (repeats: 1-D i64, one per axis)."""

    keeps_quant = True  # moves data: a quantized input's quant carries over

    kernels = {"default": strided_copy_kernel}

    def verify(self, x, repeats):
        _int_input("Tile", "repeats", repeats, (dsl.i64,))
        if repeats.shape[0] is not None and repeats.shape[0] != x.ndim:
            raise VerifyError(f"Tile repeats has {repeats.shape[0]} entries, the input {x} has {x.ndim} axes; "
                              f"one repeat per axis is needed")
        reps = _shape_value(repeats)
        if reps is not None and any(r < 0 for r in reps):
            raise VerifyError(f"Tile repeats {reps} has a negative entry")

    def infer(self, x, repeats):
        reps = _shape_value(repeats)
        if reps is None:
            return TensorSpec((None,) * x.ndim, x.dtype)
        return TensorSpec(tuple(None if d is None else d * r for d, r in zip(x.shape, reps)), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, y = inputs[0], outputs[0]
        reps = [y.shape[a] // x.shape[a] if x.shape[a] else 0 for a in range(x.ndim)]
        space, xs = [], []
        for r, d, s in zip(reps, x.shape, contiguous_strides(x.shape)):
            space += [r, d]
            xs += [0, s]
        launch_strided(impl, x, y, space, xs, contiguous_strides(space), backend=backend)


@dsl.op("ReverseSequence", since=10)
class ReverseSequence(dsl.Op):
    """Reverse the first ``sequence_lens[b]`` steps along ``time_axis`` of each batch entry b
    (along ``batch_axis``); the rest is copied.  Two strided copies per batch entry."""

    batch_axis: int = 1
    time_axis: int = 0
    kernels = {"default": strided_copy_kernel}
    replay = False  # run() reads sequence_lens' values

    def verify(self, input, sequence_lens):
        if input.ndim < 2:
            raise VerifyError(f"ReverseSequence input must have rank >= 2, got {input}")
        if sorted((self.batch_axis, self.time_axis)) != [0, 1]:
            raise VerifyError(f"ReverseSequence batch_axis/time_axis must be 0 and 1 in some order, got "
                              f"{self.batch_axis}/{self.time_axis}")
        _int_input("ReverseSequence", "sequence_lens", sequence_lens, (dsl.i64,))
        batch = input.shape[self.batch_axis]
        if sequence_lens.shape[0] is not None and batch is not None and sequence_lens.shape[0] != batch:
            raise VerifyError(f"ReverseSequence sequence_lens {sequence_lens} needs one length per batch entry "
                              f"({batch})")

    def infer(self, input, sequence_lens):
        return input.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        x, lens, y = inputs[0], inputs[1], outputs[0]
        steps = x.shape[self.time_axis]
        if lens.size and (lens.min() < 0 or lens.max() > steps):
            raise ValueError(f"ReverseSequence sequence_lens {lens.tolist()} must lie in [0, {steps}]")
        strides = contiguous_strides(x.shape)
        ts, bs = strides[self.time_axis], strides[self.batch_axis]
        rest, rest_strides = list(x.shape[2:]), strides[2:]
        for b, n in enumerate(int(v) for v in lens):
            base = b * bs
            if n:
                launch_strided(impl, x, y, [n] + rest, [-ts] + rest_strides, [ts] + rest_strides,
                               xoff=base + (n - 1) * ts, yoff=base, backend=backend)
            if steps - n:
                launch_strided(impl, x, y, [steps - n] + rest, [ts] + rest_strides, [ts] + rest_strides,
                               xoff=base + n * ts, yoff=base + n * ts, backend=backend)
