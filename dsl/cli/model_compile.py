"""``opdsl compile MODEL.onnx -o MODEL.opdsl``: a model compiled ahead of time into one file
(graph, launch plans, weights, its kernels' machine code for this CPU, and the ONNX source),
which ``dsl.load_model`` and ``opdsl run MODEL.opdsl`` open without compiling (docs/onnx.md)."""
from __future__ import annotations

import time
from pathlib import Path

from dsl.cli.errors import UserError, require_file, require_packages


def run(args) -> int:
    from dsl.cli.run import load_model
    from dsl.opgraph.artifact_format import ArtifactError
    path = require_file(args.file)
    if args.backend == "ir" or args.emit or args.kernel or args.dtype:
        raise UserError(f"{path}: --emit, --kernel, --dtype and --backend ir are for kernel files; a model takes "
                        "-o MODEL.opdsl [--backend B] [--package PKG/]")
    if not args.output:
        raise UserError(f"{path}: give the artifact to write with -o, e.g. -o {Path(path).with_suffix('.opdsl').name}")
    out = Path(args.output)
    if out.suffix != ".opdsl":
        raise UserError(f"-o {out}: an artifact's name ends in .opdsl (dsl.load_model and `opdsl run` read it)")
    if not out.parent.is_dir():
        raise UserError(f"-o {out}: the folder {out.parent} does not exist")
    packages = require_packages(args.package)
    start = time.perf_counter()
    model = load_model(path, packages, args.backend)
    try:
        model.save(out, source=path, options={"backend": args.backend}, packages=packages)
    except ArtifactError as e:
        raise UserError(f"cannot write {out}: {e}") from None
    except OSError as e:
        raise UserError(f"-o {out}: cannot write it ({e.strerror or e})") from None
    print(f"{out}: {out.stat().st_size} bytes, {len(model.graph.nodes)} nodes, backend {args.backend}, "
          f"{time.perf_counter() - start:.1f} s")
    return 0
