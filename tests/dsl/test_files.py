"""dsl/files.py: the one way opdsl opens files someone else may have placed (cache entries,
autotune records, ONNX models and data, carried package files): regular files only, opened
without blocking, read up to a cap."""
import os

import pytest

from dsl import files


def test_a_regular_file_is_read_whole_or_up_to_the_cap(tmp_path):
    p = tmp_path / "entry"
    p.write_bytes(b"x" * 100)
    assert files.read_regular(p) == b"x" * 100
    assert files.read_regular(p, 100) == b"x" * 100
    with pytest.raises(files.FileTooLarge, match="holds more than 99 bytes"):
        files.read_regular(p, 99)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: a plain open() would block forever
    with pytest.raises(files.NotARegularFile) as e:
        files.read_regular(fifo)
    assert e.value.kind == "a FIFO (named pipe)" and str(fifo) in str(e.value)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_is_refused_not_read_forever():
    with pytest.raises(files.NotARegularFile, match="/dev/zero is a character device, not a regular file"):
        files.read_regular("/dev/zero", 1 << 20)


def test_folders_and_symlinks(tmp_path):
    with pytest.raises(files.NotARegularFile, match="is a directory"):
        files.read_regular(tmp_path)
    (tmp_path / "target").write_bytes(b"1")
    os.symlink(tmp_path / "target", tmp_path / "link")
    assert files.read_regular(tmp_path / "link") == b"1"
    with pytest.raises(OSError):
        files.read_regular(tmp_path / "link", follow_symlinks=False)
