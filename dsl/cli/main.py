"""The ``opdsl`` command line.

    opdsl demo [--backend NAME ...]          run the built-in kernels everywhere, check them
    opdsl compile FILE.py --backend B --emit build (and print) every @dsl.kernel in FILE.py
    opdsl cache info | clear [--backend B]   the on-disk compile cache (clear: only opdsl's own folders)
    opdsl bench MODEL.onnx [--backend B] [--repeat N] [--profile] [--input x=x.npy] [--dim batch=8]
                                             opdsl vs onnxruntime on one model: check, time, profile

Only implemented commands exist.  User mistakes (a kernel that does not
compile, a missing file) print the message alone and exit 1: a traceback there
would show opdsl's frames, not the user's problem.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import traceback
from pathlib import Path
from typing import List, Optional, Sequence

import dsl
from dsl.lang.errors import CompileError, LaunchError


class UserError(Exception):
    """A problem the user can fix; printed without a traceback."""


def _backend_names() -> List[str]:
    from backends import base
    return base.names()


# --------------------------------------------------------------------------- demo

def cmd_demo(args) -> int:
    from dsl.cli import demo
    return 1 if demo.run(args.backend or None) else 0


# --------------------------------------------------------------------------- compile

def load_module(path: str):
    """Import ``path`` as a module (its folder first on sys.path, as ``python FILE`` would)."""
    file = Path(path).resolve()
    if not file.is_file():
        raise UserError(f"no such file: {path}")
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


def cmd_compile(args) -> int:
    module = load_module(args.file)
    kernels = kernels_in(module)
    if args.kernel:
        kernels = [k for k in kernels if k.__name__ in args.kernel]
        missing = set(args.kernel) - {k.__name__ for k in kernels}
        if missing:
            raise UserError(f"{args.file}: no @dsl.kernel named {', '.join(sorted(missing))}")
    if not kernels:
        raise UserError(f"{args.file} defines no @dsl.kernel function")
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
            text = k.source(args.backend)  # the specialization the annotations give
            if not args.emit:
                _build(k, args.backend)
        except (CompileError, TypeError, ValueError) as e:
            failed += 1
            print(f"{k.__name__}: {e}" if not isinstance(e, CompileError) else str(e), file=sys.stderr)
            continue
        if args.emit:
            print(f"# ---- {k.__name__} ({args.backend})")
            print(text.rstrip("\n"))
        else:
            print(f"{k.__name__}: compiled for {args.backend}")
    return 1 if failed else 0


def _build(k, backend: str) -> None:
    """Compile the annotation-given specialization (fills the disk cache for compiled backends)."""
    if backend == "ir":
        return
    from backends import base
    values, key = k.example_args()
    base.get(backend).compile(k.request(backend, key, values))


# --------------------------------------------------------------------------- cache

def _cache_backends() -> List[str]:
    try:
        from backends import cache
    except ImportError:
        return []
    return list(cache.FOLDERS)


def cmd_cache(args) -> int:
    try:
        from backends import cache
    except ImportError as e:
        raise UserError(f"the compile cache is not available in this install ({e})") from None
    if args.action == "info":
        print(cache.format_info(cache.info()))
        return 0
    try:
        removed = cache.clear(args.backend)
    except cache.NotACache as e:
        raise UserError(str(e)) from None
    print(f"removed {removed['files']} file(s), {removed['bytes']} bytes from {cache.cache_root()}"
          + (f" ({args.backend})" if args.backend else ""))
    for folder in removed["skipped"]:
        print(f"left alone: {folder} (a symlink or not yours)", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- bench

def cmd_bench(args) -> int:
    from dsl.cli import bench
    try:
        return bench.run(args)
    except bench.BenchError as e:
        raise UserError(str(e)) from None


# --------------------------------------------------------------------------- entry point

def parser() -> argparse.ArgumentParser:
    backends = _backend_names()
    p = argparse.ArgumentParser(prog="opdsl", description="opdsl: a JIT-compiled operator DSL for Python.")
    p.add_argument("--version", action="version", version=f"opdsl {dsl.__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    d = sub.add_parser("demo", help="run built-in kernels on every available backend and check them against numpy")
    d.add_argument("--backend", action="append", choices=backends,
                   help="only this backend (repeatable; default: all)")
    d.set_defaults(run=cmd_demo)

    c = sub.add_parser("compile", help="compile the @dsl.kernel functions of a Python file")
    c.add_argument("file", help="a .py file defining @dsl.kernel functions")
    c.add_argument("--backend", default="numba", choices=backends + ["ir"],
                   help="target (default numba); 'ir' prints the typed IR")
    c.add_argument("--emit", action="store_true", help="print the generated source of each kernel")
    c.add_argument("--kernel", action="append", help="only the kernel with this name (repeatable)")
    c.set_defaults(run=cmd_compile)

    k = sub.add_parser("cache", help="inspect or clear the on-disk compile cache")
    k.add_argument("action", choices=("info", "clear"))
    k.add_argument("--backend", choices=_cache_backends(), help="clear only this backend's entries")
    k.set_defaults(run=cmd_cache)

    from dsl.cli import bench
    bench.add_parser(sub, backends)
    sub.choices["bench"].set_defaults(run=cmd_bench)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except CompileError as e:
        print(str(e), file=sys.stderr)
    except (UserError, LaunchError) as e:
        print(f"opdsl: error: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        print("opdsl: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `opdsl compile ... --emit | head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
