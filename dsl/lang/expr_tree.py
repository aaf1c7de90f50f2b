"""A fused elementwise computation as data: the program of a ``FusedElementwise`` node.

The fusion pass (ops/elementwise_fusion.py) turns a group of elementwise nodes into one
``Program``: numbered steps, each a ``Call`` of an elementwise op (a row of
ops/elementwise_table.py, named by its ONNX op type and version) whose arguments are the fused
node's inputs (``Input``), number literals (``Const``), absent optional inputs (``None``) or
earlier steps (``Ref``).  The last step's value is the node's output.

Why data and not kernel text: the kernel is written from it (each row says how it spells in the
DSL), the ONNX export walks it (each call is one standard node), equality and hashing are the
dataclasses', and a model file holds it in a form (``to_json``/``from_json``) that cannot carry
code.  Steps refer to earlier steps by number rather than nesting calls, so a value read twice is
computed once and hashing stays linear in the program's length.

This module sits in the language layer, below the op library and the ONNX code, so both can read
programs; which ops exist is the op library's business (ops/fused_elementwise.py checks that).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

FORMAT = "opdsl.elementwise/1"
"""The ``format`` key of the JSON form; a later change of the form gets a new number."""
STEP_DTYPES = ("f32", "f64")
"""What a step is computed and rounded in: f16/bf16 values are computed in f32 (the kernel loads
them as f32, and only the node's final store rounds to them)."""


@dataclass(frozen=True)
class Input:
    """The fused node's input ``index`` (one element of it, broadcast to the output)."""

    index: int

    def __post_init__(self):
        if not isinstance(self.index, int) or isinstance(self.index, bool) or self.index < 0:
            raise ValueError(f"Input index must be an int >= 0, got {self.index!r}")

    def __str__(self) -> str:
        return f"x{self.index}"


@dataclass(frozen=True)
class Ref:
    """The value of the program's earlier step ``index``."""

    index: int

    def __post_init__(self):
        if not isinstance(self.index, int) or isinstance(self.index, bool) or self.index < 0:
            raise ValueError(f"Ref index must be an int >= 0, got {self.index!r}")

    def __str__(self) -> str:
        return f"t{self.index}"


@dataclass(frozen=True)
class Const:
    """A finite number literal.  As in a kernel (NEP 50), it takes the dtype of the step that
    reads it."""

    value: float

    def __post_init__(self):
        v = self.value
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"Const value must be a finite int or float, got {v!r}")
        object.__setattr__(self, "value", float(v))

    def __str__(self) -> str:
        return repr(self.value)


Arg = Union[Input, Ref, Const, None]


@dataclass(frozen=True)
class Call:
    """One step: the elementwise op ``op`` (ONNX op type) of version ``since`` (None: the newest
    version that fuses) applied to ``args``, computed and rounded in ``dtype`` (f32 or f64).
    ``attrs``: the op's number attributes the step needs (LeakyRelu's ``alpha``), sorted by name."""

    op: str
    args: Tuple[Arg, ...]
    dtype: str = "f32"
    since: Optional[int] = None
    attrs: Tuple[Tuple[str, float], ...] = ()

    def __post_init__(self):
        if not isinstance(self.op, str) or not self.op.isidentifier():
            raise ValueError(f"Call op must be an ONNX op type such as 'Add', got {self.op!r}")
        if isinstance(self.args, list):
            object.__setattr__(self, "args", tuple(self.args))
        if not isinstance(self.args, tuple) or not all(a is None or isinstance(a, (Input, Ref, Const))
                                                       for a in self.args):
            raise ValueError(f"Call {self.op}: args must be a tuple of Input, Ref, Const or None, got {self.args!r}")
        if self.dtype not in STEP_DTYPES:
            raise ValueError(f"Call {self.op}: dtype {self.dtype!r}; accepted: {', '.join(STEP_DTYPES)} "
                             "(f16/bf16 values are computed in f32)")
        if self.since is not None and (not isinstance(self.since, int) or isinstance(self.since, bool)
                                       or self.since < 1):
            raise ValueError(f"Call {self.op}: since must be an opset version >= 1 or None, got {self.since!r}")
        attrs = dict(self.attrs) if isinstance(self.attrs, dict) else None
        items = tuple(sorted(attrs.items())) if attrs is not None else tuple(tuple(a) for a in self.attrs)
        for item in items:
            if not (len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], (int, float))
                    and not isinstance(item[1], bool) and math.isfinite(item[1])):
                raise ValueError(f"Call {self.op}: attrs must be (name, finite number) pairs, got {item!r}")
        object.__setattr__(self, "attrs", tuple(sorted((k, float(v)) for k, v in items)))

    def attr(self, name: str) -> Optional[float]:
        return dict(self.attrs).get(name)

    def __str__(self) -> str:
        args = ", ".join("None" if a is None else str(a) for a in self.args)
        attrs = "".join(f", {k}={v!r}" for k, v in self.attrs)
        version = "" if self.since is None else f"@{self.since}"
        return f"{self.op}{version}({args}{attrs}): {self.dtype}"


@dataclass(frozen=True)
class Program:
    """The steps of a fused computation, in order; the last one is the result.  Built with
    ``Program((Call(...), ...))`` or ``ProgramBuilder``."""

    steps: Tuple[Call, ...]

    def __post_init__(self):
        if isinstance(self.steps, list):
            object.__setattr__(self, "steps", tuple(self.steps))
        if not isinstance(self.steps, tuple) or not self.steps:
            raise ValueError("Program needs at least one step (a tuple of Call)")
        for k, step in enumerate(self.steps):
            if not isinstance(step, Call):
                raise ValueError(f"Program step {k} is {type(step).__name__} {step!r}; every step is a Call")
            for a in step.args:
                if isinstance(a, Ref) and a.index >= k:
                    earlier = f"the earlier steps t0..t{k - 1}" if k else "inputs and constants only (it is the first)"
                    raise ValueError(f"Program step {k} ({step}) reads t{a.index}; it may read {earlier}")

    @property
    def n_inputs(self) -> int:
        """How many inputs the program reads at least (its highest Input index + 1)."""
        return 1 + max((a.index for s in self.steps for a in s.args if isinstance(a, Input)), default=-1)

    @property
    def dtype(self) -> str:
        return self.steps[-1].dtype

    def __str__(self) -> str:
        return "\n".join(f"t{k} = {s}" for k, s in enumerate(self.steps))

    # ------------------------------------------------------------------ the ONNX attribute form

    def to_json(self) -> str:
        """The program as JSON text (an ONNX string attribute, docs/onnx.md): data only."""
        return json.dumps({"format": FORMAT, "steps": [_step_json(s) for s in self.steps]},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Program":
        """The program ``to_json`` wrote, or a ValueError naming the first part that is wrong."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError):
            start = text.lstrip()[:40] if isinstance(text, str) else repr(text)
            old = isinstance(text, str) and text.lstrip().startswith("t0 =")
            hint = ("; it is the Python-text program opdsl wrote before programs became data (issue 26): "
                    "that form is no longer read, export the model again" if old else "")
            raise ValueError(f"FusedElementwise program is not the JSON form {FORMAT!r} "
                             f"(it starts {start!r}){hint}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            got = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"FusedElementwise program: format {got!r}; accepted: {FORMAT!r}")
        steps = data.get("steps")
        if not isinstance(steps, list):
            raise ValueError("FusedElementwise program: 'steps' must be a list of steps")
        calls = []
        for k, s in enumerate(steps):
            try:
                calls.append(_step_from_json(s))
            except (TypeError, ValueError, KeyError) as e:
                raise ValueError(f"FusedElementwise program steps[{k}] {json.dumps(s)[:80]}: {e}") from None
        return cls(tuple(calls))

    def onnx_attribute(self) -> str:
        """The value of the ONNX attribute that holds this param (dsl/onnx/attributes.py)."""
        return self.to_json()

    @classmethod
    def from_onnx_attribute(cls, value: Any) -> "Program":
        """The param from its ONNX attribute value (dsl/onnx/load.py)."""
        if not isinstance(value, str):
            raise ValueError(f"FusedElementwise program: expected a string attribute, got {type(value).__name__}")
        return cls.from_json(value)


_ARG_KEYS = ("input", "step", "const")


def _arg_json(a: Arg) -> Optional[Dict[str, Any]]:
    if a is None:
        return None
    if isinstance(a, Input):
        return {"input": a.index}
    if isinstance(a, Ref):
        return {"step": a.index}
    return {"const": a.value}


def _step_json(s: Call) -> Dict[str, Any]:
    out: Dict[str, Any] = {"op": s.op, "args": [_arg_json(a) for a in s.args], "dtype": s.dtype}
    if s.since is not None:
        out["since"] = s.since
    if s.attrs:
        out["attrs"] = dict(s.attrs)
    return out


def _arg_from_json(a) -> Arg:
    if a is None:
        return None
    if not isinstance(a, dict) or len(a) != 1 or next(iter(a)) not in _ARG_KEYS:
        raise ValueError(f"argument {a!r}: accepted null, {{\"input\": k}}, {{\"step\": k}} or {{\"const\": number}}")
    (key, value), = a.items()
    return Input(value) if key == "input" else Ref(value) if key == "step" else Const(value)


def _step_from_json(s) -> Call:
    if not isinstance(s, dict):
        raise ValueError("a step is an object with 'op', 'args', 'dtype' (and 'since', 'attrs')")
    unknown = sorted(set(s) - {"op", "args", "dtype", "since", "attrs"})
    if unknown:
        raise ValueError(f"unknown keys {unknown}; accepted: op, args, dtype, since, attrs")
    if not isinstance(s.get("args"), list):
        raise ValueError("'args' must be a list")
    attrs = s.get("attrs", {})
    if not isinstance(attrs, dict):
        raise ValueError("'attrs' must be an object of numbers")
    return Call(s["op"], tuple(_arg_from_json(a) for a in s["args"]), s.get("dtype", "f32"), s.get("since"),
                tuple(attrs.items()))


class ProgramBuilder:
    """Builds a ``Program`` step by step: ``call`` returns the ``Ref`` of the step it adds.

        b = ProgramBuilder()
        t = b.call("Mul", b.input(0), b.input(1))
        b.call("Add", t, b.const(1.0))
        program = b.program()
    """

    def __init__(self):
        self.steps: List[Call] = []

    @staticmethod
    def input(index: int) -> Input:
        return Input(index)

    @staticmethod
    def const(value: float) -> Const:
        return Const(value)

    def call(self, op: str, *args: Arg, dtype: str = "f32", since: Optional[int] = None, **attrs: float) -> Ref:
        self.steps.append(Call(op, tuple(args), dtype, since, tuple(attrs.items())))
        return Ref(len(self.steps) - 1)

    def program(self) -> Program:
        return Program(tuple(self.steps))
