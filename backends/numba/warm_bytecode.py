"""The bytecode of generated numba modules, kept in the disk cache beside their source.

A warm process rebuilds a kernel's launcher by executing the module the front-end record holds
(backends/numba/warm.py); Python's ``compile`` of that text cost 15-25 ms a module, ~0.15 s of
``dsl.load_model`` for light_resnet50's 7 modules.  The compiled code object is stored as
``numba/<stem>.code``: Python's bytecode magic number and the sha256 of the file name and the
exact text compiled, then ``marshal`` data, framed and checksummed by ``backends.cache.store``
in the private cache folder (the trust rules of the machine code beside it, docs/cache.md).
Another Python, another text or another file name is a miss: the text is compiled and the entry
replaced.  Without a disk cache the text is compiled, as before.
"""
from __future__ import annotations

import hashlib
import importlib.util
import marshal
import types as pytypes

from backends import cache

CACHE_TAG = "numba"
SUFFIX = ".code"


def _stamp(text: str, filename: str) -> bytes:
    return importlib.util.MAGIC_NUMBER + hashlib.sha256(f"{filename}\0{text}".encode("utf-8")).digest()


def code_of(text: str, filename: str, stem: str) -> pytypes.CodeType:
    """``compile(text, filename, "exec")``, read from the cache when it holds it for this text."""
    if not cache.enabled():
        return compile(text, filename, "exec")
    name = stem + SUFFIX
    stamp = _stamp(text, filename)
    data = cache.load(CACHE_TAG, name)
    if data is not None and data[:len(stamp)] == stamp:
        try:
            code = marshal.loads(data[len(stamp):])
            if isinstance(code, pytypes.CodeType):
                return code
        except (ValueError, EOFError, TypeError):
            pass  # damaged past its checksum (another marshal format): compiled and replaced below
    code = compile(text, filename, "exec")
    cache.store(CACHE_TAG, name, stamp + marshal.dumps(code))
    return code
