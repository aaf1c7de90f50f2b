"""NonMaxSuppression on every backend against a greedy numpy reference written here."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(6)


def iou(a, b):
    ya0, xa0, ya1, xa1 = min(a[0], a[2]), min(a[1], a[3]), max(a[0], a[2]), max(a[1], a[3])
    yb0, xb0, yb1, xb1 = min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])
    iw, ih = min(xa1, xb1) - max(xa0, xb0), min(ya1, yb1) - max(ya0, yb0)
    if iw <= 0 or ih <= 0:
        return -np.inf
    inter = iw * ih
    return inter / ((xa1 - xa0) * (ya1 - ya0) + (xb1 - xb0) * (yb1 - yb0) - inter)


def ref_nms(boxes, scores, most, thr, score_min=None):
    rows = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            order = sorted(range(scores.shape[2]), key=lambda j: (-scores[b, c, j], j))
            kept = []
            for j in order:
                if len(kept) == most:
                    break
                if score_min is not None and not scores[b, c, j] > score_min:
                    continue
                if all(iou(boxes[b, j], boxes[b, k]) <= thr for k in kept):
                    kept.append(j)
            rows += [[b, c, j] for j in kept]
    return np.array(rows, np.int64).reshape(-1, 3)


def random_boxes(batch, n):
    corner = RNG.uniform(0, 10, (batch, n, 2))
    size = RNG.uniform(1, 4, (batch, n, 2))
    return np.concatenate([corner, corner + size], axis=-1).astype(np.float32)


def test_matches_greedy_reference(backend):
    boxes = random_boxes(2, 12)
    scores = RNG.uniform(0, 1, (2, 3, 12)).astype(np.float32)
    scores[0, 0, 3] = scores[0, 0, 5]  # a tie: the lower index goes first
    args = (np.array([4], np.int64), np.array([0.3], np.float32))
    y = ops.NonMaxSuppression(boxes, scores, *args, backend=backend)
    np.testing.assert_array_equal(y, ref_nms(boxes, scores, 4, 0.3))
    y = ops.NonMaxSuppression(boxes, scores, *args, np.array([0.5], np.float32), backend=backend)
    np.testing.assert_array_equal(y, ref_nms(boxes, scores, 4, 0.3, 0.5))


def test_in_a_graph_with_run_time_limits():
    g = dsl.Graph("nms")
    b = g.input("boxes", (1, None, 4), dsl.f32)
    s = g.input("scores", (1, 1, None), dsl.f32)
    k = g.input("k", (1,), dsl.i64)
    g.output(ops.NonMaxSuppression(b, s, k, np.array([0.5], np.float32)), "sel")
    model = g.compile(backend="numba")
    boxes = random_boxes(1, 20)
    scores = RNG.uniform(0, 1, (1, 1, 20)).astype(np.float32)
    for most in (0, 3, 50):
        got = model.run({"boxes": boxes, "scores": scores, "k": np.array([most], np.int64)})["sel"]
        np.testing.assert_array_equal(got, ref_nms(boxes, scores, most, 0.5))


def test_errors():
    with pytest.raises(VerifyError, match="box counts differ"):
        ops.NonMaxSuppression(np.zeros((1, 3, 4), np.float32), np.zeros((1, 1, 4), np.float32),
                              backend="interpreter")
