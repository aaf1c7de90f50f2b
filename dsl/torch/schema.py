"""How an op class looks to ``torch.library``: its operator name in the ``opdsl`` namespace, its
schema (tensor inputs, then its params as keyword-only arguments, then ``backend``), and the
conversions between op params and the values torch passes (a ``dsl.DType`` travels as its name,
tuples as lists).  dtype tables between opdsl and torch live here too.
"""
from __future__ import annotations

import json
import re
import typing
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch

from dsl.lang import types as T
from dsl.lang.types import DType, as_dtype
from dsl.opgraph.op import Op, arity

TORCH_DTYPES = {T.f16: torch.float16, T.bf16: torch.bfloat16, T.f32: torch.float32, T.f64: torch.float64,
                T.i8: torch.int8, T.u8: torch.uint8, T.i16: torch.int16, T.i32: torch.int32, T.i64: torch.int64,
                T.bool_: torch.bool, T.u16: torch.uint16, T.u32: torch.uint32, T.u64: torch.uint64}
DSL_DTYPES = {v: k for k, v in TORCH_DTYPES.items()}


def torch_dtype(dt: DType) -> torch.dtype:
    return TORCH_DTYPES[as_dtype(dt)]


def dsl_dtype(t: torch.Tensor, where: str) -> DType:
    try:
        return DSL_DTYPES[t.dtype]
    except KeyError:
        raise TypeError(f"{where}: torch dtype {t.dtype} has no opdsl dtype "
                        f"(accepted: {', '.join(str(d) for d in TORCH_DTYPES.values())})") from None


@dataclass(frozen=True)
class ParamSlot:
    """One op param as a schema argument: its torch type ("float", "int[]?", ...) and how its
    value converts (``kind``: 'float', 'int', 'bool', 'str', 'dtype', 'ints', 'floats', 'bools')."""
    name: str
    torch_type: str
    kind: str
    optional: bool


def _kind(ann) -> Optional[Tuple[str, bool]]:
    """(kind, optional) of a param annotation, or None when torch's schema cannot carry it."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Union:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and type(None) in args:
            inner = _kind(rest[0])
            return None if inner is None or inner[1] else (inner[0], True)
        return None
    if origin is typing.Literal:
        kinds = {type(a) for a in args}
        if len(kinds) == 1 and kinds <= {str, int, float, bool}:
            return kinds.pop().__name__, False
        return None
    simple = {float: "float", int: "int", bool: "bool", str: "str", DType: "dtype"}
    if ann in simple:
        return simple[ann], False
    if origin in (tuple, list) or (origin is not None and getattr(origin, "__name__", "") == "Sequence"):
        elems = [a for a in args if a is not Ellipsis]
        if elems and all(a is int for a in elems):
            return "ints", False
        if elems and all(a in (float, int) for a in elems):
            return "floats", False
        if elems and all(a is bool for a in elems):
            return "bools", False
    return None


_TORCH_TYPE = {"float": "float", "int": "int", "bool": "bool", "str": "str", "dtype": "str",
               "ints": "int[]", "floats": "float[]", "bools": "bool[]"}


def _default_text(kind: str, value) -> str:
    if value is None:
        return "None"
    if kind == "dtype":
        return json.dumps(as_dtype(value).name)
    if kind == "str":
        return json.dumps(value)
    if kind == "bool":
        return "True" if value else "False"
    if kind in ("ints", "floats", "bools"):
        return "[" + ", ".join(_default_text(kind[:-1] if kind != "ints" else "int", v) for v in value) + "]"
    return repr(float(value)) if kind == "float" else repr(int(value))


@dataclass(frozen=True)
class Signature:
    """An op class's torch operator: name, schema text, input names and param slots."""
    name: str
    schema: str
    inputs: Tuple[str, ...]
    optional_inputs: frozenset
    params: Tuple[ParamSlot, ...]
    left_out: Tuple[str, ...]  # params with defaults the schema cannot carry (must stay default)

    def encode(self, op: Op) -> Dict[str, Any]:
        """The op's params as keyword arguments of the torch operator."""
        given = op.params
        table = type(op).param_table()
        for name in self.left_out:
            if not _same(given[name], table[name].default):
                raise TypeError(f"{op!r}: param '{name}' ({table[name].annotation}) cannot pass through a torch "
                                f"operator's schema; only its default value can be used from PyTorch")
        out = {}
        for slot in self.params:
            v = given[slot.name]
            if v is None:
                out[slot.name] = None
            elif slot.kind == "dtype":
                out[slot.name] = as_dtype(v).name
            elif slot.kind in ("ints", "floats", "bools"):
                out[slot.name] = list(v)
            else:
                out[slot.name] = v
        return out

    def decode(self, cls, kwargs: Dict[str, Any]) -> Op:
        """The op instance for keyword arguments torch passes (omitted ones take the defaults)."""
        params = {k: v for k, v in kwargs.items() if k != "backend"}
        for slot in self.params:
            if slot.kind == "dtype" and params.get(slot.name) is not None:
                params[slot.name] = as_dtype(params[slot.name])
        return cls(**params)


def _same(a, b) -> bool:
    try:
        return bool(np.all(a == b)) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else a == b
    except Exception:
        return False


def operator_name(cls, num_outputs: int) -> str:
    """``com.example`` / ``Squareplus`` -> ``com_example__Squareplus`` (``onnx__Relu`` for ai.onnx)."""
    domain = re.sub(r"\W", "_", cls.domain or "onnx")
    base = f"{domain}__{re.sub(r'[^0-9A-Za-z_]', '_', cls.op_type or cls.__name__)}"
    return base if num_outputs == 1 else f"{base}__{num_outputs}_outputs"


def signature(cls, num_outputs: int) -> Signature:
    """The torch schema of op class ``cls`` with ``num_outputs`` outputs, or a TypeError saying
    which input or param torch cannot express."""
    owner = f"dsl.torch.register({cls.__name__})"
    if getattr(cls, "host_values", False):
        raise TypeError(f"{owner}: {cls.__name__} takes or gives sequences/optionals on the host; torch operators "
                        "take tensors only")
    names, required, most = arity(cls)
    if most is None:
        raise TypeError(f"{owner}: {cls.__name__} takes a variable number of inputs ({', '.join(names)}); a torch "
                        "operator needs a fixed list of tensor arguments")
    inputs, optional, parts = [], set(), []
    for n in names:
        base = n.split("=")[0]
        inputs.append(base)
        if n.endswith("=None"):
            optional.add(base)
            parts.append(f"Tensor? {base}=None")
        else:
            parts.append(f"Tensor {base}")
    slots, left_out, kw = [], [], []
    for p in cls.param_table().values():
        k = _kind(p.annotation)
        if k is None:
            if p.required:
                raise TypeError(f"{owner}: param '{p.name}' has type {p.annotation}, which a torch schema cannot "
                                "carry (accepted: float, int, bool, str, dsl.DType, tuples of int/float/bool, "
                                "Optional and Literal of those)")
            left_out.append(p.name)
            continue
        kind, opt = k
        if not p.required and p.default is None:
            opt = True
        ttype = _TORCH_TYPE[kind] + ("?" if opt else "")
        slots.append(ParamSlot(p.name, ttype, kind, opt))
        kw.append(f"{ttype} {p.name}" if p.required else f"{ttype} {p.name}={_default_text(kind, p.default)}")
    clash = set(inputs) & ({s.name for s in slots} | {"backend"})
    if clash:
        raise TypeError(f"{owner}: input and param names clash: {', '.join(sorted(clash))}")
    kw.append("str? backend=None")
    ret = "Tensor" if num_outputs == 1 else "(" + ", ".join(["Tensor"] * num_outputs) + ")"
    schema = f"({', '.join(parts + ['*'] + kw)}) -> {ret}"
    return Signature(operator_name(cls, num_outputs), schema, tuple(inputs), frozenset(optional), tuple(slots),
                     tuple(left_out))
