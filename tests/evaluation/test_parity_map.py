"""Parity's own box mAP (``evaluation/parity/metrics.py``) against ``evaluation/gap.py`` with YOLOv5's rules.

Where no rule of theirs differs (distinct scores, no IoU on a threshold, each object's best detection first in its
image) the two give the same numbers; where parity keeps a rule of its own (scores ranked on the tie grid, equal
ones in image and detection order) its mAP does not move with last-ulp score noise. No model, no runtime: fast.
"""

from __future__ import annotations

from typing import List, Tuple

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from yolo_det.evaluation import gap
from yolo_det.evaluation.parity import box_map
from yolo_det.evaluation.parity.postprocess import box_iou

CELL = 100.0  # one object per cell: a detection overlaps only its own cell's object


@st.composite
def _cases(draw) -> List[Tuple[np.ndarray, np.ndarray]]:
    """Images of objects in their own cells, each with 0-2 jittered detections and some false positives."""
    images = []
    for _ in range(draw(st.integers(1, 4))):
        gt, dets = [], []
        for cell in range(draw(st.integers(0, 5))):
            x0, y0 = cell * CELL, 0.0
            w, h = draw(st.floats(10, 60)), draw(st.floats(10, 60))
            x, y = x0 + draw(st.floats(0, CELL - 70)), y0 + draw(st.floats(0, CELL - 70))
            cls = draw(st.integers(0, 2))
            gt.append([cls, x, y, x + w, y + h])
            found = []
            for _ in range(draw(st.integers(0, 2))):
                jitter = draw(st.lists(st.floats(-8, 8), min_size=4, max_size=4))
                box = [x + jitter[0], y + jitter[1], x + w + jitter[2], y + h + jitter[3]]
                found.append(box + [0.0, draw(st.sampled_from([cls, cls, (cls + 1) % 3]))])
            # each object's detections by IoU, best first: YOLOv5 gives an object to its first candidate
            # detection, parity to its best one; with the best first both rules give the same match
            found.sort(key=lambda d: -box_iou(np.array([d[:4]]), np.array([gt[-1][1:]]))[0, 0])
            dets += found
        for _ in range(draw(st.integers(0, 2))):  # false positives far from every object
            x = draw(st.floats(0, 500))
            dets.append([x, 200.0, x + 20, 230.0, 0.0, draw(st.integers(0, 2))])
        images.append((np.array(dets, np.float32).reshape(-1, 6), np.array(gt, np.float32).reshape(-1, 5)))
    n = sum(len(d) for d, _ in images)
    ranks = draw(st.permutations(list(range(n))))  # distinct scores, far apart on the tie grid
    k = 0
    for dets, _ in images:
        for row in dets:
            row[4] = (ranks[k] + 1) / (n + 1)
            k += 1
    return images


def _gap_images(images: List[Tuple[np.ndarray, np.ndarray]]) -> List[gap.Image]:
    out = []
    for i, (dets, gt) in enumerate(images):
        xywh = np.concatenate([gt[:, 1:3], gt[:, 3:5] - gt[:, 1:3]], 1).astype(np.float64)
        annotations = [{"bbox": list(map(float, b)), "category_id": int(c), "iscrowd": 0, "area": float(b[2] * b[3])}
                       for b, c in zip(xywh, gt[:, 0])]
        out.append(gap.Image(i, dets[:, :4].copy(), dets[:, 4].copy(), dets[:, 5].astype(np.int64), annotations,
                             release_boxes=gt[:, 1:5].copy(), release_classes=gt[:, 0].astype(np.int64)))
    return out


def _on_a_threshold(images: List[Tuple[np.ndarray, np.ndarray]]) -> bool:
    """An IoU within float32 reach of an IoU threshold (float32 vs float64 arithmetic may put it either side)."""
    for dets, gt in images:
        iou = box_iou(gt[:, 1:5].astype(np.float64), dets[:, :4].astype(np.float64))
        if iou.size and np.min(np.abs(iou[..., None] - np.linspace(0.5, 0.95, 10))) < 1e-4:
            return True
    return False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_parity_map_is_yolov5s_where_no_rule_differs(images):
    assume(not _on_a_threshold(images))
    mine = box_map(images)
    theirs = gap.evaluate(_gap_images(images), gap.release_rules("yolov5"))
    assert abs(mine["map50"] - theirs.map50) < 1e-9
    assert abs(mine["map50_95"] - theirs.map) < 1e-9


@settings(max_examples=100, deadline=None)
@given(_cases(), st.integers(0, 2 ** 32 - 1))
def test_last_ulp_score_noise_does_not_move_parity_map(images, seed):
    """Scores tied on the grid (both models' equal scores, a few ulps apart): the mAP is the tie order's, not the
    noise's."""
    rng = np.random.default_rng(seed)
    tied = [(d.copy(), g) for d, g in images]
    for d, _ in tied:
        d[:, 4] = 0.5
    noisy = [(d.copy(), g) for d, g in tied]
    for d, _ in noisy:
        d[:, 4] = np.nextafter(d[:, 4], rng.choice([0.0, 1.0], len(d)).astype(np.float32))
    assert box_map(noisy) == box_map(tied)
