"""Safe YAML with line numbers: the manifest as dicts and lists that remember where each
key and item was written, so every schema error can name ``<manifest>:<line>``.

Only PyYAML's ``SafeLoader`` is used (no tags that construct Python objects); duplicate
keys, several documents and non-string keys are errors rather than silently resolved.
"""
from __future__ import annotations

from typing import Any, Dict

import yaml

from dsl.package.errors import PackageError


# Caps on what a manifest (data that may come with a downloaded model) may make the reader do:
# a real manifest is a few KB, a few levels deep, and needs no aliases to speak of.
MAX_BYTES = 1 << 20          # the file itself
MAX_DEPTH = 64               # nested lists / mappings (the composer and _convert recurse)
MAX_ALIASES = 100            # '*name' references
MAX_VALUES = 100_000         # values after aliases are expanded (an alias bomb stays small on disk)

_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq"))


class LDict(dict):
    """A mapping with ``line`` (where it starts) and ``lines[key]`` (where each key is), 1-based."""

    line: int = 0
    lines: Dict[str, int]


class LList(list):
    """A sequence with ``line`` and ``lines[i]`` for each item, 1-based."""

    line: int = 0
    lines: Dict[int, int]


class _CappedLoader(yaml.SafeLoader):
    """SafeLoader that refuses deep nesting and many aliases while composing, before either
    can exhaust the stack or memory."""

    def __init__(self, text: str, manifest: str):
        self._manifest, self._depth, self._aliases = manifest, 0, 0
        super().__init__(text)

    def compose_node(self, parent, index):
        line = self.peek_event().start_mark.line + 1
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise PackageError(self._manifest, line, None, f"more than {MAX_ALIASES} YAML aliases ('*name'); "
                                   "accepted: a manifest that writes its values out")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise PackageError(self._manifest, line, None, f"lists and mappings nest deeper than {MAX_DEPTH} "
                                   "levels; accepted: a manifest as docs/packages.md shows it")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load(text: str, manifest: str) -> Any:
    """The single YAML document in ``text`` as LDict / LList / scalars."""
    if len(text) > MAX_BYTES:
        raise PackageError(manifest, 0, None, f"the manifest has {len(text)} characters; accepted: at most "
                           f"{MAX_BYTES}")
    loader = None
    try:
        loader = _CappedLoader(text, manifest)  # the reader checks the characters here (NUL bytes)
        node = loader.get_single_node()
    except yaml.composer.ComposerError as e:
        line = e.problem_mark.line + 1 if e.problem_mark else 0
        raise PackageError(manifest, line, None, "a manifest holds one YAML document; found another "
                           "(remove the '---' separator)") from None
    except yaml.reader.ReaderError as e:  # a character YAML does not allow (NUL, other controls)
        line = text.count("\n", 0, e.position) + 1
        raise PackageError(manifest, line, None, f"not valid YAML: character U+{_code(e.character):04X} at offset "
                           f"{e.position} is not allowed; accepted: printable UTF-8 text") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 0
        raise PackageError(manifest, line, None, f"not valid YAML: {getattr(e, 'problem', None) or e}") from None
    finally:
        if loader is not None:
            loader.dispose()
    if node is None:
        raise PackageError(manifest, 0, None, "the manifest is empty; it needs name, version and ops")
    return _convert(node, loader, manifest, [0])


def _convert(node, loader, manifest: str, count: list) -> Any:
    line = node.start_mark.line + 1
    count[0] += 1
    if count[0] > MAX_VALUES:
        raise PackageError(manifest, line, None, f"the manifest expands to more than {MAX_VALUES} values (YAML "
                           "aliases repeat what they name); accepted: a manifest that writes its values out")
    if node.tag not in _PLAIN_TAGS:  # e.g. !!python/object/apply: plain data only
        raise PackageError(manifest, line, None, f"YAML tag {node.tag!r} is not accepted; a manifest holds "
                           "plain strings, numbers, booleans, lists and mappings")
    if isinstance(node, yaml.MappingNode):
        out = LDict()
        out.line, out.lines = line, {}
        for key_node, value_node in node.value:
            key = _convert(key_node, loader, manifest, count)
            kline = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise PackageError(manifest, kline, None, "YAML merge keys ('<<') are not accepted in a manifest")
            if not isinstance(key, str):
                raise PackageError(manifest, kline, str(key), "keys must be strings")
            if key in out:
                raise PackageError(manifest, kline, key, f"given twice (first at line {out.lines[key]})")
            out[key] = _convert(value_node, loader, manifest, count)
            out.lines[key] = kline
        return out
    if isinstance(node, yaml.SequenceNode):
        out = LList()
        out.line, out.lines = line, {}
        for i, item in enumerate(node.value):
            out.append(_convert(item, loader, manifest, count))
            out.lines[i] = item.start_mark.line + 1
        return out
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError as e:
        raise PackageError(manifest, line, None, f"cannot read this value: {getattr(e, 'problem', None) or e}") \
            from None


def _code(character) -> int:
    """The code point PyYAML's ReaderError reports (an int for text, a byte for bytes)."""
    return character if isinstance(character, int) else ord(character)
