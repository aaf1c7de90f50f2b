"""RNN, GRU and LSTM (composed: MatMul + RecurrentScan) on every backend against numpy
recurrences written here: both directions, sequence_lens, peepholes, linear_before_reset,
batch-major layout, clip, custom activations, graph use and errors."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(9)


def sig(x):
    return 1 / (1 + np.exp(-x))


def ref_recurrent(cell, x, w, r, b, lens, h0, c0=None, p=None, lbr=0, clip=None, f=sig, g=np.tanh):
    """x (S, B, I); w (D, G·H, I) ...; -> Y (S, D, B, H), Y_h, Y_c in f64."""
    steps, batch, _ = x.shape
    dirs, hidden = r.shape[0], r.shape[2]
    y = np.zeros((steps, dirs, batch, hidden))
    yh = h0.astype(np.float64).copy()
    yc = np.zeros_like(yh) if c0 is None else c0.astype(np.float64).copy()
    cl = (lambda v: np.clip(v, -clip, clip)) if clip else (lambda v: v)
    for d in range(dirs):
        wb, rb = np.split(b[d].astype(np.float64), 2)
        for n in range(batch):
            h, c = yh[d, n].copy(), yc[d, n].copy()
            order = range(lens[n]) if d == 0 else reversed(range(lens[n]))
            for t in order:
                xw = w[d] @ x[t, n] + wb
                if cell == "RNN":
                    h = g(cl(xw + r[d] @ h + rb))
                elif cell == "GRU":
                    H = hidden
                    z = f(cl(xw[:H] + r[d, :H] @ h + rb[:H]))
                    rr = f(cl(xw[H:2 * H] + r[d, H:2 * H] @ h + rb[H:2 * H]))
                    if lbr:
                        hh = g(cl(xw[2 * H:] + rr * (r[d, 2 * H:] @ h + rb[2 * H:])))
                    else:
                        hh = g(cl(xw[2 * H:] + r[d, 2 * H:] @ (rr * h) + rb[2 * H:]))
                    h = (1 - z) * hh + z * h
                else:
                    H = hidden
                    gates = xw + r[d] @ h + rb
                    pi, po, pf = np.split(p[d], 3)
                    i = f(cl(gates[:H] + pi * c))
                    fg = f(cl(gates[2 * H:3 * H] + pf * c))
                    c = fg * c + i * g(cl(gates[3 * H:]))
                    o = f(cl(gates[H:2 * H] + po * c))
                    h = o * g(c)
                y[t, d, n] = h
            yh[d, n], yc[d, n] = h, c
    return y, yh, yc


def weights(cell, dirs, inp, hidden):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[cell]
    w = RNG.standard_normal((dirs, gates * hidden, inp)).astype(np.float32) * 0.5
    r = RNG.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32) * 0.5
    b = RNG.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32) * 0.1
    return w, r, b


def test_bidirectional_lstm_with_lengths_and_peepholes(backend):
    x = RNG.standard_normal((4, 3, 2)).astype(np.float32)
    w, r, b = weights("LSTM", 2, 2, 5)
    lens = np.array([4, 2, 3], np.int32)
    h0, c0 = (RNG.standard_normal((2, 3, 5)).astype(np.float32) for _ in range(2))
    p = RNG.standard_normal((2, 15)).astype(np.float32) * 0.1
    y, yh, yc = ops.LSTM(x, w, r, b, lens, h0, c0, p, direction="bidirectional", hidden_size=5, backend=backend)
    want = ref_recurrent("LSTM", x, w, r, b, lens, h0, c0, p)
    for got, ref in zip((y, yh, yc), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    assert not y[2:, :, 1].any()  # past entry 1's length: zeros


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_reset_variants_and_clip(backend, lbr):
    x = RNG.standard_normal((3, 2, 4)).astype(np.float32) * 3
    w, r, b = weights("GRU", 1, 4, 3)
    h0 = np.zeros((1, 2, 3), np.float32)
    y, yh = ops.GRU(x, w, r, b, None, h0, hidden_size=3, linear_before_reset=lbr, clip=1.5, backend=backend)
    want = ref_recurrent("GRU", x, w, r, b, [3, 3], h0, lbr=lbr, clip=1.5)
    np.testing.assert_allclose(y, want[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(yh, want[1], rtol=1e-4, atol=1e-5)


def test_reverse_rnn_batch_major_with_relu(backend):
    xb = RNG.standard_normal((2, 5, 3)).astype(np.float32)       # layout 1: (batch, seq, input)
    w, r, b = weights("RNN", 1, 3, 4)
    y, yh = ops.RNN(xb, w, r, b, direction="reverse", layout=1, activations=("Relu",), backend=backend)
    # ref_recurrent reverses direction index 1 only: for a lone reversed direction, flip time
    flip = ref_recurrent("RNN", xb.transpose(1, 0, 2)[::-1], w, r, b, [5, 5], np.zeros((1, 2, 4)),
                         g=lambda v: np.maximum(v, 0))
    assert y.shape == (2, 5, 1, 4) and yh.shape == (2, 1, 4)
    np.testing.assert_allclose(y, flip[0][::-1].transpose(2, 0, 1, 3), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(yh, flip[1].transpose(1, 0, 2), rtol=1e-4, atol=1e-5)


def test_lstm_in_a_graph_is_matmul_plus_scan():
    x = RNG.standard_normal((6, 2, 3)).astype(np.float32)
    w, r, b = weights("LSTM", 1, 3, 4)
    g = dsl.Graph("lstm")
    xi = g.input("x", (None, 2, 3), dsl.f32)
    y, yh, yc = ops.LSTM(xi, g.constant("w", w), g.constant("r", r), g.constant("b", b), hidden_size=4)
    g.output(yh, "yh")
    model = g.compile(backend="numba")
    kinds = sorted(n.op.op_type for n in model.graph.nodes)
    assert "MatMul" in kinds and "RecurrentScan" in kinds
    want = ref_recurrent("LSTM", x, w, r, b, [6, 6], np.zeros((1, 2, 4)), p=np.zeros((1, 12)))
    np.testing.assert_allclose(model.run({"x": x})["yh"], want[1], rtol=1e-4, atol=1e-5)


def test_errors_name_the_attribute():
    x = np.zeros((2, 1, 3), np.float32)
    w, r, b = weights("GRU", 1, 3, 2)
    with pytest.raises(VerifyError, match="direction 'sideways' is not one of"):
        ops.GRU(x, w, r, direction="sideways", backend="interpreter")
    with pytest.raises(VerifyError, match="activation 'Swish' is not supported"):
        ops.GRU(x, w, r, activations=("Sigmoid", "Swish"), backend="interpreter")
    with pytest.raises(VerifyError, match="needs 2 activations"):
        ops.GRU(x, w, r, activations=("Sigmoid",), backend="interpreter")
    with pytest.raises(ValueError, match=r"sequence_lens \[3\] must lie in \[0, 2\]"):
        ops.GRU(x, w, r, b, np.array([3], np.int32), backend="interpreter")
