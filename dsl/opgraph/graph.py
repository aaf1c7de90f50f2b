"""Symbolic graphs: the same op calls that run eagerly on arrays build nodes here.

This module is the graph data structure and nothing above it: the compile pipeline and the
ONNX exporter sit above it and install themselves (``install``), so the passes can build and
read graphs with ``Graph`` itself.  Structure (documented for the compile passes, the model and
the ONNX exporter; treat as read-only outside graph.py and passes.py):

``Graph``
    ``name: str``
    ``inputs: list[Tensor]``      graph inputs, in declaration order (``kind == "input"``)
    ``outputs: list[Tensor]``     graph outputs, in ``output()`` order; ``t.name`` is the output name
    ``constants: dict[str, np.ndarray]``  name -> value of every constant (initializer)
    ``nodes: list[Node]``         topological order (every input is defined before use)
    ``tensors: dict[str, Tensor]``  every tensor by its unique name
    ``opset_imports: dict[str, int]``  domain -> opset the graph was written for ("" = ai.onnx);
                                  empty unless set by the user or an ONNX loader
``Tensor``
    ``name``, ``spec: dsl.TensorSpec`` (``shape`` may hold ``None``; ``dtype``), ``kind``:
    ``"input" | "constant" | "node"``, ``producer: Node | None``, ``index`` (output slot),
    ``value`` (numpy array for constants, else None), ``graph``.
``Node``
    ``name``, ``op: dsl.Op`` instance (``op.op_type``, ``op.domain``, ``op.params``,
    ``type(op).since``), ``inputs: list[Tensor | None]`` (``None`` = absent optional input),
    ``outputs: list[Tensor]``, ``subgraph: Graph | None`` -- for composed ops
    (``@dsl.composed``), the body instantiated for this node's input specs: its inputs
    correspond to ``node.inputs`` and its outputs to ``node.outputs`` by position;
    ``type(node.op).composed`` is True and ``node.op.function_graph()`` rebuilds the body
    with fully unknown shapes (for FunctionProto export).

Tensors from different graphs never mix.  Printing a graph (``print(g)``) lists inputs,
constants, nodes with params and output specs; Jupyter shows an SVG diagram.
"""
from __future__ import annotations

import html
import importlib
import itertools
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from dsl.lang.types import as_dtype, from_numpy
from dsl.opgraph.host_values import is_host, kind_name
from dsl.opgraph.op import Op, check_and_infer, check_arity
from dsl.opgraph.spec import Symbolic, TensorSpec, VerifyError, describe
from dsl.opgraph.values import shape_values



# --------------------------------------------------------------------------- upper layers

_HOOKS: Dict[str, Callable] = {}
_PROVIDERS = {"compile": "dsl.opgraph.compiler", "to_onnx": "dsl.onnx.export"}
"""Who installs each hook: the module is imported on first use, as ``backends.get`` loads a
backend, so this layer never imports the layers above it."""


def install(name: str, fn: Callable) -> None:
    """Called by the module that implements ``Graph.compile`` (``"compile"``) or
    ``Graph.to_onnx`` (``"to_onnx"``) when it is imported."""
    if name not in _PROVIDERS:
        raise ValueError(f"unknown graph hook {name!r}; expected one of {sorted(_PROVIDERS)}")
    _HOOKS[name] = fn


def _installed(name: str) -> Callable:
    if name not in _HOOKS:
        importlib.import_module(_PROVIDERS[name])
    return _HOOKS[name]


class Tensor(Symbolic):
    """A value in a ``Graph``: an input, a constant or a node output."""

    __slots__ = ("graph", "name", "spec", "kind", "producer", "index", "value", "dim_names")

    def __init__(self, graph: "Graph", name: str, spec: TensorSpec, kind: str,
                 producer: Optional["Node"] = None, index: int = 0, value=None):
        self.graph, self.name, self.spec, self.kind = graph, name, spec, kind
        self.producer, self.index, self.value = producer, index, value
        self.dim_names: Tuple[Optional[str], ...] = (None,) * len(getattr(spec, "shape", ()))  # inputs: symbolic dims

    @property
    def dims(self) -> tuple:
        """The shape with named run-time dimensions as their names ("batch"), as given to input()."""
        return tuple(n if n is not None else d for d, n in zip(self._tensor_spec("dims").shape, self.dim_names))

    @property
    def shape(self):
        return self._tensor_spec("shape").shape

    @property
    def dtype(self):
        return self.spec.dtype

    @property
    def ndim(self) -> int:
        return self._tensor_spec("ndim").ndim

    def _tensor_spec(self, what: str) -> TensorSpec:
        """The spec, when it has a shape: a sequence or optional value has none of its own."""
        if is_host(self.spec):
            raise AttributeError(f"graph value {self.name!r} is {kind_name(self.spec)} ({self.spec}), which has no {what}: "
                                 "a sequence's elements and an optional's value have shapes "
                                 "(spec.elem_shape / spec.elem)")
        return self.spec

    def __repr__(self) -> str:
        return f"<dsl.Tensor {self.name!r} {self.spec} of graph {self.graph.name!r}>"

    def __bool__(self):
        raise TypeError(f"graph tensor {self.name!r} has no truth value: it is symbolic until the model runs")

    def __array__(self, *a, **k):
        raise TypeError(f"graph tensor {self.name!r} is symbolic: compile the graph and run it to get values")


class Node:
    """One op application in a graph."""

    __slots__ = ("name", "op", "inputs", "outputs", "subgraph")

    def __init__(self, name: str, op: Op, inputs: List[Optional[Tensor]],
                 outputs: List[Tensor], subgraph: Optional["Graph"] = None):
        self.name, self.op, self.inputs, self.outputs, self.subgraph = name, op, inputs, outputs, subgraph

    @property
    def op_type(self) -> str:
        return self.op.op_type

    @property
    def domain(self) -> str:
        return self.op.domain

    def __repr__(self) -> str:
        return f"<dsl.Node {self.name!r} {describe(self.op)}>"


class Identity(Op):
    """A copy of the input.  ``Graph.output`` emits it when a graph input, constant or an
    existing output is output again under a new name (graph outputs must be distinct
    tensors).  The one Identity class: ``ops`` registers it as ONNX Identity (ops.Identity),
    so a user's own registration of Identity still takes precedence on import."""

    op_type = "Identity"
    inplace = {0: 0}
    inplace_noop = True  # run in place, the copy changes nothing: the model skips it
    formats = ("plain", "nchwc16")
    keeps_padding = True

    keeps_quant = True
    host_values = True  # a sequence or optional passes through by reference

    def infer(self, x):
        return x.spec.with_()

    def run_host(self, inputs, backend):
        return [inputs[0]]

    kernels = {"default": lambda x, y: np.copyto(y, x)}


class Graph:
    """A symbolic dataflow graph of ops; ``compile`` turns it into a ``dsl.Model``."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.inputs: List[Tensor] = []
        self.outputs: List[Tensor] = []
        self.constants: Dict[str, np.ndarray] = {}
        self.nodes: List[Node] = []
        self.tensors: Dict[str, Tensor] = {}
        self.opset_imports: Dict[str, int] = {}
        self._counter = itertools.count()
        self._node_names: set = set()

    # building -----------------------------------------------------------------------------
    def unique_name(self, base: str, node: bool = False) -> str:
        """``base`` or ``base_k``, unused among tensor names (or node names when ``node``)."""
        used = self._node_names if node else self.tensors
        if base not in used:
            return base
        for k in itertools.count(1):
            if f"{base}_{k}" not in used:
                return f"{base}_{k}"
        raise AssertionError("unreachable")

    def _claim(self, name: str, what: str) -> str:
        if not isinstance(name, str) or not name:
            raise TypeError(f"graph {self.name!r}: {what} name must be a non-empty str, got {name!r}")
        if name in self.tensors:
            raise ValueError(f"graph {self.name!r}: a tensor named {name!r} already exists "
                             f"({self.tensors[name].kind}); {what} names must be unique")
        return name

    def input(self, name: str, shape: Sequence, dtype=None, quant=None) -> Tensor:
        """A graph input; ``None`` or a name ("batch") in ``shape`` is a dimension known at run
        time.  Inputs sharing a dimension name must agree on its size when the model runs.
        ``quant`` (a ``dsl.Quant`` or ``(scale, zero_point)``) marks an i8/u8 input as quantized.
        ``g.input(name, dsl.SequenceSpec(...))`` (or an ``OptionalSpec``) declares a sequence
        (fed as a list of arrays) or an optional (``None`` or the value) instead."""
        self._claim(name, "input")
        if is_host(shape):
            if dtype is not None or quant is not None:
                raise TypeError(f"graph {self.name!r} input {name!r}: a {type(shape).__name__} carries its own "
                                f"dtype; pass it alone")
            t = Tensor(self, name, shape.with_(), "input")
            self.inputs.append(t)
            self.tensors[name] = t
            return t
        if dtype is None:
            raise TypeError(f"graph {self.name!r} input {name!r}: give a dtype (or a dsl.SequenceSpec / "
                            f"dsl.OptionalSpec instead of the shape)")
        shape = tuple(shape)
        names = tuple(d if isinstance(d, str) and d else None for d in shape)
        try:
            spec = TensorSpec(tuple(None if isinstance(d, str) else d for d in shape), as_dtype(dtype),
                              quant=quant)
        except (TypeError, ValueError) as e:
            raise type(e)(f"graph {self.name!r} input {name!r}: {e}") from None
        t = Tensor(self, name, spec, "input")
        t.dim_names = names
        self.inputs.append(t)
        self.tensors[name] = t
        return t

    def input_like(self, t: Tensor) -> Tensor:
        """An input declared as input ``t`` of another graph is (same name, kind, dims)."""
        if is_host(t.spec):
            return self.input(t.name, t.spec)
        return self.input(t.name, t.dims, t.spec.dtype, quant=t.spec.quant)

    def constant(self, name: Optional[str], value) -> Tensor:
        """A constant (ONNX initializer); the array is copied and frozen."""
        name = self._claim(name, "constant") if name is not None else self.unique_name("const")
        arr = np.array(value, order="C")  # a C-contiguous copy; 0-d stays 0-d (not ascontiguousarray)
        try:
            dt = from_numpy(arr.dtype)
        except TypeError as e:
            raise TypeError(f"graph {self.name!r} constant {name!r}: {e}") from None
        arr.setflags(write=False)
        t = Tensor(self, name, TensorSpec(arr.shape, dt, value=arr), "constant", value=arr)
        self.constants[name] = arr
        self.tensors[name] = t
        return t

    def output(self, tensor: Tensor, name: Optional[str] = None) -> Tensor:
        """Mark ``tensor`` as a graph output called ``name`` (default: its own name)."""
        if not isinstance(tensor, Tensor):
            raise TypeError(f"graph {self.name!r}: output() takes a graph tensor, got {type(tensor).__name__}")
        if tensor.graph is not self:
            raise ValueError(f"tensor {tensor.name!r} belongs to graph {tensor.graph.name!r}, "
                             f"not {self.name!r}")
        name = tensor.name if name is None else name
        if any(o.name == name for o in self.outputs):
            raise ValueError(f"graph {self.name!r} already has an output named {name!r}")
        if name == tensor.name and tensor not in self.outputs:
            self.outputs.append(tensor)
            return tensor
        if tensor.kind == "node" and tensor not in self.outputs and tensor not in self.inputs:
            self._claim(name, "output")
            del self.tensors[tensor.name]
            tensor.name = name
            self.tensors[name] = tensor
            self.outputs.append(tensor)
            return tensor
        self._claim(name, "output")
        copy = apply_op(Identity(), [tensor], self, out_names=[name])
        self.outputs.append(copy)
        return copy

    def rename_node(self, node: Node, name: str) -> bool:
        """Give ``node`` a new name if no other node has it (importers keep their names)."""
        if not name or name == node.name or name in self._node_names:
            return False
        self._node_names.discard(node.name)
        node.name = name
        self._node_names.add(name)
        return True

    def add_node(self, op: Op, inputs: Sequence[Optional[Tensor]], out_specs: Sequence[TensorSpec],
                 name: Optional[str] = None, out_names: Optional[Sequence[str]] = None,
                 subgraph: Optional["Graph"] = None, append: bool = True) -> Node:
        """A new node (specs already inferred), appended to ``nodes`` unless ``append``
        is False (compile passes that rebuild the order); used by apply_op and passes."""
        name = name or self.unique_name(f"{op.op_type}_{next(self._counter)}", node=True)
        node = Node(name, op, list(inputs), [], subgraph)
        self._node_names.add(name)
        for i, spec in enumerate(out_specs):
            if out_names is not None:
                tname = self._claim(out_names[i], "tensor")
            else:
                tname = self.unique_name(name if len(out_specs) == 1 else f"{name}:{i}")
            t = Tensor(self, tname, spec, "node", node, i)
            node.outputs.append(t)
            self.tensors[tname] = t
        if append:
            self.nodes.append(node)
        return node

    # reading ------------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"graph {self.name!r} has no node {name!r}")

    def rename(self, tensor: Tensor, name: str) -> None:
        """Give ``tensor`` a new unique name (compile passes)."""
        self._claim(name, "tensor")
        del self.tensors[tensor.name]
        if tensor.kind == "constant":
            self.constants[name] = self.constants.pop(tensor.name)
        tensor.name = name
        self.tensors[name] = tensor

    def consumers(self, tensor: Tensor) -> List[Node]:
        """The nodes reading ``tensor``, in order (one scan; use ``readers()`` for many)."""
        return [n for n in self.nodes if any(t is tensor for t in n.inputs)]

    def readers(self) -> Dict[int, List[Node]]:
        """``id(tensor) -> the nodes reading it``, for every tensor read, in one pass."""
        found: Dict[int, List[Node]] = {}
        for n in self.nodes:
            for t in n.inputs:
                if t is not None:
                    found.setdefault(id(t), []).append(n)
        return found

    def compile(self, backend: Optional[str] = None, formats: str = "auto", fold: bool = True,
                max_tensor_bytes: Optional[int] = None, fuse: Optional[bool] = None, tiling=None,
                int8_arithmetic: str = "exact"):
        """Inline composed ops, infer shapes/types, verify, fold constants, apply the ops'
        graph rewrites (fusion), drop dead nodes, select formats (inserting reorders) and
        kernels, plan memory -> ``dsl.Model``.

        ``formats="plain"`` keeps every tensor plain (no NCHWc16).  ``fuse=False`` skips the
        rewrites (default: on unless OPDSL_NO_FUSION=1).  No folded constant or planned buffer
        may exceed ``max_tensor_bytes`` (default OPDSL_MAX_TENSOR_BYTES, 4 GiB).  ``tiling``: ops
        that declare tiling run as tiles across the cores (None: on unless OPDSL_NO_TILING=1;
        False: off; an int n: up to n tiles per op whatever the size; docs/ops.md "Tiling").
        ``int8_arithmetic="saturating"``: int8 convolutions and GEMMs sum u8·i8 pairs in saturating i16 where
        that is faster (AVX2 without VNNI), as onnxruntime's kernels do there; default "exact"
        (docs/ops.md, "Exact or saturating int8 products")."""
        return _installed("compile")(self, backend=backend, formats=formats, fold=fold,
                                     max_tensor_bytes=max_tensor_bytes, fuse=fuse, tiling=tiling,
                                     int8_arithmetic=int8_arithmetic)

    def to_onnx(self):
        """An ``onnx.ModelProto`` (custom domains kept, composed ops as FunctionProto)."""
        return _installed("to_onnx")(self)

    def apply(self, op: Op, inputs: Sequence):
        """Add ``op`` applied to ``inputs`` (this graph's tensors, arrays, scalars) as a node;
        -> its output tensor(s).  ``op(x)`` on a tensor of this graph ends here."""
        return apply_op(op, inputs, self)

    def copy(self) -> "Graph":
        """A structural copy sharing ops, subgraphs and constant arrays: add nodes to it
        without changing this graph."""
        g = Graph(self.name)
        g.opset_imports = dict(self.opset_imports)
        m: Dict[int, Tensor] = {}
        for t in self.inputs:
            m[id(t)] = g.input_like(t)
            m[id(t)].spec = t.spec
        for name, value in self.constants.items():
            t = self.tensors[name]
            c = Tensor(g, name, t.spec, "constant", value=value)
            g.constants[name], g.tensors[name] = value, c
            m[id(t)] = c
        for n in self.nodes:
            node = g.add_node(n.op, [None if t is None else m[id(t)] for t in n.inputs],
                              [o.spec for o in n.outputs], name=n.name,
                              out_names=[o.name for o in n.outputs], subgraph=n.subgraph)
            for o, new in zip(n.outputs, node.outputs):
                m[id(o)] = new
        g.outputs = [m[id(t)] for t in self.outputs]
        g._counter = itertools.count(len(self.nodes) + 1000)
        return g

    # pickling ------------------------------------------------------------------------------
    def __getstate__(self):
        """A flat record (tensors and nodes by position): pickling the linked structure itself
        would recurse once per node along the longest path and overflow on deep models."""
        tensors: List[Tensor] = []
        index: Dict[int, int] = {}

        def slot(t: Optional[Tensor]) -> int:
            if t is None:
                return -1
            if id(t) not in index:
                index[id(t)] = len(tensors)
                tensors.append(t)
            return index[id(t)]
        node_slot = {id(n): k for k, n in enumerate(self.nodes)}
        for t in [*self.inputs, *self.tensors.values()]:
            slot(t)
        nodes = [(n.name, n.op, [slot(t) for t in n.inputs], [slot(t) for t in n.outputs], n.subgraph)
                 for n in self.nodes]
        outputs = [slot(t) for t in self.outputs]
        rows = [(t.name, t.spec, t.kind, node_slot.get(id(t.producer), -1), t.index, t.value, t.dim_names)
                for t in tensors]
        named = [index[id(t)] for t in self.tensors.values()]
        return {"name": self.name, "rows": rows, "inputs": [index[id(t)] for t in self.inputs], "named": named,
                "constants": dict(self.constants), "nodes": nodes, "outputs": outputs,
                "opset_imports": self.opset_imports, "node_names": sorted(self._node_names)}

    def __setstate__(self, state) -> None:
        Graph.__init__(self, state["name"])
        for value in [*state["constants"].values(), *(row[5] for row in state["rows"]),
                      *(row[1].value for row in state["rows"])]:
            if isinstance(value, np.ndarray):
                value.setflags(write=False)  # pickle loses the flag; the model plan relies on it
        tensors = []
        for name, spec, kind, _, index, value, dim_names in state["rows"]:
            t = Tensor(self, name, spec, kind, None, index, value)
            t.dim_names = dim_names
            tensors.append(t)
        for name, op, ins, outs, subgraph in state["nodes"]:
            node = Node(name, op, [None if k < 0 else tensors[k] for k in ins], [tensors[k] for k in outs], subgraph)
            self.nodes.append(node)
        for t, row in zip(tensors, state["rows"]):
            if row[3] >= 0:
                t.producer = self.nodes[row[3]]
        self.inputs = [tensors[k] for k in state["inputs"]]
        self.outputs = [tensors[k] for k in state["outputs"]]
        self.tensors = {tensors[k].name: tensors[k] for k in state["named"]}
        self.constants = dict(state["constants"])
        self.opset_imports = dict(state["opset_imports"])
        self._node_names = set(state["node_names"])
        self._counter = itertools.count(len(self.nodes) + 1000)

    # display ------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return (f"<dsl.Graph {self.name!r}: {len(self.inputs)} inputs, {len(self.nodes)} nodes, "
                f"{len(self.outputs)} outputs>")

    def __str__(self) -> str:
        sig_in = ", ".join(f"{t.name}: {t.spec}" for t in self.inputs)
        sig_out = ", ".join(f"{t.name}: {t.spec}" for t in self.outputs)
        lines = [f"graph {self.name}({sig_in}) -> ({sig_out})"]
        for name, value in self.constants.items():
            lines.append(f"  const {name}: {self.tensors[name].spec}" + _preview(value))
        for n in self.nodes:
            lines.append("  " + _node_line(n))
        return "\n".join(lines)

    def _repr_svg_(self) -> str:
        return render_svg(self)

    def _repr_html_(self) -> str:
        return (f"<div>{render_svg(self)}<details><summary>text</summary>"
                f"<pre>{html.escape(str(self))}</pre></details></div>")


def _preview(value: np.ndarray) -> str:
    if value.size <= 6:
        return f" = {np.array2string(value.reshape(-1), separator=', ')}" if value.ndim else f" = {value}"
    return ""


def _params_text(op: Op) -> str:
    parts = []
    for k, v in op.params.items():
        if isinstance(v, np.ndarray):
            v = f"array{list(v.shape)}"
        parts.append(f"{k}={v}")
    return f"[{', '.join(parts)}]" if parts else ""


def _node_line(n: Node) -> str:
    outs = ", ".join(o.name for o in n.outputs)
    ins = ", ".join("_" if t is None else t.name for t in n.inputs)
    specs = ", ".join(str(o.spec) for o in n.outputs)
    extra = f"  (composed: {len(n.subgraph.nodes)} nodes)" if n.subgraph is not None else ""
    return f"{outs} = {describe(n.op)}{_params_text(n.op)}({ins})  # {specs}{extra}"


# --------------------------------------------------------------------------- applying ops

def apply_op(op: Op, inputs: Sequence, graph: Optional[Graph] = None,
             out_names: Optional[Sequence[str]] = None):
    """Add ``op`` applied to ``inputs`` to the graph they belong to; return output handle(s)."""
    check_arity(op, len(inputs), "graph call")  # before any constant is added for a stray input
    graphs = {id(x.graph): x.graph for x in inputs if isinstance(x, Tensor)}
    if graph is not None:
        graphs.setdefault(id(graph), graph)
    if len(graphs) != 1:
        names = ", ".join(repr(g.name) for g in graphs.values())
        raise ValueError(f"{describe(op)}: inputs come from different graphs ({names}); "
                         "tensors of one graph cannot feed another")
    g = next(iter(graphs.values()))
    first = next((x for x in inputs if isinstance(x, Tensor)), None)
    tensors: List[Optional[Tensor]] = []
    for i, x in enumerate(inputs):
        if x is None or isinstance(x, Tensor):
            tensors.append(x)
        elif isinstance(x, (bool, int, float)) and first is not None:
            tensors.append(g.constant(None, np.asarray(x, dtype=first.dtype.np)))
        else:
            try:
                tensors.append(g.constant(None, x))
            except TypeError as e:
                raise TypeError(f"{describe(op)} input {i}: expected a graph tensor or an array, "
                                f"got {type(x).__name__}: {e}") from None
    name = g.unique_name(f"{op.op_type}_{next(g._counter)}", node=True)
    specs = [None if t is None else t.spec for t in tensors]
    subgraph = None
    if getattr(type(op), "composed", False):
        subgraph = op.instantiate(specs, where=f"node {name!r}")
        out_specs = tuple(t.spec.with_(value=None) for t in subgraph.outputs)
    else:
        out_specs = check_and_infer(op, specs, where=f"node {name!r}")
        out_specs = shape_values(op, specs, out_specs, "interpreter", integers_only=True)  # tiny: no compile
    out_specs = tuple(s.with_(format="plain", value=s.value) for s in out_specs)
    for i, q in op.input_quant(*specs).items():  # e.g. DequantizeLinear's i8 weights
        t = tensors[i]
        if t is not None and t.kind in ("constant", "input") and t.spec.quant is None:
            t.spec = t.spec.with_(quant=q, value=t.spec.value)
    node = g.add_node(op, tensors, out_specs, name=name, out_names=out_names, subgraph=subgraph)
    return node.outputs[0] if len(node.outputs) == 1 else tuple(node.outputs)


# --------------------------------------------------------------------------- SVG diagram

_ROW, _CHAR, _BOX_H, _GAP = 78, 7.2, 30, 26


def _layers(g: Graph) -> Tuple[Dict[int, int], List[list]]:
    """Row of every drawn item: inputs on row 0, a node one row below its lowest producer."""
    row: Dict[int, int] = {}
    rows: List[list] = []

    def place(item, r):
        row[id(item)] = r
        while len(rows) <= r:
            rows.append([])
        rows[r].append(item)

    for t in g.inputs:
        place(t, 0)
    for n in g.nodes:
        r = 0
        for t in n.inputs:
            if t is None or t.kind == "constant":
                continue
            src = t if t.kind == "input" else t.producer
            r = max(r, row.get(id(src), 0))
        place(n, r + 1)
    for t in g.outputs:
        src = t if t.kind != "node" else t.producer
        place(("out", t), row.get(id(src), 0) + 1)
    return row, rows


def render_svg(g: Graph) -> str:
    """A plain SVG drawing of the graph (no graphviz): rows by dependency depth."""
    _, rows = _layers(g)
    pos: Dict[int, Tuple[float, float, float]] = {}  # id -> (x center, y top, width)
    width = 0.0
    labels = {}
    for r, items in enumerate(rows):
        x = 10.0
        for it in items:
            if isinstance(it, Node):
                consts = [t.name for t in it.inputs if t is not None and t.kind == "constant"]
                label = it.op.op_type + (f" ({', '.join(consts)})" if consts else "")
            elif isinstance(it, tuple):
                label = f"{it[1].name}: {it[1].spec}"
            else:
                label = f"{it.name}: {it.spec}"
            w = max(60.0, len(label) * _CHAR + 16)
            labels[id(it)] = label
            pos[id(it)] = (x + w / 2, 10.0 + r * _ROW, w)
            x += w + _GAP
        width = max(width, x)
    height = 10.0 + len(rows) * _ROW
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'font-family="monospace" font-size="12">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
           f'<text x="10" y="{height - 4:.0f}" fill="#888">graph {html.escape(g.name)}</text>']

    def edge(src_id, dst_id, text):
        x1, y1, _ = pos[src_id]
        x2, y2, _ = pos[dst_id]
        y1 += _BOX_H
        out.append(f'<path d="M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + 24:.1f} {x2:.1f},{y2 - 24:.1f} '
                   f'{x2:.1f},{y2:.1f}" fill="none" stroke="#555" marker-end="url(#arrow)"/>')
        out.append(f'<text x="{(x1 + x2) / 2 + 4:.1f}" y="{(y1 + y2) / 2 + 4:.1f}" fill="#777" '
                   f'font-size="10">{html.escape(text)}</text>')

    for n in g.nodes:
        for t in n.inputs:
            if t is None or t.kind == "constant":
                continue
            src = t if t.kind == "input" else t.producer
            edge(id(src), id(n), str(t.spec))
    for r, items in enumerate(rows):
        for it in items:
            if isinstance(it, tuple):
                t = it[1]
                edge(id(t if t.kind != "node" else t.producer), id(it), "")
    for items in rows:
        for it in items:
            cx, y, w = pos[id(it)]
            label = html.escape(labels[id(it)])
            if isinstance(it, Node):
                fill = "#e8f0fe" if it.subgraph is None else "#fff4e0"
                out.append(f'<rect x="{cx - w / 2:.1f}" y="{y:.1f}" width="{w:.1f}" height="{_BOX_H}" '
                           f'rx="4" fill="{fill}" stroke="#3367d6"><title>{html.escape(_node_line(it))}'
                           f'</title></rect>')
            else:
                out.append(f'<ellipse cx="{cx:.1f}" cy="{y + _BOX_H / 2:.1f}" rx="{w / 2:.1f}" '
                           f'ry="{_BOX_H / 2}" fill="#f1f8e9" stroke="#689f38"/>')
            out.append(f'<text x="{cx:.1f}" y="{y + _BOX_H / 2 + 4:.1f}" text-anchor="middle">{label}</text>')
    out.append("</svg>")
    return "\n".join(out)


__all__ = ["Graph", "Tensor", "Node", "apply_op", "render_svg", "VerifyError"]
