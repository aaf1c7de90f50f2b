"""The documented Python subset is the compiler's table."""
import re
from pathlib import Path

from dsl.lang.frontend import SUPPORTED

DOC = (Path(__file__).parents[2] / "docs" / "language.md").read_text()


def test_every_supported_construct_is_documented():
    rows = [line for line in DOC.splitlines() if line.startswith("| ")]
    documented = {re.split(r"(?<!\\)\|", r)[1].strip().strip("`").replace("\\|", "|") for r in rows}
    missing = [k for k in SUPPORTED if k not in documented]
    assert not missing, missing
