"""Find the runnable examples of a Markdown page, and run them: ``python tests/doc_blocks.py PAGE``
runs them in a fresh process, in an empty temporary working folder.

Every ```python block of a page runs, in order, in one namespace shared by the page's blocks.
Two HTML comments, invisible on GitHub, are the only markers (docs/writing-docs.md):

- ``<!-- doc-setup: CODE -->`` (one line, or CODE on the lines up to ``-->``) directly above a
  python block runs CODE just before it: set-up a reader need not see.
- ``<!-- doc-requires: opencl onnxruntime -->`` anywhere names what the page needs; the test skips
  the page, saying why, where one is missing (``opencl``: a usable OpenCL device; any other word:
  an importable module).

Each block is compiled under the page's own path with its lines where they stand in the page,
so a traceback, a ``dsl.CompileError`` caret and ``inspect.getsource`` of a kernel defined in a
block all point into the .md file.
"""
import os
import re
import sys
import tempfile
import traceback
import types
from dataclasses import dataclass
from pathlib import Path
from typing import List, Tuple

ROOT = Path(__file__).resolve().parents[1]  # the checkout whose examples/ pages refer to
RUNNABLE = ("python", "py", "python3")  # a fence of one of these languages runs; others do not
FENCE = re.compile(r"^(\s*)(`{3,}(?=[^`]*$)|~{3,})\s*([^\s`]*)")  # no ` after ```: an inline code span
MARKER = re.compile(r"^\s*<!--\s*doc-([\w-]*)")
SETUP = re.compile(r"^\s*<!--\s*doc-setup\b:?(.*)$")
REQUIRES = re.compile(r"^\s*<!--\s*doc-requires:(.*?)-->\s*$")


class DocFormatError(ValueError):
    """A page whose markers or fences cannot be read: the message names the page and line."""


@dataclass
class Block:
    """One python block: its code, and the 1-based line of its first code line in the page."""
    line: int
    code: str
    setup_line: int = 0   # the first line of its doc-setup code, 0 when it has none
    setup: str = ""


@dataclass
class Page:
    """What a page asks to run: its python blocks in order and its doc-requires words."""
    blocks: List[Block]
    requires: List[str]


def _setup_comment(lines: List[str], k: int, page: str) -> Tuple[int, str, int]:
    """(first code line, code, index after the comment) of the doc-setup comment opening at ``k``."""
    first = SETUP.match(lines[k]).group(1)
    if "-->" in first:  # one line: <!-- doc-setup: x = 1 -->
        return k + 1, first[:first.index("-->")].strip(), k + 1
    indent = lines[k][:len(lines[k]) - len(lines[k].lstrip())]  # a comment inside a list item
    body, j = [first.strip()] if first.strip() else [], k + 1
    start = k + 1 if first.strip() else k + 2
    while j < len(lines) and "-->" not in lines[j]:
        body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
        j += 1
    if j == len(lines):
        raise DocFormatError(f"{page}:{k + 1}: the doc-setup comment is never closed with -->")
    tail = lines[j][:lines[j].index("-->")]
    if tail.strip():
        body.append(tail)
    return start, "\n".join(body), j + 1


def _closing(lines: List[str], k: int, fence: str, page: str) -> int:
    """The index of the line closing the fence opened at ``k`` (the same character, at least as
    long, nothing after it)."""
    for j in range(k + 1, len(lines)):
        t = lines[j].strip()
        if t and set(t) == {fence[0]} and len(t) >= len(fence):
            return j
    raise DocFormatError(f"{page}:{k + 1}: the {fence} fence opened here is never closed")


def parse(text: str, page: str = "<page>") -> Page:
    """The python blocks of a page with their doc-setup code, and its requirements. Markers
    count outside fences only; a misplaced or unknown marker is an error naming its line."""
    lines = text.splitlines()
    out: List[Block] = []
    requires: List[str] = []
    pending = None  # (line of the marker, first code line, code) waiting for its block
    k = 0
    while k < len(lines):
        marker, fence = MARKER.match(lines[k]), FENCE.match(lines[k])
        if marker and marker.group(1) == "requires":
            m = REQUIRES.match(lines[k])
            if not m or not m.group(1).split():
                raise DocFormatError(f"{page}:{k + 1}: write doc-requires on one line as "
                                     "<!-- doc-requires: opencl onnxruntime -->")
            requires += [w for w in m.group(1).replace(",", " ").split() if w not in requires]
        elif marker and marker.group(1) == "setup":
            if pending:
                raise DocFormatError(f"{page}:{pending[0]}: a doc-setup comment must be followed by a "
                                     "```python block, but another doc-setup comes first")
            start, code, nxt = _setup_comment(lines, k, page)
            pending = (k + 1, start, code)
            k = nxt
            continue
        elif marker:
            raise DocFormatError(f"{page}:{k + 1}: unknown marker doc-{marker.group(1)}; "
                                 "the markers are doc-setup and doc-requires")
        elif fence:
            indent, ticks, lang = fence.groups()
            end = _closing(lines, k, ticks, page)
            if not lang:
                raise DocFormatError(f"{page}:{k + 1}: a fence needs a language: ```python runs; ```text "
                                     "(output), ```bash, ```yaml and the like do not")
            if lang.lower() in RUNNABLE:
                code = "\n".join(ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[k + 1:end])
                setup_line, setup = (pending[1], pending[2]) if pending else (0, "")
                out.append(Block(k + 2, code, setup_line, setup))
            elif pending:
                raise DocFormatError(f"{page}:{pending[0]}: a doc-setup comment must be followed by a "
                                     f"```python block, not a {ticks}{lang} block")
            pending = None
            k = end + 1
            continue
        elif pending and lines[k].strip():
            raise DocFormatError(f"{page}:{pending[0]}: a doc-setup comment must stand directly above a "
                                 f"```python block (only blank lines between), but line {k + 1} comes first")
        k += 1
    if pending:
        raise DocFormatError(f"{page}:{pending[0]}: a doc-setup comment with no ```python block after it")
    return Page(out, requires)


def _compiled(code: str, line: int, page: str):
    """``code`` compiled so that its first line is line ``line`` of ``page``."""
    return compile("\n" * (line - 1) + code + "\n", page, "exec")


def run_page(path: Path, name: str = "") -> int:
    """Run every block of ``path`` in one fresh ``__main__`` module; 0, or 1 after reporting the
    failing block (as ``name``, the path by default) with its traceback."""
    page = str(path.resolve())  # absolute: inspect finds kernel sources whatever the working folder
    name = name or str(path)
    text = path.read_text()
    # the namespace is a fresh __main__ module, as for a script: pickle finds what blocks define.
    # No __file__: multiprocessing's spawn would run the .md as the children's main script.
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    namespace = main.__dict__
    for b in parse(text, page).blocks:
        steps = ((b.setup_line, b.setup, f"doc-setup (line {b.setup_line}) of the python block at line {b.line}"),
                 (b.line, b.code, f"python block at line {b.line}"))
        for line, code, what in steps:
            if not code.strip():
                continue
            try:
                exec(_compiled(code, line, page), namespace)
            except BaseException as e:
                sys.stdout.flush()
                tb = "".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next))  # not run_page's frame
                sys.stderr.write(f"{name}: the {what} failed:\n{tb}")
                if isinstance(e, ModuleNotFoundError) and e.name:
                    top = e.name.split(".")[0]
                    sys.stderr.write(f"(a page needing the optional {top} says so with <!-- doc-requires: {top} -->, "
                                     f"and is skipped where {top} is missing)\n")
                return 1
    return 0


def run_page_in_sandbox(path: Path, name: str = "") -> int:
    """``run_page`` in an empty temporary working folder where ``examples/`` is the checkout's,
    so examples may write files (model.onnx) without touching the checkout."""
    path = path.resolve()
    with tempfile.TemporaryDirectory(prefix="opdsl-docs-") as folder:
        (Path(folder) / "examples").symlink_to(ROOT / "examples")
        os.chdir(folder)
        return run_page(path, name)


if __name__ == "__main__":
    sys.exit(run_page_in_sandbox(Path(sys.argv[1]), *sys.argv[2:3]))
