"""Helpers of the command-line tests: run ``opdsl`` in-process and capture what it prints."""
import pytest


@pytest.fixture
def cli(capsys):
    """``cli("run", ...) -> (exit code, stdout, stderr)``; argparse errors (exit 2) are returned too."""
    from dsl.cli import main

    def call(*args):
        try:
            code = main.main([str(a) for a in args])
        except SystemExit as e:
            code = e.code
        out, err = capsys.readouterr()
        return code, out, err
    return call
