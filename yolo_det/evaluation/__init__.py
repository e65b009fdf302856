"""Evaluations: what one ran with, its re-run against the logged one, a second evaluator, export parity.

``settings`` holds the settings of one evaluation (a training-time validation or a standalone
``val.py`` / ``yolo val``), the same keys for every release; ``logged`` finds a run's logged
validation and holds a re-run's record against it, naming what changed. The re-run itself runs the
training program's own code (:mod:`yolo_det.integrations.revalidation`). ``coco`` scores predictions with
the COCO API (faster-coco-eval, pycocotools) against annotations made from YOLO labels; ``categories`` finds which
class a predictions.json's category ids are (class index, index + 1, COCO's 91-id scheme); ``gap`` explains the
release's number against the COCO API's one rule at a time; ``parity`` (a folder of its own: export reading,
runtimes, data, post-processing, outputs, metrics, rect shapes, report, comparison) compares an exported model (ONNX,
OpenVINO, TensorRT) with its ``.pt`` on the same tensors and names the causes of a difference; ``exported`` the
evaluation command of an export against its source checkpoint; ``standalone`` a predictions.json against a data
YAML; ``labels`` the evaluator label every reported metric carries (which evaluator and rules made it).
Imports ``core``, ``record``, ``proof``.
"""
