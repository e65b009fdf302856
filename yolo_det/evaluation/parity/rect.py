"""A dynamic export compared at the rect shapes `yolo val` feeds it (each image's own canvas, and the padded square of
a batch mixing wide and tall images): raw outputs, boxes and box mAP at those shapes, and what differs there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .data import _Image, pad_to, rect_shape, to_tensor
from .metrics import _delta, box_map
from .outputs import CONF_TOL, METRIC_TOL, _aligned, _fold_raw, _match_boxes
from .postprocess import scale_back


@dataclass
class _Canvas:
    """An image letterboxed into one of the rect shapes `yolo val` feeds a dynamic export."""

    image: _Image
    shape: Tuple[int, int]
    x: np.ndarray
    r: float
    pad: Tuple[float, float]
    own: bool  # the image's own shape (batch 1); False: the padded square of a batch mixing wide and tall images


def _rect_canvases(chunk: List[_Image], imgsz: Tuple[int, int], stride: int, with_square: bool) -> List[_Canvas]:
    """Every shape `yolo val` letterboxes these images into at any batch size: a batch's shape is that of its
    widest-tall or tallest-wide image alone, or the padded square where it holds both (Ultralytics' and YOLOv5's
    ``batch_shapes``, pad 0.5). Each image at its own shape; with ``with_square`` the first also at that square."""
    canvases = []
    for im in chunk:
        shape = rect_shape(im.hw0, max(imgsz), stride)
        canvas, r, pad = pad_to(im.img, shape)
        canvases.append(_Canvas(im, shape, to_tensor(canvas), float(r), pad, True))
    square = rect_shape((1, 1), max(imgsz), stride)
    if with_square and chunk and all(c.shape != square for c in canvases):
        canvas, r, pad = pad_to(chunk[0].img, square)
        canvases.append(_Canvas(chunk[0], square, to_tensor(canvas), float(r), pad, False))
    return canvases


class _RectPass:
    """A dynamic export compared with the .pt at the rect shapes `yolo val` feeds it: raw outputs, boxes, metrics."""

    def __init__(self, post: Callable[..., np.ndarray], end2end: bool, graph_selected: bool, export_conf: float,
                 nms_baked: bool):
        self.post, self.end2end, self.graph_selected = post, end2end, graph_selected
        self.export_conf, self.nms_baked = export_conf, nms_baked
        self.rows: Dict[str, Dict[str, Any]] = {}
        self.fed: Dict[Tuple[int, int], None] = {}
        self.failed: Dict[Tuple[int, int], Dict[str, Any]] = {}
        self.pt: List[np.ndarray] = []
        self.ex: List[np.ndarray] = []
        self.labelled: List[Tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, c: _Canvas, pt_out: List[np.ndarray],
            result: Tuple[Optional[List[np.ndarray]], Optional[List[np.ndarray]], Optional[str]]) -> None:
        """Compare one canvas: the .pt's outputs and the export's (``_run_export_guarded``'s result)."""
        ex_out, _, error = result
        self.fed[tuple(c.shape)] = None
        if error is not None:
            self._fail(c, f"the export's runtime failed: {error}")
            return
        pt_out, ex_out = _aligned(pt_out, ex_out, self.end2end)
        why = _fold_raw(self.rows, pt_out, ex_out, c.image.n, " rect")
        if why is not None and not self.nms_baked:
            self._fail(c, why)
        pt = scale_back(self.post(pt_out, self.end2end), c.r, c.pad)
        ex = scale_back(self.post(ex_out, self.graph_selected, self.export_conf, rank_by=pt_out), c.r, c.pad)
        self.pt.append(pt), self.ex.append(ex)
        if c.own and c.image.gt is not None:
            self.labelled.append((pt, ex, c.image.gt))

    def _fail(self, c: _Canvas, why: str) -> None:
        entry = self.failed.setdefault(tuple(c.shape), {"shape": list(c.shape), "images": [], "why": why})
        entry["images"].append(c.image.n)

    def summary(self, conf: float) -> Dict[str, Any]:
        """The shapes fed, compared and not (with why), the boxes matched and box mAP at those shapes."""
        metrics: Dict[str, Any] = {}
        if self.labelled and sum(len(g) for _, _, g in self.labelled):
            pm = box_map([(p, g) for p, _, g in self.labelled])
            em = box_map([(e, g) for _, e, g in self.labelled])
            metrics = {"pt": pm, "export": em, "delta": _delta(em, pm)}
        return {"shapes": sorted(list(s) for s in self.fed),
                "compared": sorted(list(s) for s in self.fed if s not in self.failed),
                "not_compared": [self.failed[s] for s in sorted(self.failed)],
                "boxes": _match_boxes(self.pt, self.ex, conf), "metrics": metrics}


def _rect_reasons(rect: Dict[str, Any]) -> List[str]:
    """The differences a dynamic export shows at the rect shapes (raw errors are named with the other raw outputs)."""
    if not rect:
        return []
    out = []
    b, m = rect["boxes"], rect.get("metrics")
    if not b["agree"]:
        out.append(f"at the rect shapes: {b['only_pt']} boxes only in the .pt, {b['only_export']} only in the export")
    elif b.get("max_conf_diff") is not None and b["max_conf_diff"] > CONF_TOL:
        out.append(f"at the rect shapes: matched boxes' confidences differ by up to {b['max_conf_diff']:.3g} "
                   f"(tolerance {CONF_TOL:g})")
    if m and any(abs(v) > METRIC_TOL for v in m["delta"].values()):
        out.append(f"at the rect shapes: mAP50-95 {m['pt']['map50_95']:.4f} (.pt) vs {m['export']['map50_95']:.4f} "
                   "(export)")
    return out

