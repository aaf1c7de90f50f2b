"""``dsl.Op``: a kernel plus what a graph compiler needs to know about it -- params, shape and
type inference, verification, implementation and format selection, and how to run it.

The contract for op authors (hooks, class attributes, eager vs graph application, params) is
docs/ops.md.  Applying an op to numpy arrays runs it now; applying it to a graph's tensors
(``spec.Symbolic``) hands it to that graph, which this module never imports.
"""
from __future__ import annotations

import contextvars
import difflib
import importlib
import inspect
import sys
import typing
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from dsl import config
from dsl.lang.types import DType, as_dtype, from_numpy
from dsl.opgraph import registry
from dsl.opgraph.formats import default_select_format
from dsl.opgraph.host_values import is_host, reject_host_inputs, spec_of
from dsl.opgraph.launch_plan import default_plan
from dsl.opgraph.spec import Symbolic, TensorSpec, VerifyError, axis_kept, describe
from dsl.runtime import pickling
from dsl.runtime.kernel import Kernel

# Class attributes of Op subclasses that are never params even when annotated.
_RESERVED = frozenset({
    "kernels", "formats", "inplace", "foldable", "op_type", "domain", "since", "until",
    "backend", "params", "graph", "keeps_padding", "keeps_quant", "composed", "replay",
    "skips_unused_outputs", "host_values",
})


# --------------------------------------------------------------------------- params

_NoDefault = object()


@dataclass(frozen=True)
class Param:
    name: str
    annotation: Any
    default: Any = _NoDefault

    @property
    def required(self) -> bool:
        return self.default is _NoDefault


def _type_name(ann) -> str:
    if isinstance(ann, type):
        return "dsl.DType" if ann is DType else ann.__name__
    return str(ann).replace("typing.", "")


def coerce_param(owner: str, name: str, ann, value):
    """``value`` converted to what annotation ``ann`` promises, or a TypeError naming it."""
    def bad():
        return TypeError(f"{owner} param '{name}' expects {_type_name(ann)}, "
                         f"got {type(value).__name__} {value!r}")

    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if ann is Any or ann is None or ann is inspect.Parameter.empty:
        return _freeze(value)
    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return coerce_param(owner, name, a, value)
            except (TypeError, ValueError):
                pass
        raise bad()
    if origin is typing.Literal:
        if value in args:
            return value
        raise TypeError(f"{owner} param '{name}' must be one of {', '.join(map(repr, args))}, got {value!r}")
    if ann is bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise bad()
    if ann is int:
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            return int(value)
        raise bad()
    if ann is float:
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
            return float(value)
        raise bad()
    if ann is str:
        if isinstance(value, str):
            return value
        raise bad()
    if ann is DType:
        try:
            return as_dtype(value)
        except TypeError:
            raise bad() from None
    if ann is np.ndarray:
        arr = np.array(value)
        arr.setflags(write=False)
        return arr
    if ann in (tuple, list) or origin in (tuple, list, typing.Sequence) or (
            origin is not None and getattr(origin, "__name__", "") == "Sequence"):
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if not isinstance(value, (tuple, list)):
            raise bad()
        if not args:
            return tuple(_freeze(v) for v in value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(coerce_param(owner, f"{name}[{i}]", args[0], v) for i, v in enumerate(value))
        if origin is tuple:
            if len(args) != len(value):
                raise TypeError(f"{owner} param '{name}' expects {len(args)} items, got {len(value)}")
            return tuple(coerce_param(owner, f"{name}[{i}]", a, v) for i, (a, v) in enumerate(zip(args, value)))
        return tuple(coerce_param(owner, f"{name}[{i}]", args[0], v) for i, v in enumerate(value))
    if isinstance(ann, type):
        if isinstance(value, ann):
            return _freeze(value)
        raise bad()
    return _freeze(value)


def _freeze(value):
    """Hashable, immutable form of a param value (lists -> tuples, arrays read-only)."""
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.ndarray):
        value = value.copy()
        value.setflags(write=False)
    return value


def _hashable(value):
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, tuple):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _collect_params(cls) -> Dict[str, Param]:
    """Params of an Op class: annotated class attributes along the MRO, base first."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # unresolvable forward refs: fall back to raw annotations
        hints = {}
        for klass in reversed(cls.__mro__):
            hints.update(klass.__dict__.get("__annotations__", {}))
        builtins_map = {"float": float, "int": int, "bool": bool, "str": str, "tuple": tuple}
        hints = {k: builtins_map.get(v, v) if isinstance(v, str) else v for k, v in hints.items()}
    params: Dict[str, Param] = {}
    for klass in reversed(cls.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, Op)) or klass is Op:
            continue
        for name in klass.__dict__.get("__annotations__", {}):
            if name.startswith("_") or name in _RESERVED:
                continue
            ann = hints.get(name, Any)
            if typing.get_origin(ann) is typing.ClassVar:
                continue
            default = getattr(cls, name, _NoDefault)
            if default is not _NoDefault:
                default = coerce_param(cls.__name__, name, ann, default)
            params[name] = Param(name, ann, default)
    return params


# --------------------------------------------------------------------------- the Op base

# Backend of the eager call in progress, so ops called inside a composed op or an
# op's own run() follow the outer call's backend.
_EAGER_BACKEND: contextvars.ContextVar = contextvars.ContextVar("opdsl_eager_backend", default=None)


class Op:
    """Base class of every operator; see the module docstring for the contract."""

    op_type: str = ""
    domain: str = ""
    since: int = 1
    until: Optional[int] = None
    kernels: Dict[str, Any] = {}
    formats: Tuple[str, ...] = ("plain",)
    inplace: Dict[int, int] = {}
    foldable: bool = True
    keeps_padding: bool = False
    keeps_quant = False        # True / "per_tensor": the op only moves data (propagate_quant)
    replay: bool = True
    skips_unused_outputs: bool = False
    host_values = False        # True: takes/gives sequences and optionals (run_host); "always": runs on host

    def free_inplace(self, impl, backend: str) -> Dict[int, int]:
        """{output index: input index} this node writes over that input's buffer at no cost when
        it runs ``impl`` on ``backend`` (the kernel reads each element of the input just before
        it writes the same element of the output); the memory plan honours it like
        ``inplace_noop``, where the input dies at this node.  Default: none."""
        return {}

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if "op_type" not in cls.__dict__:
            cls.op_type = cls.__name__
        cls._param_table = None  # resolved lazily: annotations may name later definitions

    @classmethod
    def set_log_level(cls, level: Optional[str]) -> None:
        """Set the run-time ``dsl.log`` threshold (``Kernel.log_level``) of every ``dsl.kernel`` in
        ``kernels``; eager calls and models running this op follow it from their next launch,
        without recompiling.  None: they follow OPDSL_LOG_LEVEL again (docs/language.md, Logging)."""
        kernels = [k for k in cls.kernels.values() if isinstance(k, Kernel)]
        if level is not None and not kernels:
            raise ValueError(f"{cls.__name__}.set_log_level({level!r}): the op has no dsl.kernel in kernels "
                             f"({', '.join(map(repr, cls.kernels)) or 'none'})")
        for k in kernels:
            k.log_level = level

    @classmethod
    def param_table(cls) -> Dict[str, Param]:
        """name -> Param (annotation, default) for this op class, in declaration order."""
        if cls.__dict__.get("_param_table") is None:
            cls._param_table = _collect_params(cls)
        return cls._param_table

    def __new__(cls, *inputs, backend: Optional[str] = None, **params):
        if cls is Op:
            raise TypeError("dsl.Op is a base class: subclass it (see help(dsl.op))")
        self = object.__new__(cls)
        self._init_params(params)
        if inputs:
            return self(*inputs, backend=backend)
        if backend is not None:
            raise TypeError(f"{cls.__name__}(backend=...) without inputs: pass backend= when applying it")
        return self

    def __init__(self, *inputs, **params):
        """Everything happens in ``__new__`` (construct, maybe apply)."""

    def _init_params(self, given: Dict[str, Any]) -> None:
        table = type(self).param_table()
        owner = type(self).op_type or type(self).__name__
        unknown = [k for k in given if k not in table]
        if unknown:
            k = unknown[0]
            close = difflib.get_close_matches(k, list(table), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            accepted = ", ".join(table) or "none"
            raise TypeError(f"{owner} has no param '{k}' (params: {accepted}){hint}")
        values = {}
        for name, p in table.items():
            if name in given:
                values[name] = coerce_param(owner, name, p.annotation, given[name])
            elif p.required:
                raise TypeError(f"{owner} param '{name}' is required ({_type_name(p.annotation)})")
            else:
                values[name] = p.default
        object.__setattr__(self, "_params", values)
        object.__setattr__(self, "_hash", None)
        self.__dict__.update(values)

    def __setattr__(self, name, value):
        if name in type(self).param_table():
            raise AttributeError(f"{type(self).__name__} params are frozen; use op.replace({name}=...)")
        object.__setattr__(self, name, value)

    # value semantics ---------------------------------------------------------------
    @property
    def params(self) -> Dict[str, Any]:
        return dict(self._params)

    def replace(self, **changes) -> "Op":
        return type(self)(**{**self._params, **changes})

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return all(_hashable(self._params[k]) == _hashable(other._params[k]) for k in self._params)

    def __hash__(self):
        if self._hash is None:
            h = hash((type(self), tuple((k, _hashable(v)) for k, v in self._params.items())))
            object.__setattr__(self, "_hash", h)
        return self._hash

    def __reduce__(self):
        """Class (by reference, or by value when defined in __main__; dsl/runtime/pickling.py) + params."""
        return (_rebuild, (pickling.portable_class(type(self)), pickling.portable(self._params)))

    def __copy__(self) -> "Op":
        return type(self)(**self._params)

    def __deepcopy__(self, memo) -> "Op":
        return type(self)(**self._params)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in getattr(self, "_params", {}).items())
        return f"{type(self).__name__}({args})"

    @classmethod
    def qualified_name(cls) -> str:
        """``domain::op_type`` (``::op_type`` for the ONNX default domain)."""
        return f"{cls.domain}::{cls.op_type}"

    # hooks ------------------------------------------------------------------------------
    def infer(self, *inputs):
        raise NotImplementedError(f"{type(self).__name__} must define infer(self, *inputs) -> TensorSpec(s)")

    def verify(self, *inputs) -> None:
        return None

    def select(self, *inputs, backend: str) -> str:
        names = list(self.kernels)
        if len(names) == 1:
            return names[0]
        if "default" in self.kernels:
            return "default"
        raise NotImplementedError(
            f"{type(self).__name__} has kernels {names}: define select(self, *inputs, backend) to pick one")

    def input_quant(self, *inputs) -> Dict[int, Any]:
        """{input index: dsl.Quant} the op says its inputs carry (DequantizeLinear with constant
        scale and zero point: its data input).  A graph gives a constant or graph input without
        a quantization this one when the node is added (docs/ops.md, *Quantization*)."""
        return {}

    def select_format(self, *inputs):
        """(input formats, output formats); docs/ops.md "Formats"."""
        return default_select_format(self, inputs)

    def select_plain_format(self, *inputs):
        """(input formats, output formats) writing plain outputs, or None when the op cannot:
        the planner asks when ``select_format`` chose an nchwc16 output that every reader wants
        plain (a graph output, an op without nchwc16), to save the reorder back."""
        return None

    def tiling(self, *inputs):
        """Per output ``{axis: alignment}`` a compiled model may cut it along, or None (untiled);
        with ``map_tiles`` (docs/ops.md "Tiling", dsl/opgraph/tiling.py)."""
        return None

    def map_tiles(self, out_tile, *inputs):
        """Per input the slices output tile ``out_tile`` reads (None: all of it)."""
        raise NotImplementedError(f"{type(self).__name__} declares tiling() but no "
                                  "map_tiles(self, out_tile, *inputs) -> per input slices or None")

    def can_execute(self, *inputs) -> bool:
        """Whether the node runs for these input specs (PPL.NN's ``CanDoExecute``), on top of the
        rule that a node whose outputs are all empty never runs.  A node that does not run gets
        zero-filled outputs.  Decided from specs (shapes, dtypes, constant values, quantization),
        so a compiled model decides once per input-shape signature (docs/ops.md)."""
        return True

    def run(self, impl, inputs: Sequence, outputs: Sequence, backend: str) -> None:
        """Launch ``impl``.  A ``run`` that also accepts ``specs=`` is given the inputs'
        TensorSpecs (with their ``quant``) by the model and the eager call: see run_op."""
        impl(*inputs, *outputs, **self.kernel_kwargs(impl, backend))

    def plan(self, impl, inputs, outputs, backend: str):
        """The launches the op makes for these input/output ``Ref``s (their specs, shapes and
        dtypes; dsl/opgraph/launch_plan.py), a model binds once and replays; None: the model calls
        ``run`` at every run (launches that depend on input values).  The default covers the
        default ``run``; an op overriding ``run`` declares ``plan`` too (docs/ops.md "Launch plans")."""
        if type(self).run is not Op.run:
            return None
        return default_plan(self, impl, inputs, outputs, backend)

    def kernel_kwargs(self, impl, backend: Optional[str] = None) -> Dict[str, Any]:
        """The op params ``impl`` declares (plus ``backend=`` when it accepts one)."""
        names, takes_backend = _accepted_names(impl)
        kw = {k: v for k, v in self._params.items() if k in names}
        if takes_backend and backend is not None:
            kw["backend"] = backend
        return kw

    # applying -------------------------------------------------------------------------------
    def __call__(self, *inputs, backend: Optional[str] = None, graph=None):
        if graph is None:
            graph = next((x.graph for x in inputs if isinstance(x, Symbolic)), None)
        if graph is not None:
            if backend is not None:
                raise TypeError(f"{type(self).__name__}: backend= is chosen by Graph.compile, not per node")
            return graph.apply(self, inputs)
        if _has_torch_tensor(inputs):  # through its torch.library op: torch outputs, autograd (docs/torch.md)
            return importlib.import_module("dsl.torch.eager").call(self, inputs, backend)
        return self.apply_eager(inputs, backend)

    def apply_eager(self, inputs: Sequence, backend: Optional[str] = None, allocate=None):
        """Run now on arrays; ``allocate(spec) -> array`` makes each output (default numpy.empty)."""
        check_arity(self, len(inputs), "eager call")
        if type(self).host_values == "always" or (type(self).host_values and any(
                isinstance(x, list) and all(isinstance(e, np.ndarray) for e in x) for x in inputs)):
            return run_host_eager(self, inputs, backend or _EAGER_BACKEND.get() or config.default_backend())
        arrays = as_arrays(self, inputs)
        backend = backend or _EAGER_BACKEND.get() or config.default_backend()
        specs = [None if a is None else TensorSpec.of(a) for a in arrays]
        out_specs = check_and_infer(self, specs, where="eager call")
        for i, s in enumerate(out_specs):
            if not s.known:
                raise VerifyError(f"{describe(self)}: infer left output {i} shape {s} unknown on concrete inputs")
        outputs = [np.empty(s.shape, s.dtype.np) if allocate is None else allocate(s) for s in out_specs]
        if (outputs and not any(o.size for o in outputs)) or not node_runs(self, specs, "eager call"):
            for o in outputs:
                o.fill(0)  # skipped by can_execute: defined contents, as Model.run gives
        else:
            impl = self.implementation(specs, backend)
            token = _EAGER_BACKEND.set(backend)
            try:
                run_op(self, impl, arrays, outputs, backend, specs)
            finally:
                _EAGER_BACKEND.reset(token)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def implementation(self, specs: Sequence, backend: str):
        """The kernel ``select`` names for these input specs."""
        name = self.select(*specs, backend=backend)
        try:
            impl = self.kernels[name]
        except (KeyError, TypeError):
            raise VerifyError(f"{describe(self)}: select() returned {name!r}, which is not in kernels "
                              f"(known: {', '.join(map(repr, self.kernels)) or 'none'})") from None
        if getattr(impl, "features", None):  # variant(features=...): checked before anything compiles
            problem = impl.unsupported(backend)
            if problem:
                raise VerifyError(f"{describe(self)}: implementation {name!r}: {problem}")
        return impl


def _has_torch_tensor(inputs: Sequence) -> bool:
    """Whether an eager input is a torch tensor (torch already imported; never imports it)."""
    torch = sys.modules.get("torch")
    return torch is not None and any(isinstance(x, torch.Tensor) for x in inputs)


def _rebuild(cls, params):
    return cls(**params)


def op(op_type: str, domain: str = "", since: int = 1, until: Optional[int] = None):
    """Class decorator registering an Op subclass under (domain, op_type, [since, until]).

    A later registration of the same (domain, op_type) over an overlapping opset range
    overrides the earlier one (user ops override built-ins)."""

    def deco(cls):
        if not (isinstance(cls, type) and issubclass(cls, Op)):
            raise TypeError(f"@dsl.op({op_type!r}) decorates a dsl.Op subclass, got {cls!r}")
        cls.op_type, cls.domain, cls.since, cls.until = op_type, domain, since, until
        registry.register(cls)
        return cls
    return deco


# --------------------------------------------------------------------------- helpers

_TAKES_SPECS: Dict[type, bool] = {}


def takes_specs(cls) -> bool:
    """Whether ``cls.run`` accepts a ``specs`` keyword (looked up once per class)."""
    hit = _TAKES_SPECS.get(cls)
    if hit is None:
        try:
            params = inspect.signature(cls.run).parameters
        except (TypeError, ValueError):
            params = {}
        hit = "specs" in params
        _TAKES_SPECS[cls] = hit
    return hit


def node_runs(op: "Op", specs: Sequence, where: str) -> bool:
    """``op.can_execute(*specs)``, checked to answer True or False (an op that does not define
    the hook costs one attribute comparison)."""
    if type(op).can_execute is Op.can_execute:
        return True
    answer = op.can_execute(*specs)
    if not isinstance(answer, (bool, np.bool_)):
        raise VerifyError(f"{where}: {describe(op)}.can_execute returned {answer!r}; accepted: True (the node "
                          "runs) or False (it is skipped, its outputs zero-filled)")
    return bool(answer)


def run_op(op: "Op", impl, inputs: Sequence, outputs: Sequence, backend: str, specs: Sequence) -> None:
    """``op.run``, with ``specs=`` (the inputs' TensorSpecs, ``None`` for absent ones) when
    its run accepts it: how an op reads its inputs' quantization (docs/ops.md)."""
    if takes_specs(type(op)):
        op.run(impl, inputs, outputs, backend, specs=tuple(specs))
    else:
        op.run(impl, inputs, outputs, backend)


def propagate_quant(op: "Op", specs: Sequence, outs: Sequence[TensorSpec]) -> Tuple[TensorSpec, ...]:
    """Outputs' ``quant`` after the op's own ``infer``.

    An op with ``keeps_quant`` only moves data: an output of the same dtype as its data
    inputs gets their quantization when they all share one (per axis only where the output
    keeps that axis, never for ``keeps_quant = "per_tensor"`` ops like Reshape that regroup
    elements).  Any other op keeps only a quant it made itself: an input's very Quant object
    was passed through by ``return x.spec`` and no longer says what the values mean (a new
    Quant with equal values, as QLinearMatMul may compute, is kept)."""
    given = [id(s.quant) for s in specs if s is not None and s.quant is not None]
    result = []
    for out in outs:
        if type(op).keeps_quant:
            if out.quant is None:
                data = [s for s in specs if s is not None and s.dtype == out.dtype]
                quants = {s.quant for s in data}
                if len(quants) == 1 and data[0].quant is not None:
                    q = data[0].quant
                    if q.axis is None or (type(op).keeps_quant != "per_tensor"
                                          and axis_kept(data[0].shape, out.shape, q.axis)):
                        out = out.with_(quant=q, value=out.value)
        elif out.quant is not None and id(out.quant) in given:
            out = out.with_(quant=None, value=out.value)
        result.append(out)
    return tuple(result)

_ACCEPTED_CACHE: Dict[int, Tuple[Any, frozenset, bool]] = {}


def _accepted_names(impl) -> Tuple[frozenset, bool]:
    """Keyword names ``impl`` accepts, and whether it takes ``backend=``."""
    hit = _ACCEPTED_CACHE.get(id(impl))
    if hit is not None and hit[0] is impl:
        return hit[1], hit[2]
    target = impl
    for attr in ("pyfunc", "fn", "func", "__wrapped__"):
        if isinstance(impl, Kernel) and hasattr(impl, attr):
            target = getattr(impl, attr)
            break
    try:
        sig = inspect.signature(target)
        names = frozenset(sig.parameters)
        var_kw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    except (TypeError, ValueError):
        names, var_kw = frozenset(), True
    takes_backend = isinstance(impl, Kernel) or "backend" in names or var_kw
    _ACCEPTED_CACHE[id(impl)] = (impl, names, takes_backend)
    return names, takes_backend


def as_arrays(op: Op, inputs: Sequence) -> list:
    """Eager inputs as C-contiguous arrays; Python scalars take the first array's dtype."""
    first = next((x for x in inputs if isinstance(x, np.ndarray)), None)
    out = []
    for i, x in enumerate(inputs):
        if x is None:
            out.append(None)
        elif isinstance(x, np.ndarray):  # (ascontiguousarray would turn 0-d into 1-d)
            out.append(x if x.flags.c_contiguous else np.ascontiguousarray(x))
        elif isinstance(x, (bool, int, float)) and first is not None:
            out.append(np.asarray(x, dtype=first.dtype))
        else:
            try:
                arr = np.ascontiguousarray(np.asarray(x))
                from_numpy(arr.dtype)
            except (TypeError, ValueError) as e:
                raise TypeError(f"{describe(op)} input {i}: expected a numpy array or graph tensor, "
                                f"got {type(x).__name__} ({e})") from None
            out.append(arr)
    return out


_ARITY: Dict[type, Tuple[Tuple[str, ...], int, Optional[int]]] = {}


def arity(cls) -> Tuple[Tuple[str, ...], int, Optional[int]]:
    """(input names, how many are required, how many at most or None) of an op class, read
    from its ``infer`` signature (a composed op: its body's tensor arguments)."""
    hit = _ARITY.get(cls)
    if hit is not None:
        return hit
    if getattr(cls, "composed", False):
        names = tuple(f"{n}=None" if n in cls.optional_args else n for n in cls.tensor_args)
        hit = (names, len(names) - len(cls.optional_args), len(names))
    else:
        try:
            params = list(inspect.signature(cls.infer).parameters.values())[1:]  # drop self
        except (TypeError, ValueError):
            params = []
        names, required, most = [], 0, 0
        for p in params:
            if p.kind is p.VAR_POSITIONAL:
                names.append(f"*{p.name}")
                most = None
            elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                names.append(p.name if p.default is p.empty else f"{p.name}=None")
                required += p.default is p.empty
                most = None if most is None else most + 1
        hit = (tuple(names), required, most)
        if cls.infer is Op.infer:
            hit = ((), 0, None)  # no infer: check_and_infer reports that instead
    _ARITY[cls] = hit
    return hit


def check_arity(op: Op, count: int, where: str) -> None:
    """A TypeError naming the op, the inputs it takes and how many it got, before any hook runs."""
    names, required, most = arity(type(op))
    if count >= required and (most is None or count <= most):
        return
    if most is None:
        how = f"at least {required}"
    elif most == required:
        how = str(required)
    else:
        how = f"{required} to {most}"
    raise TypeError(f"{describe(op)} ({where}) takes {how} input{'' if how == '1' else 's'} "
                    f"({', '.join(names)}), got {count}")


def check_and_infer(op: Op, specs: Sequence, where: str) -> Tuple[TensorSpec, ...]:
    """verify + infer with errors that name the op and ``where`` (node name or 'eager call')."""
    check_arity(op, len(specs), where)
    reject_host_inputs(op, specs, where, describe)
    try:
        op.verify(*specs)
    except VerifyError as e:
        raise VerifyError(f"{describe(op)} ({where}): {e}") from None
    try:
        result = op.infer(*specs)
    except VerifyError as e:
        raise VerifyError(f"{describe(op)} ({where}): {e}") from None
    except NotImplementedError:
        raise
    except Exception as e:
        shown = ", ".join("None" if s is None else str(s) for s in specs)
        raise VerifyError(f"{describe(op)} ({where}): infer failed on inputs ({shown}): "
                          f"{type(e).__name__}: {e}") from e
    if isinstance(result, TensorSpec) or (type(op).host_values and is_host(result)):
        result = (result,)
    if isinstance(result, (tuple, list)) and all(
            isinstance(r, TensorSpec) or (type(op).host_values and is_host(r)) for r in result):
        # an input's spec passed through keeps its value: that is not the output's content
        known = [id(s.value) for s in specs if s is not None and s.value is not None]
        result = tuple(r.with_() if r.value is not None and id(r.value) in known else r for r in result)
        return propagate_quant(op, specs, result)
    raise TypeError(f"{describe(op)}.infer must return a TensorSpec or a tuple of them, got {result!r}")


def run_host_eager(op, inputs, backend: str):
    """An eager call of a host op (``op(list_of_arrays, ...)``): inputs checked and inferred
    like a node's, then ``run_host``; one output is returned as is, several as a tuple."""
    values = [list(x) if isinstance(x, (list, tuple)) else x for x in inputs]
    tensors = as_arrays(op, [None if isinstance(v, list) else v for v in values])
    values = [v if isinstance(v, list) else a for v, a in zip(values, tensors)]
    specs = [None if v is None else spec_of(v) for v in values]
    check_and_infer(op, specs, where="eager call")
    outs = op.run_host(values, backend)
    return outs[0] if len(outs) == 1 else tuple(outs)
