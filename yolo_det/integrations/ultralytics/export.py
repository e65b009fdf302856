"""Ultralytics ``model.export`` / ``yolo export`` under yolo-det: the export, then its provenance written in.

``export(model, **kwargs)`` calls Ultralytics' own ``YOLO(model).export(**kwargs)`` and records in the artifact
(ONNX ``metadata_props``, OpenVINO ``rt_info`` and ``metadata.yaml``) and beside it which checkpoint it came from
(its weight digest), the run, yolo-det's mode, the versions and every export argument, defaults included.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Tuple

from ...record import export_provenance


def export(model: os.PathLike, **kwargs: Any) -> Tuple[Path, Dict[str, str]]:
    """Export ``model`` (a .pt) like ``YOLO(model).export(**kwargs)``; return the artifact and where provenance went."""
    from ultralytics import YOLO

    yolo = YOLO(str(model))
    artifact = Path(yolo.export(**kwargs))
    return artifact, record_provenance(model, artifact, kwargs)


def record_provenance(model: os.PathLike, artifact: os.PathLike, kwargs: Dict[str, Any]) -> Dict[str, str]:
    """Write into ``artifact`` (and beside it) which checkpoint ``model`` it was exported from and with which
    arguments; return where it went. Called after ``yolo-det ultralytics export`` and, under ``yolo-det run``,
    after every ``model.export()`` / ``yolo export`` (the launch bootstrap's hook)."""
    artifact = Path(artifact)
    args = _effective_args(kwargs)
    record = export_provenance.build(model, args, exporter=f"ultralytics {_version()}", opset=_onnx_opset(artifact))
    return export_provenance.embed(artifact, record)


def _effective_args(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """Every export argument as the exporter saw it: Ultralytics' defaults overlaid with the given ones."""
    from . import api

    defaults = api.default_cfg_dict()
    keys = ("format", "imgsz", "batch", "dynamic", "simplify", "opset", "quantize", "half", "int8", "nms", "conf",
            "iou", "max_det", "agnostic_nms", "device", "data", "fraction", "optimize", "keras", "workspace")
    args = {k: defaults.get(k) for k in keys if k in defaults}
    args.update(kwargs)
    if args.get("nms") and args.get("conf") is None:
        args["conf"] = 0.25  # the exporter's own default for a graph with NMS inside
    return args


def _onnx_opset(artifact: Path):
    if artifact.suffix != ".onnx":
        return None
    import onnx

    model = onnx.load(str(artifact), load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def _version() -> str:
    from importlib import metadata

    return metadata.version("ultralytics")
