"""Public import path of yolo-det's Ultralytics YOLOv8/11 integration.

    from yolo_det.ultralytics import DeterministicTrainer
    YOLO("yolov8n.yaml").train(data="data.yaml", trainer=DeterministicTrainer, deterministic="strict")

Importing this module imports Ultralytics; see :mod:`yolo_det.integrations.ultralytics`.
"""

from .integrations.ultralytics import (  # noqa: F401
    SUPPORTED,
    DeterminismMixin,
    DeterministicTrainer,
    ModeInputs,
    train,
)

__all__ = ["SUPPORTED", "DeterminismMixin", "DeterministicTrainer", "ModeInputs", "train"]
