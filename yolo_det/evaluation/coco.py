"""The COCO API's number for a YOLO-format dataset: annotations made on the fly, scored by two implementations.

A YOLO-format dataset has no COCO annotation file, so neither YOLOv5's ``val.py --save-json`` nor
Ultralytics' ``save_json=True`` gives a second number for it. :func:`annotations_from_yolo` makes
the COCO ground truth from the label files (``iscrowd=0``, boxes in pixels of the image as stored,
its size read from the image file), :func:`predictions_json` writes detections the way the releases
write ``predictions.json`` (top-left ``xywh`` rounded to 3 decimals, score to 5), and :func:`score`
runs the COCO API on them: faster-coco-eval (the maintained C++ implementation) or pycocotools (the
reference). :func:`agreement` runs both on the same predictions and names any difference.
A COCO annotation file's categories are the classes by name (:func:`classes_by_name`); :data:`COCO_CATEGORIES` is
COCO's own table (80 classes in ids 1..90), which the releases write on COCO.
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import os
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import labels as metric_labels
from ..core.extras import install_hint

#: The twelve numbers of ``COCOeval.summarize()``, in its order: (key, label).
STATS = (
    ("AP", "AP at IoU 0.50:0.95, area all, maxDets 100 (the COCO API's mAP50-95)"),
    ("AP50", "AP at IoU 0.50, area all, maxDets 100 (the COCO API's mAP50)"),
    ("AP75", "AP at IoU 0.75, area all, maxDets 100"),
    ("APs", "AP at IoU 0.50:0.95, area small (< 32^2 px), maxDets 100"),
    ("APm", "AP at IoU 0.50:0.95, area medium (32^2-96^2 px), maxDets 100"),
    ("APl", "AP at IoU 0.50:0.95, area large (> 96^2 px), maxDets 100"),
    ("AR1", "AR at IoU 0.50:0.95, area all, maxDets 1"),
    ("AR10", "AR at IoU 0.50:0.95, area all, maxDets 10"),
    ("AR100", "AR at IoU 0.50:0.95, area all, maxDets 100"),
    ("ARs", "AR at IoU 0.50:0.95, area small, maxDets 100"),
    ("ARm", "AR at IoU 0.50:0.95, area medium, maxDets 100"),
    ("ARl", "AR at IoU 0.50:0.95, area large, maxDets 100"),
)
EVALUATORS = ("faster-coco-eval", "pycocotools")


class CocoError(RuntimeError):
    """The COCO evaluation cannot run (missing package, inconsistent files); the message says what to do."""


#: COCO's 80 detection categories, (category id, name) in class order: the order of COCO's 80-name lists, whose
#: class index i the releases write as id ``COCO_CATEGORIES[i][0]`` on COCO (ids 1..90; 12, 26, 29, 30, 45, 66,
#: 68, 69, 71 and 83 belong to no detection category).
COCO_CATEGORIES = (
    (1, "person"), (2, "bicycle"), (3, "car"), (4, "motorcycle"), (5, "airplane"), (6, "bus"), (7, "train"),
    (8, "truck"), (9, "boat"), (10, "traffic light"), (11, "fire hydrant"), (13, "stop sign"), (14, "parking meter"),
    (15, "bench"), (16, "bird"), (17, "cat"), (18, "dog"), (19, "horse"), (20, "sheep"), (21, "cow"),
    (22, "elephant"), (23, "bear"), (24, "zebra"), (25, "giraffe"), (27, "backpack"), (28, "umbrella"),
    (31, "handbag"), (32, "tie"), (33, "suitcase"), (34, "frisbee"), (35, "skis"), (36, "snowboard"),
    (37, "sports ball"), (38, "kite"), (39, "baseball bat"), (40, "baseball glove"), (41, "skateboard"),
    (42, "surfboard"), (43, "tennis racket"), (44, "bottle"), (46, "wine glass"), (47, "cup"), (48, "fork"),
    (49, "knife"), (50, "spoon"), (51, "bowl"), (52, "banana"), (53, "apple"), (54, "sandwich"), (55, "orange"),
    (56, "broccoli"), (57, "carrot"), (58, "hot dog"), (59, "pizza"), (60, "donut"), (61, "cake"), (62, "chair"),
    (63, "couch"), (64, "potted plant"), (65, "bed"), (67, "dining table"), (70, "toilet"), (72, "tv"),
    (73, "laptop"), (74, "mouse"), (75, "remote"), (76, "keyboard"), (77, "cell phone"), (78, "microwave"),
    (79, "oven"), (80, "toaster"), (81, "sink"), (82, "refrigerator"), (84, "book"), (85, "clock"), (86, "vase"),
    (87, "scissors"), (88, "teddy bear"), (89, "hair drier"), (90, "toothbrush"),
)
#: Other spellings of COCO's names (Darknet's ``coco.names``), as :func:`name_key` reads them.
ALIASES = {"motorbike": "motorcycle", "aeroplane": "airplane", "sofa": "couch", "tvmonitor": "tv",
           "hairdryer": "hairdrier"}


def name_key(name: Any) -> str:
    """A class name as compared: case, spaces, underscores and hyphens ignored, Darknet's spellings as COCO's."""
    key = "".join(ch for ch in str(name).lower() if ch.isalnum())
    return ALIASES.get(key, key)


def is_coco80(names: Sequence[Any]) -> bool:
    """Whether ``names`` are COCO's 80 classes in COCO's order (what the releases' 80-to-91 id map assumes)."""
    return [name_key(n) for n in names] == [name_key(n) for _, n in COCO_CATEGORIES]


def classes_by_name(categories: Sequence[Tuple[Any, Any]], names: Sequence[Any], source: str) -> Dict[Any, int]:
    """Category id -> class index, each category's name found in ``names``; categories that are not the names (one
    missing, one extra, a name twice) are a :class:`CocoError` naming them and ``source``."""
    classes: Dict[str, List[int]] = {}
    for i, name in enumerate(names):
        classes.setdefault(name_key(name), []).append(i)
    ids: Dict[str, List[Any]] = {}
    for category_id, name in categories:
        ids.setdefault(name_key(name), []).append((category_id, name))
    problems = [f"category {pairs[0][1]!r} (id {pairs[0][0]}) is no name of the data" for key, pairs in ids.items()
                if key not in classes]
    problems += [f"{pairs[0][1]!r} is {len(pairs)} categories (ids {[c for c, _ in pairs]})"
                 for pairs in ids.values() if len(pairs) > 1]
    problems += [f"the data names {names[found[0]]!r} {len(found)} times (classes {found})"
                 for found in classes.values() if len(found) > 1]
    problems += [f"class {found[0]} {names[found[0]]!r} has no category" for key, found in classes.items()
                 if key not in ids]
    if problems:
        raise CocoError(f"{source} name categories that are not the data YAML's names: {'; '.join(problems)}: an "
                        "annotation's class is its category's name in names, so make the two name the same classes "
                        f"(the data YAML's names: in class order, the file's categories), or remove {JSON_KEY} to "
                        "use the YOLO labels")
    return {category_id: classes[key][0] for key, pairs in ids.items() for category_id, _ in pairs}


def image_size(path: os.PathLike) -> tuple:
    """(width, height) of an image file as stored (EXIF orientation not applied, as the releases read it)."""
    from PIL import Image

    with Image.open(path) as image:
        return image.size


def label_path(image: os.PathLike) -> Path:
    """The YOLO label file of an image: the last ``/images/`` of its path replaced by ``/labels/``, suffix .txt."""
    text = str(image)
    sa, sb = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
    if sa in text:
        head, _sep, tail = text.rpartition(sa)
        text = head + sb + tail
    return Path(text).with_suffix(".txt")


def read_labels(path: os.PathLike) -> List[List[float]]:
    """The rows of a YOLO label file (class, then normalised numbers); no file: no rows."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        parts = line.split()
        if parts:
            try:
                rows.append([float(p) for p in parts])
            except ValueError:
                raise CocoError(f"the label file {path}, line {number}, is not numbers ({line[:80]!r}): fix it "
                                "(class x y w h, or class and polygon points, normalised)") from None
    return rows


def annotations_from_yolo(images: Sequence[os.PathLike], names: Sequence[str],
                          labels: Optional[Sequence[os.PathLike]] = None) -> Dict[str, Any]:
    """COCO ground truth for YOLO-format images: image ``id`` = position in ``images`` + 1, ``category_id`` =
    the YOLO class index, one annotation per label row with ``iscrowd=0`` and ``area`` = box width x height.

    Box rows (class cx cy w h) give the box; polygon rows (class x1 y1 x2 y2 ...) give their bounding box and a
    ``segmentation`` polygon in pixels. Sizes come from the image files.
    """
    out: Dict[str, Any] = {"images": [], "annotations": [],
                           "categories": [{"id": i, "name": str(n)} for i, n in enumerate(names)]}
    for index, image in enumerate(images):
        width, height = image_size(image)
        image_id = index + 1
        out["images"].append({"id": image_id, "file_name": str(image), "width": width, "height": height})
        rows = read_labels(labels[index] if labels is not None else label_path(image))
        for row in rows:
            cls = int(row[0])
            if cls < 0 or cls >= len(names):
                raise CocoError(f"{label_path(image)} has class {cls}, but the data has {len(names)} classes "
                                "(names): fix the label or the data YAML")
            annotation: Dict[str, Any] = {"id": len(out["annotations"]) + 1, "image_id": image_id,
                                          "category_id": cls, "iscrowd": 0}
            if len(row) == 5:
                cx, cy, w, h = row[1:]
                bbox = [(cx - w / 2) * width, (cy - h / 2) * height, w * width, h * height]
            else:
                xs = [v * width for v in row[1::2]]
                ys = [v * height for v in row[2::2]]
                bbox = [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)]
                annotation["segmentation"] = [[v for xy in zip(xs, ys) for v in xy]]
            annotation["bbox"] = bbox
            annotation["area"] = bbox[2] * bbox[3]
            out["annotations"].append(annotation)
    return out


#: The data YAML key that names a COCO annotation file of the split (relative to the YAML's ``path``).
JSON_KEY = "coco_json"


def named_json(data_yaml: Optional[os.PathLike], split: str = "val") -> Optional[Path]:
    """The COCO annotation file a data YAML names for ``split`` (``coco_json: FILE`` or ``coco_json: {val: FILE}``),
    else None."""
    if not data_yaml or not Path(data_yaml).is_file():
        return None
    import yaml

    data = yaml.safe_load(Path(data_yaml).read_text(encoding="utf-8")) or {}
    named = data.get(JSON_KEY)
    if isinstance(named, Mapping):
        named = named.get(split)
    if not named:
        return None
    root = Path(data.get("path") or Path(data_yaml).parent)
    if not root.is_absolute():
        root = Path(data_yaml).parent / root
    path = Path(named) if Path(named).is_absolute() else root / named
    if not path.is_file():
        raise CocoError(f"{data_yaml} names the COCO annotations {path} ({JSON_KEY}), which do not exist: fix the path "
                        "or remove the key to use the YOLO labels")
    return path


def annotations_from_json(path: os.PathLike, images: Sequence[os.PathLike], names: Sequence[str]) -> Dict[str, Any]:
    """A user's COCO annotation file for ``images``: its images matched by file name, renumbered as
    :func:`annotations_from_yolo` numbers them, each category the class of its name in ``names``
    (:func:`classes_by_name`; ``info.category_ids`` holds the map), every annotation's ``bbox``, ``area``,
    ``iscrowd`` and segmentation kept."""
    import json

    try:
        given = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(given, dict):
            raise ValueError("not a JSON object with images, annotations, categories")
        return _from_json(path, given, images, names)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        what = f"has no {exc}" if isinstance(exc, KeyError) else f"is not readable ({str(exc).splitlines()[0]})"
        raise CocoError(f"the COCO annotations {path} ({JSON_KEY} of the data YAML) {what}: give a COCO instances "
                        f"JSON (images, annotations, categories) for this split, or remove {JSON_KEY} to use the "
                        "YOLO labels") from None


def _from_json(path: os.PathLike, given: Dict[str, Any], images: Sequence[os.PathLike],
               names: Sequence[str]) -> Dict[str, Any]:
    source = f"the COCO annotations {path} ({JSON_KEY} of the data YAML)"
    classes = classes_by_name([(c["id"], c["name"]) for c in given.get("categories", [])], names, source)
    by_name = {Path(i["file_name"]).name: i for i in given.get("images", [])}
    out: Dict[str, Any] = {"images": [], "annotations": [],
                           "categories": [{"id": i, "name": str(n)} for i, n in enumerate(names)],
                           "info": {"category_ids": classes}}
    ids: Dict[Any, int] = {}
    for index, image in enumerate(images, 1):
        info = by_name.get(Path(image).name)
        if info is None:
            raise CocoError(f"{path} has no image named {Path(image).name}: it does not describe this split")
        ids[info["id"]] = index
        out["images"].append({"id": index, "file_name": str(image), "width": info["width"], "height": info["height"]})
    for annotation in given.get("annotations", []):
        if annotation["image_id"] in ids:
            if annotation["category_id"] not in classes:
                raise CocoError(f"{source}: annotation {annotation.get('id')} has category_id "
                                f"{annotation['category_id']}, which is none of its categories "
                                f"({sorted(classes)}): fix the file, or remove {JSON_KEY} to use the YOLO labels")
            out["annotations"].append({**annotation, "id": len(out["annotations"]) + 1,
                                       "image_id": ids[annotation["image_id"]],
                                       "category_id": classes[annotation["category_id"]],
                                       "iscrowd": int(annotation.get("iscrowd", 0))})
    return out


def ground_truth(images: Sequence[os.PathLike], names: Sequence[str], data_yaml: Optional[os.PathLike] = None,
                 split: str = "val") -> Dict[str, Any]:
    """The COCO ground truth of ``images``: the file the data YAML names (``coco_json``), else made from the labels.
    ``info.source`` says which (and, for a file, ``info.category_ids`` its category id -> class map)."""
    named = named_json(data_yaml, split)
    truth = annotations_from_json(named, images, names) if named else annotations_from_yolo(images, names)
    truth["info"] = {**truth.get("info", {}),
                     "source": str(named) if named else "YOLO labels (iscrowd 0, image sizes from the files)"}
    return truth


def json_box(xyxy: Sequence[float]) -> List[float]:
    """A predicted box as the releases write it to predictions.json: float32 centre-size, then top-left
    ``[x, y, w, h]``, each rounded to 3 decimals (Python's ``round``)."""
    x1, y1, x2, y2 = (np.float32(v) for v in xyxy)
    w, h = x2 - x1, y2 - y1
    cx, cy = (x1 + x2) / np.float32(2), (y1 + y2) / np.float32(2)
    x, y = cx - w / np.float32(2), cy - h / np.float32(2)
    return [round(float(v), 3) for v in (x, y, w, h)]


def json_score(score: float) -> float:
    """A score as the releases write it to predictions.json (rounded to 5 decimals)."""
    return round(float(np.float32(score)), 5)


def predictions_json(detections: Iterable[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """COCO results from per-image detections (``image_id``, ``boxes`` xyxy, ``scores``, ``classes``), rounded
    as the releases round them."""
    out = []
    for image in detections:
        for box, score, cls in zip(np.asarray(image["boxes"]).reshape(-1, 4), image["scores"], image["classes"]):
            out.append({"image_id": int(image["image_id"]), "category_id": int(cls), "bbox": json_box(box),
                        "score": json_score(score)})
    return out


def _api(evaluator: str) -> Any:
    if evaluator == "pycocotools":
        try:
            from pycocotools.coco import COCO
            from pycocotools.cocoeval import COCOeval
        except ImportError:
            raise CocoError(f"pycocotools is not installed: {install_hint('coco')}") from None
        return COCO, COCOeval
    if evaluator == "faster-coco-eval":
        try:
            from faster_coco_eval import COCO, COCOeval_faster
        except ImportError:
            raise CocoError(f"faster-coco-eval is not installed: {install_hint('coco')}") from None
        return COCO, COCOeval_faster
    raise CocoError(f"unknown evaluator {evaluator!r}: choose one of {', '.join(EVALUATORS)}")


def score(ground_truth: Mapping[str, Any], predictions: Sequence[Mapping[str, Any]],
          evaluator: str = "faster-coco-eval", iou_type: str = "bbox") -> Dict[str, Any]:
    """The COCO API's twelve numbers for ``predictions`` against ``ground_truth`` (COCO dicts), labelled.

    Returns ``{"evaluator", "iou_type", "stats": {key: value}, "labels": {key: label}}``; without any
    prediction every AP and AR is 0 (the COCO API refuses an empty result list).
    """
    COCO, COCOeval = _api(evaluator)
    labels = dict(STATS)
    label = metric_labels.coco_label(evaluator, metric_labels.installed_version(evaluator), iou_type,
                                     (ground_truth.get("info") or {}).get("source"))
    if not predictions:
        return {"evaluator": evaluator, "iou_type": iou_type, "stats": {k: 0.0 for k, _ in STATS}, "labels": labels,
                "evaluator_label": label, "note": "no predictions: every AP and AR is 0"}
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink):
        gt = COCO()
        gt.dataset = copy.deepcopy(dict(ground_truth))
        gt.createIndex()
        dt = gt.loadRes([dict(p) for p in predictions])
        kwargs = {"print_function": lambda *a, **k: None} if evaluator == "faster-coco-eval" else {}
        ev = COCOeval(gt, dt, iou_type, **kwargs)
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    stats = [float(v) for v in np.asarray(ev.stats).reshape(-1)[:len(STATS)]]
    return {"evaluator": evaluator, "iou_type": iou_type, "stats": dict(zip((k for k, _ in STATS), stats)),
            "labels": labels, "evaluator_label": label}


def agreement(ground_truth: Mapping[str, Any], predictions: Sequence[Mapping[str, Any]],
              iou_type: str = "bbox") -> Dict[str, Any]:
    """Both implementations on the same predictions: each one's numbers and, per number, their difference
    (``identical`` None where there were no predictions: neither ran)."""
    results = {name: score(ground_truth, predictions, name, iou_type) for name in EVALUATORS}
    if not predictions:  # neither implementation ran: nothing was compared
        return {"evaluators": results, "identical": None, "differences": {}, "max_abs_difference": None,
                "label": "not compared: no predictions, neither COCO implementation ran"}
    a, b = (results[name]["stats"] for name in EVALUATORS)
    differences = {k: a[k] - b[k] for k in a if not (a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])))}
    return {"evaluators": results, "identical": not differences, "differences": differences,
            "max_abs_difference": max((abs(v) for v in differences.values()), default=0.0),
            "label": "faster-coco-eval minus pycocotools, per COCO number (empty: the same bits)"}


def agreement_text(agreement: Mapping[str, Any]) -> str:
    """faster-coco-eval against pycocotools, in words: the same bits, the largest difference, or not compared."""
    if agreement.get("identical") is None:
        return "not compared (no predictions: neither implementation ran)"
    if agreement["identical"]:
        return "agrees bit for bit"
    return f"differs by at most {agreement['max_abs_difference']:.3g}"


__all__ = ["ALIASES", "COCO_CATEGORIES", "EVALUATORS", "JSON_KEY", "STATS", "CocoError", "agreement",
           "annotations_from_json", "annotations_from_yolo", "classes_by_name", "ground_truth", "is_coco80",
           "name_key", "named_json", "image_size", "json_box",
           "agreement_text", "json_score", "label_path", "predictions_json", "read_labels", "score"]
