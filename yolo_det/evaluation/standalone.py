"""A ``predictions.json`` scored against a YOLO-format data YAML: ``yolo-det val --predictions P.json --data D.yaml``.

The images of the split are listed as the releases list them (a folder, searched recursively, or a ``.txt`` of
image paths; sorted), the COCO annotations made from their label files (:mod:`yolo_det.evaluation.coco`), the
predictions' ``image_id`` matched to the image by file stem (the releases write ``int(stem)`` or ``stem``) and
their ``category_id`` mapped to the YOLO class in the scheme that wrote it (the class index, the index + 1, or
COCO's category ids: :mod:`yolo_det.evaluation.categories`). Both COCO implementations score them, and the gap from
each release family's rules applied to the same rounded predictions is walked one rule at a time
(:mod:`yolo_det.evaluation.gap`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import categories, coco, gap
from ..core.data_manifest import IMAGE_SUFFIXES
from ..record.run_folder import REPORT_NAME


def _unreadable(option: str, path: Path, exc: BaseException, what: str, kind: str) -> coco.CocoError:
    """A bad input file as a usage error that names the option, what is wrong and what to give instead."""
    if isinstance(exc, FileNotFoundError):
        problem = "does not exist"
    elif isinstance(exc, IsADirectoryError):
        problem = "is a folder, not a file"
    elif isinstance(exc, PermissionError):
        problem = "cannot be read (permission denied)"
    elif isinstance(exc, UnicodeDecodeError):
        problem = "is not text (UTF-8)"
    elif isinstance(exc, OSError):
        problem = f"cannot be read ({exc.strerror or exc})"
    else:
        problem = f"is not valid {kind} ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    return coco.CocoError(f"{option} {path} {problem}: give {what}")


DATA_WHAT = "the YOLO data YAML the predictions were made on (path, names, and the split's images)"
PREDICTIONS_WHAT = ("JSON of a COCO results list, as val.py --save-json or save_json=True write it "
                    "([{image_id, category_id, bbox, score}, ...])")


def read_data(data_yaml: os.PathLike) -> Dict[str, Any]:
    """The data YAML as a mapping; a missing, unreadable or malformed file is a :class:`CocoError` naming --data."""
    import yaml

    data_yaml = Path(data_yaml)
    try:
        data = yaml.safe_load(data_yaml.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise _unreadable("--data", data_yaml, exc, DATA_WHAT, "YAML") from None
    if not isinstance(data, dict):
        raise coco.CocoError(f"--data {data_yaml} is not a YAML mapping (keys path, train, val, names): give "
                             f"{DATA_WHAT}")
    if not data.get("names"):
        raise coco.CocoError(f"--data {data_yaml} has no class names: give them in class order (names: [...])")
    return data


def split_images(data_yaml: os.PathLike, split: str = "val") -> Tuple[List[Path], List[str]]:
    """(image files of ``split``, class names) of a YOLO data YAML."""
    data_yaml = Path(data_yaml)
    data = read_data(data_yaml)
    names = data.get("names") or []
    names = [names[k] for k in sorted(names)] if isinstance(names, dict) else list(names)
    files: List[Path] = []
    for where in split_entries(data_yaml, split, data):
        if where.is_dir():
            files += [p for p in where.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES]
        elif where.suffix == ".txt" and where.is_file():
            for line in where.read_text(encoding="utf-8").splitlines():
                line = line.strip()
                if line:
                    files.append(Path(line) if Path(line).is_absolute() else (where.parent / line).resolve())
        else:
            raise coco.CocoError(f"{where} (split {split!r} of --data {data_yaml}) is neither a folder nor a .txt "
                                 "list of images: fix the path in the data YAML (relative to its 'path:')")
    if not files:
        raise coco.CocoError(f"split {split!r} of --data {data_yaml} has no images: give the data YAML and --split "
                             "the predictions were made on")
    return sorted(set(files)), names


def split_entries(data_yaml: os.PathLike, split: str = "val", data: Optional[Mapping[str, Any]] = None) -> List[Path]:
    """The folders or ``.txt`` lists a data YAML gives for ``split``, as paths (relative ones under its ``path:``)."""
    data_yaml = Path(data_yaml)
    data = read_data(data_yaml) if data is None else data
    if split not in data:
        raise coco.CocoError(f"--data {data_yaml} has no {split!r} split: give --split one of "
                             f"{', '.join(k for k in ('train', 'val', 'test') if k in data) or 'train/val/test'} "
                             "(the split the predictions were made on)")
    root = Path(data.get("path") or data_yaml.parent)
    if not root.is_absolute():
        root = (data_yaml.parent / root).resolve()
    entries = data[split] if isinstance(data[split], list) else [data[split]]
    return [Path(entry) if Path(entry).is_absolute() else root / entry for entry in entries]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


def _row_problem(r: Any) -> Optional[str]:
    """What makes ``r`` no detection row as the releases write one, or None."""
    if not isinstance(r, dict):
        return f"a {type(r).__name__}, not an object"
    missing = [k for k in ("image_id", "category_id", "bbox", "score") if k not in r]
    if missing:
        return f"no {', no '.join(missing)}"
    image_id = r["image_id"]
    if not (isinstance(image_id, str) or (_is_number(image_id) and math.isfinite(image_id)
                                          and float(image_id).is_integer())):
        return f"image_id {_shown(image_id)} is neither a whole number nor a text (the image's file stem)"
    if not _is_number(r["category_id"]):
        return f"category_id {_shown(r['category_id'])} is not a number"
    box = r["bbox"]
    if not (isinstance(box, list) and len(box) == 4 and all(_finite(v) for v in box)):
        return f"bbox {_shown(box)} is not 4 finite numbers [x, y, w, h]"
    if box[2] < 0 or box[3] < 0:
        return f"bbox {_shown(box)} has a negative width or height"
    if not _finite(r["score"]):
        return f"score {_shown(r['score'])} is not a finite number"
    if "file_name" in r and not isinstance(r["file_name"], str):
        return f"file_name {_shown(r['file_name'])} is not a text"
    return None


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _image_keys(files: Sequence[Path]) -> Dict[Any, List[int]]:
    """Each ``image_id`` a release writes for the split's images (``int(stem)`` where numeric, else ``stem``) ->
    the images (position + 1) that get it: two images of one stem in two folders get one id."""
    keys: Dict[Any, List[int]] = {}
    for index, file in enumerate(files, 1):
        stem = file.stem
        keys.setdefault(int(stem) if stem.isnumeric() else stem, []).append(index)
        if stem.isnumeric():
            keys.setdefault(stem, []).append(index)
    return keys


def read_predictions(path: os.PathLike, files: Sequence[Path]) -> Tuple[list, bool]:
    """The rows of a predictions.json with ``image_id`` as our id (position + 1), ``category_id`` as written (an
    integer; :func:`map_categories` makes it the class), and whether the rows carry ``file_name`` (Ultralytics).
    A row of an ``image_id`` two images of the split share (one stem in two folders) is matched by its
    ``file_name`` where that tells them apart, else refused: the file cannot say which image it is."""
    try:
        rows = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _unreadable("--predictions", Path(path), exc, PREDICTIONS_WHAT, "JSON") from None
    if not isinstance(rows, list):
        raise coco.CocoError(f"--predictions {path} is not a COCO results list: give {PREDICTIONS_WHAT}")
    for number, r in enumerate(rows):
        problem = _row_problem(r)
        if problem is not None:
            raise coco.CocoError(f"--predictions {path}: row {number} is not a detection ({problem}): "
                                 f"{_shown(r, 120)}: give {PREDICTIONS_WHAT}")
    category_ids = categories.integer_ids((r["category_id"] for r in rows), f"--predictions {path}")
    keys = _image_keys(files)
    out, unknown, shared = [], set(), {}
    for r, category_id in zip(rows, category_ids):
        key = r["image_id"]
        key = int(key) if not isinstance(key, str) else key
        images = keys.get(key) or (keys.get(str(key)) if not isinstance(key, str) else None)
        if not images:
            unknown.add(key)
            continue
        if len(images) > 1:
            named = [i for i in images if "file_name" in r and files[i - 1].name == Path(r["file_name"]).name]
            if len(named) != 1:
                shared.setdefault(key, images)
                continue
            images = named
        out.append({"image_id": images[0], "category_id": category_id, "bbox": list(r["bbox"]),
                    "score": float(r["score"])})
    if unknown:
        raise coco.CocoError(f"{len(unknown)} image_id(s) of --predictions {path} are no image of the split "
                             f"(e.g. {sorted(map(str, unknown))[:3]}): give the data YAML and split it was made on")
    if shared:
        key, images = next(iter(shared.items()))
        raise coco.CocoError(
            f"--predictions {path}: image_id {key!r} is {len(images)} images of the split "
            f"({', '.join(str(files[i - 1]) for i in images[:3])}): the releases write the file's stem as its "
            f"image_id, so images of one stem in two folders get one id and the file cannot say which image a row "
            f"is ({len(shared)} such id(s)); rows with a file_name that tells them apart are matched by it. Give "
            "the images stems unique across the split's folders and predict again, or score each folder on its "
            "own (a data YAML whose split is that folder)")
    return out, any("file_name" in r for r in rows)


def map_categories(rows: list, names: Sequence[str], truth: Mapping[str, Any], predictions: os.PathLike,
                   entries: Sequence[Path], file_name: bool, choice: str = "auto", split_value: Any = None,
                   yolov5_val: Optional[Path] = None) -> categories.Scheme:
    """Find the scheme of the rows' category ids (:func:`categories.resolve`) and make each the YOLO class, in place.
    ``split_value``: the split as the data YAML writes it (a list is no COCO split to the releases); ``yolov5_val``:
    the data's ``val`` path where it is one (YOLOv5 decides COCO on it, whatever the split)."""
    info = truth.get("info") or {}
    source = (f"the category ids of coco_json {info['source']}" if info.get("category_ids") is not None
              else "COCO's 91-id table")
    coco_writers = categories.coco_writers(entries, split_value, yolov5_val)
    scheme = categories.resolve((r["category_id"] for r in rows), names, f"--predictions {predictions}",
                                categories.coco_table(names, info), source, file_name, coco_writers, choice,
                                recorded_writer(predictions))
    for r in rows:
        r["category_id"] = scheme.mapping[r["category_id"]]
    return scheme


#: The run report a yolo-det run folder holds beside the predictions.json its training wrote.


def recorded_writer(predictions: os.PathLike) -> Optional[Tuple[str, str]]:
    """The writer of ``predictions`` as the run folder holding it records it (:func:`categories.recorded_writer` of
    its ``determinism.json``), None where there is none or it names no writer."""
    report = Path(predictions).parent / REPORT_NAME
    try:
        return categories.recorded_writer(json.loads(report.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None


def evaluate_file(predictions: os.PathLike, data_yaml: os.PathLike, split: str = "val",
                  category_ids: str = "auto") -> Dict[str, Any]:
    """Both COCO implementations on ``predictions`` and, per release family, the gap from its rules; labelled.
    ``category_ids``: the scheme of the file's category ids (:data:`categories.CHOICES`; ``auto`` finds it)."""
    files, names = split_images(data_yaml, split)
    truth = coco.ground_truth(files, names, data_yaml, split)
    rows, file_name = read_predictions(predictions, files)
    data = read_data(data_yaml)
    val = split_entries(data_yaml, "val", data) if isinstance(data.get("val"), str) else None
    scheme = map_categories(rows, names, truth, predictions, split_entries(data_yaml, split, data), file_name,
                            category_ids, data.get(split), val[0].resolve() if val else None)
    agreement = coco.agreement(truth, rows)
    reference = agreement["evaluators"]["pycocotools"]["stats"]
    number = {"mAP50": reference["AP50"], "mAP50-95": reference["AP"]}
    detections = []
    for image_id in range(1, len(files) + 1):
        mine = [r for r in rows if r["image_id"] == image_id]
        xywh = np.array([r["bbox"] for r in mine], dtype=np.float64).reshape(-1, 4)
        scores = np.array([r["score"] for r in mine], dtype=np.float64)
        order = np.argsort(-scores, kind="mergesort")  # the releases list an image's detections by score
        detections.append({"image_id": image_id, "json_xywh": xywh[order], "json_scores": scores[order],
                           "boxes": np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1)[order],
                           "scores": scores[order], "classes": np.array([r["category_id"] for r in mine])[order]})
    images = gap.case_from(truth, detections)
    gaps = {}
    for release in ("yolov5", "ultralytics"):
        start = dataclasses.replace(gap.release_rules(release), predictions="json", truth="annotations",
                                    classes="annotations")
        gaps[release] = gap.explain(images, start, number)
        gaps[release]["labels"]["start"] = (f"{release}'s rules applied to these rounded predictions and the "
                                            "annotations (the release's logged number needs its unrounded boxes: "
                                            "yolo-det val RUN_DIR --evaluator coco)")
    return {"predictions_file": str(predictions), "data": str(data_yaml), "split": split, "images": len(files),
            "predictions": len(rows), "category_offset": {"class": 0, "class+1": 1}.get(scheme.name),
            "category_ids": scheme.to_json(), "ground_truth": truth["info"]["source"],
            "coco_metrics": {**number, "label": "the COCO API (pycocotools COCOeval, bbox, area all, maxDets 100) on "
                                                f"the annotations of {truth['info']['source']}",
                             "evaluator": agreement["evaluators"]["pycocotools"]["evaluator_label"]},
            "coco": agreement["evaluators"]["pycocotools"], "agreement": agreement, "gap": gaps}


__all__ = ["REPORT_NAME", "evaluate_file", "map_categories", "read_data", "read_predictions", "recorded_writer",
           "split_entries", "split_images"]
