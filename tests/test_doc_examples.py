"""Every ```python block of README.md and docs/*.md runs, in order, one page per case.

A page's blocks share one namespace; each page runs in its own Python process (in an empty
temporary working folder that sees the checkout's ``examples/``: tests/doc_blocks.py), so no
page can lean on another or on what an earlier case registered. The markers and fence rules: docs/writing-docs.md.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from doc_blocks import DocFormatError, parse  # tests/ is on sys.path: its files have no package

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNER = Path(__file__).with_name("doc_blocks.py")
PAGE_TIMEOUT = 600  # seconds; a cold compile cache on a loaded machine


def _missing(word: str) -> str:
    """Why requirement ``word`` is not met here, or "" when it is."""
    if word == "opencl":
        from backends import base
        try:
            reason = base.get("opencl").available()
        except ImportError as e:  # pyopencl missing
            reason = str(e)
        return f"no usable OpenCL device: {reason}" if reason else ""
    return "" if importlib.util.find_spec(word) else f"the module {word!r} is not installed"


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_page_runs(page):
    name = page.relative_to(ROOT).as_posix()
    try:
        requires = parse(page.read_text(), name).requires
    except DocFormatError as e:
        bad = str(e)
    else:
        bad = ""
    if bad:  # failed outside the except: the message once, without "During handling..."
        pytest.fail(bad, pytrace=False)
    for word in requires:
        why = _missing(word)
        if why:
            pytest.skip(f"{name} needs {word}: {why}")
    env = dict(os.environ, MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    try:
        done = subprocess.run([sys.executable, str(RUNNER), str(page), name], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=PAGE_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: its blocks did not finish within {PAGE_TIMEOUT} s", pytrace=False)
    if done.returncode:
        printed = "\n".join(done.stdout.splitlines()[-20:])
        pytest.fail(f"{done.stderr}\n--- the page's last printed lines:\n{printed}" if printed.strip()
                    else done.stderr, pytrace=False)


def test_a_missing_requirement_skips_with_its_reason():
    assert _missing("numpy") == ""
    assert _missing("no_such_module_for_docs") == "the module 'no_such_module_for_docs' is not installed"
