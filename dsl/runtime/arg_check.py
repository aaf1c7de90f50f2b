"""What a kernel argument must be, written once: the rules, their error messages, and the same
rules as source lines for the generated binders.

A launch reaches a kernel's compiled code by one of four roads: ``Kernel.bind`` (the first
launch of some argument types, and every launch a model prepares), the fast binder
(dsl/runtime/fastpath.py: types seen before), the one-hop binder (dsl/runtime/hop.py: straight to
the serial entry's machine code) and a model run that reads a caller's feed in place
(dsl/opgraph/binding.py).  Each accepts exactly what the rules below accept:

* a tensor is an ``np.ndarray`` (not a masked array) of the parameter's dtype (or the dtype its
  TypeVar bound to), of the declared rank, C-contiguous, and writable when it is ``Out``/``InOut``;
* an ``Out``/``InOut`` shares no memory with another tensor argument (a model's in-place node
  may pass the very same memory as In and Out);
* a scalar is a number of a kind its dtype accepts (bool for bool_, integers for ints, integers
  or floats for floats), an integer within the dtype's range;
* a ``Vec`` is a sequence of its length whose every element passes the scalar rule.

``Kernel.bind`` calls the raising functions (every error message a user sees comes from here);
the generated binders test the same rules inline and, on anything they do not accept, fall back
to ``Kernel.bind``, which then names what is wrong.  A frozen launch (a model's plan) was bound
once by ``Kernel.bind``; only a caller's feed can change between runs, and ``rebinds`` re-checks it.
"""
from __future__ import annotations

import sys
from typing import Dict, List, Optional

import numpy as np

from dsl.lang import types as T

INT_TYPES = (int, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
FLOAT_TYPES = INT_TYPES + (float, np.float16, np.float32, np.float64)
BOOL_TYPES = (bool, np.bool_)


def accepted_scalars(dt: T.DType) -> frozenset:
    """The Python and numpy scalar types a parameter of dtype ``dt`` accepts (then converted)."""
    return frozenset(BOOL_TYPES if dt.is_bool else INT_TYPES if dt.is_int else FLOAT_TYPES)


# ---------------------------------------------------------------------- the rules, raising

def check_tensor(kname: str, p, v, typevars: Dict, hint: Optional[str] = None) -> T.DType:
    """The dtype tensor argument ``v`` binds for parameter ``p`` (binding ``p``'s TypeVar in
    ``typevars``); TypeError / ValueError naming the argument otherwise.  ``hint``: how to make a
    foreign array contiguous."""
    ann = p.annotation
    if not isinstance(v, np.ndarray):
        raise TypeError(f"{kname}(): argument '{p.name}' must be a numpy array ({ann!r}) or a CPU array with "
                        f"__dlpack__ or the buffer protocol (torch.Tensor, array.array...), got {type(v).__name__}")
    masked = sys.modules.get("numpy.ma")  # no masked array exists before numpy.ma is imported (~70 ms)
    if masked is not None and isinstance(v, masked.MaskedArray):
        raise TypeError(f"{kname}(): argument '{p.name}' is a masked array; kernels ignore masks, so pass "
                        f"{p.name}.filled(value) (masked elements replaced) or {p.name}.data (the raw values)")
    try:
        dt = T.from_numpy(v.dtype)
    except TypeError as e:
        raise TypeError(f"{kname}(): argument '{p.name}': {e}") from None
    want = ann.dtype
    if isinstance(want, T.TypeVar):
        bound = typevars.get(want)
        if bound is None:
            if want.allowed and dt not in want.allowed:
                raise TypeError(f"{kname}(): argument '{p.name}' has dtype {dt}; {want.name} accepts "
                                f"{', '.join(map(str, want.allowed))}")
            if want is not T.ANY:
                typevars[want] = dt
        elif bound != dt:
            raise TypeError(f"{kname}(): argument '{p.name}' has dtype {dt} but {want.name} is {bound} from an "
                            "earlier argument")
    elif want != dt:
        raise TypeError(f"{kname}(): argument '{p.name}' has dtype {dt} ({v.dtype}); expected {want} ({ann!r})")
    if ann.ndim is not None and v.ndim != ann.ndim:
        raise ValueError(f"{kname}(): argument '{p.name}' has {v.ndim} dimension(s); expected {ann.ndim} ({ann!r})")
    if not v.flags.c_contiguous:
        raise ValueError(f"{kname}(): argument '{p.name}' is not C-contiguous; pass "
                         f"{hint or f'np.ascontiguousarray({p.name})'}")
    if ann.writable and not v.flags.writeable:
        raise ValueError(f"{kname}(): argument '{p.name}' is {ann!r} but the array is read-only")
    return dt


def check_overlap(kname: str, params, values, inplace_ok: bool = False) -> None:
    """An Out/InOut must not share memory with any other tensor argument: the kernel's threads
    would read data another thread is writing.  Arguments are C-contiguous, so the byte-range
    test of ``np.may_share_memory`` is exact here.  ``inplace_ok``: the very same memory as In
    and Out is allowed (a model node the memory plan runs in place)."""
    tensors = [(p, v) for p, v in zip(params, values) if p.kind == "tensor"]
    for i, (p, a) in enumerate(tensors):
        for q, b in tensors[i + 1:]:
            if not (p.annotation.writable or q.annotation.writable) or not np.may_share_memory(a, b):
                continue
            if (inplace_ok and a.nbytes == b.nbytes
                    and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]):
                continue
            raise ValueError(f"{kname}(): arguments '{p.name}' ({p.annotation!r}) and '{q.name}' ({q.annotation!r}) "
                             "overlap in memory; pass distinct arrays, or take the data once as an InOut parameter "
                             "to read and write it in place")


def scalar_value(kname: str, pname: str, dt: T.DType, v):
    """``v`` as the numpy scalar of ``dt`` a launcher takes; TypeError / ValueError otherwise."""
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v[()]
    if dt.is_bool:
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{kname}(): argument '{pname}' is bool_; got {type(v).__name__} {v!r}")
        return np.bool_(v)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{kname}(): argument '{pname}' is {dt}; got {type(v).__name__} {v!r}")
    if dt.is_int:
        if isinstance(v, (float, np.floating)):
            if not float(v).is_integer():
                raise TypeError(f"{kname}(): argument '{pname}' is {dt}; got float {v!r}")
            v = int(v)
        lo, hi = T.int_range(dt)
        if not lo <= int(v) <= hi:
            raise ValueError(f"{kname}(): argument '{pname}' = {v} does not fit {dt} ({lo}..{hi})")
        return dt.np.type(v)
    if dt.is_storage_only:
        return np.float32(dt.np.type(v))
    return dt.np.type(v)


def infer_scalar_dtype(kname: str, p, v) -> T.DType:
    """The dtype a TypeVar scalar binds from ``v`` when no tensor bound it."""
    if isinstance(v, np.generic):
        return T.from_numpy(v.dtype)
    if isinstance(v, bool):
        return T.bool_
    if isinstance(v, int):
        return T.i64
    if isinstance(v, float):
        return T.f64
    raise TypeError(f"{kname}(): argument '{p.name}' ({p.annotation!r}) must be a number, got {type(v).__name__}")


def vec_value(kname: str, p, v) -> np.ndarray:
    """``v`` as the 1-d array a ``Vec`` parameter takes, each element checked like a scalar."""
    spec = p.annotation
    try:
        arr = np.asarray(v)
    except Exception:
        arr = None
    if arr is None or arr.ndim != 1 or arr.shape[0] != spec.length:
        raise ValueError(f"{kname}(): argument '{p.name}' must be a sequence of {spec.length} numbers ({spec!r}), "
                         f"got {v!r}")
    # each element is checked like a scalar argument: out of range is an error, never a wrap-around
    values = [scalar_value(kname, f"{p.name}[{k}]", spec.dtype, x) for k, x in enumerate(arr)]
    return np.array(values, dtype=spec.dtype.np)


def rebinds(a, buf: np.ndarray, read_only_ok: bool) -> bool:
    """Whether a caller's array ``a`` may stand where a bound launch holds ``buf`` (a model run
    reading its feed in place): the very types ``buf`` was checked with -- an exact ndarray of the
    same dtype and shape, C-contiguous and aligned -- and writable unless ``read_only_ok`` (every
    use of it is a launch frozen for those types, which never writes it)."""
    if type(a) is not np.ndarray or a.shape != buf.shape or a.dtype != buf.dtype:
        return False
    f = a.flags
    return f.c_contiguous and f.aligned and (f.writeable or read_only_ok)


# ---------------------------------------------------------------------- the rules, as source lines
# The generated binders (fastpath.py, hop.py) paste these; ``fail`` is their "not mine, let
# Kernel.bind decide" statement.  Names they use from the environment: ndarray, shares.

GUARD_ENV = {"ndarray": np.ndarray, "shares": np.may_share_memory}


def tensor_lines(name: str, writable: bool, fail: str, dtype: Optional[str] = None,
                 ndim: Optional[int] = None, flags_local: bool = False) -> List[str]:
    """Lines passing only an exact ndarray (of environment dtype ``dtype`` and rank ``ndim`` when
    given: the rank and dtype rules for types already checked once), C-contiguous, writable when
    ``writable``.  ``flags_local``: read the flags once into local ``_f`` (only for binders whose
    parameter names are their own, as hop.py's ``a0, a1...``)."""
    tests = [f"type({name}) is not ndarray"]
    if dtype is not None:
        tests.append(f"{name}.dtype is not {dtype}")
    if ndim is not None:
        tests.append(f"{name}.ndim != {ndim}")
    flags = "_f" if flags_local else f"{name}.flags"
    return [f"    if {' or '.join(tests)}: {fail}",
            *([f"    _f = {name}.flags"] if flags_local else []),
            f"    if not ({flags}.c_contiguous{f' and {flags}.writeable' if writable else ''}): {fail}"]


def overlap_lines(tensors, fail: str) -> List[str]:
    """Lines refusing an Out/InOut that may share memory with another tensor (``tensors``: (source
    name, writable) pairs).  Distinct arrays that own their memory (base None) cannot overlap;
    views get numpy's exact test.  In-place launches fall back to ``check_overlap``."""
    return [f"    if ({a}.base is not None or {b}.base is not None or {a} is {b}) and shares({a}, {b}): {fail}"
            for i, (a, wa) in enumerate(tensors) for b, wb in tensors[i + 1:] if wa or wb]


def scalar_lines(name: str, dt: T.DType, env: dict, fail: str, convert: bool) -> List[str]:
    """Lines passing a scalar the rule accepts for ``dt``.  ``convert``: it leaves as ``dt``'s
    numpy type (f16 and bf16 as f32, as ``scalar_value`` does); otherwise a Python int within
    range and a Python float stay unconverted (a compiled entry unboxes them itself), and those
    common cases are tested first."""
    env[f"A_{name}"] = accepted_scalars(dt)
    env[f"C_{name}"] = np.float32 if dt.is_storage_only else dt.np.type
    other = [f"        if type({name}) not in A_{name}: {fail}"]
    if dt.is_int:
        env[f"LO_{name}"], env[f"HI_{name}"] = T.int_range(dt)
        in_range = f"if not LO_{name} <= {name} <= HI_{name}: {fail}"
        same = f"        if not C_{name}({name}) == {name}: {fail}"
        if convert:
            return [f"    if type({name}) is not C_{name}:", *other,
                    f"        if type({name}) is int:", f"            {in_range}",
                    f"        elif not C_{name}({name}) == {name}: {fail}",
                    f"        {name} = C_{name}({name})"]
        return [f"    if type({name}) is int:", f"        {in_range}",
                f"    elif type({name}) is not C_{name}:", *other, same,
                f"        {name} = C_{name}({name})"]
    if dt.is_float and not convert:
        return [f"    if type({name}) is not float and type({name}) is not C_{name}:", *other,
                f"        {name} = C_{name}({name})"]
    return [f"    if type({name}) is not C_{name}:", *other, f"        {name} = C_{name}({name})"]
