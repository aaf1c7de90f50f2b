"""The ``opdsl`` command line: parser assembly and error handling only.

    opdsl demo [--backend NAME ...]          run the built-in kernels everywhere, check them
    opdsl compile FILE.py [--backend B] [--emit] [--dtype x=f32 ...]
                                             build (and print) every @dsl.kernel in FILE.py;
                                             --dtype binds the TypeVars of generic kernels
    opdsl cache info | clear [--backend B]   the on-disk compile cache (clear: only opdsl's own folders)
    opdsl bench MODEL.onnx [--backend B] [--repeat N] [--profile] [--input x=x.npy] [--dim batch=8]
                                             opdsl vs onnxruntime on one model: check, time, profile
    opdsl run MODEL.onnx [--package PKG/ ...] [--input x=x.npy ...] [--random] [--dim batch=8]
              --output-dir OUT/ [--backend B]
                                             run a model, write one .npy per output
    opdsl new-package MODEL.onnx -o PKG/     a package skeleton for the model's custom-domain ops
    opdsl check PKG/                         validate an op package (manifest, paths, kernels) without a model
    opdsl --version

Each subcommand is a module of this package listed in ``COMMANDS``; it exposes
``register(subparsers)`` (its parser, with an example in the epilog, and
``set_defaults(func=run)``) and ``run(args) -> int`` (the exit code).

Only implemented commands exist.  User mistakes (a kernel that does not compile, a
missing file) print the message alone and exit 1: a traceback there would show
opdsl's frames, not the user's problem.
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
COMMANDS = ("demo", "compile", "cache", "bench", "run", "new_package", "check")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="opdsl", description="opdsl: a JIT-compiled operator DSL for Python.",
                                epilog="Run `opdsl COMMAND --help` for a command's options and an example.")
    p.add_argument("--version", action="version", version=f"opdsl {dsl.__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"dsl.cli.{name}").register(sub)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
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
