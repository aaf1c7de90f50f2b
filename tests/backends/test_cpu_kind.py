"""``OPDSL_CPU`` (backends/cpu_kind.py): a process run as if on a Zen 4 or an AVX2 CPU reports
that target, compiles for it (numba's own variables), picks that kind's int8 tiles, and runs
int8 and f32 models right.  The whole-process checks run in a subprocess (the knob is read at
import); the feature arithmetic is checked here."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backends import cpu_kind, host

ROOT = Path(__file__).resolve().parents[2]
FLAGS = {"64bit": True, "sse4.2": True, "avx": True, "avx2": True, "fma": True, "f16c": True, "avx512f": True,
         "avx512bw": True, "avx512vl": True, "avx512vnni": True, "avx512fp16": True, "avxvnni": True,
         "avxvnniint8": False, "amx-tile": True, "amx-int8": True, "evex512": True}


def enabled(features: str) -> set:
    return set(host.normalize(features))


def test_zen4_keeps_avx512_vnni_and_drops_amx_fp16_and_vex_vnni():
    cpu, features = cpu_kind.restricted(FLAGS, "zen4")
    assert cpu == "znver4"
    assert enabled(features) == {"64bit", "sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                                 "avx512vnni", "evex512"}
    assert "-amx-tile" in features.split(",") and "-avxvnni" in features.split(",")


def test_avx2_kinds_drop_every_avx512_and_amx_feature():
    assert enabled(cpu_kind.restricted(FLAGS, "avx2")[1]) == {"64bit", "sse4.2", "avx", "avx2", "fma", "f16c"}
    cpu, features = cpu_kind.restricted(FLAGS, "avx2-vnni")
    assert cpu == "alderlake" and enabled(features) == {"64bit", "sse4.2", "avx", "avx2", "fma", "f16c", "avxvnni"}


def test_a_kind_never_adds_what_the_host_lacks():
    assert "sse4.2" not in enabled(cpu_kind.restricted(dict(FLAGS, **{"sse4.2": False}), "zen4")[1])
    lacking = r"OPDSL_CPU='zen4' cannot be simulated on this CPU: it lacks avx512f, avx512vnni \("
    with pytest.raises(ValueError, match=lacking):
        cpu_kind.restricted(dict(FLAGS, avx512f=False, avx512vnni=False), "zen4")
    with pytest.raises(ValueError, match="lacks avxvnni"):
        cpu_kind.restricted(dict(FLAGS, avxvnni=False), "avx2-vnni")


@pytest.mark.skipif(not {"avx2", "fma"} <= host.host().features, reason="simulating AVX2 needs an AVX2 host")
def test_apply_writes_numbas_variables_and_theirs_win():
    env = {"OPDSL_CPU": "Zen3"}  # an alias, any case
    assert cpu_kind.apply(env) == "avx2"
    assert env["NUMBA_CPU_NAME"] == "znver3" and "avx512f" not in enabled(env["NUMBA_CPU_FEATURES"])
    mine = {"OPDSL_CPU": "zen4", "NUMBA_CPU_NAME": "haswell"}
    assert cpu_kind.apply(mine) == "zen4" and mine == {"OPDSL_CPU": "zen4", "NUMBA_CPU_NAME": "haswell"}
    for unset in ({}, {"OPDSL_CPU": ""}, {"OPDSL_CPU": "host"}):
        assert cpu_kind.apply(unset) == "" and "NUMBA_CPU_NAME" not in unset


def test_an_unknown_kind_names_the_variable_and_the_accepted_kinds():
    with pytest.raises(ValueError, match=r"OPDSL_CPU='pentium'.*avx2, avx2-vnni.*zen4"):
        cpu_kind.apply({"OPDSL_CPU": "pentium"})


def test_host_reads_numbas_variables_as_numba_does():
    assert host.compiled_for({}) == (None, None)
    assert host.compiled_for({"NUMBA_CPU_NAME": "generic"}) == ("generic", frozenset())
    assert host.compiled_for({"NUMBA_CPU_NAME": "znver3", "NUMBA_CPU_FEATURES": "+avx2,-avx512f"}) == \
        ("znver3", frozenset({"avx2"}))


PROBE = r"""
import json, sys
import numpy as np
import dsl
from onnx import TensorProto, helper, numpy_helper
from ops.gemm_int8 import int8_tile
from ops.conv_int8_direct import direct_tile, choose_products
from ops.gemm_int8_amx import amx_usable

t = dsl.target("numba")
rng = np.random.default_rng(7)

def run(nodes, inputs, outputs, inits, feeds):
    g = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return dsl.load_onnx(m.SerializeToString(), backend="numba").run(feeds)

# int8: a 3x3 QLinearConv (u8 x, i8 weights, per-channel scales) with the exact integer reference
x = rng.integers(0, 256, (1, 8, 9, 9)).astype(np.uint8)
w = rng.integers(-128, 128, (16, 8, 3, 3)).astype(np.int8)
sw = rng.uniform(0.001, 0.004, 16).astype(np.float32)
inits = {"sx": np.array(0.02, np.float32), "zx": np.array(100, np.uint8), "w": w, "sw": sw,
         "zw": np.zeros(16, np.int8), "sy": np.array(0.5, np.float32), "zy": np.array(128, np.uint8)}
node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"], ["y"], pads=[1, 1, 1, 1])
yq = run([node], [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
         [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits, {"x": x})["y"]
xp = np.pad(x.astype(np.int64) - 100, ((0, 0), (0, 0), (1, 1), (1, 1)))
acc = np.zeros((1, 16, 9, 9), np.int64)
for i in range(3):
    for j in range(3):
        acc += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 9, j:j + 9], w[:, :, i, j].astype(np.int64))
want = np.clip(np.rint(acc * (0.02 * sw.astype(np.float64))[None, :, None, None] / 0.5) + 128, 0, 255)

# f32: MatMul + Relu against numpy
a = rng.standard_normal((33, 64)).astype(np.float32)
b = rng.standard_normal((64, 48)).astype(np.float32)
mm = helper.make_node("MatMul", ["a", "b"], ["m"])
relu = helper.make_node("Relu", ["m"], ["y"])
yf = run([mm, relu], [helper.make_tensor_value_info("a", TensorProto.FLOAT, a.shape)],
         [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], {"b": b}, {"a": a})["y"]

json.dump({"cpu": t.cpu, "vector_bits": t.vector_bits, "features": sorted(t.features),
           "int8_tile": [int8_tile("numba").V, int8_tile("numba").MR],
           "direct_tile": [direct_tile("numba").V, direct_tile("numba").MR],
           "products": choose_products("numba", fits=False), "amx": amx_usable("numba"),
           "int8_steps": float(np.abs(yq.astype(np.int64) - want).max()),
           "f32_err": float(np.abs(yf - np.maximum(a @ b, 0)).max())}, sys.stdout)
"""


def probe(kind: str) -> dict:
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    env = dict(os.environ, OPDSL_CPU=kind, PYTHONPATH=path)
    for name in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif("avx2" not in host.host().features, reason="an AVX2 simulation needs an AVX2 host")
def test_an_avx2_process_reports_compiles_and_runs_as_avx2():
    facts = probe("avx2")
    assert facts["cpu"] == "znver3" and facts["vector_bits"] == 256
    assert not {f for f in facts["features"] if f.startswith(("avx512", "amx", "avxvnni"))}
    assert facts["int8_tile"] == facts["direct_tile"] == [8, 4] and facts["products"] == "dot2_i16"
    assert not facts["amx"] and facts["int8_steps"] <= 1 and facts["f32_err"] < 1e-3


@pytest.mark.slow  # a second cold compile of the probe (minutes under load); the unit tests above cover the features
@pytest.mark.skipif(not {"avx512vnni", "avx512vl", "avx512bw"} <= host.host().features,
                    reason="a Zen 4 simulation needs an AVX-512 VNNI host")
def test_a_zen4_process_keeps_avx512_vnni_without_amx():
    facts = probe("zen4")
    assert facts["cpu"] == "znver4" and facts["vector_bits"] == 512
    assert "avx512vnni" in facts["features"] and not {f for f in facts["features"] if f.startswith("amx")}
    assert facts["int8_tile"] == [16, 6] and facts["direct_tile"] == [16, 8] and facts["products"] == "dot4"
    assert facts["int8_steps"] <= 1 and facts["f32_err"] < 1e-3
