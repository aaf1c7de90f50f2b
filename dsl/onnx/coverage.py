"""Which ops of an ONNX model no registered op answers, found before anything is built.

A model that needs five ops opdsl lacks should say so once, with all five, instead of
failing on the first node and hiding the other four behind it.  ``missing_ops`` walks
the whole model the way the importer will -- main graph, the bodies of model-local
functions no registered op answers (they get expanded), and graph attributes
(If/Loop/Scan bodies) -- and groups the nodes no op answers at their opset.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from dsl.opgraph import registry

# Model-local functions calling functions: the importer refuses more levels than this, and the
# walk below stops there too (2,000 chained functions must give that error, not a RecursionError).
MAX_FUNCTION_DEPTH = 32


@dataclass
class MissingOp:
    """One (domain, op_type, opset) no registered op answers, and where the model uses it."""
    domain: str
    op_type: str
    opset: int
    count: int
    first_node: str
    hint: str  # the registered opset ranges of that op, or the closest known ops

    @property
    def label(self) -> str:
        return f"{self.domain or 'ai.onnx'}::{self.op_type}"

    def __str__(self) -> str:
        nodes = "1 node" if self.count == 1 else f"{self.count} nodes"
        return f"{self.label} (opset {self.opset}): {nodes}, first {self.first_node!r}; {self.hint}"


def handled_by_importer(domain: str, op_type: str, opset: Optional[int]) -> bool:
    """``Constant`` becomes a graph constant when no op is registered for it."""
    return domain == "" and op_type == "Constant"


def missing_ops(proto, opsets: Dict[str, int]) -> List[MissingOp]:
    """Every op of ``proto`` that no registered op answers at the opset the node runs at.

    ``opsets``: the model's domain -> version.  Nodes of a domain the model does not
    import are left to the importer (its error names the missing opset_import entry)."""
    functions = {(registry.normalize_domain(f.domain), f.name): f for f in proto.functions}
    found: Dict[Tuple[str, str, int], MissingOp] = {}
    expanded = set()

    def walk(nodes, opsets: Dict[str, int], prefix: str, depth: int = 0) -> None:
        for node in nodes:
            domain = registry.normalize_domain(node.domain)
            opset = opsets.get(domain)
            name = prefix + (node.name or f"<unnamed {node.op_type}>")
            if opset is not None and not handled_by_importer(domain, node.op_type, opset) \
                    and registry.find(domain, node.op_type, opset) is None:
                fn = functions.get((domain, node.op_type))
                if fn is not None:
                    # each body once (and no recursion); past the importer's depth limit its error says it
                    if (domain, node.op_type) not in expanded and depth <= MAX_FUNCTION_DEPTH:
                        expanded.add((domain, node.op_type))
                        fn_opsets = dict(opsets)
                        fn_opsets.update({registry.normalize_domain(o.domain): int(o.version)
                                          for o in fn.opset_import})
                        walk(fn.node, fn_opsets, f"{name}/", depth + 1)
                else:
                    key = (domain, node.op_type, opset)
                    if key in found:
                        found[key].count += 1
                    else:
                        found[key] = MissingOp(domain, node.op_type, opset, 1, name, _hint(domain, node.op_type, opset))
            for a in node.attribute:  # control-flow bodies share the model's opsets
                graphs = ([a.g] if a.HasField("g") else []) + list(a.graphs)
                for k, g in enumerate(graphs):
                    walk(g.node, opsets, f"{name}/{a.name}{'' if len(graphs) == 1 else f'[{k}]'}/", depth)

    walk(proto.graph.node, opsets, "")
    return list(found.values())


def _hint(domain: str, op_type: str, opset: int) -> str:
    """The registered opset ranges of the op when it exists for other opsets, else the
    registry's near misses (closest names, same type in other domains)."""
    same = [c for c in registry.all_ops() if c.domain == domain and c.op_type == op_type]
    if same:
        ranges = ", ".join(f"{c.__name__} [{c.since}, {'...' if c.until is None else c.until}]"
                           for c in sorted(same, key=lambda c: c.since))
        return f"registered only for other opsets: {ranges}"
    try:
        registry.lookup(domain, op_type, opset)
    except registry.UnknownOpError as e:
        text = str(e)
        return text.split("; ", 1)[1] if "; " in text else "not registered"
    return "registered"  # pragma: no cover (find() said no)


REGISTER_HINT = "(@dsl.op, or packages=[...])"  # the CLI says --package instead (dsl/cli/errors.py)


def describe_missing(missing: List[MissingOp]) -> str:
    """The one error message for all of them."""
    total = sum(m.count for m in missing)
    head = (f"the model uses {len(missing)} op type(s) that no registered op answers at the model's opset "
            f"({total} node(s)); register ops for them {REGISTER_HINT} or convert the model:")
    return "\n  ".join([head] + [str(m) for m in sorted(missing, key=lambda m: (m.domain, m.op_type, m.opset))])
