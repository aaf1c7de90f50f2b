"""``opdsl check PKG``: validate an op package (manifest, paths, modules, kernel parameters)
without running a model, and list its ops.  A problem prints the package error alone
(``opdsl: error: <manifest>:<line>: <key>: ...``) and exits 2, as every CLI user error."""
from __future__ import annotations

import os
import sys
from typing import TextIO


def register(subparsers) -> None:
    import argparse
    p = subparsers.add_parser(
        "check", help="validate an op package folder without running a model",
        description="Validate an op package: the opdsl-package.yaml schema, that every file it names stays "
                    "inside the folder, that its modules import and that each kernel takes the declared "
                    "inputs, outputs, scratch and params. Lists the ops; errors exit 2.",
        epilog="example:\n  opdsl check examples/qaic_package\n  opdsl check my_ops/opdsl-package.yaml",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("package", help="a package folder (or its opdsl-package.yaml)")
    p.set_defaults(func=run)


def run(args, out: TextIO = None) -> int:
    from dsl.package import PackageError, check_package
    out = out or sys.stdout
    try:
        pkg = check_package(args.package)
    except PackageError as e:
        print(f"opdsl: error: {e}", file=sys.stderr)
        return 2
    print(f"{pkg.name} (format {pkg.version}) at {shown_path(pkg.path)}: {len(pkg.ops)} op(s) OK", file=out)
    for cls in pkg.ops:
        print(describe_op(cls), file=out)
    return 0


def shown_path(path) -> str:
    """``path`` relative to the working directory when it lies inside it (as linters print
    paths: what the user typed, not where the machine keeps it), else absolute."""
    rel = os.path.relpath(path)
    return str(path) if rel == ".." or rel.startswith(".." + os.sep) else rel


def describe_op(cls) -> str:
    """A few lines per op: its registration, inputs, outputs, params and implementations."""
    d = cls._decl
    lines = [f"  {d.domain or 'ai.onnx'}::{d.type} opsets [{d.since}, {d.until if d.until else '...'}]"]
    ins = []
    for i in d.inputs:
        notes = [n for n in ("|".join(i.dtypes) if i.dtypes else "",
                             f"rank <= {i.max_rank}" if i.max_rank is not None else "",
                             "constant" if i.constant else "") if n]
        ins.append(i.name + (f" ({', '.join(notes)})" if notes else ""))
    lines.append(f"    inputs:  {', '.join(ins) or 'none'}")
    outs = [o.name + (f" like {o.like}" if o.like else " (infer)") for o in d.outputs]
    lines.append(f"    outputs: {', '.join(outs)}")
    if d.params:
        ps = []
        for p in d.params:
            t = p.dtype + (f"[{p.size}]" if p.size else "")
            src = f" from {'.'.join(p.source)}" if p.source else ""
            dflt = "" if p.required else f" = {p.default!r}"
            ps.append(f"{p.name}: {t}{src}{dflt}")
        lines.append(f"    params:  {', '.join(ps)}")
    if d.scratch:
        shown = [f"{s.name} ({s.dtype}{list(s.shape)}, {s.bytes} bytes)" if s.typed else f"{s.name} ({s.bytes} bytes)"
                 for s in d.scratch]
        lines.append(f"    scratch: {', '.join(shown)}")
    if cls._hooks:
        lines.append(f"    hooks:   {', '.join(cls._hooks)} ({d.functions})")
    impls = [f"{i.backend} {i.name}" + (" (raw OpenCL)" if i.source else "")
             + "".join(f" {k}={v}" for k, v in i.defines)
             + (f" options {dict(i.options)}" if i.options else "")
             + (f" memory {dict(i.memory)} (ignored on these targets)" if i.memory else "")
             for i in d.implementations]
    lines.append(f"    implementations: {', '.join(impls)}")
    return "\n".join(lines)
