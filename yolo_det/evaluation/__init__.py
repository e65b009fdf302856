"""Evaluations: what one ran with, and whether a re-run gives the number training logged.

``settings`` holds the settings of one evaluation (a training-time validation or a standalone
``val.py`` / ``yolo val``), the same keys for every release; ``logged`` finds a run's logged
validation and holds a re-run's record against it, naming what changed. The re-run itself runs the
training program's own code (:mod:`yolo_det.integrations.revalidation`). ``coco`` scores predictions with
the COCO API (faster-coco-eval, pycocotools) against annotations made from YOLO labels; ``gap`` explains the
release's number against the COCO API's one rule at a time. Imports ``core``, ``record``, ``proof``.
"""
