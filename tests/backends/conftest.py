"""Fixtures the backend tests share."""
import pytest

from backends import cache


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh cache root for one test; the process-wide decision is reset before and after."""
    d = tmp_path / "cache"
    monkeypatch.setenv("OPDSL_CACHE_DIR", str(d))
    monkeypatch.delenv("OPDSL_NO_DISK_CACHE", raising=False)
    cache.reset()
    yield d
    cache.reset()
