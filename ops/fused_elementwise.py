"""FusedElementwise: a chain (or DAG) of elementwise float ops run as ONE generated kernel.

ops/elementwise_fusion.py's compile pass builds these nodes; the op is registered (com.opdsl
domain) so fused graphs pickle and export.  ``program`` is a ``dsl.lang.expr_tree.Program``:
numbered steps, each a call of an elementwise op of ops/elementwise_table.py (``Add``, ``Erf``,
``Sigmoid``...) over the node's inputs ``x0, x1, ...`` (one element each, broadcast to the
output), number literals and earlier steps ``t<k>``; the last step's value is stored.  GELU:

    t0 = Div(x0, x1): f32
    t1 = Erf(t0): f32
    ...

Why generate a kernel: each unfused node is a launch plus a full pass over memory; the BERT
layer's GELU is five of them over 131 K floats.  The kernel source is written from the program
(each row says how its op is spelt in the DSL), the dtypes and how each input is indexed (whole,
one element, or broadcast), and cached by that text, so identical chains share one compile (in
memory here, on disk by the kernel cache).

The program is checked (``verify``) before any code is made from it: every step calls an op that
fuses, with the arguments and attributes it takes, values of the step's dtype (bool only as a
Where condition) and inputs the node has; anything else is a VerifyError naming the step.  A
program is data (numbers and op names), so a model file cannot smuggle code in.  Its standard
ONNX form is written by ops/fused_elementwise_export.py.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import dsl
from dsl.lang.expr_tree import Call, Const, Input, Program, ProgramBuilder, Ref  # noqa: F401  (the program's parts)
from dsl.opgraph import registry
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops import elementwise_table as table
from ops import fused_elementwise_export  # noqa: F401  (registers the standard ONNX form)
from ops.elementwise import FLOATS, broadcast_shape, launch_broadcast
from ops.generated_kernel import broadcast_loop, compile_kernel

INPUT_DTYPES = FLOATS + (dsl.bool_,)
MAX_INPUTS = 12
MAX_STEPS = 64
_STORAGE = {"f16": "f32", "bf16": "f32"}  # loads of these give f32 in the kernel


def step_dtype(dtype) -> str:
    """The dtype a value of ``dtype`` has inside the kernel (f16/bf16 load as f32), by name."""
    name = dtype.name if hasattr(dtype, "name") else str(dtype)
    return "bool" if name.startswith("bool") else _STORAGE.get(name, name)


def program_lines(program: Program, input_dtypes: Sequence[str]) -> List[str]:
    """The kernel lines of a program over inputs of ``input_dtypes`` (names), one
    ``t<k> = f32(<expression>)`` per expression, or a VerifyError naming the first wrong step."""
    if not isinstance(program, Program):
        raise VerifyError(f"FusedElementwise program must be a dsl.lang.expr_tree.Program, "
                          f"got {type(program).__name__}")
    if len(program.steps) > MAX_STEPS:
        raise VerifyError(f"FusedElementwise program has {len(program.steps)} steps; at most {MAX_STEPS} accepted")
    dtypes = [step_dtype(d) for d in input_dtypes]
    last: List[str] = []   # step -> the kernel name of its value
    kinds: List[str] = []  # step -> its dtype
    lines: List[str] = []
    for k, step in enumerate(program.steps):
        where = f"FusedElementwise program step t{k} = {step}"
        row = table.fusing_row(step.op, step.since)
        if row is None:  # the op's module not imported yet (a program read from a plan cache entry or
            registry.load_library_for("", step.op)  # a file, the library loaded lazily): load it, then ask again
            row = table.fusing_row(step.op, step.since)
        if row is None:
            raise VerifyError(f"{where}: {step.op}{'' if step.since is None else '@' + str(step.since)} is not an "
                              f"op that fuses; accepted: {', '.join(table.fusing_ops())}")
        fusion = row.fusion()
        names = []
        for j, a in enumerate(step.args):
            if isinstance(a, Input) and a.index >= len(dtypes):
                raise VerifyError(f"{where}: reads x{a.index}, but the node has {len(dtypes)} input(s)")
            got = dtypes[a.index] if isinstance(a, Input) else kinds[a.index] if isinstance(a, Ref) else None
            want = "bool" if j in fusion.conditions else step.dtype
            if got is not None and got != want and not (fusion.converts and got != "bool"):
                raise VerifyError(f"{where}: argument {j} is {got}, the step takes {want} there")
            names.append(None if a is None else str(a) if not isinstance(a, Ref) else last[a.index])
        exprs = fusion.spell(names, dict(step.attrs)) if fusion.arity[0] <= len(names) <= fusion.arity[1] else None
        if exprs is None or set(dict(step.attrs)) != set(fusion.attrs):
            raise VerifyError(f"{where}: {fusion.usage(step.op)}"
                              f"{'' if fusion.arity[0] == fusion.arity[1] else ' (None for an absent one)'}")
        first = len(lines)
        for e in exprs:
            e = e.format(**{f"p{j}": f"t{first + j}" for j in range(len(lines) - first)})
            lines.append(f"t{len(lines)} = {step.dtype}({e})")
        last.append(f"t{len(lines) - 1}")
        kinds.append(step.dtype)
    return lines


def _kinds(specs: Sequence[TensorSpec], out_shape: Tuple) -> Tuple[str, ...]:
    """How the kernel reads each input: 'full' (the output's own shape, read at the output's
    index), 'one' (a single element, read once) or 'bcast' (broadcast, strided per row)."""
    known = all(d is not None for d in out_shape)
    kinds = []
    for s in specs:
        if known and s.shape == tuple(out_shape) or (not out_shape and not s.shape):
            kinds.append("full")
        elif all(d == 1 for d in s.shape):
            kinds.append("one")
        else:
            kinds.append("bcast")
    return tuple(kinds)


def kernel_source(lines: Sequence[str], dtypes: Sequence[str], out_dtype: str, kinds: Sequence[str]) -> str:
    """The @dsl.kernel source for a checked program, input dtypes (names), output dtype and kinds.
    All inputs 'full' or 'one': a flat loop over 1-D views; else 4-D views (collapsed broadcast,
    ops/elementwise.py), the index math done once per output row as binary_kernel does."""
    flat = all(k != "bcast" for k in kinds)
    rank = 1 if flat else 4
    args = ", ".join(f"a{k}: In[{dt}, {rank}]" for k, dt in enumerate(dtypes))
    src = ["@dsl.kernel", f"def fused_elementwise({args}, y: Out[{out_dtype}, {rank}]):"]
    body = []
    for k, kind in enumerate(kinds):
        if kind == "one":
            body.append(f"x{k} = a{k}.flat[0]")
    if flat:
        loads = [f"x{k} = a{k}.flat[i]" for k, kind in enumerate(kinds) if kind == "full"]
        body += ["lo, hi = dsl.split(y.size)", "for i in range(lo, hi):"]
        body += ["    " + ln for ln in loads + list(lines) + [f"y.flat[i] = t{len(lines) - 1}"]]
    else:
        strided = [f"a{k}" for k, kind in enumerate(kinds) if kind == "bcast"]
        loads = [f"x{k} = a{k}.flat[p_a{k} + j * s_a{k}3]" if kind == "bcast" else f"x{k} = a{k}.flat[base + j]"
                 for k, kind in enumerate(kinds) if kind != "one"]
        inner = ["for j in range(j0, jn):"] + ["    " + ln for ln in loads + list(lines)
                                                 + [f"y.flat[base + j] = t{len(lines) - 1}"]]
        body += broadcast_loop("y", strided, inner)
    return "\n".join(src + ["    " + ln for ln in body]) + "\n"


def compiled(source: str):
    """The dsl.Kernel of generated ``source``, made once per distinct text (ops/generated_kernel.py)."""
    return compile_kernel(source, "fused_elementwise", __name__)


@dsl.op("FusedElementwise", domain="com.opdsl", since=1)
class FusedElementwise(dsl.Op):
    """y = program(x0, x1, ...), the inputs broadcast together (numpy rules); float inputs
    (bool for Where conditions), a float output of dtype ``dtype`` (a dsl dtype name).
    ``program``: a ``Program`` (dsl/lang/expr_tree.py; ``ProgramBuilder`` makes one)."""

    program: Program
    dtype: str = "f32"
    # no ``inplace``: with y on top of an input, LLVM's runtime alias check sends the loop to its
    # scalar version (GELU's erf 4x slower); a buffer of its own keeps the loop vectorized

    def verify(self, *xs):
        if not xs or len(xs) > MAX_INPUTS:
            raise VerifyError(f"FusedElementwise takes 1 to {MAX_INPUTS} inputs, got {len(xs)}")
        for k, x in enumerate(xs):
            if x is None or x.dtype not in INPUT_DTYPES:
                raise VerifyError(f"FusedElementwise input x{k} is {x}; accepted dtypes: "
                                  f"{', '.join(map(str, INPUT_DTYPES))}")
        if self.dtype not in {str(t) for t in FLOATS}:
            raise VerifyError(f"FusedElementwise dtype {self.dtype!r}; accepted: {', '.join(map(str, FLOATS))}")
        program_lines(self.program, [x.dtype for x in xs])
        broadcast_shape(*(x.shape for x in xs), what="FusedElementwise")

    def infer(self, *xs):
        dt = next(t for t in FLOATS if str(t) == self.dtype)
        return TensorSpec(broadcast_shape(*(x.shape for x in xs)), dt)

    formats = ("plain", "nchwc16")

    def select_format(self, *xs):
        """Blocked (nchwc16) when every input is 4-D of the output's shape or one element and a
        full one already is blocked: the flat kernel then runs over the physical arrays as they
        are (the padding lanes compute garbage the model re-zeroes: keeps_padding is False)."""
        out = broadcast_shape(*(x.shape for x in xs))
        full = [x for x in xs if x.ndim == 4 and x.shape == out]
        ones = [x for x in xs if all(d == 1 for d in x.shape) and not (x.ndim == 4 and x.shape == out)]
        if len(out) == 4 and full and len(full) + len(ones) == len(xs) and any(x.format == "nchwc16" for x in full):
            return tuple("nchwc16" if x.ndim == 4 and x.shape == out else "plain" for x in xs), "nchwc16"
        return tuple("plain" for _ in xs), "plain"

    def implementation(self, specs: Sequence, backend: str):
        lines = program_lines(self.program, [s.dtype for s in specs])
        out = self.infer(*specs)
        kinds = _kinds(specs, out.shape)
        kernel = compiled(kernel_source(lines, [str(s.dtype) for s in specs], self.dtype, kinds))
        name = "flat" if "bcast" not in kinds else "broadcast"
        found = self.__dict__.setdefault("kernels", {})  # per node: profiles and print(model) name it
        if found.get(name, kernel) is not kernel:
            name = f"{name}[{','.join(str(s.dtype) for s in specs)}]"
        found[name] = kernel
        return kernel

    def run(self, impl, inputs, outputs, backend):
        y = outputs[0]
        if y.size == 0:
            return
        if impl.params[0].annotation.ndim == 1:  # the flat kernel: every input whole or one element
            impl(*(x.reshape(-1) for x in inputs), y.reshape(-1), backend=backend)
        else:
            launch_broadcast(impl, inputs, y, 4, backend=backend)

    plan = dsl.recorded_plan  # views from shapes only (docs/ops.md "Launch plans")

