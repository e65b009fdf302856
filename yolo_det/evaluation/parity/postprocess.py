"""From head outputs to detections: decoding, NMS (validation's multi-label or an export's one class per anchor),
a graph's own selection (baked NMS, the one-to-one head), boxes scaled back to the original image.

Scores are compared on a grid (:data:`SCORE_GRID`) with ties broken by anchor order, so the last-ulp differences
of two runtimes do not reorder equal boxes and change which one NMS keeps. A grid alone still splits two equal
scores that straddle one of its steps; the export's candidates are therefore ranked by the .pt's scores of the same
anchors and classes (``rank_by``): within the raw tolerance, which the raw comparison checks, NMS then meets the
export's boxes in the .pt's order, and a box kept on one side only is a difference of boxes, never of tie-breaking.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np


SCORE_GRID = 1e-5


def xywh2xyxy(b: np.ndarray) -> np.ndarray:
    out = b.copy()
    out[..., 0], out[..., 1] = b[..., 0] - b[..., 2] / 2, b[..., 1] - b[..., 3] / 2
    out[..., 2], out[..., 3] = b[..., 0] + b[..., 2] / 2, b[..., 1] + b[..., 3] / 2
    return out


def _boxes_scores(pred: np.ndarray, nc: int, yolov5: bool) -> Tuple["torch.Tensor", "torch.Tensor"]:
    """Boxes ``(anchors, 4)`` xywh and class scores ``(anchors, nc)`` of one image's decoded head output."""
    import torch

    p = torch.from_numpy(np.ascontiguousarray(pred, dtype=np.float32))
    if yolov5:
        return p[:, :4], p[:, 5:5 + nc] * p[:, 4:5]
    p = p.T
    return p[:, :4], p[:, 4:4 + nc]


def nms(pred: np.ndarray, nc: int, conf: float, iou: float, max_det: int, multi_label: bool,
        agnostic: bool = False, yolov5: bool = False, max_nms: int = 30000,
        rank_by: Optional[np.ndarray] = None) -> np.ndarray:
    """Detections ``(n, 6)`` [x1, y1, x2, y2, conf, cls] from one image's decoded head output.

    ``pred``: ``(4 + nc [+ extra], anchors)`` (Ultralytics) or ``(anchors, 5 + nc)`` (YOLOv5, objectness times
    class score). ``multi_label``: every class above ``conf`` per anchor (validation); else the best class only.
    ``rank_by``: another output of the same shape whose scores of the same anchors and classes order the candidates
    (the .pt's, for the export's); the candidates, boxes and scores are ``pred``'s own.
    """
    import torch

    boxes, scores = _boxes_scores(pred, nc, yolov5)
    boxes = torch.from_numpy(xywh2xyxy(boxes.numpy()))
    if multi_label:
        i, j = (scores > conf).nonzero(as_tuple=True)
    else:
        s, j = scores.max(1)
        i = (s > conf).nonzero(as_tuple=True)[0]
        j = j[i]
    b, s, c = boxes[i], scores[i, j], j.float()
    if not len(s):
        return np.zeros((0, 6), np.float32)
    # ties (flat image regions, the grey padding) are broken by anchor order with scores compared on a 1e-5 grid,
    # so the last-ulp differences of two runtimes do not reorder equal boxes and change which one NMS keeps
    s_np, b_np, c_np = s.numpy().astype(np.float64), b.numpy(), c.numpy()
    if rank_by is not None and np.shape(rank_by) == np.shape(pred):
        key = _boxes_scores(rank_by, nc, yolov5)[1][i, j].numpy().astype(np.float64)
    else:
        key = s_np
    order = np.lexsort((i.numpy(), -np.round(key / SCORE_GRID)))[:max_nms]
    offset = 0 if agnostic else c_np[order, None] * (float(np.abs(b_np).max()) * 2 + 1)
    boxes_o = torch.from_numpy(np.ascontiguousarray(b_np[order] + offset, dtype=np.float32))
    # greedy NMS in exactly this order: torchvision's kernel ranks by score, so the rank itself is the score
    rank = torch.arange(len(order), 0, -1, dtype=torch.float32)
    keep = _nms_kernel(boxes_o, rank, iou)[:max_det]
    idx = order[np.sort(keep.numpy())]
    return np.concatenate([b_np[idx], s_np[idx, None], c_np[idx, None]], 1).astype(np.float32)


def _nms_kernel(boxes: "torch.Tensor", scores: "torch.Tensor", iou: float) -> "torch.Tensor":
    """Indices greedy NMS keeps (IoU > ``iou`` suppresses), highest score first: torchvision's, else a loop."""
    import torch

    try:
        import torchvision

        return torchvision.ops.nms(boxes, scores, iou)
    except (ImportError, RuntimeError):  # torchvision absent or built without its C++ ops
        order = torch.argsort(scores, descending=True, stable=True)
        b = boxes[order].numpy()
        alive = np.ones(len(b), bool)
        keep: List[int] = []
        for k in range(len(b)):
            if alive[k]:
                keep.append(k)
                alive[k + 1:] &= box_iou(b[k:k + 1], b[k + 1:])[0] <= iou
        return order[keep]


def canonical_topk(out: np.ndarray) -> np.ndarray:
    """A one-to-one head's ranked ``(B, k, 6+)`` output in a canonical row order, the tie group at the cut dropped.

    Top-k picks arbitrarily among equal scores (flat image regions give exactly equal ones), so rows are ordered
    by score (on the tie grid), class and box, and the rows tied with the last kept score, which either model may
    have chosen differently, are left out of the comparison.
    """
    rows = out[0]
    key = np.round(rows[:, 4] / SCORE_GRID)
    order = np.lexsort((rows[:, 3], rows[:, 2], rows[:, 1], rows[:, 0], rows[:, 5], -key))
    rows, key = rows[order], key[order]
    if len(rows) and rows[-1, 4] > 0:
        rows = rows[key > key[-1]]
    return rows[None]


def from_graph(out: np.ndarray, conf: float) -> np.ndarray:
    """Detections from a graph that already chose them (NMS inside, or the one-to-one head): ``(k, 6+)`` rows."""
    out = np.asarray(out, np.float32)[:, :6]
    return out[out[:, 4] > conf]


def scale_back(dets: np.ndarray, r: float, pad: Tuple[float, float]) -> np.ndarray:
    out = dets.copy()
    out[:, [0, 2]] = (out[:, [0, 2]] - pad[0]) / r
    out[:, [1, 3]] = (out[:, [1, 3]] - pad[1]) / r
    return out


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in ``a`` (n, 4) with every box in ``b`` (m, 4), xyxy."""
    if not len(a) or not len(b):
        return np.zeros((len(a), len(b)))
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:4], b[None, :, 2:4])
    inter = np.clip(rb - lt, 0, None).prod(2)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None] - inter + 1e-9)


__all__ = ["SCORE_GRID", "box_iou", "canonical_topk", "from_graph", "nms", "scale_back", "xywh2xyxy"]
