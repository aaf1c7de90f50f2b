"""Raw OpenCL operators: hand-written OpenCL C as an operator implementation (TIM-VX's custom OpenCL op).

The user-facing object lives here, beside ``Kernel``; what builds and launches it on the device
is ``backends/opencl/raw.py`` (``RawProgram``), the only part of the OpenCL backend this module
calls, on first use.

One source holds several ``__kernel`` functions (variants).  Hooks decide, per call:

* ``select(in_dtypes, params) -> (function_name, build_options)``: the variant
  and its ``-D`` options, from the input dtypes (e.g. F32 vs U8-quantized);
* ``enqueue(inputs, outputs, params) -> (global_size, local_size)``: work sizes
  (``local_size`` may be None to let the driver choose);
* ``shape(inputs, params) -> [(shape, dtype), ...]``: the outputs, so a direct
  call can allocate them and a call with outputs can check them;
* ``args(inputs, outputs, params) -> [scalars]`` (optional): shape-derived
  scalars passed after the declared params.

Kernel arguments are, in order: one ``__global`` pointer per input, one per
output, the declared scalar params in declared order, then ``args``' values.

A ``RawOpenCL`` object is an operator implementation with the op layer's call
signature ``impl(*inputs, *outputs, **params)`` (it writes the outputs), and a
user-facing function ``impl(*inputs, **params)`` that allocates and returns
the outputs.  It always runs on the OpenCL device, whatever ``backend=`` says.
"""
from __future__ import annotations

import copy
import inspect
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from backends import options as V
from backends.opencl.images import Image
from dsl.lang import types as T
from dsl.runtime import pickling

__all__ = ["Image", "Param", "RawOpenCL"]

_NO_DEFAULT = object()


@dataclass(frozen=True)
class Param:
    """A scalar param of a raw OpenCL op: passed to the kernel as ``dtype`` in declared order."""

    name: str
    dtype: T.DType
    default: Any = _NO_DEFAULT

    @property
    def required(self) -> bool:
        return self.default is _NO_DEFAULT


def _as_param(p) -> Param:
    if isinstance(p, Param):
        return Param(p.name, T.as_dtype(p.dtype), p.default)
    if isinstance(p, tuple) and len(p) in (2, 3):
        return Param(p[0], T.as_dtype(p[1]), p[2] if len(p) == 3 else _NO_DEFAULT)
    raise TypeError(f"a raw OpenCL param is Param(name, dtype[, default]) or (name, dtype[, default]), got {p!r}")


def _sizes(value) -> Tuple[int, ...]:
    return tuple(int(v) for v in (value if isinstance(value, (tuple, list)) else (value,)))


class RawOpenCL:
    """An operator implemented in hand-written OpenCL C; see the module docstring."""

    def __init__(self, name: str, source: Union[str, Path], *, inputs: Sequence[Union[str, Image]],
                 outputs: Sequence[Union[str, Image]],
                 select: Callable, enqueue: Callable, shape: Optional[Callable] = None,
                 params: Sequence = (), args: Optional[Callable] = None, build_options: str = ""):
        self.name = name
        if isinstance(source, Path):
            self.filename = str(source)
            source = source.read_text()
        else:
            self.filename = f"<raw opencl {name}>"
        self.source_text = source
        self.images = {a.name: a for a in (*inputs, *outputs) if isinstance(a, Image)}
        for a in (*inputs, *outputs):
            if not isinstance(a, (str, Image)):
                raise TypeError(f"raw OpenCL op {name}: an input or output is a name or an Image(...), got {a!r}")
        self.inputs = tuple(a.name if isinstance(a, Image) else a for a in inputs)
        self.outputs = tuple(a.name if isinstance(a, Image) else a for a in outputs)
        self.params = tuple(_as_param(p) for p in params)
        names = [*self.inputs, *self.outputs, *(p.name for p in self.params)]
        dup = {n for n in names if names.count(n) > 1}
        if dup or "backend" in names:
            raise ValueError(f"raw OpenCL op {name}: names must be unique and not 'backend': {sorted(dup) or names}")
        self._select, self._enqueue, self._shape, self._args = select, enqueue, shape, args
        self.build_options = build_options
        self.features: frozenset = frozenset()  # device features a variant needs (variant())
        self._program, self._lock = None, threading.Lock()
        # The op layer reads the keyword names an implementation accepts from its signature.
        kw = [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY,
                                default=inspect.Parameter.empty if p.required else p.default) for p in self.params]
        self.__signature__ = inspect.Signature(
            [inspect.Parameter("arrays", inspect.Parameter.VAR_POSITIONAL), *kw,
             inspect.Parameter("backend", inspect.Parameter.KEYWORD_ONLY, default=None)])

    def variant(self, *, defines: Optional[Dict[str, Any]] = None, features=None,
                build_options: str = "") -> "RawOpenCL":
        """This op built with ``defines`` as extra ``-D`` options (and ``build_options`` verbatim,
        a package manifest's string), needing ``features`` of the device, for one entry of an op's
        ``kernels`` mapping: the options reach only this variant's program, never the op it was
        made from or its other variants."""
        if not isinstance(build_options, str):
            raise TypeError(f"{self.name}.variant(build_options=...) takes a string such as '-DX=1', "
                            f"got {type(build_options).__name__}")
        extra = V.define_options(self.name, defines)
        v = copy.copy(self)
        v.build_options = " ".join(o for o in (self.build_options, build_options.strip(), extra) if o)
        v.features = self.features | V.check_features(self.name, features)
        v._program, v._lock = None, threading.Lock()
        return v

    def supported(self, backend: Optional[str] = None) -> bool:
        """Whether the OpenCL device has every feature this variant needs (it always runs there)."""
        return self.unsupported(backend) is None

    def unsupported(self, backend: Optional[str] = None) -> Optional[str]:
        """Why this variant cannot run (features the OpenCL device lacks), or None."""
        return V.features_error(f"raw OpenCL op {self.name}", self.features, "opencl")

    @classmethod
    def from_file(cls, path: Union[str, Path], name: Optional[str] = None, **hooks) -> "RawOpenCL":
        path = Path(path)
        return cls(name or path.stem, path, **hooks)

    # ---- hooks, overridable in subclasses -----------------------------------------------
    def select(self, in_dtypes: Tuple[T.DType, ...], params: Dict[str, Any]) -> Tuple[str, str]:
        return self._select(in_dtypes, params)

    def enqueue(self, inputs, outputs, params):
        return self._enqueue(inputs, outputs, params)

    def shape(self, inputs, params) -> List[Tuple[tuple, Any]]:
        if self._shape is None:
            raise TypeError(f"raw OpenCL op {self.name} has no shape hook: pass the outputs too "
                            f"({', '.join(self.outputs)})")
        return list(self._shape(inputs, params))

    def extra_args(self, inputs, outputs, params) -> list:
        return list(self._args(inputs, outputs, params)) if self._args is not None else []

    # ---- calling ---------------------------------------------------------------------------
    def bind_params(self, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        kwargs = dict(kwargs)
        kwargs.pop("backend", None)
        declared = {p.name for p in self.params}
        extra = sorted(set(kwargs) - declared)
        if extra:
            raise TypeError(f"{self.name}() got unexpected param(s) {', '.join(map(repr, extra))}; "
                            f"declared: {', '.join(p.name for p in self.params) or 'none'}")
        out = {}
        for p in self.params:
            if p.name in kwargs:
                out[p.name] = kwargs[p.name]
            elif p.required:
                raise TypeError(f"{self.name}() missing param {p.name!r} ({p.dtype})")
            else:
                out[p.name] = p.default
        return out

    def __call__(self, *arrays, **kwargs):
        """``op(*inputs, **params)`` returns new outputs; ``op(*inputs, *outputs, **params)`` fills them."""
        n_in, n_out = len(self.inputs), len(self.outputs)
        if len(arrays) not in (n_in, n_in + n_out):
            raise TypeError(f"{self.name}() takes {n_in} input(s) ({', '.join(self.inputs)}) optionally followed "
                            f"by {n_out} output(s) ({', '.join(self.outputs)}); got {len(arrays)} array(s)")
        params = self.bind_params(kwargs)
        inputs = [self._array(a, n, writable=False) for a, n in zip(arrays[:n_in], self.inputs)]
        given = len(arrays) > n_in
        if given:
            outputs = [self._array(a, n, writable=True) for a, n in zip(arrays[n_in:], self.outputs)]
            if self._shape is not None:
                self._check_outputs(outputs, self.shape(inputs, params))
        else:
            specs = self.shape(inputs, params)
            outputs = [np.empty(tuple(s), T.as_dtype(d).np) for s, d in specs]
        self.launch(inputs, outputs, params)
        if given:
            return None
        return outputs[0] if n_out == 1 else tuple(outputs)

    def _array(self, a, name: str, writable: bool) -> np.ndarray:
        if not isinstance(a, np.ndarray):
            if writable:
                raise TypeError(f"{self.name}(): output {name!r} must be a numpy array, got {type(a).__name__}")
            a = np.asarray(a)
        if not a.flags.c_contiguous:
            raise ValueError(f"{self.name}(): {name!r} is not C-contiguous; pass np.ascontiguousarray(...)")
        if writable and not a.flags.writeable:
            raise ValueError(f"{self.name}(): output {name!r} is read-only")
        T.from_numpy(a.dtype)  # a clear error for dtypes opdsl has no name for
        return a

    def _check_outputs(self, outputs, specs) -> None:
        for a, name, (shape, dtype) in zip(outputs, self.outputs, specs):
            want = T.as_dtype(dtype).np
            if tuple(a.shape) != tuple(shape) or a.dtype != want:
                raise ValueError(f"{self.name}(): output {name!r} is {a.dtype}{list(a.shape)}, "
                                 f"expected {want}{list(shape)}")

    # ---- the device side (backends/opencl/raw.py) -----------------------------------------
    def _device(self):
        """This op's ``RawProgram``: its built programs and kernels, made on first use."""
        with self._lock:
            if self._program is None:
                from backends.opencl.raw import RawProgram
                self._program = RawProgram(self.name, self.filename, self.source_text)
            return self._program

    def kernel(self, in_dtypes: Tuple[T.DType, ...], params: Dict[str, Any]):
        """The (function name, built cl.Kernel) the select hook picks for these input dtypes."""
        problem = self.unsupported() if self.features else None
        if problem:
            raise ValueError(problem)
        fname, options = self.select(in_dtypes, params)
        options = " ".join(o for o in (self.build_options, options or "") if o)
        return fname, self._device().kernel(fname, options)

    def kernel_params(self, in_dtypes: Tuple[T.DType, ...], params: Dict[str, Any]) -> list:
        """The parameter list of the ``__kernel`` the select hook picks, as the compiler saw it
        (``backends.opencl.raw_checks.KernelParam`` each)."""
        return self._device().kernel_params(self.kernel(in_dtypes, params)[1])

    def launch(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], params: Dict[str, Any]) -> None:
        in_dtypes = tuple(T.from_numpy(a.dtype) for a in inputs)
        fname, k = self.kernel(in_dtypes, params)
        gsize, lsize = self.enqueue(inputs, outputs, params)
        arrays = [(n, a, False, self.images.get(n)) for n, a in zip(self.inputs, inputs)] + \
                 [(n, a, True, self.images.get(n)) for n, a in zip(self.outputs, outputs)]
        self._device().launch(fname, k, arrays, [(p.name, p.dtype, params[p.name]) for p in self.params],
                              lambda: self.extra_args(inputs, outputs, params),
                              _sizes(gsize), None if lsize is None else _sizes(lsize))

    # ---- pickling, copies, repr --------------------------------------------------------------
    def __reduce__(self):
        """Source, hooks and options (by value when defined in __main__; dsl/runtime/pickling.py)."""
        return pickling.reduce_raw_opencl(self)

    def __getstate__(self):
        """Source, hooks and options; built programs and the lock stay here."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_program", "_lock")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._program, self._lock = None, threading.Lock()

    def __copy__(self) -> "RawOpenCL":
        """A shallow copy (variant() gives it its own programs and lock)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo) -> "RawOpenCL":
        return self

    def __repr__(self) -> str:
        ps = ", ".join(f"{p.name}: {p.dtype}" for p in self.params)
        return f"<raw OpenCL op {self.name}({', '.join(self.inputs)} -> {', '.join(self.outputs)}; {ps})>"
