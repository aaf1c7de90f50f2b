"""The C-family emitter an OpenCL, C or CUDA target subclasses: the renderer and its result
(emitter.py), statements, loops and expressions (statements.py, loops.py, expressions.py),
builtins, functions, SIMD and tile code, its C helper functions (helpers.py) and the debug and
Ctrl-C instrumentation (instrument.py)."""
