"""The files of a package skeleton (``opdsl new-package``), rendered from OpSketches.

opdsl-package.yaml follows the package schema exactly (docs/packages.md); kernels.py holds one
stub ``@dsl.kernel`` per op taking its inputs, outputs and params in manifest order, whose
launch raises NotImplementedError naming the op until its body is written (the kernel
language has no ``raise``, so the stub's ``grid=`` callable, plain Python run at every launch,
raises); ``<kernel>_functions.py`` gives each op a ``verify`` template and an ``infer`` stub
for outputs whose type no input gives; ``test_<package>.py`` runs each op in a one-node
model against a numpy reference to be written.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import List

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "~"}
_NP = {"f32": "float32", "f64": "float64", "f16": "float16", "bool": "bool", "i8": "int8", "i16": "int16",
       "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
       "bf16": "bfloat16"}


def yaml_value(v) -> str:
    """A YAML flow value that safe_load reads back as ``v``."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v:
            return ".nan"
        if v in (float("inf"), float("-inf")):
            return ".inf" if v > 0 else "-.inf"
        mantissa, e, exponent = repr(v).partition("e")
        if "." not in mantissa:  # YAML 1.1 (PyYAML) reads 1e-05 as a string: 1.0e-05 is a float
            mantissa += ".0"
        return mantissa + e + exponent
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(yaml_value(x) for x in v) + "]"
    s = str(v)
    return s if _PLAIN.match(s) and s.lower() not in _YAML_WORDS else json.dumps(s)


def _flow(**items) -> str:
    return "{" + ", ".join(f"{k}: {yaml_value(v)}" for k, v in items.items() if v is not None) + "}"


def functions_file(op) -> str:
    return f"{op.kernel}_functions.py"


def manifest(name: str, ops, model_name: str) -> str:
    lines = [f"# Op package skeleton written by `opdsl new-package` from {model_name}.",
             "# The schema is in docs/packages.md; unknown keys are errors.",
             f"name: {yaml_value(name)}", "version: 1", "ops:"]
    for op in ops:
        lines += [f"  - type: {yaml_value(op.type)}", f"    domain: {yaml_value(op.domain)}"]
        if op.since is not None:
            lines.append(f"    since: {op.since}")
        lines.append("    inputs:")
        for t in op.inputs:
            item = _flow(name=t.name, max_rank=t.rank if t.rank is not None else 8,
                         dtypes=t.dtypes or None, constant=True if t.constant else None)
            note = ("   # rank not known from the model" if t.rank is None else
                    "   # rank and dtype assumed: made by a custom op, typed like that op's first input"
                    if t.assumed else "")
            lines.append(f"      - {item}{note}")
        lines.append("    outputs:")
        for t in op.outputs:
            seen = ", ".join(t.dtypes) or "dtype ?"
            note = "" if t.like else (f"   # model: {seen}, rank {t.rank if t.rank is not None else '?'}; "
                                      f"infer in {functions_file(op)}")
            lines.append(f"      - {_flow(name=t.name, like=t.like)}{note}")
        if op.params:
            lines.append("    params:")
            for p in op.params:
                if p.source:  # the model feeds this input from a QuantizeLinear
                    note = f"   # the model's QuantizeLinear: {p.default}"
                    lines.append(f"      - {_flow(name=p.name, dtype=p.dtype, size=p.size, **{'from': p.source})}"
                                 f"{note}")
                    continue
                note = "   # the model's nodes use different values" if p.varies else ""
                lines.append(f"      - {_flow(name=p.name, dtype=p.dtype, size=p.size, default=p.default)}{note}")
        lines.append(f"    functions: {functions_file(op)}")
        lines.append("    implementations:")
        for backend in ("numba", "interpreter"):
            lines.append(f"      - {_flow(backend=backend, kernel=f'kernels.py:{op.kernel}')}")
        lines.append(f"      # - {_flow(backend='opencl', source=op.kernel + '.cl', function=op.kernel)}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- kernels.py

def _annotations(op):
    """({tensor name: dtype expression}, TypeVar declarations, dtype names to import)."""
    ann, typevars, used = {}, [], set()
    for t in op.inputs + op.outputs:
        if t.like:
            ann[t.name] = ann[t.like]
        elif len(t.dtypes) == 1:
            ann[t.name] = t.dtypes[0]
            used.add(t.dtypes[0])
        else:
            tv = f"T_{op.kernel}_{t.name}"
            allowed = f", ({', '.join('dsl.' + d if d != 'bool' else 'dsl.bool_' for d in t.dtypes)},)" \
                if t.dtypes else ""
            typevars.append(f"{tv} = dsl.TypeVar({tv!r}{allowed})")
            ann[t.name] = tv
    return ann, typevars, used


def _scalar_ann(p) -> str:
    base = "dsl.f32" if p.dtype == "f32" else "dsl.i64"
    return f"dsl.Vec[{base}, {p.size}]" if p.size else base[4:]


def kernels(name: str, ops, model_name: str) -> str:
    used, blocks, tvs = set(), [], []
    for op in ops:
        ann, typevars, u = _annotations(op)
        used |= u
        tvs += typevars
        params = [f"{t.name}: In[{ann[t.name]}]" for t in op.inputs]
        params += [f"{t.name}: Out[{ann[t.name]}]" for t in op.outputs]
        for p in op.params:
            if p.dtype == "str":
                continue
            if not p.size:
                used.add(p.dtype)
            params.append(f"{p.name}: {_scalar_ann(p)}")
        strs = [p.name for p in op.params if p.dtype == "str"]
        ins = ", ".join(t.name for t in op.inputs)
        doc = [f'    """{op.type} ({op.domain}), used by node(s) {", ".join(op.nodes[:3])}'
               f'{" ..." if len(op.nodes) > 3 else ""}: TODO compute {", ".join(t.name for t in op.outputs)} '
               f'from {ins or "nothing"}.',
               "",
               "    A stub from `opdsl new-package`: launching it raises NotImplementedError until you write",
               "    the body and remove `grid=stub(...)` (or give the grid the kernel needs)."
               + (f"\n    String params ({', '.join(strs)}) reach {functions_file(op)}, not kernels." if strs else "")
               + '"""']
        body = []
        for t in op.outputs:
            zero = "False" if ann[t.name] == "bool" else "0"
            body += [f"    lo, hi = dsl.split({t.name}.size)",
                     "    for i in range(lo, hi):",
                     f"        {t.name}.flat[i] = {zero}  # TODO {op.type}"]
        blocks.append(f"@dsl.kernel(grid=stub({op.type + ' (' + op.domain + ')'!r}, {op.kernel!r}))\n" + f"def {op.kernel}({', '.join(params)}):\n" + "\n".join(doc) + "\n"
                      + "\n".join(body) + "\n")
    names = ", ".join(["In", "Out"] + sorted(d if d != "bool" else "bool_" for d in used))
    head = (f'"""Kernels of the {name} op package (stubs written by `opdsl new-package` from {model_name}).\n\n'
            "Each kernel takes its op's inputs, outputs and params in the manifest's order\n"
            '(opdsl-package.yaml); the language is in docs/language.md."""\n'
            f"import dsl\nfrom dsl import {names}\n")
    tv_text = ("\n" + "\n".join(tvs) + "\n") if tvs else ""
    return head + tv_text + "\n\n" + STUB + "\n\n" + "\n\n".join(blocks)


STUB = '''def stub(op, kernel):
    """grid= of a stub kernel: plain Python run at each launch, so it can raise (kernels cannot)."""
    def launch(args):
        raise NotImplementedError(f"{op}: kernels.py:{kernel} is a stub from `opdsl new-package`; "
                                  "write its body, then remove grid=stub(...)")
    return launch
'''



# --------------------------------------------------------------------------- functions

def functions(op) -> str:
    needs_infer = [t.name for t in op.outputs if not t.like]
    text = (f'"""verify / infer of {op.type} ({op.domain}) for opdsl (written by `opdsl new-package`)."""\n\n\n'
            "def verify(op, *specs):\n"
            f'    """Check the input specs of a {op.type} node (dtype, shape) before it runs: raise\n'
            '    dsl.VerifyError naming the input, what was given and what is accepted. Accepts all as written."""\n'
            "    return None\n")
    if needs_infer:
        seen = "; ".join(f"{t.name}: {', '.join(t.dtypes) or 'dtype ?'}, shape {list(t.shape) if t.shape else '?'}"
                         for t in op.outputs if not t.like)
        text += ("\n\n"
                 "def infer(op, *specs):\n"
                 f'    """The spec (dtype and shape) of each output without `like:` ({", ".join(needs_infer)}) from\n'
                 f'    the input specs. In the model: {seen}."""\n'
                 f"    raise NotImplementedError({op.type + ': infer the output specs in ' + functions_file(op)!r})\n")
    return text


# --------------------------------------------------------------------------- the test file

def _dims(t):
    if t.shape is None:
        return [2, 3] if t.rank is None else [2] * t.rank
    return [d if isinstance(d, int) and d > 0 else 2 for d in t.shape]


def tests(name: str, ops, model_name: str, main_opset: int) -> str:
    out = [f'"""Tests of the {name} op package (written by `opdsl new-package` from {model_name}).',
           "",
           "Each op runs in a one-node model with the attributes the model used, on random inputs, on",
           'the interpreter and numba, and must match its numpy reference: write the references first."""',
           "from pathlib import Path", "", "import numpy as np", "import pytest", "", "import dsl", "",
           "HERE = Path(__file__).resolve().parent", f"OPSET = {main_opset}", "", "",
           "def one_node_model(op_type, domain, version, inputs, constants, outputs, attrs, quant=None):",
           '    """A model of one node: ``inputs`` are fed, ``constants`` are initializers; an input named in',
           "    ``quant`` ({name: (scale, zero_point)}, as the model's QuantizeLinear) is fed as float",
           '    ``<name>_float`` and quantized by a QuantizeLinear in front of the node."""',
           "    from onnx import helper, numpy_helper",
           "    quant = quant or {}",
           "    node = helper.make_node(op_type, list(inputs) + list(constants), outputs, domain=domain, **attrs)",
           "    nodes, inits, feeds = [], [numpy_helper.from_array(a, n) for n, a in constants.items()], []",
           "    for n, a in inputs.items():",
           "        if n not in quant:",
           "            feeds.append(helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))",
           "            continue",
           "        scale, zero_point = quant[n]",
           "        feeds.append(helper.make_tensor_value_info(n + '_float', helper.TensorProto.FLOAT, a.shape))",
           "        inits += [numpy_helper.from_array(np.asarray(scale, np.float32), n + '_scale'),",
           "                  numpy_helper.from_array(np.asarray(zero_point, a.dtype), n + '_zero_point')]",
           "        nodes.append(helper.make_node('QuantizeLinear', [n + '_float', n + '_scale', n + '_zero_point'], [n]))",
           "    graph = helper.make_graph(nodes + [node], op_type, feeds, [helper.ValueInfoProto(name=o) for o in outputs],",
           "                              inits)",
           "    opsets = [helper.make_opsetid('', OPSET)] + ([helper.make_opsetid(domain, version)] if domain else [])",
           "    return helper.make_model(graph, opset_imports=opsets)",
           "", "",
           "def quantize(x, scale, zero_point, dtype):",
           '    """QuantizeLinear in numpy (round half to even, saturate): the values the op receives."""',
           "    info = np.iinfo(dtype)",
           "    return np.clip(np.rint(x / np.float32(scale)) + zero_point, info.min, info.max).astype(dtype)",
           "", "",
           "def random(shape, dtype, rng):",
           "    dtype = np.dtype(dtype)",
           "    if dtype.kind == 'f':",
           "        return rng.standard_normal(shape).astype(dtype)",
           "    if dtype.kind == 'b':",
           "        return rng.random(shape) < 0.5",
           "    return rng.integers(0, 4, shape).astype(dtype)", ""]
    for op in ops:
        feeds = [t for t in op.inputs if not t.constant]
        consts = [t for t in op.inputs if t.constant]
        attrs = {p.name: p.default for p in op.params if not p.source}
        qparams = {p.name: p.default for p in op.params if p.source}
        quant = {t.name: (t.quant[0][0], t.quant[1][0]) for t in feeds if t.quant}
        args = ", ".join([t.name for t in op.inputs] + [f"{p}" for p in attrs] + list(qparams))
        dt = lambda t: _NP.get(t.dtypes[0], "float32") if t.dtypes else "float32"  # noqa: E731
        out += ["",
                f"def reference_{op.kernel}({args}):",
                f'    """{op.type} in numpy: what the kernel must compute -> '
                f'{"the output" if len(op.outputs) == 1 else "a tuple of the outputs"}."""',
                f"    raise NotImplementedError('{op.type}: write the numpy reference in ' + __file__)",
                "", "",
                '@pytest.mark.parametrize("backend", ["interpreter", "numba"])',
                f"def test_{op.kernel}(backend):",
                "    rng = np.random.default_rng(0)",
                "    inputs = {" + ", ".join(f"{t.name!r}: random({tuple(_dims(t))}, {dt(t)!r}, rng)" for t in feeds) + "}",
                f"    quant = {quant!r}  # input -> (scale, zero point) of the model's QuantizeLinear",
                "    floats = {n + '_float': rng.standard_normal(a.shape).astype(np.float32) for n, a in inputs.items()",
                "              if n in quant}",
                "    for n, (scale, zero_point) in quant.items():  # the values the QuantizeLinear gives the op",
                "        inputs[n] = quantize(floats[n + '_float'], scale, zero_point, inputs[n].dtype)",
                "    constants = {" + ", ".join(f"{t.name!r}: random({tuple(_dims(t))}, {dt(t)!r}, rng)"
                                               for t in consts) + "}",
                f"    attrs = {attrs!r}",
                f"    outputs = {[t.name for t in op.outputs]!r}",
                f"    model = one_node_model({op.type!r}, {op.domain!r}, {op.since or 1}, inputs, constants, outputs, attrs,"
                " quant)",
                "    feeds = {**{n: a for n, a in inputs.items() if n not in quant}, **floats}",
                "    got = dsl.load_onnx(model, packages=[HERE], backend=backend).run(feeds)",
                f"    qparams = {qparams!r}  # filled from the quantization (from: <input>.scale / .zero_point)",
                f"    want = reference_{op.kernel}(**inputs, **constants, **attrs, **qparams)",
                "    for name, ref in zip(outputs, want if len(outputs) > 1 else [want]):",
                "        np.testing.assert_allclose(got[name], ref, rtol=1e-5, atol=1e-6)", ""]
    return "\n".join(out)


def write(folder: Path, name: str, ops, model_name: str, main_opset: int = 17) -> List[Path]:
    """Write every file of the skeleton into ``folder`` (created) -> the paths, the test file last."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {"opdsl-package.yaml": manifest(name, ops, model_name), "kernels.py": kernels(name, ops, model_name)}
    for op in ops:
        files[functions_file(op)] = functions(op)
    files[f"test_{name}.py"] = tests(name, ops, model_name, main_opset)
    written = []
    for fname, text in files.items():
        path = folder / fname
        with open(path, "x", encoding="utf-8") as f:  # "x": never overwrite
            f.write(text)
        written.append(path)
    return written
