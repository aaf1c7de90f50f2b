"""The ``opdsl`` command line: parser assembly and error handling only.

    opdsl demo [--backend NAME ...]          run the built-in kernels everywhere, check them
    opdsl compile FILE.py [--backend B] [--emit] [--dtype x=f32 ...]
                                             build (and print) every @dsl.kernel in FILE.py;
                                             --dtype binds the TypeVars of generic kernels
    opdsl compile MODEL.onnx -o MODEL.opdsl [--backend B] [--package PKG/ ...]
                                             compile a model ahead of time: one file that
                                             dsl.load_model / opdsl run open without compiling
    opdsl cache info | clear [--backend B]   the on-disk compile cache (clear: only opdsl's own folders)
    opdsl bench MODEL.onnx [--backend B] [--repeat N] [--profile] [--input x=x.npy] [--dim batch=8]
                                             opdsl vs onnxruntime on one model: check, time, profile
    opdsl run MODEL.onnx|MODEL.opdsl [--package PKG/ | PKG/opdsl-package.yaml ...] [--input x=x.npy ...] [--random] [--dim batch=8]
              --output-dir OUT/ [--backend B]
                                             run a model, write one .npy per output
    opdsl new-package MODEL.onnx -o PKG/     a package skeleton for the model's custom-domain ops
    opdsl check PKG/                         validate an op package (manifest, paths, kernels) without a model
    opdsl --version

Each subcommand is a module of this package listed in ``COMMANDS``; it exposes
``register(subparsers)`` (its parser, with an example in the epilog, and
``set_defaults(func=run)``) and ``run(args) -> int`` (the exit code).

Only implemented commands exist.  User mistakes (a kernel that does not compile, a
missing file, a package kernel that raises) print ``opdsl: error: ...`` and exit 2: a
traceback there would show opdsl's frames, not the user's problem (``--debug`` shows it).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Optional, Sequence

import dsl
from dsl.cli.errors import UserError
from dsl.lang.errors import CompileError, LaunchError

__all__ = ["COMMANDS", "UserError", "main", "parser"]

# Subcommand modules (dsl/cli/<name>.py), in the order `opdsl --help` lists them.
USER_ERROR = 2  # the exit code of every user error, as argparse gives for a bad argument

COMMANDS = ("demo", "compile", "cache", "bench", "run", "new_package", "check")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="opdsl", description="opdsl: a JIT-compiled operator DSL for Python.",
                                epilog="Run `opdsl COMMAND --help` for a command's options and an example.")
    p.add_argument("--version", action="version", version=f"opdsl {dsl.__version__}")
    p.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"dsl.cli.{name}").register(sub)
    for command in sub.choices.values():  # `opdsl run ... --debug` works as well as `opdsl --debug run`
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help="show the Python traceback of an error")
    return p


def error_message(e: BaseException) -> str:
    """What ``opdsl: error:`` says about ``e``: the message alone for the errors that name the
    user's problem, the exception's type too for anything else (a kernel or hook that raised)."""
    from dsl.onnx.load import OnnxImportError
    from dsl.opgraph.spec import VerifyError
    from dsl.package import PackageError
    from dsl.opgraph.artifact_format import ArtifactError
    if isinstance(e, (UserError, ArtifactError, LaunchError, CompileError, PackageError, OnnxImportError, VerifyError)):
        return str(e)
    return f"{type(e).__name__}: {e} (run with --debug for the traceback)"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one command -> its exit code: 2 for every user error (argparse's code too), which
    prints ``opdsl: error: ...`` alone; ``--debug`` lets the traceback through instead."""
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("opdsl: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `opdsl compile ... --emit | head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:
        if getattr(args, "debug", False):
            raise
        print(f"opdsl: error: {error_message(e)}", file=sys.stderr)
        return USER_ERROR


if __name__ == "__main__":
    sys.exit(main())
