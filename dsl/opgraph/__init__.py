"""The op/graph compiler: ops (op.py, spec.py, registry.py, composed.py), data formats
(formats.py, reorder.py), graphs (graph.py), the compile pipeline (passes.py, compiler.py) and
the compiled model (model.py, memory.py, limits.py).  docs/architecture.md has the order in
which these modules may import each other.
"""
