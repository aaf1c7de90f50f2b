"""Safe YAML with line numbers: the manifest as dicts and lists that remember where each
key and item was written, so every schema error can name ``<manifest>:<line>``.

Only PyYAML's ``SafeLoader`` is used (no tags that construct Python objects); duplicate
keys, several documents and non-string keys are errors rather than silently resolved.
"""
from __future__ import annotations

from typing import Any, Dict

import yaml

from dsl.package.errors import PackageError


_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq"))


class LDict(dict):
    """A mapping with ``line`` (where it starts) and ``lines[key]`` (where each key is), 1-based."""

    line: int = 0
    lines: Dict[str, int]


class LList(list):
    """A sequence with ``line`` and ``lines[i]`` for each item, 1-based."""

    line: int = 0
    lines: Dict[int, int]


def load(text: str, manifest: str) -> Any:
    """The single YAML document in ``text`` as LDict / LList / scalars."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
    except yaml.composer.ComposerError as e:
        line = e.problem_mark.line + 1 if e.problem_mark else 0
        raise PackageError(manifest, line, None, "a manifest holds one YAML document; found another "
                           "(remove the '---' separator)") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 0
        raise PackageError(manifest, line, None, f"not valid YAML: {getattr(e, 'problem', None) or e}") from None
    finally:
        loader.dispose()
    if node is None:
        raise PackageError(manifest, 0, None, "the manifest is empty; it needs name, version and ops")
    return _convert(node, loader, manifest)


def _convert(node, loader, manifest: str) -> Any:
    line = node.start_mark.line + 1
    if node.tag not in _PLAIN_TAGS:  # e.g. !!python/object/apply: plain data only
        raise PackageError(manifest, line, None, f"YAML tag {node.tag!r} is not accepted; a manifest holds "
                           "plain strings, numbers, booleans, lists and mappings")
    if isinstance(node, yaml.MappingNode):
        out = LDict()
        out.line, out.lines = line, {}
        for key_node, value_node in node.value:
            key = _convert(key_node, loader, manifest)
            kline = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise PackageError(manifest, kline, None, "YAML merge keys ('<<') are not accepted in a manifest")
            if not isinstance(key, str):
                raise PackageError(manifest, kline, str(key), "keys must be strings")
            if key in out:
                raise PackageError(manifest, kline, key, f"given twice (first at line {out.lines[key]})")
            out[key] = _convert(value_node, loader, manifest)
            out.lines[key] = kline
        return out
    if isinstance(node, yaml.SequenceNode):
        out = LList()
        out.line, out.lines = line, {}
        for i, item in enumerate(node.value):
            out.append(_convert(item, loader, manifest))
            out.lines[i] = item.start_mark.line + 1
        return out
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError as e:
        raise PackageError(manifest, line, None, f"cannot read this value: {getattr(e, 'problem', None) or e}") \
            from None
