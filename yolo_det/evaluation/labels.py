"""Which evaluator and which rules produced a number: the label every reported metric carries.

A validation record of the fingerprint log (training-time validations, standalone evaluations, re-runs) says under
``evaluator`` what computed its ``metrics``: :func:`release_label` for the release's own metric (YOLOv5's
``ap_per_class``, Ultralytics' ``DetMetrics``), :func:`coco_label` for the COCO API. A label is a small dict with
short, stable keys (:data:`KEYS`) and a one-line ``label`` for a person, e.g. ``"yolov5 7.0.14 ap_per_class
(101-point trapezoid to recall 1, matcher pairs, max_det 300, conf 0.001, NMS IoU 0.6, no crowd, no area range)"``.
Logs written before labels have none: :func:`of_record` says so instead of guessing.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

#: The keys of a label, in order: ``id`` (stable: ``yolov5.ap_per_class``, ``ultralytics.ap_per_class``,
#: ``coco.cocoeval``), ``evaluator`` (the code that computed it), ``version`` (installed, None when unknown),
#: ``rules`` (short keys, :data:`RULE_KEYS`), ``label`` (one line).
KEYS = ("id", "evaluator", "version", "rules", "label")
#: The keys of ``rules``: how detections meet objects and how the curve becomes a number.
RULE_KEYS = ("iou_type", "iou_thresholds", "interp", "curve_end", "match", "average", "max_dets", "conf", "nms_iou",
             "crowd", "area")
#: What a record without ``evaluator`` (a log written before labels) reads as.
UNLABELLED = {"id": None, "evaluator": None, "version": None, "rules": None,
              "label": "not recorded (the log was written before yolo-det labelled its metrics): the release's own "
                       "metric of the run that wrote it"}
#: Each release family's rules where nothing was probed (the same as ``gap.release_rules``): (matching, curve, average).
FAMILY = {"yolov5": ("pairs", "slope", "classes"), "ultralytics": ("confidence", "drop", "all")}
_CURVE_END = {"slope": "envelope to recall 1", "drop": "precision 0 after the last recall"}
_INTERP = {"slope": "101-point trapezoid", "drop": "101-point trapezoid", "coco": "101-point"}


def release_label(release: str, version: Optional[str] = None, matching: Optional[str] = None,
                  curve: Optional[str] = None, settings: Optional[Mapping[str, Any]] = None,
                  iou_type: str = "bbox") -> Dict[str, Any]:
    """The label of a release's own metric (``release``: ``yolov5`` or ``ultralytics``); ``matching`` and ``curve``
    as probed on the installed code (else the family's rule), ``settings`` the evaluation's (conf, NMS IoU, max_det)."""
    if release not in FAMILY:
        raise ValueError(f"unknown release {release!r}: {' or '.join(FAMILY)}")
    matching, curve = matching or FAMILY[release][0], curve or FAMILY[release][1]
    settings = settings or {}
    values = {"iou_type": iou_type, "iou_thresholds": "0.50:0.95:0.05", "interp": _INTERP.get(curve, curve),
              "curve_end": _CURVE_END.get(curve, curve), "match": matching,
              "average": "per class, then classes" if FAMILY[release][2] == "classes" else "class x IoU table",
              "max_dets": _number(settings.get("max_det")), "conf": _number(settings.get("conf_thres")),
              "nms_iou": _number(settings.get("iou_thres")), "crowd": "none (YOLO labels)", "area": "none"}
    name = f"{release} {version}" if version else f"{release}-family"
    shown = [f"{values['interp']} ({values['curve_end']})", f"matcher {values['match']}"]
    shown += [f"{text} {values[key]}" for key, text in (("max_dets", "max_det"), ("conf", "conf"),
                                                         ("nms_iou", "NMS IoU")) if values[key] is not None]
    shown += ["no crowd", "no area range"]
    what = "ap_per_class" + ("" if iou_type == "bbox" else f" {iou_type}")
    return {"id": f"{release}.ap_per_class", "evaluator": f"{release} ap_per_class", "version": version,
            "rules": {k: values[k] for k in RULE_KEYS}, "label": f"{name} {what} ({', '.join(shown)})"}


def coco_label(evaluator: str = "pycocotools", version: Optional[str] = None, iou_type: str = "bbox",
               ground_truth: Optional[str] = None) -> Dict[str, Any]:
    """The label of the COCO API's ``AP``/``AP50`` (``COCOeval``, area all, maxDets 100) by ``evaluator``."""
    values = {"iou_type": iou_type, "iou_thresholds": "0.50:0.95:0.05", "interp": _INTERP["coco"],
              "curve_end": "0 after the last recall", "match": "coco", "average": "one mean (IoU x recall x class)",
              "max_dets": 100, "conf": None, "nms_iou": None, "crowd": "ignored (iscrowd=1)",
              "area": "all (0 to 1e10 px^2)"}
    name = f"{evaluator} {version}" if version else evaluator
    label = (f"{name} COCOeval {iou_type} (AP@[.50:.95], area all, maxDets 100, 101-point, iscrowd ignored"
             + (f"; ground truth: {ground_truth}" if ground_truth else "") + ")")
    return {"id": "coco.cocoeval", "evaluator": evaluator, "version": version,
            "rules": {k: values[k] for k in RULE_KEYS}, "label": label}


def installed_version(distribution: str) -> Optional[str]:
    """The installed version of a distribution (``yolov5``, ``ultralytics``, ``pycocotools``), None when not one."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def of_record(evaluator: Any) -> Dict[str, Any]:
    """A record's label as stored, or :data:`UNLABELLED` for a log written before labels."""
    if isinstance(evaluator, Mapping) and evaluator.get("label"):
        return {k: evaluator.get(k) for k in KEYS}
    return dict(UNLABELLED)


def _number(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


__all__ = ["KEYS", "RULE_KEYS", "UNLABELLED", "coco_label", "installed_version", "of_record", "release_label"]
