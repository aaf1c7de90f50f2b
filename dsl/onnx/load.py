"""ONNX import: ``dsl.load_onnx(path_or_proto, packages=[...], backend=...) -> dsl.Model``.

A model becomes a ``dsl.Graph`` and is compiled like any other graph:

* graph inputs -> ``Graph.input`` (symbolic dims -> ``None``); initializers and
  ``Constant`` nodes -> ``Graph.constant``;
* each node -> the op registered for (domain, op_type, the model's opset for that
  domain), so built-ins answer ONNX-domain nodes and user ops (``@dsl.op`` or an op
  package) answer custom-domain ones; attributes become params by name, with the op
  class's defaults (ONNX's) for the rest;
* a node of a model-local function (FunctionProto) that no registered op answers is
  expanded from the function body;
* before anything is built, the whole model (function bodies and graph attributes too)
  is scanned for ops no registered op answers, and all of them are reported in one
  ``OnnxImportError`` (coverage.py);
* anything that cannot be honoured -- an unknown op, an attribute the op does not
  have, an unsupported dtype, a dangling input name, a malformed file -- is an
  ``OnnxImportError`` naming the node (name, domain, type) and what would be accepted.

Untrusted models (docs/onnx.md): external tensor data is read only from files inside
the model's folder (a model given as bytes or a proto reads none unless ``base_dir`` is
passed), and no tensor larger than ``max_tensor_bytes`` is read, folded or planned.  The
model file and its data files are read only if they are regular files (a FIFO or a device is
refused at once), and the model file only up to ``max_tensor_bytes``.
"""
from __future__ import annotations

import functools
import os
import types
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from dsl import files
from dsl.lang.types import DType, from_numpy
from dsl.onnx import coverage, subgraph
from dsl.onnx.errors import OnnxImportError
from dsl.onnx.value_types import value_spec
from dsl.opgraph.host_values import OptionalSpec, is_host, kind_name
from dsl.opgraph import registry
from dsl.opgraph.graph import Graph, Tensor, apply_op
from dsl.opgraph.limits import TensorSizeError, check_tensor_bytes, tensor_limit
from dsl.opgraph.op import Op, check_and_infer
from dsl.opgraph import plan_cache
from dsl.opgraph.spec import VerifyError


def load_onnx(model, packages: Sequence = (), backend: Optional[str] = None, formats: str = "auto",
              base_dir: Optional[str] = None, max_tensor_bytes: Optional[int] = None, fuse: Optional[bool] = None,
              tiling=None, int8_arithmetic: str = "exact"):
    """Load an ONNX model (path, bytes or ``onnx.ModelProto``) and compile it -> ``dsl.Model``.

    ``packages``: op package folders (each registered with ``dsl.register_package``; a bad one is a
    ``dsl.PackageError`` naming its manifest line), or already imported modules defining the
    custom ops the model uses.
    ``base_dir``: the folder external tensor data is read from (default: the model file's
    folder; none for bytes or a proto).  ``max_tensor_bytes``: the largest tensor the model
    may make opdsl read, fold or allocate (default OPDSL_MAX_TENSOR_BYTES, 4 GiB).  ``fuse``:
    apply the graph rewrites, e.g. Conv + BatchNormalization + Relu into one node (default:
    on unless OPDSL_NO_FUSION=1; see docs/ops.md, "Graph rewrites").  ``tiling``: run ops that
    declare tiles across the cores (default: on numba for large outputs; False: never; see
    docs/ops.md, "Tiling").  ``int8_arithmetic``: "exact" (default) or "saturating", int8
    convolutions summing u8·i8 pairs in saturating i16 where that is faster (AVX2 without VNNI),
    equal to onnxruntime's results there (docs/ops.md, "Exact or saturating int8 products")."""
    def build():
        graph = to_graph(model, packages=packages, base_dir=base_dir, max_tensor_bytes=max_tensor_bytes)
        return graph.compile(backend=backend, formats=formats, max_tensor_bytes=max_tensor_bytes, fuse=fuse,
                             tiling=tiling, int8_arithmetic=int8_arithmetic)
    if packages:  # their ops' code is not in the plan cache's key
        return build()
    options = dict(backend=backend, formats=formats, max_tensor_bytes=max_tensor_bytes, fuse=fuse, tiling=tiling)
    if int8_arithmetic != "exact":  # (absent by default: the plan cache's keys of exact loads stay as they were)
        options["int8_arithmetic"] = int8_arithmetic
    return plan_cache.cached_load(model, options, base_dir, build)  # a known model's plan from disk


class _Reader:
    """Where tensor data may come from, and how much of it: one per import. The body importer
    (subgraph.py) reads attributes, tensors and nodes through it, so it never imports load.py."""

    def __init__(self, base_dir: Optional[str], limit: int):
        self.base_dir, self.limit = base_dir, limit

    def attribute_value(self, attr, where: str):
        return _attribute_value(attr, where, self)

    def tensor_value(self, tensor, where: str) -> np.ndarray:
        return _tensor_value(tensor, where, self)

    def import_nodes(self, g: Graph, nodes: Iterable, env, opsets: Dict[str, int], functions: Dict,
                     depth: int) -> None:
        _import_nodes(g, nodes, env, opsets, functions, prefix="", depth=depth, reader=self)


def to_graph(model, packages: Sequence = (), base_dir: Optional[str] = None,
             max_tensor_bytes: Optional[int] = None) -> Graph:
    """The ``dsl.Graph`` of an ONNX model (not compiled); see the module docstring."""
    limit = tensor_limit(max_tensor_bytes)
    proto, model_dir = read_model(model, limit)
    reader = _Reader(base_dir if base_dir is not None else model_dir, limit)
    _register_packages(packages)
    _check_structure(proto)
    opsets = _opsets(proto.opset_import, "opset_import")
    missing = coverage.missing_ops(proto, opsets)
    if missing:  # all of them at once, before any tensor is read or node built
        err = OnnxImportError(coverage.describe_missing(missing))
        err.missing = missing
        raise err
    functions = {(registry.normalize_domain(f.domain), f.name): f for f in proto.functions}
    g = Graph(proto.graph.name or "onnx_model")
    g.opset_imports = dict(opsets)
    env: Dict[str, Optional[Tensor]] = {"": None}
    for init in proto.graph.initializer:
        if init.name in env:
            raise OnnxImportError(f"malformed ONNX model: graph.initializer name {init.name!r} is used twice")
        env[init.name] = g.constant(init.name, _tensor_value(init, f"initializer {init.name!r}", reader))
    seen_inputs = set()
    for vi in proto.graph.input:
        if vi.name in seen_inputs:
            raise OnnxImportError(f"malformed ONNX model: graph.input name {vi.name!r} is declared twice")
        seen_inputs.add(vi.name)
        if vi.name in env:  # IR < 4 lists initializers as inputs too: the initializer wins
            continue
        if vi.type.WhichOneof("value") in ("sequence_type", "optional_type"):
            env[vi.name] = g.input(vi.name, value_spec(vi.type, f"graph input {vi.name!r}", onnx_dtype))
            continue
        shape, dtype = _value_info(vi, "graph input")
        env[vi.name] = g.input(vi.name, shape, dtype)
    _import_nodes(g, proto.graph.node, env, opsets, functions, prefix="", reader=reader)
    for vi in proto.graph.output:
        if vi.name not in env or env[vi.name] is None:
            raise OnnxImportError(f"graph output {vi.name!r} is not produced by any node, input or initializer")
        t = env[vi.name]
        kind = vi.type.WhichOneof("value")
        computed = t.spec.elem if isinstance(t.spec, OptionalSpec) and kind != "optional_type" else t.spec
        if kind and (kind == "tensor_type") == is_host(computed):
            raise OnnxImportError(f"graph output {vi.name!r} is declared a {kind[:-5]}, but the ops compute "
                                  f"{kind_name(t.spec)} ({t.spec})")
        declared = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        if declared and onnx_dtype(declared, f"graph output {vi.name!r}") != t.spec.dtype:
            raise OnnxImportError(f"graph output {vi.name!r} is declared {onnx_dtype(declared, '')} but the "
                                  f"ops compute {t.spec.dtype}; the model and the registered ops disagree")
        g.output(t, vi.name)
    return g


# --------------------------------------------------------------------------- reading

def read_model(model, limit: Optional[int] = None) -> Tuple[Any, Optional[str]]:
    """(``onnx.ModelProto``, the folder its external data may come from) for a path, bytes or
    a proto.  External data is never loaded here: ``_tensor_value`` reads it under checks.
    A path is read only if it is a regular file (a FIFO or device is refused at once, never
    waited on) and only up to ``limit`` bytes (default OPDSL_MAX_TENSOR_BYTES)."""
    import onnx
    if isinstance(model, onnx.ModelProto):
        return model, None
    if isinstance(model, (bytes, bytearray)):
        try:
            return onnx.load_model_from_string(bytes(model)), None
        except Exception as e:
            raise OnnxImportError(f"the bytes given are not an ONNX model: {type(e).__name__}: {e}") from None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise FileNotFoundError(f"ONNX model {path!r} does not exist")
        limit = tensor_limit(None) if limit is None else limit
        try:
            data = files.read_regular(path, limit)
        except files.NotARegularFile as e:
            raise OnnxImportError(f"ONNX model {path!r} is {e.kind}, not a regular file; opdsl reads models only "
                                  f"from regular files, of at most {limit} bytes (max_tensor_bytes / "
                                  "OPDSL_MAX_TENSOR_BYTES); save the model to a file, or pass its bytes") from None
        except files.FileTooLarge:
            raise OnnxImportError(f"ONNX model {path!r} is larger than the cap of {limit} bytes; nothing was "
                                  "parsed (raise it with max_tensor_bytes= or OPDSL_MAX_TENSOR_BYTES if this "
                                  "model is trusted)") from None
        except OSError as e:
            raise OnnxImportError(f"cannot read ONNX model {path!r}: {e.strerror or e}") from None
        try:  # the format from the extension, as onnx.load picks it (.onnx, .textproto, .json, ...)
            fmt = onnx.serialization.registry.get_format_from_file_extension(os.path.splitext(path)[1])
            proto = onnx.load_model_from_string(data, format=fmt or "protobuf")
        except Exception as e:
            raise OnnxImportError(f"{path!r} is not a readable ONNX model: {type(e).__name__}: {e}") from None
        return proto, os.path.dirname(os.path.realpath(path))
    raise TypeError(f"load_onnx expects a path, bytes or an onnx.ModelProto, got {type(model).__name__}")


# Opset versions are small integers; a domain's version past what onnx defines is a hostile or broken file.
_MAX_CUSTOM_OPSET = 1 << 16


@functools.lru_cache(maxsize=1)
def _known_opsets() -> Dict[str, int]:
    """The newest opset of each domain the installed onnx package defines."""
    import onnx.defs
    known: Dict[str, int] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        domain = registry.normalize_domain(schema.domain)
        known[domain] = max(known.get(domain, 1), schema.since_version)
    known[""] = max(known.get("", 1), onnx.defs.onnx_opset_version())
    return known


def _opsets(entries, field: str) -> Dict[str, int]:
    """domain -> version of an opset_import list, each entry checked."""
    known = _known_opsets()
    out: Dict[str, int] = {}
    for o in entries:
        domain = registry.normalize_domain(o.domain)
        label = domain or "ai.onnx"
        if domain in out:
            raise OnnxImportError(f"malformed ONNX model: {field} lists domain {label!r} twice")
        most = known.get(domain, _MAX_CUSTOM_OPSET)
        if not 1 <= o.version <= most:
            raise OnnxImportError(f"malformed ONNX model: {field} version {o.version} for domain {label!r} is not "
                                  f"a known opset; accepted: 1..{most}")
        out[domain] = int(o.version)
    return out


def _check_structure(proto) -> None:
    """What the importer relies on; finer points are left to each op's verify()."""
    if not proto.HasField("graph"):
        raise OnnxImportError("malformed ONNX model: it has no graph")
    if not proto.opset_import:
        raise OnnxImportError("malformed ONNX model: no opset_import entries (which ONNX version is it?)")
    seen = set()
    for vi in list(proto.graph.input) + list(proto.graph.output):
        if not vi.name:
            raise OnnxImportError("malformed ONNX model: a graph input or output has no name")
    for node in proto.graph.node:
        for out in node.output:
            if out and out in seen:
                raise OnnxImportError(f"malformed ONNX model: tensor {out!r} is produced twice "
                                      f"(again by node {_node_label(node)})")
            seen.add(out)


def _register_packages(packages: Sequence) -> None:
    """Register op-package folders (``dsl.register_package``); imported modules and loaded
    ``Package`` objects registered their ops already and are accepted as they are."""
    if isinstance(packages, (str, os.PathLike, types.ModuleType)) or hasattr(packages, "ops"):
        packages = [packages]
    if packages is not None and not hasattr(packages, "__iter__"):
        raise TypeError(f"packages: expected a list of op package folders (str or Path), dsl.package.Package "
                        f"objects or imported modules, or one of them, got {type(packages).__name__} {packages!r}")
    for pkg in packages or ():
        if isinstance(pkg, (str, os.PathLike)):
            from dsl.package import register_package
            register_package(pkg)  # a PackageError names the manifest line
        elif not (hasattr(pkg, "__name__") or hasattr(pkg, "ops")):
            raise TypeError(f"packages: expected op package folders, dsl.package.Package objects or imported "
                            f"modules, got {type(pkg).__name__} {pkg!r}")


# --------------------------------------------------------------------------- values and types

def onnx_dtype(elem_type: int, where: str) -> DType:
    """The DType of a TensorProto element type, or an error naming the accepted ones."""
    import onnx
    try:
        np_dt = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
        return from_numpy(np_dt)
    except (KeyError, TypeError, ValueError):
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() \
            else str(elem_type)
        raise OnnxImportError(f"{where}: element type {name} is not supported; accepted: bool, int8/16/32/64, "
                              f"uint8/16/32/64, float16, bfloat16, float, double") from None


def _value_info(vi, what: str) -> Tuple[Tuple[Optional[int], ...], DType]:
    t = vi.type
    if t.WhichOneof("value") != "tensor_type":
        raise OnnxImportError(f"{what} {vi.name!r}: only tensor types are supported, got {t.WhichOneof('value')}")
    dtype = onnx_dtype(t.tensor_type.elem_type, f"{what} {vi.name!r}")
    if not t.tensor_type.HasField("shape"):
        raise OnnxImportError(f"{what} {vi.name!r} has no shape (not even a rank); opdsl needs the rank")
    dims = []
    for axis, d in enumerate(t.tensor_type.shape.dim):
        if d.HasField("dim_value") and d.dim_value < 0:
            raise OnnxImportError(f"{what} {vi.name!r}: shape.dim[{axis}].dim_value is {d.dim_value}; dimensions "
                                  "are >= 0 (or a dim_param name for a size known at run time)")
        dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
    return tuple(dims), dtype


def _tensor_value(tensor, where: str, reader: _Reader) -> np.ndarray:
    import onnx
    dtype = onnx_dtype(tensor.data_type, where)
    for axis, d in enumerate(tensor.dims):
        if d < 0:
            raise OnnxImportError(f"{where}: dims[{axis}] is {d}; tensor dimensions are >= 0")
    try:  # before anything is read or decoded: the dims say how large the value would be
        check_tensor_bytes(tensor.dims, dtype.np, where, reader.limit)
    except TensorSizeError as e:
        raise OnnxImportError(str(e)) from None
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        tensor = _with_external_data(tensor, where, reader)
    try:
        arr = onnx.numpy_helper.to_array(tensor)
    except Exception as e:
        raise OnnxImportError(f"{where}: cannot read tensor data ({type(e).__name__}: {e})") from None
    return np.ascontiguousarray(arr).reshape(tuple(tensor.dims))


def _with_external_data(tensor, where: str, reader: _Reader):
    """A copy of ``tensor`` with its external bytes inline, read only from a regular file
    inside ``reader.base_dir`` (no absolute path, no '..', no symlink leading out)."""
    import onnx
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    if reader.base_dir is None:
        raise OnnxImportError(f"{where}: the tensor's data is in an external file ({location!r}), and a model "
                              "given as bytes or a proto has no folder to read it from; load the model from its "
                              "path, or pass base_dir= naming the folder that holds its data files")
    if not location or os.path.isabs(location) or ".." in location.replace("\\", "/").split("/"):
        raise OnnxImportError(f"{where}: external_data location {location!r} must be a relative path inside the "
                              f"model's folder ({reader.base_dir})")
    base = os.path.realpath(reader.base_dir)
    path = os.path.realpath(os.path.join(base, location))
    if os.path.commonpath([base, path]) != base:
        raise OnnxImportError(f"{where}: external_data location {location!r} leads outside the model's folder "
                              f"({base}) through a symbolic link")
    try:
        offset = int(info.get("offset", "0") or 0)
        length = int(info["length"]) if info.get("length") else None
    except ValueError:
        raise OnnxImportError(f"{where}: external_data offset/length must be integers, got "
                              f"{info.get('offset')!r}/{info.get('length')!r}") from None
    if offset < 0 or (length is not None and length < 0):
        raise OnnxImportError(f"{where}: external_data offset/length must be >= 0, got {offset}/{length}")
    try:  # without blocking: a FIFO is refused at once instead of waiting for a writer (dsl/files.py)
        fd, st = files.open_regular(path, follow_symlinks=False)
    except files.NotARegularFile as e:
        raise OnnxImportError(f"{where}: external data {location!r} is {e.kind}, not a regular file") from None
    except OSError as e:
        raise OnnxImportError(f"{where}: cannot open external data file {location!r}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        size = st.st_size
        length = size - offset if length is None else length
        if offset + length > size:
            raise OnnxImportError(f"{where}: external data {location!r} has {size} bytes; the tensor asks for "
                                  f"{length} bytes at offset {offset}")
        if length > reader.limit:
            raise OnnxImportError(f"{where}: external data of {length} bytes is over the limit of {reader.limit} "
                                  "bytes (max_tensor_bytes / OPDSL_MAX_TENSOR_BYTES)")
        f.seek(offset)
        data = f.read(length)
    inline = onnx.TensorProto()
    inline.CopyFrom(tensor)
    del inline.external_data[:]
    inline.data_location = onnx.TensorProto.DEFAULT
    inline.raw_data = data
    return inline


def _attribute_value(attr, where: str, reader: _Reader):
    import onnx
    A = onnx.AttributeProto
    if attr.type == A.TENSOR:
        return _tensor_value(attr.t, f"{where} attribute {attr.name!r}", reader)
    if attr.type == A.TYPE_PROTO:  # ONNX Optional's `type`
        return value_spec(attr.tp, f"{where} attribute {attr.name!r}", onnx_dtype)
    if attr.type in (A.GRAPH, A.GRAPHS, A.SPARSE_TENSOR, A.SPARSE_TENSORS, A.TYPE_PROTOS):
        raise OnnxImportError(f"{where}: attribute {attr.name!r} of type {A.AttributeType.Name(attr.type)} "
                              f"is not supported")
    value = onnx.helper.get_attribute_value(attr)
    if attr.type in (A.FLOAT, A.FLOATS):  # stored as float32: read back the shortest decimal (0.0036, not 0.00359999)
        return _short_float(value) if attr.type == A.FLOAT else [_short_float(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list):
        return [v.decode("utf-8") if isinstance(v, bytes) else v for v in value]
    return value


def _short_float(v: float) -> float:
    import numpy as np
    return float(str(np.float32(v)))


def _param_value(cls, pname: str, ann, value):
    """Bridge ONNX attribute conventions to param annotations (ints as bools, dtype codes)."""
    import typing
    if ann is bool and isinstance(value, int):
        return bool(value)
    target = ann
    if typing.get_origin(ann) is typing.Union:
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        target = args[0] if len(args) == 1 else ann
    if target is DType and isinstance(value, int):
        return onnx_dtype(value, f"{cls.__name__} param {pname!r}")
    if isinstance(target, type) and hasattr(target, "from_onnx_attribute"):  # a structured param's own form
        return target.from_onnx_attribute(value)
    if target is bool and isinstance(value, int):
        return bool(value)
    return value


def _node_label(node) -> str:
    dom = node.domain or "ai.onnx"
    return f"{node.name or '<unnamed>'!r} ({dom}::{node.op_type})"


# --------------------------------------------------------------------------- nodes

def _make_op(node, opsets: Dict[str, int], attrs: Dict[str, Any]) -> Op:
    domain = registry.normalize_domain(node.domain)
    if domain not in opsets:
        raise OnnxImportError(f"node {_node_label(node)}: domain {domain or 'ai.onnx'!r} has no opset_import "
                              f"entry in the model (imported: {', '.join(d or 'ai.onnx' for d in opsets)})")
    try:
        cls = registry.lookup(domain, node.op_type, opsets[domain])
    except registry.UnknownOpError as e:
        known = sorted(c.op_type for c in registry.all_ops() if c.domain == domain)
        listing = f"; ops known in {domain or 'ai.onnx'!r}: {', '.join(known)}" if known else ""
        raise OnnxImportError(f"node {_node_label(node)}: {e}{listing}") from None
    table = cls.param_table()
    params = {}
    for name, value in attrs.items():
        if name not in table:
            accepted = ", ".join(table) or "none"
            raise OnnxImportError(f"node {_node_label(node)}: attribute {name!r} is not supported by "
                                  f"{cls.__name__} (params: {accepted})")
        try:
            params[name] = _param_value(cls, name, table[name].annotation, value)
        except OnnxImportError:
            raise
        except (TypeError, ValueError) as e:  # a structured param's form that does not read back
            raise OnnxImportError(f"node {_node_label(node)}: attribute {name!r}: {e}") from None
    if (domain == "" and node.op_type == "Split" and "num_outputs" in table and "num_outputs" not in params
            and "split" not in params and not (len(node.input) > 1 and node.input[1])):
        params["num_outputs"] = len(node.output)  # equal parts, as many as the node has outputs
    try:
        return cls(**params)
    except (TypeError, ValueError) as e:
        raise OnnxImportError(f"node {_node_label(node)}: {e}") from None


# Constant's value attributes opdsl can hold, and the numpy dtype of the scalar/list forms
_CONSTANT_FORMS = {"value": None, "value_float": np.float32, "value_floats": np.float32,
                   "value_int": np.int64, "value_ints": np.int64}


def _constant_node(node, reader: _Reader) -> np.ndarray:
    where = f"node {_node_label(node)}"
    names = [a.name for a in node.attribute]
    if len(names) != 1:
        raise OnnxImportError(f"{where}: a Constant needs exactly one value attribute, got {sorted(names) or 'none'}")
    attr = node.attribute[0]
    accepted = ", ".join(_CONSTANT_FORMS)
    if attr.name in ("value_string", "value_strings"):
        raise OnnxImportError(f"{where}: Constant attribute {attr.name!r} makes a string tensor, and opdsl has "
                              f"no string dtype; accepted: {accepted}")
    if attr.name == "sparse_value":
        raise OnnxImportError(f"{where}: Constant attribute 'sparse_value' holds a sparse tensor, which opdsl "
                              f"does not support; store it dense (attribute 'value'); accepted: {accepted}")
    if attr.name not in _CONSTANT_FORMS:
        raise OnnxImportError(f"{where}: Constant attribute {attr.name!r} is not supported; accepted: {accepted}")
    value = _attribute_value(attr, where, reader)
    dtype = _CONSTANT_FORMS[attr.name]
    return np.asarray(value) if dtype is None else np.asarray(value, dtype)


def _import_nodes(g: Graph, nodes: Iterable, env: Dict[str, Optional[Tensor]], opsets: Dict[str, int],
                  functions: Dict, prefix: str, depth: int = 0, reader: Optional[_Reader] = None) -> None:
    for node in nodes:
        where = f"node {_node_label(node)}"
        domain = registry.normalize_domain(node.domain)
        if domain == "" and node.op_type == "Constant" and registry.find("", "Constant", opsets.get("")) is None:
            env[node.output[0]] = g.constant(g.unique_name(node.output[0]), _constant_node(node, reader))
            continue
        ins = []
        for name in node.input:
            if name not in env:
                raise OnnxImportError(f"{where}: input {name!r} is not defined before this node (not a graph "
                                      f"input, initializer or earlier node output)")
            ins.append(env[name])
        if subgraph.graph_attributes(node):  # If/Loop/Scan: bodies, and the outer values they read
            attrs, captured = subgraph.import_bodies(node, env, ins, opsets, functions, depth, reader, where)
            ins += captured
        else:
            attrs = {a.name: _attribute_value(a, where, reader) for a in node.attribute}
        fn = functions.get((domain, node.op_type))
        if fn is not None and registry.find(domain, node.op_type, opsets.get(domain)) is None:
            _expand_function(g, node, fn, ins, env, opsets, functions, prefix, depth, reader)
            continue
        op = _make_op(node, opsets, attrs)
        while ins and ins[-1] is None:  # trailing absent optional inputs
            ins.pop()
        outs = list(node.output)
        try:
            specs = [None if t is None else t.spec for t in ins]
            n_out = len(check_and_infer(op, specs, where="ONNX import"))
            if any(outs[n_out:]):
                raise OnnxImportError(f"{where}: the op produces {n_out} output(s), the node names {len(outs)}")
            outs += [""] * (n_out - len(outs))  # trailing optional outputs the node leaves out
            names = [g.unique_name(prefix + (o or f"{node.name or node.op_type}_unused{i}"))
                     for i, o in enumerate(outs[:n_out])]
            result = apply_op(op, ins, g, out_names=names)
        except (VerifyError, TypeError, ValueError) as e:
            if isinstance(e, OnnxImportError):
                raise
            raise OnnxImportError(f"{where}: {e}") from None
        result = result if isinstance(result, tuple) else (result,)
        for o, t in zip(outs, result):
            if o:
                env[o] = t
        _name_node(g, result[0].producer, prefix + (node.name or ""))


def _name_node(g: Graph, node, name: str) -> None:
    """Give a graph node the ONNX node's name when it is free (errors and printing use it)."""
    if node is not None:
        g.rename_node(node, name)


def _expand_function(g: Graph, node, fn, ins: List, env, opsets, functions,
                     prefix: str, depth: int, reader: _Reader) -> None:
    """Inline a model-local FunctionProto for one calling node."""
    import onnx
    if depth > coverage.MAX_FUNCTION_DEPTH:
        raise OnnxImportError(f"node {_node_label(node)}: functions nest deeper than {coverage.MAX_FUNCTION_DEPTH} "
                              "levels (recursion?)")
    if len(ins) > len(fn.input):
        raise OnnxImportError(f"node {_node_label(node)}: function {fn.name!r} takes {len(fn.input)} inputs, "
                              f"got {len(ins)}")
    local: Dict[str, Optional[Tensor]] = {"": None}
    for i, name in enumerate(fn.input):
        local[name] = ins[i] if i < len(ins) else None
    fn_opsets = dict(opsets)
    fn_opsets.update(_opsets(fn.opset_import, f"function {fn.name!r} opset_import"))
    bound = {a.name: a for a in fn.attribute_proto}  # declared defaults, then the caller's values
    bound.update({a.name: a for a in node.attribute})
    body = []
    for inner in fn.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        kept = []
        for a in copy.attribute:
            if a.ref_attr_name:
                if a.ref_attr_name not in bound:
                    continue  # unset optional attribute: the op's default applies
                ref = onnx.AttributeProto()
                ref.CopyFrom(bound[a.ref_attr_name])
                ref.name = a.name
                kept.append(ref)
            else:
                kept.append(a)
        del copy.attribute[:]
        copy.attribute.extend(kept)
        body.append(copy)
    _import_nodes(g, body, local, fn_opsets, functions, f"{prefix}{node.name or fn.name}/", depth + 1, reader)
    for i, name in enumerate(node.output):
        if name:
            if i >= len(fn.output) or fn.output[i] not in local:
                raise OnnxImportError(f"node {_node_label(node)}: function {fn.name!r} does not define output {i}")
            env[name] = local[fn.output[i]]
