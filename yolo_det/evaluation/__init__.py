"""Evaluations: what one ran with, and whether a re-run gives the number training logged.

``settings`` holds the settings of one evaluation (a training-time validation or a standalone
``val.py`` / ``yolo val``), the same keys for every release; ``logged`` finds a run's logged
validation and holds a re-run's record against it, naming what changed; ``parity`` compares an
exported model (ONNX, OpenVINO) with its ``.pt`` on the same tensors and names the causes of a difference. The re-run itself runs the
training program's own code (:mod:`yolo_det.integrations.revalidation`). Imports ``core``, ``record``, ``proof``.
"""
