"""``Graph.compile``: the pipeline from a user's graph to a runnable ``dsl.Model`` -- the
passes of passes.py in order (with fusion.py's rewrites after folding), then the model,
which plans memory per set of shapes (Concat inputs in place unless ``fuse=False``,
concat_inplace.py).  Control-flow bodies compile with the same options (body.py).
"""
from __future__ import annotations

from typing import Optional

from backends import base, compile_batch
from dsl import config
from dsl.opgraph import fusion, graph, passes
from dsl.opgraph.body import configure_bodies
from dsl.opgraph.limits import tensor_limit
from dsl.opgraph.model import Model
from dsl.opgraph.tiling import resolve as resolve_tiling


INT8_ARITHMETIC = ("exact", "saturating")


def set_int8_arithmetic(g, arithmetic: str) -> int:
    """Hand ``arithmetic`` to every node whose op takes an ``int8_arithmetic`` param (the int8
    convolutions, ops/quant_conv.py, and GEMMs, ops/quant_matmul.py); -> how many nodes changed.  After fusion, so fused nodes
    get it too."""
    changed = 0
    for n in g.nodes:
        if "int8_arithmetic" in type(n.op).param_table() and n.op.int8_arithmetic != arithmetic:
            n.op = n.op.replace(int8_arithmetic=arithmetic)
            changed += 1
    return changed


def compile_graph(graph, backend: Optional[str] = None, formats: str = "auto", fold: bool = True,
                  max_tensor_bytes: Optional[int] = None, fuse: Optional[bool] = None, tiling=None,
                  int8_arithmetic: str = "exact"):
    limit = tensor_limit(max_tensor_bytes)
    if int8_arithmetic not in INT8_ARITHMETIC:
        raise ValueError(f"Graph.compile(int8_arithmetic={int8_arithmetic!r}): accepted "
                         f"{' or '.join(map(repr, INT8_ARITHMETIC))}")
    resolve_tiling(tiling)  # a bad value fails here, before any work
    if formats not in ("auto", "plain"):
        raise ValueError(f"Graph.compile(formats={formats!r}): accepted 'auto' or 'plain'")
    if not graph.outputs:
        raise ValueError(f"graph {graph.name!r} has no outputs: call graph.output(tensor, name) first")
    backend = backend or config.default_backend()
    base.get(backend)  # unknown backend names fail here, before any work
    g = passes.inline(graph)
    fusing = config.fusion_enabled() if fuse is None else fuse
    configure_bodies(g, fuse=fusing, formats=formats, tiling=tiling, max_tensor_bytes=max_tensor_bytes,
                     int8_arithmetic=int8_arithmetic)
    early = fusion.fuse(g, before_fold=True) if fusing else 0  # e.g. QDQ -> QLinearMatMul
    # one compile batch from folding to the plan: launches made meanwhile are one-shot (a folded
    # constant, a packed weight) and the backend compiles no more than they need for it
    with compile_batch.batch():
        stats = {"folded": passes.infer_and_fold(g, backend, fold, limit)}
        stats["fused"] = early + (fusion.fuse(g) if fusing else 0)
        stats["removed"] = passes.remove_dead(g)
        stats["reorders"] = passes.assign_formats(g) if formats == "auto" else 0
        set_int8_arithmetic(g, int8_arithmetic)
        impls = passes.select_kernels(g, backend)
        return Model(g, backend, impls, stats, max_tensor_bytes=limit, tiling=tiling, concat_inplace=fusing)


graph.install("compile", compile_graph)
