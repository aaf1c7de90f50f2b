"""Winograd F(2×2, 3×3) (ops/conv_winograd.py) against a float64 numpy reference on every
backend: odd and even images down to 2×2, pads 0 and 1, channel counts that are not multiples of
16, batch, several tile blocks, M chunks and output-channel parts, the fused epilogues (bias,
residual, Relu / Clip / LeakyRelu), a write into a Concat's half; the weight transform once per
constant; Conv.select's rule; the launch's errors."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph import formats as F
from dsl.opgraph.spec import TensorSpec
from ops.conv_winograd import (WinogradConfig, conv_winograd, launch_conv_winograd, packed_winograd_weights,
                               winograd_config, work_split)
from ops.gemm_packed import ACT_CLIP, ACT_LEAKY_RELU, ACT_NONE, ACT_RELU

RNG = np.random.default_rng(29)


def conv_ref(x, w, b, pad):
    """f64 3×3 stride-1 convolution with bias, NCHW."""
    n, c, h, wd = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - 2, wd + 2 * pad - 2
    y = np.zeros((n, w.shape[0], oh, ow))
    for i in range(3):
        for j in range(3):
            y += np.einsum("nchw,mc->nmhw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j].astype(np.float64))
    return y + b[None, :, None, None]


ACTS = {ACT_NONE: lambda v: v, ACT_RELU: lambda v: np.maximum(v, 0), ACT_CLIP: lambda v: np.clip(v, -0.5, 0.75),
        ACT_LEAKY_RELU: lambda v: np.where(v >= 0, v, 0.1 * v)}
BOUNDS = {ACT_NONE: (0.0, 0.0), ACT_RELU: (0.0, 0.0), ACT_CLIP: (-0.5, 0.75), ACT_LEAKY_RELU: (0.1, 0.0)}

CASES = [  # (N, C, H, W, M, pad, act, residual, tb, rb, parts)
    (1, 16, 7, 7, 32, 1, ACT_NONE, False, 6, None, None),      # 7×7 odd image, several blocks
    (2, 20, 6, 5, 21, 0, ACT_RELU, True, None, None, None),    # batch, no padding, C and M past a block
    (1, 40, 5, 4, 96, 1, ACT_CLIP, True, 6, 6, 2),             # chunks of one register tile (6: MR), two oc parts
    (1, 3, 2, 2, 17, 1, ACT_LEAKY_RELU, False, None, None, None),  # a 2×2 image: one tile, all border
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"N{c[0]}C{c[1]}H{c[2]}W{c[3]}M{c[4]}p{c[5]}")
def test_winograd_kernel_matches_numpy(backend, case):
    n, c, h, wd, m, pad, act, residual, tb, rb, parts = case
    x = RNG.standard_normal((n, c, h, wd)).astype(np.float32)
    w = (RNG.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    ref = conv_ref(x, w, b, pad)
    z = RNG.standard_normal(ref.shape).astype(np.float32) if residual else None
    if residual:
        ref = ref + z
    ref = ACTS[act](ref)
    y = np.full(F.physical_shape(ref.shape, "nchwc16"), np.nan, np.float32)
    lo, hi = BOUNDS[act]
    launch_conv_winograd(conv_winograd, F.to_nchwc16_ref(x), w, b, y, None if z is None else F.to_nchwc16_ref(z),
                         (pad, pad), backend, act, lo, hi, tb=tb, rb=rb, parts=parts)
    np.testing.assert_allclose(F.to_plain_ref(y, m), ref, rtol=1e-5, atol=1e-5)
    assert (F.to_plain_ref(y, y.shape[1] * 16)[:, m:] == 0).all()  # the last block's padding lanes


def test_avx2_register_tile_on_numba():
    """The AVX2 tile (6 tiles × 2 vectors of 8 lanes) on whatever CPU runs the tests."""
    x = RNG.standard_normal((1, 24, 9, 6)).astype(np.float32)
    w = (RNG.standard_normal((40, 24, 3, 3)) * 0.1).astype(np.float32)
    b = RNG.standard_normal(40).astype(np.float32)
    y = np.full(F.physical_shape((1, 40, 9, 6), "nchwc16"), np.nan, np.float32)
    launch_conv_winograd(conv_winograd, F.to_nchwc16_ref(x), w, b, y, None, (1, 1), "numba", ACT_RELU, 0.0, 0.0,
                         cfg=WinogradConfig(V=8, NV=2, MR=6), tb=12)
    np.testing.assert_allclose(F.to_plain_ref(y, 40), np.maximum(conv_ref(x, w, b, 1), 0), rtol=1e-5, atol=1e-5)
    assert (F.to_plain_ref(y, 48)[:, 40:] == 0).all()


def test_numba_launchers_keep_a_warm_start_record():
    """No run-time checked step or align in the kernel: a launcher with an error record keeps no
    front-end record, and every warm load of a model then ran the front end again (+0.3 s for
    light_resnet50)."""
    test_avx2_register_tile_on_numba()
    launchers = [v for (be, _), v in conv_winograd._variants.items() if be == "numba"]
    assert launchers and all(launcher._sites is None for launcher in launchers)

def test_winograd_writes_its_half_of_a_concat_buffer(backend):
    """y a contiguous view of a larger NCHWc16 buffer (what the memory plan hands a producer
    whose output is placed in a Concat's): only its blocks change."""
    x = RNG.standard_normal((1, 32, 6, 6)).astype(np.float32)
    w = (RNG.standard_normal((16, 32, 3, 3)) * 0.1).astype(np.float32)
    b = RNG.standard_normal(16).astype(np.float32)
    buf = np.full((1, 3, 6, 6, 16), 7.0, np.float32)
    launch_conv_winograd(conv_winograd, F.to_nchwc16_ref(x), w, b, buf[:, 1:2], None, (1, 1), backend,
                         ACT_RELU, 0.0, 0.0)
    np.testing.assert_allclose(F.to_plain_ref(buf[:, 1:2], 16), np.maximum(conv_ref(x, w, b, 1), 0),
                               rtol=1e-5, atol=1e-5)
    assert (buf[:, 0] == 7).all() and (buf[:, 2] == 7).all()


def squeeze_expand_graph(residual: bool):
    """1×1 conv (NCHWc16 out) -> 3×3 expand (32 -> 16 on 8×8: chosen for Winograd on numba)
    next to a 1×1 expand, the two concatenated (in place); with ``residual`` the 3×3 one adds
    the graph input ``z`` and applies Relu (one FusedConv)."""
    g = dsl.Graph("fire")
    xi = g.input("x", (1, 8, 8, 8), dsl.f32)
    consts = {name: g.constant(name, (RNG.standard_normal(shape) * 0.2).astype(np.float32)) for name, shape in
              (("sq", (32, 8, 1, 1)), ("e1", (16, 32, 1, 1)), ("e3", (16, 32, 3, 3)), ("b3", (16,)))}
    s = ops.Relu(ops.Conv(xi, consts["sq"]))
    e3 = ops.Conv(s, consts["e3"], consts["b3"], pads=[1, 1, 1, 1])
    if residual:
        e3 = ops.Relu(ops.Add(e3, g.input("z", (1, 16, 8, 8), dsl.f32)))
    g.output(ops.Neg(ops.Concat(ops.Conv(s, consts["e1"]), e3, axis=1)), "y")
    return g, {k: v.value for k, v in consts.items()}


def conv1x1(x, w):
    return np.einsum("nchw,mc->nmhw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))


@pytest.mark.parametrize("residual", [False, True], ids=["conv", "fused-residual-relu"])
def test_a_model_runs_winograd_into_the_concat(backend, residual):
    g, c = squeeze_expand_graph(residual)
    model = g.compile(backend=backend)
    feeds = {"x": RNG.standard_normal((1, 8, 8, 8)).astype(np.float32)}
    if residual:
        feeds["z"] = RNG.standard_normal((1, 16, 8, 8)).astype(np.float32)
    chosen = set(model.selected(feeds).values())
    assert ("winograd" in chosen) == (backend == "numba")
    s = np.maximum(conv1x1(feeds["x"], c["sq"]), 0).astype(np.float32)
    e3 = conv_ref(s, c["e3"], c["b3"], 1)
    if residual:
        e3 = np.maximum(e3 + feeds["z"], 0)
    want = -np.concatenate([conv1x1(s, c["e1"]), e3], axis=1)
    for _ in range(2):  # the replayed run reads the same transformed weights
        np.testing.assert_allclose(model.run(feeds)["y"], want, rtol=1e-4, atol=1e-4)
    assert model.memory_plan().views  # the expands write into the Concat's buffer


def test_select_takes_winograd_for_wide_blocked_3x3_on_numba():
    def spec(c, h):
        return TensorSpec((1, c, h, h), dsl.f32, format="nchwc16")
    conv = ops.Conv(pads=(1, 1, 1, 1))
    w = TensorSpec((64, 64, 3, 3), dsl.f32)
    assert conv.select(spec(64, 56), w, backend="numba") == "winograd"          # ResNet-50's 64 @56
    assert conv.select(TensorSpec((1, 64, 56, 56), dsl.f32), w, backend="numba") == "direct"  # plain
    assert conv.select(spec(64, 56), w, backend="opencl") == "direct"
    assert conv.select(spec(64, 56), w, backend="interpreter") == "direct"
    assert ops.Conv(pads=(1, 1, 1, 1), strides=(2, 2)).select(spec(64, 56), w, backend="numba") == "direct"
    assert ops.Conv(pads=(2, 2, 2, 2), dilations=(2, 2)).select(spec(64, 56), w, backend="numba") == "direct"
    assert conv.select(spec(16, 55), TensorSpec((64, 16, 3, 3), dsl.f32), backend="numba") == "direct"  # C < 32
    # 256 @14: 49 tiles for 256 output channels (the weights outweigh the image)
    assert conv.select(spec(256, 14), TensorSpec((256, 256, 3, 3), dsl.f32), backend="numba") == "direct"


def test_weights_are_transformed_once_per_constant():
    cfg = winograd_config("interpreter", 20)
    w = RNG.standard_normal((20, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(20).astype(np.float32)
    fresh = packed_winograd_weights(w, b, cfg, 16, "interpreter")
    assert packed_winograd_weights(w, b, cfg, 16, "interpreter")[0] is not fresh[0]  # writable: again
    w.setflags(write=False)
    b.setflags(write=False)
    once = packed_winograd_weights(w, b, cfg, 16, "interpreter")
    assert packed_winograd_weights(w, b, cfg, 16, "interpreter")[0] is once[0]
    # U[ξ] = G g Gᵀ, [ξ][oc group][16 ic][OCT oc]: zeros past C and M
    g = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    u = once[0].reshape(16, -1, 16, cfg.OCT)
    want = np.einsum("ai,mcij,bj->abcm", g, w.astype(np.float64), g).reshape(16, 3, 20)
    np.testing.assert_allclose(u[:, 0, :3, :20], want, rtol=1e-6, atol=1e-6)
    assert not u[:, :, 3:].any() and not u[:, 0, :, 20:].any()


def test_work_split_keeps_the_workers_busy():
    # U in L2: blocks of at most 4 register tiles, many for each of the 4 workers
    tb, parts = work_split(784, 64, 64, 6, 64, 4)
    assert parts == 1 and tb % 6 == 0 and tb <= 24 and -(-784 // tb) >= 4 * 8
    assert work_split(49, 256, 256, 6, 64, 4) == (49, 4)  # U outweighs V: one block, oc parts
    tb, parts = work_split(196, 128, 128, 6, 64, 4)        # 1 MB of U: the 4 workers' V within L2_BUDGET
    assert parts == 1 and tb == 30 and 4 * 16 * tb * 128 * 4 <= 1 << 20


def test_launch_rejects_what_it_cannot_run():
    x = np.zeros((1, 1, 4, 4, 16), np.float32)
    w = np.zeros((3, 16, 3, 3), np.float32)
    y = np.zeros((1, 1, 4, 4, 16), np.float32)
    with pytest.raises(ValueError, match=r"conv_winograd computes f32; x is float64"):
        launch_conv_winograd(conv_winograd, x.astype(np.float64), w, None, y, None, (1, 1), "interpreter", 0, 0, 0)
    with pytest.raises(ValueError, match=r"takes NCHWc16 images and 3×3 weights; got x \(1, 16, 4, 4\)"):
        launch_conv_winograd(conv_winograd, np.zeros((1, 16, 4, 4), np.float32), w, None, y, None, (1, 1),
                             "interpreter", 0, 0, 0)
    with pytest.raises(ValueError, match=r"weights \(3, 20, 3, 3\) need at most 16 input channels"):
        launch_conv_winograd(conv_winograd, x, np.zeros((3, 20, 3, 3), np.float32), None, y, None, (1, 1),
                             "interpreter", 0, 0, 0)
