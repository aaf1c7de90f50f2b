"""int8 ops against onnxruntime in the same process (issue 29): QLinearMatMul, MatMulInteger and
DynamicQuantizeLinear -> MatMulInteger at 256×1024×1024 (the packed u8×i8 GEMM, ops/gemm_int8.py;
fused with its Cast, scale and bias into MatMulIntegerToFloat, ops/quant_matmul_float.py) and the
BERT layer quantized by quantize_dynamic,
QLinearConv and ConvInteger 64×56×56 and 256×14×14 3×3, QLinearConv on ResNet-50's eight conv
shapes (ops/conv_int8_direct.py; strided ones through space-to-depth, ops/conv_int8_strided.py),
and onnx's light_squeezenet and light_resnet50 quantized by onnxruntime's quantize_static (QDQ,
u8 activations, i8 weights, calibrated on 4 random images), whose float outputs are compared.
Each case is one ONNX model run by ``dsl.load_onnx(..., backend="numba")`` and by an onnxruntime
session with as many threads as cores (not spinning between runs, which would take the cores from
the opdsl round that follows); the two sides alternate, round by round, each keeping its
best time.  Weights are 7-bit (-64..63) so that onnxruntime's AVX2 u8·i8 path (vpmaddubsw, which
saturates on full-range weights) gives exact sums; both sides' outputs are compared.  Each side's best wall
and best process CPU time are printed (CPU: what a loaded, shared machine disturbs least).
With a third argument ``1`` both sides run on one thread (onnxruntime's intra-op pool and numba's
workers), which a loaded machine disturbs far less than two threads that wait for each other.
A fourth argument ``profile`` prints, after each case, where opdsl's time goes by op type
(``model.profile``) and which nodes the compiled graph has: the quantized models' float or Q/DQ
nodes left between layers show there.
``--pause=S`` (anywhere) sleeps S seconds before each timed side, so the two sides' thread pools
settle between rounds; ``NUMBA_THREADING_LAYER=omp|workqueue`` picks numba's layer (two-thread rows).
Usage: PYTHONPATH=. python benchmarks/bench_int8.py [cases] [rounds] [case-filter] [threads] [profile] [--pause=0.02]
       PYTHONPATH=. python benchmarks/bench_int8.py MODE --help   (pairs, products, tiles, order, wake, outalign, convtiles, fusion,
                                                              dynamic, compile, saturate, nodes: one
                                                              subcommand a mode)"""
import argparse
import os
import sys
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import dsl

RNG = np.random.default_rng(29)


def model(nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def weights(*shape):
    return RNG.integers(-64, 64, shape).astype(np.int8)


def qlinear_matmul(m=256, k=1024, n=1024):
    inits = {"sa": np.array(0.02, np.float32), "za": np.array(128, np.uint8), "b": weights(k, n),
             "sb": np.array(0.004, np.float32), "zb": np.array(0, np.int8), "sy": np.array(0.3, np.float32),
             "zy": np.array(128, np.uint8)}
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    return (model([node], [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])],
                  [helper.make_tensor_value_info("y", TensorProto.UINT8, [m, n])], inits),
            {"a": RNG.integers(0, 256, (m, k)).astype(np.uint8)})


def matmul_integer(m=256, k=1024, n=1024):
    node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
    inits = {"b": weights(k, n), "za": np.array(128, np.uint8), "zb": np.array(0, np.int8)}
    return (model([node], [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])],
                  [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])], inits),
            {"a": RNG.integers(0, 256, (m, k)).astype(np.uint8)})


def dynamic_matmul(m=256, k=1024, n=1024, bias=False):
    """The pattern onnxruntime's quantize_dynamic writes for a MatMul (and its bias Add: the
    BERT layer's feed-forward input, 128x256x1024, with ``bias``)."""
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xs", "ws"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["yb" if bias else "y"])]
    inits = {"w": weights(k, n), "wz": np.array(0, np.int8), "ws": np.array(0.01, np.float32)}
    if bias:
        nodes.append(helper.make_node("Add", ["yb", "b"], ["y"]))
        inits["b"] = RNG.standard_normal(n).astype(np.float32)
    return (model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits),
            {"x": RNG.standard_normal((m, k)).astype(np.float32)})


def qlinear_conv(c, h, m, k=3, stride=1):
    """QLinearConv with per-channel weight scales and a bias, padded to keep the size (k // 2)."""
    inits = {"sx": np.array(0.02, np.float32), "zx": np.array(128, np.uint8), "w": weights(m, c, k, k),
             "sw": RNG.uniform(0.002, 0.006, m).astype(np.float32), "zw": np.zeros(m, np.int8),
             "sy": np.array(0.5, np.float32), "zy": np.array(128, np.uint8),
             "b": RNG.integers(-3000, 3000, m).astype(np.int32)}
    p, o = k // 2, (h + 2 * (k // 2) - k) // stride + 1
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"], ["y"],
                            pads=[p] * 4, strides=[stride] * 2)
    return (model([node], [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, c, h, h])],
                  [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, m, o, o])], inits),
            {"x": RNG.integers(0, 256, (1, c, h, h)).astype(np.uint8)})


def conv_integer(c, h, m, k=3):
    inits = {"w": weights(m, c, k, k), "zx": np.array(128, np.uint8), "zw": np.array(0, np.int8)}
    node = helper.make_node("ConvInteger", ["x", "w", "zx", "zw"], ["y"], pads=[k // 2] * 4)
    return (model([node], [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, c, h, h])],
                  [helper.make_tensor_value_info("y", TensorProto.INT32, [1, m, h, h])], inits),
            {"x": RNG.integers(0, 256, (1, c, h, h)).astype(np.uint8)})


class _Calibration:
    """A few random images for quantize_static's calibration."""

    def __init__(self, name, shape, count=4):
        self.feeds = iter([{name: RNG.standard_normal(shape).astype(np.float32)} for _ in range(count)])

    def get_next(self):
        return next(self.feeds, None)


def quantized_model(name):
    """onnx's light_<name> quantized by onnxruntime's quantize_static: QDQ, u8 activations, i8
    (symmetric) weights, calibrated on random images; -> (model, feeds)."""
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")
    src = onnx.load(path)
    inits = {i.name for i in src.graph.initializer}
    inp = next(i for i in src.graph.input if i.name not in inits)
    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "q.onnx")
        quantize_static(path, out, _Calibration(inp.name, shape), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        q = onnx.load(out)
    return q, {inp.name: RNG.standard_normal(shape).astype(np.float32)}


def dynamic_quantized_bert():
    """benchmarks/models.py's BERT encoder layer (seq 128, d 256, ff 1024) quantized by
    onnxruntime's quantize_dynamic (u8 activations quantized at run time, i8 weights): every
    MatMul with a weight becomes DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul, the Q, K
    and V products sharing one DynamicQuantizeLinear; -> (model, feeds)."""
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from benchmarks.models import bert_layer
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "q.onnx")
        quantize_dynamic(str(bert_layer()), out, weight_type=QuantType.QInt8)
        q = onnx.load(out)
    shape = [d.dim_value or 1 for d in q.graph.input[0].type.tensor_type.shape.dim]
    return q, {q.graph.input[0].name: RNG.standard_normal(shape).astype(np.float32)}


# (C_in, H = W, C_out, k, stride): the distinct Conv layers of ResNet-50 at batch 1 (benchmarks/bench_ops.py)
RESNET50_CONVS = ((3, 224, 64, 7, 2), (64, 56, 64, 1, 1), (64, 56, 64, 3, 1), (64, 56, 256, 1, 1),
                  (128, 28, 128, 3, 1), (256, 14, 256, 3, 1), (512, 7, 512, 3, 1), (1024, 14, 256, 1, 1))


CASES = {
    "QLinearMatMul 256x1024x1024": qlinear_matmul,
    "MatMulInteger 256x1024x1024": matmul_integer,
    "DynamicQuantizeLinear->MatMulInteger 256x1024x1024": dynamic_matmul,
    "DynamicQuantizeLinear->MatMulInteger+bias 128x256x1024": lambda: dynamic_matmul(128, 256, 1024, bias=True),
    "BERT layer quantize_dynamic": dynamic_quantized_bert,
    "QLinearConv 64x56x56 3x3": lambda: qlinear_conv(64, 56, 64),
    "QLinearConv 256x14x14 3x3": lambda: qlinear_conv(256, 14, 256),
    "ConvInteger 64x56x56 3x3": lambda: conv_integer(64, 56, 64),
    "ConvInteger 256x14x14 3x3": lambda: conv_integer(256, 14, 256),
    **{f"resnet50 QLinearConv {c}x{h}x{h}->{m} {k}x{k}/{s}": (lambda c=c, h=h, m=m, k=k, s=s: qlinear_conv(c, h, m, k, s))
       for c, h, m, k, s in RESNET50_CONVS},
    "light_squeezenet quantize_static QDQ": lambda: quantized_model("squeezenet"),
    "light_resnet50 quantize_static QDQ": lambda: quantized_model("resnet50"),
}


def pairs(rounds: int, threads: int) -> None:
    """``pairs`` mode: the direct convolution and the packed GEMM launched directly (no graph), on
    7-bit weights, with ``dsl.dot4_sat`` (vpmaddubsw; what they choose on AVX2 without VNNI) and
    with the exact ``dsl.dot4``, alternating round by round, best of each."""
    from ops.conv_int8_direct import conv_int8_direct
    from ops.gemm_int8 import qgemm_int8
    shapes = [(64, 56, 64, 3), (256, 14, 256, 3), (64, 56, 64, 1), (512, 7, 512, 3)]
    for shape in shapes + [None]:
        if shape is None:  # the GEMM, 256x1024x1024
            a, b = RNG.integers(0, 256, (1, 256, 1024)).astype(np.uint8), weights(1, 1024, 1024)
            y = np.empty((1, 256, 1024), np.int32)
            b.flags.writeable = False
            name, macs = "packed GEMM 256x1024x1024", 256 * 1024 * 1024

            def run(sat, a=a, b=b, y=y):
                qgemm_int8(a, b, y, np.array([128], np.uint8), np.array([0], np.int8), saturating=sat)
        else:
            c, h, m, k = shape
            x, w = RNG.integers(0, 256, (1, c, h, h)).astype(np.uint8), weights(m, c, k, k)
            w.flags.writeable = False
            y = np.empty((1, m, h, h), np.uint8)
            mult = np.full(m, 0.001, np.float32)
            name, macs = f"direct conv {c}x{h}x{h}->{m} {k}x{k}", m * c * k * k * h * h

            def run(sat, x=x, w=w, y=y, mult=mult, k=k, h=h):
                conv_int8_direct(x, w, y, np.array([128], np.uint8), [k, k, 1, 1, k // 2, k // 2, 1, 1, h, h], mult,
                                 None, 128, saturating=sat)
        best = [float("inf"), float("inf")]
        for sat in (True, False):
            run(sat)
        for _ in range(rounds):
            for i, sat in enumerate((True, False)):
                t = time.perf_counter()
                run(sat)
                best[i] = min(best[i], time.perf_counter() - t)
        print(f"| {name} | {best[0] * 1e3:.2f} ms ({macs / best[0] / 1e9:.0f} GMAC/s) | {best[1] * 1e3:.2f} ms "
              f"({macs / best[1] / 1e9:.0f} GMAC/s) | {best[1] / best[0]:.2f}x |", flush=True)


def products_ab(rounds: int, threads: int) -> None:
    """``products`` mode: the direct convolution launched directly on full-range weights (-128..127,
    what ``quantize_static`` writes) with each product ``conv_int8_direct`` can run: ``dot4_sat``
    (vpmaddubsw: saturates on these weights, so not exact; the speed to reach), ``dot2_i16`` (the
    exact default on AVX2 without VNNI: weights widened at packing, the image in i16 planes) and
    ``dot4`` (exact, bytes widened in the loop), alternating round by round, best of each."""
    from ops.conv_int8_direct import conv_int8_direct
    sides = ("dot4_sat", "dot2_i16", "dot4")
    for c, h, m, k in [(64, 56, 64, 3), (256, 14, 256, 3), (64, 56, 64, 1), (512, 7, 512, 3)]:
        x = RNG.integers(0, 256, (1, c, h, h)).astype(np.uint8)
        w = RNG.integers(-128, 128, (m, c, k, k)).astype(np.int8)
        w.flags.writeable = False
        y = np.empty((1, m, h, h), np.uint8)
        mult = np.full(m, 0.001, np.float32)
        geom = [k, k, 1, 1, k // 2, k // 2, 1, 1, h, h]

        def run(p):
            conv_int8_direct(x, w, y, np.array([128], np.uint8), geom, mult, None, 128, products=p)
        best = dict.fromkeys(sides, float("inf"))
        for p in sides:
            run(p)
        for _ in range(rounds):
            for p in sides:
                t = time.perf_counter()
                run(p)
                best[p] = min(best[p], time.perf_counter() - t)
        macs = m * c * k * k * h * h
        print(f"| direct conv {c}x{h}x{h}->{m} {k}x{k} | " + " | ".join(
            f"{best[p] * 1e3:.2f} ms ({macs / best[p] / 1e9:.0f} GMAC/s)" for p in sides)
            + f" | {best['dot2_i16'] / best['dot4_sat']:.2f}x | {best['dot4'] / best['dot4_sat']:.2f}x |", flush=True)


def ort_session(proto, threads: int):
    """onnxruntime's session of ``proto`` on ``threads`` threads whose pool does not spin after a
    run: spinning threads would take the cores from the opdsl round that follows."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def best_alternating(sides: dict, rounds: int, missing=(), pause: float = 0.0) -> tuple:
    """Each side of ``sides`` (name -> call) run once a round, in turn, ``rounds`` times, after
    ``pause`` seconds of sleep: the best wall and CPU time of each (dicts by name; names in
    ``missing`` that are not sides are NaN)."""
    wall = {**dict.fromkeys(missing, float("nan")), **dict.fromkeys(sides, float("inf"))}
    cpu = dict(wall)
    for _ in range(rounds):
        for k, f in sides.items():
            if pause:
                time.sleep(pause)
            t, c = time.perf_counter(), time.process_time()
            f()
            wall[k] = min(wall[k], time.perf_counter() - t)
            cpu[k] = min(cpu[k], time.process_time() - c)
    return wall, cpu


def tiles_ab(rounds: int, threads: int, shape=(256, 1024, 1024)) -> None:
    """``tiles`` mode: the three GEMM cases compiled twice, on the matrix tile GEMM
    (ops/gemm_int8_amx.py, AMX's tdpbusd where ``dsl.target`` has "amx") and on the ``dot4`` GEMM
    (ops/gemm_int8.py, vpdpbusd), run alternately with onnxruntime in one process, best of each;
    CPU time (``time.process_time``) is shown beside wall time, since a loaded machine inflates
    wall time more than it inflates the work done."""
    import ops.quant_matmul as qm
    from ops.gemm_int8_amx import amx_usable
    print(f"amx usable: {amx_usable('numba')}; {threads} thread(s) a side; load average {os.getloadavg()[0]:.1f}")
    print("| case | tiles | dot4 | onnxruntime | tiles / ort | dot4 / ort | tiles CPU / ort CPU |")
    print("|---|---|---|---|---|---|---|")
    choose = qm._packed_kernel
    for name, make in (("QLinearMatMul", qlinear_matmul), ("MatMulInteger", matmul_integer),
                       ("DynamicQuantizeLinear->MatMulInteger", dynamic_matmul)):
        proto, feeds = make(*shape)
        sess = ort_session(proto, threads)
        tiles = dsl.load_onnx(proto, backend="numba")
        qm._packed_kernel = lambda a, b, backend: "packed"
        try:
            dot4 = dsl.load_onnx(proto, backend="numba")
        finally:
            qm._packed_kernel = choose
        want = sess.run(None, feeds)[0]
        for side in (tiles, dot4):
            got = list(side.run(feeds).values())[0]
            assert np.allclose(got, want, rtol=1e-6, atol=1e-6) if want.dtype.kind == "f" else np.array_equal(got, want)
        sides = {"tiles": lambda: tiles.run(feeds), "dot4": lambda: dot4.run(feeds), "ort": lambda: sess.run(None, feeds)}
        wall, cpu = best_alternating(sides, rounds)
        print(f"| {name} {'x'.join(map(str, shape))} | {wall['tiles'] * 1e3:.2f} ms | {wall['dot4'] * 1e3:.2f} ms | "
              f"{wall['ort'] * 1e3:.2f} ms | {wall['tiles'] / wall['ort']:.2f}x | {wall['dot4'] / wall['ort']:.2f}x | "
              f"{cpu['tiles'] / cpu['ort']:.2f}x |", flush=True)


def order_ab(rounds: int, threads: int, shape=(256, 1024, 1024), pause: float = 0.0) -> None:
    """``order`` mode: the three GEMM cases on the tile GEMM compiled twice, with C's blocks in
    session 19's order (column block major, all of K a block) and in ``block_order``'s (row block
    major, K in chunks), run alternately with onnxruntime in one process, best of each."""
    import ops.gemm_int8_amx as amx
    os.environ["OPDSL_PLAN_CACHE"] = "0"  # a plan from disk would give both sides one order
    print(f"amx usable: {amx.amx_usable('numba')}; {threads} thread(s) a side; {pause * 1e3:.0f} ms pause before each "
          f"side; load average {os.getloadavg()[0]:.1f}")
    print("| case | column major | block_order | onnxruntime | column / ort | block_order / ort | block_order CPU / ort CPU |")
    print("|---|---|---|---|---|---|---|")
    choose = amx.block_order
    for name, make in (("QLinearMatMul", qlinear_matmul), ("MatMulInteger", matmul_integer),
                       ("DynamicQuantizeLinear->MatMulInteger", dynamic_matmul)):
        proto, feeds = make(*shape)
        sess = ort_session(proto, threads)
        amx.block_order = lambda *shape: (1, amx.ALL_OF_K, 1)  # read when a plan is recorded
        try:
            old = dsl.load_onnx(proto, backend="numba")
            old.run(feeds)
        finally:
            amx.block_order = choose
        new = dsl.load_onnx(proto, backend="numba")
        want = sess.run(None, feeds)[0]
        for side in (old, new):
            got = list(side.run(feeds).values())[0]
            assert np.allclose(got, want, rtol=1e-6, atol=1e-6) if want.dtype.kind == "f" else np.array_equal(got, want)
        sides = {"old": lambda: old.run(feeds), "new": lambda: new.run(feeds), "ort": lambda: sess.run(None, feeds)}
        wall, cpu = best_alternating(sides, rounds, pause=pause)
        print(f"| {name} {'x'.join(map(str, shape))} | {wall['old'] * 1e3:.2f} ms | {wall['new'] * 1e3:.2f} ms | "
              f"{wall['ort'] * 1e3:.2f} ms | {wall['old'] / wall['ort']:.2f}x | {wall['new'] / wall['ort']:.2f}x | "
              f"{cpu['new'] / cpu['ort']:.2f}x |", flush=True)


def wake_ab(rounds: int) -> None:
    """``wake`` mode: why the one-node mode (a 20 ms sleep before each side) reads slower than tiles
    mode: QLinearMatMul and MatMulInteger 256x1024x1024 by opdsl and onnxruntime, each hot, after a
    20 ms sleep, and after sweeping 8 MB of other memory instead (caches cold, core awake); one
    thread a side, best of each."""
    junk = np.ones(8 << 20, np.uint8)
    print(f"load average {os.getloadavg()[0]:.1f}; opdsl / onnxruntime ms, best of {rounds}")
    print("| case | hot | after 20 ms sleep | after an 8 MB sweep |")
    print("|---|---|---|---|")
    for name, make in (("QLinearMatMul", qlinear_matmul), ("MatMulInteger", matmul_integer)):
        proto, feeds = make()
        sess = ort_session(proto, 1)
        ours = dsl.load_onnx(proto, backend="numba")
        ours.run(feeds)
        sides = {"opdsl": lambda: ours.run(feeds), "ort": lambda: sess.run(None, feeds)}
        cells = []
        for how in ("hot", "sleep", "sweep"):
            best = dict.fromkeys(sides, float("inf"))
            for _ in range(rounds):
                for k, f in sides.items():
                    if how == "sleep":
                        time.sleep(0.02)
                    elif how == "sweep":
                        junk += 1
                    t = time.perf_counter()
                    f()
                    best[k] = min(best[k], time.perf_counter() - t)
            cells.append(f"{best['opdsl'] * 1e3:.2f} / {best['ort'] * 1e3:.2f} ({best['opdsl'] / best['ort']:.2f}x)")
        print(f"| {name} 256x1024x1024 | " + " | ".join(cells) + " |", flush=True)


def output_alignment(rounds: int) -> None:
    """``outalign`` mode: MatMulInteger 256x1024x1024's tile GEMM launched alone into y starting 0,
    16, 32 and 48 bytes past a 64-byte line (numpy's large arrays start 0 or 16 past one), against
    onnxruntime; one thread a side, alternated, best of each."""
    from dsl.runtime.cache_lines import line_aligned
    from ops.gemm_int8_amx import qgemm_amx, qgemm_int8_amx
    proto, feeds = matmul_integer()
    sess = ort_session(proto, 1)
    b = numpy_helper.to_array(next(i for i in proto.graph.initializer if i.name == "b"))
    b.setflags(write=False)  # a constant: packed once
    launch = []
    qgemm_int8_amx(feeds["a"][None], b[None], np.empty((1, 256, 1024), np.int32), a_zp=np.array(128, np.uint8),
                   b_zp=np.array(0, np.int8), kernel=lambda *args, **kw: launch.append((args, kw)))
    args, kw = launch[0]
    want = sess.run(None, feeds)[0]
    sides = {"ort": lambda: sess.run(None, feeds)}
    for off in (0, 16, 32, 48):
        y = line_aligned(256 * 1024 + 16, np.int32)[off // 4:off // 4 + 256 * 1024].reshape(1, 256, 1024)
        qgemm_amx(*args[:9], y, *args[10:], **kw)
        assert np.array_equal(y[0], want)
        sides[f"y +{off} B"] = lambda y=y: qgemm_amx(*args[:9], y, *args[10:], **kw)
    wall, _ = best_alternating(sides, rounds)
    print(f"load average {os.getloadavg()[0]:.1f}; numpy's 1 MB np.empty here: {np.empty(1 << 18, np.int32).ctypes.data % 64} "
          f"bytes past a line; " + " | ".join(f"{k} {wall[k] * 1e3:.3f} ms ({wall[k] / wall['ort']:.2f}x)" for k in sides))


def conv_tiles_ab(rounds: int, pick: str, threads: int) -> None:
    """``convtiles`` mode: each convolution case (and quantized model) compiled twice, with the
    int8 convolutions on the matrix tile GEMM (ops/conv_int8_amx.py, where ``dsl.target`` has
    "amx") and on the VNNI direct/im2col kernels (``_QConv.tiles`` off), run alternately with
    onnxruntime in one process, best of each, wall and CPU time."""
    from ops.conv_int8_amx import amx_usable
    from ops.quant_conv import _QConv
    print(f"amx usable: {amx_usable('numba')}; {threads} thread(s) a side; load average {os.getloadavg()[0]:.1f}")
    print("| case | tiles | vnni | onnxruntime | tiles / ort | vnni / ort | tiles CPU / ort CPU | vnni CPU / ort CPU |")
    print("|---|---|---|---|---|---|---|---|")
    for name, make in CASES.items():
        if "Conv" not in name and "quantize_static" not in name or pick not in name:
            continue
        proto, feeds = make()
        sess = ort_session(proto, threads)
        def without_tiles(f):  # a model may select (and plan) at its first run: tiles off throughout
            def run():
                _QConv.tiles = False
                try:
                    return f()
                finally:
                    _QConv.tiles = True
            return run
        tiles = dsl.load_onnx(proto, backend="numba")
        runs = {"tiles": lambda: tiles.run(feeds)}
        try:  # the VNNI kernels may fail to compile on AVX-512 (an unroll past 512 in conv_int8_direct.py)
            vnni = without_tiles(lambda: dsl.load_onnx(proto, backend="numba"))()
            runs["vnni"] = without_tiles(lambda: vnni.run(feeds))
            runs["vnni"]()
        except Exception as e:  # noqa: BLE001 - report and go on with tiles and onnxruntime
            print(f"(vnni side of {name} did not compile: {type(e).__name__}: {str(e)[:100]})", flush=True)
            runs.pop("vnni", None)
        got = {k: list(f().values())[0] for k, f in runs.items()}
        want = sess.run(None, feeds)[0]
        diff = {k: int(np.abs(v.astype(np.int64) - want.astype(np.int64)).max()) if want.dtype.kind in "iu"
                else float(np.abs(v - want).max()) for k, v in got.items()}
        sides = {**runs, "ort": lambda: sess.run(None, feeds)}
        wall, cpu = best_alternating(sides, rounds, missing=("vnni",))
        print(f"| {name} | {wall['tiles'] * 1e3:.2f} ms | {wall['vnni'] * 1e3:.2f} ms | {wall['ort'] * 1e3:.2f} ms | "
              f"{wall['tiles'] / wall['ort']:.2f}x | {wall['vnni'] / wall['ort']:.2f}x | {cpu['tiles'] / cpu['ort']:.2f}x | "
              f"{cpu['vnni'] / cpu['ort']:.2f}x | max diff vs ort {diff} |", flush=True)


def fusion_ab(rounds: int, pick: str, threads: int) -> None:
    """``fusion`` mode: each quantized model compiled with and without the QLinearConv ->
    QLinearBatchNormalization pass (ops/qdq_residual.py ``fuse_conv_batch_norm``), run
    alternately with onnxruntime in one process, best of each (the two opdsl models share their
    compiled kernels: the second stage is a run-time flag of the direct kernel)."""
    from dsl.opgraph import fusion
    from ops import qdq_residual
    os.environ["OPDSL_PLAN_CACHE"] = "0"  # a cached plan would hand the second load the first one's graph
    for name in ("squeezenet", "resnet50"):
        if pick not in f"light_{name}":
            continue
        proto, feeds = quantized_model(name)
        sess = ort_session(proto, threads)
        fused = dsl.load_onnx(proto, backend="numba")
        fusion._PASSES.remove(qdq_residual.fuse_conv_batch_norm)
        try:
            apart = dsl.load_onnx(proto, backend="numba")
        finally:
            fusion._PASSES.insert(0, qdq_residual.fuse_conv_batch_norm)
        want = sess.run(None, feeds)[0]
        diffs = [float(np.abs(list(m.run(feeds).values())[0] - want).max()) for m in (apart, fused)]
        best = [float("inf")] * 3
        cpu = [float("inf")] * 3  # process CPU seconds: what a loaded machine disturbs least on one thread
        sides = (lambda: apart.run(feeds), lambda: fused.run(feeds), lambda: sess.run(None, feeds))
        for _ in range(rounds):
            for i, run in enumerate(sides):
                c, t = time.process_time(), time.perf_counter()
                run()
                best[i] = min(best[i], time.perf_counter() - t)
                cpu[i] = min(cpu[i], time.process_time() - c)
        for label, b in (("wall", best), ("CPU", cpu)):
            print(f"| light_{name} ({label}) | {b[0] * 1e3:.1f} ms | {b[1] * 1e3:.1f} ms | {b[2] * 1e3:.1f} ms | "
                  f"{b[0] / b[2]:.2f}x | {b[1] / b[2]:.2f}x | {b[1] / b[0]:.2f} | "
                  f"max |diff| {diffs[0]:g} / {diffs[1]:g} | load {os.getloadavg()[0]:.1f} |", flush=True)


def dynamic_fusion_ab(rounds: int, pick: str, threads: int) -> None:
    """``dynamic`` mode: each dynamically quantized case compiled with and without the
    MatMulIntegerToFloat rules (ops/quant_matmul_float.py: MatMulInteger -> Cast -> Mul [-> Add]
    as one GEMM), run alternately with onnxruntime in one process, best wall and CPU time of each."""
    from dsl.opgraph import fusion
    from ops import quant_matmul_float
    os.environ["OPDSL_PLAN_CACHE"] = "0"  # a cached plan would hand the second load the first one's graph
    rules = (quant_matmul_float.cast_scale, quant_matmul_float.float_bias)
    print(f"{threads} thread(s) a side, load average {os.getloadavg()[0]:.1f}")
    print("| case | unfused | fused | onnxruntime | unfused / ort | fused / ort | fused CPU / ort CPU | max diff |")
    print("|---|---|---|---|---|---|---|---|")
    for name, make in CASES.items():
        if "Dynamic" not in name and "quantize_dynamic" not in name or pick not in name:
            continue
        proto, feeds = make()
        sess = ort_session(proto, threads)
        fused = dsl.load_onnx(proto, backend="numba")
        saved = {k: list(v) for k, v in fusion._RULES.items()}
        try:
            for k in fusion._RULES:
                fusion._RULES[k] = [r for r in fusion._RULES[k] if r not in rules]
            apart = dsl.load_onnx(proto, backend="numba")
        finally:
            fusion._RULES.update(saved)
        want = sess.run(None, feeds)[0]
        diff = max(float(np.abs(list(m.run(feeds).values())[0] - want).max()) for m in (apart, fused))
        sides = {"apart": lambda: apart.run(feeds), "fused": lambda: fused.run(feeds), "ort": lambda: sess.run(None, feeds)}
        wall, cpu = best_alternating(sides, rounds)
        print(f"| {name} | {wall['apart'] * 1e3:.2f} ms | {wall['fused'] * 1e3:.2f} ms | {wall['ort'] * 1e3:.2f} ms | "
              f"{wall['apart'] / wall['ort']:.2f}x | {wall['fused'] / wall['ort']:.2f}x | {cpu['fused'] / cpu['ort']:.2f}x | "
              f"{diff:g} |", flush=True)


def gemm_compile_times() -> None:
    """``compile`` mode: the process CPU time of the first launch (its compile) of the dot4 and the
    tile int8 GEMMs on a 64×256 u8 · 256×64 i8 product with a u8 output; run it in a fresh process
    with ``OPDSL_CACHE_DIR=$(mktemp -d) OPDSL_COMPILE_WORKERS=0`` (compiled here, not by workers)."""
    from ops.gemm_int8 import qgemm_int8
    from ops.gemm_int8_amx import qgemm_int8_amx
    a, b = RNG.integers(0, 256, (1, 64, 256)).astype(np.uint8), weights(1, 256, 64)
    y = np.empty((1, 64, 64), np.uint8)
    for f in (qgemm_int8, qgemm_int8_amx):
        c = time.process_time()
        f(a, b, y, np.array([3], np.uint8), np.array([0], np.int8), mult=np.array([0.001], np.float32))
        print(f"{f.__name__}: {time.process_time() - c:.1f} s CPU", flush=True)


def saturation_experiment(rounds: int, pick: str, threads: int = 1, pause: float = 0.0) -> None:
    """``saturate`` mode: each quantized model loaded twice, with the default exact int8 products
    (on AVX2 without VNNI, ``dsl.dot2_i16`` against weights widened at packing for
    ``quantize_static``'s full-range weights) and with ``int8_arithmetic="saturating"``
    (``dsl.dot4_sat``, onnxruntime's AVX2 arithmetic, saturation included), run alternately with
    onnxruntime in one process; best wall and process CPU time of each, and each side's largest
    difference from onnxruntime's outputs."""
    os.environ["OPDSL_PLAN_CACHE"] = "0"
    for name in ("squeezenet", "resnet50"):
        if pick not in f"light_{name}":
            continue
        proto, feeds = quantized_model(name)
        exact = dsl.load_onnx(proto, backend="numba")
        saturating = dsl.load_onnx(proto, backend="numba", int8_arithmetic="saturating")
        sess = ort_session(proto, threads)
        want = sess.run(None, feeds)[0]
        diffs = [float(np.abs(list(m.run(feeds).values())[0] - want).max()) for m in (exact, saturating)]
        wall = [float("inf")] * 3
        cpu = [float("inf")] * 3
        sides = (lambda: exact.run(feeds), lambda: saturating.run(feeds), lambda: sess.run(None, feeds))
        for _ in range(rounds):
            for i, run in enumerate(sides):
                time.sleep(pause)
                c, t = time.process_time(), time.perf_counter()
                run()
                wall[i] = min(wall[i], time.perf_counter() - t)
                cpu[i] = min(cpu[i], time.process_time() - c)
        for label, b in (("wall", wall), ("CPU", cpu)):
            print(f"| light_{name} ({label}) | {b[0] * 1e3:.1f} ms | {b[1] * 1e3:.1f} ms | {b[2] * 1e3:.1f} ms | "
                  f"{b[0] / b[2]:.2f}x | {b[1] / b[2]:.2f}x | max |diff| {diffs[0]:g} / {diffs[1]:g} | "
                  f"load {os.getloadavg()[0]:.1f} |", flush=True)


def nodes_vs_ort(profiles: int, pick: str, top: int = 25, cpu: bool = False) -> None:
    """``nodes`` mode: each quantized model's nodes against onnxruntime's, one thread a side:
    opdsl's ``Model.profile`` (``cpu``: on the process's CPU clock, which a loaded machine
    disturbs less) and onnxruntime's own profiler, each node at its minimum over
    ``profiles`` single runs, grouped by output shape (the graphs fuse differently; for CNNs the
    shape names the layer; its dimensions sorted, as onnxruntime runs the integer layers NHWC),
    largest gap first."""
    import tempfile

    import types

    from benchmarks.profile_vs_ort import ort_node_times
    from dsl.opgraph import profile
    if cpu:  # Model.profile reads profile.time.perf_counter
        profile.time = types.SimpleNamespace(perf_counter=time.process_time)
    os.environ["OPDSL_PLAN_CACHE"] = "0"
    for name in ("squeezenet", "resnet50"):
        if pick not in f"light_{name}":
            continue
        proto, feeds = quantized_model(name)
        model = dsl.load_onnx(proto, backend="numba")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
        sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        model.run(feeds)
        runs = []
        for _ in range(profiles):
            sess.run(None, feeds)
            runs.append({r.name: r for r in model.profile(feeds, repeat=1, warmup=0).rows})
        ours = {k: (min(p[k].mean_s for p in runs) * 1e3, r.op_type, tuple(r.shape)) for k, r in runs[0].items()}
        theirs = ort_node_times(sess.end_profiling())
        print(f"light_{name}: opdsl {sum(v[0] for v in ours.values()):.2f} ms{' CPU' if cpu else ''} in {len(ours)} nodes, onnxruntime "
              f"{sum(v[0] for v in theirs.values()):.2f} ms in {len(theirs)} nodes (minimum per node of {profiles} "
              f"runs, one thread, load {os.getloadavg()[0]:.1f})")
        groups = {}
        for side, table in ((0, ours), (1, theirs)):
            for ms, op, shp in table.values():
                g = groups.setdefault(tuple(sorted(shp)), [0.0, 0.0, set(), set()])
                g[side] += ms
                g[2 + side].add(op)
        print("| output dims, sorted | opdsl ms | opdsl ops | onnxruntime ms | onnxruntime ops | gap ms |")
        for shp, (o, t, oo, to) in sorted(groups.items(), key=lambda kv: kv[1][1] - kv[1][0])[:top]:
            print(f"| {shp} | {o:.3f} | {','.join(sorted(oo))} | {t:.3f} | {','.join(sorted(to))} | {o - t:+.3f} |")


MODES = ("cases", "pairs", "products", "tiles", "order", "wake", "outalign", "convtiles", "fusion", "dynamic", "compile", "saturate", "nodes")


def parser() -> argparse.ArgumentParser:
    """One subcommand a mode; ``cases`` (the onnx models against onnxruntime) is the default, so
    the command lines of older RESULTS.md sections (``bench_int8.py 10 light_ 1``) still run."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--pause", type=float, default=0.0, metavar="S",
                        help="seconds of sleep before each timed side, so neither side's pool threads, still "
                             "spinning or waking, run into the other's round (used by cases and saturate)")
    top = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                  epilog="Without a subcommand the arguments go to `cases`.")
    modes = top.add_subparsers(dest="mode", metavar="{" + ",".join(MODES) + "}")

    def mode(name, help_text):
        sub = modes.add_parser(name, parents=[common], help=help_text, description=help_text)
        sub.add_argument("rounds", nargs="?", type=int, default=10, help="alternating rounds, best of each side")
        return sub

    cases = mode("cases", "each case's ONNX model by opdsl and by onnxruntime (the default mode)")
    cases.add_argument("pick", nargs="?", default="", help="run the cases whose name contains this")
    cases.add_argument("threads", nargs="?", type=int, default=None, help="threads a side (default: all cores)")
    cases.add_argument("profile", nargs="?", choices=("profile",), help="after each case, opdsl's time per op type")
    for name, help_text in (("pairs", "dot4_sat vs dot4 in the direct conv and packed GEMM, launched directly"),
                            ("products", "dot4_sat / dot2_i16 / dot4 on full-range weights (products_ab)")):
        mode(name, help_text).add_argument("threads", nargs="?", type=int, default=1)
    tiles = mode("tiles", "the AMX tile GEMM against the VNNI dot4 one (tiles_ab)")
    tiles.add_argument("threads", nargs="?", type=int, default=1)
    tiles.add_argument("shape", nargs="?", default="256,1024,1024", help="m,k,n")
    order = mode("order", "the tile GEMM's block order: session 19's against block_order's (order_ab)")
    order.add_argument("threads", nargs="?", type=int, default=1)
    order.add_argument("shape", nargs="?", default="256,1024,1024", help="m,k,n")
    mode("wake", "MatMul cases hot, after a 20 ms sleep and after an 8 MB sweep (wake_ab)")
    mode("outalign", "MatMulInteger's tile GEMM into y at 0/16/32/48 bytes past a line (output_alignment)")
    for name, help_text in (("convtiles", "int8 convolutions with and without AMX tiles, and onnxruntime (conv_tiles_ab)"),
                            ("fusion", "the conv+BN pass off / on / onnxruntime on the quantized models (fusion_ab)"),
                            ("dynamic", "each dynamically quantized case with the MatMulIntegerToFloat fusion off / on, "
                                        "and onnxruntime (dynamic_fusion_ab)"),
                            ("saturate", "exact / int8_arithmetic='saturating' / onnxruntime (saturation_experiment)")):
        sub = mode(name, help_text)
        sub.add_argument("pick", nargs="?", default="", help="run the cases or models whose name contains this")
        sub.add_argument("threads", nargs="?", type=int, default=1)
    modes.add_parser("compile", help="the int8 GEMMs' first-launch compile time, fresh cache (gemm_compile_times)")
    nodes = mode("nodes", "the quantized models' nodes against onnxruntime's, one thread a side (nodes_vs_ort)")
    nodes.add_argument("pick", nargs="?", default="", help="model filter")
    nodes.add_argument("top", nargs="?", type=int, default=25, help="rows of the largest gaps")
    nodes.add_argument("clock", nargs="?", choices=("cpu", "wall"), default="wall",
                       help="cpu: Model.profile on the process's CPU clock")
    return top


def parse(argv: list) -> argparse.Namespace:
    """``argv`` whose first word (``--pause`` aside) is no mode name gets ``cases``; ``--pause`` may
    stand anywhere, before the mode name too."""
    argv, skip = list(argv), False
    for i, word in enumerate(argv):
        if skip or word.startswith("--pause"):
            skip = word == "--pause"
            continue
        if word in MODES:
            argv.insert(0, argv.pop(i))
        elif word not in ("-h", "--help"):
            argv.insert(0, "cases")
        break
    else:
        argv.insert(0, "cases")
    return parser().parse_args(argv)


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    import numba
    threads = getattr(args, "threads", None)
    if args.mode == "saturate":
        numba.set_num_threads(threads)
        print(f"exact / int8_arithmetic='saturating' / onnxruntime, {threads} thread(s) a side, {args.pause * 1e3:.0f} ms "
              f"pause before each side; | model | exact | saturating | ort | exact/ort | saturating/ort |")
        saturation_experiment(args.rounds, args.pick, threads, args.pause)
    elif args.mode == "nodes":
        numba.set_num_threads(1)
        nodes_vs_ort(args.rounds, args.pick, args.top, args.clock == "cpu")
    elif args.mode == "products":
        numba.set_num_threads(threads)
        print(f"full-range weights, {threads} thread(s), load average {os.getloadavg()[0]:.1f}; | work | dot4_sat "
              f"(saturates) | dot2_i16 (exact) | dot4 (exact) | dot2_i16 / dot4_sat | dot4 / dot4_sat |")
        products_ab(args.rounds, threads)
    elif args.mode == "fusion":
        numba.set_num_threads(threads)
        print(f"conv+BN pass off / on / onnxruntime, {threads} thread(s) a side; | model | off | on | ort | "
              f"off/ort | on/ort | on/off |")
        fusion_ab(args.rounds, args.pick, threads)
    elif args.mode == "dynamic":
        numba.set_num_threads(threads)
        dynamic_fusion_ab(args.rounds, args.pick, threads)
    elif args.mode == "compile":
        gemm_compile_times()
    elif args.mode == "convtiles":
        numba.set_num_threads(threads)
        conv_tiles_ab(args.rounds, args.pick, threads)
    elif args.mode == "tiles":
        numba.set_num_threads(threads)
        tiles_ab(args.rounds, threads, tuple(int(d) for d in args.shape.split(",")))
    elif args.mode == "order":
        numba.set_num_threads(threads)
        order_ab(args.rounds, threads, tuple(int(d) for d in args.shape.split(",")), args.pause)
    elif args.mode in ("wake", "outalign"):
        numba.set_num_threads(1)
        (wake_ab if args.mode == "wake" else output_alignment)(args.rounds)
    elif args.mode == "pairs":
        numba.set_num_threads(threads)
        print(f"dot4_sat vs dot4, {threads} thread(s), load average {os.getloadavg()[0]:.1f}; | work | dot4_sat | dot4 | gain |")
        pairs(args.rounds, threads)
    else:
        run_cases(args.rounds, args.pick, threads or dsl.target("numba").compute_units, args.profile == "profile",
                  args.pause)


def run_cases(rounds: int, pick: str, cores: int, profiled: bool, pause: float) -> None:
    """The default mode: each of ``CASES`` by opdsl and by onnxruntime, alternating, best of each."""
    import numba
    numba.set_num_threads(min(cores, numba.config.NUMBA_NUM_THREADS))
    print(f"cpu {dsl.target('numba').cpu}, {cores} threads a side, load average {os.getloadavg()[0]:.1f}; "
          f"rounds {rounds}, best of each; {pause * 1e3:.0f} ms pause before each side; numba layer "
          f"{os.environ.get('NUMBA_THREADING_LAYER', 'default')}; | case | opdsl wall | ort wall | ratio | "
          f"opdsl CPU | ort CPU | ratio |")
    for name, make in CASES.items():
        if pick not in name:
            continue
        proto, feeds = make()
        sess = ort_session(proto, cores)
        ours = dsl.load_onnx(proto, backend="numba")
        got = list(ours.run(feeds).values())[0]
        want = sess.run(None, feeds)[0]
        diff = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
        best = [float("inf"), float("inf")]
        cpu = [float("inf"), float("inf")]  # process CPU seconds: what a loaded machine disturbs least
        for _ in range(rounds):
            for i, run in enumerate((lambda: ours.run(feeds), lambda: sess.run(None, feeds))):
                time.sleep(pause)
                c, t = time.process_time(), time.perf_counter()
                run()
                best[i] = min(best[i], time.perf_counter() - t)
                cpu[i] = min(cpu[i], time.process_time() - c)
        print(f"| {name} | {best[0] * 1e3:.2f} ms | {best[1] * 1e3:.2f} ms | {best[0] / best[1]:.2f}x | "
              f"{cpu[0] * 1e3:.2f} ms | {cpu[1] * 1e3:.2f} ms | {cpu[0] / cpu[1]:.2f}x | max |diff| {diff:g} |", flush=True)
        if profiled:
            print_profile(ours, feeds)



def print_profile(ours, feeds):
    """opdsl's time per op type (mean of 3 profiled runs) and the compiled graph's node kinds."""
    prof = ours.profile(feeds, repeat=3)
    print(f"  profile: {prof.total_s * 1e3:.2f} ms in {len(prof.rows)} nodes")
    for op_type, count, seconds, share in prof.by_op_type():
        print(f"    {op_type:40s} {count:4d} nodes {seconds * 1e3:9.2f} ms {share:6.1%}")


if __name__ == "__main__":
    main()
