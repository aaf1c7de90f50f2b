"""The command line as a whole: --version, every subcommand's --help with an example, and
argument errors that name what is accepted."""
import pytest

import dsl
from dsl.cli import main


def test_version(cli):
    code, out, _ = cli("--version")
    assert code == 0 and out.strip() == f"opdsl {dsl.version.__version__}"


def subcommands():
    return list(main.parser()._subparsers._group_actions[0].choices)


def test_every_command_module_is_listed():
    assert subcommands() == ["demo", "compile", "cache", "bench", "run", "new-package", "check"]


@pytest.mark.parametrize("command", ["demo", "compile", "cache", "bench", "run", "new-package", "check"])
def test_every_subcommand_help_shows_an_example(command, cli):
    code, out, _ = cli(command, "--help")
    assert code == 0
    assert f"usage: opdsl {command}" in out
    tail = out[out.index("example"):]
    assert f"opdsl {command} " in tail  # a whole command line, after the options


def test_top_level_help_points_to_the_commands(cli):
    code, out, _ = cli("--help")
    assert code == 0
    assert "Run `opdsl COMMAND --help`" in out
    for command in subcommands():
        assert command in out


def test_cache_clear_with_a_bogus_backend_names_the_accepted_ones(cli):
    from backends import cache
    code, _, err = cli("cache", "clear", "--backend", "bogus")
    assert code == 2
    assert "argument --backend: invalid choice: 'bogus' (choose from " in err
    for name in cache.FOLDERS:
        assert repr(name) in err


def test_cache_info_takes_no_backend(cli):
    code, _, err = cli("cache", "info", "--backend", "numba")
    assert code == 2
    assert err.strip() == ("opdsl: error: --backend numba: only `opdsl cache clear` takes a backend; "
                           "`opdsl cache info` shows every backend's entries")


@pytest.mark.parametrize("command", ["run", "bench"])
def test_a_bogus_model_backend_names_the_accepted_ones(command, cli, tmp_path):
    from backends import base
    code, _, err = cli(command, tmp_path / "m.onnx", "--output-dir", tmp_path, "--backend", "bogus")
    assert code == 2 and "invalid choice: 'bogus'" in err
    assert all(repr(b) in err for b in base.names())


def test_demo_run_takes_the_command_line_or_backend_names(monkeypatch):
    """demo.run(args) is the subcommand; Python callers pass backend names (tests, notebooks)."""
    import argparse

    from dsl.cli import demo
    seen = []
    monkeypatch.setattr(demo, "check", lambda backends, repeat, out: seen.append(backends) or 2)
    assert demo.run(argparse.Namespace(backend=["numba"])) == 1
    assert demo.run(["opencl"]) == 1 and demo.run(None) == 1
    assert seen == [["numba"], ["opencl"], None]
