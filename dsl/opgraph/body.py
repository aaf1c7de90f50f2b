"""``Body``: a graph-valued op param (the body of ONNX If, Loop and Scan).

A control-flow op runs another graph, maybe many times.  The body is an ordinary
``dsl.Graph`` whose inputs are the op's *formal* body inputs (Loop's iteration number,
condition and carried values; Scan's states and slices) followed by the values it
*captures* from enclosing graphs (ONNX lets a body read outer names): the importer turns
those into extra inputs of the control-flow node, so the node's inputs say everything it
depends on and the body stays self-contained.  The body is compiled once per backend, on
first use, to a ``dsl.Model`` that each iteration runs.
"""
from __future__ import annotations

import threading
from typing import Dict, List, Sequence

import numpy as np

from dsl.opgraph.spec import TensorSpec


class Body:
    """``graph`` with ``n_formal`` formal inputs, then captured ones.  Compared by identity:
    two bodies are the same param only when they are the same object."""

    def __init__(self, graph, n_formal: int, name: str = ""):
        if not 0 <= n_formal <= len(graph.inputs):
            raise ValueError(f"body {name or graph.name!r}: {n_formal} formal inputs, but the graph has only "
                             f"{len(graph.inputs)} inputs")
        self.graph, self.n_formal, self.name = graph, int(n_formal), name or graph.name
        self._models: Dict[str, object] = {}
        self._lock = threading.Lock()

    @property
    def n_captures(self) -> int:
        return len(self.graph.inputs) - self.n_formal

    @property
    def formal_specs(self) -> List[TensorSpec]:
        return [t.spec for t in self.graph.inputs[:self.n_formal]]

    @property
    def output_specs(self) -> List[TensorSpec]:
        return [t.spec for t in self.graph.outputs]

    def model(self, backend: str):
        """The body compiled for ``backend`` (once; later calls share it)."""
        m = self._models.get(backend)
        if m is None:
            with self._lock:
                m = self._models.get(backend)
                if m is None:
                    m = self._models[backend] = self.graph.compile(backend=backend)
        return m

    def run(self, backend: str, formals: Sequence[np.ndarray], captures: Sequence[np.ndarray]) -> List[np.ndarray]:
        """One evaluation: the body's outputs, in order, for these formal and captured values."""
        feeds = {}
        for t, a in zip(self.graph.inputs, list(formals) + list(captures)):
            if a.ndim != t.spec.ndim and a.size == 1:  # a one-element value the body declares [1] or ()
                a = a.reshape(tuple(1 for _ in t.spec.shape))
            feeds[t.name] = a if a.flags.c_contiguous else a.copy(order="C")  # (0-d stays 0-d)
        out = self.model(backend).run(feeds)
        return [out[t.name] for t in self.graph.outputs]

    # identity semantics: a body is a param value like any other, hashed and compared by object
    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)

    def __getstate__(self):
        return {"graph": self.graph, "n_formal": self.n_formal, "name": self.name}

    def __setstate__(self, state):
        self.__init__(state["graph"], state["n_formal"], state["name"])

    def __repr__(self) -> str:
        ins = ", ".join(str(t.spec) for t in self.graph.inputs)
        outs = ", ".join(str(t.spec) for t in self.graph.outputs)
        return (f"Body({self.name!r}: ({ins}) -> ({outs}), {len(self.graph.nodes)} nodes, "
                f"{self.n_captures} captured)")
