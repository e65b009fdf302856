"""The label of a release's own metric, its rules probed on the installed code (:mod:`yolo_det.evaluation.labels`).

Every validation record says which evaluator and rules computed its metrics. The two rules that differ between
releases of one family (the matcher, the end of the precision-recall curve) are probed once per process on the
release's own ``process_batch``/``match_predictions`` and ``compute_ap`` (:mod:`.coco_eval`), never read from a
version string; a probe that cannot run leaves the family's rule (the label's ``rules`` then say ``probed: False``).
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Mapping, Optional, Tuple

from ..evaluation import labels

_probed: Dict[Any, Tuple[Optional[str], Optional[str]]] = {}


def _iou_type(task: Optional[str]) -> str:
    return "bbox+segm" if task == "segment" else "bbox"


def _label(release: str, version: Optional[str], probes: Tuple[Optional[str], Optional[str]],
           settings: Optional[Mapping[str, Any]], task: Optional[str]) -> Dict[str, Any]:
    if task == "classify":
        name = f"{release} {version}" if version else f"{release}-family"
        return {"id": f"{release}.accuracy", "evaluator": f"{release} classify accuracy", "version": version,
                "rules": None, "label": f"{name} classification accuracy (top1, top5)"}
    label = labels.release_label(release, version, probes[0], probes[1], settings, _iou_type(task))
    label["rules"]["probed"] = all(p is not None for p in probes)
    return label


def yolov5(namespace: Mapping[str, Any], settings: Optional[Mapping[str, Any]] = None,
           task: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """The label of YOLOv5's metric: ``namespace`` holds ``process_batch`` and ``ap_per_class`` (the globals of
    ``val.py``/``segment/val.py``, or of ``train.py`` whose ``validate`` is that module). None on any failure."""
    try:
        validate = namespace.get("validate") or namespace.get("test")
        if validate is not None and hasattr(validate, "__dict__") and "process_batch" not in namespace:
            namespace = vars(validate)
        module = str(namespace.get("__name__") or "")
        if task is None:  # segment/val.py's metrics: boxes and masks
            task = "segment" if "segment" in module.split(".") else "detect"
        version = labels.installed_version("yolov5") if module.split(".")[0] == "yolov5" else None
        return _label("yolov5", version, _yolov5_probes(namespace), settings, task)
    except Exception:  # noqa: BLE001 - a label is never worth a failed run
        return None


def _yolov5_probes(namespace: Mapping[str, Any]) -> Tuple[Optional[str], Optional[str]]:
    process_batch = namespace.get("process_batch")
    ap = namespace.get("ap_per_class") or namespace.get("ap_per_class_box_and_mask")
    compute_ap = None
    if ap is not None:
        module = sys.modules.get(getattr(ap, "__module__", ""), None)
        compute_ap = getattr(module, "compute_ap", None)
        if compute_ap is None:  # segment metrics call utils.metrics.ap_per_class
            inner = getattr(module, "ap_per_class", None)
            compute_ap = getattr(sys.modules.get(getattr(inner, "__module__", ""), None), "compute_ap", None)
    key = (process_batch, compute_ap)  # the functions themselves: an id may be reused
    if key not in _probed:
        import torch

        from . import coco_eval

        matching = curve = None
        if callable(process_batch):
            objects = torch.tensor([[0.0, *b] for b in coco_eval.PROBE_OBJECTS])
            detections = torch.tensor(coco_eval.PROBE_DETECTIONS)
            try:
                matching = coco_eval.probe_matching(lambda: bool(process_batch(
                    detections, objects, torch.linspace(0.5, 0.95, 10))[1, 0]))
            except Exception:  # noqa: BLE001 - another shape: the family's rule
                matching = None
        if callable(compute_ap):
            try:
                curve = coco_eval.probe_curve(compute_ap)
            except Exception:  # noqa: BLE001
                curve = None
        _probed[key] = (matching, curve)
    return _probed[key]


def ultralytics(validator: Any, settings: Optional[Mapping[str, Any]] = None,
                task: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """The label of an Ultralytics validator's metric (its ``match_predictions``, ``utils.metrics.compute_ap``).
    None on any failure."""
    try:
        import ultralytics as _ultralytics

        version = getattr(_ultralytics, "__version__", None)
        return _label("ultralytics", version, _ultralytics_probes(validator), settings, task)
    except Exception:  # noqa: BLE001 - a label is never worth a failed run
        return None


def _ultralytics_probes(validator: Any) -> Tuple[Optional[str], Optional[str]]:
    from ultralytics.utils import metrics as _metrics

    match = getattr(type(validator), "match_predictions", None)
    key = (match, getattr(_metrics, "compute_ap", None))
    if key not in _probed:
        import torch

        from . import coco_eval

        matching = curve = None
        iouv = getattr(validator, "iouv", None)  # set by the validator's init_metrics: none yet, no probe
        if match is not None and isinstance(iouv, torch.Tensor):
            objects = torch.tensor(coco_eval.PROBE_OBJECTS, device=iouv.device)
            detections = torch.tensor(coco_eval.PROBE_DETECTIONS, device=iouv.device)
            try:
                matching = coco_eval.probe_matching(lambda: bool(validator.match_predictions(
                    detections[:, 5], torch.zeros(2, device=iouv.device),
                    _metrics.box_iou(objects, detections[:, :4]))[1, 0]))
            except Exception:  # noqa: BLE001 - another shape: the family's rule
                matching = None
        try:
            curve = coco_eval.probe_curve(_metrics.compute_ap)
        except Exception:  # noqa: BLE001
            curve = None
        if matching is None and match is not None:
            return matching, curve  # not cached: the next validator may have its thresholds
        _probed[key] = (matching, curve)
    return _probed[key]


__all__ = ["ultralytics", "yolov5"]
