"""The two models' outputs compared: raw head tensors within fp32 tolerance, detections matched box by box.

Raw errors are folded per output (the worst image and position); boxes match by IoU >= :data:`BOX_MATCH_IOU` and
class, and a box only one model keeps is named a threshold-crosser where the other scored it just under the
confidence threshold.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .postprocess import box_iou, canonical_topk


#: fp32 CPU runtimes state no tolerance; kernels that sum in another order differ by a few ulps per layer.
RTOL, ATOL_SCALE = 1e-4, 1e-5

BOX_MATCH_IOU = 0.9

METRIC_TOL = 5e-5  # half the last digit of a 4-decimal mAP

CONF_TOL = 1e-4  # matched boxes' confidences (scores in [0, 1]; the raw outputs' relative tolerance)


def _compare_raw(ref: np.ndarray, got: np.ndarray, name: str) -> Dict[str, Any]:
    err = np.abs(ref.astype(np.float64) - got.astype(np.float64))
    # the absolute tolerance scales with each channel's magnitude (pixel boxes vs [0, 1] scores): the channel axis
    # is the shorter of the last two (4 + nc vs anchors; 6 vs max_det), prototypes use their whole range
    axis = (1 if ref.shape[1] <= ref.shape[2] else 2) if ref.ndim == 3 else None
    mag = np.abs(ref).max(axis=tuple(i for i in range(ref.ndim) if i != axis), keepdims=True) if axis and ref.size \
        else np.full((1,) * ref.ndim, np.abs(ref).max() if ref.size else 0.0)
    atol_arr = ATOL_SCALE * np.maximum(mag, 1.0)
    atol = float(atol_arr.max())
    rel = err / (np.abs(ref) + atol_arr)
    ia, ir = np.unravel_index(int(err.argmax()), err.shape), np.unravel_index(int(rel.argmax()), rel.shape)
    # each element's allowance is atol + rtol * |ref|: how much of it the closest element used, and which term of
    # it was the larger there (a relative error above rtol is within where atol carries it)
    allowance = np.broadcast_to(atol_arr, err.shape) + RTOL * np.abs(ref)
    share = err / allowance if err.size else err
    iw = np.unravel_index(int(share.argmax()), share.shape) if err.size else ()
    return {"output": name, "shape": list(ref.shape), "max_abs": float(err.max()), "where_abs": [int(i) for i in ia],
            "max_rel": float(rel.max()), "where_rel": [int(i) for i in ir], "atol": atol,
            "within": bool(np.all(err <= atol_arr + RTOL * np.abs(ref))),
            "max_share": float(share.max()) if err.size else 0.0,
            "bound": ("atol" if np.broadcast_to(atol_arr, err.shape)[iw] >= RTOL * abs(ref[iw]) else "rtol")
            if err.size else "atol"}


def _match_boxes(pt: List[np.ndarray], ex: List[np.ndarray], conf: float,
                 pt_low: Optional[List[np.ndarray]] = None, ex_low: Optional[List[np.ndarray]] = None) -> Dict[str, Any]:
    matched = only_pt = only_ex = 0
    conf_diff: List[float] = []
    crossers: List[Dict[str, Any]] = []
    for i, (a, b) in enumerate(zip(pt, ex)):
        iou = box_iou(a[:, :4], b[:, :4]) * (a[:, None, 5] == b[None, :, 5]) if len(a) and len(b) else np.zeros((len(a), len(b)))
        # greedy, highest .pt confidence first, each export box used once; only rows with a candidate loop
        iou = np.where(iou >= BOX_MATCH_IOU, iou, -1.0)
        used = np.zeros(len(b), bool)
        hit_a = np.zeros(len(a), bool)
        for ia in (np.argsort(-a[:, 4], kind="stable") if len(a) else []):
            if iou[ia].max(initial=-1.0) < 0:
                continue
            row = np.where(used, -1.0, iou[ia])
            j = int(row.argmax())
            if row[j] >= 0:
                used[j] = True
                hit_a[ia] = True
                conf_diff.append(abs(float(a[ia, 4]) - float(b[j, 4])))
        matched += int(hit_a.sum())
        only_pt += int((~hit_a).sum())
        only_ex += int((~used).sum())
        for src, dst, low, key in ((a[~hit_a], b, ex_low, "pt"), (b[~used], a, pt_low, "export")):
            if low is None or low[i] is None:
                continue
            for row in src:
                other = low[i]
                ious = box_iou(row[None, :4], other[:, :4])[0] * (other[:, 5] == row[5]) if len(other) else np.zeros(0)
                if len(ious) and ious.max() >= 0.5 and other[ious.argmax(), 4] <= conf:
                    c = float(other[ious.argmax(), 4])
                    crossers.append({"image": i, "cls": int(row[5]), "threshold": conf, "kept_by": key,
                                     "pt_conf": round(float(row[4]) if key == "pt" else c, 6),
                                     "export_conf": round(c if key == "pt" else float(row[4]), 6)})
    return {"matched": matched, "only_pt": only_pt, "only_export": only_ex,
            "max_conf_diff": max(conf_diff) if conf_diff else None, "threshold_crossers": crossers,
            "agree": only_pt == 0 and only_ex == 0}


def _aligned(pt_out: List[np.ndarray], ex_out: List[np.ndarray],
             end2end: bool) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """One image's outputs of both models ready to compare: the export's first batch row; a one-to-one head's rows
    in canonical order (see :func:`canonical_topk`)."""
    if end2end:
        pt_out = [canonical_topk(pt_out[0]), *pt_out[1:]]
        ex_out = [canonical_topk(ex_out[0][:1]), *ex_out[1:]]
    return pt_out, [o[:1] for o in ex_out]


def _fold_raw(rows: Dict[str, Dict[str, Any]], pt_out: List[np.ndarray], ex_out: List[np.ndarray], n: int,
              suffix: str = "") -> Optional[str]:
    """Fold image ``n``'s raw comparison into ``rows`` (the worst error per output); why it cannot be compared, else
    None. Outputs of equal shape are compared in order (a YOLOv5 export may carry per-level maps after the first)."""
    if not (pt_out and ex_out and pt_out[0].shape == ex_out[0].shape):
        return (f"output shapes differ: the .pt gives {[list(a.shape) for a in pt_out]}, the export "
                f"{[list(b.shape) for b in ex_out]}")
    for j, (a, b) in enumerate(zip(pt_out, ex_out)):
        if a.shape != b.shape:
            break
        row = _compare_raw(a, b, f"output{j}{suffix}")
        best = rows.get(row["output"])
        if best is None:
            rows[row["output"]] = {**row, "image": n}
            continue
        if row["max_abs"] > best["max_abs"]:
            best.update({k: row[k] for k in ("max_abs", "where_abs", "shape")}, image=n)
        if row["max_rel"] > best["max_rel"]:
            best.update({k: row[k] for k in ("max_rel", "where_rel")})
        if row["max_share"] > best["max_share"]:
            best.update({k: row[k] for k in ("max_share", "bound")})
        best["within"] = best["within"] and row["within"]
    return None


__all__ = ["ATOL_SCALE", "BOX_MATCH_IOU", "CONF_TOL", "METRIC_TOL", "RTOL"]
