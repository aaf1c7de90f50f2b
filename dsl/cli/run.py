"""``opdsl run model.onnx --input x=x.npy --output-dir out/``: run a model, one .npy per output.

The qaic-exec style of running a model: inputs from .npy files (or seeded random data with
``--random``), custom ops from package folders (``--package``, handed to
``dsl.load_onnx(..., packages=[...])``), every output written as ``<output-dir>/<name>.npy``
with the name made safe for a file name.
"""
from __future__ import annotations

import argparse
import re
from typing import Dict, List

import numpy as np

from dsl.cli.errors import UserError, require_file, require_folder_or_nothing, require_packages
from dsl.cli.feeds import make_feeds, parse_pairs

EXAMPLE = """examples:
  opdsl run model.onnx --package my_ops/ --input x=x.npy --output-dir out/
  opdsl run model.onnx --random --dim batch=4 --output-dir out/ --backend interpreter
  opdsl run model.opdsl --input x=x.npy --output-dir out/    # compiled ahead of time: no compile"""


def register(sub) -> None:
    from backends import base
    r = sub.add_parser("run", help="run an ONNX model on .npy inputs and write one .npy per output",
                       description="Run an ONNX model with opdsl and write each output to DIR/<name>.npy.\n"
                                   "Every model input needs --input NAME=FILE.npy unless --random is given.",
                       epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("model", help="an .onnx file, or an .opdsl artifact (opdsl compile MODEL.onnx -o MODEL.opdsl)")
    r.add_argument("--package", action="append", metavar="PKG", default=[],
                   help="an op package folder, or its opdsl-package.yaml, defining custom ops (repeatable)")
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                   help="feed this model input from a .npy file (repeatable)")
    r.add_argument("--output-dir", required=True, metavar="DIR", help="folder for the outputs (created if missing)")
    r.add_argument("--backend", default="numba", choices=base.names(),
                   help="opdsl backend (default numba; an .opdsl artifact runs on the one it was compiled for)")
    r.add_argument("--random", action="store_true",
                   help="feed inputs without --input with seeded random data (dtype and shape from the model)")
    r.add_argument("--dim", action="append", metavar="NAME=SIZE",
                   help="size of a symbolic dimension of a random input (repeatable; required for each)")
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs (an integer >= 0, default 0)")
    r.set_defaults(func=run)


def file_names(outputs: List[str]) -> Dict[str, str]:
    """Output name -> a distinct safe file name: characters other than letters, digits, '-',
    '_' and '.' become '_', no leading dot, and a clash gets a numeric suffix."""
    names: Dict[str, str] = {}
    taken = set()
    for out in outputs:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", out).lstrip(".") or "output"
        name, n = base, 1
        while name.lower() in taken:  # case-insensitive file systems
            n += 1
            name = f"{base}_{n}"
        taken.add(name.lower())
        names[out] = name + ".npy"
    return names


def run(args) -> int:
    import onnx

    path = require_file(args.model)
    packages = require_packages(args.package)
    out_dir = require_folder_or_nothing(args.output_dir, "--output-dir", writable=True)
    artifact = path.endswith(".opdsl")
    if artifact:  # compiled ahead of time (opdsl compile MODEL.onnx -o MODEL.opdsl): its own backend
        model = load_artifact(path, packages)
        inputs = artifact_inputs(model)
    else:
        try:
            inputs = onnx.load(path, load_external_data=False)
        except Exception as e:
            raise UserError(f"{path} is not a readable ONNX model: {type(e).__name__}: {e}") from None
    feeds, notes = make_feeds(inputs, parse_pairs(args.input, "--input"), parse_pairs(args.dim, "--dim"),
                              args.seed, random=args.random, default_dim=None)
    for n in notes:
        print(f"input: {n}")
    if not artifact:
        model = load_model(path, packages, args.backend)
    try:
        got = model.run(feeds)
    except (TypeError, ValueError) as e:  # feeds the model rejects (shape, rank)
        raise UserError(f"running {path}: {e}") from None
    except Exception as e:  # a package's kernel or hook that raised (a stub, a bug in it)
        raise UserError(f"running {path}: {type(e).__name__}: {e}") from e
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, file in file_names(list(got)).items():
            a = np.asarray(got[name])
            np.save(out_dir / file, a)
            print(f"output: {name} {a.dtype}{list(a.shape)} -> {out_dir / file}")
    except OSError as e:
        raise UserError(f"--output-dir {out_dir}: cannot write the outputs ({e.strerror or e}); give a folder "
                        "you can write") from None
    return 0


def load_artifact(path: str, packages):
    """``dsl.load_model`` of an ``.opdsl`` file, its refusals said as user errors."""
    import dsl
    try:
        return dsl.load_model(path, packages=packages)
    except dsl.ArtifactError as e:
        raise UserError(str(e)) from None


def artifact_inputs(model) -> list:
    """(name, numpy dtype, dims with symbolic names) of a loaded model's inputs, as ``make_feeds`` takes them."""
    out = []
    for t in model.graph.inputs:
        names = getattr(t, "dim_names", None) or (None,) * len(t.spec.shape)
        dims = tuple(d if d is not None else names[k] for k, d in enumerate(t.spec.shape))
        out.append((t.name, np.dtype(t.spec.dtype.np), dims))
    return out


def load_model(path: str, packages, backend: str):
    """``dsl.load_onnx`` with every way it can fail said as a user error (``run`` and ``bench``):
    a missing op names ``--package``, a package error its manifest line, a package hook that
    raised (a stub ``infer``) the exception."""
    import dsl
    from dsl.cli.errors import missing_op_hint
    from dsl.onnx.load import OnnxImportError
    from dsl.package import PackageError
    try:
        return dsl.load_onnx(path, packages=packages, backend=backend)
    except OnnxImportError as e:
        raise UserError(f"opdsl cannot load {path}: {missing_op_hint(str(e))}") from None
    except PackageError as e:  # "<manifest>:<line>: ..." already says where
        raise UserError(str(e)) from None
    except Exception as e:
        raise UserError(f"opdsl cannot load {path}: {type(e).__name__}: {e}") from e
