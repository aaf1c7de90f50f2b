"""``dsl.torch.export(module, args, f, **kwargs)``: ``torch.onnx.export`` for modules that call
opdsl ops.  The ops are written in their own domains, each domain gets an opset import (the
highest ``since`` of its registered ops), and every composed op's node gets a FunctionProto with
its body, so onnxruntime can run the model while ``dsl.load_onnx`` maps the node back to the op.
"""
from __future__ import annotations

import io
import os
import warnings
from typing import Dict, List, Optional

import torch

from dsl.opgraph.graph import Graph
from dsl.torch import custom_op, onnx_symbolic


def _domains() -> Dict[str, int]:
    out: Dict[str, int] = {}
    for reg in custom_op.registered():
        dom = reg.cls.domain
        if dom:
            out[dom] = max(out.get(dom, 1), int(reg.cls.since or 1))
    return out


def export(module, args, f=None, *, dynamo: bool = False, custom_opsets: Optional[Dict[str, int]] = None,
           **kwargs):
    """Export ``module`` called on ``args`` to ONNX at ``f`` (a path, a file object, or None) and
    return the ``onnx.ModelProto``.  Keyword arguments go to ``torch.onnx.export`` (input and
    output names, ``dynamic_axes``, ``opset_version``...).  ``dynamo=False`` (the default) uses the
    TorchScript exporter; ``dynamo=True`` the torch.export-based one, which needs onnxscript."""
    import onnx
    if not isinstance(args, tuple):
        args = (args,)
    composed: List = []
    token = onnx_symbolic.collecting(composed)
    try:
        if dynamo:
            model = _export_dynamo(module, args, custom_opsets, kwargs)
        else:
            buffer = io.BytesIO()
            with warnings.catch_warnings():
                # torch deprecates this exporter (it is the one that needs no onnxscript), and the
                # tracer warns about the op's kernels reading numpy views: they are one opaque node
                warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export")
                warnings.filterwarnings("ignore", message="The feature will be removed", category=DeprecationWarning)
                warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
                torch.onnx.export(module, args, buffer, dynamo=False, custom_opsets=custom_opsets, **kwargs)
            model = onnx.load_from_string(buffer.getvalue())
            _set_versions(model, custom_opsets or {})
    finally:
        onnx_symbolic.done(token)
    _add_functions(model, composed)
    if f is not None:
        if isinstance(f, (str, os.PathLike)):
            onnx.save(model, os.fspath(f))
        else:
            f.write(model.SerializeToString())
    return model


def _export_dynamo(module, args, custom_opsets, kwargs):
    try:
        import onnxscript  # noqa: F401
    except ImportError:
        raise ImportError("dsl.torch.export(..., dynamo=True) needs onnxscript (pip install onnxscript); "
                          "dynamo=False uses the TorchScript exporter, which does not") from None
    from dsl.torch.dynamo_translation import translations
    with torch.no_grad():
        module(*args)  # registers the torch operators the module calls, for the translation table
    table = {**translations(), **kwargs.pop("custom_translation_table", {})}
    program = torch.onnx.export(module, args, dynamo=True, custom_translation_table=table, **kwargs)
    model = program.model_proto
    known = {o.domain for o in model.opset_import}
    for dom in {n.domain for n in model.graph.node} - known:
        model.opset_import.add(domain=dom, version=1)
    _set_versions(model, custom_opsets or {})
    return model


def _set_versions(model, given: Dict[str, int]) -> None:
    """Each opdsl domain the model imports at the version its ops were registered for
    (the highest ``since``), unless the caller's ``custom_opsets`` named one."""
    versions = _domains()
    for entry in model.opset_import:
        if entry.domain in versions and entry.domain not in given:
            entry.version = versions[entry.domain]


def _add_functions(model, composed: List) -> None:
    """A FunctionProto per composed node written (Graph.to_onnx writes the body), in the
    model's versions of each domain."""
    from onnx import helper
    opsets = {o.domain: o.version for o in model.opset_import}
    have = {(fn.domain, fn.name) for fn in model.functions}
    for op, specs, name in composed:
        g = Graph(f"{op.op_type}_function")
        g.opset_imports[""] = opsets.get("", 18)
        ins = [g.input(n, (None,) * s.ndim, s.dtype) for n, s in zip(type(op).tensor_args, specs) if s is not None]
        outs = op(*ins)
        for i, t in enumerate(outs if isinstance(outs, tuple) else (outs,)):
            g.output(t, f"out{i}")
        proto = g.to_onnx()
        for fn in proto.functions:
            if fn.domain == op.domain and fn.name == op.op_type:
                fn.name = name
            if (fn.domain, fn.name) in have:
                continue
            have.add((fn.domain, fn.name))
            domains = {""} | {n.domain for n in fn.node}
            for d in domains:
                if d not in opsets:
                    version = next((o.version for o in proto.opset_import if o.domain == d), 1)
                    model.opset_import.append(helper.make_opsetid(d, version))
                    opsets[d] = version
            del fn.opset_import[:]
            fn.opset_import.extend(helper.make_opsetid(d, opsets[d]) for d in sorted(domains))
            model.functions.append(fn)
