"""Col2Im on every backend against a numpy scatter-add fold written here."""
import itertools

import numpy as np
import pytest

import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(2)


def ref_col2im(x, image, block, strides, dilations, pads):
    n, cb, _ = x.shape
    d = len(image)
    c = cb // int(np.prod(block))
    windows = [(image[k] + pads[k] + pads[k + d] - dilations[k] * (block[k] - 1) - 1) // strides[k] + 1
               for k in range(d)]
    y = np.zeros((n, c) + tuple(image), np.float64)
    cols = x.reshape(n, c, *block, *windows)
    for kk in itertools.product(*(range(b) for b in block)):
        for ww in itertools.product(*(range(w) for w in windows)):
            pos = [ww[k] * strides[k] + kk[k] * dilations[k] - pads[k] for k in range(d)]
            if all(0 <= p < image[k] for k, p in enumerate(pos)):
                y[(slice(None), slice(None)) + tuple(pos)] += cols[(slice(None), slice(None)) + kk + ww]
    return y


@pytest.mark.parametrize("image,block,strides,dilations,pads", [
    ((5, 5), (2, 2), (1, 1), (1, 1), (0, 0, 0, 0)),
    ((6, 7), (3, 2), (2, 1), (1, 2), (1, 0, 1, 1)),
    ((4, 3, 5), (2, 1, 2), (1, 1, 2), (1, 1, 1), (0, 0, 1, 0, 0, 1)),
], ids=["2d", "2d-strided-dilated-padded", "3d"])
def test_fold_matches_scatter_add(backend, image, block, strides, dilations, pads):
    d = len(image)
    windows = [(image[k] + pads[k] + pads[k + d] - dilations[k] * (block[k] - 1) - 1) // strides[k] + 1
               for k in range(d)]
    x = RNG.standard_normal((2, 3 * int(np.prod(block)), int(np.prod(windows)))).astype(np.float32)
    y = ops.Col2Im(x, np.array(image, np.int64), np.array(block, np.int64), strides=strides, dilations=dilations,
                   pads=pads, backend=backend)
    np.testing.assert_allclose(y, ref_col2im(x, image, block, strides, dilations, pads), rtol=1e-5, atol=1e-5)


def test_errors():
    with pytest.raises(VerifyError, match="axis 2 must be the window count 16"):
        ops.Col2Im(np.zeros((1, 4, 15), np.float32), np.array([5, 5], np.int64), np.array([2, 2], np.int64),
                   backend="interpreter")
