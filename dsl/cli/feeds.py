"""Model inputs from the command line (``--input x=x.npy``, ``--dim batch=8``, random data),
shared by ``opdsl bench`` and ``opdsl run`` so both read and check them alike."""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

import numpy as np

from dsl.cli.errors import UserError

MAX_RANDOM_BYTES = 4 << 30  # one random input; larger is a --dim typo more often than a wish


def parse_pairs(items: Optional[List[str]], what: str) -> Dict[str, str]:
    """``["a=1", ...]`` -> {"a": "1"}; UserError for an item without NAME=VALUE."""
    out: Dict[str, str] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise UserError(f"{what} expects NAME=VALUE, got {item!r}")
        out[name] = value
    return out


def model_inputs(proto) -> List[Tuple[str, np.dtype, Tuple]]:
    """(name, numpy dtype, dims as int / symbolic name / None) of the inputs a caller feeds."""
    from onnx import helper
    inits = {t.name for t in proto.graph.initializer}
    out = []
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except Exception:
            raise UserError(f"input {vi.name!r}: element type {tt.elem_type} has no numpy dtype; "
                            f"pass it with --input {vi.name}=FILE.npy") from None
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
        out.append((vi.name, dtype, dims))
    return out


def _sizes(inputs, dims: Dict[str, str]) -> Dict[str, int]:
    symbolic = {d for _, _, ds in inputs for d in ds if isinstance(d, str)}
    bad = [d for d in dims if d not in symbolic]
    if bad:
        raise UserError(f"--dim {bad[0]}: the model has no symbolic dimension {bad[0]!r}; "
                        f"symbolic dims: {', '.join(sorted(symbolic)) or 'none'}")
    sizes: Dict[str, int] = {}
    for d, v in dims.items():
        try:
            sizes[d] = int(v)
        except ValueError:
            raise UserError(f"--dim {d}={v}: the size must be an integer") from None
        if sizes[d] < 0:
            raise UserError(f"--dim {d}={v}: the size must be >= 0")
    return sizes


def _dims_text(dims) -> str:
    """[batch, 4, ?]: model dims as the user would write them."""
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def load_npy(name: str, path: str, dtype: np.dtype) -> np.ndarray:
    """The array of ``--input name=path``, checked to hold the dtype the model takes.  An .npz
    archive gives its array named like the input, or its only array."""
    if not os.path.isfile(path):
        raise UserError(f"--input {name}={path}: no such file")
    try:
        a = np.load(path, allow_pickle=False)
        if isinstance(a, np.lib.npyio.NpzFile):
            with a:
                keys = list(a.files)
                if name not in keys and len(keys) != 1:
                    raise UserError(f"--input {name}={path}: the .npz archive holds {len(keys)} arrays "
                                    f"({', '.join(keys) or 'none'}) and none is named {name!r}; save the input "
                                    f"as {name} (np.savez(path, {name}=array)) or as an .npy file")
                a = a[name if name in keys else keys[0]]
    except UserError:
        raise
    except Exception as e:
        raise UserError(f"--input {name}={path}: not a .npy array or .npz archive ({type(e).__name__}: {e})") \
            from None
    if a.dtype != dtype:
        raise UserError(f"--input {name}={path}: the file holds {a.dtype}, the model takes {dtype}")
    return a


def make_feeds(proto, files: Dict[str, str], dims: Dict[str, str], seed: int = 0, random: bool = True,
               default_dim: Optional[int] = 1) -> Tuple[Dict[str, np.ndarray], List[str]]:
    """Inputs for every model input -> (feeds, one line per input saying where it came from).
    ``proto``: the ONNX model, or its inputs as ``model_inputs`` gives them.

    ``files``: input name -> .npy path; the others are random by dtype (floats: standard
    normal; integers: 0..3; bool: coin flips), seeded by ``seed``, when ``random``, else an
    error lists them.  Symbolic dims of random inputs come from ``dims``, else
    ``default_dim`` (None: an error naming the --dim to give)."""
    if not isinstance(seed, int) or seed < 0:
        raise UserError(f"--seed {seed}: the seed must be an integer >= 0")
    rng = np.random.default_rng(seed)
    inputs = proto if isinstance(proto, list) else model_inputs(proto)  # or model_inputs' list itself
    names = [n for n, _, _ in inputs]
    unknown = [n for n in files if n not in names]
    if unknown:
        raise UserError(f"--input {unknown[0]}: the model has no input {unknown[0]!r}; inputs: {', '.join(names)}")
    sizes = _sizes(inputs, dims)
    if not random:
        missing = [f"{n} ({dt}{_dims_text(ds)})" for n, dt, ds in inputs if n not in files]
        if missing:
            raise UserError(f"no --input for {len(missing)} of the model's {len(inputs)} input(s): "
                            f"{', '.join(missing)}; give each with --input NAME=FILE.npy, or --random for "
                            "seeded random data")
    feeds, notes = {}, []
    for name, dtype, ds in inputs:
        if name in files:
            path = files[name]
            a = feeds[name] = load_npy(name, path, dtype)
            notes.append(f"{name} {dtype}{list(a.shape)} from {path}")
            continue
        unsized = [d for d in ds if not isinstance(d, int) and sizes.get(d) is None]
        if unsized and default_dim is None:
            named = [d for d in unsized if isinstance(d, str)]
            raise UserError(f"input {name!r} has dims {_dims_text(ds)}: give the "
                            + (f"size of {', '.join(repr(d) for d in named)} with --dim {named[0]}=N"
                               if named else "array with --input " + name + "=FILE.npy (a dim has no name to set)"))
        shape = tuple(d if isinstance(d, int) else sizes.get(d, default_dim) for d in ds)
        nbytes = dtype.itemsize
        for d in shape:
            nbytes *= d  # exact Python ints: a huge --dim cannot wrap
        if nbytes > MAX_RANDOM_BYTES:
            raise UserError(f"input {name!r}: random data of shape {list(shape)} ({dtype}) needs {nbytes} bytes, "
                            f"more than {MAX_RANDOM_BYTES >> 30} GiB; give smaller --dim sizes or pass the array "
                            f"with --input {name}=FILE.npy")
        if dtype.kind == "f":
            a = rng.standard_normal(shape).astype(dtype)
            how = "random normal"
        elif dtype.kind in "iu":
            a = rng.integers(0, 4, shape).astype(dtype)
            how = "random integers 0..3"
        elif dtype.kind == "b":
            a = rng.random(shape) < 0.5
            how = "random booleans"
        else:
            raise UserError(f"input {name!r} of dtype {dtype}: no random values for it; pass --input {name}=FILE.npy")
        feeds[name] = a
        notes.append(f"{name} {dtype}{list(shape)} {how}")
    return feeds, notes
