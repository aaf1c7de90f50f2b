"""From a checked manifest to op classes: resolving implementations and hooks, checking that
each kernel's parameters are the ones the manifest declares, and making the ``PackageOp``
subclass (params as annotated class attributes, so they are ONNX attributes by name).
"""
from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

from dsl.lang import types as T
from dsl.opgraph.op import _RESERVED, Op
from dsl.package.errors import PackageError
from dsl.package.loader import Loader
from dsl.package.manifest import ImplDecl, Manifest, OpDecl
from dsl.package.op import COMBINED_HOOKS, PACKAGE_HOOKS, PackageOp, hook_method, infer_signature
from dsl.runtime.kernel import Kernel

_ANNOTATION = {"f32": float, "f64": float, "i64": int, "bool": bool, "str": str}
_KERNEL_KIND = {"f32": "f", "f64": "f", "i64": "iu", "bool": "b"}
_CL_DTYPE = {"f32": T.f32, "f64": T.f64, "i64": T.i64, "bool": T.bool_}


def build_ops(manifest: Manifest, files: Dict[str, Path], loader: Loader) -> List[type]:
    """One PackageOp subclass per manifest op (not registered)."""
    counts: Dict[Tuple[str, str], int] = {}
    for o in manifest.ops:
        counts[(o.domain, o.type)] = counts.get((o.domain, o.type), 0) + 1
    return [_op_class(manifest, o, files, loader, counts[(o.domain, o.type)] > 1) for o in manifest.ops]


def _op_class(manifest: Manifest, decl: OpDecl, files: Dict[str, Path], loader: Loader, ranged: bool) -> type:
    path = manifest.path
    for p in decl.params:
        if p.source is None and (p.name in _RESERVED or hasattr(Op, p.name)):
            raise PackageError(path, p.where.line, f"{p.where.key}.name", f"{p.name!r} is a dsl.Op attribute "
                               "and cannot be a param; accepted: another name")
    hooks: Dict[str, Any] = {}
    if decl.functions:
        module = loader.module(files[decl.functions], decl.functions_where)
        hooks = {h: getattr(module, h) for h in PACKAGE_HOOKS if callable(getattr(module, h, None))}
        if not hooks:
            raise PackageError(path, decl.functions_where.line, decl.functions_where.key,
                               f"{decl.functions} defines none of the hooks; accepted: module-level functions "
                               f"named {', '.join(PACKAGE_HOOKS)}")
    if "infer" not in hooks:
        for o in decl.outputs:
            if o.like is None:
                raise PackageError(path, o.where.line, o.where.key, f"output {o.name!r} has no 'like' and the op "
                                   "has no infer hook; accepted: like: <input name>, or an infer(op, *inputs) in "
                                   "the functions module")
    impls: Dict[str, Dict[str, Any]] = {}
    for impl in decl.implementations:
        impls.setdefault(impl.backend, {})[impl.name] = _implementation(manifest, decl, impl, files, loader)

    annotations, ns = {}, {}
    for p in decl.params:
        if p.source is not None:
            continue  # filled from quantization, not an attribute
        ann = _ANNOTATION[p.dtype]
        annotations[p.name] = Tuple[ann, ...] if p.size is not None else ann
        if not p.required:
            ns[p.name] = p.default
    name = f"{decl.type}_{decl.since}" if ranged else decl.type

    def infer(self, *specs):
        return PackageOp.infer(self, *specs)
    infer.__signature__ = infer_signature(tuple(i.name for i in decl.inputs))
    infer.__qualname__ = f"{name}.infer"
    ns.update({
        "__annotations__": annotations, "__module__": loader.package, "__qualname__": name,
        "__doc__": f"{decl.domain or 'ai.onnx'}::{decl.type} from op package {manifest.name!r} ({path})",
        "op_type": decl.type, "domain": decl.domain, "since": decl.since, "until": decl.until,
        "_decl": decl, "_manifest": path, "_hooks": hooks, "_impls": impls, "_bound_cache": {},
        "kernels": _display_names(impls),
        "infer": infer,
    })
    for h, fn in hooks.items():
        if h not in COMBINED_HOOKS:
            ns[h] = hook_method(h, fn)
    return type(name, (PackageOp,), ns)


def _display_names(impls: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """``kernels`` for listings: an implementation's name, ``backend:name`` where backends differ."""
    out: Dict[str, Any] = {}
    for b, named in impls.items():
        for n, k in named.items():
            out[n if out.get(n, k) is k else f"{b}:{n}"] = k
    return out


# --------------------------------------------------------------------------- implementations

def _implementation(manifest: Manifest, decl: OpDecl, impl: ImplDecl, files, loader: Loader):
    where = impl.file_where
    if impl.source is not None:
        return _raw_opencl(manifest, decl, impl, files[impl.source])
    file, attr = impl.kernel
    module = loader.module(files[file], where)
    obj = getattr(module, attr, None)
    if obj is None:
        defined = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
                         and getattr(v, "__module__", module.__name__) == module.__name__)
        raise PackageError(manifest.path, where.line, where.key, f"{file} defines no {attr!r}; it defines: "
                           f"{', '.join(defined) or 'nothing callable'}")
    if isinstance(obj, Kernel):
        _check_kernel(manifest, decl, impl, obj)
        obj = _with_options(manifest, impl, obj)
    elif callable(obj) and not isinstance(obj, type):
        for k, given in (("defines", impl.defines), ("options", impl.options)):
            if given:
                raise PackageError(manifest.path, where.line, f"{impl.where.key}.{k}", f"{file}:{attr} is a plain "
                                   f"Python function; {k} apply to @dsl.kernel implementations only")
        if impl.backend != "interpreter":
            raise PackageError(manifest.path, where.line, where.key, f"{file}:{attr} is a plain Python "
                               f"function, accepted for backend interpreter only; for {impl.backend} decorate "
                               "it with @dsl.kernel")
        _check_callable(manifest, decl, impl, obj)
    else:
        raise PackageError(manifest.path, where.line, where.key, f"{file}:{attr} is {type(obj).__name__}; "
                           "accepted: a @dsl.kernel or (interpreter) a Python function")
    return obj


def _expected(decl: OpDecl, with_str: bool) -> Tuple[List[str], List[str]]:
    tensors = [*(i.name for i in decl.inputs), *(o.name for o in decl.outputs), *(s.name for s in decl.scratch)]
    scalars = [p.name for p in decl.params if with_str or p.dtype != "str"]
    return tensors, scalars


def _mismatch(manifest: Manifest, decl: OpDecl, impl: ImplDecl, got: List[str], problem: str, with_str: bool):
    tensors, scalars = _expected(decl, with_str)
    want = ", ".join(tensors + scalars)
    where = impl.file_where
    raise PackageError(manifest.path, where.line, where.key, f"{impl.kernel[0]}:{impl.kernel[1]} takes "
                       f"({', '.join(got)}) but the manifest declares ({want}): inputs, outputs and scratch in "
                       f"order, then params{' other than str ones' if not with_str else ''} by name; {problem}")


def _with_options(manifest: Manifest, impl: ImplDecl, k: Kernel) -> Kernel:
    """The kernel compiled with the implementation's ``defines`` and ``options`` (a variant:
    the decorated kernel, and other entries naming it, keep their own)."""
    if not impl.defines and not impl.options:
        return k
    options = dict(impl.options)
    base = k
    if "fastmath" in options or "threads" in options:
        base = copy.copy(k)  # variant() compiles with the copy's fastmath / threads
        base.fastmath = bool(options.get("fastmath", k.fastmath))
        base.threads = int(options.get("threads", k.threads))
    try:
        variant = base.variant(defines=dict(impl.defines) or None, features=options.get("features"))
    except (TypeError, ValueError) as e:
        raise PackageError(manifest.path, impl.where.line, f"{impl.where.key}.defines", str(e)) from None
    variant.base = k.base  # the decorated kernel, not the copy that carried the options
    return variant


def _roles(decl: OpDecl):
    """(name, role, accepted dtype names or None, scratch decl or None) of each tensor parameter."""
    by_input = {i.name: i for i in decl.inputs}
    out = [(i.name, "input", i.dtypes, None) for i in decl.inputs]
    out += [(o.name, "output", by_input[o.like].dtypes if o.like else None, None) for o in decl.outputs]
    out += [(s.name, "scratch", (s.dtype,), s) for s in decl.scratch]
    return out


def _check_tensors(manifest: Manifest, decl: OpDecl, impl: ImplDecl, k: Kernel, got: List[str]) -> None:
    """Names in order, In for inputs, Out for outputs and scratch, dtypes the manifest accepts:
    a kernel taking ``(y: Out, x: In)`` for inputs x then outputs y would write the caller's x."""
    k_tensors = [p for p in k.params if p.kind == "tensor"]
    roles = _roles(decl)
    if [p.name for p in k_tensors] != [r[0] for r in roles]:
        _mismatch(manifest, decl, impl, got, f"its tensor parameters are ({', '.join(p.name for p in k_tensors)}); "
                  f"declared: ({', '.join(r[0] for r in roles)})", False)
    for p, (name, role, dtypes, scratch) in zip(k_tensors, roles):
        ann = p.annotation
        shown = repr(ann).replace("dsl.", "")
        if role == "input" and ann.access != "in":
            _mismatch(manifest, decl, impl, got, f"input {name} is {shown}; accepted: In[...] (the kernel must "
                      "not write the caller's input)", False)
        if role != "input" and not ann.writable:
            _mismatch(manifest, decl, impl, got, f"{role} {name} is {shown}; accepted: Out[...]", False)
        kernel_dtypes = ([ann.dtype] if isinstance(ann.dtype, T.DType)
                         else list(getattr(ann.dtype, "allowed", ()) or ()))
        names = [_manifest_dtype(d) for d in kernel_dtypes]
        if dtypes is not None and names and not set(names) & set(dtypes):
            _mismatch(manifest, decl, impl, got, f"{role} {name} is {shown}; the manifest accepts "
                      f"{'|'.join(dtypes)}", False)
        if scratch is not None:
            ndim = len(scratch.shape)
            if ann.ndim is not None and ann.ndim != ndim:
                want = f"Out[{scratch.dtype}, {ndim}]" if scratch.typed else "Out[u8] (bytes: a 1-D u8 buffer)"
                _mismatch(manifest, decl, impl, got, f"scratch {name} is {shown}; accepted: {want}", False)


def _manifest_dtype(d: T.DType) -> str:
    return "bool" if d.name == "bool_" else d.name


def _check_kernel(manifest: Manifest, decl: OpDecl, impl: ImplDecl, k: Kernel) -> None:
    tensors, scalars = _expected(decl, with_str=False)
    got = [p.name for p in k.params]
    k_tensors = [p for p in k.params if p.kind == "tensor"]
    k_scalars = {p.name: p for p in k.params if p.kind != "tensor"}
    if [p.name for p in k.params[:len(k_tensors)]] != [p.name for p in k_tensors] or len(k_tensors) != len(tensors):
        _mismatch(manifest, decl, impl, got, f"it has {len(k_tensors)} tensor parameter(s), {len(tensors)} "
                  "expected first", False)
    _check_tensors(manifest, decl, impl, k, got)
    if set(k_scalars) != set(scalars):
        missing, extra = sorted(set(scalars) - set(k_scalars)), sorted(set(k_scalars) - set(scalars))
        what = "; ".join(x for x in (f"missing {', '.join(missing)}" if missing else "",
                                     f"not declared {', '.join(extra)}" if extra else "") if x)
        _mismatch(manifest, decl, impl, got, what, False)
    for p in decl.params:
        if p.dtype == "str":
            continue
        kp = k_scalars[p.name]
        ann = kp.annotation
        if p.size is not None:
            if kp.kind != "vec" or ann.length != p.size:
                _mismatch(manifest, decl, impl, got, f"param {p.name} is a vector of {p.size} (size: {p.size}); "
                          f"the kernel's is {ann!r}", False)
            ann = ann.dtype
        elif kp.kind == "vec":
            _mismatch(manifest, decl, impl, got, f"param {p.name} is a scalar; the kernel's is {ann!r}", False)
        if isinstance(ann, T.ConstSpec):
            ann = ann.dtype
        if isinstance(ann, T.DType) and ann.kind not in _KERNEL_KIND[p.dtype]:
            _mismatch(manifest, decl, impl, got, f"param {p.name} is declared {p.dtype}, the kernel's is {ann}",
                      False)


def _check_callable(manifest: Manifest, decl: OpDecl, impl: ImplDecl, fn) -> None:
    import inspect
    tensors, scalars = _expected(decl, with_str=True)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return
    got = [p.name for p in params]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in params)
    if len(positional) < len(tensors) and not var_pos:
        _mismatch(manifest, decl, impl, got, f"it takes {len(positional)} positional argument(s), "
                  f"{len(tensors)} tensors expected", True)
    rest = {p.name for p in params[len(tensors):] if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)} - {"backend"}
    if any(p.kind is p.VAR_KEYWORD for p in params):
        rest |= set(scalars)
    if rest != set(scalars):
        missing, extra = sorted(set(scalars) - rest), sorted(rest - set(scalars))
        what = "; ".join(x for x in (f"missing {', '.join(missing)}" if missing else "",
                                     f"not declared {', '.join(extra)}" if extra else "") if x)
        _mismatch(manifest, decl, impl, got, what, True)


def _raw_opencl(manifest: Manifest, decl: OpDecl, impl: ImplDecl, source: Path):
    from dsl.runtime.raw_opencl import Param, RawOpenCL
    where = impl.file_where
    text = source.read_text()
    if not re.search(r"__kernel\s+void\s+" + re.escape(impl.function) + r"\s*\(", text):
        raise PackageError(manifest.path, impl.where.line, f"{impl.where.key}.function", f"{impl.source} has no "
                           f"'__kernel void {impl.function}(...)'; accepted: a __kernel function of the source")
    params = []
    for p in decl.params:
        if p.dtype == "str":
            continue
        if p.size is not None:
            raise PackageError(manifest.path, where.line, where.key, f"param {p.name} is a vector (size: {p.size}); "
                               "raw OpenCL implementations take scalar params only")
        params.append(Param(p.name, _CL_DTYPE[p.dtype]))
    function = impl.function
    options = " ".join(filter(None, [impl.build_options, *(_cl_define(k, v) for k, v in impl.defines)]))
    return RawOpenCL(
        f"{decl.type}.{impl.function}", source,
        inputs=tuple(i.name for i in decl.inputs),
        outputs=(*(o.name for o in decl.outputs), *(s.name for s in decl.scratch)),
        params=params,
        select=lambda dtypes, values: (function, options),
        enqueue=lambda ins, outs, values: ((outs[0].size,), None),
    )


def _cl_define(name: str, value) -> str:
    """``defines:`` of a raw OpenCL implementation as a compiler option (``-DTILE=16``)."""
    if isinstance(value, bool):
        value = int(value)
    return f"-D{name}={value}"
