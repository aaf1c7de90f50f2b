"""ONNX Col2Im (opset 18): fold sliding-window columns back into an image (the inverse layout
of im2col; overlapping windows add up).

Each output pixel gathers what lands on it: for every block offset it checks whether some
window covers it at that offset (position + pad - offset·dilation on the stride grid, window
index inside the column count) and adds that column entry.  1-D to 3-D images share one
kernel (missing leading spatial axes have size 1).
"""
from __future__ import annotations

import numpy as np

import dsl
from dsl import In, Out, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import NUMERIC

T = dsl.TypeVar("T")
SPATIAL = 3


@dsl.kernel
def col2im_kernel(x: In[T, 3], y: Out[T], image: dsl.Vec[i64, 3], block: dsl.Vec[i64, 3],
                  windows: dsl.Vec[i64, 3], stride: dsl.Vec[i64, 3], dilation: dsl.Vec[i64, 3],
                  pad: dsl.Vec[i64, 3]):
    """x (N, C·prod(block), prod(windows)); y (N, C, image...)."""
    pixels = image[0] * image[1] * image[2]
    taps = block[0] * block[1] * block[2]
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        p = i % pixels
        nc = i // pixels
        n = nc // (x.shape[1] // taps)
        c = nc - n * (x.shape[1] // taps)
        p2 = p % image[2]
        p1 = (p // image[2]) % image[1]
        p0 = p // (image[2] * image[1])
        acc = 0
        for k in range(taps):
            k2 = k % block[2]
            k1 = (k // block[2]) % block[1]
            k0 = k // (block[2] * block[1])
            q0 = p0 + pad[0] - k0 * dilation[0]
            q1 = p1 + pad[1] - k1 * dilation[1]
            q2 = p2 + pad[2] - k2 * dilation[2]
            if q0 >= 0 and q1 >= 0 and q2 >= 0 and q0 % stride[0] == 0 and q1 % stride[1] == 0 \
                    and q2 % stride[2] == 0:
                w0 = q0 // stride[0]
                w1 = q1 // stride[1]
                w2 = q2 // stride[2]
                if w0 < windows[0] and w1 < windows[1] and w2 < windows[2]:
                    acc += x[n, c * taps + k, (w0 * windows[1] + w1) * windows[2] + w2]
        y.flat[i] = acc


def _ints(spec):
    return None if spec is None or spec.value is None else [int(v) for v in np.asarray(spec.value).reshape(-1)]


@dsl.op("Col2Im", since=18)
class Col2Im(dsl.Op):
    """input (N, C·prod(block_shape), L) -> (N, C, *image_shape)."""

    dilations: tuple = ()
    pads: tuple = ()
    strides: tuple = ()
    kernels = {"default": col2im_kernel}
    replay = False  # run() reads image_shape and block_shape

    def _geometry(self, image, block):
        d = len(image)
        if len(block) != d or not 1 <= d <= SPATIAL:
            raise VerifyError(f"Col2Im image_shape {image} and block_shape {block} must have one length, 1 to "
                              f"{SPATIAL}")
        dil = list(self.dilations) or [1] * d
        st = list(self.strides) or [1] * d
        pads = list(self.pads) or [0] * (2 * d)
        if len(dil) != d or len(st) != d or len(pads) != 2 * d:
            raise VerifyError(f"Col2Im dilations/strides need {d} entries and pads {2 * d}, got {dil}, {st}, {pads}")
        windows = [(image[k] + pads[k] + pads[k + d] - dil[k] * (block[k] - 1) - 1) // st[k] + 1 for k in range(d)]
        if any(w <= 0 for w in windows):
            raise VerifyError(f"Col2Im blocks {block} do not fit image {image} with pads {pads}")
        return windows, dil, st, pads[:d]

    def verify(self, input, image_shape, block_shape):
        if input.dtype not in NUMERIC or input.ndim != 3:
            raise VerifyError(f"Col2Im input must be a numeric (N, C·prod(block), L) tensor, got {input}")
        image, block = _ints(image_shape), _ints(block_shape)
        if image is None or block is None:
            return
        windows, *_ = self._geometry(image, block)
        taps = int(np.prod(block))
        if input.shape[1] is not None and input.shape[1] % taps:
            raise VerifyError(f"Col2Im input {input} axis 1 must be a multiple of prod(block_shape) = {taps}")
        if input.shape[2] is not None and input.shape[2] != int(np.prod(windows)):
            raise VerifyError(f"Col2Im input {input} axis 2 must be the window count {int(np.prod(windows))} "
                              f"({' x '.join(map(str, windows))})")

    def infer(self, input, image_shape, block_shape):
        image, block = _ints(image_shape), _ints(block_shape)
        rank = image_shape.shape[0] if image is None else len(image)
        if image is None or block is None:
            return TensorSpec((input.shape[0], None) + (None,) * (rank or 0), input.dtype)
        c = None if input.shape[1] is None else input.shape[1] // int(np.prod(block))
        return TensorSpec((input.shape[0], c) + tuple(image), input.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, image, block = inputs[0], [int(v) for v in inputs[1]], [int(v) for v in inputs[2]]
        windows, dil, st, pads = self._geometry(image, block)
        pad3 = SPATIAL - len(image)

        def fill(values, value):
            return [value] * pad3 + list(values)
        impl(x, outputs[0], fill(image, 1), fill(block, 1), fill(windows, 1), fill(st, 1), fill(dil, 1),
             fill(pads, 0), backend=backend)
