"""Hostile manifests (data that may come with a downloaded model): an alias bomb, deep nesting,
NUL bytes and a huge file are each a PackageError naming the manifest, never a traceback, a
RecursionError or gigabytes of memory."""
import pytest

from dsl.package import PackageError, check_package, yaml_lines
from tests.adversarial import isolated

# 10 levels of 9 aliases each: 9**10 values once expanded, a few hundred bytes on disk
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefghi", "bcdefghij"))


def _error(tmp_path, text) -> PackageError:
    root = tmp_path / "pkg"
    root.mkdir(exist_ok=True)
    (root / "opdsl-package.yaml").write_text(text)
    with pytest.raises(PackageError) as e:
        check_package(root)
    assert str(e.value).startswith(f"{root / 'opdsl-package.yaml'}:"), str(e.value)
    return e.value


def test_alias_bomb_is_refused_with_little_memory(tmp_path):
    # a child process capped at 1.5 GB of address space: without the cap on expanded values the
    # bomb takes gigabytes (the child then dies with MemoryError instead of printing the error)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "opdsl-package.yaml").write_text(BOMB)
    out = isolated.run(f"""
        import resource
        import dsl
        from dsl.package import PackageError
        resource.setrlimit(resource.RLIMIT_AS, (1500 << 20, 1500 << 20))
        try:
            dsl.check_package({str(tmp_path / 'pkg')!r})
        except PackageError as e:
            print("ERROR", e)
        """, timeout=120)
    assert "ERROR" in out.stdout and "expands to more than" in out.stdout, out.describe()


def test_many_aliases_are_refused(tmp_path):
    text = "a: &a [x]\nb: [" + ", ".join(["*a"] * (yaml_lines.MAX_ALIASES + 1)) + "]\n"
    e = _error(tmp_path, text)
    assert e.line == 2 and f"more than {yaml_lines.MAX_ALIASES} YAML aliases" in str(e)


def test_deep_nesting_is_an_error_not_a_recursion_error(tmp_path):
    e = _error(tmp_path, "name: " + "[" * 20000 + "]" * 20000 + "\n")
    assert f"nest deeper than {yaml_lines.MAX_DEPTH} levels" in str(e)
    e = _error(tmp_path, "".join(" " * i + "-\n" for i in range(500)))  # block style too
    assert f"nest deeper than {yaml_lines.MAX_DEPTH} levels" in str(e)


def test_nul_bytes_are_a_package_error(tmp_path):
    e = _error(tmp_path, "name: demo\nversion: 1\nops: a\x00b\n")
    assert e.line == 3 and "character U+0000" in str(e) and "printable UTF-8 text" in str(e)


def test_oversized_manifest(tmp_path):
    e = _error(tmp_path, "# padding\n" * (yaml_lines.MAX_BYTES // 10 + 1))
    assert e.line == 0 and f"larger than {yaml_lines.MAX_BYTES} bytes" in str(e)


def test_a_few_aliases_still_work(tmp_path):
    text = "name: demo\nversion: 1\nops: &o [1]\nx: *o\n"
    e = _error(tmp_path, text)  # reaches the schema: the alias itself was read
    assert "x: unknown key" in str(e)
