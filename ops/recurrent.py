"""Recurrent layers: ONNX RNN, GRU and LSTM (opset 7+, ``layout`` from 14) as composed ops.

Each is two nodes, the split ONNX Runtime and oneDNN use too: the input projection of every
time step at once, X·Wᵀ, is one batched ``MatMul`` (the fast GEMM does the bulk of the
FLOPs), and ``com.opdsl::RecurrentScan`` runs the time loop -- H·Rᵀ, biases, peepholes, clip,
activations, ``sequence_lens`` -- in a DSL kernel where each team thread owns whole
(direction, batch entry) sequences, so steps need no barrier.  Gates are computed in f32.

Gate orders are ONNX's: RNN [i], GRU [z r h], LSTM [i o f c] (peepholes [i o f]).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

import dsl
from dsl import In, Out, bool_, f32, i32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS
from ops.matmul import MatMul
from ops.shape import Reshape, Transpose
from ops import recurrent_export  # noqa: F401  (registers RecurrentScan's standard ONNX form)

T = dsl.TypeVar("T")

CELLS = {"RNN": 1, "GRU": 3, "LSTM": 4}  # gates per cell
CELL_CODES = {"RNN": 0, "GRU": 1, "LSTM": 2}
GRU_CELL, LSTM_CELL = 1, 2

# activation codes of ``activate``; alpha/beta defaults are ONNX's
ACTIVATIONS = {"relu": 0, "tanh": 1, "sigmoid": 2, "affine": 3, "leakyrelu": 4, "thresholdedrelu": 5,
               "scaledtanh": 6, "hardsigmoid": 7, "elu": 8, "softsign": 9, "softplus": 10}
DEFAULT_ALPHA = {"affine": 1.0, "leakyrelu": 0.01, "thresholdedrelu": 1.0, "scaledtanh": 1.0,
                 "hardsigmoid": 0.2, "elu": 1.0}
DEFAULT_BETA = {"affine": 0.0, "scaledtanh": 1.0, "hardsigmoid": 0.5}
DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}


@dsl.func
def activate(v, code, alpha, beta):
    r = max(v, 0)
    if code == 1:
        r = dsl.tanh(v)
    elif code == 2:
        e = dsl.exp(-abs(v))
        s = 1 / (1 + e)
        r = s if v >= 0 else e * s
    elif code == 3:
        r = alpha * v + beta
    elif code == 4:
        r = v if v >= 0 else alpha * v
    elif code == 5:
        r = v if v > alpha else v * 0
    elif code == 6:
        r = alpha * dsl.tanh(beta * v)
    elif code == 7:
        r = min(max(alpha * v + beta, 0), 1)
    elif code == 8:
        r = v if v >= 0 else alpha * (dsl.exp(v) - 1)
    elif code == 9:
        r = v / (1 + abs(v))
    elif code == 10:
        r = dsl.log(1 + dsl.exp(-abs(v))) + max(v, 0)
    return r


@dsl.func
def gate_input(v, clip):
    """Pre-activation value, clipped to [-clip, clip] when clip > 0."""
    r = v
    if clip > 0:
        r = min(max(v, -clip), clip)
    return r


@dsl.kernel
def recurrent_scan_kernel(xw: In[T, 3], r: In[T, 3], bias: In[T, 2], lens: In[i32, 1], h0: In[T], c0: In[T],
                          peep: In[T, 2], acts: In[i64, 2], alphas: In[f32, 2], betas: In[f32, 2],
                          y: Out[T], yh: Out[T], yc: Out[T], gates: Out[f32, 2],
                          cell: i64, steps: i64, clip: f32, batch_major: bool_, lbr: bool_, couple: bool_,
                          reverse: bool_):
    """One (direction, batch entry) sequence per work item; state lives in yh/yc."""
    dirs = xw.shape[0]
    hidden = r.shape[2]
    ng = r.shape[1] // hidden
    batch = xw.shape[1] // steps
    lo, hi = dsl.split(dirs * batch)
    for w in range(lo, hi):
        d = w // batch
        b = w - d * batch
        ps = (b * dirs + d) * hidden if batch_major else (d * batch + b) * hidden
        for j in range(hidden):
            yh.flat[ps + j] = h0.flat[ps + j]
            yc.flat[ps + j] = c0.flat[ps + j]
        n = lens.flat[b]
        for step in range(n):
            t = n - 1 - step if d == 1 or reverse else step
            px = b * steps + t if batch_major else t * batch + b
            # phase 1: every gate's pre-activation (GRU's h gate without R: added below)
            for g in range(ng):
                for j in range(hidden):
                    row = g * hidden + j
                    s = f32(xw[d, px, row]) + f32(bias[d, row])
                    if not (cell == GRU_CELL and g == 2):
                        s += f32(bias[d, ng * hidden + row])
                        for k in range(hidden):
                            s += f32(yh.flat[ps + k]) * f32(r[d, row, k])
                    gates[w, row] = s
            if cell == GRU_CELL:
                for j in range(hidden):
                    gates[w, j] = activate(gate_input(gates[w, j], clip), acts[d, 0], alphas[d, 0], betas[d, 0])
                    gates[w, hidden + j] = activate(gate_input(gates[w, hidden + j], clip), acts[d, 0],
                                                    alphas[d, 0], betas[d, 0])
                for j in range(hidden):
                    row = 2 * hidden + j
                    rec = f32(0)
                    for k in range(hidden):
                        hk = f32(yh.flat[ps + k])
                        if not lbr:
                            hk = hk * gates[w, hidden + k]
                        rec += hk * f32(r[d, row, k])
                    rb = f32(bias[d, ng * hidden + row])
                    if lbr:
                        rec = gates[w, hidden + j] * (rec + rb)
                    else:
                        rec = rec + rb
                    gates[w, 3 * hidden + j] = activate(gate_input(gates[w, row] + rec, clip), acts[d, 1],
                                                        alphas[d, 1], betas[d, 1])
                for j in range(hidden):
                    z = gates[w, j]
                    h = (1 - z) * gates[w, 3 * hidden + j] + z * f32(yh.flat[ps + j])
                    yh.flat[ps + j] = h
            elif cell == LSTM_CELL:
                for j in range(hidden):
                    c_prev = f32(yc.flat[ps + j])
                    gi = activate(gate_input(gates[w, j] + f32(peep[d, j]) * c_prev, clip), acts[d, 0],
                                  alphas[d, 0], betas[d, 0])
                    gf = activate(gate_input(gates[w, 2 * hidden + j] + f32(peep[d, 2 * hidden + j]) * c_prev, clip),
                                  acts[d, 0], alphas[d, 0], betas[d, 0])
                    if couple:
                        gf = 1 - gi
                    gc = activate(gate_input(gates[w, 3 * hidden + j], clip), acts[d, 1], alphas[d, 1], betas[d, 1])
                    c = gf * c_prev + gi * gc
                    go = activate(gate_input(gates[w, hidden + j] + f32(peep[d, hidden + j]) * c, clip), acts[d, 0],
                                  alphas[d, 0], betas[d, 0])
                    gates[w, j] = go * activate(c, acts[d, 2], alphas[d, 2], betas[d, 2])
                    yc.flat[ps + j] = c
                for j in range(hidden):
                    yh.flat[ps + j] = gates[w, j]
            else:
                for j in range(hidden):
                    yh.flat[ps + j] = activate(gate_input(gates[w, j], clip), acts[d, 0], alphas[d, 0], betas[d, 0])
            for j in range(hidden):
                if batch_major:
                    y.flat[((b * steps + t) * dirs + d) * hidden + j] = yh.flat[ps + j]
                else:
                    y.flat[((t * dirs + d) * batch + b) * hidden + j] = yh.flat[ps + j]
        for t in range(n, steps):  # past this entry's length: Y is zero
            for j in range(hidden):
                if batch_major:
                    y.flat[((b * steps + t) * dirs + d) * hidden + j] = 0
                else:
                    y.flat[((t * dirs + d) * batch + b) * hidden + j] = 0


@dsl.op("RecurrentScan", domain="com.opdsl", since=1)
class RecurrentScan(dsl.Op):
    """The time loop of RNN/GRU/LSTM given the input projection ``xw`` = X·Wᵀ of shape
    (directions, steps·batch, gates·hidden) (rows in X's order); ``x`` gives steps and batch.
    Outputs Y, Y_h and, for LSTM, Y_c, in ONNX's shapes for ``layout``."""

    cell: str = "LSTM"
    direction: str = "forward"
    hidden_size: int = 0
    layout: int = 0
    activations: Tuple[str, ...] = ()
    activation_alpha: Tuple[float, ...] = ()
    activation_beta: Tuple[float, ...] = ()
    clip: Optional[float] = None
    linear_before_reset: int = 0
    input_forget: int = 0
    kernels = {"default": recurrent_scan_kernel}
    replay = False  # run() checks sequence_lens' values at every run

    def _dirs(self) -> int:
        if self.direction not in ("forward", "reverse", "bidirectional"):
            raise VerifyError(f"{self.cell} direction {self.direction!r} is not one of forward, reverse, bidirectional")
        return 2 if self.direction == "bidirectional" else 1

    def _activation_table(self):
        """(codes, alphas, betas) arrays of shape (directions, 3)."""
        dirs = self._dirs()
        names = list(self.activations) or list(DEFAULT_ACTIVATIONS[self.cell]) * dirs
        per = len(DEFAULT_ACTIVATIONS[self.cell])
        if len(names) != per * dirs:
            raise VerifyError(f"{self.cell} with direction {self.direction} needs {per * dirs} activations, got "
                              f"{list(self.activations)}")
        codes = np.zeros((dirs, 3), np.int64)
        alphas = np.zeros((dirs, 3), np.float32)
        betas = np.zeros((dirs, 3), np.float32)
        given_a, given_b = list(self.activation_alpha), list(self.activation_beta)
        for i, name in enumerate(names):
            key = name.lower()
            if key not in ACTIVATIONS:
                raise VerifyError(f"{self.cell} activation {name!r} is not supported; accepted: "
                                  f"{', '.join(sorted(ACTIVATIONS))} (case-insensitive)")
            d, slot = divmod(i, per)
            codes[d, slot] = ACTIVATIONS[key]
            # alphas/betas are listed in order for the activations that take them
            alphas[d, slot] = given_a.pop(0) if key in DEFAULT_ALPHA and given_a else DEFAULT_ALPHA.get(key, 0.0)
            betas[d, slot] = given_b.pop(0) if key in DEFAULT_BETA and given_b else DEFAULT_BETA.get(key, 0.0)
        return codes, alphas, betas

    def _sizes(self, x):
        steps, batch = (x.shape[1], x.shape[0]) if self.layout else (x.shape[0], x.shape[1])
        return steps, batch

    def verify(self, x, xw, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None):
        cell = self.cell
        if cell not in CELLS:
            raise VerifyError(f"RecurrentScan cell {cell!r} is not one of {', '.join(CELLS)}")
        dirs = self._dirs()
        self._activation_table()
        if x.dtype not in FLOATS or r.dtype != x.dtype:
            raise VerifyError(f"{cell} X and R must share a float dtype, got {x} and {r}")
        if x.ndim != 3:
            raise VerifyError(f"{cell} X must be 3-D ({'batch, seq' if self.layout else 'seq, batch'}, input), got {x}")
        h = self.hidden_size or r.shape[-1]
        want_r = (dirs, CELLS[cell] * h, h) if h else None
        if want_r and any(a is not None and a != w for a, w in zip(r.shape, want_r)):
            raise VerifyError(f"{cell} R must have shape (directions, {CELLS[cell]}·hidden, hidden) = {want_r}, got {r}")
        if sequence_lens is not None and sequence_lens.dtype != dsl.i32:
            raise VerifyError(f"{cell} sequence_lens must be int32, got {sequence_lens}")
        if cell != "LSTM" and (initial_c is not None or p is not None):
            raise VerifyError(f"{cell} has no initial_c or P inputs")
        if self.layout not in (0, 1):
            raise VerifyError(f"{cell} layout must be 0 or 1, got {self.layout}")

    def infer(self, x, xw, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None):
        dirs = self._dirs()
        steps, batch = self._sizes(x)
        h = self.hidden_size or r.shape[-1]
        if self.layout:
            y, state = (batch, steps, dirs, h), (batch, dirs, h)
        else:
            y, state = (steps, dirs, batch, h), (dirs, batch, h)
        outs = (TensorSpec(y, x.dtype), TensorSpec(state, x.dtype))
        return outs + ((TensorSpec(state, x.dtype),) if self.cell == "LSTM" else ())

    def run(self, impl, inputs, outputs, backend):
        x, xw, r = inputs[:3]
        b, lens, h0, c0, p = (list(inputs[3:]) + [None] * 5)[:5]
        dirs, ng, hidden = r.shape[0], r.shape[1] // r.shape[2], r.shape[2]
        steps, batch = (x.shape[1], x.shape[0]) if self.layout else (x.shape[0], x.shape[1])
        dt = x.dtype
        if lens is not None and lens.size and (lens.min() < 0 or lens.max() > steps):
            raise ValueError(f"{self.cell} sequence_lens {lens.tolist()} must lie in [0, {steps}] (the sequence length)")
        codes, alphas, betas = self._activation_table()
        state = outputs[1].shape
        y, yh = outputs[0], outputs[1]
        yc = outputs[2] if len(outputs) > 2 else np.empty(state, dt)
        impl(xw, r, np.zeros((dirs, 2 * ng * hidden), dt) if b is None else b,
             np.full(batch, steps, np.int32) if lens is None else lens,
             np.zeros(state, dt) if h0 is None else h0, np.zeros(state, dt) if c0 is None else c0,
             np.zeros((dirs, 3 * hidden), dt) if p is None else p, codes, alphas, betas,
             y, yh, yc, np.empty((dirs * batch, 4 * hidden), np.float32),
             CELL_CODES[self.cell], steps,
             0.0 if self.clip is None else float(self.clip), bool(self.layout), bool(self.linear_before_reset),
             bool(self.input_forget), self.direction == "reverse", backend=backend)


def _projection(x, w):
    """X·Wᵀ for every step and direction at once: (directions, steps·batch, gates·hidden)."""
    return MatMul(Reshape(x, np.array([1, -1, 0], np.int64)), Transpose(w, perm=(0, 2, 1)))


def _scan_params(cell, direction, hidden_size, layout, activations, activation_alpha, activation_beta, clip):
    return dict(cell=cell, direction=direction, hidden_size=hidden_size, layout=layout,
                activations=tuple(activations), activation_alpha=tuple(activation_alpha),
                activation_beta=tuple(activation_beta), clip=clip)


@dsl.composed("RNN", since=7)
def RNN(X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha: Tuple[float, ...] = (),
         activation_beta: Tuple[float, ...] = (), activations: Tuple[str, ...] = (), clip: Optional[float] = None,
         direction: str = "forward", hidden_size: int = 0, layout: int = 0):
    """Elman RNN: H = f(X·Wᵀ + H·Rᵀ + Wb + Rb)."""
    params = _scan_params("RNN", direction, hidden_size, layout, activations, activation_alpha, activation_beta, clip)
    return RecurrentScan(X, _projection(X, W), R, B, sequence_lens, initial_h, **params)


@dsl.composed("GRU", since=7)
def GRU(X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha: Tuple[float, ...] = (),
         activation_beta: Tuple[float, ...] = (), activations: Tuple[str, ...] = (), clip: Optional[float] = None,
         direction: str = "forward", hidden_size: int = 0, layout: int = 0, linear_before_reset: int = 0):
    """GRU with gates [z r h]; ``linear_before_reset`` applies the reset after H·Rhᵀ + Rbh."""
    params = _scan_params("GRU", direction, hidden_size, layout, activations, activation_alpha, activation_beta, clip)
    return RecurrentScan(X, _projection(X, W), R, B, sequence_lens, initial_h,
                         linear_before_reset=linear_before_reset, **params)


@dsl.composed("LSTM", since=7)
def LSTM(X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
          activation_alpha: Tuple[float, ...] = (), activation_beta: Tuple[float, ...] = (),
          activations: Tuple[str, ...] = (), clip: Optional[float] = None, direction: str = "forward",
          hidden_size: int = 0, layout: int = 0, input_forget: int = 0):
    """LSTM with gates [i o f c], optional peepholes P [i o f] and coupled input-forget gates."""
    params = _scan_params("LSTM", direction, hidden_size, layout, activations, activation_alpha, activation_beta, clip)
    return RecurrentScan(X, _projection(X, W), R, B, sequence_lens, initial_h, initial_c, P,
                         input_forget=input_forget, **params)

