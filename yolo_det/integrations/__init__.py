"""Adapters between training programs and yolo-det's runtime.

``yolov5``: the calls a ``yolo-det apply-patch``-ed YOLOv5-family ``train.py`` makes.
``ultralytics``: Ultralytics YOLOv8/11 training under the same modes (``DeterministicTrainer``).
Submodules are imported on demand, so importing one never imports another's framework.
"""
