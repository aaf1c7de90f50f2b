"""Batch inference and kernels over Dask arrays (docs/dask.md).

``model.run_dask(feeds)`` cuts the feeds along the batch axis and runs ``Model.run`` on each
chunk; ``map_blocks(kernel, *arrays)`` runs a kernel on matching chunks.  Both only build a lazy
graph: ``.compute()`` runs it with Dask's local threaded scheduler, or on the cluster of a
``dask.distributed.Client`` in scope.  The model enters the graph once (one ``dask.delayed``
key every chunk depends on), so a cluster sends it to each worker once, and each worker
compiles it once (dsl/runtime/pickling.py: nothing compiled travels).

Dask is optional (``pip install "opdsl[dask]"``): it is imported when these are called.
"""
from __future__ import annotations

import functools
import uuid
import weakref
from typing import Any, Dict, Mapping, Optional

import numpy as np

INSTALL = 'pip install "opdsl[dask]"'


def _dask():
    """(dask, dask.array), or an ImportError saying how to get them."""
    try:
        import dask
        import dask.array as da
    except ImportError as e:
        raise ImportError(f"opdsl's Dask support needs dask[distributed]: {INSTALL} ({e})") from None
    return dask, da


# ---------------------------------------------------------------------- models

def run_dask(model, feeds: Mapping[str, Any], batch_axis: int = 0, chunks=None) -> Dict[str, Any]:
    """{output name: lazy dask array}: ``model.run`` on each chunk of the feeds along ``batch_axis``.

    ``feeds`` maps every model input to a dask array (its chunks along the batch axis are the
    work units) or a numpy array, cut into ``chunks`` rows per chunk (an int, a tuple of chunk
    lengths, or None: Dask's automatic size).  Every output must keep the batch axis."""
    dask, da = _dask()
    arrays = _feeds_as_dask(model, feeds, batch_axis, chunks, da)
    first = next(iter(arrays.values()))
    rows = first.chunks[batch_axis]
    parts = {name: a.to_delayed().reshape(-1) for name, a in arrays.items()}
    model_key = dask.delayed(model, name=_model_key(model), pure=True)
    shapes = {n_rows: _output_shapes(model, arrays, batch_axis, n_rows) for n_rows in set(rows)}
    outputs: Dict[str, list] = {name: [] for name in model.outputs}
    for i, n_rows in enumerate(rows):
        result = dask.delayed(_run_chunk, pure=True)(model_key, {name: p[i] for name, p in parts.items()})
        for name, (shape, dtype) in shapes[n_rows].items():
            outputs[name].append(da.from_delayed(result[name], shape=shape, dtype=dtype))
    return {name: da.concatenate(blocks, axis=batch_axis) for name, blocks in outputs.items()}


_MODEL_KEYS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _model_key(model) -> str:
    """One Dask key per model object: graphs built by several run_dask calls share it, so a
    cluster that holds the model already need not receive it again."""
    key = _MODEL_KEYS.get(model)
    if key is None:
        key = _MODEL_KEYS.setdefault(model, f"opdsl-model-{uuid.uuid4().hex}")
    return key


def _run_chunk(model, feeds):
    return model.run({name: np.ascontiguousarray(a) for name, a in feeds.items()})


def _feeds_as_dask(model, feeds, batch_axis, chunks, da) -> Dict[str, Any]:
    if not isinstance(feeds, Mapping):
        raise TypeError(f"Model.run_dask takes a dict of input name -> dask or numpy array, got {type(feeds).__name__}")
    missing = [n for n in model.inputs if n not in feeds]
    extra = [n for n in feeds if n not in model.inputs]
    if missing or extra:
        raise ValueError(f"Model.run_dask: feeds {'lack ' + ', '.join(map(repr, missing)) if missing else ''}"
                         f"{'; ' if missing and extra else ''}{'have unknown ' + ', '.join(map(repr, extra)) if extra else ''}"
                         f"; the model's inputs are {', '.join(map(repr, model.inputs))}")
    if not isinstance(batch_axis, int) or isinstance(batch_axis, bool):
        raise TypeError(f"Model.run_dask(batch_axis={batch_axis!r}): accepted an int axis")
    out, length = {}, None
    for name in model.inputs:
        a = feeds[name]
        if not isinstance(a, da.Array):
            a = np.asarray(a)
            if not -a.ndim <= batch_axis < a.ndim:
                raise ValueError(f"Model.run_dask: input {name!r} has {a.ndim} dimension(s), no batch_axis {batch_axis}")
            a = da.from_array(a, chunks=_numpy_chunks(a, batch_axis, chunks))
        elif chunks is not None:
            raise TypeError(f"Model.run_dask: input {name!r} is a dask array, chunked already; chunks= is for numpy "
                            "feeds (rechunk the dask array along the batch axis instead)")
        if not -a.ndim <= batch_axis < a.ndim:
            raise ValueError(f"Model.run_dask: input {name!r} has {a.ndim} dimension(s), no batch_axis {batch_axis}")
        axis = batch_axis % a.ndim
        if length is None:
            length, first = a.shape[axis], a
        elif a.shape[axis] != length:
            raise ValueError(f"Model.run_dask: input {name!r} has {a.shape[axis]} rows along batch_axis {batch_axis}, "
                             f"but {next(iter(out))!r} has {length}; every feed is cut into the same chunks")
        # whole rows per chunk: only the batch axis may be cut, the same way for every feed
        want = {k: (first.chunks[batch_axis % first.ndim] if k == axis else -1) for k in range(a.ndim)}
        if any(len(c) > 1 for k, c in enumerate(a.chunks) if k != axis) or a.chunks[axis] != want[axis]:
            a = a.rechunk(want)
        out[name] = a
    return out


def _numpy_chunks(a: np.ndarray, axis: int, chunks):
    axis %= a.ndim
    if chunks is None:
        chunks = "auto"
    elif isinstance(chunks, (int, np.integer)) and not isinstance(chunks, bool):
        if chunks < 1:
            raise ValueError(f"Model.run_dask(chunks={chunks!r}): accepted a positive number of rows per chunk")
        chunks = int(chunks)
    elif isinstance(chunks, (tuple, list)):
        if sum(chunks) != a.shape[axis] or any(not isinstance(c, (int, np.integer)) or c < 1 for c in chunks):
            raise ValueError(f"Model.run_dask(chunks={chunks!r}): chunk lengths must be positive ints adding up to "
                             f"the {a.shape[axis]} rows of the batch axis")
        chunks = tuple(int(c) for c in chunks)
    else:
        raise TypeError(f"Model.run_dask(chunks={chunks!r}): accepted None (automatic), an int (rows per chunk) or "
                        "a tuple of chunk lengths")
    return {k: (chunks if k == axis else -1) for k in range(a.ndim)}


def _output_shapes(model, arrays, batch_axis, n_rows):
    """{output: (shape, dtype)} of a chunk of ``n_rows``, from the model's shape inference."""
    stand_ins = []
    for name, a in arrays.items():
        shape = list(a.shape)
        shape[batch_axis] = n_rows
        spec = model.inputs[name]
        stand_ins.append(np.lib.stride_tricks.as_strided(np.zeros(1, spec.dtype.np), tuple(shape), (0,) * len(shape)))
    specs = model._concrete_specs(stand_ins)
    if specs is None:
        raise ValueError("Model.run_dask: the model's output shapes depend on input values, so the chunks of the "
                         "result cannot be laid out in advance; run chunks yourself with dask.delayed(model.run)")
    out = {}
    for name in model.outputs:
        s = specs[name]
        if len(s.shape) <= batch_axis % max(len(s.shape), 1) or s.shape[batch_axis] != n_rows:
            raise ValueError(f"Model.run_dask: output {name!r} is {s} for a chunk of {n_rows} rows: it does not keep "
                             f"batch_axis {batch_axis}, so chunks cannot be joined along it")
        out[name] = (s.shape, s.dtype.np)
    return out


# ---------------------------------------------------------------------- kernels

def map_blocks(kernel, *arrays, out_dtype=None, backend: Optional[str] = None, **scalars):
    """A lazy dask array: ``kernel(*blocks, out, **scalars)`` on each set of matching blocks.

    For element-wise or row-wise kernels whose one output has the shape of their first input
    (chunk whole rows for a row-wise kernel).  ``out_dtype`` defaults to the first input's dtype;
    numpy inputs are chunked like the first dask input, and dask inputs chunked differently from
    the first input are rechunked to match it (the result has the first input's chunks)."""
    from dsl.runtime.autotune import Autotuner
    from dsl.runtime.kernel import Kernel
    _, da = _dask()
    if not isinstance(kernel, (Kernel, Autotuner)):
        raise TypeError(f"dsl.dask.map_blocks takes a @dsl.kernel first, got {type(kernel).__name__} {kernel!r}")
    if not arrays:
        raise TypeError(f"dsl.dask.map_blocks({kernel.__name__}): pass the kernel's input arrays")
    like = next((a for a in arrays if isinstance(a, da.Array)), None)
    if like is None:
        raise TypeError(f"dsl.dask.map_blocks({kernel.__name__}): at least one input must be a dask array "
                        "(da.from_array(x, chunks=...))")
    inputs = [a if isinstance(a, da.Array) else da.from_array(np.asarray(a), chunks=like.chunks) for a in arrays]
    for k, a in enumerate(inputs):
        if a.shape != inputs[0].shape:
            raise ValueError(f"dsl.dask.map_blocks({kernel.__name__}): input {k} has shape {a.shape}, the first "
                             f"input {inputs[0].shape}; inputs are cut into matching blocks, so shapes must agree")
    # blocks are paired by index: inputs cut differently (250 vs 300 rows) are cut again like the
    # first one, or block k of one would meet the elements of another block of the other
    inputs = [a if a.chunks == inputs[0].chunks else a.rechunk(inputs[0].chunks) for a in inputs]
    dtype = np.dtype(inputs[0].dtype if out_dtype is None else getattr(out_dtype, "np", out_dtype))
    if isinstance(kernel, Kernel):  # a wrong dtype, rank or scalar fails now, naming the parameter
        empty = [np.empty((0,) * a.ndim, a.dtype) for a in inputs]
        kernel.bind((*empty, np.empty((0,) * inputs[0].ndim, dtype)), scalars)
    run = functools.partial(_run_block, kernel, dtype, backend, scalars)
    return da.map_blocks(run, *inputs, dtype=dtype, meta=np.empty((0,) * inputs[0].ndim, dtype))


def _run_block(kernel, dtype, backend, scalars, *blocks):
    blocks = [np.ascontiguousarray(b) for b in blocks]
    out = np.empty(blocks[0].shape, dtype)
    if out.size:
        kernel(*blocks, out, backend=backend, **scalars)
    return out
