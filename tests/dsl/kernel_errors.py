"""The typing-error check the builtin tests share (tests/dsl/test_dot4.py, test_tiles.py): a bad
kernel written to a real file, so the CompileError can name its file and line."""
from __future__ import annotations

import runpy

import pytest

import dsl


def assert_compile_error(tmp_path, filename: str, source: str, line: int, words) -> None:
    """Compiling the kernel ``bad`` that ``source`` defines (for numba) raises a CompileError that
    names ``filename:line`` and every one of ``words``."""
    path = tmp_path / filename
    path.write_text(source)
    scope = runpy.run_path(str(path))
    with pytest.raises(dsl.CompileError) as err:
        scope["bad"].source("numba")
    text = str(err.value)
    assert f"{filename}:{line}" in text, text
    for w in words:
        assert w in text, text
