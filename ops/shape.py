"""Shape ops: Reshape (0 / -1 / allowzero), Transpose, Identity, Shape, Size, Flatten,
Squeeze, Unsqueeze and Expand.

Two DSL kernels move every element (slicing.py and generate.py use them too):

* ``copy_kernel``, a flat copy: Reshape, Flatten, Squeeze and Unsqueeze only change
  the shape (and may run in place);
* ``strided_copy_kernel``: ``y[yoff + Σ i_d·ys_d] = x[xoff + Σ i_d·xs_d]`` over a 6-D
  index space.  A transpose, a broadcast (stride 0), a slice (offset, negative
  strides), a concatenation (output offsets) or a tile is one strided copy;
  ``launch_strided`` drops size-1 axes and merges axes that stay contiguous on both
  sides, so ranks above six are rare, and loops over the leading axes of the rest.

Shape and Size compute their output from the input's *shape*: ``infer`` attaches
it as ``value`` whenever the shape is known, so shape sub-graphs fold at compile
time (passes.py) or when a run's shapes are planned (model.py).
"""
from __future__ import annotations

import itertools
from typing import List, Optional, Sequence, Tuple

import numpy as np

import dsl
from dsl import In, Out, i64
from dsl.opgraph import registry
from dsl.opgraph.graph import Identity
from dsl.opgraph.spec import TensorSpec, VerifyError

T = dsl.TypeVar("T")
KERNEL_RANK = 6


@dsl.kernel
def copy_kernel(x: In[T], y: Out[T]):
    """y.flat = x.flat (shapes may differ, sizes do not)."""
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i]


@dsl.kernel
def strided_copy_kernel(x: In[T, 1], y: Out[T, 1], n: dsl.Vec[i64, 6], xs: dsl.Vec[i64, 6],
                        ys: dsl.Vec[i64, 6], xoff: i64, yoff: i64):
    """y[yoff + Σ i_d·ys_d] = x[xoff + Σ i_d·xs_d] for every index (i0..i5) < n (flat arrays).

    One run along the last axis at a time.  The thread's first index is decoded once; after each
    run the five outer indices count up like an odometer (five divisions per run cost more than
    copying a 64-element run: BERT's head transposes ran at ~2 ns per element)."""
    n1 = n[1]
    n2 = n[2]
    n3 = n[3]
    n4 = n[4]
    n5 = n[5]
    sx = xs[5]
    sy = ys[5]
    lo, hi = dsl.split(n[0] * n1 * n2 * n3 * n4 * n5)
    r = lo // n5
    j0 = lo - r * n5
    i4 = r % n4
    r = r // n4
    i3 = r % n3
    r = r // n3
    i2 = r % n2
    r = r // n2
    i1 = r % n1
    i0 = r // n1
    i = lo
    while i < hi:
        jn = min(n5, j0 + hi - i)
        px = xoff + i0 * xs[0] + i1 * xs[1] + i2 * xs[2] + i3 * xs[3] + i4 * xs[4]
        py = yoff + i0 * ys[0] + i1 * ys[1] + i2 * ys[2] + i3 * ys[3] + i4 * ys[4]
        for j in range(j0, jn):
            y.flat[py + j * sy] = x.flat[px + j * sx]
        i = i - j0 + jn
        j0 = 0
        i4 += 1
        if i4 == n4:
            i4 = 0
            i3 += 1
            if i3 == n3:
                i3 = 0
                i2 += 1
                if i2 == n2:
                    i2 = 0
                    i1 += 1
                    if i1 == n1:
                        i1 = 0
                        i0 += 1


def contiguous_strides(shape: Sequence[int]) -> List[int]:
    """Element strides of a C-contiguous array of ``shape``."""
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= int(d)
    return out[::-1]


def launch_strided(impl, x: np.ndarray, y: np.ndarray, shape: Sequence[int], xs: Sequence[int],
                   ys: Sequence[int], xoff: int = 0, yoff: int = 0, backend=None) -> None:
    """One strided copy of the index space ``shape`` from flat ``x`` into flat ``y``.

    Size-1 axes are dropped and an axis merges into the one before it when both
    strides continue it; more than six axes left loop over the leading ones here."""
    if any(int(d) == 0 for d in shape):
        return
    merged: List[List[int]] = []  # [n, x stride, y stride]
    for d, a, b in zip(shape, xs, ys):
        d, a, b = int(d), int(a), int(b)
        if d == 1:
            continue
        if merged and merged[-1][1] == a * d and merged[-1][2] == b * d:
            merged[-1] = [merged[-1][0] * d, a, b]
        else:
            merged.append([d, a, b])
    extra = max(0, len(merged) - KERNEL_RANK)
    inner = [[1, 0, 0]] * (KERNEL_RANK - len(merged) + extra) + merged[extra:]
    n = tuple(m[0] for m in inner)
    sx = tuple(m[1] for m in inner)
    sy = tuple(m[2] for m in inner)
    xf, yf = x.reshape(-1), y.reshape(-1)
    for lead in itertools.product(*(range(m[0]) for m in merged[:extra])):
        xo = xoff + sum(i * m[1] for i, m in zip(lead, merged))
        yo = yoff + sum(i * m[2] for i, m in zip(lead, merged))
        impl(xf, yf, n, sx, sy, xo, yo, backend=backend)


def launch_transpose(impl, x: np.ndarray, y: np.ndarray, perm: Sequence[int], backend=None) -> None:
    """y = x.transpose(perm) (y contiguous) through ``strided_copy_kernel``."""
    xs = contiguous_strides(x.shape)
    out_shape = [x.shape[p] for p in perm]
    launch_strided(impl, x, y, out_shape, [xs[p] for p in perm], contiguous_strides(out_shape),
                   backend=backend)


# --------------------------------------------------------------------------- Reshape

def _shape_value(spec: Optional[TensorSpec]) -> Optional[List[int]]:
    if spec is None or spec.value is None:
        return None
    return [int(v) for v in np.asarray(spec.value).reshape(-1)]


def reshape_dims(data_shape: Sequence[Optional[int]], target: Sequence[int], allowzero: int) -> Tuple:
    """ONNX Reshape: 0 copies the input dim (unless allowzero), one -1 is inferred."""
    if target.count(-1) > 1:
        raise VerifyError(f"Reshape shape {list(target)} has more than one -1")
    if any(d < -1 for d in target):
        raise VerifyError(f"Reshape shape {list(target)} has a negative dim other than -1")
    if allowzero and 0 in target and -1 in target:
        raise VerifyError(f"Reshape with allowzero=1 cannot have both 0 and -1 in shape {list(target)}")
    out: List[Optional[int]] = []
    for axis, d in enumerate(target):
        if d == 0 and not allowzero:
            if axis >= len(data_shape):
                raise VerifyError(f"Reshape shape {list(target)} copies input axis {axis} (a 0), but the "
                                  f"input has rank {len(data_shape)}")
            out.append(data_shape[axis])
        else:
            out.append(d)
    total = None if any(d is None for d in data_shape) else int(np.prod(data_shape, dtype=np.int64))
    if -1 in out:
        k = out.index(-1)
        rest = [d for i, d in enumerate(out) if i != k]
        copied = {a for a, d in enumerate(target) if d == 0 and not allowzero}
        if total is None and all(a in copied for a, d in enumerate(data_shape) if d is None):
            # unknown dims are copied through by 0s: they cancel out of the -1
            known_in = int(np.prod([d for a, d in enumerate(data_shape) if a not in copied], dtype=np.int64))
            known_out = int(np.prod([d for a, d in enumerate(out) if a not in copied and a != k], dtype=np.int64))
            out[k] = known_in // known_out if known_out and known_in % known_out == 0 else None
        elif total is None or any(d is None for d in rest):
            out[k] = None
        else:
            known = int(np.prod(rest, dtype=np.int64))
            if known == 0 or total % known:
                raise VerifyError(f"Reshape cannot infer -1: {total} elements of input "
                                  f"{tuple(data_shape)} do not divide into shape {list(target)}")
            out[k] = total // known
    if total is not None and all(d is not None for d in out):
        if int(np.prod(out, dtype=np.int64)) != total:
            raise VerifyError(f"Reshape of input {tuple(data_shape)} ({total} elements) to shape "
                              f"{list(target)} -> {tuple(out)} changes the element count")
    return tuple(out)


@dsl.op("Reshape", since=5)
class Reshape(dsl.Op):
    """Same elements, new shape; ``shape`` is an i64 tensor (usually a constant)."""

    keeps_quant = "per_tensor"  # moves data: a quantized input's quant carries over

    allowzero: int = 0
    inplace = {0: 0}
    inplace_noop = True  # run in place, the copy changes nothing: the model skips it
    kernels = {"default": copy_kernel}

    def verify(self, data, shape):
        if shape.dtype != dsl.i64:
            raise VerifyError(f"Reshape shape input must be i64, got {shape}")
        if shape.ndim != 1:
            raise VerifyError(f"Reshape shape input must be 1-D, got {shape}")

    def infer(self, data, shape):
        target = _shape_value(shape)
        if target is None:  # known only at run time
            if shape.shape[0] is None:
                raise VerifyError(f"Reshape needs the length of its shape input to know the output rank, "
                                  f"got {shape}")
            return TensorSpec((None,) * shape.shape[0], data.dtype)
        return TensorSpec(reshape_dims(data.shape, target, self.allowzero), data.dtype)

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0], outputs[0], backend=backend)

    def plan(self, impl, inputs, outputs, backend):
        return [dsl.Launch(impl, (inputs[0], outputs[0]), backend=backend)]


@dsl.op("Reshape", since=1, until=4)
class ReshapeV1(dsl.Op):
    """Reshape with the target ``shape`` as an attribute (opsets 1-4; 0 and -1 as in 5+)."""

    keeps_quant = "per_tensor"  # moves data: a quantized input's quant carries over

    op_type = "Reshape"
    shape: Tuple[int, ...] = ()
    inplace = {0: 0}
    inplace_noop = True  # run in place, the copy changes nothing: the model skips it
    kernels = {"default": copy_kernel}

    def infer(self, data):
        return TensorSpec(reshape_dims(data.shape, list(self.shape), 0), data.dtype)

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0], outputs[0], backend=backend)

    def plan(self, impl, inputs, outputs, backend):
        return [dsl.Launch(impl, (inputs[0], outputs[0]), backend=backend)]


# The one Identity op lives beside dsl.Graph, which emits it for repeated outputs; registering
# it here makes it the ONNX Identity (ops.Identity).  A built-in however this module is imported:
# its class's module is not in ``ops``, so imported by an unpickled plan-cache entry (outside
# the library's own import) it counted as a user op, and the entry a later miss of that process
# wrote named it -- no fresh process could read that entry (a miss every time).
with registry.builtin_library():
    Identity = dsl.op("Identity", since=1)(Identity)


# --------------------------------------------------------------------------- Transpose

@dsl.op("Transpose", since=1)
class Transpose(dsl.Op):
    """Permute axes: output axis d is input axis perm[d]; default perm reverses them."""

    keeps_quant = True  # moves data: a quantized input's quant carries over

    perm: Optional[Tuple[int, ...]] = None
    kernels = {"default": strided_copy_kernel}

    def _perm(self, rank: int) -> Tuple[int, ...]:
        return tuple(range(rank))[::-1] if self.perm is None else tuple(self.perm)

    def verify(self, x):
        perm = self._perm(x.ndim)
        if sorted(perm) != list(range(x.ndim)):
            raise VerifyError(f"Transpose perm {list(perm)} is not a permutation of the {x.ndim} axes "
                              f"of input {x}; expected each of 0..{x.ndim - 1} once")

    def infer(self, x):
        perm = self._perm(x.ndim)
        quant = None
        if x.quant is not None and x.quant.axis is not None:  # the quantized axis moves with the data
            quant = x.quant._replace(axis=perm.index(x.quant.axis))
        return TensorSpec(tuple(x.shape[p] for p in perm), x.dtype, quant=quant)

    def run(self, impl, inputs, outputs, backend):
        launch_transpose(impl, inputs[0], outputs[0], self._perm(inputs[0].ndim), backend=backend)

    plan = dsl.recorded_plan  # the strides depend on shapes and perm only


# --------------------------------------------------------------------------- Shape, Size

def norm_axis(what: str, axis: int, rank: int, name: str = "axis") -> int:
    """``axis`` in [-rank, rank) made non-negative, else a VerifyError naming ``what``."""
    if not -rank <= axis < rank:
        raise VerifyError(f"{what} {name} {axis} is out of range for rank {rank}; accepted: "
                          f"{-rank}..{rank - 1}")
    return axis + rank if axis < 0 else axis


def norm_axes(what: str, axes: Sequence[int], rank: int, name: str = "axes") -> List[int]:
    out = [norm_axis(what, int(a), rank, name) for a in axes]
    if len(set(out)) != len(out):
        raise VerifyError(f"{what} {name} {list(axes)} repeat an axis (rank {rank})")
    return out


@dsl.op("Shape", since=1)
class Shape(dsl.Op):
    """The input's shape as a 1-D i64 tensor, ``[start:end]`` of it (opset 15+).  ``infer``
    gives the value whenever the input shape is known, so the node folds to a constant."""

    start: int = 0
    end: Optional[int] = None
    kernels = {"default": copy_kernel}

    def _range(self, rank: int) -> Tuple[int, int]:
        def clamp(v: int) -> int:
            return min(max(v + rank if v < 0 else v, 0), rank)
        start = clamp(self.start)
        end = rank if self.end is None else clamp(self.end)
        return start, max(start, end)

    def infer(self, x):
        start, end = self._range(x.ndim)
        dims = x.shape[start:end]
        value = np.array(dims, np.int64) if all(d is not None for d in dims) else None
        return TensorSpec((end - start,), dsl.i64, value=value)

    def run(self, impl, inputs, outputs, backend):
        start, end = self._range(inputs[0].ndim)
        impl(np.array(inputs[0].shape[start:end], np.int64), outputs[0], backend=backend)

    def plan(self, impl, inputs, outputs, backend):
        start, end = self._range(inputs[0].ndim)
        return [dsl.Launch(impl, (np.array(inputs[0].shape[start:end], np.int64), outputs[0]), backend=backend)]


@dsl.op("Size", since=1)
class Size(dsl.Op):
    """The input's element count as an i64 scalar (a value ``infer`` knows when the shape is)."""

    kernels = {"default": copy_kernel}

    def infer(self, x):
        return TensorSpec((), dsl.i64, value=None if x.size is None else np.array(x.size, np.int64))

    def run(self, impl, inputs, outputs, backend):
        impl(np.array(inputs[0].size, np.int64), outputs[0], backend=backend)

    def plan(self, impl, inputs, outputs, backend):
        return [dsl.Launch(impl, (np.array(inputs[0].size, np.int64), outputs[0]), backend=backend)]


# --------------------------------------------------------------------------- Flatten, Squeeze, Unsqueeze

def _product(dims: Sequence[Optional[int]]) -> Optional[int]:
    if 0 in dims:
        return 0
    return None if any(d is None for d in dims) else int(np.prod(dims, dtype=np.int64))


class _Regroup(dsl.Op):
    """Ops that only change the shape: a flat copy (or nothing, in place)."""

    keeps_quant = "per_tensor"  # moves data: a quantized input's quant carries over

    inplace = {0: 0}
    inplace_noop = True  # run in place, the copy changes nothing: the model skips it
    kernels = {"default": copy_kernel}

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0], outputs[0], backend=backend)

    def plan(self, impl, inputs, outputs, backend):
        return [dsl.Launch(impl, (inputs[0], outputs[0]), backend=backend)]


@dsl.op("Flatten", since=1)
class Flatten(_Regroup):
    """2-D view: (product of dims before ``axis``, product of the rest); axis may be negative (11+)."""

    axis: int = 1

    def verify(self, x):
        if not -x.ndim <= self.axis <= x.ndim:
            raise VerifyError(f"Flatten axis {self.axis} is out of range for input {x}; accepted: "
                              f"{-x.ndim}..{x.ndim}")

    def infer(self, x):
        axis = self.axis + x.ndim if self.axis < 0 else self.axis
        return TensorSpec((_product(x.shape[:axis]), _product(x.shape[axis:])), x.dtype)


def _squeezed(x: TensorSpec, axes: Optional[Sequence[int]]) -> TensorSpec:
    if axes is None:
        if not x.known:
            raise VerifyError(f"Squeeze without axes needs every dim known to find the 1s, got input {x}")
        return TensorSpec(tuple(d for d in x.shape if d != 1), x.dtype)
    axes = norm_axes("Squeeze", axes, x.ndim)
    for a in axes:
        if x.shape[a] not in (1, None):
            raise VerifyError(f"Squeeze axis {a} of input {x} has size {x.shape[a]}, not 1")
    return TensorSpec(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)


@dsl.op("Squeeze", since=1, until=12)
class SqueezeV1(_Regroup):
    """Drop size-1 axes: ``axes`` attribute (all 1s when absent)."""

    op_type = "Squeeze"
    axes: Optional[Tuple[int, ...]] = None

    def infer(self, x):
        return _squeezed(x, self.axes)


@dsl.op("Squeeze", since=13)
class Squeeze(_Regroup):
    """Drop size-1 axes: optional i64 ``axes`` input (all 1s when absent)."""

    def verify(self, x, axes=None):
        if axes is not None and (axes.dtype != dsl.i64 or axes.ndim != 1):
            raise VerifyError(f"Squeeze axes input must be a 1-D i64 tensor, got {axes}")

    def infer(self, x, axes=None):
        if axes is None:
            return _squeezed(x, None)
        values = _shape_value(axes)
        if values is None:
            if axes.shape[0] is None:
                raise VerifyError(f"Squeeze needs the length of its axes input to know the output rank, got {axes}")
            return TensorSpec((None,) * (x.ndim - axes.shape[0]), x.dtype)
        return _squeezed(x, values)


def _unsqueezed(x: TensorSpec, axes: Sequence[int]) -> TensorSpec:
    rank = x.ndim + len(axes)
    axes = norm_axes("Unsqueeze", axes, rank)
    dims = iter(x.shape)
    return TensorSpec(tuple(1 if i in axes else next(dims) for i in range(rank)), x.dtype)


@dsl.op("Unsqueeze", since=1, until=12)
class UnsqueezeV1(_Regroup):
    """Insert size-1 axes at ``axes`` (positions in the output) given as an attribute."""

    op_type = "Unsqueeze"
    axes: Tuple[int, ...] = ()

    def infer(self, x):
        return _unsqueezed(x, self.axes)


@dsl.op("Unsqueeze", since=13)
class Unsqueeze(_Regroup):
    """Insert size-1 axes at the positions of the 1-D i64 ``axes`` input."""

    def verify(self, x, axes):
        if axes.dtype != dsl.i64 or axes.ndim > 1:
            raise VerifyError(f"Unsqueeze axes input must be a 1-D i64 tensor, got {axes}")

    def infer(self, x, axes):
        values = _shape_value(axes)
        if values is None:
            n = 1 if axes.ndim == 0 else axes.shape[0]
            if n is None:
                raise VerifyError(f"Unsqueeze needs the length of its axes input to know the output rank, "
                                  f"got {axes}")
            return TensorSpec((None,) * (x.ndim + n), x.dtype)
        return _unsqueezed(x, values)


# --------------------------------------------------------------------------- Expand

def broadcast_to(what: str, shape: Sequence[Optional[int]], target: Sequence[Optional[int]]) -> Tuple:
    """Bidirectional (numpy) broadcast of ``shape`` and ``target``, ``None`` for unknown dims."""
    rank = max(len(shape), len(target))
    a = (1,) * (rank - len(shape)) + tuple(shape)
    b = (1,) * (rank - len(target)) + tuple(target)
    out = []
    for axis, (p, q) in enumerate(zip(a, b)):
        if p == q or p == 1:
            out.append(q)
        elif q == 1 or q is None:
            out.append(p)
        elif p is None:
            out.append(q)
        else:
            raise VerifyError(f"{what}: input shape {tuple(shape)} does not broadcast to {tuple(target)} "
                              f"(axis {axis}: {p} vs {q}); each axis must match or be 1")
    return tuple(out)


def broadcast_strides(in_shape: Sequence[int], out_shape: Sequence[int]) -> List[int]:
    """Element strides of a contiguous ``in_shape`` array read as ``out_shape`` (0: broadcast)."""
    pad = len(out_shape) - len(in_shape)
    shape = (1,) * pad + tuple(in_shape)
    strides = contiguous_strides(shape)
    return [0 if d == 1 and o != 1 else s for d, o, s in zip(shape, out_shape, strides)]


@dsl.op("Expand", since=8)
class Expand(dsl.Op):
    """Broadcast the input against the 1-D i64 ``shape`` input (numpy rules both ways)."""

    keeps_quant = True  # moves data: a quantized input's quant carries over

    kernels = {"default": strided_copy_kernel}

    def verify(self, x, shape):
        if shape.dtype != dsl.i64 or shape.ndim != 1:
            raise VerifyError(f"Expand shape input must be a 1-D i64 tensor, got {shape}")
        target = _shape_value(shape)
        if target is not None and any(d < 0 for d in target):
            raise VerifyError(f"Expand shape {target} has a negative dim")

    def infer(self, x, shape):
        target = _shape_value(shape)
        if target is None:
            if shape.shape[0] is None:
                raise VerifyError(f"Expand needs the length of its shape input to know the output rank, "
                                  f"got {shape}")
            return TensorSpec((None,) * max(x.ndim, shape.shape[0]), x.dtype)
        return TensorSpec(broadcast_to("Expand", x.shape, target), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, y = inputs[0], outputs[0]
        launch_strided(impl, x, y, y.shape, broadcast_strides(x.shape, y.shape), contiguous_strides(y.shape),
                       backend=backend)

    plan = dsl.recorded_plan  # launches from shapes and params only
