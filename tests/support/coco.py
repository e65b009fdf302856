"""Random COCO cases (a ground truth and detections near and far from it) and the COCO API's numbers for them."""

from __future__ import annotations

import numpy as np
import pytest

from yolo_det.evaluation import coco

pytest.importorskip("pycocotools")  # as where these were first written: a reader without it skips


def random_case(seed: int, n_images: int = 6, nc: int = 3, crowd: bool = True, crowded_image: bool = True):
    """A COCO ground truth (a class without objects, some crowds) and per-image detections near and far from it."""
    rng = np.random.default_rng(seed)
    truth = {"images": [], "annotations": [], "categories": [{"id": i, "name": f"c{i}"} for i in range(nc + 1)]}
    detections = []
    for i in range(n_images):
        width, height = 320, 240
        truth["images"].append({"id": i + 1, "width": width, "height": height, "file_name": f"{i}.jpg"})
        boxes, scores, classes = [], [], []
        for _ in range(rng.integers(0, 8)):
            x, y, w, h = rng.uniform(0, width - 60), rng.uniform(0, height - 60), rng.uniform(5, 60), rng.uniform(5, 60)
            c = int(rng.integers(0, nc))
            truth["annotations"].append({"id": len(truth["annotations"]) + 1, "image_id": i + 1, "category_id": c,
                                         "bbox": [x, y, w, h], "area": w * h,
                                         "iscrowd": int(crowd and rng.random() < 0.15)})
            for _ in range(rng.integers(0, 4)):
                j = rng.normal(0, 0.08 * min(w, h), 4)
                boxes.append([x + j[0], y + j[1], x + w + abs(j[2]), y + h + abs(j[3])])
                scores.append(rng.random())
                classes.append(c if rng.random() < 0.8 else int(rng.integers(0, nc)))
        for _ in range(rng.integers(0, 130 if (i == 0 and crowded_image) else 10)):  # > 100 of a class on image 1
            x, y = rng.uniform(0, width - 40), rng.uniform(0, height - 40)
            boxes.append([x, y, x + rng.uniform(2, 40), y + rng.uniform(2, 40)])
            scores.append(rng.random() * 0.5)
            classes.append(int(rng.integers(0, nc)))
        order = np.argsort(-np.array(scores, dtype=np.float32), kind="stable")  # NMS outputs by score
        detections.append({"image_id": i + 1, "boxes": np.array(boxes, np.float32).reshape(-1, 4)[order],
                           "scores": np.array(scores, np.float32)[order], "classes": np.array(classes)[order]})
    return truth, detections


def coco_api(truth, detections, evaluator="pycocotools"):
    stats = coco.score(truth, coco.predictions_json(detections), evaluator)["stats"]
    return {"mAP50": stats["AP50"], "mAP50-95": stats["AP"]}
