"""The error every ONNX import problem raises; apart from load.py so that the body importer
(subgraph.py), which load.py calls, can raise it without importing load.py back."""

from __future__ import annotations

from dsl.lang.errors import OnnxImportError  # noqa: F401  (defined with every error: dsl/lang/errors.py)
