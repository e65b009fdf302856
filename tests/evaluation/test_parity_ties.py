"""Parity's NMS at ties: the export's candidates meet NMS in the .pt's order, so scores equal within the raw tolerance
(an untrained head gives every class the same score; flat regions give neighbouring anchors the same) keep the same
boxes on both sides, also where two equal scores straddle a step of the score grid. Oracle: textbook greedy NMS,
written here, on the .pt's output."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from yolo_det.evaluation.parity.postprocess import SCORE_GRID, box_iou, nms, xywh2xyxy

CONF, IOU = 0.001, 0.7


def _greedy(pred: np.ndarray, nc: int) -> list:
    """Kept boxes and classes: every class above CONF per anchor, by score (ties: anchor, then class), greedy per
    class; the slow independent way."""
    boxes = xywh2xyxy(pred[:4].T.astype(np.float64))
    cand = [(float(pred[4 + j, i]), i, j) for i in range(pred.shape[1]) for j in range(nc) if pred[4 + j, i] > CONF]
    cand.sort(key=lambda t: (-round(t[0] / SCORE_GRID), t[1], t[2]))
    kept: list = []
    for _, i, j in cand:
        if all(jj != j or box_iou(boxes[i:i + 1], boxes[ii:ii + 1])[0, 0] <= IOU for ii, jj in kept):
            kept.append((i, j))
    return sorted((tuple(boxes[i].astype(np.float32).tolist()), j) for i, j in kept)


def _kept(dets: np.ndarray) -> list:
    """Kept boxes and classes (anchors of one box and class are the same detection)."""
    return sorted((tuple(row[:4].tolist()), int(row[5])) for row in dets)


@st.composite
def _outputs(draw):
    """A .pt output (4 + nc, anchors) of boxes on a 4 px grid (IoUs 0.68 or 0.78 nearest the threshold, the same
    on both sides) and scores from a few values, many at a midpoint between two grid steps; the export's: the same
    with each score moved by at most 1e-7 relative (far inside the raw allowance, 1e-4)."""
    n, nc = draw(st.integers(2, 24)), draw(st.integers(1, 3))
    xy = np.array(draw(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=n, max_size=n)), float) * 4
    wh = np.array(draw(st.lists(st.sampled_from([32.0, 40.0]), min_size=n, max_size=n)))
    levels = [(k + 0.5) * SCORE_GRID for k in (155, 622, 50_000)] + [0.25, 0.5]
    scores = np.array(draw(st.lists(st.sampled_from(levels), min_size=n * nc, max_size=n * nc))).reshape(nc, n)
    ref = np.concatenate([xy.T + 16, np.stack([wh, wh]), scores]).astype(np.float32)
    noise = np.array(draw(st.lists(st.sampled_from([-1e-7, 0.0, 1e-7]), min_size=n * nc, max_size=n * nc)))
    got = ref.copy()
    got[4:] = (scores * (1 + noise.reshape(nc, n))).astype(np.float32)
    return ref, got, nc


@settings(max_examples=150, deadline=None)
@given(_outputs())
def test_the_export_keeps_the_boxes_the_pt_keeps_when_scores_agree_within_tolerance(outputs):
    ref, got, nc = outputs
    expected = _greedy(ref, nc)
    assert _kept(nms(ref, nc, CONF, IOU, 300, True)) == expected
    assert _kept(nms(got, nc, CONF, IOU, 300, True, rank_by=ref)) == expected


def test_two_equal_scores_straddling_a_grid_step_keep_the_same_box():
    """Two overlapping anchors of one class scored (622.5 grid steps) on the .pt and 1e-7 apart, either way, on the
    export: ranked by its own scores the export keeps the other anchor; ranked by the .pt's, the same one."""
    s = 622.5 * SCORE_GRID
    ref = np.array([[16, 20], [16, 16], [32, 32], [32, 32], [s, s]], np.float32)
    got = ref.copy()
    got[4] = [s * (1 - 1e-7), s * (1 + 1e-7)]
    pt = _kept(nms(ref, 1, CONF, IOU, 300, True))
    assert pt == _greedy(ref, 1) and len(pt) == 1
    assert _kept(nms(got, 1, CONF, IOU, 300, True, rank_by=ref)) == pt
