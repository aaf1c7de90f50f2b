"""The ONNX translation of a registered op for ``torch.onnx.export``: a node of the op's own
(domain, op_type) with its params as attributes, typed from ``infer``.

TorchScript exporter (``dynamo=False``): a symbolic function per operator.  Dynamo exporter
(``dynamo=True``, needs onnxscript): an entry of ``custom_translation_table`` (``translations``).
Composed ops met during an export are noted, so export.py can add their FunctionProtos.
"""
from __future__ import annotations

import contextvars
from typing import Any, Dict, List, Optional

from dsl.opgraph.op import check_and_infer
from dsl.opgraph.spec import TensorSpec
from dsl.torch.schema import DSL_DTYPES, ParamSlot, torch_dtype

# the composed nodes written by the export in progress: [(op, input dtypes, input ranks, node)]
_COMPOSED: contextvars.ContextVar = contextvars.ContextVar("opdsl_torch_export_composed", default=None)


def collecting(store: List) -> contextvars.Token:
    return _COMPOSED.set(store)


def done(token: contextvars.Token) -> None:
    _COMPOSED.reset(token)


def attach(reg) -> None:
    """Register the TorchScript symbolic of a Registration (custom_op.py)."""
    from torch.onnx import register_custom_op_symbolic
    register_custom_op_symbolic(f"opdsl::{reg.signature.name}", _symbolic(reg), 1)


def _constant(value) -> Any:
    """A TorchScript export argument that is a constant -> its Python value."""
    from torch.onnx import symbolic_helper
    if symbolic_helper._is_none(value):
        return None
    node = value.node()
    if node.kind() in ("onnx::Constant", "prim::Constant") and "value" in node.attributeNames():
        kind = node.kindOf("value")
        if kind == "s":
            return node.s("value")
        if kind == "t":
            v = node.t("value")
            return v.item() if v.dim() == 0 else v.tolist()
        if kind == "i":
            return node.i("value")
        if kind == "f":
            return node.f("value")
    if node.kind() == "prim::ListConstruct":
        return [_constant(v) for v in node.inputs()]
    raise ValueError(f"a param reached the ONNX export as a computed value ({node.kind()}); params must be "
                     "constants")


def _param(slot: ParamSlot, value):
    if value is None:
        return None
    if slot.kind == "float":
        return float(value)
    if slot.kind in ("int", "bool"):
        return int(value) if slot.kind == "int" else bool(value)
    if slot.kind == "floats":
        return [float(v) for v in value]
    if slot.kind in ("ints", "bools"):
        return [int(v) for v in value]
    return str(value)


def _attributes(op) -> Dict[str, Any]:
    """ONNX attributes of ``op``'s params in g.op's suffix form (alpha_f, axes_i, mode_s, ...)."""
    from dsl.lang.types import DType
    out = {}
    for name, v in op.params.items():
        if v is None:
            continue
        if isinstance(v, DType):
            out[f"{name}_s"] = v.name
        elif isinstance(v, bool):
            out[f"{name}_i"] = int(v)
        elif isinstance(v, int):
            out[f"{name}_i"] = v
        elif isinstance(v, float):
            out[f"{name}_f"] = v
        elif isinstance(v, str):
            out[f"{name}_s"] = v
        elif isinstance(v, tuple) and v and all(isinstance(e, (bool, int)) for e in v):
            out[f"{name}_i"] = [int(e) for e in v]
        elif isinstance(v, tuple) and v and all(isinstance(e, (int, float)) for e in v):
            out[f"{name}_f"] = [float(e) for e in v]
    return out


def _value_spec(value) -> Optional[TensorSpec]:
    t = value.type()
    try:
        dtype = DSL_DTYPES[t.dtype()]
        sizes = t.varyingSizes()
    except Exception:
        return None
    if dtype is None or sizes is None:
        return None
    return TensorSpec(tuple(sizes), dtype)


def _symbolic(reg):
    sig = reg.signature

    def symbolic(g, *args):
        n_in = len(sig.inputs)
        tensor_args, rest = list(args[:n_in]), list(args[n_in:])
        kwargs = {slot.name: _param(slot, _constant(v)) for slot, v in zip(sig.params, rest)}
        op = sig.decode(reg.cls, {k: v for k, v in kwargs.items() if v is not None or slot_optional(sig, k)})
        from torch.onnx import symbolic_helper
        present = [None if symbolic_helper._is_none(v) else v for v in tensor_args]
        while present and present[-1] is None:
            present.pop()
        onnx_inputs = [symbolic_helper._optional_input_placeholder_tensor(g) if v is None else v for v in present]
        specs = [None if v is None else _value_spec(v) for v in present]
        op_type = op.op_type
        if getattr(reg.cls, "composed", False):
            op_type = note_composed(op, specs) or op_type
        name = f"{op.domain}::{op_type}" if op.domain else op_type
        outs = g.op(name, *onnx_inputs, outputs=reg.num_outputs, **_attributes(op))
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        if all(s is not None for s in specs):
            try:
                out_specs = check_and_infer(op, specs, where="ONNX export")
            except Exception:
                out_specs = ()
            for o, s in zip(outs, out_specs):
                o.setType(present[0].type().with_dtype(torch_dtype(s.dtype)).with_sizes(list(s.shape)))
        return outs[0] if reg.num_outputs == 1 else tuple(outs)
    return symbolic


def note_composed(op, specs) -> Optional[str]:
    """Note a composed node of the export in progress -> the name of its FunctionProto."""
    store = _COMPOSED.get()
    if store is None or any(s is None for s in specs):
        return None
    return _function_name(store, op, specs)


def slot_optional(sig, name: str) -> bool:
    return any(s.name == name and s.optional for s in sig.params)


def _function_name(store: List, op, specs) -> str:
    """The FunctionProto name of a composed node: its op_type, ``op_type__k`` for the k-th
    distinct set of params (as Graph.to_onnx names them)."""
    same_type = [entry for entry in store if type(entry[0]) is type(op)]
    for known, _, name in same_type:
        if known == op:
            return name
    name = op.op_type if not same_type else f"{op.op_type}__{len(same_type)}"
    store.append((op, specs, name))
    return name
