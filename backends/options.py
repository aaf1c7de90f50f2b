"""Compile options of one implementation that every backend shares: target ``features`` an
implementation needs, and ``defines`` written as OpenCL ``-D`` build options.

Below the backends so raw OpenCL ops (backends/opencl/raw.py) and DSL kernel variants
(dsl/runtime/variant.py) check and spell them the same way.
"""
from __future__ import annotations

from typing import Any, FrozenSet, Iterable, Mapping, Optional

import numpy as np

from backends import base


def plain(value):
    """A define's value as a Python bool/int/float (numpy scalars included), or None."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    return None


def check_features(owner: str, features: Optional[Iterable[str]]) -> FrozenSet[str]:
    if features is None:
        return frozenset()
    if isinstance(features, str) or not all(isinstance(f, str) and f for f in features):
        raise TypeError(f"{owner}.variant(features=...) takes a set of feature names such as "
                        f"{{'avx2', 'fma'}} (see dsl.target(backend).features), got {features!r}")
    return frozenset(f.lower() for f in features)


def missing_features(features: FrozenSet[str], backend: str) -> FrozenSet[str]:
    """Which of ``features`` the target behind ``backend`` lacks (``dsl.target(backend)``)."""
    if not features:
        return frozenset()
    return frozenset(features - frozenset(base.get(backend).target().features))


def features_error(owner: str, features: FrozenSet[str], backend: str) -> Optional[str]:
    """The message for running an implementation on a target without its features, or None."""
    missing = missing_features(features, backend)
    if not missing:
        return None
    device = base.get(backend).target().device
    return (f"{owner} needs target feature(s) {', '.join(sorted(missing))}, which the {backend} target "
            f"({device}) lacks; have select() choose another implementation when "
            f"impl.supported(backend) is False")


def define_options(owner: str, defines: Optional[Mapping[str, Any]]) -> str:
    """``defines`` as OpenCL ``-D`` build options: ints as is, bools as 1/0, floats as f32
    literals, strings (type names, identifiers) verbatim."""
    if not defines:
        return ""
    if not isinstance(defines, Mapping):
        raise TypeError(f"{owner}.variant(defines=...) takes a dict of macro name -> value, "
                        f"got {type(defines).__name__}")
    parts = []
    for name, value in sorted(defines.items()):
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{owner}.variant(defines=...): macro name {name!r} is not a C identifier")
        v = plain(value)
        if isinstance(v, bool):
            text = "1" if v else "0"
        elif isinstance(v, int):
            text = str(v)
        elif isinstance(v, float):
            text = f"{v!r}f" if np.isfinite(v) else None
        elif isinstance(value, str) and value and not any(c.isspace() or c in "\"'\\" for c in value):
            text = value
        else:
            text = None
        if text is None:
            raise TypeError(f"{owner}.variant(defines=...): {name} = {value!r}; accepted: int, bool, finite float, "
                            f"or a string without spaces or quotes")
        parts.append(f"-D{name}={text}")
    return " ".join(parts)

