"""benchmarks/bench_int8.py's command line: one argparse subcommand a mode, and the positional
command lines that older RESULTS.md sections quote still mean what they meant (no run, no timing)."""
import shlex

import pytest

pytest.importorskip("onnxruntime")

from benchmarks.bench_int8 import parse  # noqa: E402


@pytest.mark.parametrize("line, want", [
    ("", dict(mode="cases", rounds=10, pick="", threads=None, pause=0.0, profile=None)),
    ('10 "" 1 --pause=0.02', dict(mode="cases", rounds=10, pick="", threads=1, pause=0.02)),
    ("--pause=0.02 10 light_ 2", dict(mode="cases", rounds=10, pick="light_", threads=2, pause=0.02)),
    ("10 light_ 1 profile", dict(mode="cases", pick="light_", threads=1, profile="profile")),
    ("cases 20 Conv 1", dict(mode="cases", rounds=20, pick="Conv", threads=1)),
    ("tiles 30 2", dict(mode="tiles", rounds=30, threads=2, shape="256,1024,1024")),
    ("tiles 5 1 64,256,128", dict(mode="tiles", rounds=5, threads=1, shape="64,256,128")),
    ('convtiles 15 "" 1', dict(mode="convtiles", rounds=15, pick="", threads=1)),
    ("saturate 10 light_ 1 --pause=0.02", dict(mode="saturate", rounds=10, pick="light_", threads=1, pause=0.02)),
    ("--pause 0.5 saturate", dict(mode="saturate", rounds=10, threads=1, pause=0.5)),
    ("nodes 8 resnet50 20 cpu", dict(mode="nodes", rounds=8, pick="resnet50", top=20, clock="cpu")),
    ("nodes 10", dict(mode="nodes", rounds=10, top=25, clock="wall")),
    ("products 15 1", dict(mode="products", rounds=15, threads=1)),
    ("pairs 15 1", dict(mode="pairs", rounds=15, threads=1)),
    ('fusion 10 "" 1', dict(mode="fusion", rounds=10, pick="", threads=1)),
    ('dynamic 40 "" 1', dict(mode="dynamic", rounds=40, pick="", threads=1)),
    ("compile", dict(mode="compile")),
])
def test_command_lines_keep_their_meaning(line, want):
    got = vars(parse(shlex.split(line)))
    assert {k: got[k] for k in want} == want


@pytest.mark.parametrize("line, named", [("nodes 8 x 20 gpu", "clock"), ("tiles ten", "rounds"),
                                         ("10 light_ 1 profiled", "profile")])
def test_bad_arguments_name_the_argument(line, named, capsys):
    with pytest.raises(SystemExit):
        parse(shlex.split(line))
    assert f"argument {named}" in capsys.readouterr().err
