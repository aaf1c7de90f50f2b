"""ONNX NonMaxSuppression (opset 10+): greedy box selection per (batch, class).

Each work item owns one (batch, class): it repeatedly takes the best remaining candidate
(highest score, lower index on ties), keeps it unless its IoU with a box already kept exceeds
``iou_threshold``, and stops after ``max_output_boxes_per_class`` boxes -- O(kept · boxes).
Candidates need a score above ``score_threshold`` when one is given.  The number of rows
depends on the data, so the op runs in two launches (select, then write the rows at offsets
counted in between) through the data-dependent path of ops.gather.DataDependent.
"""
from __future__ import annotations

import math

import numpy as np

import dsl
from dsl import In, Out, bool_, f32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS
from ops.gather import DataDependent

F = dsl.TypeVar("F")
NEG_INF = -math.inf


@dsl.func
def overlap(a0, a1, a2, a3, b0, b1, b2, b3, center):
    """IoU of two boxes, -inf when they do not intersect (never suppresses).  Corners are
    [y1, x1, y2, x2] in any order, or [x_center, y_center, width, height] with ``center``."""
    ax0 = min(a1, a3)
    ax1 = max(a1, a3)
    bx0 = min(b1, b3)
    bx1 = max(b1, b3)
    ay0 = min(a0, a2)
    ay1 = max(a0, a2)
    by0 = min(b0, b2)
    by1 = max(b0, b2)
    if center:
        ax0 = a0 - a2 / 2
        ax1 = a0 + a2 / 2
        bx0 = b0 - b2 / 2
        bx1 = b0 + b2 / 2
        ay0 = a1 - a3 / 2
        ay1 = a1 + a3 / 2
        by0 = b1 - b3 / 2
        by1 = b1 + b3 / 2
    iw = min(ax1, bx1) - max(ax0, bx0)
    ih = min(ay1, by1) - max(ay0, by0)
    r = f32(NEG_INF)
    if iw > 0 and ih > 0:
        inter = iw * ih
        area_a = (ax1 - ax0) * (ay1 - ay0)
        area_b = (bx1 - bx0) * (by1 - by0)
        union = area_a + area_b - inter
        if area_a > 0 and area_b > 0 and union > 0:
            r = inter / union
    return r


@dsl.kernel
def nms_select_kernel(boxes: In[F, 3], scores: In[F, 3], live: Out[f32, 2], picked: Out[i64, 2],
                      counts: Out[i64, 1], iou: f32, score_min: f32, thresholded: bool_, center: bool_):
    classes = scores.shape[1]
    n = scores.shape[2]
    most = picked.shape[1]
    lo, hi = dsl.split(live.shape[0])
    for w in range(lo, hi):
        b = w // classes
        c = w - b * classes
        for j in range(n):
            s = f32(scores[b, c, j])
            live[w, j] = s if not thresholded or s > score_min else f32(NEG_INF)
        count = 0
        searching = True
        while searching and count < most:
            best = -1
            top = f32(NEG_INF)
            for j in range(n):
                if live[w, j] > top:
                    top = live[w, j]
                    best = j
            if best < 0:
                searching = False
            else:
                live[w, best] = f32(NEG_INF)
                keep = True
                for t in range(count):
                    p = picked[w, t]
                    v = overlap(f32(boxes[b, best, 0]), f32(boxes[b, best, 1]), f32(boxes[b, best, 2]),
                                f32(boxes[b, best, 3]), f32(boxes[b, p, 0]), f32(boxes[b, p, 1]),
                                f32(boxes[b, p, 2]), f32(boxes[b, p, 3]), center)
                    if v > iou:
                        keep = False
                if keep:
                    picked[w, count] = best
                    count += 1
        counts[w] = count


@dsl.kernel
def nms_rows_kernel(picked: In[i64, 2], counts: In[i64, 1], offsets: In[i64, 1], y: Out[i64, 2], classes: i64):
    lo, hi = dsl.split(counts.shape[0])
    for w in range(lo, hi):
        o = offsets[w]
        for t in range(counts[w]):
            y[o + t, 0] = w // classes
            y[o + t, 1] = w % classes
            y[o + t, 2] = picked[w, t]


def _first(a, default):
    return default if a is None or a.size == 0 else a.reshape(-1)[0]


@dsl.op("NonMaxSuppression", since=10)
class NonMaxSuppression(DataDependent):
    """-> i64 (selected, 3) rows [batch, class, box], in batch, class, selection order."""

    center_point_box: int = 0
    kernels = {"default": nms_select_kernel}

    def verify(self, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None, score_threshold=None):
        if boxes.dtype not in FLOATS or scores.dtype != boxes.dtype:
            raise VerifyError(f"NonMaxSuppression boxes and scores must share a float dtype, got {boxes}, {scores}")
        if boxes.ndim != 3 or boxes.shape[2] not in (None, 4):
            raise VerifyError(f"NonMaxSuppression boxes must be (batch, boxes, 4), got {boxes}")
        if scores.ndim != 3:
            raise VerifyError(f"NonMaxSuppression scores must be (batch, classes, boxes), got {scores}")
        for a, b, what in ((boxes.shape[0], scores.shape[0], "batch"), (boxes.shape[1], scores.shape[2], "box")):
            if a is not None and b is not None and a != b:
                raise VerifyError(f"NonMaxSuppression {what} counts differ: boxes {boxes}, scores {scores}")
        if self.center_point_box not in (0, 1):
            raise VerifyError(f"NonMaxSuppression center_point_box must be 0 or 1, got {self.center_point_box}")

    def infer(self, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None, score_threshold=None):
        return TensorSpec((None, 3), dsl.i64)

    def run_dynamic(self, impl, inputs, backend):
        boxes, scores = inputs[0], inputs[1]
        extra = list(inputs[2:]) + [None] * 3
        most = max(int(_first(extra[0], 0)), 0)
        iou = float(_first(extra[1], 0.0))
        thresholded = extra[2] is not None and extra[2].size > 0
        score_min = float(_first(extra[2], 0.0))
        pairs = scores.shape[0] * scores.shape[1]
        n = scores.shape[2]
        picked = np.zeros((pairs, min(most, n)), np.int64)
        counts = np.zeros(pairs, np.int64)
        if picked.size:
            impl(boxes, scores, np.empty((pairs, n), np.float32), picked, counts, iou, score_min, thresholded,
                 bool(self.center_point_box), backend=backend)
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if pairs else counts
        y = np.empty((int(counts.sum()), 3), np.int64)
        if y.size:
            nms_rows_kernel(picked, counts, offsets, y, scores.shape[1], backend=backend)
        return [y]
