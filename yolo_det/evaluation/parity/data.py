"""The images parity feeds both models, as the validators load them: a data YAML's (or a folder's) validation
images and labels, resized and letterboxed (square, or the rect canvas `yolo val` uses), as float32 tensors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

from ...core.data_manifest import IMAGE_SUFFIXES
from .export import ParityInputError




def load_image(file: Path, imgsz: int) -> Tuple[np.ndarray, Tuple[int, int]]:
    """BGR image resized so its long side is ``imgsz`` (area when shrinking), as the validators load it."""
    import cv2

    img = cv2.imread(str(file))
    if img is None:
        raise ParityInputError(f"{file}: not a readable image")
    h0, w0 = img.shape[:2]
    r = imgsz / max(h0, w0)
    if r != 1:
        interp = cv2.INTER_LINEAR if r > 1 else cv2.INTER_AREA
        img = cv2.resize(img, (min(round(w0 * r), imgsz), min(round(h0 * r), imgsz)), interpolation=interp)
    return img, (h0, w0)


def rect_shape(hw: Tuple[int, int], imgsz: int, stride: int) -> Tuple[int, int]:
    """The canvas a rectangular validation (batch 1) pads an image to: a stride multiple, half a stride of margin."""
    h, w = hw
    shape = np.ceil(np.array([h, w]) / max(h, w) * imgsz / stride + 0.5).astype(int) * stride
    return int(shape[0]), int(shape[1])


def pad_to(img: np.ndarray, shape: Tuple[int, int]) -> Tuple[np.ndarray, float, Tuple[float, float]]:
    """Letterbox ``img`` into ``shape`` (no upscaling, centred, grey 114): the canvas, the scale and the padding."""
    import cv2

    h, w = img.shape[:2]
    r = min(shape[0] / h, shape[1] / w, 1.0)
    nh, nw = round(h * r), round(w * r)
    if (nh, nw) != (h, w):
        img = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_LINEAR)
    dh, dw = (shape[0] - nh) / 2, (shape[1] - nw) / 2
    top, bottom = round(dh - 0.1), round(dh + 0.1)
    left, right = round(dw - 0.1), round(dw + 0.1)
    img = cv2.copyMakeBorder(img, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(114, 114, 114))
    return img, r, (left, top)


def to_tensor(img: np.ndarray, batch: int = 1) -> np.ndarray:
    """BGR HWC uint8 -> RGB NCHW float32 in [0, 1], repeated to ``batch``."""
    x = np.ascontiguousarray(img[..., ::-1].transpose(2, 0, 1), dtype=np.float32) / 255.0
    return np.repeat(x[None], max(batch, 1), axis=0)


def _images_and_labels(data: os.PathLike, limit: int) -> List[Tuple[Path, Optional[Path]]]:
    """The validation images of a data YAML (or an image folder) and their label files where they exist."""
    import yaml

    data = Path(data)
    if data.is_dir():
        sources, root = [data], data
    else:
        if not data.exists():
            raise ParityInputError(f"{data}: no such data YAML or image folder")
        cfg = yaml.safe_load(data.read_text()) or {}
        root = Path(cfg.get("path") or data.parent)
        if not root.is_absolute():
            root = (data.parent / root).resolve()
        val = cfg.get("val") or cfg.get("test")
        if not val:
            raise ParityInputError(f"{data}: no 'val' entry")
        sources = [root / v for v in (val if isinstance(val, list) else [val])]
    files: List[Path] = []
    for s in sources:
        if s.is_dir():
            files += sorted(p for p in s.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        elif s.suffix == ".txt" and s.exists():
            files += [(root / line.strip()).resolve() for line in s.read_text().splitlines() if line.strip()]
        elif s.exists():
            files.append(s)
    if not files:
        raise ParityInputError(f"{data}: no validation images found")
    out = []
    for f in files[:limit]:
        parts = list(f.parts)
        label = None
        if "images" in parts:
            i = len(parts) - 1 - parts[::-1].index("images")
            label = Path(*parts[:i], "labels", *parts[i + 1:]).with_suffix(".txt")
        out.append((f, label if label is not None and label.exists() else None))
    return out


def _labels(file: Optional[Path], hw: Tuple[int, int]) -> Optional[np.ndarray]:
    """``(n, 5)`` [cls, x1, y1, x2, y2] in pixels of the original image; polygons reduced to their box."""
    if file is None:
        return None
    h, w = hw
    rows = []
    for line in file.read_text().splitlines():
        v = [float(x) for x in line.split()]
        if len(v) < 5:
            continue
        if len(v) > 5 and (len(v) - 1) % 2 == 0 and len(v) > 7:  # polygon
            xs, ys = np.array(v[1::2]) * w, np.array(v[2::2]) * h
            rows.append([v[0], xs.min(), ys.min(), xs.max(), ys.max()])
        else:
            x, y, bw, bh = v[1] * w, v[2] * h, v[3] * w, v[4] * h
            rows.append([v[0], x - bw / 2, y - bh / 2, x + bw / 2, y + bh / 2])
    return np.array(rows, np.float32).reshape(-1, 5)


@dataclass
class _Image:
    """One validation image as parity feeds it: loaded, letterboxed square into the export's input, its labels."""

    n: int
    file: Path
    img: np.ndarray
    hw0: Tuple[int, int]
    x: np.ndarray
    r: float
    pad: Tuple[float, float]
    gt: Optional[np.ndarray]


__all__ = ["IMAGE_SUFFIXES", "load_image", "pad_to", "rect_shape", "to_tensor"]
