"""The one visitor convention of the compiler: ``visit(node, *context)`` calls
``visit_<NodeClass>(node, *context)``.

Every pass over Python ASTs (frontend) or IR (checker, emitters, interpreter) subclasses
``Visitor``, so a newcomer finds the code for ``ir.If`` in any pass under ``visit_If``.  Context
that a whole pass shares (the current loop, the indentation, the output list) lives on the
visitor object, not in extra arguments.  A node class a pass does not handle goes to
``unsupported(node)``, which each pass turns into its own error message.
"""
from __future__ import annotations

from typing import Any, Callable, Dict


class Visitor:
    """Dispatch on the node's class name, with one lookup table per visitor class."""

    _methods: Dict[type, Dict[type, Callable]]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._methods = {}

    def visit(self, node, *context) -> Any:
        table = type(self)._methods
        method = table.get(type(node))
        if method is None:
            method = getattr(type(self), "visit_" + type(node).__name__, None)
            if method is None:
                return self.unsupported(node, *context)
            table[type(node)] = method
        return method(self, node, *context)

    def unsupported(self, node, *context) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no visit_{type(node).__name__}")
