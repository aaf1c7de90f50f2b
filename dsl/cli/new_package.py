"""``opdsl new-package model.onnx -o pkg/``: a package skeleton for the model's custom ops.

The guide's generator: every op of a custom domain (not "" / "ai.onnx") in the model gets
a manifest entry whose inputs, outputs and params come from its nodes (attributes) and the
model's types (graph inputs/outputs, value_info, plus ONNX shape inference for tensors made
by standard ops).  This module reads the model into ``OpSketch``es; skeleton.py writes the
files.
"""
from __future__ import annotations

import argparse
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from dsl.cli.errors import UserError, require_file, require_folder_or_nothing

EXAMPLE = """example:
  opdsl new-package model.onnx -o my_ops/
  # then write the kernels in my_ops/kernels.py and run: python -m pytest my_ops/"""

STANDARD_DOMAINS = ("", "ai.onnx")


@dataclass
class TensorSketch:
    """One input or output position of an op: what the model's nodes tell about it."""
    name: str
    dtypes: List[str] = field(default_factory=list)  # opdsl dtype names seen, in order
    rank: Optional[int] = None                      # highest rank seen (None: never known)
    shape: Optional[Tuple] = None                   # dims in the first node (int / name / None)
    constant: bool = False                          # an initializer in every node
    like: Optional[str] = None                      # outputs: same shape and dtype as this input
    assumed: bool = False                           # type taken from a custom producer's input
    quant: Optional[Tuple[List[float], List[int], str]] = None  # (scales, zero points, dtype) of a
                                                    # QuantizeLinear feeding it in the first node


@dataclass
class ParamSketch:
    name: str
    dtype: str          # f32 | i64 | str
    default: object     # the first node's value
    size: Optional[int] = None  # a vector's length
    varies: bool = False        # nodes disagree on the value
    source: Optional[str] = None  # "x.scale" / "x.zero_point": filled from the input's quantization


@dataclass
class OpSketch:
    type: str
    domain: str
    since: Optional[int]
    kernel: str                      # the stub's function name
    nodes: List[str]                 # node names (or '#index') using the op
    inputs: List[TensorSketch]
    outputs: List[TensorSketch]
    params: List[ParamSketch]
    skipped: List[str] = field(default_factory=list)  # attributes a package param cannot hold


def register(sub) -> None:
    p = sub.add_parser("new-package", help="write an op package skeleton for the custom ops of an ONNX model",
                       description="Write an op package for every op of a custom domain in the model:\n"
                                   "opdsl-package.yaml, kernels.py (stub kernels), <kernel>_functions.py\n"
                                   "(verify/infer stubs) and a test file. Then fill in the kernels and the\n"
                                   "tests' numpy references.",
                       epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="an .onnx file using custom-domain ops")
    p.add_argument("-o", "--output", required=True, metavar="FOLDER",
                   help="the package folder to create (must not exist or be empty)")
    p.add_argument("--name", help="the package name (default: the folder's name)")
    p.set_defaults(func=run)


# --------------------------------------------------------------------------- reading the model

_DTYPE_NAMES = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "bool": "bool",
                "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
                "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64"}


def _dtype_name(elem_type: int) -> Optional[str]:
    from onnx import helper
    try:
        import numpy as np
        return _DTYPE_NAMES.get(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name)
    except Exception:
        return None


def _types(proto, assumed: Optional[set] = None) -> Dict[str, Tuple[Optional[str], Optional[Tuple]]]:
    """Tensor name -> (opdsl dtype name or None, dims or None) from everything the model declares.

    ONNX shape inference stops at custom ops; an output of one that the model types nowhere is
    assumed to have the type of the op's first input (most custom ops are elementwise), so the
    ops it feeds get a rank; those names are added to ``assumed``."""
    import onnx
    proto_in = proto
    for _ in range(64):  # one more custom op typed per round at least, or done
        types = _declared_types(proto)
        extra = []
        for node in (n for g in graphs(proto.graph) for n in g.node):
            if node.domain in STANDARD_DOMAINS or not node.input or not node.input[0]:
                continue
            src = types.get(node.input[0], (None, None))
            for out in node.output:
                if out and types.get(out, (None, None)) == (None, None) and src[0] and src[1] is not None:
                    extra.append((out, src))
        if not extra:
            return types
        if proto is proto_in:
            proto = onnx.ModelProto()
            proto.CopyFrom(proto_in)
        for out, (dt, dims) in extra:
            elem = onnx.helper.np_dtype_to_tensor_dtype(_np_dtype(dt))
            proto.graph.value_info.append(onnx.helper.make_tensor_value_info(
                out, elem, [d if isinstance(d, int) else (d or None) for d in dims]))
            if assumed is not None:
                assumed.add(out)
    return _declared_types(proto)


def _np_dtype(name: str):
    import numpy as np
    from dsl.lang import types as T
    return np.dtype(T.as_dtype(name).np)


def _declared_types(proto) -> Dict[str, Tuple[Optional[str], Optional[Tuple]]]:
    import onnx
    try:  # fills value_info for tensors made by standard ops; custom ones stay unknown
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except Exception:
        inferred = proto
    out: Dict[str, Tuple[Optional[str], Optional[Tuple]]] = {}
    for g in graphs(inferred.graph):
        for t in g.initializer:
            out[t.name] = (_dtype_name(t.data_type), tuple(t.dims))
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            if not vi.type.HasField("tensor_type"):
                continue
            tt = vi.type.tensor_type
            dims = (tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
                    if tt.HasField("shape") else None)
            dt = _dtype_name(tt.elem_type) if tt.elem_type else None
            old = out.get(vi.name, (None, None))
            out[vi.name] = (dt or old[0], dims if dims is not None else old[1])
    return out


def graphs(graph):
    """``graph`` and every subgraph (If branches, Loop/Scan bodies) nested in its nodes."""
    from onnx import AttributeProto as A
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            subs = [attr.g] if attr.type == A.GRAPH else list(attr.graphs) if attr.type == A.GRAPHS else []
            for sub in subs:
                yield from graphs(sub)


def snake(name: str) -> str:
    """CustomRelu -> custom_relu, RMSNorm -> rms_norm: the stub kernel's name (never a keyword)."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    s = re.sub(r"\W+", "_", s).strip("_").lower() or "op"
    s = "op_" + s if s[0].isdigit() else s
    return s + "_op" if keyword.iskeyword(s) else s


def _f32(v) -> float:
    """An f32 attribute as the shortest float that reads back to it (0.2, not 0.20000000298023224)."""
    import numpy as np
    return float(str(np.float32(v)))


def _param(attr) -> Tuple[Optional[ParamSketch], Optional[str]]:
    """A node attribute as a package param, or (None, why not)."""
    from onnx import AttributeProto as A
    from onnx import helper

    from dsl.opgraph.op import Op
    if not attr.name.isidentifier() or keyword.iskeyword(attr.name) or attr.name == "backend" \
            or hasattr(Op, attr.name):
        return None, (f"{attr.name} (a package param is a Python identifier, not a keyword, 'backend' or a "
                      "dsl.Op attribute; read it in a run hook instead)")
    v = helper.get_attribute_value(attr)
    if attr.type == A.FLOAT:
        return ParamSketch(attr.name, "f32", _f32(v)), None
    if attr.type == A.INT:
        return ParamSketch(attr.name, "i64", int(v)), None
    if attr.type == A.STRING:
        return ParamSketch(attr.name, "str", v.decode("utf-8", "replace")), None
    if attr.type == A.FLOATS:
        return ParamSketch(attr.name, "f32", [_f32(x) for x in v], size=len(v)), None
    if attr.type == A.INTS:
        return ParamSketch(attr.name, "i64", [int(x) for x in v], size=len(v)), None
    return None, f"{attr.name} ({A.AttributeType.Name(attr.type)}: packages take f32/f64/i64/bool/str params)"


def _merge_param(ps: ParamSketch, other: ParamSketch) -> None:
    if other.dtype != ps.dtype:
        ps.dtype = "f32" if {ps.dtype, other.dtype} == {"f32", "i64"} else ps.dtype
    if other.default != ps.default:
        ps.varies = True
    if other.size != ps.size:
        ps.size = None if ps.size is None or other.size is None else max(ps.size, other.size)
        ps.varies = True


def _same_type(types, a: str, b: str) -> bool:
    """Tensors ``a`` and ``b`` have the same known dtype and the same fully known dims."""
    ta, tb = types.get(a), types.get(b)
    return bool(a and b and ta and ta == tb and ta[0] and ta[1] is not None and None not in ta[1])


def _quant_of(node, values, dtype: Optional[str]) -> Tuple[List[float], List[int], str]:
    """(scales, zero points, quantized dtype) of a QuantizeLinear node: its constant inputs, or
    a scale of 1/64 and zero point 0 where they are computed at run time."""
    from onnx import numpy_helper
    scale = values.get(node.input[1]) if len(node.input) > 1 else None
    zp = values.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    scales = [_f32(v) for v in numpy_helper.to_array(scale).ravel()] if scale is not None else [0.015625]
    zps = [int(v) for v in numpy_helper.to_array(zp).ravel()] if zp is not None else [0]
    qdtype = dtype or (_dtype_name(zp.data_type) if zp is not None else "u8")
    return scales, zps, qdtype


def sketch_ops(proto) -> List[OpSketch]:
    """One OpSketch per (domain, op type) of a custom domain, in order of first use (subgraphs
    included; ops the model defines as local functions are left out: opdsl runs their bodies)."""
    assumed: set = set()
    types = _types(proto, assumed)
    nodes = [n for g in graphs(proto.graph) for n in g.node]
    quantizers = {n.output[0]: n for n in nodes if n.op_type == "QuantizeLinear" and n.domain in STANDARD_DOMAINS
                  and n.output}
    values = {t.name: t for g in graphs(proto.graph) for t in g.initializer}
    consts = {t.name for g in graphs(proto.graph) for t in g.initializer}
    consts |= {o for n in nodes if n.op_type == "Constant" and n.domain in STANDARD_DOMAINS for o in n.output}
    opsets = {o.domain: o.version for o in proto.opset_import}
    local = {(f.domain, f.name) for f in proto.functions}  # ops the model defines itself need no package
    ops: Dict[Tuple[str, str], OpSketch] = {}
    for i, node in enumerate(nodes):
        if node.domain in STANDARD_DOMAINS or (node.domain, node.op_type) in local:
            continue
        if not node.op_type.isidentifier() or keyword.iskeyword(node.op_type):
            raise UserError(f"node {node.name or '#' + str(i)}: op type {node.op_type!r} is not a Python identifier, "
                            "which a package op type must be; rename the op in the model")
        key = (node.domain, node.op_type)
        op = ops.get(key)
        if op is None:
            op = ops[key] = OpSketch(node.op_type, node.domain, opsets.get(node.domain), snake(node.op_type),
                                     [], [], [], [])
        op.nodes.append(node.name or f"#{i}")
        for tensors, names, prefix in ((op.inputs, node.input, "x"), (op.outputs, node.output, "y")):
            while len(tensors) < len(names):
                tensors.append(TensorSketch(prefix, constant=prefix == "x"))
            for t, tname in zip(tensors, names):
                dt, dims = types.get(tname, (None, None)) if tname else (None, None)
                if tname in assumed and prefix == "y":
                    dt, dims = None, None  # a guess helps the ops it feeds, not the op that makes it
                t.assumed = t.assumed or tname in assumed
                if prefix == "x" and len(op.nodes) == 1 and tname in quantizers:
                    t.quant = _quant_of(quantizers[tname], values, dt)
                if dt and dt not in t.dtypes:
                    t.dtypes.append(dt)
                if dims is not None:
                    t.rank = max(t.rank or 0, len(dims))
                    t.shape = t.shape or dims
                t.constant = t.constant and tname in consts
        for pos, t in enumerate(op.outputs):  # like: an input of the same type in every node so far
            cands = [k for k, tname in enumerate(node.input)
                     if node.output[pos] not in assumed and _same_type(types, tname, node.output[pos])]
            pick = cands[0] if cands else None
            if len(op.nodes) == 1:
                t.like = pick
            elif t.like != pick:
                t.like = None
        have = {p.name: p for p in op.params}
        for attr in node.attribute:
            ps, why = _param(attr)
            if ps is None:
                if why not in op.skipped:
                    op.skipped.append(why)
            elif attr.name in have:
                _merge_param(have[attr.name], ps)
            else:
                op.params.append(ps)
                have[attr.name] = ps
    result = list(ops.values())
    for op in result:
        for tensors, prefix in ((op.inputs, "x"), (op.outputs, "y")):
            for k, t in enumerate(tensors):
                t.name = prefix if len(tensors) == 1 else f"{prefix}{k}"
        for t in op.outputs:
            t.like = op.inputs[t.like].name if isinstance(t.like, int) else None
        taken = {p.name for p in op.params} | {t.name for t in op.inputs + op.outputs}
        for t in op.inputs:  # QuantizeLinear -> custom op: its scale and zero point as params
            if t.quant is None:
                continue
            scales, zero_points, _ = t.quant
            for field_name, dtype, value in (("scale", "f32", scales), ("zero_point", "i64", zero_points)):
                name = f"{t.name}_{field_name}"
                while name in taken:
                    name += "_q"
                taken.add(name)
                size = len(value) if len(value) > 1 else None
                op.params.append(ParamSketch(name, dtype, value if size else value[0], size=size,
                                             source=f"{t.name}.{field_name}"))
    names = [op.kernel for op in result]
    for op in result:  # the same op type in two domains
        if names.count(op.kernel) > 1:
            op.kernel = f"{snake(op.domain)}_{op.kernel}"
    return result


# --------------------------------------------------------------------------- the command

def run(args) -> int:
    import onnx

    from dsl.cli import skeleton

    path = require_file(args.model)
    folder = require_folder_or_nothing(args.output, "-o")
    if folder.is_dir() and any(folder.iterdir()):
        raise UserError(f"-o {folder}: the folder is not empty; new-package never overwrites files "
                        "(give a new or empty folder)")
    if args.name is not None and not args.name.isidentifier():
        raise UserError(f"--name {args.name!r}: a package name is a Python identifier (letters, digits, "
                        "'_', not starting with a digit), e.g. my_ops")
    name = args.name or re.sub(r"\W+", "_", folder.resolve().name).strip("_") or "my_ops"
    if not name.isidentifier():
        name = "ops_" + name
    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception as e:
        raise UserError(f"{path} is not a readable ONNX model: {type(e).__name__}: {e}") from None
    ops = sketch_ops(proto)
    if not ops:
        local = sorted(f"{f.domain}::{f.name}" for f in proto.functions if f.domain not in STANDARD_DOMAINS)
        if local:
            raise UserError(f"{path}: its custom ops ({', '.join(local)}) are functions the model defines, "
                            "which opdsl runs from their bodies; no package is needed")
        domains = sorted({n.domain or '""' for g in graphs(proto.graph) for n in g.node})
        raise UserError(f"{path} has no op of a custom domain (its nodes use {', '.join(domains) or 'no'} "
                        "domain); new-package writes packages for ops outside the standard ONNX domain")
    opset = next((o.version for o in proto.opset_import if o.domain in STANDARD_DOMAINS), 17)
    written = skeleton.write(folder, name, ops, Path(path).name, opset)
    for op in ops:
        print(f"{op.domain}::{op.type}: {len(op.nodes)} node(s), {len(op.inputs)} input(s), "
              f"{len(op.outputs)} output(s), params: {', '.join(p.name for p in op.params) or 'none'}")
        for why in op.skipped:
            print(f"  note: attribute {why}; it is left out of the manifest")
    for f in written:
        print(f"wrote {f}")
    infer = [skeleton.functions_file(op) for op in ops if any(not t.like for t in op.outputs)]
    print(f"\nnext: write each kernel in {folder / 'kernels.py'} (the stubs raise NotImplementedError), "
          + (f"infer in {', '.join(infer)}, " if infer else "")
          + f"and the numpy references in {written[-1]}; `opdsl check {folder}` validates the "
          f"package and `python -m pytest {folder}` tests it.")
    return 0
