"""The error every ONNX import problem raises; apart from load.py so that the body importer
(subgraph.py), which load.py calls, can raise it without importing load.py back."""

from __future__ import annotations

from typing import List


class OnnxImportError(ValueError):
    """The ONNX model cannot be turned into a graph; the message says which part and why.
    ``missing``: the ``coverage.MissingOp`` list when the cause is ops no registered op answers."""

    missing: List = []
