"""``Body``: a graph-valued op param (the body of ONNX If, Loop and Scan).

A control-flow op runs another graph, maybe many times.  The body is an ordinary
``dsl.Graph`` whose inputs are the op's *formal* body inputs (Loop's iteration number,
condition and carried values; Scan's states and slices) followed by the values it
*captures* from enclosing graphs (ONNX lets a body read outer names): the importer turns
those into extra inputs of the control-flow node, so the node's inputs say everything it
depends on and the body stays self-contained.  The body is compiled once per backend, on
first use, to a ``dsl.Model`` that each iteration runs.

A body is compiled with the options of the graph it sits in: ``Graph.compile`` (and so
``load_onnx``) hands its ``fuse``, ``formats``, ``tiling``, ``max_tensor_bytes`` and ``int8_arithmetic`` to every
body through ``configure_bodies``, which gives the compiled graph's control-flow nodes bodies
carrying those options (the user's graph and its bodies are left as they are).
"""
from __future__ import annotations

import threading
from typing import Dict, List, Optional, Sequence

import numpy as np

from dsl.opgraph.spec import TensorSpec

OPTIONS = ("fuse", "formats", "tiling", "max_tensor_bytes", "int8_arithmetic")  # Graph.compile's, less backend and fold


class Body:
    """``graph`` with ``n_formal`` formal inputs, then captured ones.  Compared by identity:
    two bodies are the same param only when they are the same object."""

    def __init__(self, graph, n_formal: int, name: str = "", options: Optional[Dict[str, object]] = None):
        if not 0 <= n_formal <= len(graph.inputs):
            raise ValueError(f"body {name or graph.name!r}: {n_formal} formal inputs, but the graph has only "
                             f"{len(graph.inputs)} inputs")
        unknown = sorted(set(options or {}) - set(OPTIONS))
        if unknown:
            raise ValueError(f"body {name or graph.name!r}: unknown compile option(s) {', '.join(unknown)}; "
                             f"accepted: {', '.join(OPTIONS)}")
        self.graph, self.n_formal, self.name = graph, int(n_formal), name or graph.name
        self.options: Dict[str, object] = dict(options or {})
        self._models: Dict[str, object] = {}
        self._lock = threading.Lock()

    def with_options(self, **options) -> "Body":
        """This body (the same graph) compiled with ``options`` (Graph.compile's keywords)."""
        return Body(self.graph, self.n_formal, self.name, {**self.options, **options})

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
                    m = self._models[backend] = self.graph.compile(backend=backend, **self.options)
        return m

    def run(self, backend: str, formals: Sequence[np.ndarray], captures: Sequence[np.ndarray]) -> List[np.ndarray]:
        """One evaluation: the body's outputs, in order, for these formal and captured values."""
        feeds = {}
        for t, a in zip(self.graph.inputs, list(formals) + list(captures)):
            if a is None or isinstance(a, list):  # an optional's absence, a sequence: host values as they are
                feeds[t.name] = a
                continue
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
        return {"graph": self.graph, "n_formal": self.n_formal, "name": self.name, "options": self.options}

    def __setstate__(self, state):
        self.__init__(state["graph"], state["n_formal"], state["name"], state.get("options"))

    def __repr__(self) -> str:
        ins = ", ".join(str(t.spec) for t in self.graph.inputs)
        outs = ", ".join(str(t.spec) for t in self.graph.outputs)
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return (f"Body({self.name!r}: ({ins}) -> ({outs}), {len(self.graph.nodes)} nodes, "
                f"{self.n_captures} captured{opts})")


def configure_bodies(graph, **options) -> int:
    """Give every control-flow node of ``graph`` (a compiler's copy) bodies compiled with
    ``options``; -> how many nodes changed.  Nested bodies get them when their body compiles."""
    changed = 0
    for n in graph.nodes:
        bodies = {k: v for k, v in n.op.params.items() if isinstance(v, Body)}
        if bodies:
            n.op = n.op.replace(**{k: b.with_options(**options) for k, b in bodies.items()})
            changed += 1
    return changed
