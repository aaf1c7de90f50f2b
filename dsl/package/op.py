"""``PackageOp``: the ``dsl.Op`` behaviour every manifest op shares.

build.py makes one subclass per manifest entry and fills in its declarations; the hooks
here turn them into the op contract (docs/ops.md): the manifest's input checks in
``verify``, ``like:`` outputs in ``infer``, implementations chosen per backend in
``select``/``implementation``, scratch buffers and quantization-filled params in ``run``.
A package's ``functions`` module adds its own hooks on top (``PACKAGE_HOOKS``).
"""
from __future__ import annotations

import copy
import inspect
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from dsl.lang import types as T
from dsl.opgraph import tiling
from dsl.opgraph.launch_plan import default_plan
from dsl.opgraph.op import Op
from dsl.opgraph.spec import TensorSpec, VerifyError, describe
from dsl.package.manifest import OpDecl, ParamDecl
from dsl.runtime.kernel import Kernel

# Op hooks a package's ``functions`` module may define, each called as hook(op, ...) with the
# arguments dsl.Op gives it.  verify/infer/select combine with the manifest's declarations
# (see PackageOp); any other name listed here simply becomes the op's method.
PACKAGE_HOOKS = ("verify", "infer", "select", "select_format", "can_execute", "run") + tiling.HOOKS
COMBINED_HOOKS = ("verify", "infer", "select")

BOUND_ATTR = "_opdsl_package_params"  # params filled from quantization, on a bound implementation


class _BoundCallable:
    """A plain-callable implementation with quantization params attached (kernel_kwargs adds them)."""

    def __init__(self, impl, bound: Dict[str, Any]):
        self.impl = impl
        setattr(self, BOUND_ATTR, bound)
        self.__name__ = getattr(impl, "__name__", type(impl).__name__)
        try:
            self.__signature__ = inspect.signature(impl)
        except (TypeError, ValueError):
            pass

    def __call__(self, *args, **kwargs):
        return self.impl(*args, **kwargs)


class PackageOp(Op):
    """Base of the op classes built from manifests; not registered itself."""

    _decl: OpDecl = None
    _manifest: str = ""
    _hooks: Dict[str, Any] = {}
    _impls: Dict[str, Dict[str, Any]] = {}  # backend -> implementation name -> kernel / callable
    _bound_cache: Dict[tuple, Any] = {}
    _bound_lock = threading.Lock()

    # params -------------------------------------------------------------------------------
    def _init_params(self, given):
        super()._init_params(given)
        for p in self._decl.params:
            v = self._params.get(p.name)
            if p.size is not None and p.source is None and v is not None and len(v) != p.size:
                raise TypeError(f"{describe(self)} param '{p.name}' expects {p.size} values (size: {p.size}), "
                                f"got {len(v)}")

    # verify / infer / select ----------------------------------------------------------------
    def verify(self, *specs) -> None:
        for decl, spec in zip(self._decl.inputs, specs):
            if spec is None:
                raise VerifyError(f"input '{decl.name}' is required")
            if decl.dtypes is not None and _dtype_name(spec) not in decl.dtypes:
                raise VerifyError(f"input '{decl.name}' is {spec}; accepted dtypes: {', '.join(decl.dtypes)} "
                                  f"({self._where(decl)})")
            if decl.max_rank is not None and spec.ndim > decl.max_rank:
                raise VerifyError(f"input '{decl.name}' has rank {spec.ndim} ({spec}); accepted: rank <= "
                                  f"{decl.max_rank} ({self._where(decl)})")
            if decl.constant and spec.value is None:
                raise VerifyError(f"input '{decl.name}' must be a constant (an initializer or folded value), "
                                  f"got a run-time tensor {spec} ({self._where(decl)})")
        self.quant_params(specs)  # a missing quantization is an error before anything runs
        hook = self._hooks.get("verify")
        if hook is not None:
            hook(self, *specs)

    def infer(self, *specs):
        hook = self._hooks.get("infer")
        if hook is not None:
            return hook(self, *specs)
        names = [i.name for i in self._decl.inputs]
        out = []
        for o in self._decl.outputs:
            x = specs[names.index(o.like)]  # like: shape, dtype and quantization (a copy: it is
            quant = None if x.quant is None else x.quant._replace()  # this op's, see propagate_quant)
            out.append(TensorSpec(x.shape, x.dtype, quant=quant))
        return out[0] if len(out) == 1 else tuple(out)

    def select(self, *specs, backend: str) -> str:
        impls = self._impls.get(backend)
        if not impls:
            raise VerifyError(f"no implementation for backend '{backend}'; the package gives: "
                              f"{', '.join(self._impls)} ({self._manifest}:{self._decl.where.line})")
        hook = self._hooks.get("select")
        if hook is None:
            return next(iter(impls))
        name = hook(self, *specs, backend=backend) if _takes(hook, "backend") else hook(self, *specs)
        if name not in impls:
            raise VerifyError(f"the package's select returned {name!r}, which is not one of its implementations "
                              f"for backend '{backend}'; accepted: {', '.join(map(repr, impls))}")
        return name

    def implementation(self, specs: Sequence, backend: str):
        try:
            name = self.select(*specs, backend=backend)
            bound = self.quant_params(specs)
        except VerifyError as e:
            raise VerifyError(f"{describe(self)}: {e}") from None
        impl = self._impls[backend][name]
        if not bound:
            return impl
        key = (backend, name, tuple(sorted(bound.items())))
        with self._bound_lock:
            hit = self._bound_cache.get(key)
            if hit is None:
                if isinstance(impl, Kernel):  # a copy stays a Kernel, so graph runs replay its launches
                    hit = copy.copy(impl)
                    setattr(hit, BOUND_ATTR, bound)
                else:
                    hit = _BoundCallable(impl, bound)
                self._bound_cache[key] = hit
                # listed, so print(model) and profiles name it with the values it was bound to
                shown = ", ".join(f"{k}={v}" for k, v in bound.items())
                self.kernels[f"{name}[{shown}]"] = hit
        return hit

    # quantization ---------------------------------------------------------------------------
    def quant_params(self, specs: Sequence) -> Dict[str, Any]:
        """The ``from: <input>.scale|zero_point`` params, read from the input specs' quantization."""
        names = [i.name for i in self._decl.inputs]
        out: Dict[str, Any] = {}
        for p in self._decl.params:
            if p.source is None:
                continue
            spec = specs[names.index(p.source[0])] if len(specs) > names.index(p.source[0]) else None
            q = None if spec is None else getattr(spec, "quant", None)
            if q is None:
                if p.required:
                    raise VerifyError(
                        f"param '{p.name}' reads {p.source[0]}.{p.source[1]}, but input "
                        f"'{p.source[0]}' ({spec}) carries no quantization; quantize it first (QuantizeLinear, "
                        f"DataConvert) or give the param a default ({self._where(p)})")
                out[p.name] = p.default
                continue
            out[p.name] = _quant_value(p, q)
        return out

    # running --------------------------------------------------------------------------------
    def run(self, impl, inputs, outputs, backend):
        impl(*inputs, *outputs, *self.scratch_buffers(), **self.kernel_kwargs(impl, backend))

    def plan(self, impl, inputs, outputs, backend):
        """The one launch, bound once by a model; None with scratch buffers, which are zeroed per
        launch (docs/packages.md), so run() makes them at every run."""
        if self._decl.scratch:
            return None
        return default_plan(self, impl, inputs, outputs, backend)

    def scratch_buffers(self) -> List[np.ndarray]:
        """One zeroed buffer per declared scratch entry (``bytes`` of u8, or its dtype and shape),
        passed after the outputs."""
        return [np.zeros(s.shape, T.as_dtype(s.dtype).np) for s in self._decl.scratch]

    def kernel_kwargs(self, impl, backend: Optional[str] = None) -> Dict[str, Any]:
        kw = super().kernel_kwargs(impl, backend)
        kw.update(getattr(impl, BOUND_ATTR, None) or {})
        return kw

    def _where(self, decl) -> str:
        return f"{self._manifest}:{decl.where.line}"


def _dtype_name(spec: TensorSpec) -> str:
    return "bool" if spec.dtype.name == "bool_" else spec.dtype.name


def _quant_value(p: ParamDecl, q) -> Any:
    value = q[0] if p.source[1] == "scale" else q[1]
    per_axis = isinstance(value, (tuple, list, np.ndarray))
    if per_axis and p.size is None:
        raise VerifyError(f"param '{p.name}' reads {p.source[0]}.{p.source[1]}, which is per "
                          f"axis ({len(value)} values); accepted: declare the param with size: {len(value)}")
    if not per_axis and p.size is not None:
        value = (value,) * p.size
    if per_axis and len(value) != p.size:
        raise VerifyError(f"param '{p.name}' (size {p.size}) reads {p.source[0]}.{p.source[1]}, "
                          f"which has {len(value)} values")
    conv = float if p.dtype in ("f32", "f64") else int
    return tuple(conv(v) for v in value) if p.size is not None else conv(value)


def _takes(fn, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def hook_method(name: str, fn):
    """An Op method calling a package hook with the op first."""
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)
    method.__name__ = name
    return method


def infer_signature(input_names: Tuple[str, ...]) -> inspect.Signature:
    """``(self, x, w)``: dsl.Op reads an op's inputs (names, count) from its infer signature."""
    P = inspect.Parameter
    return inspect.Signature([P("self", P.POSITIONAL_OR_KEYWORD),
                              *(P(n, P.POSITIONAL_OR_KEYWORD) for n in input_names)])
