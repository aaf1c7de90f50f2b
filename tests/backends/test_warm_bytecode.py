"""Generated numba modules' bytecode in the disk cache (backends/numba/warm_bytecode.py): a second
execution of the same text reads it instead of compiling; another text, file name or a damaged
entry is a miss that compiles the text and replaces the entry."""
import pytest

from backends import cache

wb = pytest.importorskip("backends.numba.warm_bytecode")

TEXT = "def f(x):\n    return [v * 2 for v in x]\nVALUE = f([1, 2, 3])\n"


@pytest.fixture
def compiles(monkeypatch):
    seen = []

    def counting(text, filename, mode):
        seen.append(filename)
        return compile(text, filename, mode)
    monkeypatch.setattr(wb, "compile", counting, raising=False)  # shadows the builtin in that module
    return seen


def _run(code) -> list:
    ns = {}
    exec(code, ns)
    return ns["VALUE"]


def test_the_second_execution_reads_the_bytecode(cache_dir, compiles):
    assert _run(wb.code_of(TEXT, "<gen a>", "stem_a")) == [2, 4, 6]
    assert compiles == ["<gen a>"]
    assert (cache_dir / "numba" / "stem_a.code").is_file()
    code = wb.code_of(TEXT, "<gen a>", "stem_a")
    assert compiles == ["<gen a>"] and _run(code) == [2, 4, 6] and code.co_filename == "<gen a>"


def test_another_text_or_file_name_is_a_miss(cache_dir, compiles):
    wb.code_of(TEXT, "<gen a>", "stem_b")
    assert _run(wb.code_of(TEXT.replace("* 2", "* 3"), "<gen a>", "stem_b")) == [3, 6, 9]
    assert wb.code_of(TEXT, "<gen b>", "stem_b").co_filename == "<gen b>"  # tracebacks name the right file
    assert len(compiles) == 3


def test_a_damaged_entry_is_compiled_again_and_replaced(cache_dir, compiles):
    wb.code_of(TEXT, "<gen a>", "stem_c")
    entry = cache_dir / "numba" / "stem_c.code"
    raw = bytearray(entry.read_bytes())
    raw[-5] ^= 0xFF
    entry.write_bytes(bytes(raw))
    assert _run(wb.code_of(TEXT, "<gen a>", "stem_c")) == [2, 4, 6]
    assert len(compiles) == 2
    wb.code_of(TEXT, "<gen a>", "stem_c")
    assert len(compiles) == 2  # the replaced entry is read


def test_without_a_disk_cache_the_text_is_compiled(monkeypatch, compiles):
    monkeypatch.setattr(cache, "enabled", lambda: False)
    assert _run(wb.code_of(TEXT, "<gen a>", "stem_d")) == [2, 4, 6]
    assert _run(wb.code_of(TEXT, "<gen a>", "stem_d")) == [2, 4, 6]
    assert len(compiles) == 2
