"""The ``opdsl-package.yaml`` schema: reading a manifest into plain records, checking every key.

Nothing here touches files other than the manifest or imports package code: paths are
checked by paths.py and modules imported by loader.py, after this has accepted the manifest.
Unknown keys are errors (a typo must not silently drop a setting); every error names
``<manifest>:<line>: <key>`` and what is accepted (docs/packages.md lists the schema).
"""
from __future__ import annotations

import keyword
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from dsl.lang import types as T
from dsl.package import yaml_lines
from dsl.package.errors import PackageError
from dsl.package.yaml_lines import LDict, LList

FORMAT_VERSION = 1  # the newest package format this opdsl reads
MAX_SCRATCH_BYTES = 1 << 30  # one typed scratch buffer, allocated per launch

PARAM_DTYPES = ("f32", "f64", "i64", "bool", "str")
TENSOR_DTYPES = ("bool", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f16", "bf16", "f32", "f64")
QUANT_FIELDS = ("scale", "zero_point")

TOP_KEYS = ("name", "version", "ops")
OP_KEYS = ("type", "domain", "since", "until", "inputs", "outputs", "params", "scratch", "functions",
           "implementations")
INPUT_KEYS = ("name", "max_rank", "dtypes", "constant")
OUTPUT_KEYS = ("name", "like")
PARAM_KEYS = ("name", "dtype", "default", "size", "from")
SCRATCH_KEYS = ("name", "bytes", "dtype", "shape")
IMPL_KEYS = ("backend", "kernel", "source", "function", "build_options", "defines", "options", "memory")
KERNEL_OPTIONS = ("fastmath", "threads", "features")  # options: of a DSL kernel implementation
# memory: placements (the Cloud AI 100 guide's memoryConfig).  Every buffer here is host memory
# (numba, interpreter) or OpenCL global memory, so they are accepted, checked and ignored.
MEMORY_PLACES = ("ddr", "cacheable_ddr", "vtcm", "global", "local", "any")


@dataclass(frozen=True)
class Where:
    """A place in the manifest: the line and the dotted key (``ops[0].params[1].dtype``)."""

    line: int
    key: str


@dataclass(frozen=True)
class InputDecl:
    name: str
    max_rank: Optional[int] = None
    dtypes: Optional[Tuple[str, ...]] = None
    constant: bool = False
    where: Where = None


@dataclass(frozen=True)
class OutputDecl:
    name: str
    like: Optional[str] = None
    where: Where = None


_NO_DEFAULT = object()


@dataclass(frozen=True)
class ParamDecl:
    """An ONNX attribute and kernel scalar (or ``size``-long vector); ``source`` is
    ``(input, 'scale'|'zero_point')`` for a param filled from an input's quantization."""

    name: str
    dtype: str
    default: Any = _NO_DEFAULT
    size: Optional[int] = None
    source: Optional[Tuple[str, str]] = None
    where: Where = None

    @property
    def required(self) -> bool:
        return self.default is _NO_DEFAULT


@dataclass(frozen=True)
class ScratchDecl:
    """A zeroed buffer per launch: ``bytes`` of u8 (``shape == (bytes,)``), or typed with
    ``dtype`` and ``shape`` (the guide's ``float*`` in VTCM)."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    where: Where = None
    typed: bool = False  # declared with dtype/shape (else bytes)

    @property
    def bytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * T.as_dtype(self.dtype).np.itemsize


@dataclass(frozen=True)
class ImplDecl:
    """One implementation: a ``kernel`` ("file.py:name") or raw OpenCL ``source`` + ``function``."""

    backend: str
    kernel: Optional[Tuple[str, str]] = None  # (file, attribute)
    source: Optional[str] = None
    function: Optional[str] = None
    build_options: str = ""
    where: Where = None
    file_where: Where = None  # the key naming the file (kernel or source)
    defines: Tuple[Tuple[str, Any], ...] = ()   # module constants (DSL) or -D macros (raw OpenCL)
    options: Tuple[Tuple[str, Any], ...] = ()   # KERNEL_OPTIONS of a DSL kernel
    memory: Tuple[Tuple[str, str], ...] = ()    # buffer name -> MEMORY_PLACES entry (ignored here)

    @property
    def name(self) -> str:
        """What a package ``select`` hook returns to choose this implementation."""
        return self.kernel[1] if self.kernel else self.function


@dataclass(frozen=True)
class OpDecl:
    type: str
    domain: str
    since: int
    until: Optional[int]
    inputs: Tuple[InputDecl, ...]
    outputs: Tuple[OutputDecl, ...]
    params: Tuple[ParamDecl, ...]
    scratch: Tuple[ScratchDecl, ...]
    functions: Optional[str]
    implementations: Tuple[ImplDecl, ...]
    where: Where
    functions_where: Optional[Where] = None


@dataclass
class Manifest:
    path: str  # the manifest file, as given (errors show it)
    name: str
    version: int
    ops: List[OpDecl] = field(default_factory=list)


# --------------------------------------------------------------------------- reading

def read(path: str, text: str, backends: Tuple[str, ...]) -> Manifest:
    """The manifest in ``text`` (read from ``path``), checked against the schema."""
    return _Reader(path, backends).manifest(yaml_lines.load(text, path))


class _Reader:
    def __init__(self, path: str, backends: Tuple[str, ...]):
        self.path, self.backends = path, backends

    def fail(self, line: int, key: Optional[str], problem: str):
        raise PackageError(self.path, line, key, problem)

    # generic shapes ----------------------------------------------------------------
    def mapping(self, value, key: str, line: int, allowed: Tuple[str, ...], required: Tuple[str, ...]) -> LDict:
        if not isinstance(value, LDict):
            self.fail(line, key, f"expected a mapping with keys {', '.join(allowed)}, got {_kind(value)}")
        for k in value:
            if k not in allowed:
                self.fail(value.lines[k], _join(key, k), f"unknown key; accepted: {', '.join(allowed)}")
        for k in required:
            if k not in value:
                self.fail(value.line, key or "(top level)", f"missing required key '{k}'")
        return value

    def items(self, m: LDict, k: str, key: str, nonempty: bool = False) -> List[Tuple[Any, str, int]]:
        """(item, its key, its line) of the list ``m[k]``; absent = empty."""
        if k not in m:
            return []
        value, line, key = m[k], m.lines[k], _join(key, k)
        if value is None and not nonempty:
            return []
        if not isinstance(value, LList):
            self.fail(line, key, f"expected a list, got {_kind(value)}")
        if nonempty and not value:
            self.fail(line, key, "the list is empty; at least one entry is needed")
        return [(v, f"{key}[{i}]", value.lines[i]) for i, v in enumerate(value)]

    def string(self, m: LDict, k: str, key: str, ident: bool = False, default=None,
               empty: bool = False) -> Optional[str]:
        if k not in m:
            return default
        v, line = m[k], m.lines[k]
        if not isinstance(v, str) or not (v or empty):
            self.fail(line, _join(key, k), f"expected a {'' if empty else 'non-empty '}string, got {_kind(v)}")
        if ident and (not v.isidentifier() or keyword.iskeyword(v) or v == "backend"):
            self.fail(line, _join(key, k), f"{v!r} is not accepted; accepted: a Python identifier "
                      "(letters, digits, '_'), not a keyword and not 'backend'")
        return v

    def integer(self, m: LDict, k: str, key: str, minimum: int, default=None) -> Optional[int]:
        if k not in m:
            return default
        v, line = m[k], m.lines[k]
        if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
            self.fail(line, _join(key, k), f"expected an integer >= {minimum}, got {_kind(v)}")
        return v

    def boolean(self, m: LDict, k: str, key: str, default: bool) -> bool:
        if k not in m:
            return default
        v = m[k]
        if not isinstance(v, bool):
            self.fail(m.lines[k], _join(key, k), f"expected true or false, got {_kind(v)}")
        return v

    # the schema ---------------------------------------------------------------------
    def manifest(self, top) -> Manifest:
        top = self.mapping(top, "", 1, TOP_KEYS, TOP_KEYS)
        name = self.string(top, "name", "")
        if not all(c.isalnum() or c in "_-." for c in name):
            self.fail(top.lines["name"], "name", f"{name!r} is not accepted; accepted: letters, digits, '_', '-', '.'")
        version = top["version"]
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            self.fail(top.lines["version"], "version", f"expected the package format version, an integer from 1 "
                      f"to {FORMAT_VERSION}, got {_kind(version)}")
        if version > FORMAT_VERSION:
            self.fail(top.lines["version"], "version", f"format version {version} is newer than this opdsl "
                      f"reads; accepted: 1 to {FORMAT_VERSION} (upgrade opdsl)")
        ops = [self.op(v, key, line) for v, key, line in self.items(top, "ops", "", nonempty=True)]
        seen: Dict[Tuple[str, str], OpDecl] = {}
        for o in ops:
            for other in [p for k, p in seen.items() if k[:2] == (o.domain, o.type)]:
                if o.since <= (other.until or 1 << 30) and other.since <= (o.until or 1 << 30):
                    self.fail(o.where.line, o.where.key, f"{o.domain}::{o.type} opsets [{o.since}, "
                              f"{o.until or '...'}] overlap the entry at line {other.where.line}; accepted: "
                              "disjoint since/until ranges")
            seen[(o.domain, o.type, o.since)] = o
        return Manifest(self.path, name, version, ops)

    def op(self, m, key: str, line: int) -> OpDecl:
        m = self.mapping(m, key, line, OP_KEYS, ("type", "outputs", "implementations"))
        op_type = self.string(m, "type", key, ident=True)
        domain = self.string(m, "domain", key, default="", empty=True)
        if domain == "ai.onnx":
            domain = ""
        since = self.integer(m, "since", key, 1, default=1)
        until = self.integer(m, "until", key, since, default=None)
        inputs = tuple(self.input(v, k, ln) for v, k, ln in self.items(m, "inputs", key))
        outputs = tuple(self.output(v, k, ln) for v, k, ln in self.items(m, "outputs", key, nonempty=True))
        params = tuple(self.param(v, k, ln) for v, k, ln in self.items(m, "params", key))
        scratch = tuple(self.scratch(v, k, ln) for v, k, ln in self.items(m, "scratch", key))
        seen: Dict[str, Where] = {}
        buffers = {d.name for d in (*inputs, *outputs, *scratch)}
        for d in (*inputs, *outputs, *params, *scratch):
            if d.name in seen:
                self.fail(d.where.line, d.where.key, f"name {d.name!r} is already used at line "
                          f"{seen[d.name].line}; inputs, outputs, params and scratch need distinct names")
            seen[d.name] = d.where
        names = [i.name for i in inputs]
        for o in outputs:
            if o.like is not None and o.like not in names:
                self.fail(o.where.line, f"{o.where.key}.like", f"{o.like!r} is not an input of {op_type}; "
                          f"accepted: {', '.join(names) or 'none (the op has no inputs)'}")
        for p in params:
            if p.source is not None and p.source[0] not in names:
                self.fail(p.where.line, f"{p.where.key}.from", f"{p.source[0]!r} is not an input of {op_type}; "
                          f"accepted: <input>.scale or <input>.zero_point with input "
                          f"{', '.join(names) or 'none (the op has no inputs)'}")
        functions = self.string(m, "functions", key)
        fwhere = Where(m.lines["functions"], _join(key, "functions")) if functions else None
        impls = tuple(self.implementation(v, k, ln, buffers)
                      for v, k, ln in self.items(m, "implementations", key, nonempty=True))
        per_backend: Dict[Tuple[str, str], ImplDecl] = {}
        for i in impls:
            dup = per_backend.get((i.backend, i.name))
            if dup is not None:
                self.fail(i.where.line, i.where.key, f"a second {i.backend} implementation named {i.name!r} "
                          f"(first at line {dup.where.line}); the select hook tells them apart by name")
            per_backend[(i.backend, i.name)] = i
        return OpDecl(op_type, domain, since, until, inputs, outputs, params, scratch, functions, impls,
                      Where(line, key), fwhere)

    def input(self, m, key: str, line: int) -> InputDecl:
        m = self.mapping(m, key, line, INPUT_KEYS, ("name",))
        dtypes = None
        if "dtypes" in m:
            dtypes = []
            for v, k, ln in self.items(m, "dtypes", key, nonempty=True):
                if v not in TENSOR_DTYPES:
                    self.fail(ln, k, f"unknown dtype {_kind(v)}; accepted: {', '.join(TENSOR_DTYPES)}")
                dtypes.append(v)
            dtypes = tuple(dtypes)
        return InputDecl(self.string(m, "name", key, ident=True), self.integer(m, "max_rank", key, 0),
                         dtypes, self.boolean(m, "constant", key, False), Where(line, key))

    def output(self, m, key: str, line: int) -> OutputDecl:
        m = self.mapping(m, key, line, OUTPUT_KEYS, ("name",))
        return OutputDecl(self.string(m, "name", key, ident=True), self.string(m, "like", key), Where(line, key))

    def param(self, m, key: str, line: int) -> ParamDecl:
        m = self.mapping(m, key, line, PARAM_KEYS, ("name",))
        name = self.string(m, "name", key, ident=True)
        source = None
        if "from" in m:
            v = m["from"]
            parts = v.split(".") if isinstance(v, str) else []
            if len(parts) != 2 or parts[1] not in QUANT_FIELDS or not parts[0]:
                self.fail(m.lines["from"], _join(key, "from"), f"{_kind(v)} is not accepted; accepted: "
                          "<input>.scale or <input>.zero_point (the input's quantization)")
            source = (parts[0], parts[1])
        if "dtype" not in m and source is None:
            self.fail(m.line, key, f"missing required key 'dtype'; accepted: {', '.join(PARAM_DTYPES)}")
        dtype = m.get("dtype", "f32" if source and source[1] == "scale" else "i64")
        if dtype not in PARAM_DTYPES:
            self.fail(m.lines["dtype"], _join(key, "dtype"), f"unknown dtype {_kind(dtype)}; accepted: "
                      f"{', '.join(PARAM_DTYPES)}")
        if source is not None:
            want = ("f32", "f64") if source[1] == "scale" else ("i64",)
            if dtype not in want:
                self.fail(m.lines["dtype"], _join(key, "dtype"), f"{dtype} cannot hold an input's {source[1]}; "
                          f"accepted: {', '.join(want)}")
        size = self.integer(m, "size", key, 1)
        if size is not None and dtype == "str":
            self.fail(m.lines["size"], _join(key, "size"), "a str param cannot be a vector; accepted: size with "
                      "f32, f64, i64 or bool")
        default = _NO_DEFAULT
        if "default" in m:
            default = self.default_value(m["default"], dtype, size, m.lines["default"], _join(key, "default"))
        return ParamDecl(name, dtype, default, size, source, Where(line, key))

    def default_value(self, v, dtype: str, size: Optional[int], line: int, key: str):
        def one(x):
            ok = {"f32": isinstance(x, (int, float)) and not isinstance(x, bool),
                  "f64": isinstance(x, (int, float)) and not isinstance(x, bool),
                  "i64": isinstance(x, int) and not isinstance(x, bool),
                  "bool": isinstance(x, bool), "str": isinstance(x, str)}[dtype]
            if not ok:
                what = f"a list of {size} {dtype} values" if size else f"a {dtype} value"
                self.fail(line, key, f"{_kind(x)} does not fit dtype {dtype}; accepted: {what}")
            return float(x) if dtype in ("f32", "f64") else x
        if size is None:
            return one(v)
        if not isinstance(v, list) or len(v) != size:
            self.fail(line, key, f"expected a list of {size} {dtype} values (size: {size}), got {_kind(v)}")
        return tuple(one(x) for x in v)

    def scratch(self, m, key: str, line: int) -> ScratchDecl:
        m = self.mapping(m, key, line, SCRATCH_KEYS, ("name",))
        name = self.string(m, "name", key, ident=True)
        if ("bytes" in m) == ("dtype" in m or "shape" in m):
            self.fail(line, key, "give either bytes: N (a u8 buffer) or dtype and shape (a typed buffer, e.g. "
                      "{name: tmp, dtype: f32, shape: [256]})")
        if "bytes" in m:
            return ScratchDecl(name, "u8", (self.integer(m, "bytes", key, 1),), Where(line, key))
        if "dtype" not in m or "shape" not in m:
            self.fail(line, key, f"missing required key '{'shape' if 'dtype' in m else 'dtype'}'; a typed scratch "
                      "buffer needs both dtype and shape")
        dtype = m["dtype"]
        if dtype not in TENSOR_DTYPES:
            self.fail(m.lines["dtype"], _join(key, "dtype"), f"unknown dtype {_kind(dtype)}; accepted: "
                      f"{', '.join(TENSOR_DTYPES)}")
        shape = []
        for v, k, ln in self.items(m, "shape", key, nonempty=True):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                self.fail(ln, k, f"expected a dimension, an integer >= 1, got {_kind(v)}")
            shape.append(v)
        decl = ScratchDecl(name, dtype, tuple(shape), Where(line, key), typed=True)
        if decl.bytes > MAX_SCRATCH_BYTES:
            self.fail(m.lines["shape"], _join(key, "shape"), f"{decl.bytes} bytes per launch; accepted: at most "
                      f"{MAX_SCRATCH_BYTES} (1 GiB)")
        return decl

    def defines(self, m: LDict, key: str, raw: bool) -> Tuple[Tuple[str, Any], ...]:
        """``defines: {NAME: value}``: module constants of a DSL kernel, or -D macros of OpenCL C."""
        if "defines" not in m:
            return ()
        v, line, key = m["defines"], m.lines["defines"], _join(key, "defines")
        if not isinstance(v, LDict):
            self.fail(line, key, f"expected a mapping NAME: value, got {_kind(v)}")
        for name, value in v.items():
            ok = isinstance(value, (int, float)) or (raw and isinstance(value, str) and value.split() == [value])
            if not name.isidentifier() or not ok:
                self.fail(v.lines[name], _join(key, name), f"{name}: {_kind(value)} is not accepted; accepted: an "
                          "identifier and " + ("a number, bool or a string without spaces (-DNAME=value)" if raw else
                                               "an int, float or bool (a module constant the kernel reads)"))
        return tuple(sorted(v.items()))

    def options(self, m: LDict, key: str) -> Tuple[Tuple[str, Any], ...]:
        """``options: {fastmath, threads, features}`` of a DSL kernel (as @dsl.kernel takes them)."""
        if "options" not in m:
            return ()
        v, line, key = m["options"], m.lines["options"], _join(key, "options")
        if not isinstance(v, LDict):
            self.fail(line, key, f"expected a mapping with keys {', '.join(KERNEL_OPTIONS)}, got {_kind(v)}")
        self.mapping(v, key, line, KERNEL_OPTIONS, ())
        if "fastmath" in v:
            self.boolean(v, "fastmath", key, False)
        if "threads" in v:
            threads = self.integer(v, "threads", key, 1)
            if threads > 1024:
                self.fail(v.lines["threads"], _join(key, "threads"), f"{threads}; accepted: 1 to 1024")
        if "features" in v:
            for f, k, ln in self.items(v, "features", key):
                if not isinstance(f, str) or not f:
                    self.fail(ln, k, f"expected a feature name such as avx2, got {_kind(f)}")
            v = LDict(v, features=tuple(v["features"] or ()))
        return tuple(sorted(v.items()))

    def memory(self, m: LDict, key: str, buffers) -> Tuple[Tuple[str, str], ...]:
        """``memory: {buffer: place}``: accepted and checked; every place is ignored on these targets."""
        if "memory" not in m:
            return ()
        v, line, key = m["memory"], m.lines["memory"], _join(key, "memory")
        if not isinstance(v, LDict):
            self.fail(line, key, f"expected a mapping buffer: place, got {_kind(v)}")
        for name, place in v.items():
            if name not in buffers:
                self.fail(v.lines[name], _join(key, name), f"{name!r} is not an input, output or scratch buffer; "
                          f"accepted: {', '.join(sorted(buffers))}")
            if place not in MEMORY_PLACES:
                self.fail(v.lines[name], _join(key, name), f"unknown place {_kind(place)}; accepted: "
                          f"{', '.join(MEMORY_PLACES)}")
        return tuple(v.items())

    def implementation(self, m, key: str, line: int, buffers=()) -> ImplDecl:
        m = self.mapping(m, key, line, IMPL_KEYS, ("backend",))
        backend = self.string(m, "backend", key)
        if backend not in self.backends:
            self.fail(m.lines["backend"], _join(key, "backend"), f"unknown backend {backend!r}; accepted: "
                      f"{', '.join(self.backends)}")
        if ("kernel" in m) == ("source" in m):
            self.fail(line, key, "give exactly one of 'kernel' (\"file.py:name\": a @dsl.kernel or, for the "
                      "interpreter, a Python function) or 'source' (raw OpenCL, with 'function')")
        where = Where(line, key)
        if "kernel" in m:
            for k in ("function", "build_options"):
                if k in m:
                    self.fail(m.lines[k], _join(key, k), "only for raw OpenCL implementations (with 'source')")
            spec = self.string(m, "kernel", key)
            file, _, attr = spec.rpartition(":")
            if not file.endswith(".py") or not attr.isidentifier():
                self.fail(m.lines["kernel"], _join(key, "kernel"), f"{spec!r} is not accepted; accepted: "
                          "\"file.py:name\" (a file of the package and a function defined in it)")
            return ImplDecl(backend, (file, attr), where=where,
                            file_where=Where(m.lines["kernel"], _join(key, "kernel")),
                            defines=self.defines(m, key, raw=False), options=self.options(m, key),
                            memory=self.memory(m, key, buffers))
        if backend != "opencl":
            self.fail(m.lines["source"], _join(key, "source"), f"raw OpenCL source is for backend opencl, not "
                      f"{backend}; accepted here: kernel: \"file.py:name\"")
        if "function" not in m:
            self.fail(line, key, "missing required key 'function' (the __kernel function of the source to run)")
        function = self.string(m, "function", key, ident=True)
        options = m.get("build_options", "")
        if not isinstance(options, str):
            self.fail(m.lines["build_options"], _join(key, "build_options"), f"expected a string of compiler "
                      f"options such as \"-DX=1\", got {_kind(options)}")
        if "options" in m:
            self.fail(m.lines["options"], _join(key, "options"), "options are for DSL kernels; a raw OpenCL "
                      "implementation takes compiler options as build_options: \"-cl-fast-relaxed-math\"")
        defines = self.defines(m, key, raw=True)
        return ImplDecl(backend, None, self.string(m, "source", key), function, options, where,
                        Where(m.lines["source"], _join(key, "source")), defines=defines,
                        memory=self.memory(m, key, buffers))


def _join(key: str, k: str) -> str:
    return f"{key}.{k}" if key else k


def _kind(v) -> str:
    if isinstance(v, LDict) or isinstance(v, dict):
        return "a mapping"
    if isinstance(v, (LList, list)):
        return f"a list {list(v)!r}"
    if v is None:
        return "nothing (null)"
    return f"{type(v).__name__} {v!r}"
