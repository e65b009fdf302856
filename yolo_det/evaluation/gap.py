"""Why the trainer's mAP and the COCO API's differ, rule by rule, on the same predictions.

One evaluator with switchable rules (:class:`Rules`), written for yolo-det from the rules' descriptions
(not a copy of either code base). With the release's rules it gives the release's number (YOLOv5's
``utils.metrics.ap_per_class`` with ``val.py``'s ``process_batch``; Ultralytics' ``DetMetrics`` with its
validator's ``match_predictions``); with every rule the COCO API's (pycocotools ``COCOeval``, bbox,
``AP`` at area ``all``, ``maxDets`` 100), to the bit. :func:`explain` changes one rule at a time, in the
order of :data:`STEPS`, and reports each step's change of mAP50 and mAP50-95.

A rule whose step cannot move the number is kept in the chain with its reason (:data:`SAME_RULE`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

#: The COCO API's IoU thresholds and recall points (pycocotools ``Params.setDetParams``).
COCO_IOUS = np.linspace(.5, 0.95, int(np.round((0.95 - .5) / .05)) + 1, endpoint=True)
COCO_RECALLS = np.linspace(.0, 1.00, int(np.round((1.00 - .0) / .01)) + 1, endpoint=True)
#: The releases' IoU thresholds (``torch.linspace(0.5, 0.95, 10)``, float32).
RELEASE_IOUS = np.linspace(0.5, 0.95, 10).astype(np.float32)
TRAPEZOID_X = np.linspace(0, 1, 101)
COCO_ALL_AREA = (0.0, 1e5 ** 2)


@dataclass(frozen=True)
class Rules:
    """Every rule that decides the number; each field's first value in its comment is a release's, the last COCO's."""

    max_dets: Optional[int] = None  # None: all NMS outputs (the release's max_det cap per image) | 100 per image+class
    matching: str = "pairs"  # pairs: highest IoU pairs first | confidence: detections in order, best free target | coco
    crowd: str = "dropped"  # dropped: crowd objects absent (detections on them are false) | ignored (COCO)
    area: Optional[Tuple[float, float]] = None  # None | (0, 1e10): objects/unmatched detections outside are ignored
    ranking: str = "quicksort"  # quicksort: np.argsort(-conf) over all detections | coco: stable, per class and image
    curve: str = "slope"  # slope / drop: trapezoid on 101 points (YOLOv5 / Ultralytics >= 8.4 end) | coco: 101 steps
    averaging: str = "classes"  # classes: per-class AP, mean of means | all: one mean of the class x IoU table | coco
    space: str = "native"  # native: original image pixels | input: the letterboxed network input (Ultralytics 8.4)
    iou: str = "float32"  # float32: xyxy, + 1e-7 in the union (torch box_iou) | coco: float64 xywh (maskUtils.iou)
    predictions: str = "native"  # native: the release's float32 boxes and scores | json: as in predictions.json
    classes: str = "release"  # release: the release's label classes | annotations: the annotations' categories
    truth: str = "release"  # release: label boxes as the release held them | annotations: the COCO annotation boxes


def release_rules(release: str, matching: Optional[str] = None, curve: Optional[str] = None,
                  space: str = "native") -> Rules:
    """The rules of a release family: ``yolov5`` (7.0) or ``ultralytics`` (8.x); ``matching``, ``curve`` and
    ``space`` as found on the installed release where known (``integrations/coco_eval.py`` probes them)."""
    if release == "yolov5":
        return Rules(matching=matching or "pairs", curve=curve or "slope", averaging="classes", space=space)
    if release == "ultralytics":
        return Rules(matching=matching or "confidence", curve=curve or "drop", averaging="all", space=space)
    raise ValueError(f"unknown release {release!r}: yolov5 or ultralytics")


COCO_RULES = Rules(max_dets=100, matching="coco", crowd="ignored", area=COCO_ALL_AREA, ranking="coco", curve="coco",
                   averaging="coco", space="native", iou="coco", predictions="json", classes="annotations",
                   truth="annotations")

#: The steps from a release's rules to COCO's, in order: (field, what it is, the release's rule, COCO's rule).
STEPS = (
    ("max_dets", "detections kept per image",
     "every NMS output (max_det caps each image at 300 over all classes)",
     "the 100 highest scores per image and class (maxDets=100)"),
    ("matching", "matching detections to objects",
     "release's matcher", "detections in score order, each takes the free object of highest IoU (ties: the last)"),
    ("crowd", "crowd objects (iscrowd=1)",
     "absent from YOLO labels: a detection on a crowd is a false positive",
     "ignore regions: a detection on a crowd (IoU = intersection / detection area) counts neither way"),
    ("area", "area range of the headline AP",
     "none", "area 'all' (0 to 1e10 px^2): larger objects and unmatched detections are ignored"),
    ("ranking", "order of equal scores",
     "np.argsort(-conf) (quicksort, unstable) over all detections",
     "stable (mergesort) per class, images in id order"),
    ("curve", "precision-recall integration",
     "release's curve", "precision envelope read at 101 recall points (0 beyond the last recall), averaged"),
    ("averaging", "averaging over classes and IoU thresholds",
     "release's order", "one mean over IoU x recall x class (float rounding only)"),
    ("space", "coordinate space of the matching",
     "the release's: the letterboxed network input (Ultralytics 8.4) or the original image (YOLOv5)",
     "the original image's pixels (boxes scaled back by the release's own float32 arithmetic)"),
    ("iou", "IoU arithmetic and box convention",
     "float32 x1y1x2y2, 1e-7 added to the union (torch box_iou)",
     "float64 x,y,w,h (x2 = x + w), no epsilon (maskUtils.iou)"),
    ("predictions", "predictions as written to predictions.json",
     "the release's float32 boxes and scores", "boxes rounded to 3 decimals, scores to 5"),
    ("classes", "ground-truth classes",
     "the classes of the release's label rows",
     "the annotations' categories (a coco_json's by name): where they differ, a class mix-up, not box precision"),
    ("truth", "ground-truth boxes",
     "the release's label boxes (float32, through the letterbox and back)",
     "the COCO annotation boxes (float64 from the label files)"),
)
#: Rules that are the same in the releases and the COCO API: no step of their own, and why.
SAME_RULE = {
    "empty classes": "classes without ground truth are left out of the mean by both (a class with ground truth and "
                     "no detection counts as AP 0 in both), so this rule moves nothing",
    "no true positive": "YOLOv5 reports every AP as 0 when no detection is a true positive; every curve of the "
                        "releases and the COCO API integrates to 0 then too",
    "coordinate +1": "neither the releases nor the COCO API add 1 pixel to widths (continuous coordinates)",
}
CURVES = {"slope": "trapezoid over 101 recall points, the envelope running to recall 1 (YOLOv5 compute_ap)",
          "drop": "trapezoid over 101 recall points, precision 0 right after the last recall (Ultralytics compute_ap)",
          "coco": "COCO's 101 recall points"}
MATCHERS = {"pairs": "all (object, detection) pairs over the threshold, highest IoU first, each used once",
            "confidence": "detections in order, each takes the free object of highest IoU (ties: the first)",
            "coco": "COCO's matcher"}


@dataclass
class Image:
    """One image: its detections (as the release held them) and ground truth (both forms)."""

    image_id: int
    boxes: np.ndarray  # [N, 4] x1y1x2y2 float32, native image space (the release's predn)
    scores: np.ndarray  # [N] float32
    classes: np.ndarray  # [N] int
    annotations: List[Mapping[str, Any]] = field(default_factory=list)  # COCO annotations of this image
    release_boxes: Optional[np.ndarray] = None  # [M, 4] float32 x1y1x2y2 of the non-crowd annotations, in order
    release_classes: Optional[np.ndarray] = None
    native_boxes: Optional[np.ndarray] = None  # [N, 4] float32: the detections scaled to the original image (if the
    #                                            release matched elsewhere); what predictions.json is written from
    release_native_boxes: Optional[np.ndarray] = None  # [M, 4] float32: the label boxes scaled likewise
    json_xywh: Optional[np.ndarray] = None  # [N, 4] float64 and [N] scores: the rows of a predictions.json as read
    json_scores: Optional[np.ndarray] = None
    mask_iou: Optional[np.ndarray] = None  # [A annotations, N detections] float64: COCO's mask IoU (maskUtils.iou,
    #                                        crowds as ignore regions); set: the image is scored on masks, not boxes


@dataclass
class Score:
    """A number and how it was made."""

    map50: float
    map: float
    rules: Rules
    classes: List[int]


def case_from(ground_truth: Mapping[str, Any], detections: Sequence[Mapping[str, Any]]) -> List[Image]:
    """Images from a COCO ground truth and per-image detections (``image_id``, ``boxes`` xyxy float32, ``scores``,
    ``classes``; optional ``release_boxes``/``release_classes``: the non-crowd labels as the release held them)."""
    by_image: Dict[int, List[Mapping[str, Any]]] = {}
    for annotation in ground_truth.get("annotations", []):
        by_image.setdefault(annotation["image_id"], []).append(annotation)
    found = {int(d["image_id"]): d for d in detections}

    def array(d: Mapping[str, Any], key: str, dtype: Any, width: int) -> Optional[np.ndarray]:
        return None if d.get(key) is None else np.asarray(d[key], dtype=dtype).reshape((-1, width) if width else -1)

    images = []
    for info in sorted(ground_truth["images"], key=lambda i: i["id"]):
        d = found.get(int(info["id"]), {})
        boxes = np.asarray(d.get("boxes", np.zeros((0, 4))), dtype=np.float32).reshape(-1, 4)
        images.append(Image(int(info["id"]), boxes, np.asarray(d.get("scores", []), dtype=np.float32).reshape(-1),
                            np.asarray(d.get("classes", []), dtype=np.int64).reshape(-1), by_image.get(info["id"], []),
                            array(d, "release_boxes", np.float32, 4), array(d, "release_classes", np.int64, 0),
                            array(d, "native_boxes", np.float32, 4), array(d, "release_native_boxes", np.float32, 4),
                            array(d, "json_xywh", np.float64, 4), array(d, "json_scores", np.float64, 0)))
    return images


# -- per image --------------------------------------------------------------------------------------
def _detections(image: Image, rules: Rules) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(xyxy float32 | None, xywh float64, scores, classes) of the image's detections under ``rules.predictions``."""
    if rules.predictions == "json" and image.json_xywh is not None:
        return _xyxy32(image.json_xywh), image.json_xywh, image.json_scores, image.classes
    if rules.predictions == "json":
        from .coco import json_box, json_score

        native = image.native_boxes if image.native_boxes is not None else image.boxes
        xywh = np.array([json_box(b) for b in native], dtype=np.float64).reshape(-1, 4)
        scores = np.array([json_score(s) for s in image.scores], dtype=np.float64)
        return _xyxy32(xywh), xywh, scores, image.classes
    xyxy = (image.native_boxes if rules.space == "native" and image.native_boxes is not None
            else image.boxes).astype(np.float32)
    xywh = np.concatenate([xyxy[:, :2], xyxy[:, 2:] - xyxy[:, :2]], 1).astype(np.float64)
    return xyxy, xywh, image.scores, image.classes


def _xyxy32(xywh: np.ndarray) -> np.ndarray:
    return np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1).astype(np.float32)


def _truth(image: Image, rules: Rules) -> Dict[str, np.ndarray]:
    """The image's objects under ``rules.truth`` and ``rules.crowd``: xyxy float32, xywh float64, class, crowd, area."""
    anns = image.annotations
    xywh = np.array([a["bbox"] for a in anns], dtype=np.float64).reshape(-1, 4)
    classes = np.array([a["category_id"] for a in anns], dtype=np.int64)
    crowd = np.array([bool(a.get("iscrowd", 0)) for a in anns], dtype=bool)
    area = np.array([a.get("area", a["bbox"][2] * a["bbox"][3]) for a in anns], dtype=np.float64)
    xyxy = _xyxy32(xywh)
    held = image.release_native_boxes if rules.space == "native" and image.release_native_boxes is not None \
        else image.release_boxes
    plain = np.flatnonzero(~crowd)
    if held is not None and "release" in (rules.truth, rules.classes) and len(plain) != len(held):
        raise ValueError(f"image {image.image_id}: {len(held)} label boxes in the release, "
                         f"{len(plain)} non-crowd annotations: they must be the same objects in the same order")
    if rules.truth == "release" and held is not None:
        xyxy[plain] = held
        xywh[plain] = np.concatenate([held[:, :2], held[:, 2:] - held[:, :2]], 1).astype(np.float64)
    if rules.classes == "release" and held is not None and image.release_classes is not None:
        classes[plain] = image.release_classes
    keep = ~crowd if rules.crowd == "dropped" else np.ones(len(anns), dtype=bool)
    return {"xyxy": xyxy[keep], "xywh": xywh[keep], "cls": classes[keep], "crowd": crowd[keep], "area": area[keep],
            "index": np.flatnonzero(keep)}


def _iou(rules: Rules, gt: Dict[str, np.ndarray], d_xyxy: np.ndarray, d_xywh: np.ndarray) -> np.ndarray:
    """[M objects, N detections] IoU under ``rules.iou`` (a crowd object: intersection / detection area)."""
    m, n = len(gt["cls"]), len(d_xywh)
    if not m or not n:
        return np.zeros((m, n), dtype=np.float32 if rules.iou == "float32" else np.float64)
    if rules.iou == "float32":
        a, b = gt["xyxy"][:, None, :], d_xyxy[None, :, :]
        wh = (np.minimum(a[..., 2:], b[..., 2:]) - np.maximum(a[..., :2], b[..., :2])).clip(0)
        inter = wh[..., 0] * wh[..., 1]
        area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
        area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
        union = np.where(gt["crowd"][:, None], area_b + np.zeros_like(area_a), area_a + area_b - inter) + np.float32(1e-7)
        return (inter / union).astype(np.float32)
    g, d = gt["xywh"][:, None, :], d_xywh[None, :, :]
    w = np.minimum(d[..., 2] + d[..., 0], g[..., 2] + g[..., 0]) - np.maximum(d[..., 0], g[..., 0])
    h = np.minimum(d[..., 3] + d[..., 1], g[..., 3] + g[..., 1]) - np.maximum(d[..., 1], g[..., 1])
    inter = w * h
    da, ga = d[..., 2] * d[..., 3], g[..., 2] * g[..., 3]
    union = np.where(gt["crowd"][:, None], da + 0 * ga, da + ga - inter)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where((w > 0) & (h > 0), inter / union, 0.0)
    return out


def _thresholds(rules: Rules) -> np.ndarray:
    return RELEASE_IOUS if rules.iou == "float32" else COCO_IOUS


def _evaluate_image(image: Image, rules: Rules) -> Dict[str, Any]:
    """Per kept detection: class, score, true positive and ignored per threshold; per class: the objects counted."""
    d_xyxy, d_xywh, scores, classes = _detections(image, rules)
    gt = _truth(image, rules)
    thresholds = _thresholds(rules)
    t = len(thresholds)
    kept = np.ones(len(scores), dtype=bool)
    if rules.max_dets is not None:
        for c in np.unique(classes):
            idx = np.flatnonzero(classes == c)
            order = idx[np.argsort(-scores[idx], kind="mergesort")]
            kept[order[rules.max_dets:]] = False
    tp = np.zeros((len(scores), t), dtype=bool)
    ig = np.zeros((len(scores), t), dtype=bool)
    gt_ignored = gt["crowd"].copy()
    if rules.area is not None:
        gt_ignored |= (gt["area"] < rules.area[0]) | (gt["area"] > rules.area[1])
    counted = {int(c): int(n) for c, n in zip(*np.unique(gt["cls"][~gt_ignored], return_counts=True))}
    if image.mask_iou is not None:  # masks: the IoU of the same RLEs in every step, in the rule's precision
        iou = np.asarray(image.mask_iou, dtype=np.float64).reshape(-1, len(scores))[gt["index"]]
        iou = iou.astype(np.float32) if rules.iou == "float32" else iou
    else:
        iou = _iou(rules, gt, d_xyxy, d_xywh)
    sel = np.flatnonzero(kept)
    if rules.matching == "coco":
        _match_coco(rules, gt, gt_ignored, iou, scores, classes, sel, thresholds, tp, ig, d_xywh)
    elif len(sel) and len(gt["cls"]):
        same = gt["cls"][:, None] == classes[None, sel]
        sub = iou[:, sel]
        if rules.matching == "pairs":
            tp[sel] = _match_pairs(sub, same, thresholds)
        elif rules.matching == "confidence":
            tp[sel] = _match_confidence(sub, same, thresholds)
        else:
            raise ValueError(f"unknown matching rule {rules.matching!r}")
    return {"cls": classes[kept], "scores": scores[kept], "tp": tp[kept], "ig": ig[kept], "counted": counted}


def _match_pairs(iou: np.ndarray, same: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Every (object, detection) pair over the threshold of one class; highest IoU first, each object and
    detection used once (the uniqueness taken detection-first, then object)."""
    correct = np.zeros((iou.shape[1], len(thresholds)), dtype=bool)
    for k, thr in enumerate(thresholds):
        rows, cols = np.nonzero((iou >= thr) & same)
        if not len(rows):
            continue
        pairs = np.stack([rows, cols], 1)
        if len(pairs) > 1:
            pairs = pairs[iou[rows, cols].argsort()[::-1]]
            pairs = pairs[np.unique(pairs[:, 1], return_index=True)[1]]
            pairs = pairs[np.unique(pairs[:, 0], return_index=True)[1]]
        correct[pairs[:, 1], k] = True
    return correct


def _match_confidence(iou: np.ndarray, same: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Detections in their order (NMS sorts by score), each taking the free object of highest IoU (first on ties)."""
    iou = iou * same
    correct = np.zeros((iou.shape[1], len(thresholds)), dtype=bool)
    taken = np.zeros((iou.shape[0], len(thresholds)), dtype=bool)
    columns = np.arange(len(thresholds))
    for j in np.flatnonzero((iou >= thresholds.min()).any(0)):
        free = np.where(taken, 0, iou[:, j, None])
        best = free.argmax(0)
        correct[j] = free[best, columns] >= thresholds
        taken[best, columns] |= correct[j]
    return correct


def _match_coco(rules: Rules, gt: Dict[str, np.ndarray], gt_ignored: np.ndarray, iou: np.ndarray,
                scores: np.ndarray, classes: np.ndarray, sel: np.ndarray, thresholds: np.ndarray,
                tp: np.ndarray, ig: np.ndarray, d_xywh: np.ndarray) -> None:
    """COCO's matcher per class: objects sorted not-ignored first, detections by score; each detection takes the
    free object of highest IoU (a crowd may be taken again), stopping at ignored objects once it has a real one."""
    for c in np.unique(classes[sel]):
        dets = sel[classes[sel] == c]
        dets = dets[np.argsort(-scores[dets], kind="mergesort")]
        objs = np.flatnonzero(gt["cls"] == c)
        objs = objs[np.argsort(gt_ignored[objs], kind="mergesort")]
        obj_ig, obj_crowd = gt_ignored[objs], gt["crowd"][objs]
        taken = np.zeros((len(thresholds), len(objs)), dtype=bool)
        for ti, thr in enumerate(thresholds):
            for d in dets:
                best, m = min(float(thr), 1 - 1e-10), -1
                for gi, o in enumerate(objs):
                    if taken[ti, gi] and not obj_crowd[gi]:
                        continue
                    if m > -1 and not obj_ig[m] and obj_ig[gi]:
                        break
                    if iou[o, d] < best:
                        continue
                    best, m = iou[o, d], gi
                if m == -1:
                    continue
                ig[d, ti] = obj_ig[m]
                tp[d, ti] = True  # matched (to an ignored object: ig says it counts neither way)
                taken[ti, m] = True
        if rules.area is not None:
            area = d_xywh[dets, 2] * d_xywh[dets, 3]
            outside = (area < rules.area[0]) | (area > rules.area[1])
            ig[dets] |= (~tp[dets]) & outside[:, None]
    tp &= ~ig


# -- over the data set ---------------------------------------------------------------------------------
#: The rules that decide the matching of each image; the rest only rank, integrate and average.
PER_IMAGE = ("max_dets", "matching", "crowd", "area", "space", "iou", "predictions", "classes", "truth")


def evaluate(images: Sequence[Image], rules: Rules, cache: Optional[Dict[Any, Any]] = None) -> Score:
    """mAP50 and mAP50-95 of ``images`` under ``rules`` (``cache``: per-image matches kept between calls)."""
    key = tuple(getattr(rules, name) for name in PER_IMAGE)
    if cache is not None and key in cache:
        per_image = cache[key]
    else:
        per_image = [_evaluate_image(image, rules) for image in images]
        if cache is not None:
            cache[key] = per_image
    counted: Dict[int, int] = {}
    for result in per_image:
        for c, n in result["counted"].items():
            counted[c] = counted.get(c, 0) + n
    classes = sorted(c for c, n in counted.items() if n > 0)
    t = len(_thresholds(rules))
    if rules.ranking == "quicksort":
        cls = np.concatenate([r["cls"] for r in per_image]) if per_image else np.zeros(0, int)
        scores = np.concatenate([r["scores"] for r in per_image]) if per_image else np.zeros(0)
        tp = np.concatenate([r["tp"] for r in per_image]) if per_image else np.zeros((0, t), bool)
        ig = np.concatenate([r["ig"] for r in per_image]) if per_image else np.zeros((0, t), bool)
        order = np.argsort(-scores)
        cls, scores, tp, ig = cls[order], scores[order], tp[order], ig[order]
        ranked = {c: (scores[cls == c], tp[cls == c], ig[cls == c]) for c in classes}
    else:
        ranked = {}
        for c in classes:
            parts = []
            for r in per_image:
                idx = np.flatnonzero(r["cls"] == c)
                idx = idx[np.argsort(-r["scores"][idx], kind="mergesort")]
                parts.append((r["scores"][idx], r["tp"][idx], r["ig"][idx]))
            s = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0)
            order = np.argsort(-s, kind="mergesort")
            ranked[c] = (s[order], np.concatenate([p[1] for p in parts])[order],
                         np.concatenate([p[2] for p in parts])[order])
    if not classes:
        return Score(0.0, 0.0, rules, classes)
    if rules.curve == "coco":
        table = np.stack([_coco_precision(*ranked[c][1:], counted[c]) for c in classes], -1)  # [T, R, K]
        ap = table.mean(1).T  # [K, T]
    else:
        table = None
        ap = np.stack([_trapezoid_ap(*ranked[c][1:], counted[c], rules.curve) for c in classes])  # [K, T]
    if rules.averaging == "coco":
        if table is None:  # a trapezoid AP per class and threshold: one mean over them, threshold-major as COCO's
            return Score(float(np.mean(ap[:, 0])), float(np.mean(ap.T.ravel())), rules, classes)
        return Score(float(np.mean(table[0].ravel())), float(np.mean(table.ravel())), rules, classes)
    if rules.averaging == "classes":
        return Score(float(ap[:, 0].mean()), float(ap.mean(1).mean()), rules, classes)
    return Score(float(ap[:, 0].mean()), float(ap.mean()), rules, classes)


def _trapezoid_ap(tp: np.ndarray, ig: np.ndarray, n_l: int, curve: str) -> np.ndarray:
    """Per threshold: the release's AP (cumulative TP/FP, envelope, trapezoid over 101 recall points)."""
    out = np.zeros(tp.shape[1])
    for j in range(tp.shape[1]):
        keep = ~ig[:, j]
        hits = tp[keep, j]
        if not len(hits):
            continue
        tpc = hits.cumsum(0)
        fpc = (1 - hits).cumsum(0)
        recall = tpc / (n_l + 1e-16)
        precision = tpc / (tpc + fpc)
        if curve == "drop":
            mrec = np.concatenate(([0.0], recall, [recall[-1]], [1.0]))
            mpre = np.concatenate(([1.0], precision, [0.0], [0.0]))
        else:
            mrec = np.concatenate(([0.0], recall, [1.0]))
            mpre = np.concatenate(([1.0], precision, [0.0]))
        mpre = np.flip(np.maximum.accumulate(np.flip(mpre)))
        out[j] = _trapz(np.interp(TRAPEZOID_X, mrec, mpre), TRAPEZOID_X)
    return out


def _trapz(y: np.ndarray, x: np.ndarray) -> float:
    return float((np.trapezoid if hasattr(np, "trapezoid") else np.trapz)(y, x))


def _coco_precision(tp: np.ndarray, ig: np.ndarray, npig: int) -> np.ndarray:
    """[T, R]: COCO's precision at each recall point (envelope, first index reaching it, 0 beyond)."""
    tps = tp.T & ~ig.T
    fps = ~tp.T & ~ig.T
    tp_sum = np.cumsum(tps, axis=1).astype(dtype=float)
    fp_sum = np.cumsum(fps, axis=1).astype(dtype=float)
    out = np.zeros((tp.shape[1], len(COCO_RECALLS)))
    for t in range(tp.shape[1]):
        nd = tp_sum.shape[1]
        if not nd:
            continue
        rc = tp_sum[t] / npig
        pr = tp_sum[t] / (fp_sum[t] + tp_sum[t] + np.spacing(1))
        pr = np.maximum.accumulate(pr[::-1])[::-1]
        inds = np.searchsorted(rc, COCO_RECALLS, side="left")
        valid = inds < nd
        out[t, valid] = pr[inds[valid]]
    return out


# -- the chain ------------------------------------------------------------------------------------------
def explain(images: Sequence[Image], start: Rules, coco_number: Optional[Mapping[str, float]] = None) -> Dict[str, Any]:
    """From ``start`` (a release's rules) to COCO's, one rule at a time: each step's rule, both numbers, the change.

    ``coco_number`` (``{"mAP50", "mAP50-95"}`` from the COCO API on the same predictions) is compared with the end of
    the chain: ``ends_at_coco_api`` says whether it is the same number to the bit.
    """
    rules = start
    cache: Dict[Any, Any] = {}  # the ranking, curve and averaging steps reuse the matches of the step before
    current = first = evaluate(images, rules, cache)
    steps: List[Dict[str, Any]] = []
    for name, what, release_rule, coco_rule in STEPS:
        target = getattr(COCO_RULES, name)
        before = getattr(rules, name)
        if before == target:
            steps.append({"rule": name, "what": what, "release": _describe(name, before, release_rule),
                          "coco": coco_rule, "same": True, "mAP50": current.map50, "mAP50-95": current.map,
                          "change": {"mAP50": 0.0, "mAP50-95": 0.0}})
            continue
        rules = dataclasses.replace(rules, **{name: target})
        after = evaluate(images, rules, cache)
        steps.append({"rule": name, "what": what, "release": _describe(name, before, release_rule), "coco": coco_rule,
                      "same": False, "mAP50": after.map50, "mAP50-95": after.map,
                      "change": {"mAP50": after.map50 - current.map50, "mAP50-95": after.map - current.map}})
        current = after
    result: Dict[str, Any] = {
        "start": {"mAP50": first.map50, "mAP50-95": first.map, "rules": dataclasses.asdict(start)},
        "steps": steps, "end": {"mAP50": current.map50, "mAP50-95": current.map},
        "same_rule": dict(SAME_RULE),
        "labels": {"start": "the release's metric, recomputed by yolo-det from the validation's own predictions",
                   "steps": "one rule changed at a time, release -> COCO API, in this order; change = after - before",
                   "end": "every rule as the COCO API applies it (pycocotools COCOeval, bbox, area all, maxDets 100)"},
    }
    if coco_number is not None:
        result["coco_api"] = dict(coco_number)
        result["ends_at_coco_api"] = all(current_value == coco_number.get(key) for key, current_value in
                                         (("mAP50", current.map50), ("mAP50-95", current.map)))
        result["residual"] = {"mAP50": coco_number.get("mAP50", float("nan")) - current.map50,
                              "mAP50-95": coco_number.get("mAP50-95", float("nan")) - current.map}
    return result


def mixed_classes(images: Sequence[Image]) -> List[Tuple[int, int, int, int]]:
    """The objects whose class in the release's labels is not the annotation's: (image id, object of the image's
    non-crowd annotations, the release's class, the annotation's), a class mix-up between labels and annotations."""
    out = []
    for image in images:
        if image.release_classes is None or (image.release_boxes is None and image.release_native_boxes is None):
            continue
        plain = [a for a in image.annotations if not a.get("iscrowd", 0)]
        if len(plain) != len(image.release_classes):
            continue
        out += [(image.image_id, k, int(mine), int(a["category_id"]))
                for k, (mine, a) in enumerate(zip(image.release_classes, plain)) if int(mine) != int(a["category_id"])]
    return out


def _describe(name: str, value: Any, default: str) -> str:
    if name == "matching":
        return MATCHERS.get(value, str(value))
    if name == "curve":
        return CURVES.get(value, str(value))
    if name == "averaging":
        return {"classes": "per-class AP averaged over IoU thresholds, then over classes (YOLOv5)",
                "all": "one mean of the class x IoU-threshold AP table (Ultralytics)"}.get(value, str(value))
    return default


__all__ = ["COCO_RULES", "Image", "Rules", "SAME_RULE", "STEPS", "Score", "case_from", "evaluate", "explain",
           "mixed_classes", "release_rules"]
