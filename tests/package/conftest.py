"""Fixtures for op-package tests: writing small packages into tmp_path, and leaving the op
registry as each test found it (other tests list the registered ops)."""
import textwrap
from pathlib import Path

import pytest

from tests.package.helpers import registry_restored


@pytest.fixture(autouse=True)
def _restore_registry():
    with registry_restored():
        yield


@pytest.fixture
def make_package(tmp_path):
    """make_package(manifest_yaml, **files) -> the package folder (files: name -> text)."""
    def make(manifest: str, folder: str = "pkg", **files) -> Path:
        root = tmp_path / folder
        root.mkdir(parents=True, exist_ok=True)
        (root / "opdsl-package.yaml").write_text(textwrap.dedent(manifest).lstrip("\n"))
        for name, text in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))
        return root
    return make
