"""Whole models to benchmark and test opdsl on: a BERT-style encoder layer built here with
``onnx.helper``, and the light CNNs the onnx wheel ships.

The encoder layer is written out op by op -- MatMul, Add, Reshape, Transpose, Div, Softmax,
Erf-GELU (Div, Erf, Add, Mul: not the fused Gelu op), LayerNormalization, and a causal
mask added to the attention scores -- because that is the mix of ops a transformer
exporter emits, and each of them must exist in opdsl for the model to load.  Weights are
random (seeded), so the file is the same on every machine; it is written once into a
cache folder and reused.

    python -m benchmarks.models            # writes the BERT layer, prints its path and the light CNNs
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Optional

import numpy as np

OPSET = 17          # LayerNormalization exists from opset 17
IR_VERSION = 8      # read by every onnxruntime of the last years
MASK_VALUE = -1e4   # added to the scores above the diagonal: exp() of it is 0 in f32, no inf - inf

# the nine light CNNs of onnx/backend/test/data/light: short name -> file stem
LIGHT_MODELS: Dict[str, str] = {
    "alexnet": "bvlc_alexnet", "densenet121": "densenet121", "inception_v1": "inception_v1",
    "inception_v2": "inception_v2", "resnet50": "resnet50", "shufflenet": "shufflenet",
    "squeezenet": "squeezenet", "vgg19": "vgg19", "zfnet512": "zfnet512",
}


def cache_dir(folder: Optional[str] = None) -> Path:
    """Where built models are written: ``folder``, else $OPDSL_BENCH_MODELS, else
    ``<opdsl cache>/bench-models`` (OPDSL_CACHE_DIR, default ~/.cache/opdsl)."""
    if folder is None:
        folder = os.environ.get("OPDSL_BENCH_MODELS")
    if folder is None:
        from dsl import config
        folder = os.path.join(str(config.cache_dir()), "bench-models")
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


def random_feeds(proto) -> Dict[str, np.ndarray]:
    """Seeded standard-normal f32 input for ``proto``'s first non-initializer input (dimensions
    the model leaves open set to 1): the same feed for opdsl and onnxruntime in every benchmark."""
    inits = {t.name for t in proto.graph.initializer}
    inp = next(i for i in proto.graph.input if i.name not in inits)
    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
    return {inp.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


def light_model_path(name: str) -> Path:
    """The path of ``light_<name>.onnx`` in the installed onnx wheel (``alexnet`` is
    ``bvlc_alexnet``).  Its expected output for onnx's generated input is the
    ``light_<name>_output_0.pb`` next to it."""
    import onnx
    stem = LIGHT_MODELS.get(name, name)
    if stem not in LIGHT_MODELS.values():
        raise ValueError(f"unknown light model {name!r}; known: {', '.join(LIGHT_MODELS)}")
    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{stem}.onnx"
    if not path.exists():
        raise FileNotFoundError(f"{path} is not in this onnx install (the light models ship with onnx >= 1.15)")
    return path


def bert_layer_model(batch: int = 1, seq: int = 128, d_model: int = 256, heads: int = 4, ff: int = 1024,
                     seed: int = 0, eps: float = 1e-5):
    """One post-LN BERT encoder layer with a causal mask -> ``onnx.ModelProto``.

    Input ``x``: (batch, seq, d_model) f32; output ``y`` of the same shape:
        h = LayerNorm(x + Attention(x)),  y = LayerNorm(h + W2 · GELU(W1 · h))
    Attention: 4 projections, heads split by Reshape + Transpose, scores / sqrt(d_head)
    + causal mask, Softmax over the keys, heads merged back."""
    from onnx import TensorProto, helper, numpy_helper
    if d_model % heads:
        raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")
    d_head = d_model // heads
    rng = np.random.default_rng(seed)
    inits = []
    nodes = []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(name, shape, scale):
        return const(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def node(op, ins, name, **attrs):
        nodes.append(helper.make_node(op, ins, [name], name=name, **attrs))
        return name

    def linear(x, prefix, d_in, d_out):
        w = weight(f"{prefix}.weight", (d_in, d_out), 1 / np.sqrt(d_in))
        b = weight(f"{prefix}.bias", (d_out,), 0.02)
        return node("Add", [node("MatMul", [x, w], f"{prefix}/MatMul"), b], f"{prefix}/Add")

    def layer_norm(x, prefix):
        g = const(f"{prefix}.gamma", (1 + 0.1 * rng.standard_normal(d_model)).astype(np.float32))
        b = weight(f"{prefix}.beta", (d_model,), 0.1)
        return node("LayerNormalization", [x, g, b], f"{prefix}/LayerNorm", axis=-1, epsilon=eps)

    split_shape = const("heads_shape", np.array([0, 0, heads, d_head], np.int64))
    merge_shape = const("merge_shape", np.array([0, 0, d_model], np.int64))

    def split_heads(x, prefix, perm):
        r = node("Reshape", [x, split_shape], f"{prefix}/split_heads")
        return node("Transpose", [r], f"{prefix}/transpose", perm=perm)

    q = split_heads(linear("x", "attn.q", d_model, d_model), "attn.q", [0, 2, 1, 3])   # (B, H, S, Dh)
    k = split_heads(linear("x", "attn.k", d_model, d_model), "attn.k", [0, 2, 3, 1])   # (B, H, Dh, S)
    v = split_heads(linear("x", "attn.v", d_model, d_model), "attn.v", [0, 2, 1, 3])   # (B, H, S, Dh)
    scores = node("MatMul", [q, k], "attn/scores")
    scaled = node("Div", [scores, const("attn.sqrt_dh", np.array(np.sqrt(d_head), np.float32))], "attn/scale")
    mask = np.triu(np.full((seq, seq), MASK_VALUE, np.float32), k=1)  # key j > query i is hidden
    masked = node("Add", [scaled, const("attn.causal_mask", mask)], "attn/mask")
    probs = node("Softmax", [masked], "attn/softmax", axis=-1)
    ctx = node("MatMul", [probs, v], "attn/context")
    merged = node("Reshape", [node("Transpose", [ctx], "attn/merge_transpose", perm=[0, 2, 1, 3]), merge_shape],
                  "attn/merge_heads")
    attn = linear(merged, "attn.out", d_model, d_model)
    h = layer_norm(node("Add", ["x", attn], "attn/residual"), "ln1")
    f = linear(h, "ff.in", d_model, ff)
    # GELU(f) = 0.5 · f · (1 + erf(f / sqrt 2)), spelled out as exporters do without a Gelu op
    erf = node("Erf", [node("Div", [f, const("gelu.sqrt2", np.array(np.sqrt(2), np.float32))], "gelu/div")], "gelu/erf")
    one_plus = node("Add", [erf, const("gelu.one", np.array(1, np.float32))], "gelu/add")
    gelu = node("Mul", [node("Mul", [f, one_plus], "gelu/mul"), const("gelu.half", np.array(0.5, np.float32))],
                "gelu/half")
    o = linear(gelu, "ff.out", ff, d_model)
    y = layer_norm(node("Add", [h, o], "ff/residual"), "ln2")
    nodes.append(helper.make_node("Identity", [y], ["y"], name="output"))
    shape = [batch, seq, d_model]
    graph = helper.make_graph(nodes, "bert_layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="opdsl-benchmarks")
    model.ir_version = IR_VERSION
    return model


def bert_layer(folder: Optional[str] = None, **config) -> Path:
    """The BERT layer's .onnx file in the cache folder (written on first use) -> its path.
    ``config``: ``bert_layer_model``'s arguments; each configuration is its own file."""
    import onnx
    cfg = dict(batch=1, seq=128, d_model=256, heads=4, ff=1024, seed=0)
    cfg.update(config)
    name = "bert_layer_b{batch}_s{seq}_d{d_model}_h{heads}_ff{ff}_seed{seed}.onnx".format(**cfg)
    path = cache_dir(folder) / name
    if not path.exists():
        model = bert_layer_model(**cfg)
        onnx.checker.check_model(model)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        onnx.save(model, str(tmp))
        os.replace(tmp, path)  # another process may be writing the same file
    return path


def bert_layer_reference(x: np.ndarray, model) -> np.ndarray:
    """The layer computed with numpy from the model's own weights (checks the builder)."""
    from onnx import numpy_helper
    from math import erf
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    heads = int(w["heads_shape"][2])
    x = x.astype(np.float64)
    b, s, d = x.shape

    def lin(t, p):
        return t @ w[f"{p}.weight"] + w[f"{p}.bias"]

    def ln(t, p):
        mu = t.mean(-1, keepdims=True)
        var = ((t - mu) ** 2).mean(-1, keepdims=True)
        return (t - mu) / np.sqrt(var + 1e-5) * w[f"{p}.gamma"] + w[f"{p}.beta"]

    def split(t):
        return t.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)

    q, k, v = split(lin(x, "attn.q")), split(lin(x, "attn.k")), split(lin(x, "attn.v"))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // heads) + w["attn.causal_mask"]
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ctx = (p @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
    h = ln(x + lin(ctx, "attn.out"), "ln1")
    f = lin(h, "ff.in")
    gelu = 0.5 * f * (1 + np.vectorize(erf)(f / np.sqrt(2)))
    return ln(h + lin(gelu, "ff.out"), "ln2")


if __name__ == "__main__":
    print(bert_layer())
    for short in LIGHT_MODELS:
        print(light_model_path(short))
