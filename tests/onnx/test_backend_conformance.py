"""ONNX's own backend node tests (``onnx.backend.test``) for the ops opdsl implements.

A small ``onnx.backend.base.Backend`` adapter runs each test model through
``dsl.load_onnx`` on the numba backend and compares with onnx's expected outputs
using the runner's own tolerance check.  Only the test modules of our ops are
imported (importing every node test costs ~15 s), then the cases are filtered by
include patterns; the excluded ones are listed with the reason.
"""
from __future__ import annotations

import importlib
import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx.backend.base import Backend, BackendRep  # noqa: E402
from onnx.backend.test.runner import Runner  # noqa: E402

import dsl  # noqa: E402
import ops  # noqa: E402,F401

BACKEND = "numba"

# onnx.backend.test.case.node modules holding the tests of our ops
MODULES = ("add", "sub", "mul", "relu", "leakyrelu", "sigmoid", "tanh", "gemm", "matmul", "reshape",
           "transpose", "conv", "quantizelinear", "dequantizelinear", "identity", "batch_normalization", "clip")
INCLUDE = [r"^test_(add|sub|mul|relu|leakyrelu|sigmoid|tanh|gemm|matmul|reshape|transpose|conv|"
           r"quantizelinear|dequantizelinear|identity|batchnorm|clip)(_|$)"]
EXCLUDE = {
    r"_expanded": "function-expanded variants use ops outside this library (Where, Less, ...)",
    r"e4m3|e5m2|float4|int4|uint4|int2|uint2": "float8/float4/4-bit/2-bit types are not opdsl dtypes",
    r"^test_identity_(sequence|opt)": "sequence and optional types are not supported",
    r"^test_batchnorm_.*training_mode": "BatchNormalization runs inference only (training_mode=1 is an error)",
}


class OpdslRep(BackendRep):
    def __init__(self, model, input_names, output_names):
        self.model, self.input_names, self.output_names = model, input_names, output_names

    def run(self, inputs, **kwargs):
        feeds = dict(zip(self.input_names, inputs))
        out = self.model.run(feeds)
        return [out[n] for n in self.output_names]


class OpdslBackend(Backend):
    """onnx backend API over dsl.load_onnx."""

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs):
        init = {t.name for t in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in init]
        return OpdslRep(dsl.load_onnx(model, backend=BACKEND), names, [o.name for o in model.graph.output])

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"


def _cases():
    from onnx.backend.test.case import node as node_cases
    for m in MODULES:
        importlib.import_module(f"onnx.backend.test.case.node.{m}")
    seen, out = set(), []
    for case in node_cases._NodeTestCases:
        if case.name in seen or not any(re.search(p, case.name) for p in INCLUDE):
            continue
        seen.add(case.name)
        reason = next((why for p, why in EXCLUDE.items() if re.search(p, case.name)), None)
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        out.append(pytest.param(case, id=case.name, marks=marks))
    return out


CASES = _cases()


def test_cases_were_found():
    assert len(CASES) > 60


@pytest.mark.parametrize("case", CASES)
def test_node(case):
    rep = OpdslBackend.prepare(case.model)
    for inputs, expected in case.data_sets:
        inputs = [np.asarray(onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x)
                  for x in inputs]
        expected = [np.asarray(onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x)
                    for x in expected]
        outputs = rep.run(inputs)
        Runner.assert_similar_outputs(expected, outputs, rtol=case.rtol, atol=case.atol)
