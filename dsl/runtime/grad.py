"""``dsl.grad(kernel)``: the reverse-mode gradient of a kernel, itself a kernel.

Its parameters are the forward's, then ``grad_<name>: In`` for each float ``Out`` tensor (the
incoming gradient), then ``grad_<name>: InOut`` for each float ``In`` tensor, into which the
gradient is *added* (as PyTorch accumulates ``.grad``).  Per specialization the forward's typed
IR is differentiated (dsl/lang/adjoint.py) and written back as kernel Python
(dsl/lang/emit_python.py); that generated kernel compiles, caches and runs like any other, so
every backend runs gradients, the interpreter included.  The gradient kernel pickles as
``dsl.grad`` of its (pickled) forward.
"""
from __future__ import annotations

import hashlib
import linecache
import threading
from typing import Any, Dict, List, Tuple

from dsl.lang import adjoint, emit_python, ir
from dsl.lang import types as T
from dsl.lang.errors import CompileError, NotDifferentiable
from dsl.lang.signature import ParamDecl
from dsl.runtime import fastpath
from dsl.runtime.kernel import Kernel

_ANNOTATION = {"in": T.In, "out": T.Out, "inout": T.InOut}


def grad(kernel: Kernel) -> "GradKernel":
    """The gradient kernel of ``kernel`` (docs/language.md, "Gradients"); one per kernel."""
    if isinstance(kernel, GradKernel):
        raise TypeError(f"dsl.grad({kernel.__name__}): the kernel is already a gradient; second derivatives are "
                        "not supported")
    if not isinstance(kernel, Kernel):
        raise TypeError(f"dsl.grad() takes a @dsl.kernel, got {type(kernel).__name__} {kernel!r}")
    with _LOCK:
        g = kernel.__dict__.get("_opdsl_grad")
        if g is None:
            g = kernel.__dict__["_opdsl_grad"] = GradKernel(kernel)
        return g


_LOCK = threading.Lock()


def _could_be_float(dtype) -> bool:
    if isinstance(dtype, T.TypeVar):
        return not dtype.allowed or any(t.is_float for t in dtype.allowed)
    return dtype.is_float


def _tensor_access(kernel: Kernel) -> Dict[str, Tuple[bool, bool]]:
    """(read, written) of each tensor in the forward's body."""
    out: Dict[str, Tuple[bool, bool]] = {}
    for n in ir.walk(tuple(kernel.parsed().body)):
        if isinstance(n, ir.Load):
            r, w = out.get(n.tensor, (False, False))
            out[n.tensor] = (True, w)
        elif isinstance(n, (ir.Store, ir.AtomicAdd)):
            r, w = out.get(n.tensor, (False, False))
            out[n.tensor] = (r, True)
    return out


def gradient_params(kernel: Kernel) -> List[Tuple[ParamDecl, str]]:
    """(the grad_ parameter, 'seed' | 'grad') for each float tensor of ``kernel``, in the order
    of the convention: incoming gradients of outputs first, then gradients of inputs."""
    names = {p.name for p in kernel.params}
    access = _tensor_access(kernel)
    seeds, grads = [], []
    for p in kernel.params:
        if p.kind != "tensor" or not _could_be_float(p.annotation.dtype):
            continue
        acc = p.annotation.access
        if acc == "inout":
            read, written = access.get(p.name, (False, False))
            acc = "out" if written and not read else "in"
        name = f"grad_{p.name}"
        if name in names:
            raise TypeError(f"dsl.grad({kernel.__name__}): its parameter '{name}' clashes with the gradient parameter "
                            f"of '{p.name}'; rename it")
        a = p.annotation
        binding = _ANNOTATION["in" if acc == "out" else "inout"]
        ann = binding[a.dtype, a.ndim] if a.ndim is not None else binding[a.dtype]
        decl = ParamDecl(name, "tensor", ann, loc=p.loc)
        (seeds if acc == "out" else grads).append((decl, p.name))
    return [(d, "seed") for d, _ in seeds] + [(d, "grad") for d, _ in grads]


class GradKernel(Kernel):
    """The kernel ``dsl.grad(forward)`` returns; call it like any kernel."""

    def __init__(self, forward: Kernel):
        self.forward = forward
        self.fn = forward.fn
        self.__name__ = f"{forward.__name__}_grad"
        self.__qualname__ = f"{getattr(forward, '__qualname__', forward.__name__)}_grad"
        self.__module__ = forward.__module__
        self.__doc__ = f"Gradient of {forward.__name__} (dsl.grad)."
        self.threads, self.grid = forward.threads, forward.grid
        self.follow_log_level(forward)  # the forward's dsl.log floor and run-time level
        self.fastmath, self.debug = forward.fastmath, forward.debug
        self.defines, self.features = forward.defines, forward.features  # a variant's gradient needs what it needs
        self._extra = gradient_params(forward)
        self.params = list(forward.params) + [d for d, _ in self._extra]
        self._names = [p.name for p in self.params]
        self._index = {p.name: k for k, p in enumerate(self.params)}
        self._parsed = {}
        self._variants: Dict[Tuple, Any] = {}
        self._fast = fastpath.build(self.params)
        self._fast_variants: Dict[Tuple, Any] = {}
        self._lock = threading.RLock()
        self._inner: Dict[Tuple, Kernel] = {}

    def __reduce__(self):
        return (grad, (self.forward,))

    def variant(self, **options) -> Kernel:
        raise TypeError(f"{self.__name__}: take the gradient of a variant instead, "
                        f"dsl.grad({self.forward.__name__}.variant(...))")

    # ------------------------------------------------------------------ the generated kernel
    def generated(self, values: List[Any]) -> Kernel:
        """The kernel Python of this specialization's gradient, as a Kernel (built once per key)."""
        nf = len(self.forward.params)
        fwd_values, fwd_key = self.forward.bind(tuple(values[:nf]), {})
        with self._lock:
            inner = self._inner.get(fwd_key)
            if inner is None:
                inner = self._inner[fwd_key] = self._build(fwd_values)
            return inner

    def _build(self, fwd_values: List[Any], split: bool = True) -> Kernel:
        """The gradient kernel of one specialization; ``split=False`` keeps the reversed loops
        whole even under strict math (what the split ones must match bit for bit)."""
        fwd = self.forward
        try:
            fir = fwd.specialize(fwd_values)
        except CompileError as e:
            raise e.with_traceback(None) from None
        grads, seeds, extra = {}, {}, []
        for decl, role in self._extra:
            src = fir.param(decl.name[len("grad_"):])
            if not src.dtype.compute.is_float:
                raise TypeError(f"{self.__name__}(): '{src.name}' is {src.dtype}, which has no gradient; "
                                "dsl.grad differentiates float tensors")
            (seeds if role == "seed" else grads)[src.name] = decl.name
            extra.append(ir.TensorParam(decl.name, src.dtype, src.ndim, "in" if role == "seed" else "inout"))
        body, arrays = adjoint.differentiate(fir, grads, seeds, split=split and not self.fastmath)
        source = emit_python.kernel_source(self.__name__, tuple(fir.params) + tuple(extra), body,
                                           f"Gradient of {fwd.__name__} (generated by dsl.grad).", arrays)
        digest = hashlib.sha256(source.encode()).hexdigest()[:12]
        filename = f"<dsl.grad {fwd.__qualname__ if hasattr(fwd, '__qualname__') else fwd.__name__} {digest}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace = {"dsl": emit_python.namespace(), "__name__": fwd.__module__}
        exec(compile(source, filename, "exec"), namespace)
        inner = Kernel(namespace[self.__name__], threads=self.threads, grid=self.grid, fastmath=self.fastmath,
                       debug=self.debug)
        inner.follow_log_level(self)
        return inner

    # ------------------------------------------------------------------ Kernel hooks
    def request(self, backend: str, key: Tuple, values: List[Any]):
        inner = self.generated(values)
        _, inner_key = inner.bind(tuple(values), {})
        return inner.request(backend, inner_key, values)

    def specialize(self, values: List[Any]):
        return self.generated(values).specialize(values)

    def cache_key(self, backend: str, key: Tuple) -> str:
        """A digest of the forward's key and this specialization.  (What compiles is the generated
        kernel, whose own key hashes the source ``dsl.grad`` wrote: that is the disk cache's.)"""
        h = hashlib.sha256(repr(("dsl.grad", self.forward.cache_key(backend, ()), key)).encode())
        return h.hexdigest()[:32]

    def source(self, backend: str = "numba", *args, **kwargs) -> str:
        """Generated code, as for any kernel; ``backend="python"`` gives the kernel Python
        ``dsl.grad`` wrote (the forward replay, then the adjoint statements in reverse)."""
        __tracebackhide__ = True
        if backend != "python":
            return super().source(backend, *args, **kwargs)
        values, _ = self.bind(args, kwargs) if (args or kwargs) else self.example_args()
        inner = self.generated(values)
        return "".join(linecache.cache[inner.fn.__code__.co_filename][2])


__all__ = ["grad", "GradKernel", "NotDifferentiable"]
