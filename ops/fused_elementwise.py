"""FusedElementwise: a chain (or DAG) of elementwise float ops run as ONE generated kernel.

ops/elementwise_fusion.py's compile pass builds these nodes; the op is registered (com.opdsl
domain) so fused graphs pickle and export.  ``program`` holds one DSL assignment per line, read
in order: ``x0, x1, ...`` are the node's inputs (one element each, broadcast to the output),
``t0, t1, ...`` the values computed; the last line's value is stored.  E.g. GELU:

    t0 = f32(x0 / x1)
    t1 = f32(dsl.erf(t0))
    ...

Why generate a kernel: each unfused node is a launch plus a full pass over memory; the BERT
layer's GELU is five of them over 131 K floats.  The kernel source is made from the program,
the dtypes and how each input is indexed (whole, one element, or broadcast), and cached by that
text, so identical chains share one compile (in memory here, on disk by the kernel cache).

The program is checked (``verify``) against a small grammar before any code is made from it:
names x<k>/t<k>, number literals, arithmetic, comparisons, ``a if c else b`` and the casts and
math builtins below; anything else is a VerifyError, so a model file cannot smuggle code in.
"""
from __future__ import annotations

import ast
from typing import List, Sequence, Tuple

import dsl
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops import elementwise_table as table
from ops.elementwise import FLOATS, broadcast_shape, launch_broadcast
from ops.generated_kernel import broadcast_loop, compile_kernel

_CASTS = frozenset({"f32", "f64"})  # bare calls every program may make; the builtins come from the table
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div)
_CMPOPS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
INPUT_DTYPES = FLOATS + (dsl.bool_,)
MAX_INPUTS = 12
MAX_STEPS = 64



def _check_program(program: str, n_inputs: int) -> List[str]:
    """The program's lines, or a VerifyError naming the first offending line and construct."""
    lines = [ln.strip() for ln in program.strip().splitlines() if ln.strip()]
    if not lines:
        raise VerifyError("FusedElementwise program is empty; it needs lines 't<k> = <expression>'")
    if len(lines) > MAX_STEPS:
        raise VerifyError(f"FusedElementwise program has {len(lines)} lines; at most {MAX_STEPS} accepted")
    known = {f"x{k}" for k in range(n_inputs)}
    calls = _calls()
    for k, line in enumerate(lines):
        where = f"FusedElementwise program line {k + 1} {line!r}"
        try:
            tree = ast.parse(line, mode="exec")
        except SyntaxError:
            raise VerifyError(f"{where}: not a Python assignment") from None
        st = tree.body[0] if len(tree.body) == 1 else None
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                and st.targets[0].id == f"t{k}"):
            raise VerifyError(f"{where}: accepted only 't{k} = <expression>' (values are numbered in order)")
        for node in ast.walk(st.value):
            _check_node(node, known, where, calls)
        known.add(f"t{k}")
    return lines


def _calls() -> Tuple[frozenset, Tuple[str, ...]]:
    """(dsl.<name> calls, bare calls) a program may make: the builtins of the rows that fuse
    (ops/elementwise_table.py) and the f32/f64 casts."""
    dsl_calls, bare = table.fused_calls()
    return dsl_calls, tuple(sorted(_CASTS)) + tuple(sorted(bare - _CASTS))


def _check_node(node, known, where: str, calls) -> None:
    dsl_calls, bare_calls = calls
    ok = isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp, ast.BoolOp, ast.Call, ast.Load,
                           ast.And, ast.Or, ast.USub, ast.UAdd, ast.Not) + _BINOPS + _CMPOPS)
    if isinstance(node, ast.Name):
        ok = node.id in known or node.id in bare_calls or node.id == "dsl"
        if not ok:
            raise VerifyError(f"{where}: unknown name {node.id!r}; accepted: the inputs x0..x{len(known)}, "
                              f"earlier values t<k>, {', '.join(sorted(bare_calls))}")
    elif isinstance(node, ast.Constant):
        ok = type(node.value) in (int, float)
    elif isinstance(node, ast.Attribute):
        ok = isinstance(node.value, ast.Name) and node.value.id == "dsl" and node.attr in dsl_calls
    elif isinstance(node, ast.Call):
        f = node.func
        ok = not node.keywords and ((isinstance(f, ast.Name) and f.id in bare_calls) or (
            isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "dsl"
            and f.attr in dsl_calls))
    if not ok:
        raise VerifyError(f"{where}: {ast.unparse(node) if isinstance(node, ast.expr) else type(node).__name__!s} "
                          f"is not accepted; programs use arithmetic (+ - * /), comparisons, 'a if c else b', "
                          f"{'/'.join(bare_calls)} and dsl.{', dsl.'.join(sorted(dsl_calls))}")


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
    (bool for Where conditions), a float output of dtype ``dtype`` (a dsl dtype name)."""

    program: str
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
        _check_program(self.program, len(xs))
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
        lines = _check_program(self.program, len(specs))
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

