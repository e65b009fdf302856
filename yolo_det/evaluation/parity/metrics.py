"""Box mAP50 and mAP50-95 of both models' detections, computed the same way for each.

A third mAP beside :mod:`yolo_det.evaluation.gap` (the releases' rules and the COCO API's) and
:mod:`yolo_det.evaluation.coco` (the COCO API itself), kept on purpose. It is YOLOv5's mAP (pairs over the
threshold highest IoU first, 101-point trapezoid, mean over classes): ``gap.evaluate`` with
``release_rules("yolov5")`` gives the same numbers where none of the rules below applies (tests/test_parity_map.py,
on generated boxes). Its own rules, and why:

- detections are ranked by confidence on the :data:`~.postprocess.SCORE_GRID`, equal ones in image and detection
  order (gap: quicksort on the exact scores). Parity scores two models whose scores differ in the last ulps; ranked
  exactly, that noise reorders tied detections and moves one model's mAP only, a difference parity would then
  blame on the export;
- an object goes to its highest-IoU candidate detection (YOLOv5's ``process_batch``, and gap, to its first
  candidate in detection order once each detection kept its best object): one matcher, stable on ties, for both
  models;
- IoU in float64 (gap's release rules: float32, as the releases compute it): the same arithmetic for both models.

The numbers parity reports are this module's (changing them is a change of behaviour, not a move).
"""

from __future__ import annotations

from typing import Dict, Sequence, Tuple

import numpy as np

from .postprocess import SCORE_GRID, box_iou


def _correct(dets: np.ndarray, gt: np.ndarray, iouv: np.ndarray) -> np.ndarray:
    """(n, 10) bool: detection i is a true positive at IoU threshold t (greedy, one ground truth each)."""
    correct = np.zeros((len(dets), len(iouv)), bool)
    if not len(dets) or not len(gt):
        return correct
    iou = box_iou(gt[:, 1:5], dets[:, :4]) * (gt[:, :1] == dets[None, :, 5])
    for t, thr in enumerate(iouv):
        gi, di = np.nonzero(iou >= thr)
        if not len(gi):
            continue
        order = np.argsort(-iou[gi, di], kind="stable")
        gi, di = gi[order], di[order]
        _, first = np.unique(di, return_index=True)
        gi, di = gi[np.sort(first)], di[np.sort(first)]
        _, first = np.unique(gi, return_index=True)
        correct[di[first], t] = True
    return correct


def box_map(per_image: Sequence[Tuple[np.ndarray, np.ndarray]]) -> Dict[str, float]:
    """Box mAP50 and mAP50-95 (101-point interpolation) over ``(detections, labels[cls, x1, y1, x2, y2])`` pairs."""
    iouv = np.linspace(0.5, 0.95, 10)
    tps, confs, classes, gts = [], [], [], []
    for dets, gt in per_image:
        tps.append(_correct(dets, gt, iouv))
        confs.append(dets[:, 4])
        classes.append(dets[:, 5])
        gts.append(gt[:, 0])
    tp, conf, pcls, gcls = (np.concatenate(x) if x else np.zeros(0) for x in (tps, confs, classes, gts))
    tp = tp.reshape(-1, len(iouv))
    aps = []
    for c in np.unique(gcls):
        n_gt = int((gcls == c).sum())
        sel = np.nonzero(pcls == c)[0]
        # equal confidences (on the tie grid) keep image and detection order: last-ulp noise does not reorder them
        sel = sel[np.lexsort((sel, -np.round(conf[sel] / SCORE_GRID)))]
        ap = np.zeros(len(iouv))
        if len(sel):
            ctp = tp[sel].cumsum(0)
            cfp = (~tp[sel]).cumsum(0)
            recall, precision = ctp / n_gt, ctp / (ctp + cfp)
            for t in range(len(iouv)):
                mrec = np.concatenate(([0.0], recall[:, t], [1.0]))
                mpre = np.flip(np.maximum.accumulate(np.flip(np.concatenate(([1.0], precision[:, t], [0.0])))))
                x = np.linspace(0, 1, 101)
                ap[t] = np.trapezoid(np.interp(x, mrec, mpre), x) if hasattr(np, "trapezoid") else np.trapz(np.interp(x, mrec, mpre), x)
        aps.append(ap)
    aps = np.array(aps) if aps else np.zeros((0, len(iouv)))
    return {"map50": float(aps[:, 0].mean()) if len(aps) else 0.0,
            "map50_95": float(aps.mean()) if len(aps) else 0.0}


def _delta(a: Dict[str, float], b: Dict[str, float]) -> Dict[str, float]:
    return {k: round(a[k] - b[k], 6) for k in a}


__all__ = ["box_map"]
