"""Public import path of yolo-det's Ultralytics integration (YOLOv8/11, every task, RT-DETR).

    import yolo_det.ultralytics
    yolo_det.ultralytics.enable()                  # every model.train() from now on uses yolo-det
    YOLO("yolov8n-seg.yaml").train(data="data.yaml", deterministic="strict")

    from yolo_det.ultralytics import DeterministicTrainer
    YOLO("yolov8n.yaml").train(data="data.yaml", trainer=DeterministicTrainer, deterministic="strict")

Importing this module imports Ultralytics; see :mod:`yolo_det.integrations.ultralytics`.
"""

from .integrations.ultralytics.trainer import (  # noqa: F401
    SUPPORTED,
    TRAINERS,
    DeterminismMixin,
    DeterministicClassificationTrainer,
    DeterministicOBBTrainer,
    DeterministicPoseTrainer,
    DeterministicRTDETRTrainer,
    DeterministicSegmentationTrainer,
    DeterministicTrainer,
    ModeInputs,
    deterministic_trainer,
    disable,
    enable,
    enabled,
    train,
)

__all__ = [
    "SUPPORTED", "TRAINERS", "DeterminismMixin", "DeterministicClassificationTrainer", "DeterministicOBBTrainer",
    "DeterministicPoseTrainer", "DeterministicRTDETRTrainer", "DeterministicSegmentationTrainer",
    "DeterministicTrainer", "ModeInputs", "deterministic_trainer", "disable", "enable", "enabled", "train",
]
