"""Raw OpenCL operators: hand-written OpenCL C as an operator implementation (TIM-VX's custom OpenCL op).

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

import inspect
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from backends.opencl import raw_checks
from backends.opencl.images import Image
from dsl.lang import types as T
from dsl.lang.errors import CompileError, SourceLoc

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


_C_SCALARS = {"bool_": np.uint8, "f16": np.float32, "bf16": np.float32}


def _as_param(p) -> Param:
    if isinstance(p, Param):
        return Param(p.name, T.as_dtype(p.dtype), p.default)
    if isinstance(p, tuple) and len(p) in (2, 3):
        return Param(p[0], T.as_dtype(p[1]), p[2] if len(p) == 3 else _NO_DEFAULT)
    raise TypeError(f"a raw OpenCL param is Param(name, dtype[, default]) or (name, dtype[, default]), got {p!r}")


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
        self._kernels: Dict[Tuple[int, str], Any] = {}
        self._lock = threading.Lock()
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
        import copy

        from backends import options as V
        if not isinstance(build_options, str):
            raise TypeError(f"{self.name}.variant(build_options=...) takes a string such as '-DX=1', "
                            f"got {type(build_options).__name__}")
        extra = V.define_options(self.name, defines)
        v = copy.copy(self)
        v.build_options = " ".join(o for o in (self.build_options, build_options.strip(), extra) if o)
        v.features = self.features | V.check_features(self.name, features)
        v._kernels, v._lock = {}, threading.Lock()
        return v

    def supported(self, backend: Optional[str] = None) -> bool:
        """Whether the OpenCL device has every feature this variant needs (it always runs there)."""
        return self.unsupported(backend) is None

    def unsupported(self, backend: Optional[str] = None) -> Optional[str]:
        """Why this variant cannot run (features the OpenCL device lacks), or None."""
        from backends import options as V
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

    def kernel(self, in_dtypes: Tuple[T.DType, ...], params: Dict[str, Any]):
        """The (function name, built cl.Kernel) the select hook picks for these input dtypes."""
        from backends.opencl import runtime as rt
        problem = self.unsupported() if self.features else None
        if problem:
            raise ValueError(problem)
        fname, options = self.select(in_dtypes, params)
        dev = rt.device()
        options = raw_checks.check_cl_std(self.name, rt.BUILD_OPTIONS,
                                          " ".join(o for o in (self.build_options, options or "") if o),
                                          dev.device, dev.description)
        options += " -cl-kernel-arg-info"  # the parameter list the arguments are checked against
        try:
            program = rt.build(self.source_text, options)
        except rt.BuildError as e:  # rt.DriverError (the driver, not this source, failed) passes through
            first = rt.first_error(e.log)
            loc = SourceLoc(self.filename, first[0], first[1]) if first else None
            raise CompileError(f"raw OpenCL op {self.name}: the OpenCL compiler rejected the source on "
                               f"{rt.device().description}" + (f": {first[2]}" if first else ""),
                               loc, note=f"build options: {options}\ncompiler log:\n{e.log[:4000]}") from None
        key = (id(program), fname)
        with self._lock:
            hit = self._kernels.get(key)
            if hit is None:
                import pyopencl as cl
                try:
                    with rt.device_lock:
                        k = cl.Kernel(program, fname)
                        kparams = raw_checks.kernel_params(k, dev.device)
                except cl.Error:
                    raise ValueError(f"raw OpenCL op {self.name}: select() chose {fname!r}, which the source "
                                     f"does not define as a __kernel") from None
                hit = self._kernels[key] = (program, k, kparams)  # the program stays alive with its kernel
        return fname, hit[1]

    def kernel_params(self, in_dtypes: Tuple[T.DType, ...], params: Dict[str, Any]) -> List[raw_checks.KernelParam]:
        """The parameter list of the ``__kernel`` the select hook picks, as the compiler saw it."""
        return self._params_of(self.kernel(in_dtypes, params)[1])

    def _params_of(self, k) -> List[raw_checks.KernelParam]:
        with self._lock:
            return next(hit[2] for hit in self._kernels.values() if hit[1] is k)

    def launch(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], params: Dict[str, Any]) -> None:
        from backends.opencl import runtime as rt
        in_dtypes = tuple(T.from_numpy(a.dtype) for a in inputs)
        fname, k = self.kernel(in_dtypes, params)
        gsize, lsize = self.enqueue(inputs, outputs, params)
        gsize = tuple(int(g) for g in (gsize if isinstance(gsize, (tuple, list)) else (gsize,)))
        if lsize is not None:
            lsize = tuple(int(v) for v in (lsize if isinstance(lsize, (tuple, list)) else (lsize,)))
        dev = rt.device()
        with rt.device_lock:  # it queries the kernel: a driver call, like every other one of a launch
            raw_checks.check_work_sizes(self.name, fname, gsize, lsize, k, dev.device)
        if any(g == 0 for g in gsize):
            return
        scalars = [(_C_SCALARS.get(p.dtype.name) or p.dtype.np.type)(params[p.name]) for p in self.params]
        extra = self.extra_args(inputs, outputs, params)
        for v in extra:
            if not isinstance(v, np.generic):
                raise TypeError(f"raw OpenCL op {self.name}: args() must return numpy scalars "
                                f"(their dtype is the C type), got {v!r}")
        arrays = [(n, a, False) for n, a in zip(self.inputs, inputs)] + \
                 [(n, a, True) for n, a in zip(self.outputs, outputs)]
        passed = [raw_checks.Passed(f"{'output' if w else 'input'} {n!r}", "image" if n in self.images else "buffer",
                                    a.dtype, self.images[n].kind if n in self.images else "", w)
                  for n, a, w in arrays]
        passed += [raw_checks.Passed(f"param {p.name!r}", "scalar", np.dtype(type(v)))
                   for p, v in zip(self.params, scalars)]
        passed += [raw_checks.Passed(f"args()[{i}]", "scalar", v.dtype) for i, v in enumerate(extra)]
        raw_checks.check_arguments(self.name, fname, self._params_of(k), passed, self.source_text)
        from backends import interrupt
        with rt.launch(interrupt.arm()) as bufs:  # waiting behind other launches, a Ctrl-C stops this one
            cargs: List[Any] = []
            for n, a, w in arrays:
                if n in self.images:
                    cargs.append(bufs.image(self.name, self.images[n], a, writable=w))
                else:
                    cargs.append(bufs.wrap(a, writable=w, readable=not w))
            cargs += scalars + list(extra)
            try:
                rt.run(k, cargs, gsize, lsize)
            except rt.SanitizerError as e:  # Oclgrind's findings, at lines of the .cl source
                raise e.located(lambda line: SourceLoc(self.filename, line, 1)) from None

    def __getstate__(self):
        """Source, hooks and options; built programs and the lock stay here (dsl/runtime/pickling.py
        makes hooks defined in __main__ travel by value)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_kernels", "_lock")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._kernels, self._lock = {}, threading.Lock()

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

