"""``opdsl compile FILE.py``: build (or print the generated code of) every @dsl.kernel in a file.
``opdsl compile MODEL.onnx -o MODEL.opdsl`` compiles a model ahead of time instead (model_compile.py).

A kernel is compiled for the specialization its annotations give.  Generic kernels (a
``dsl.TypeVar`` or a bare ``In``/``Out`` as a dtype) have no such specialization, so
``--dtype x=f32`` names the dtype of parameter ``x`` and thereby binds its TypeVar for every
parameter that shares it; unranked tensors are taken as 1-D.
"""
from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

import dsl
from dsl.cli.errors import UserError, require_file
from dsl.lang import types as T
from dsl.lang.errors import CompileError

_EMPTY = inspect.Parameter.empty

EXAMPLE = """examples:
  opdsl compile kernels.py --backend opencl --emit
  opdsl compile kernels.py --kernel scale --dtype x=f32      # a generic kernel, T bound by x
  opdsl compile model.onnx -o model.opdsl                    # a model, ahead of time (docs/onnx.md)"""


def register(sub) -> None:
    from backends import base
    c = sub.add_parser("compile", help="compile the @dsl.kernel functions of a Python file",
                       description="Compile every @dsl.kernel of a Python file (or print its generated\n"
                                   "code with --emit), filling the compile cache. Generic kernels get their\n"
                                   "TypeVars bound from --dtype.",
                       epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("file", help="a .py file defining @dsl.kernel functions, or an .onnx model (with -o)")
    c.add_argument("--backend", default="numba", choices=base.names() + ["ir"],
                   help="target (default numba); 'ir' prints the typed IR")
    c.add_argument("--emit", action="store_true", help="print the generated source of each kernel")
    c.add_argument("--kernel", action="append", help="only the kernel with this name (repeatable)")
    c.add_argument("--dtype", action="append", metavar="PARAM=DTYPE",
                   help="dtype of a generic parameter, which binds its TypeVar (repeatable), e.g. x=f32")
    c.add_argument("-o", "--output", metavar="MODEL.opdsl",
                   help="for an .onnx model: the ahead-of-time artifact to write (graph, plans, machine code)")
    c.add_argument("--package", action="append", metavar="PKG", default=[],
                   help="for an .onnx model: an op package folder defining its custom ops (repeatable)")
    c.set_defaults(func=run)


def load_module(path: str):
    """Import ``path`` as a module (its folder first on sys.path, as ``python FILE`` would)."""
    file = Path(require_file(path)).resolve()
    if file.suffix != ".py":
        raise UserError(f"{path}: expected a Python file (.py) holding @dsl.kernel functions")
    name = "opdsl_user_" + "".join(c if c.isalnum() else "_" for c in file.stem)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(file.parent))
    try:
        spec.loader.exec_module(module)
    except (CompileError, UserError):
        raise
    except SystemExit as e:
        raise UserError(f"{path} called sys.exit({e.code}) while being imported") from None
    except BaseException as e:
        tb = traceback.extract_tb(e.__traceback__)
        user = [f for f in tb if Path(f.filename).resolve() == file] or tb[-1:]
        where = f" (line {user[-1].lineno})" if user else ""
        raise UserError(f"importing {path} failed{where}: {type(e).__name__}: {e}") from None
    return module


def kernels_in(module) -> list:
    """The @dsl.kernel objects defined by ``module`` itself (not ones it imported), in source order."""
    found = [v for v in vars(module).values()
             if isinstance(v, dsl.Kernel) and getattr(v.fn, "__module__", None) == module.__name__]
    return sorted(found, key=lambda k: k.fn.__code__.co_firstlineno)


# --------------------------------------------------------------------------- --dtype

def parse_dtypes(items) -> Dict[str, T.DType]:
    """``["x=f32", ...]`` -> {param name: DType}; UserError naming the accepted dtypes."""
    out: Dict[str, T.DType] = {}
    accepted = ", ".join(t.name if t is not T.bool_ else "bool" for t in T.ALL_DTYPES)
    for item in items or ():
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise UserError(f"--dtype expects PARAM=DTYPE (e.g. x=f32), got {item!r}")
        dt = T.BY_NAME.get(value)
        if dt is None:
            raise UserError(f"--dtype {item}: unknown dtype {value!r}; accepted: {accepted}")
        if name in out and out[name] != dt:
            raise UserError(f"--dtype {name} is given twice ({out[name]} and {dt})")
        out[name] = dt
    return out


def _declared(p):
    """The dtype (DType or TypeVar) a parameter declares."""
    a = p.annotation
    if p.kind == "tensor" or isinstance(a, (T.ConstSpec, T.VecSpec)):
        return a.dtype
    return a


def generic_params(k) -> List[str]:
    return [p.name for p in k.params if isinstance(_declared(p), T.TypeVar)]


def example_args(k, dtypes: Dict[str, T.DType]) -> Tuple[dict, Dict[str, str]]:
    """Arguments picking the specialization of ``k`` that its annotations and ``dtypes`` give
    -> (kwargs for ``k.bind``/``k.source``, {TypeVar or param name: dtype name} for display).

    TypeError naming every parameter whose dtype is still open, and how to bind it."""
    bound: Dict[T.TypeVar, T.DType] = {}
    own: Dict[str, T.DType] = {}  # bare In/Out (T.ANY): each parameter is its own binding
    for p in k.params:
        tv, dt = _declared(p), dtypes.get(p.name)
        if dt is None or not isinstance(tv, T.TypeVar):
            continue
        if tv.allowed and dt not in tv.allowed:
            raise TypeError(f"--dtype {p.name}={dt}: {p.name} has dtype {tv.name}, which accepts "
                            f"{', '.join(map(str, tv.allowed))}")
        if tv is T.ANY:
            own[p.name] = dt
        elif bound.setdefault(tv, dt) != dt:
            other = next(q.name for q in k.params if _declared(q) == tv and dtypes.get(q.name) == bound[tv])
            raise TypeError(f"--dtype {other}={bound[tv]} and --dtype {p.name}={dt} disagree: both are "
                            f"{tv.name} in {k.__name__}")
    args, open_ = {}, []
    for p in k.params:
        decl = _declared(p)
        dt = own.get(p.name) if decl is T.ANY else bound.get(decl) if isinstance(decl, T.TypeVar) else decl
        if p.kind == "tensor":
            if dt is None:
                open_.append(p.name)
                continue
            ndim = p.annotation.ndim if p.annotation.ndim is not None else 1
            args[p.name] = np.zeros((1,) * ndim, dt.np)
        elif p.default is not _EMPTY:
            continue  # the default, converted to the bound dtype by bind()
        else:
            if p.kind == "vec":
                args[p.name] = [0] * p.annotation.length
            elif dt is None:
                open_.append(p.name)
            else:
                args[p.name] = False if dt.is_bool else dt.np.type(0)
    if open_:
        groups: Dict[str, List[str]] = {}
        for p in k.params:
            if p.name in open_:
                tv = _declared(p)
                groups.setdefault(f"{p.name} (bare In/Out)" if tv is T.ANY else tv.name, []).append(p.name)
        text = ", ".join(g if g.endswith(")") else f"{g} (of {', '.join(ps)})" for g, ps in groups.items())
        raise TypeError(f"generic kernel: unbound dtype {text}; bind it with --dtype PARAM=DTYPE, "
                        f"e.g. --dtype {open_[0]}=f32")
    shown = {tv.name: dt.name for tv, dt in bound.items()}
    shown.update({name: dt.name for name, dt in own.items()})
    return args, shown


# --------------------------------------------------------------------------- the command

def run(args) -> int:
    if Path(args.file).suffix.lower() == ".onnx":
        from dsl.cli import model_compile
        return model_compile.run(args)
    if args.output or args.package:
        raise UserError(f"{args.file}: -o and --package are for compiling an .onnx model ahead of time")
    module = load_module(args.file)
    kernels = kernels_in(module)
    if args.kernel:
        kernels = [k for k in kernels if k.__name__ in args.kernel]
        missing = set(args.kernel) - {k.__name__ for k in kernels}
        if missing:
            raise UserError(f"{args.file}: no @dsl.kernel named {', '.join(sorted(missing))}")
    if not kernels:
        raise UserError(f"{args.file} defines no @dsl.kernel function")
    dtypes = parse_dtypes(args.dtype)
    generic = {name for k in kernels for name in generic_params(k)}
    unused = [n for n in dtypes if n not in generic]
    if unused:
        raise UserError(f"--dtype {unused[0]}: no kernel compiled here has a generic (TypeVar) parameter "
                        f"{unused[0]!r}; generic parameters: {', '.join(sorted(generic)) or 'none'}")
    if args.backend != "ir":
        from backends import base
        try:
            reason = base.get(args.backend).available()
        except ImportError as e:
            reason = f"it cannot be imported ({e})"
        if reason:
            raise UserError(f"backend {args.backend!r} is not available here: {reason}")
    failed = 0
    for k in kernels:
        try:
            kwargs, shown = example_args(k, dtypes)
            text = k.source(args.backend, **kwargs)
            if not args.emit:
                _build(k, args.backend, kwargs)
        except (CompileError, TypeError, ValueError) as e:
            failed += 1
            print("opdsl: error: " + (f"{k.__name__}: {e}" if not isinstance(e, CompileError) else str(e)),
                  file=sys.stderr)
            continue
        binding = ", ".join(f"{n}={d}" for n, d in shown.items())
        if args.emit:
            print(f"# ---- {k.__name__} ({args.backend}{', ' + binding if binding else ''})")
            print(text.rstrip("\n"))
        else:
            print(f"{k.__name__}: compiled for {args.backend}" + (f" ({binding})" if binding else ""))
    return 2 if failed else 0  # a kernel that does not compile is a user error (dsl/cli/main.py)


def _build(k, backend: str, kwargs: dict) -> None:
    """Compile one specialization (fills the disk cache for compiled backends)."""
    if backend == "ir":
        return
    from backends import base
    values, key = k.bind((), kwargs)
    base.get(backend).compile(k.request(backend, key, values))
