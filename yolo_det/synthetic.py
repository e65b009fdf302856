"""Synthetic datasets (detection, segmentation, pose, OBB, classification) and an offline environment,
for demos, tests and benchmarks.

Nothing here downloads: images are drawn with numpy/OpenCV, and :func:`offline_env` gives
YOLOv5 and Ultralytics the font file and settings they would otherwise fetch.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Dict, Optional

import numpy as np

CLASS_NAMES = ("box", "disc")


def _draw(rng: np.random.Generator, imgsz: int, nc: int):
    """An image and its shapes as (class, x0, y0, w, h) in pixels; even classes are rectangles."""
    import cv2

    img = (rng.integers(0, 40, size=(imgsz, imgsz, 3)) + rng.integers(60, 160, size=3)).astype(np.uint8)
    shapes = []
    for _ in range(int(rng.integers(1, 4))):
        cls = int(rng.integers(0, nc))
        w, h = (rng.uniform(0.15, 0.45, size=2) * imgsz).astype(int)
        x0 = int(rng.integers(0, imgsz - w))
        y0 = int(rng.integers(0, imgsz - h))
        color = tuple(int(c) for c in rng.integers(0, 256, size=3))
        if cls % 2 == 0:
            cv2.rectangle(img, (x0, y0), (x0 + w, y0 + h), color, thickness=-1)
        else:
            cv2.ellipse(img, (x0 + w // 2, y0 + h // 2), (w // 2, h // 2), 0, 0, 360, color, thickness=-1)
        shapes.append((cls, x0, y0, int(w), int(h)))
    return img, shapes


#: Keypoints of the synthetic pose labels: left middle, right middle, centre of each shape.
POSE_KPT_SHAPE = (3, 3)
POSE_FLIP_IDX = (1, 0, 2)
LABELS = ("box", "segment", "pose", "obb")


def _label(shape: tuple, imgsz: int, segments: bool, labels: str = "box") -> str:
    """One YOLO label line, all normalized: ``class x y w h`` (box); with ``segments`` (or
    ``labels='segment'``) ``class x1 y1 x2 y2 ...`` (a rectangle's 4 corners, an ellipse's 24
    outline points); ``pose``: the box and 3 visible keypoints; ``obb``: the 4 corners of the box."""
    cls, x0, y0, w, h = shape
    if segments:
        labels = "segment"
    box = f"{cls} {(x0 + w / 2) / imgsz:.6f} {(y0 + h / 2) / imgsz:.6f} {w / imgsz:.6f} {h / imgsz:.6f}"
    if labels == "box":
        return box
    if labels == "pose":
        points = [(x0, y0 + h / 2), (x0 + w, y0 + h / 2), (x0 + w / 2, y0 + h / 2)]
        return box + "".join(f" {x / imgsz:.6f} {y / imgsz:.6f} 2" for x, y in points)
    if labels == "obb" or cls % 2 == 0:
        points = [(x0, y0), (x0 + w, y0), (x0 + w, y0 + h), (x0, y0 + h)]
    else:
        angles = np.linspace(0, 2 * np.pi, 24, endpoint=False)
        points = list(zip(x0 + w / 2 * (1 + np.cos(angles)), y0 + h / 2 * (1 + np.sin(angles))))
    return f"{cls} " + " ".join(f"{x / imgsz:.6f} {y / imgsz:.6f}" for x, y in points)


def make_dataset(root: os.PathLike, n_train: int = 16, n_val: int = 8, imgsz: int = 128,
                 nc: int = 2, seed: int = 0, segments: bool = False, labels: str = "box") -> Path:
    """Write a YOLO-format dataset (images, labels, ``data.yaml``) under ``root``; return the yaml.

    Same arguments, same bytes. Classes alternate between filled rectangles and ellipses.
    ``segments``: polygon labels (YOLO segmentation format) instead of boxes, same images.
    ``labels``: ``box``, ``segment``, ``pose`` (3 keypoints per shape) or ``obb`` (4 corners).
    """
    import cv2
    import yaml

    if not 1 <= nc <= len(CLASS_NAMES):
        raise ValueError(f"nc must be 1..{len(CLASS_NAMES)}, got {nc}")
    if labels not in LABELS:
        raise ValueError(f"labels must be one of {', '.join(LABELS)}, got {labels!r}")
    root = Path(root)
    rng = np.random.default_rng(seed)
    for split, count in (("train", n_train), ("val", n_val)):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            img, shapes = _draw(rng, imgsz, nc)
            cv2.imwrite(str(root / "images" / split / f"{split}_{i:04d}.png"), img)
            lines = [_label(shape, imgsz, segments, labels) for shape in shapes]
            (root / "labels" / split / f"{split}_{i:04d}.txt").write_text("\n".join(lines) + "\n")
    data = {
        "path": str(root.resolve()),
        "train": "images/train",
        "val": "images/val",
        "nc": nc,
        "names": {i: CLASS_NAMES[i] for i in range(nc)},
    }
    if labels == "pose":
        data.update(kpt_shape=list(POSE_KPT_SHAPE), flip_idx=list(POSE_FLIP_IDX))
    path = root / "data.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def make_classify_dataset(root: os.PathLike, n_train: int = 16, n_val: int = 8, imgsz: int = 64,
                          nc: int = 2, seed: int = 0) -> Path:
    """Write an image-classification dataset (``train/<class>/*.png``, ``val/<class>/*.png``); return ``root``.

    Each image shows one shape; its class (rectangle or ellipse) is the label. Same arguments, same bytes.
    """
    import cv2

    if not 1 <= nc <= len(CLASS_NAMES):
        raise ValueError(f"nc must be 1..{len(CLASS_NAMES)}, got {nc}")
    root = Path(root)
    rng = np.random.default_rng(seed)
    for split, count in (("train", n_train), ("val", n_val)):
        for i in range(count):
            cls = i % nc
            while True:
                img, shapes = _draw(rng, imgsz, 2)
                if shapes[0][0] % 2 == cls:
                    break
            folder = root / split / CLASS_NAMES[cls]
            folder.mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(folder / f"{split}_{i:04d}.png"), img)
    return root.resolve()


def make_task_dataset(root: os.PathLike, task: str, **kwargs) -> Path:
    """The ``data=`` of a synthetic dataset for an Ultralytics task: detect, segment, pose, obb or classify."""
    if task == "classify":
        return make_classify_dataset(root, **kwargs)
    labels = {"detect": "box", "segment": "segment", "pose": "pose", "obb": "obb"}.get(task)
    if labels is None:
        raise ValueError(f"task must be one of detect, segment, pose, obb, classify, got {task!r}")
    return make_dataset(root, labels=labels, **kwargs)


def _font_source() -> Optional[Path]:
    try:
        import matplotlib

        path = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
        return path if path.is_file() else None
    except Exception:
        return None


#: What a shell needs to train YOLOv5 / Ultralytics with no network (``yolo-det env --exports --offline``): the
#: settings folders holding the font, auto-install and online checks off. Not the full checkpoint loads of
#: :func:`offline_env`: a patched train.py turns those on for itself (docs/patch.md).
OFFLINE_EXPORTS = ("YOLOV5_CONFIG_DIR", "YOLO_CONFIG_DIR", "YOLOv5_AUTOINSTALL", "YOLO_AUTOINSTALL", "YOLO_OFFLINE",
                   "HF_HUB_OFFLINE", "MLFLOW_DISABLE_TELEMETRY")


def offline_env(config_dir: os.PathLike, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Environment for training YOLOv5 / Ultralytics with no network, configs under ``config_dir``.

    Puts a TTF font where both look for ``Arial.ttf`` (else they try to download it), turns
    off auto-install, online checks and the trackers' telemetry, and allows YOLOv5 7.0's full checkpoint loads on
    torch >= 2.6.
    """
    config_dir = Path(config_dir)
    config_dir.mkdir(parents=True, exist_ok=True)
    font = _font_source()
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):
        target = config_dir / name
        if font is not None and not target.exists():
            shutil.copyfile(font, target)
    env = dict(os.environ if base is None else base)
    env.update({
        "YOLOV5_CONFIG_DIR": str(config_dir),
        "YOLO_CONFIG_DIR": str(config_dir),
        "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1",
        "YOLOv5_AUTOINSTALL": "false",
        "YOLO_AUTOINSTALL": "false",
        "YOLO_OFFLINE": "1",
        "MPLBACKEND": "Agg",
        "WANDB_MODE": "disabled",
        "COMET_MODE": "disabled",
        "CLEARML_OFFLINE_MODE": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",  # its telemetry thread asks a server at start and sends records
        "HF_HUB_OFFLINE": "1",
    })
    return env
