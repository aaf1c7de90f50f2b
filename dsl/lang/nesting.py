"""How deeply kernel source may nest, checked once before anything recurses over it.

The frontend, the checker and every emitter walk expressions recursively, and Python's
own ``ast.parse`` has limits of its own.  A 10,000-term ``1 + 1 + ... + 1`` would otherwise
surface as a RecursionError from deep inside the compiler; instead it is a CompileError at
the first construct past ``MAX_DEPTH``, measured here without recursion.
"""
from __future__ import annotations

import ast

from dsl.lang.errors import CompileError, SourceLoc

# Nesting levels of statements and expressions together.  Well under Python's recursion limit (1000) even with
# the several frames each level costs in the compiler passes and in the generated code.
MAX_DEPTH = 100


def parse_source(src: str, filename: str, firstline: int) -> ast.Module:
    """``ast.parse`` with its failures on huge or deep source reported as a CompileError."""
    try:
        return ast.parse(src)
    except (RecursionError, MemoryError) as e:
        why = "too deeply nested" if isinstance(e, RecursionError) else "too large"
        raise CompileError(f"the function is {why} for Python's parser ({type(e).__name__}); expression nested "
                           f"too deeply (limit {MAX_DEPTH})", SourceLoc(filename, firstline)) from None
    except SyntaxError as e:  # e.g. "too many nested parentheses"
        line = firstline + (e.lineno or 1) - 1
        raise CompileError(f"Python cannot parse the function: {e.msg}; expression nested too deeply? "
                           f"(limit {MAX_DEPTH})", SourceLoc(filename, line, max(e.offset or 1, 1))) from None


def check_depth(root: ast.AST, error) -> None:
    """Raise ``error(node, message)`` at the first expression or statement nested deeper than
    MAX_DEPTH (blocks and the expressions inside them count together: the passes recurse through both)."""
    stack = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (ast.expr, ast.stmt)) and node is not root:
            depth += 1
            if depth > MAX_DEPTH:
                what = "expression" if isinstance(node, ast.expr) else "block"
                raise error(node, f"{what} nested too deeply (limit {MAX_DEPTH} levels); split it into several "
                                  "statements with local variables")
        for child in ast.iter_child_nodes(node):
            stack.append((child, depth))
