"""Adapters between training programs and yolo-det's runtime.

``yolov5``: the calls a ``yolo-det apply-patch``-ed YOLOv5-family ``train.py`` makes.
``ultralytics``: Ultralytics YOLOv8/11 training under the same modes (trainers for every task, ``enable()``).
``ultralytics_tune``: the Ultralytics tuner's search as a function of its seed.
``launch``: the environment ``yolo-det run`` gives its command (``bootstrap/sitecustomize.py``
on ``PYTHONPATH``), so Ultralytics training in it runs under yolo-det without code changes.
``resume``: exact resume, a folder by seam (``files``: the kill-safe file protocol, ``state``, ``cadence``,
``policy``, ``plumbing``).
Submodules are imported on demand, so importing one never imports another's framework.
"""
