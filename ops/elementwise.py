"""Elementwise ops: Add, Sub, Mul (ONNX multidirectional broadcasting), Relu,
LeakyRelu, Sigmoid, Tanh, Clip, and the broadcasting helpers the other broadcasting
families share (ops/binary.py: Div, Mod, Pow...; ops/logic.py: comparisons, Where).

A few kernels serve the whole family, specialized by dtype through TypeVars; the
operation is a run-time code (a loop-invariant branch the compilers hoist), so
Add, Sub and Mul of one dtype share one compiled variant:

* ``binary_kernel`` works on 4-D views.  ``Op.run`` collapses the broadcast
  pattern first (adjacent axes broadcast the same way merge), so almost every real
  case fits in four axes; the rare rest loops over leading axes in Python.
* ``unary_kernel`` is a flat loop.

Both read element i before writing element i, so outputs may share an input's
buffer (``inplace``), and both accept NCHWc16 tensors, which are flat arrays of
identical layout when shapes match.

Add, Sub and Mul are the ``arith`` rows of ops/elementwise_table.py: their classes and
``binary_kernel``'s op-code ladder are made from the rows, its 4-D loop by
ops/generated_kernel.py (which every broadcasting kernel shares); the activations and Clip bind
to their ``custom`` rows, which say how they fuse.
"""
from __future__ import annotations

import itertools
from typing import Optional, Sequence, Tuple

import numpy as np

import dsl
from dsl import In, Out, f32, i32
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops import elementwise_table as table
from ops.elementwise_table import FLOATS, INTEGERS, NUMERIC, UNSIGNED  # noqa: F401 (the families import them from here)
from ops.generated_kernel import broadcast_loop, compile_kernel, indent, kernel_text, ladder

T = dsl.TypeVar("T")
F = dsl.TypeVar("F")

# operation codes of unary_kernel (module constants fold into kernels)
RELU = 0
LEAKY_RELU = 1
SIGMOID = 2
TANH = 3

MAX_RANK = 4  # axes binary_kernel handles after collapsing


# --------------------------------------------------------------------------- kernels

def arith_kernel(name: str, rows, doc: str):
    """The 4-D broadcast kernel of ``arith`` rows, a run-time op code choosing the row (inside the
    inner loop: the compilers hoist the loop-invariant branch)."""
    branches = [(CODES.get(r.onnx, 0), [f"y.flat[base + j] = {r.expr.format('va', 'vb')}"]) for r in rows]
    inner = ["for j in range(j0, jn):", "    va = a.flat[p_a + j * s_a3]", "    vb = b.flat[p_b + j * s_b3]"]
    body = broadcast_loop("y", ("a", "b"), inner + indent(ladder(branches)))
    return compile_kernel(kernel_text(f"{name}(a: In[T, 4], b: In[T, 4], y: Out[T, 4], op: i32)", doc, body),
                          name, __name__, {"T": T})


CODES = table.codes("arith")  # ONNX name -> op code of binary_kernel
binary_kernel = arith_kernel("binary_kernel", table.rows("arith"),
                             "y = a (op) b; an axis of size 1 in a or b is broadcast along y.")


@dsl.kernel
def relu_kernel(x: In[T], y: Out[T]):
    """max(x, 0) for every numeric dtype; NaN stays NaN."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        y.flat[i] = v if v > 0 or v != v else 0  # v != v: NaN passes through


@dsl.kernel
def unary_kernel(x: In[F], y: Out[F], op: i32, alpha: f32):
    """Float activations, computed in f32 (f64 for f64)."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        if op == LEAKY_RELU:
            y.flat[i] = v if v >= 0 else v * alpha
        elif op == SIGMOID:
            e = dsl.exp(-abs(v))  # in (0, 1]: no overflow for large |v|
            s = 1 / (1 + e)
            y.flat[i] = s if v >= 0 else e * s
        else:
            y.flat[i] = dsl.tanh(v)


@dsl.kernel
def clip_kernel(x: In[T], lo: In[T], hi: In[T], y: Out[T]):
    """min(max(x, lo), hi) with the bounds read from one-element tensors (inputs in ONNX
    opset 11+, so they may change between runs); NaN stays NaN, lo > hi gives hi."""
    a = lo.flat[0]
    b = hi.flat[0]
    lo_i, hi_i = dsl.split(x.size)
    for i in range(lo_i, hi_i):
        v = x.flat[i]
        c = a if v < a else v
        y.flat[i] = b if c > b else c


# --------------------------------------------------------------------------- shape helpers

def broadcast_shape(*shapes: Sequence[Optional[int]], what: str = "inputs") -> Tuple[Optional[int], ...]:
    """ONNX multidirectional (numpy) broadcasting with ``None`` (run-time) dims."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        dims = [s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0]
        known = {d for d in dims if d is not None and d != 1}
        if len(known) > 1:
            shown = " and ".join(str(tuple("?" if d is None else d for d in s)) for s in shapes)
            raise VerifyError(f"{what} shapes {shown} do not broadcast (axis {axis - rank}: "
                              f"sizes {sorted(known)}); each axis must match or be 1")
        if known:
            out.append(known.pop())
        elif any(d is None for d in dims):
            out.append(None)
        else:
            out.append(1)
    return tuple(out)


def collapse_broadcast(out_shape: Sequence[int], *shapes: Sequence[int]):
    """Merge adjacent axes broadcast the same way -> (out shape, one shape per input).

    Axes of size 1 in the output are dropped; an input's collapsed dim is 1 where it
    is broadcast, else the output's dim.  (2,3,4)+(4,) becomes (6,4)+(1,4)."""
    rank = len(out_shape)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    groups = []  # [pattern, out dim]
    for axis, d in enumerate(out_shape):
        if d == 1:
            continue
        pattern = tuple(s[axis] == 1 for s in padded)
        if groups and groups[-1][0] == pattern:
            groups[-1][1] *= d
        else:
            groups.append([pattern, d])
    out = tuple(g[1] for g in groups)
    ins = [tuple(1 if g[0][k] else g[1] for g in groups) for k in range(len(shapes))]
    return out, ins


def launch_broadcast(kernel, arrays: Sequence[np.ndarray], y: np.ndarray, rank: int, **kwargs) -> None:
    """Run ``kernel(*arrays, y, **kwargs)`` on ``rank``-D views of broadcast-compatible arrays.

    Shapes are collapsed first; if more than ``rank`` axes remain, the leading ones
    are looped over here (each launch gets contiguous sub-views)."""
    out, ins = collapse_broadcast(y.shape, *(a.shape for a in arrays))
    views = [a.reshape(s) for a, s in zip(arrays, ins)]
    yv = y.reshape(out)
    extra = max(0, len(out) - rank)
    for lead in itertools.product(*(range(d) for d in out[:extra])):
        subs = [v[tuple(i if v.shape[k] > 1 else 0 for k, i in enumerate(lead))] for v in views] if lead else views
        ys = yv[lead] if lead else yv
        pad = rank - ys.ndim
        subs = [s.reshape((1,) * pad + s.shape) for s in subs]
        kernel(*subs, ys.reshape((1,) * pad + ys.shape), **kwargs)


def same_dtype(what: str, *specs: TensorSpec) -> None:
    dts = {s.dtype for s in specs if s is not None}
    if len(dts) > 1:
        shown = ", ".join(f"{s.dtype}" for s in specs if s is not None)
        raise VerifyError(f"{what} need one dtype for all inputs, got {shown}; "
                          f"convert first (ops.DataConvert)")


def require_dtype(what: str, spec: TensorSpec, allowed: Sequence, name: str = "input") -> None:
    if spec.dtype not in allowed:
        raise VerifyError(f"{what} {name} has dtype {spec.dtype}; accepted: {', '.join(map(str, allowed))}")


# --------------------------------------------------------------------------- ops

class _Binary(dsl.Op):
    code = 0
    allowed = NUMERIC
    formats = ("plain", "nchwc16")
    inplace = {0: 0}
    keeps_padding = True  # 0 (op) 0 == 0
    kernels = {"default": binary_kernel}

    def verify(self, a, b):
        same_dtype(self.op_type, a, b)
        require_dtype(self.op_type, a, self.allowed)
        broadcast_shape(a.shape, b.shape, what=f"{self.op_type}")

    def infer(self, a, b):
        return TensorSpec(broadcast_shape(a.shape, b.shape), a.dtype)

    def opcode(self, dtype: np.dtype) -> int:
        """The binary_kernel op code for this dtype."""
        return self.code

    def run(self, impl, inputs, outputs, backend):
        launch_broadcast(impl, inputs, outputs[0], MAX_RANK, op=self.opcode(outputs[0].dtype), backend=backend)

    plan = dsl.recorded_plan  # the broadcast views depend on shapes only


@table.builder("arith")
def arith_class(row: table.Elementwise) -> type:
    """Add, Sub, Mul and arith rows added later (those get a kernel of their own)."""
    attrs = {"allowed": row.dtypes, "keeps_padding": row.keeps_padding, "__module__": __name__,
             "__qualname__": row.class_name, "__doc__": row.doc or f"{row.onnx}(a, b) with numpy broadcasting."}
    if row in table.ROWS:
        attrs["code"] = CODES[row.onnx]
    else:
        attrs["kernels"] = {"default": arith_kernel(f"{row.class_name.lower()}_kernel", [row], row.onnx)}
    return dsl.op(row.onnx, since=row.since, until=row.until)(type(row.class_name, (_Binary,), attrs))


Add, Sub, Mul = (table.register(r) for r in table.rows("arith"))


class _Unary(dsl.Op):
    formats = ("plain", "nchwc16")
    inplace = {0: 0}
    keeps_padding = True
    allowed = FLOATS
    code = TANH
    kernels = {"default": unary_kernel}

    def verify(self, x):
        require_dtype(self.op_type, x, self.allowed)

    def infer(self, x):
        return x.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0], outputs[0], op=self.code, alpha=float(getattr(self, "alpha", 0.0)), backend=backend)

    def plan(self, impl, inputs, outputs, backend):
        return [dsl.Launch(impl, (inputs[0], outputs[0]), {"op": self.code, "alpha": float(getattr(self, "alpha", 0.0))},
                           backend=backend)]


@table.implements
@dsl.op("Relu", since=6)
class Relu(_Unary):
    """max(x, 0); integers too (ONNX opset 14)."""
    allowed = NUMERIC
    kernels = {"default": relu_kernel}

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0], outputs[0], backend=backend)

    def plan(self, impl, inputs, outputs, backend):
        return [dsl.Launch(impl, (inputs[0], outputs[0]), backend=backend)]


@table.implements
@dsl.op("LeakyRelu", since=6)
class LeakyRelu(_Unary):
    """x if x >= 0 else alpha * x."""
    alpha: float = 0.01
    code = LEAKY_RELU


@table.implements
@dsl.op("Sigmoid", since=6)
class Sigmoid(_Unary):
    """1 / (1 + exp(-x)), evaluated without overflow."""
    code = SIGMOID
    keeps_padding = False  # sigmoid(0) = 0.5


@table.implements
@dsl.op("Tanh", since=6)
class Tanh(_Unary):
    code = TANH


class _Clip(dsl.Op):
    op_type = "Clip"
    formats = ("plain", "nchwc16")
    inplace = {0: 0}
    kernels = {"default": clip_kernel}  # keeps_padding False: Clip(0) may not be 0

    def bounds(self, dtype: np.dtype):
        """The (lo, hi) one-element arrays when no bound is given: the dtype's whole range."""
        if np.issubdtype(dtype, np.floating) or dtype.kind == "V":  # V: ml_dtypes' bfloat16
            return np.full((1,), -np.inf, dtype), np.full((1,), np.inf, dtype)
        info = np.iinfo(dtype)
        return np.full((1,), info.min, dtype), np.full((1,), info.max, dtype)


@table.implements
@dsl.op("Clip", since=6, until=10)
class ClipV6(_Clip):
    """Clip with ``min``/``max`` attributes (opsets 6-10)."""
    min: float = -3.4028234663852886e38
    max: float = 3.4028234663852886e38

    def verify(self, x):
        require_dtype("Clip", x, FLOATS)

    def infer(self, x):
        return x.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        dt = outputs[0].dtype
        lo, hi = np.full((1,), self.min, dt), np.full((1,), self.max, dt)
        impl(inputs[0], lo, hi, outputs[0], backend=backend)

    plan = dsl.recorded_plan  # launches from shapes and params only


@table.implements
@dsl.op("Clip", since=11)
class Clip(_Clip):
    """Clip with optional scalar ``min``/``max`` inputs (opset 11+); absent: unbounded."""

    def verify(self, x, min=None, max=None):
        require_dtype("Clip", x, NUMERIC)
        for name, bound in (("min", min), ("max", max)):
            if bound is None:
                continue
            same_dtype("Clip", x, bound)
            if any(d is not None and d != 1 for d in bound.shape) or bound.ndim > 1:
                raise VerifyError(f"Clip {name} must be a scalar (one element), got {bound}")

    def infer(self, x, min=None, max=None):
        return x.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        lo, hi = self.bounds(outputs[0].dtype)
        given = list(inputs[1:]) + [None, None]
        lo = lo if given[0] is None else given[0].reshape(1)
        hi = hi if given[1] is None else given[1].reshape(1)
        impl(inputs[0], lo, hi, outputs[0], backend=backend)

    plan = dsl.recorded_plan  # launches from shapes and params only
