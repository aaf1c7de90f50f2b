"""Concat without copies: producers write straight into their slice of the Concat's output.

squeezenet's fire modules end in Concat(expand1x1, expand3x3): unplanned, both convolutions
store their results and the Concat reads and writes all of it again (11 % of the model).  When
the slice a producer's output takes in the Concat's output is one contiguous block -- every axis
before the concat axis has size 1 in the stored (physical) shape, e.g. NCHW channels at batch 1
-- the memory plan makes that output a view of the Concat's buffer (memory.py's ``views``), the
producer writes there as into any contiguous array, and the Concat node runs nothing.

An op says it is such a join with ``concat_axis(*input_specs) -> axis`` (ops/slicing.py's
Concat); this layer knows no op.  An input is placed only when it is made by a node (not a
constant or graph input), is read by that Concat alone and once, is not a graph output, has the
Concat's format and dtype, is not empty, and its producer is not itself a placed Concat; every
input must qualify (then the Concat has nothing left to copy).  The Concat's output must not be
a graph output (those are fresh arrays per run).  nchwc16 tensors
qualify along the channel axis when every input's channels are a multiple of 16 (whole blocks).
"""
from __future__ import annotations

from typing import Dict, Sequence, Tuple

import numpy as np

from dsl.opgraph.formats import BLOCK


def concat_views(nodes: Sequence, layout: Dict[str, Tuple[tuple, np.dtype]], specs: Dict,
                 outputs: Sequence) -> Dict[str, Tuple[str, int]]:
    """{input tensor name: (Concat output name, byte offset)} for every input placed in its
    Concat's output.  ``layout``: tensor name -> (physical shape, dtype) for this plan's shapes;
    ``specs``: tensor name -> TensorSpec (formats)."""
    out_ids = {id(t) for t in outputs}
    reads: Dict[int, int] = {}
    for n in nodes:
        for t in n.inputs:
            if t is not None:
                reads[id(t)] = reads.get(id(t), 0) + 1
    views: Dict[str, Tuple[str, int]] = {}
    joins = set()
    for n in nodes:
        placed = _placements(n, layout, specs, out_ids, reads, joins)
        if placed:
            views.update(placed)
            joins.add(id(n))
    return views


def _placements(n, layout, specs, out_ids, reads, joins) -> Dict[str, Tuple[str, int]]:
    hook = getattr(n.op, "concat_axis", None)
    if hook is None or len(n.outputs) != 1 or id(n.outputs[0]) in out_ids:
        return {}
    y = n.outputs[0]
    ins = list(n.inputs)
    if not ins or any(t is None for t in ins):
        return {}
    axis = hook(*(specs[t.name] for t in ins))
    fmt = specs[y.name].format
    shape, dtype = layout[y.name]
    if fmt == "nchwc16":
        if axis != 1 or any(specs[t.name].shape[1] % BLOCK for t in ins):
            return {}
    elif fmt != "plain":
        return {}
    if int(np.prod(shape[:axis], dtype=np.int64)) != 1:
        return {}  # a slice along the axis is strided: producers write contiguous arrays
    placed: Dict[str, Tuple[str, int]] = {}
    offset = 0
    for t in ins:
        t_shape, t_dtype = layout[t.name]
        nbytes = int(np.prod(t_shape, dtype=np.int64)) * t_dtype.itemsize
        if not (t.kind == "node" and id(t) not in out_ids and reads.get(id(t)) == 1 and t_dtype == dtype
                and specs[t.name].format == fmt and nbytes > 0 and id(t.producer) not in joins):
            return {}  # all or nothing: the Concat then runs no launch at all
        placed[t.name] = (y.name, offset)
        offset += nbytes
    return placed
