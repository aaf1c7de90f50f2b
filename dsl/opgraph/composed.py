"""Composed ops (TIM-VX's RNNCell): an op whose body is a Python function of other ops.

``@dsl.composed("RNNCell", domain="com.example")`` turns the function into a registered
``dsl.Op`` subclass.  Parameters of the function without a default, or with default
``None`` (an optional input), are tensor inputs; keyword-only parameters and
parameters with a non-None default are op params (typed by their annotation, or by
the default's type).  Hence ``rnn_cell(x, w, b, h, r)`` constructs and applies, like
any op.

* Eager: the body runs on the arrays (each inner op runs eagerly, on the outer
  call's backend).
* Graph: the body is instantiated once as a subgraph for the node's input specs
  (``node.subgraph``); the node's outputs take the subgraph's output specs.
  ``Graph.compile`` inlines it, so format selection, folding and memory planning see
  the inner nodes.  ``Graph.to_onnx`` exports the subgraph as a FunctionProto.
"""
from __future__ import annotations

import inspect
from typing import Any, Dict, Optional, Sequence

from dsl.opgraph import registry
from dsl.opgraph.graph import Graph, Tensor
from dsl.opgraph.op import _EAGER_BACKEND, Op, as_arrays, check_arity
from dsl.opgraph.spec import TensorSpec, VerifyError, describe


class ComposedOp(Op):
    """Base of ``@dsl.composed`` ops; ``function`` is the body, ``tensor_args`` its inputs."""

    composed = True
    function = None
    tensor_args = ()
    optional_args = frozenset()

    def _check_arity(self, inputs: Sequence, where: str = "call") -> None:
        check_arity(self, len(inputs), where)

    def apply_eager(self, inputs: Sequence, backend: Optional[str] = None):
        self._check_arity(inputs, "eager call")
        arrays = as_arrays(self, inputs)
        token = _EAGER_BACKEND.set(backend or _EAGER_BACKEND.get())
        try:
            result = type(self).function(*arrays, **self.params)
        finally:
            _EAGER_BACKEND.reset(token)
        return result

    def instantiate(self, specs: Sequence[Optional[TensorSpec]], where: str = ""):
        """The body as a ``dsl.Graph`` whose inputs have ``specs`` (``None``: absent)."""
        self._check_arity(specs, where or "body")
        sub = Graph(self.op_type)
        args = []
        for name, spec in zip(self.tensor_args, specs):
            if spec is None:
                args.append(None)
                continue
            t = sub.input(name, spec.shape, spec.dtype)
            t.spec = spec.with_(format="plain", value=spec.value)  # values help inner infer
            args.append(t)
        try:
            result = type(self).function(*args, **self.params)
        except VerifyError as e:
            raise VerifyError(f"{describe(self)} ({where or 'body'}): {e}") from None
        outs = result if isinstance(result, (tuple, list)) else (result,)
        for i, t in enumerate(outs):
            if not isinstance(t, Tensor) or t.graph is not sub:
                raise TypeError(f"{describe(self)}: the body must return tensors computed from its inputs; "
                                f"output {i} is {type(t).__name__}")
        for i, t in enumerate(outs):
            sub.output(t, f"output_{i}" if len(outs) > 1 else "output")
        for t in sub.inputs:
            t.spec = t.spec.with_()  # drop values: the subgraph is a function of its inputs
        return sub

    def infer(self, *inputs):
        return tuple(t.spec for t in self.instantiate(inputs).outputs)

    def function_graph(self, dtypes: Sequence, ranks: Sequence[int]):
        """The body for inputs of ``dtypes`` and ``ranks`` with every dim unknown."""
        specs = [None if d is None else TensorSpec((None,) * r, d) for d, r in zip(dtypes, ranks)]
        return self.instantiate(specs)


def composed(op_type: str, domain: str = "", since: int = 1, until: Optional[int] = None):
    """Decorator: make ``fn`` (a function of ops) a registered composed op class."""

    def deco(fn):
        sig = inspect.signature(fn)
        tensor_args, optional, annotations, defaults = [], set(), {}, {}
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"@dsl.composed({op_type!r}): *args/**kwargs are not supported ({p})")
            is_param = p.kind is p.KEYWORD_ONLY or (p.default is not p.empty and p.default is not None)
            if not is_param:
                tensor_args.append(p.name)
                if p.default is None:
                    optional.add(p.name)
                continue
            ann = p.annotation if p.annotation is not p.empty else (
                type(p.default) if p.default is not p.empty else Any)
            annotations[p.name] = ann
            if p.default is not p.empty:
                defaults[p.name] = p.default
        ns: Dict[str, Any] = {
            "__annotations__": annotations, **defaults,
            "function": staticmethod(fn), "tensor_args": tuple(tensor_args),
            "optional_args": frozenset(optional), "op_type": op_type, "domain": domain,
            "since": since, "until": until, "__module__": fn.__module__,
            "__qualname__": getattr(fn, "__qualname__", op_type), "__doc__": fn.__doc__,
        }
        cls = type(fn.__name__, (ComposedOp,), ns)
        registry.register(cls)
        return cls
    return deco
