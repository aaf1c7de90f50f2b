"""A per-node tensor trace of one ``Model.run``: ``model.run(feeds, trace=callback_or_folder)``.

What PPL.NN and TIM-VX users do to find the first layer where two runs differ (two backends,
a package kernel against its reference, before and after a change): record every node's
inputs, outputs and params in execution order, then compare the records.  A traced run goes
node by node (the path shapes known only at run time take), so a run without ``trace`` pays
nothing.  Tensors are given in the plain layout (an NCHWc16 tensor is converted back), as
copies the callback may keep.

A folder gets one ``NNNN_<node>.npz`` per node (arrays ``in.<name>`` and ``out.<name>``) and
``trace.json`` listing the nodes in order with op type, domain, params and tensor names;
``load_trace(folder)`` reads it back and ``first_difference(a, b)`` finds the first node whose
outputs differ.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from dsl.opgraph import formats as F

INDEX = "trace.json"


@dataclass
class NodeTrace:
    """One node of a traced run: its place in the run, what it is, and its tensors by name."""

    index: int
    name: str
    op_type: str
    domain: str
    params: Dict[str, Any]
    inputs: Dict[str, Optional[np.ndarray]] = field(default_factory=dict)
    outputs: Dict[str, np.ndarray] = field(default_factory=dict)

    def __repr__(self) -> str:
        def shapes(d):
            return ", ".join(f"{k}{list(v.shape) if isinstance(v, np.ndarray) else ''}" for k, v in d.items())
        return (f"<node {self.index} {self.name!r} {self.domain or 'ai.onnx'}::{self.op_type}: "
                f"({shapes(self.inputs)}) -> ({shapes(self.outputs)})>")


@dataclass
class Difference:
    """The first node whose outputs differ between two traces (``first_difference``)."""

    index: int
    node: str
    op_type: str
    output: str
    max_abs_diff: float
    reason: str

    def __str__(self) -> str:
        return (f"node {self.index} {self.node!r} ({self.op_type}) output {self.output!r}: {self.reason}")


def traced_run(model, arrays: Sequence[np.ndarray], trace) -> Dict[str, np.ndarray]:
    """``model.run`` giving each node's NodeTrace to ``trace`` (a callable, or a folder path)."""
    sink = _sink(trace)
    state: Dict[str, Any] = {"node": None, "inputs": None, "count": 0}

    def on_node(n, values):  # before each node (its inputs are ready), and once at the end
        prev = state["node"]
        if prev is not None:
            sink(NodeTrace(state["count"], prev.name, _op_type(prev.op), getattr(prev.op, "domain", ""),
                           _params(prev.op), state["inputs"],
                           {t.name: _plain(t, values.get(t.name)) for t in prev.outputs}))
            state["count"] += 1
        state["node"] = n
        if n is not None:
            state["inputs"] = {t.name: _plain(t, values.get(t.name)) for t in n.inputs if t is not None}
    result = model._run_by_node(list(arrays), on_node=on_node)
    close = getattr(sink, "close", None)
    if close is not None:
        close()
    return result


def _sink(trace) -> Callable[[NodeTrace], None]:
    if callable(trace):
        return trace
    if isinstance(trace, (str, os.PathLike)):
        return _FolderSink(Path(trace))
    raise TypeError(f"trace: expected a callable taking a dsl.opgraph.trace.NodeTrace or a folder path (str or "
                    f"Path), got {type(trace).__name__} {trace!r}")


class _FolderSink:
    """Writes each node as it comes (a run that fails half way leaves the nodes before it)."""

    def __init__(self, folder: Path):
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"trace: {folder} exists and is not a folder; give a folder (created if missing)")
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.index = folder, []

    def __call__(self, rec: NodeTrace) -> None:
        file = f"{rec.index:04d}_{re.sub(r'[^A-Za-z0-9_.-]', '_', rec.name)[:80] or 'node'}.npz"
        arrays = {f"in.{k}": v for k, v in rec.inputs.items() if isinstance(v, np.ndarray)}
        arrays.update({f"out.{k}": v for k, v in rec.outputs.items() if isinstance(v, np.ndarray)})
        np.savez(self.folder / file, **arrays)
        self.index.append({"index": rec.index, "name": rec.name, "op_type": rec.op_type, "domain": rec.domain,
                           "params": _jsonable(rec.params), "inputs": list(rec.inputs),
                           "outputs": list(rec.outputs), "file": file})
        self._write_index()

    def _write_index(self) -> None:
        tmp = self.folder / (INDEX + ".tmp")
        tmp.write_text(json.dumps({"nodes": self.index}, indent=1))
        os.replace(tmp, self.folder / INDEX)

    def close(self) -> None:
        self._write_index()


def load_trace(folder: Union[str, os.PathLike]) -> List[NodeTrace]:
    """The NodeTraces a ``trace=folder`` run wrote, in order."""
    folder = Path(folder)
    index = folder / INDEX
    if not index.is_file():
        raise ValueError(f"{folder}: no {INDEX}; a trace folder is what model.run(feeds, trace=folder) writes")
    out = []
    for entry in json.loads(index.read_text())["nodes"]:
        with np.load(folder / entry["file"], allow_pickle=False) as z:
            ins = {k: (z[f"in.{k}"] if f"in.{k}" in z.files else None) for k in entry["inputs"]}
            outs = {k: (z[f"out.{k}"] if f"out.{k}" in z.files else None) for k in entry["outputs"]}
        out.append(NodeTrace(entry["index"], entry["name"], entry["op_type"], entry["domain"], entry["params"],
                             ins, outs))
    return out


def first_difference(a, b, rtol: float = 1e-5, atol: float = 1e-6) -> Optional[Difference]:
    """The first node (in run order) whose outputs differ between traces ``a`` and ``b`` (lists of
    NodeTrace, or trace folders); None when every output agrees.  Nodes are matched by name,
    so two models compiled alike (same backend options, fusion) compare node for node."""
    a = load_trace(a) if isinstance(a, (str, os.PathLike)) else list(a)
    b = {r.name: r for r in (load_trace(b) if isinstance(b, (str, os.PathLike)) else b)}
    for rec in a:
        other = b.get(rec.name)
        if other is None:
            return Difference(rec.index, rec.name, rec.op_type, "", float("nan"), "the other trace has no such node")
        for name, x in rec.outputs.items():
            y = other.outputs.get(name)
            if x is None or y is None:
                continue
            if x.shape != y.shape or x.dtype != y.dtype:
                return Difference(rec.index, rec.name, rec.op_type, name, float("nan"),
                                  f"{x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}")
            if x.size and not np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True):
                diff = float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64))))
                return Difference(rec.index, rec.name, rec.op_type, name, diff,
                                  f"max abs diff {diff:.6g} (rtol {rtol}, atol {atol})")
    return None


def _plain(t, value):
    """A copy of ``value`` in the plain layout (None and host values as they are)."""
    if not isinstance(value, np.ndarray):
        return value
    spec = getattr(t, "spec", None)
    if spec is not None and spec.format == "nchwc16" and value.ndim == 5:
        channels = spec.shape[1] if isinstance(spec.shape[1], int) else value.shape[1] * value.shape[4]
        return F.to_plain_ref(value, channels)
    return np.array(value, copy=True)


def _params(op) -> Dict[str, Any]:
    try:
        return dict(op.params)
    except Exception:
        return {}


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return repr(v)


def _op_type(op) -> str:
    return getattr(op, "op_type", None) or type(op).__name__
