"""The YOLOv5 family (ultralytics/yolov5 v5.0 ... master, PyPI ``yolov5``, yolov7, FFCA-YOLO) under yolo-det.

``script``: the calls a ``yolo-det apply-patch``-ed ``train.py`` makes; ``tree``: the patched tree as Python runs
it (its checkpoints' loads on this torch, patched modules shadowed by an installed copy); ``world``: its world-size
invariance (virtual ranks, micro-batches); ``evaluation``: the calls a patched ``val.py``/``test.py``/
``detect.py`` makes; ``export``: the calls a patched ``export.py`` makes (the TorchScript ONNX exporter,
provenance written into the artifacts). Patched scripts import this package (``from yolo_det.integrations import yolov5``,
a stable path) and reach ``script``'s functions through it.
"""

from __future__ import annotations

import importlib


def __getattr__(name: str):
    """Every name of :mod:`.script` (what patched scripts call), looked up there at each use."""
    if name.startswith("__"):  # probes such as __wrapped__ or __path__ lookups load nothing
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in ("script", "tree", "world", "evaluation", "export"):
        return importlib.import_module(f".{name}", __name__)
    if name in ("torch_for_export", "exports_done"):
        return getattr(importlib.import_module(".export", __name__), name)
    return getattr(importlib.import_module(".script", __name__), name)
