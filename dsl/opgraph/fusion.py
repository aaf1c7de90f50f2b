"""Graph rewrites that merge a node into the one feeding it (compile step 2b, after folding).

Ops declare the rewrites: ``@fusion_rule(Conv, Relu)`` registers a function
``rule(graph, producer, consumer) -> (op, inputs) | None`` for a producer node of exactly
class ``Conv`` whose output feeds a consumer of exactly class ``Relu``.  The built-in
rules live with the ops they concern (ops/conv_fusion.py), because this layer knows no op.

A rule registered with ``before_fold=True`` runs before constant folding instead (compile
step 1b), for patterns that folding would erase: ops/qdq_fusion.py turns DequantizeLinear ->
MatMul -> QuantizeLinear into QLinearMatMul, which needs the weights' DequantizeLinear still
there rather than folded into float weights.

``fuse(graph)`` tries the rules on every (producer, consumer) pair where the producer's first
output is read once (by the consumer) and not a graph output, and its other outputs (MaxPool's
Indices, Dropout's mask) are not read at all.  A rule returns the op
and inputs of one node computing the consumer's outputs, or None when it does not
apply.  The pass verifies that node (a ``VerifyError`` leaves the graph as it was),
puts it at the consumer's place (every input is defined by then) and drops the producer
and the tensor between them.  Chains fuse step by step: Conv -> BN -> Add -> Relu
becomes one node.  Classes are matched exactly, so a user's own Relu or a Conv subclass
never inherits a rewrite written for the built-in one.

Ops may also register whole-graph passes with ``@fusion_pass``: ``pass(graph) -> merged``
runs after the pairwise rules (ops/elementwise_fusion.py merges DAGs of elementwise nodes
into one generated kernel, which no producer -> consumer rule can express).

Passes take graphs (graph.py's structure) without importing graph.py, which sits above them.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

from dsl.opgraph import registry
from dsl.opgraph.op import Op, check_and_infer
from dsl.opgraph.spec import VerifyError

Rule = Callable[[object, object, object], Optional[Tuple[Op, Sequence]]]
_RULES: Dict[Tuple[type, type, bool], List[Rule]] = {}
_PASSES: List[Callable[[object], int]] = []


def fusion_rule(producer: type, consumer: type, before_fold: bool = False):
    """Register the decorated function as a rewrite of ``producer`` -> ``consumer`` nodes
    (applied before constant folding when ``before_fold``)."""
    for cls in (producer, consumer):
        if not (isinstance(cls, type) and issubclass(cls, Op)):
            raise TypeError(f"fusion_rule takes dsl.Op subclasses, got {cls!r}")

    def register(rule: Rule) -> Rule:
        _RULES.setdefault((producer, consumer, before_fold), []).append(rule)
        return rule
    return register


def fusion_pass(fn: Callable[[object], int]) -> Callable[[object], int]:
    """Register ``fn(graph) -> nodes merged`` to run after the pairwise rules (after folding)."""
    if fn not in _PASSES:
        _PASSES.append(fn)
    return fn


def rules_for(producer: type, consumer: type, before_fold: bool = False) -> List[Rule]:
    """The registered rewrites of a (producer class, consumer class) pair, in order."""
    return list(_RULES.get((producer, consumer, before_fold), ()))


def fuse(g, before_fold: bool = False) -> int:
    """Apply the registered rewrites (of that stage) until none applies, then (after folding)
    the registered passes; returns how many nodes were merged."""
    registry.load_builtin_library()  # the library's rules register as its modules load: all of them
    merged = 0
    i = 0
    while i < len(g.nodes):
        if _fuse_into(g, g.nodes[i], before_fold):
            merged += 1  # the producer left the list: index i now holds the next node
        else:
            i += 1
    if not before_fold:
        for graph_pass in _PASSES:
            merged += graph_pass(g)
    return merged


def _fuse_into(g, consumer, before_fold: bool = False) -> bool:
    for t in consumer.inputs:
        if t is None or t.kind != "node":
            continue
        producer = t.producer
        rules = _RULES.get((type(producer.op), type(consumer.op), before_fold))
        if not rules or producer.outputs[0] is not t or not _read_only_by(g, t, consumer) or not all(
                _unread(g, o) for o in producer.outputs[1:]):
            continue
        for rule in rules:
            found = rule(g, producer, consumer)
            if found is not None and _replace(g, producer, consumer, *found):
                return True
    return False


def _read_only_by(g, t, consumer) -> bool:
    """``t`` is read once, by ``consumer``, and is not a graph output."""
    if any(o is t for o in g.outputs):
        return False
    uses = sum(1 for n in g.nodes for x in n.inputs if x is t)
    return uses == 1


def _unread(g, t) -> bool:
    """No node reads ``t`` and it is not a graph output (MaxPool's Indices, Dropout's mask)."""
    return not any(o is t for o in g.outputs) and not any(x is t for n in g.nodes for x in n.inputs)


def _replace(g, producer, consumer, op: Op, inputs: Sequence) -> bool:
    """``producer`` becomes ``op(*inputs)`` computing ``consumer``'s outputs, at its place; the
    producer's unread extra outputs are dropped, or kept when ``op`` has them too."""
    inputs = list(inputs)
    specs = [None if x is None else x.spec for x in inputs]
    try:
        outs = check_and_infer(op, specs, where=f"fusing node {producer.name!r} into {consumer.name!r}")
    except VerifyError:
        return False
    extra = list(producer.outputs[1:])
    kept = extra if len(outs) == len(consumer.outputs) + len(extra) else []
    if len(outs) != len(consumer.outputs) + len(kept) or any(
            s.shape != o.spec.shape or s.dtype != o.spec.dtype for s, o in zip(outs, consumer.outputs)):
        return False
    between = producer.outputs[0]
    producer.op, producer.inputs, producer.outputs = op, inputs, list(consumer.outputs) + kept
    for k, o in enumerate(producer.outputs):
        o.producer, o.index = producer, k
    for t in [between] + ([] if kept else extra):
        del g.tensors[t.name]
    g.nodes = [producer if n is consumer else n for n in g.nodes if n is not producer]
    return True


def rule_keys() -> List[Tuple[type, type]]:
    """(producer class, consumer class) of every registered rewrite: the ops a model can reach
    through fusion without naming them (the plan cache keys them, plan_cache.py)."""
    return [(p, c) for p, c, _ in list(_RULES)]


def rule_functions() -> List[Callable]:
    """Every registered rewrite and whole-graph pass (whose code a compiled graph depends on)."""
    return [rule for rules in list(_RULES.values()) for rule in rules] + list(_PASSES)
