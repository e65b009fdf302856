"""``--evaluator coco``: keep a release's validation predictions and score them with the COCO API as well.

While the release validates (``yolo-det val RUN_DIR --evaluator coco`` re-runs it in a child), :class:`Capture`
keeps, per image, the boxes the release's own matcher saw (YOLOv5: ``val.py``'s ``process_batch`` inputs and its
``on_val_image_end`` callback; Ultralytics: the validator's ``_process_batch``), and the same boxes scaled to the
original image. :func:`report` then makes the COCO annotations from the label files, scores the predictions with
faster-coco-eval and pycocotools (:mod:`yolo_det.evaluation.coco`) and explains the gap from the release's number
(:mod:`yolo_det.evaluation.gap`), with the rules probed on the installed release (:func:`probe_matching`,
:func:`probe_curve`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from ..evaluation import coco, gap, labels


def _np(tensor: Any, dtype: Any = np.float32) -> np.ndarray:
    return np.asarray(tensor.detach().cpu().numpy() if hasattr(tensor, "detach") else tensor, dtype=dtype)


class Capture:
    """Per image file: the detections and label boxes as the release matched them, and scaled to the image."""

    def __init__(self) -> None:
        self.images: Dict[str, Dict[str, Any]] = {}
        self.space = "native"
        self._labels: Optional[np.ndarray] = None

    def add(self, file: str, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray,
            native: Optional[np.ndarray] = None, labels: Optional[np.ndarray] = None,
            label_classes: Optional[np.ndarray] = None, native_labels: Optional[np.ndarray] = None) -> None:
        """Keep one image's detections (xyxy in the release's matching space) and label boxes."""
        self.images[str(Path(file).resolve())] = {
            "boxes": boxes.reshape(-1, 4), "scores": scores.reshape(-1), "classes": classes.reshape(-1).astype(int),
            "native_boxes": None if native is None else native.reshape(-1, 4),
            "release_boxes": None if labels is None else labels.reshape(-1, 4),
            "release_classes": None if label_classes is None else label_classes.reshape(-1).astype(int),
            "release_native_boxes": None if native_labels is None else native_labels.reshape(-1, 4)}

    # -- YOLOv5-family val.py -----------------------------------------------------------------------------------
    def yolov5(self, val: Any, callbacks_module: Any) -> Any:
        """Hook ``val.process_batch`` (the labels of the image being matched) and return a ``Callbacks`` whose
        ``on_val_image_end`` keeps each image's native-space predictions (``val.run(callbacks=...)``)."""
        original = val.process_batch

        def process_batch(detections: Any, labels: Any, iouv: Any) -> Any:
            self._labels = _np(labels)
            return original(detections, labels, iouv)

        val.process_batch = process_batch
        callbacks = callbacks_module.Callbacks()

        def image_end(pred: Any, predn: Any, path: Any, *_rest: Any) -> None:
            p = _np(predn)
            labels, self._labels = self._labels, None
            self.add(str(path), p[:, :4], p[:, 4], p[:, 5], None,
                     None if labels is None else labels[:, 1:5], None if labels is None else labels[:, 0])

        callbacks.register_action("on_val_image_end", callback=image_end)
        return callbacks

    # -- YOLOv5-family segment/val.py ---------------------------------------------------------------------------
    def yolov5_segment(self, val: Any, loader: Any) -> Any:
        """``segment/val.py`` calls no per-image callback: follow its loop through the names it calls by module
        global (``non_max_suppression``, ``process_mask``/``process_mask_native``, ``scale_boxes``,
        ``process_batch``) and keep, per image with predictions, the native boxes the matcher saw, their labels and
        the masks scaled to the image as the release scales them for predictions.json (``scale_image``), as RLE.
        Returns the loader to pass as ``dataloader`` (it notes each batch's paths and shapes)."""
        state: Dict[str, Any] = {"batch": None, "pending": [], "current": None}
        originals = {name: getattr(val, name) for name in ("non_max_suppression", "scale_boxes", "process_batch")}
        capture = self

        class Batches:
            """The loader, noting each batch's image paths and (shape, ratio_pad) as run() takes it."""

            def __init__(self, inner: Any) -> None:
                self.inner = inner

            def __iter__(self) -> Any:
                for batch in self.inner:
                    state["batch"] = batch
                    yield batch

            def __len__(self) -> int:
                return len(self.inner)

            def __getattr__(self, name: str) -> Any:
                return getattr(self.inner, name)

        def nms(*args: Any, **kwargs: Any) -> Any:
            out = originals["non_max_suppression"](*args, **kwargs)
            _im, _targets, paths, shapes = state["batch"][:4]
            state["pending"] = [(paths[i], shapes[i], pred) for i, pred in enumerate(out) if len(pred)]
            return out

        def masks_of(original: Callable[..., Any]) -> Callable[..., Any]:
            def process(*args: Any, **kwargs: Any) -> Any:
                masks = original(*args, **kwargs)
                path, (shape, ratio_pad), pred = state["pending"].pop(0)
                state["current"] = {"path": str(path), "shape": shape, "ratio_pad": ratio_pad, "pred": pred,
                                    "masks": masks, "boxes": None}
                return masks
            return process

        def scale_boxes(img1_shape: Any, boxes: Any, *args: Any, **kwargs: Any) -> Any:
            out = originals["scale_boxes"](img1_shape, boxes, *args, **kwargs)
            current = state["current"]
            if current is not None and current["boxes"] is None:  # the first call after the masks: the predictions
                current["boxes"] = True
                pred, masks = current["pred"], current["masks"]
                m = torch_uint8(masks).permute(1, 2, 0).contiguous().cpu().numpy()
                parts = []  # OpenCV resizes at most 128 channels at once; each channel is resized on its own
                for start in range(0, m.shape[2], 128):
                    part = val.scale_image(tuple(img1_shape), np.ascontiguousarray(m[:, :, start:start + 128]),
                                           current["shape"], current["ratio_pad"])
                    parts.append(np.asarray(part).reshape(*part.shape[:2], -1))
                native = np.concatenate(parts, 2)
                capture.add(current["path"], _np(out), _np(pred[:, 4]), _np(pred[:, 5]))
                capture.images[str(Path(current["path"]).resolve())]["rles"] = _rles(
                    np.ascontiguousarray(native.transpose(2, 0, 1)))
            return out

        def process_batch(detections: Any, labels: Any, iouv: Any, *args: Any, **kwargs: Any) -> Any:
            current = state["current"]
            if current is not None and not kwargs.get("masks"):  # the box matching: the labels it held
                held = capture.images[str(Path(current["path"]).resolve())]
                lab = _np(labels)
                held.update(release_boxes=lab[:, 1:5].reshape(-1, 4), release_classes=lab[:, 0].astype(int))
                state["current"] = None  # this image is done (a later call, e.g. a probe, is not its matching)
            return originals["process_batch"](detections, labels, iouv, *args, **kwargs)

        val.non_max_suppression, val.scale_boxes, val.process_batch = nms, scale_boxes, process_batch
        for name in ("process_mask", "process_mask_native"):
            if hasattr(val, name):
                setattr(val, name, masks_of(getattr(val, name)))
        return Batches(loader)

    # -- Ultralytics validators ---------------------------------------------------------------------------------
    def ultralytics(self, validator: Any, scale_boxes: Callable[..., Any]) -> None:
        """Wrap the validator's ``_process_batch(preds, batch)`` (called for every image) to keep what it matches."""
        original = validator._process_batch

        def process_batch(preds: Any, batch: Any) -> Any:
            self.ultralytics_image(validator, preds, batch, scale_boxes)
            return original(preds, batch)

        validator._process_batch = process_batch

    def ultralytics_class(self, validator_class: Any, scale_boxes: Callable[..., Any]) -> Callable[[], Any]:
        """Wrap ``validator_class._process_batch`` for the first validator that runs (a user's ``yolo val``); returns
        a function that puts the method back and gives that validator."""
        original = validator_class._process_batch
        first: Dict[str, Any] = {}

        def process_batch(validator: Any, preds: Any, batch: Any) -> Any:
            if first.setdefault("validator", validator) is validator:
                self.ultralytics_image(validator, preds, batch, scale_boxes)
            return original(validator, preds, batch)

        validator_class._process_batch = process_batch

        def restore() -> Any:
            validator_class._process_batch = original
            return first.get("validator")

        return restore

    def ultralytics_image(self, validator: Any, preds: Any, batch: Any, scale_boxes: Callable[..., Any]) -> None:
        """Keep one image's predictions and labels as an Ultralytics validator matches them."""
        boxes, labels = preds["bboxes"], batch["bboxes"]
        native = native_labels = rles = None
        scaled = getattr(validator, "scale_preds", None)
        if scaled is not None:  # matched in the letterboxed input; predictions.json gets them scaled back
            self.space = "input"
            out = scaled(preds, batch)
            native = _np(out["bboxes"])
            if out.get("masks") is not None:  # a segment validator: its masks at the image's size, as RLE
                rles = _rles(out["masks"])
            native_labels = _np(scale_boxes(batch["imgsz"], labels.clone(), batch["ori_shape"],
                                            ratio_pad=batch["ratio_pad"])) if len(labels) else np.zeros((0, 4))
        self.add(batch["im_file"], _np(boxes), _np(preds["conf"]), _np(preds["cls"]), native,
                 _np(labels).reshape(-1, 4), _np(batch["cls"]).reshape(-1), native_labels)
        if rles is not None:
            self.images[str(Path(batch["im_file"]).resolve())]["rles"] = rles


def torch_uint8(masks: Any) -> Any:
    """Masks as the release converts them before scaling (``torch.as_tensor(..., dtype=torch.uint8)``)."""
    import torch

    return torch.as_tensor(masks, dtype=torch.uint8)


def _rles(masks: Any) -> List[Dict[str, Any]]:
    """COCO compressed RLE of each [H, W] mask (pycocotools' encoder), counts as text for JSON."""
    from pycocotools import mask as mask_utils

    m = _np(masks, np.uint8).reshape(-1, *tuple(masks.shape[-2:]))
    if not len(m):
        return []
    out = mask_utils.encode(np.asfortranarray(m.transpose(1, 2, 0)))
    return [{"size": [int(v) for v in r["size"]], "counts": r["counts"].decode("ascii")} for r in out]


def probe_matching(correct_second: Callable[[], bool]) -> str:
    """``pairs`` or ``confidence``: what the release's matcher does with two objects A (0,0,100,100), B
    (0,0,100,70) and detections d1 (0,0,100,90) scored 0.9, d2 = A scored 0.8; ``correct_second()`` runs it
    and says whether d2 is a true positive at IoU 0.5 (it takes B only when detections take free objects)."""
    return "confidence" if correct_second() else "pairs"


def probe_curve(compute_ap: Callable[[Any, Any], Any]) -> str:
    """``slope`` or ``drop``: the release's AP of one point (recall 0.5, precision 1): 0.75 when the envelope runs
    on to recall 1, 0.5 when precision drops to 0 after the last recall."""
    ap = float(compute_ap(np.array([0.5]), np.array([1.0]))[0])
    return "slope" if ap > 0.6 else "drop"


PROBE_OBJECTS = [[0.0, 0.0, 100.0, 100.0], [0.0, 0.0, 100.0, 70.0]]
PROBE_DETECTIONS = [[0.0, 0.0, 100.0, 90.0, 0.9, 0.0], [0.0, 0.0, 100.0, 100.0, 0.8, 0.0]]


def report(capture: Capture, files: Sequence[str], names: Sequence[str], release: str, rules: gap.Rules,
           logged: Mapping[str, float], single_cls: bool = False, data_yaml: Optional[str] = None,
           split: str = "val") -> Dict[str, Any]:
    """The COCO API's numbers (both implementations) for the captured predictions and the gap, every number labelled.

    The ground truth: the COCO file the data YAML names (``coco_json``), else annotations made from the labels."""
    files = [str(Path(f).resolve()) for f in files]
    truth = coco.ground_truth(files, list(names), data_yaml, split)
    if single_cls:
        for annotation in truth["annotations"]:
            annotation["category_id"] = 0
        truth["categories"] = [{"id": 0, "name": "item (single_cls)"}]
    notes: List[str] = []
    detections = []
    for image_id, file in enumerate(files, 1):
        held = capture.images.get(file)
        if held is None:  # no detection (YOLOv5 calls nothing for such an image)
            continue
        entry = {"image_id": image_id, **held}
        plain = [a["bbox"] for a in truth["annotations"] if a["image_id"] == image_id and not a["iscrowd"]]
        held_native = held["release_native_boxes"] if held["release_native_boxes"] is not None else \
            held["release_boxes"]
        order = None if held_native is None else _object_order(held_native, plain)
        if order is not None:  # the same objects in another order (segment loaders sort them by area): reorder
            entry.update({k: None if held.get(k) is None else held[k][order]
                          for k in ("release_boxes", "release_classes", "release_native_boxes")})
            held_native = held_native[order]
        if held_native is not None and not _same_objects(held_native, plain):
            notes.append(f"{Path(file).name}: the {len(held_native)} label boxes the release held are not the "
                         f"{len(plain)} non-crowd annotations in order (within 1 px): the 'truth' step uses the "
                         "annotations for this image")
            entry.update(release_boxes=None, release_classes=None, release_native_boxes=None)
        detections.append(entry)
    predictions = coco.predictions_json([{**d, "boxes": d["native_boxes"] if d.get("native_boxes") is not None
                                          else d["boxes"]} for d in detections])
    agreement = coco.agreement(truth, predictions) if _has("faster_coco_eval") else None
    reference = (agreement["evaluators"]["pycocotools"] if agreement else
                 coco.score(truth, predictions, "pycocotools"))
    number = {"mAP50": reference["stats"]["AP50"], "mAP50-95": reference["stats"]["AP"]}
    images = gap.case_from(truth, detections)
    chain = gap.explain(images, rules, number)
    notes += _mix_up(gap.mixed_classes(images), files, names, truth["info"]["source"], chain)
    masks = _masks(truth, detections, predictions, rules) if any("rles" in d for d in detections) else None
    release_number = {k: logged.get(k) for k in ("mAP50", "mAP50-95")}
    chain["start"]["release_logged"] = release_number
    chain["start"]["equals_release"] = all(chain["start"][k] == release_number[k] for k in release_number)
    if not chain["start"]["equals_release"]:
        notes.append("yolo-det's recomputation of the release's metric from its own predictions differs from the "
                     "number the release computed (see start.release_logged): the first step is not exact")
    return {
        "release": release, "images": len(files), "predictions": len(predictions),
        "release_metrics": {**release_number, "label": f"the {release} release's own metric (its matcher, its "
                                                        "precision-recall integration), as the validation logged it",
                            "evaluator": labels.release_label(release, None, rules.matching, rules.curve)},
        "coco_metrics": {**number, "label": "the COCO API (pycocotools COCOeval, bbox, IoU .50:.95 / .50, area all, "
                                            "maxDets 100) on the same predictions, the annotations of "
                                            + truth["info"]["source"],
                         "evaluator": reference.get("evaluator_label") or labels.coco_label(
                             ground_truth=truth["info"]["source"])},
        "ground_truth": truth["info"]["source"],
        "coco": reference, "agreement": agreement, "gap": chain, "notes": notes,
        **({"masks": masks} if masks is not None else {}),
    }


def _mix_up(mixed: Sequence[Sequence[int]], files: Sequence[str], names: Sequence[str], source: str,
            chain: Mapping[str, Any]) -> List[str]:
    """A note naming the objects whose class in the release's labels is not the annotation's (a class mix-up between
    the labels and the ground truth, which the gap's ``classes`` step costs), or none."""
    if not mixed:
        return []

    def name(cls: int) -> str:
        return repr(str(names[cls])) if 0 <= cls < len(names) else str(cls)

    image_id, _k, mine, theirs = mixed[0]
    step = next((s for s in chain["steps"] if s["rule"] == "classes"), None)
    cost = f" (mAP50-95 {step['change']['mAP50-95']:+.6f})" if step else ""
    return [f"{len(mixed)} object(s) have another class in the annotations ({source}) than in the labels the release "
            f"matched, e.g. {Path(files[image_id - 1]).name}: {name(mine)} in the labels, {name(theirs)} in the "
            f"annotations: a class mix-up between the labels and the annotations, not box precision; the 'classes' "
            f"step is its cost{cost}. Check that the labels' class order is the data YAML's names and the "
            "annotation file's categories"]


def _masks(truth: Mapping[str, Any], detections: Sequence[Mapping[str, Any]],
           predictions: Sequence[Mapping[str, Any]], rules: Optional[gap.Rules] = None) -> Dict[str, Any]:
    """The COCO API's mask numbers (``segm``, both implementations) for the predictions' RLE masks and, with the
    release's ``rules``, the gap walked on the same masks' IoU."""
    if any("segmentation" not in a for a in truth["annotations"]):
        return {"note": "the ground truth has no polygons (box labels): masks are not scored"}
    rows = []
    index = 0
    for d in detections:  # predictions_json wrote the rows in this order, one per detection
        for rle in d.get("rles") or [None] * len(d["scores"]):
            row = dict(predictions[index])
            index += 1
            if rle is not None:
                row["segmentation"] = rle
                rows.append(row)
    agreement = coco.agreement(truth, rows, "segm") if _has("faster_coco_eval") else None
    reference = agreement["evaluators"]["pycocotools"] if agreement else coco.score(truth, rows, "pycocotools", "segm")
    number = {"mAP50": reference["stats"]["AP50"], "mAP50-95": reference["stats"]["AP"]}
    chain = None
    if rules is not None:
        images = gap.case_from(truth, detections)
        for image in images:
            image.mask_iou = _mask_iou(truth, image.image_id, next((d.get("rles") for d in detections
                                                                    if d["image_id"] == image.image_id), None) or [])
        chain = gap.explain(images, rules, number)
        chain["labels"]["start"] = ("the release's rules on the COCO API's mask IoU of the same masks (RLE at the "
                                    "image's size): the release's own mask IoU, on its mask resolution in the "
                                    "letterboxed input, is the one rule not isolated")
        chain["labels"]["end"] = "every rule as the COCO API applies it (pycocotools COCOeval, segm, area all, maxDets 100)"
    return {"coco": reference, "agreement": agreement,
            "coco_metrics": {"mAP50(M)": reference["stats"]["AP50"], "mAP50-95(M)": reference["stats"]["AP"],
                             "label": "the COCO API's mask AP (segm; the release's masks scaled to the image and "
                                      "encoded as RLE, the ground-truth polygons rasterised by the COCO API)",
                             "evaluator": reference.get("evaluator_label")},
            "gap": chain, "note": "the mask gap starts from the release's rules applied to the COCO API's mask IoU: "
                                  "the release computes mask IoU on its own mask resolution in the letterboxed input, "
                                  "which no single rule change turns into the COCO API's (that step is not isolated); "
                                  "every other rule is walked as for boxes"}


def _gt_rle(annotation: Mapping[str, Any], height: int, width: int) -> Any:
    """An annotation's mask as RLE, as the COCO API makes it (``COCO.annToRLE``)."""
    from pycocotools import mask as mask_utils

    segm = annotation["segmentation"]
    if isinstance(segm, list):
        return mask_utils.merge(mask_utils.frPyObjects(segm, height, width))
    if isinstance(segm.get("counts"), list):
        return mask_utils.frPyObjects(segm, height, width)
    return segm


def _mask_iou(truth: Mapping[str, Any], image_id: int, rles: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """[annotations of the image, detections] mask IoU by pycocotools' ``maskUtils.iou`` (crowds as ignore regions)."""
    from pycocotools import mask as mask_utils

    info = next(i for i in truth["images"] if i["id"] == image_id)
    anns = [a for a in truth["annotations"] if a["image_id"] == image_id]
    if not anns or not rles:
        return np.zeros((len(anns), len(rles)), dtype=np.float64)
    gt = [_gt_rle(a, info["height"], info["width"]) for a in anns]
    dt = [{"size": r["size"], "counts": r["counts"].encode("ascii") if isinstance(r["counts"], str) else r["counts"]}
          for r in rles]
    iou = mask_utils.iou(dt, gt, [int(a.get("iscrowd", 0)) for a in anns])
    return np.asarray(iou, dtype=np.float64).reshape(len(dt), len(gt)).T


def _object_order(held: np.ndarray, annotations: Sequence[Sequence[float]]) -> Optional[np.ndarray]:
    """The order of the release's label boxes (xyxy) that gives the annotations (xywh), each within 1 px, when they are
    the same boxes in another order; None otherwise (or when already in order)."""
    if len(held) != len(annotations) or not len(held) or _same_objects(held, annotations):
        return None
    xywh = np.asarray(annotations, dtype=np.float64).reshape(-1, 4)
    xyxy = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1)
    held = np.asarray(held, dtype=np.float64)
    order, free = [], set(range(len(held)))
    for box in xyxy:
        close = [i for i in sorted(free) if np.abs(held[i] - box).max() <= 1.0]
        if not close:
            return None
        best = min(close, key=lambda i: float(np.abs(held[i] - box).sum()))
        order.append(best)
        free.discard(best)
    return np.array(order)


def _same_objects(held: np.ndarray, annotations: Sequence[Sequence[float]]) -> bool:
    """Whether the release's label boxes (xyxy) are the annotations (xywh) in the same order, within 1 px."""
    if len(held) != len(annotations):
        return False
    if not len(held):
        return True
    xywh = np.asarray(annotations, dtype=np.float64).reshape(-1, 4)
    xyxy = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1)
    return bool(np.abs(np.asarray(held, dtype=np.float64) - xyxy).max() <= 1.0)


def describe(result: Mapping[str, Any]) -> List[str]:
    """Lines for a person: both numbers, each step that moved them, whether the chain ends at the COCO API."""
    rel, api = result["release_metrics"], result["coco_metrics"]
    lines = [f"COCO evaluation of the same {result['predictions']} predictions on {result['images']} images:",
             f"  {result['release']} metric:  mAP50 {rel['mAP50']:.6f}  mAP50-95 {rel['mAP50-95']:.6f}",
             f"  COCO API (pycocotools): mAP50 {api['mAP50']:.6f}  mAP50-95 {api['mAP50-95']:.6f}"]
    agreement = result.get("agreement")
    if agreement:
        lines.append("  faster-coco-eval: " + coco.agreement_text(agreement))
    chain = result["gap"]
    lines.append(f"  the gap, one rule at a time (start {chain['start']['mAP50-95']:.6f} mAP50-95"
                 + ("" if chain["start"].get("equals_release") else ", not the release's exact number") + "):")
    for step in chain["steps"]:
        if step["same"]:
            continue
        change = step["change"]
        lines.append(f"    {step['what']}: mAP50 {change['mAP50']:+.6f}  mAP50-95 {change['mAP50-95']:+.6f}"
                     f"  ({step['release']} -> {step['coco']})")
    lines.append("  ends exactly at the COCO API's number" if chain.get("ends_at_coco_api") else
                 f"  ends {chain.get('residual')} away from the COCO API's number")
    lines.extend(f"  note: {n}" for n in result.get("notes", []))
    return lines


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


__all__ = ["Capture", "PROBE_DETECTIONS", "PROBE_OBJECTS", "describe", "probe_curve", "probe_matching", "report"]
