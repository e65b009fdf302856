"""Evidence in the experiment trackers users already read: a strict/warn run's evidence at its end, and each
command's verdict on the runs it judged, logged to MLflow, TensorBoard and W&B with no flag (docs/trackers.md).

``evidence`` (the tracker-agnostic payload, read from the run folder), ``selection`` (which trackers are in use,
``YOLO_DET_TRACKERS``), ``links`` (``trackers.json``: which tracker run holds a run's evidence), ``publish``
(sending, never failing the caller), ``budget`` (one time budget and one warning line per command), ``backend``
(what a tracker implements) and ``registry`` (the trackers known), one backend module per tracker:
``mlflow_runs``, ``tensorboard_events``, ``wandb_runs``.
Imports only :mod:`yolo_det.core` and :mod:`yolo_det.record`.
"""

from .publish import log_files, log_run, log_verdict, note_active_run

__all__ = ["log_files", "log_run", "log_verdict", "note_active_run"]
