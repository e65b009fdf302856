"""Adapters between training programs and yolo-det's runtime.

``yolov5``: the calls a ``yolo-det apply-patch``-ed YOLOv5-family ``train.py`` makes.
``ultralytics``: Ultralytics YOLOv8/11 training under the same modes (trainers for every task, ``enable()``, the
tuner's search as a function of its seed).
``launch``: the environment ``yolo-det run`` gives its command (``bootstrap/sitecustomize.py``
on ``PYTHONPATH``), so Ultralytics training in it runs under yolo-det without code changes.
Shared by both: ``resume`` (exact resume: the state a checkpoint lacks, saved beside it; a folder by seam: files, the
kill-safe file protocol; state; cadence; policy; plumbing), ``revalidation``
(re-running a logged validation with the release's own code), ``coco_eval`` (``--evaluator coco``),
``metric_labels`` (the label of a release's own metric), ``label_caches`` (label caches that would train old
labels), ``torchrun`` (what torchrun tells the process it started).
Submodules are imported on demand, so importing one never imports another's framework.
"""
