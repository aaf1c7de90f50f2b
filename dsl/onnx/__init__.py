"""ONNX in and out: ``load.py`` turns a model into a graph or a compiled ``dsl.Model``
(``dsl.load_onnx``, ``dsl.onnx.to_graph``), after ``coverage.py`` has listed every op the model
needs that no registered op answers; ``export.py`` writes ``Graph.to_onnx()``.

The loader needs the built-in op library (``ops``) and sits above it; the exporter needs only
the op/graph layer.  So this package imports neither until one of its names is used.
"""
import importlib

_LAZY = {"to_graph": "dsl.onnx.load", "load_onnx": "dsl.onnx.load", "OnnxImportError": "dsl.onnx.load"}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dsl.onnx' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
