"""The interpreter's checked views of kernel memory: tensor arguments, scratch buffers and
``dsl.local`` arrays.

numpy alone would wrap a negative index, store into an ``In`` array and compute in f16; these
views check every index, refuse writes to ``In``, widen f16/bf16 loads to f32 and convert
stores as the compiled code does, so the interpreter can serve as the language's definition.
"""
from __future__ import annotations

import builtins as _py_builtins
import operator

import numpy as np

from dsl.lang import builtins as B
from dsl.lang import types as T


class Tensor:
    """A kernel tensor argument: numpy indexing with bounds checks.

    Loads give numpy scalars (f32 for f16/bf16 storage); ``.shape`` and
    ``.size`` are Python ints (the checker types them weak).  ``np.asarray(t)``
    gives the underlying array (read-only for ``In``).  Scratch buffers and
    ``dsl.local`` arrays are views of this class too (``kind`` names them in errors).
    """

    __slots__ = ("array", "name", "access", "kind", "shape", "size", "ndim", "dtype", "flat",
                 "_shape", "_n0", "_n1", "_wide", "_int", "_fast", "dsl_dtype")

    def __init__(self, array: np.ndarray, name: str, access: str, dtype: T.DType, kind: str = "tensor"):
        if access == "in":
            array = array.view()
            array.flags.writeable = False
        self.array = array
        self.name = name
        self.access = access
        self.kind = kind
        self.dtype = array.dtype
        self.dsl_dtype = dtype  # what a @dsl.func specialization for this tensor was typed with
        self._shape = self.shape = tuple(array.shape)
        self._n0 = self._shape[0] if self._shape else 0
        self._n1 = self._shape[1] if len(self._shape) > 1 else 0
        self.size = array.size
        self.ndim = array.ndim
        self._wide = dtype.is_storage_only
        self._int = dtype.is_int
        self._fast = access != "in" and dtype.is_float and not self._wide  # plain numpy store is exact
        self.flat = _Flat(self)

    # -- indexing: the hot path of every kernel, so the common ranks are spelled out
    def _index(self, idx):
        """``idx`` when it names one element, else an IndexError naming tensor, index and shape."""
        try:
            nd = self.ndim
            if nd == 1:
                ok = 0 <= idx < self._n0
            elif nd == 2:
                i, j = idx
                ok = 0 <= i < self._n0 and 0 <= j < self._n1
            else:
                ok = idx.__class__ is tuple and len(idx) == nd and all(0 <= k < n for k, n in zip(idx, self._shape))
        except (TypeError, ValueError):
            ok = False
        if ok:
            return idx
        raise IndexError(_describe_bad_index(self, idx))

    def __getitem__(self, idx):
        v = self.array[self._index(idx)]
        return np.float32(v) if self._wide else v

    def __setitem__(self, idx, value) -> None:
        if self._fast:
            self.array[self._index(idx)] = value
        else:
            _store(self, self.array, self._index(idx), value)

    # -- SIMD loads and stores (on the tensor as one row-major vector, like .flat)
    def vload(self, i, lanes):
        """``lanes`` consecutive elements from flat index ``i``: a new SIMD value (never a view, so
        later stores do not change it); f16/bf16 lanes widen to f32 as element loads do."""
        i = self._lane_range(i, lanes, "vload")
        v = self.flat._a[i:i + lanes]
        return (v.astype(np.float32) if self._wide else v.copy()).view(B.Lanes)

    def vstore(self, i, value) -> None:
        """The lanes of ``value`` to flat indexes ``i``, ``i + 1``...: converted as element stores are."""
        lanes = np.shape(value)[0]
        i = self._lane_range(i, lanes, "vstore")
        if self._fast:
            self.flat._a[i:i + lanes] = value
        else:
            _store(self, self.flat._a, slice(i, i + lanes), value)

    def _lane_range(self, i, lanes, what):
        """``i`` (a Python int, so ``i + lanes`` cannot wrap) when lanes ``i .. i + lanes - 1`` are all
        inside the tensor, else an IndexError."""
        try:
            j = operator.index(i)
            ok = 0 <= j and j + lanes <= self.size
        except TypeError:
            ok = False
        if ok:
            return j
        raise IndexError(_describe_bad_lanes(self, i, lanes, what))

    # -- conveniences for pdb users and numpy
    def __len__(self) -> int:
        if not self._shape:
            raise TypeError(f"len() of 0-d tensor {self.name!r}")
        return self._shape[0]

    def __array__(self, dtype=None, copy=None):
        return self.array if dtype is None else self.array.astype(dtype)

    def __repr__(self) -> str:
        return (f"<{self.access} {self.kind} {self.name!r} {self.dtype} shape {self._shape}>\n"
                f"{np.array2string(self.array, threshold=64)}")


class _Flat:
    """``t.flat[i]``: the tensor as one row-major vector, bounds-checked."""

    __slots__ = ("tensor", "_a", "_n", "_wide", "_fast")

    def __init__(self, tensor: Tensor):
        self.tensor = tensor
        self._wide = tensor._wide
        self._fast = tensor._fast
        # a view (kernel tensors are C-contiguous); an array of SIMD values keeps its lane axis
        self._a = tensor.array.reshape((tensor.size,) + tensor.array.shape[tensor.ndim:])
        self._n = tensor.size

    def _bad(self, i):
        return IndexError(_describe_bad_index(self.tensor, i, flat=True))

    # The hot path of most kernels: the check is inlined (0 <= tuple raises TypeError).
    def __getitem__(self, i):
        try:
            ok = 0 <= i < self._n
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise self._bad(i)
        v = self._a[i]
        return np.float32(v) if self._wide else v

    def __setitem__(self, i, value) -> None:
        try:
            ok = 0 <= i < self._n
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise self._bad(i)
        if self._fast:
            self._a[i] = value
        else:
            _store(self.tensor, self._a, i, value)

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"<{self.tensor.name}.flat, {self._n} elements>"


def _store(t: Tensor, array: np.ndarray, idx, value) -> None:
    """``array[idx] = value`` with the IR's store cast: f16/bf16 through f32, ints wrap; ``value``
    may be a SIMD value (``idx`` then names its lanes' places)."""
    if t.access == "in":
        raise ValueError(f"tensor {t.name!r} is In[{T.from_numpy(t.dtype)}]: read-only inside the kernel; "
                         "declare it Out[...] or InOut[...] to write to it")
    if t._wide:
        value = np.float32(value)
    elif t._int and isinstance(value, (float, np.floating)):  # saturate, NaN -> 0, like compiled casts
        value = T.from_numpy(t.dtype)(value)
    elif t._int and isinstance(value, np.ndarray) and value.dtype.kind == "f":
        value = B.saturated_lanes(value, T.from_numpy(t.dtype))
    try:
        array[idx] = value
    except OverflowError:  # numpy refuses out-of-range ints; the compiled cast wraps
        if not t._int:
            raise
        array[idx] = np.asarray(value).astype(t.dtype)


def _describe_bad_index(t: Tensor, idx, flat: bool = False) -> str:
    shown = tuple(_py_builtins.int(k) if isinstance(k, (int, np.integer)) else k for k in idx) \
        if isinstance(idx, tuple) else (_py_builtins.int(idx) if isinstance(idx, (int, np.integer)) else idx)
    if flat:
        return (f"index {shown!r} out of bounds for {t.name}.flat: {t.kind} {t.name!r} has shape "
                f"{t._shape} ({t.size} elements); accepted: 0 <= i < {t.size}")
    if isinstance(idx, tuple) and len(idx) != len(t._shape) or not isinstance(idx, tuple) and len(t._shape) != 1:
        n = len(idx) if isinstance(idx, tuple) else 1
        return (f"{t.kind} {t.name!r} has {len(t._shape)} dimension(s) (shape {t._shape}) but was indexed "
                f"with {n} index(es) {shown!r}; use one index per dimension, or {t.name}.flat[i]")
    if isinstance(idx, tuple):
        bad = next((d for d, k in enumerate(idx) if not _in_range(k, t._shape[d])), None)
        where = f" (axis {bad}: {shown[bad]!r} not in 0..{t._shape[bad] - 1})" if bad is not None else ""
    else:
        where = ""
    return f"index {shown!r} out of bounds for {t.kind} {t.name!r} of shape {t._shape}{where}"


def _describe_bad_lanes(t: Tensor, i, lanes, what: str) -> str:
    shown = _py_builtins.int(i) if isinstance(i, (int, np.integer)) else i
    span = f"elements {shown}..{shown + lanes - 1}" if isinstance(shown, int) else f"index {shown!r}"
    accepted = f"0 <= i <= {t.size - lanes}" if t.size >= lanes else f"none: it has fewer than {lanes} elements"
    return (f"{t.name}.{what}({shown!r}, {lanes}): {span} out of bounds for {t.kind} {t.name!r} of shape "
            f"{t._shape} ({t.size} elements); accepted: {accepted}")


def _in_range(k, n) -> bool:
    try:
        return 0 <= k < n
    except TypeError:
        return False


# --------------------------------------------------------------------------- dsl.local arrays

def local_array(name: str, shape, dtype) -> Tensor:
    """A fresh ``dsl.local`` array: zero-filled, checked like a tensor, stores converted like
    ``astype``; an array of SIMD values when ``dtype`` is a ``dsl.simd`` type."""
    shape = tuple(_py_builtins.int(n) for n in shape)
    if isinstance(dtype, T.SimdType):
        return SimdArray(np.zeros(shape + (dtype.lanes,), dtype.elem.np), name, dtype)
    dtype = dtype.compute  # f16/bf16 elements are held as f32, as the checker types them
    return Tensor(np.zeros(shape, dtype.np), name, "inout", dtype, kind="dsl.local array")


class SimdArray(Tensor):
    """A ``dsl.local`` array of SIMD values: storage ``shape + (lanes,)``, indexed by ``shape``.

    ``acc[i]`` is a copy of the lanes (a value: ``v = acc[0]; acc[0] += 1`` leaves ``v``
    alone); ``acc[i] = v`` writes them, a scalar broadcasting as the checker's splat does."""

    __slots__ = ()

    def __init__(self, array: np.ndarray, name: str, dtype: T.SimdType):
        super().__init__(array, name, "inout", dtype.elem, kind="dsl.local array")
        self._shape = self.shape = tuple(array.shape[:-1])
        self._n0 = self._shape[0]
        self._n1 = self._shape[1] if len(self._shape) > 1 else 0
        self.size = array.size // dtype.lanes
        self.ndim = len(self._shape)
        self.flat = _LaneRows(self)

    def __getitem__(self, idx):
        return self.array[self._index(idx)].copy().view(B.Lanes)


class _LaneRows(_Flat):
    """``acc.flat[i]`` of an array of SIMD values: element ``i`` in row-major order, a copy."""

    __slots__ = ()

    def __getitem__(self, i):
        return _Flat.__getitem__(self, i).copy().view(B.Lanes)
