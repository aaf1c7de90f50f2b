"""``opdsl check PKG`` through the agreed subcommand interface (register / run)."""
import argparse
import io

import pytest

from dsl.cli import check

from tests.package.helpers import EXAMPLE


def _parser():
    p = argparse.ArgumentParser(prog="opdsl")
    check.register(p.add_subparsers(dest="command"))
    return p


def test_check_lists_the_example_ops():
    args = _parser().parse_args(["check", str(EXAMPLE)])
    assert args.func is check.run
    out = io.StringIO()
    assert check.run(args, out=out) == 0
    text = out.getvalue()
    assert "qaic_example (format 1)" in text and "3 op(s) OK" in text
    assert "com.qaic.example::CustomRelu opsets [1, ...]" in text
    assert "inputs:  x (f32|f16, rank <= 8)" in text
    assert "params:  alpha: f32 = 0.5, beta: f32 = 0.2" in text
    assert "opencl custom_relu_f16 (raw OpenCL)" in text
    assert "hooks:   verify, select, tiling, map_tiles (functions.py)" in text


def test_check_prints_the_folder_as_seen_from_the_working_directory(monkeypatch, tmp_path):
    """Inside the working directory the folder is shown relative (as typed); outside, absolute."""
    monkeypatch.chdir(EXAMPLE.parent)
    out = io.StringIO()
    assert check.run(_parser().parse_args(["check", str(EXAMPLE)]), out=out) == 0
    assert f" at {EXAMPLE.name}: 3 op(s) OK" in out.getvalue()
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    assert check.run(_parser().parse_args(["check", str(EXAMPLE)]), out=out) == 0
    assert f" at {EXAMPLE.resolve()}: 3 op(s) OK" in out.getvalue()


def test_check_accepts_the_manifest_file_itself():
    assert check.run(_parser().parse_args(["check", str(EXAMPLE / "opdsl-package.yaml")]), out=io.StringIO()) == 0


def test_check_errors_print_the_message_alone(make_package, capsys):
    root = make_package("name: bad\nversion: 1\nops:\n  - type: X\n    colour: red\n")
    assert check.run(_parser().parse_args(["check", str(root)])) == 2
    err = capsys.readouterr().err
    assert err == f"opdsl: error: {root / 'opdsl-package.yaml'}:5: ops[0].colour: unknown key; accepted: type, domain, since, " \
                  "until, inputs, outputs, params, scratch, functions, implementations\n"


def test_check_help_has_an_example(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["check", "--help"])
    assert "opdsl check examples/qaic_package" in capsys.readouterr().out
