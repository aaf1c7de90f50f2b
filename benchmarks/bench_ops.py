"""opdsl's own GEMM and Conv ops against the references, in one run, as markdown tables.

    python -m benchmarks.bench_ops                        # every section, ~2-3 minutes on 2 cores
    python -m benchmarks.bench_ops --only gemm --sizes 256,1024 --repeat 5
    python -m benchmarks.bench_ops --output /tmp/bench_ops.md

Sections: ``gemm`` (square f32 MatMul vs numpy BLAS, onnxruntime and a hand-written numba
loop), ``batched`` (attention-shaped batched MatMul vs numpy and onnxruntime), ``linear`` (the
BERT layer's x @ W with W an initializer, vs numpy and onnxruntime), ``half``
(f16/bf16-storage MatMul vs opdsl's own f32), ``conv`` (the eight distinct ResNet-50 Conv
shapes vs onnxruntime).  opdsl runs one-node ONNX models through ``dsl.load_onnx`` (and
``ops.MatMul`` called directly), so new MatMul/Conv kernels are picked up without a change
here.  numpy's BLAS is timed in a child process without ``OPENBLAS_CORETYPE`` and
``OPENBLAS_L2_SIZE`` (benchmarks/blas_child.py).  Every result is checked before it is timed;
a wrong one is reported as a mismatch, never as a time.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks import op_models  # noqa: E402
from benchmarks.blas_child import SLOW_BLAS_VARS, numpy_matmul_times  # noqa: E402
from benchmarks.harness import (Timing, avx512_flags, fmt_seconds, load_text,  # noqa: E402
                                lscpu_model_name, machine_info, measure_interleaved, start,
                                usable_cores, wait_until_idle)

SECTIONS = ("gemm", "batched", "linear", "half", "conv")
GEMM_SIZES = (256, 512, 1024)
HALF_SIZES = (512, 1024)
ATTENTION_SHAPES = (((12, 128, 64), (12, 64, 128)), ((12, 128, 128), (12, 128, 64)),
                    ((4, 128, 64), (4, 64, 128)), ((4, 128, 128), (4, 128, 64)))  # BERT-base and the BERT layer
LINEAR_SHAPES = (((128, 256), (256, 256)), ((128, 256), (256, 1024)), ((128, 1024), (1024, 256)))
# (C_in, H = W, C_out, k, stride): the distinct Conv layers of ResNet-50 at batch 1
RESNET50_CONVS = ((3, 224, 64, 7, 2), (64, 56, 64, 1, 1), (64, 56, 64, 3, 1), (64, 56, 256, 1, 1),
                  (128, 28, 128, 3, 1), (256, 14, 256, 3, 1), (512, 7, 512, 3, 1), (1024, 14, 256, 1, 1))
# layers outside the eight, timed as extra rows (no target, not in the geometric mean):
# squeezenet's 3-channel stem and its 3x3 expands (16, 32, 48 and 64 channels at 55, 27 and 13 pixels;
# single nodes on plain input, where the model feeds them NCHWc16), resnet50's three stride-2 3x3
# convolutions, its first stride-2 1x1 projection shortcut and squeezenet's 1000-class 1x1 head
EXTRA_CONVS = ((3, 224, 64, 3, 2), (16, 55, 64, 3, 1), (32, 27, 128, 3, 1), (48, 13, 192, 3, 1), (64, 13, 256, 3, 1),
               (128, 56, 128, 3, 2), (256, 28, 256, 3, 2), (512, 14, 512, 3, 2), (256, 56, 512, 1, 2),
               (512, 13, 1000, 1, 1))
DEFAULT_REPEAT = 10

# targets of the issue: fraction of the reference's GFLOP/s (higher is better) ...
GEMM_TARGETS = {1024: 0.70, 256: 0.50}
BATCHED_TARGET = 1.0
BATCHED_MIN_REPEAT = 200  # timed calls a side of the batched rows (40-120 µs products) ...
BATCHED_BLOCK = 25  # ... in blocks of this many, each after 0.1 s of untimed calls
HALF_TARGET = 0.50
# ... and opdsl time over onnxruntime time (lower is better)
CONV_TARGET = 1.5
CONV_GEOMEAN_TARGET = 1.2

# |opdsl - reference| <= TOL * max|reference| (+ TOL relative): storage rounding of the output
# (f16: 2^-11, bf16: 2^-8) plus a different summation order
TOLERANCE = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 1e-2}


def _progress(msg: str) -> None:
    print(f"[bench_ops] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- results

@dataclass
class Table:
    """One section's results: a compact table, the targets, and what went wrong.

    ``mismatches`` lists every implementation whose result disagreed with the reference
    (it was not timed); ``values`` keeps the numbers for callers (tests, summaries)."""

    title: str
    header: List[str]
    rows: List[List[str]] = field(default_factory=list)
    targets: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    mismatches: List[str] = field(default_factory=list)
    values: Dict[str, Dict[str, Optional[float]]] = field(default_factory=dict)

    def target(self, text: str, value: Optional[float], limit: float, *, higher_is_better: bool,
               percent: bool = False) -> str:
        """Record and return "met"/"MISSED"/"not measured" for ``value`` against ``limit``."""
        if value is None:
            verdict = "not measured"
            self.targets.append(f"{text}: not measured")
            return verdict
        ok = value >= limit if higher_is_better else value <= limit
        verdict = "met" if ok else "MISSED"
        shown = f"{value:.0%}" if percent else f"{value:.2f}x"
        self.targets.append(f"{text}: {verdict} ({shown})")
        return verdict

    def mismatch(self, what: str, err: float, tol: float) -> None:
        msg = f"MISMATCH: {what}: max |diff| {err:.3g} > tolerance {tol:.3g}; not timed"
        self.mismatches.append(msg)
        print(f"\n!!!!! {self.title}: {msg} !!!!!\n", file=sys.stderr, flush=True)

    def markdown(self) -> str:
        out = [f"### {self.title}", "", "| " + " | ".join(self.header) + " |",
               "|" + "|".join("---" if i == 0 else "---:" for i in range(len(self.header))) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        if self.mismatches:
            out += [""] + [f"- **{m}**" for m in self.mismatches]
        if self.targets:
            out += [""] + [f"- target {t}" for t in self.targets]
        if self.notes:
            out += [""] + [f"- {n}" for n in self.notes]
        return "\n".join(out)


def gflops(flops: float, t: Optional[Timing]) -> Optional[float]:
    return flops / t.best / 1e9 if t is not None else None


def rate_cell(flops: float, t: Optional[Timing]) -> str:
    """GFLOP/s of the best sample, the median's in parentheses (how noisy it was)."""
    if t is None:
        return "n/a"
    return f"{flops / t.best / 1e9:.1f} ({flops / t.median / 1e9:.1f})"


def compare(got: np.ndarray, want: np.ndarray) -> Tuple[bool, float, float]:
    """(within tolerance, max |got - want|, the absolute tolerance) for ``got``'s dtype:
    allclose with rtol = TOL and atol = TOL * max|want|."""
    tol = TOLERANCE.get(np.dtype(got.dtype).name, 1e-4)
    if got.shape != want.shape:
        return False, math.inf, 0.0
    wide = np.asarray(got, np.float64)
    atol = tol * max(float(np.max(np.abs(want))) if want.size else 1.0, 1.0)
    err = float(np.max(np.abs(wide - want))) if want.size else 0.0
    return bool(np.allclose(wide, want, rtol=tol, atol=atol)), err, atol


def checked_cases(table: Table, cases: Dict[str, Callable[[], np.ndarray]], want: np.ndarray,
                  label: str) -> Dict[str, Callable[[], np.ndarray]]:
    """The cases whose result matches ``want`` (each is called once: also its warm-up and
    compile); the others become mismatches of ``table``."""
    good = {}
    for name, fn in cases.items():
        ok, err, atol = compare(fn(), want)
        if ok:
            good[name] = fn
        else:
            table.mismatch(f"{name}, {label}", err, atol)
    return good


def matmul_flops(a_shape: Sequence[int], b_shape: Sequence[int]) -> float:
    batch = np.prod(np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2])), dtype=np.float64)
    return 2.0 * batch * a_shape[-2] * a_shape[-1] * b_shape[-1]


def _reference_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b in float64 from the stored values: the answer every implementation is held to."""
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def _opdsl_cases(a: np.ndarray, b: np.ndarray, backend: str, eager: bool = True) -> Dict[str, Callable]:
    """opdsl's MatMul the two ways a user calls it: a loaded ONNX model, and the op itself."""
    import ops
    model = op_models.matmul_model(a.shape, b.shape, a.dtype)
    cases = {"opdsl": op_models.opdsl_runner(model, {"a": a, "b": b}, backend)}
    if eager:
        cases["opdsl eager"] = lambda: ops.MatMul(a, b, backend=backend)
    return cases


class NumpyBaseline:
    """numpy's matmul times from the clean child process, taken before and after opdsl's runs.

    The child cannot be interleaved with the cases timed here, so it runs twice, bracketing
    them, and each case keeps the run with the better best: a burst of load from other jobs
    during one of them does not become the baseline."""

    def __init__(self, cases: Sequence[Dict], repeat: int):
        self.cases, self.repeat = list(cases), repeat
        self.runs = [numpy_matmul_times(self.cases, repeat)]

    def again(self) -> None:
        self.runs.append(numpy_matmul_times(self.cases, self.repeat))

    def timing(self, name: str) -> Timing:
        return min((Timing(**run["results"][name]) for run in self.runs), key=lambda t: t.best)

    def note(self) -> str:
        child = self.runs[0]
        seen = ", ".join(f"{k}={os.environ.get(k)}" for k, v in child["env"].items())
        return (f"numpy timed in a child process, before and after the other cases (best of the two runs): "
                f"OpenBLAS core {child.get('openblas_core')}, {child.get('threads')} threads; {seen} here, "
                f"removed in the child (it saw {child.get('env')})")


# --------------------------------------------------------------------------- sections

def bench_gemm(sizes: Sequence[int] = GEMM_SIZES, repeat: int = DEFAULT_REPEAT, backend: str = "numba") -> Table:
    """Square f32 GEMM: opdsl vs numpy BLAS (child process), onnxruntime and a numba loop."""
    from benchmarks.gemm_reference import numba_matmul

    table = Table("GEMM f32, M = N = K, GFLOP/s: best (median)",
                  ["size", "opdsl (load_onnx)", "opdsl (ops.MatMul eager)", "numpy BLAS", "onnxruntime",
                   "numba hand-written", "opdsl / BLAS", "target"])
    _progress(f"gemm: numpy BLAS in a child process, sizes {list(sizes)}")
    numpy_times = NumpyBaseline([{"name": str(n), "a": [n, n], "b": [n, n]} for n in sizes], repeat)
    timed_by_size: Dict[int, Dict[str, Optional[Timing]]] = {}
    for n in sizes:
        _progress(f"gemm {n}^3: compiling and checking opdsl, onnxruntime, numba")
        a, b = op_models.random_inputs([(n, n), (n, n)], seed=n)
        want = _reference_product(a, b)
        model = op_models.matmul_model(a.shape, b.shape)
        cases = _opdsl_cases(a, b, backend)
        cases["onnxruntime"] = op_models.ort_runner(model, {"a": a, "b": b})
        cases["numba"] = lambda a=a, b=b: numba_matmul(a, b)
        cases = checked_cases(table, cases, want, f"{n}^3")
        _progress(f"gemm {n}^3: timing, interleaved")
        timed_by_size[n] = dict(measure_interleaved(cases, repeat=repeat, warmup=1))
        del cases, model
    _progress("gemm: numpy BLAS in a child process, second run")
    numpy_times.again()
    table.notes.append(numpy_times.note())
    for n, timed in timed_by_size.items():
        blas = numpy_times.timing(str(n))
        flops = 2.0 * n ** 3
        ours = timed.get("opdsl")
        ratio = gflops(flops, ours) / gflops(flops, blas) if ours else None
        limit = GEMM_TARGETS.get(n)
        verdict = (table.target(f"opdsl >= {limit:.0%} of BLAS at {n}^3", ratio, limit, higher_is_better=True,
                                percent=True) if limit else "none set")
        table.rows.append([f"{n}^3", rate_cell(flops, ours), rate_cell(flops, timed.get("opdsl eager")),
                           rate_cell(flops, blas), rate_cell(flops, timed.get("onnxruntime")),
                           rate_cell(flops, timed.get("numba")),
                           f"{ratio:.1%}" if ratio is not None else "n/a",
                           f"≥ {limit:.0%}: {verdict}" if limit else "—"])
        table.values[str(n)] = {name: gflops(flops, t) for name, t in
                                list(timed.items()) + [("numpy BLAS", blas)]}
        table.values[str(n)]["ratio"] = ratio
    table.notes.append("opdsl (load_onnx) is `dsl.load_onnx(one-node MatMul model).run(feeds)`: it reads the "
                       "feeds in place and writes y into a new array (docs/ops.md, No copies in or out); "
                       "onnxruntime (all cores, `sess.run`) allocates y; numpy writes into a preallocated y (`out=`)")
    return table


def _linear_model(a_shape: Sequence[int], w: np.ndarray):
    """y = a @ w with w an initializer (a Linear layer's constant weights, as exported models have)."""
    from onnx import helper, numpy_helper
    y_shape = list(a_shape[:-1]) + [w.shape[-1]]
    return op_models._model(helper.make_node("MatMul", ["a", "w"], ["y"]),
                            [helper.make_tensor_value_info("a", op_models.onnx_elem_type(np.float32), list(a_shape))],
                            [helper.make_tensor_value_info("y", op_models.onnx_elem_type(np.float32), y_shape)],
                            [numpy_helper.from_array(w, "w")])


def _bench_products(title: str, shapes, repeat: int, backend: str, constant_b: bool, target: Optional[float],
                    block: int = 5) -> Table:
    """Products A @ B of the given shapes: opdsl (load_onnx, and eager for batched ones) vs numpy
    (child process) and onnxruntime; with ``constant_b`` B is the model's initializer."""
    table = Table(title, ["A @ B", "opdsl (load_onnx)", "opdsl (ops.MatMul eager)", "numpy matmul", "onnxruntime",
                          "opdsl / numpy", "opdsl / onnxruntime", "target"])
    names = [f"{'x'.join(map(str, sa))} @ {'x'.join(map(str, sb))}" for sa, sb in shapes]
    _progress(f"{title}: numpy in a child process")
    numpy_times = NumpyBaseline([{"name": nm, "a": list(sa), "b": list(sb)}
                                 for nm, (sa, sb) in zip(names, shapes)], repeat)
    timed_by_shape: Dict[str, Dict[str, Optional[Timing]]] = {}
    for name, (sa, sb) in zip(names, shapes):
        _progress(f"{name}: compiling and checking")
        a, b = op_models.random_inputs([sa, sb], seed=sum(sa))
        want = _reference_product(a, b)
        if constant_b:
            model = _linear_model(sa, b)
            cases = {"opdsl": op_models.opdsl_runner(model, {"a": a}, backend),
                     "onnxruntime": op_models.ort_runner(model, {"a": a})}
        else:
            cases = _opdsl_cases(a, b, backend)
            cases["onnxruntime"] = op_models.ort_runner(op_models.matmul_model(sa, sb), {"a": a, "b": b})
        cases = checked_cases(table, cases, want, name)
        _progress(f"{name}: timing, interleaved")
        timed_by_shape[name] = dict(measure_interleaved(cases, repeat=repeat, warmup=2, block=block))
        del cases
    _progress(f"{title}: numpy in a child process, second run")
    numpy_times.again()
    table.notes.append(numpy_times.note())
    for (name, timed), (sa, sb) in zip(timed_by_shape.items(), shapes):
        ref = numpy_times.timing(name)
        flops = matmul_flops(sa, sb)
        ours, ort = timed.get("opdsl"), timed.get("onnxruntime")
        ratio = gflops(flops, ours) / gflops(flops, ref) if ours else None
        vs_ort = gflops(flops, ours) / gflops(flops, ort) if ours and ort else None
        verdict = "—"
        if target is not None:
            verdict = "≥ 100%: " + table.target(f"opdsl >= numpy on {name}", ratio, target, higher_is_better=True,
                                                percent=True)
        table.rows.append([name, rate_cell(flops, ours), rate_cell(flops, timed.get("opdsl eager")),
                           rate_cell(flops, ref), rate_cell(flops, ort),
                           f"{ratio:.1%}" if ratio is not None else "n/a",
                           f"{vs_ort:.1%}" if vs_ort is not None else "n/a", verdict])
        table.values[name] = {nm: gflops(flops, t) for nm, t in list(timed.items()) + [("numpy", ref)]}
        table.values[name]["ratio"] = ratio
    return table


def bench_batched(shapes=ATTENTION_SHAPES, repeat: int = DEFAULT_REPEAT, backend: str = "numba") -> Table:
    """Attention-shaped batched MatMul: opdsl vs numpy (child process) and onnxruntime.  A product
    takes 40-120 µs, so each side gets at least ``BATCHED_MIN_REPEAT`` samples in blocks of
    ``BATCHED_BLOCK``: with 10 a two-thread side's best was a draw of the machine's moment
    (benchmarks/RESULTS.md, issue 29, twenty-first session, slice attn)."""
    return _bench_products("batched MatMul f32 (attention shapes), GFLOP/s: best (median)", shapes,
                           max(repeat, BATCHED_MIN_REPEAT) if repeat > 1 else repeat, backend,
                           constant_b=False, target=BATCHED_TARGET, block=BATCHED_BLOCK)


def bench_linear(shapes=LINEAR_SHAPES, repeat: int = DEFAULT_REPEAT, backend: str = "numba") -> Table:
    """The BERT layer's Linear products (x @ constant W): opdsl vs numpy and onnxruntime."""
    return _bench_products("Linear layers f32 (BERT layer of benchmarks/models.py, W constant), GFLOP/s: "
                           "best (median)", shapes, repeat, backend, constant_b=True, target=None)


def half_dtypes() -> Dict[str, np.dtype]:
    """The 16-bit storage types opdsl's MatMul accepts (ops.matmul.MATMUL_TYPES), as numpy dtypes."""
    from ops.matmul import MATMUL_TYPES
    found = {}
    for t in MATMUL_TYPES:
        if t.name in ("f16", "bf16"):
            try:
                found[t.name] = np.dtype(t.np)
            except TypeError:  # bf16 without ml_dtypes
                pass
    return found


def bench_half(sizes: Sequence[int] = HALF_SIZES, repeat: int = DEFAULT_REPEAT, backend: str = "numba",
               only: Sequence[str] = ("f16", "bf16")) -> Table:
    """f16/bf16-storage MatMul against opdsl's own f32 at the same size (timed interleaved);
    ``only`` narrows the 16-bit types (each is a compile of its own)."""
    kinds = {k: v for k, v in half_dtypes().items() if k in only}
    table = Table("16-bit storage MatMul, M = N = K, opdsl (load_onnx), GFLOP/s: best (median)",
                  ["size", "f32"] + [f"{k}" for k in kinds] + [f"{k} / f32" for k in kinds] + ["target"])
    for missing in sorted(set(only) - set(kinds)):
        table.notes.append(f"{missing}: not in ops.matmul.MATMUL_TYPES (or no numpy dtype for it), not measured")
    for n in sizes:
        _progress(f"half {n}^3: compiling and checking f32, {', '.join(kinds)}")
        a32, b32 = op_models.random_inputs([(n, n), (n, n)], seed=n)
        cases = {}
        for name, dt in [("f32", np.dtype(np.float32))] + list(kinds.items()):
            a, b = a32.astype(dt), b32.astype(dt)
            model = op_models.matmul_model(a.shape, b.shape, dt)
            runner = op_models.opdsl_runner(model, {"a": a, "b": b}, backend)
            cases.update(checked_cases(table, {name: runner}, _reference_product(a, b), f"{n}^3"))
        _progress(f"half {n}^3: timing, interleaved")
        timed: Dict[str, Optional[Timing]] = dict(measure_interleaved(cases, repeat=repeat, warmup=1))
        flops = 2.0 * n ** 3
        f32 = gflops(flops, timed.get("f32"))
        ratios = {k: (gflops(flops, timed.get(k)) / f32 if f32 and timed.get(k) else None) for k in kinds}
        verdicts = [table.target(f"{k} >= {HALF_TARGET:.0%} of f32 at {n}^3", r, HALF_TARGET,
                                 higher_is_better=True, percent=True) for k, r in ratios.items()]
        table.rows.append([f"{n}^3", rate_cell(flops, timed.get("f32"))]
                          + [rate_cell(flops, timed.get(k)) for k in kinds]
                          + [f"{r:.0%}" if r is not None else "n/a" for r in ratios.values()]
                          + [f"≥ {HALF_TARGET:.0%}: " + ", ".join(verdicts)])
        table.values[str(n)] = {k: gflops(flops, t) for k, t in timed.items()}
        table.values[str(n)].update({f"{k}/f32": r for k, r in ratios.items()})
    table.notes.append("the f16/bf16 results are held to the float64 product of the same 16-bit inputs "
                       f"(tolerance {TOLERANCE['float16']:g} / {TOLERANCE['bfloat16']:g} of the largest value)")
    return table


def conv_flops(c_in: int, hw: int, c_out: int, k: int, stride: int) -> float:
    out = op_models.conv_output_size(hw, k, stride, op_models.same_pad(k))
    return 2.0 * c_out * out * out * c_in * k * k


def conv_kernel(model, x, backend: str) -> str:
    """The ``Conv.kernels`` key the one-node model runs (direct, gemm, plain, nchwc16)."""
    import dsl
    return ", ".join(sorted(set(dsl.load_onnx(model, backend=backend).selected({"x": x}).values())))


def bench_conv(shapes=RESNET50_CONVS, repeat: int = DEFAULT_REPEAT, backend: str = "numba",
               extra=None) -> Table:
    """Batch-1 f32 Conv layers: opdsl (load_onnx) vs onnxruntime on every core, same weights;
    ``extra`` shapes (default: EXTRA_CONVS after the ResNet-50 eight) are timed after them
    without a target."""
    which = "ResNet-50 layer shapes" if tuple(shapes) == RESNET50_CONVS else "shapes given"
    if extra is None:
        extra = EXTRA_CONVS if tuple(shapes) == RESNET50_CONVS else ()
    extra = [s for s in extra if s not in shapes]
    table = Table(f"Conv f32, batch 1, {which}, vs onnxruntime ({os.cpu_count()} intra-op threads)",
                  ["C_in, H=W -> C_out, k, stride", "GFLOP", "opdsl kernel", "opdsl best (median)",
                   "onnxruntime best (median)", "opdsl / ORT", "target", "max |diff| vs ORT"])
    ratios = []
    for at, (c_in, hw, c_out, k, stride) in enumerate(list(shapes) + extra):
        counted = at < len(shapes)
        name = f"{c_in}, {hw} -> {c_out}, {k}x{k}, s{stride}"
        _progress(f"conv {name}: compiling and checking")
        rng = np.random.default_rng(c_in * 7 + c_out + k)
        weight = (rng.standard_normal((c_out, c_in, k, k), dtype=np.float32)
                  * np.float32(math.sqrt(2.0 / (c_in * k * k))))  # He init: outputs stay O(1)
        bias = rng.standard_normal(c_out, dtype=np.float32) * np.float32(0.1)
        x = rng.standard_normal((1, c_in, hw, hw), dtype=np.float32)
        model = op_models.conv_model(c_in, hw, c_out, k, stride, weight, bias)
        ort = op_models.ort_runner(model, {"x": x})
        ours = op_models.opdsl_runner(model, {"x": x}, backend)
        want = np.asarray(ort(), np.float64)
        _, err, _ = compare(ours(), want)
        cases = {"onnxruntime": ort, **checked_cases(table, {"opdsl": ours}, want, name)}
        _progress(f"conv {name}: timing, interleaved")
        timed: Dict[str, Optional[Timing]] = dict(measure_interleaved(cases, repeat=repeat, warmup=1))
        t_ours, t_ort = timed.get("opdsl"), timed["onnxruntime"]
        ratio = t_ours.best / t_ort.best if t_ours else None
        if ratio is not None and counted:
            ratios.append(ratio)
        verdict = (table.target(f"opdsl <= {CONV_TARGET}x ORT on {name}", ratio, CONV_TARGET, higher_is_better=False)
                   if counted else "extra row")
        table.rows.append([name, f"{conv_flops(c_in, hw, c_out, k, stride) / 1e9:.3g}", conv_kernel(model, x, backend),
                           f"{fmt_seconds(t_ours.best)} ({fmt_seconds(t_ours.median)})" if t_ours else "MISMATCH",
                           f"{fmt_seconds(t_ort.best)} ({fmt_seconds(t_ort.median)})",
                           f"{ratio:.2f}x" if ratio is not None else "n/a",
                           f"≤ {CONV_TARGET}x: {verdict}" if counted else "none (extra row)",
                           f"{err:.2g}"])
        table.values[name] = {"opdsl": t_ours.best if t_ours else None, "onnxruntime": t_ort.best,
                              "ratio": ratio, "max_diff": err}
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios and len(ratios) == len(shapes) else None
    table.target(f"geometric mean of opdsl / ORT over the {len(shapes)} shapes <= {CONV_GEOMEAN_TARGET}x",
                 geomean, CONV_GEOMEAN_TARGET, higher_is_better=False)
    table.values["geomean"] = {"ratio": geomean}
    table.notes.append("opdsl kernel: what Conv.select picked (direct: ops/conv_direct.py's SIMD tile; "
                       "pointwise: ops/conv_pointwise.py's 1x1 tile; gemm: ops/gemm_packed.py on x or its "
                       "implicit im2col)")
    table.notes.append("both run the same one-node ONNX model (weights as initializers, pads k//2); "
                       f"opdsl's result is held to ORT's: allclose(rtol={TOLERANCE['float32']:g}, "
                       f"atol={TOLERANCE['float32']:g} * max|ORT|)")
    return table


BENCHES: Dict[str, Callable[..., Table]] = dict(gemm=bench_gemm, batched=bench_batched, linear=bench_linear,
                                                half=bench_half, conv=bench_conv)


# --------------------------------------------------------------------------- command line

def machine_header() -> List[str]:
    """What the numbers came from, probed now: CPU model (lscpu), AVX-512, cores, versions."""
    flags = avx512_flags()
    avx = f"present ({' '.join(flags)})" if flags else "absent (no avx512* flag in /proc/cpuinfo)"
    blas_env = ", ".join(f"{k}={os.environ.get(k)}" for k in SLOW_BLAS_VARS)
    return [f"lscpu model name: {lscpu_model_name()}, {usable_cores()} usable cores",
            f"AVX-512: {avx}",
            f"OpenBLAS overrides in this process: {blas_env} (removed for the numpy BLAS child)"] + machine_info()


def _sizes(text: str) -> Tuple[int, ...]:
    return tuple(int(s) for s in text.split(",") if s.strip())


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_ops",
                                 description="opdsl GEMM and Conv ops vs numpy BLAS, onnxruntime and numba")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help=f"comma-separated sections to run, from {','.join(SECTIONS)}")
    ap.add_argument("--sizes", default=",".join(map(str, GEMM_SIZES)), help="square GEMM sizes (gemm section)")
    ap.add_argument("--half-sizes", default=",".join(map(str, HALF_SIZES)), help="square sizes of the half section")
    ap.add_argument("--repeat", type=int, default=DEFAULT_REPEAT, help="timed samples per case (after warm-up)")
    ap.add_argument("--backend", default="numba", help="opdsl backend to time (default numba)")
    ap.add_argument("--output", metavar="FILE", help="also write the markdown report to FILE")
    ap.add_argument("--wait-idle", type=float, default=0.0, metavar="LOAD",
                    help="before each section, wait (up to 10 min) until the 1-minute load average is below LOAD")
    ap.add_argument("--boost", action="store_true",
                    help="run in a new session at nice -20 (Linux, root); see benchmarks/README.md")
    args, wanted, argv, boosted, code = start(ap, argv, "benchmarks.bench_ops", tuple(BENCHES))
    if code is not None:  # the boosted child ran the benchmarks
        return code

    cmd = "python -m benchmarks.bench_ops " + " ".join(argv)
    header = [f"Command: `{cmd.strip()}`", f"Date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", ""]
    if boosted:
        header.insert(1, f"Priority: {boosted} (own session)")
    header += [f"- {line}" for line in machine_header()]
    report = ["\n".join(header)]
    print(report[0], flush=True)
    sizes = {"gemm": _sizes(args.sizes), "half": _sizes(args.half_sizes)}
    failed = False
    for name in wanted:
        if args.wait_idle:
            wait_until_idle(args.wait_idle, 600, _progress)
        t = time.perf_counter()
        load0 = load_text()
        kwargs = dict(repeat=args.repeat, backend=args.backend)
        if name in sizes:
            kwargs["sizes"] = sizes[name]
        table = BENCHES[name](**kwargs)
        failed = failed or bool(table.mismatches)
        table.notes.append(f"section time {time.perf_counter() - t:.1f} s; load average before {load0}, "
                           f"after {load_text()}")
        text = table.markdown()
        print("\n" + text, flush=True)
        report.append(text)
    if args.output:
        Path(args.output).write_text("\n\n".join(report) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
