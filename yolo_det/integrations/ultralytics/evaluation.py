"""Standalone Ultralytics evaluation (``yolo val``, ``model.val()``) under yolo-det.

``Model.val`` picks its validator through ``Model._smart_load("validator")``; :func:`enable` (and
the ``yolo-det run``/``verify`` bootstrap) hand back :func:`deterministic_validator` of it. Called
without a trainer (a standalone evaluation), that validator starts a session when none runs (mode
from ``YOLO_DET_DETERMINISTIC``, default warn), runs the release's validation inside
:func:`~.validation.validation_nms` (NMS without its wall clock under strict/warn,
predictions recorded) and records the metrics and settings (:mod:`yolo_det.evaluation.settings`) in
the fingerprint log and in ``determinism.json`` (``"evaluation"``) in its save_dir. Validations
inside training keep going through the trainer's own path.
"""

from __future__ import annotations

import atexit
from pathlib import Path
from typing import Any, Dict, Optional, Type

from ...core import nms_limit
from ...evaluation import settings as eval_settings
from ...evaluation.settings import KEY
from ...record import fingerprint
from ...session import configure, current
from .. import metric_labels
from . import api
from .validation import METRICS, validation_nms

_VALIDATORS: Dict[type, type] = {}
_exit_hook = False
_nms_seen = 0


def deterministic_validator(validator: Type[Any]) -> Type[Any]:
    """The yolo-det validator for an Ultralytics validator class (made once per class)."""
    return _extended(validator, "__call__", _call)


def deterministic_predictor(predictor: Type[Any]) -> Type[Any]:
    """The yolo-det predictor for an Ultralytics predictor class (``yolo predict``, ``model.predict()``)."""
    return _extended(predictor, "stream_inference", _stream_inference)


def _extended(cls: Type[Any], method: str, function: Any) -> Type[Any]:
    """``cls`` with ``method`` replaced by ``function`` in a subclass made once per class."""
    if not isinstance(cls, type) or getattr(cls, "_yolo_det", False):
        return cls
    known = _VALIDATORS.get(cls)
    if known is None:
        name = f"Deterministic{cls.__name__}"
        known = _VALIDATORS[cls] = type(name, (cls,), {
            method: function, "_yolo_det": True, "__module__": __name__, "__qualname__": name,
            "__doc__": f"{cls.__module__}.{cls.__qualname__} under yolo-det's determinism modes."})
    return known


def _session(what: str) -> Any:
    """The running session, else one started for this evaluation (mode from the environment)."""
    session = current()
    if session is None:
        session = configure(api.requested_mode())
        _register_exit_hook()
        if session.is_main:
            api.logger().info(f"yolo-det: {what} under determinism {session.settings.mode}"
                              + (", NMS without its wall clock" if session.settings.mode != "off" else ""))
    session.extra.setdefault(KEY, {"script": f"ultralytics {what}", "runs": [], "save_dir": None})
    fingerprint.start_for_evaluation(session)  # the save_dir's own log under strict/warn (placed by _record)
    return session


def _call(self: Any, trainer: Any = None, model: Any = None) -> Any:
    """The release's ``__call__``; standalone (no trainer): unclocked NMS, predictions/metrics/settings recorded."""
    parent = super(type(self), self).__call__
    if trainer is not None:
        return parent(trainer=trainer, model=model)
    session = _session("evaluation")
    with validation_nms(session, validator=self):
        stats = parent(trainer=None, model=model)
    _record(self, session, stats, model if hasattr(model, "state_dict") else None, _files(self))
    return stats


def _stream_inference(self: Any, *args: Any, **kwargs: Any) -> Any:
    """The release's ``stream_inference`` with NMS unclocked (strict/warn); predictions recorded at its end."""
    session = _session("prediction")
    files = []
    with validation_nms(session):
        for result in super(type(self), self).stream_inference(*args, **kwargs):
            files.append(str(getattr(result, "path", "")) or None)
            yield result
    _record(self, session, None, getattr(self.model, "model", None), files)


def _record(validator: Any, session: Any, stats: Any, model: Any, files: Optional[list]) -> None:
    global _nms_seen
    info = session.extra[KEY]
    nms = session.extra.get(nms_limit.KEY) or {}
    cut = [c - _nms_seen for c in nms.get("cut_calls", []) if c >= _nms_seen]
    _nms_seen = int(nms.get("calls", 0))
    args = validator.args
    settings = eval_settings.from_ultralytics(args, model=model, nms_cut_batches=cut,
                                              batch_shapes=_shapes(validator))
    if getattr(args, "half", False):
        settings["weights_dtype"] = "float16"  # AutoBackend ran the model in half
    dataset = getattr(getattr(validator, "dataloader", None), "dataset", None)
    settings["pad"] = getattr(dataset, "pad", None)  # the release's val loaders letterbox with pad 0.5
    raw = stats if isinstance(stats, dict) else {}
    metrics = {METRICS.get(str(k), str(k)): _float(v) for k, v in raw.items()}  # box metrics named as in training
    evaluator = metric_labels.ultralytics(validator, settings, getattr(args, "task", None))
    fingerprint.record_validation(None, metrics, settings=settings, files=files, evaluator=evaluator)
    record = {"task": getattr(args, "task", None), "metrics": metrics, "settings": settings,
              "images": None if files is None else len(files), "evaluator": evaluator}
    info["runs"].append(record)
    info.update({"task": record["task"], "settings": settings, "metrics": metrics})
    save_dir = getattr(validator, "save_dir", None)
    if save_dir is not None:
        fingerprint.place_in(session, save_dir)  # before determinism.json, which says where the log is
    if save_dir is not None and session.is_main:
        info["save_dir"] = str(Path(save_dir).resolve())
        session.save(save_dir)


def _shapes(validator: Any) -> Optional[list]:
    dataset = getattr(getattr(validator, "dataloader", None), "dataset", None)
    return eval_settings.dataset_shapes(dataset, getattr(validator.args, "imgsz", None))


def _files(validator: Any) -> Optional[list]:
    dataset = getattr(getattr(validator, "dataloader", None), "dataset", None)
    files = getattr(dataset, "im_files", None)
    return [str(f) for f in files] if isinstance(files, (list, tuple)) else None


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _finish_at_exit() -> None:
    session = current()
    if session is not None and KEY in session.extra:
        session.finish(session.extra[KEY].get("save_dir"), echo=lambda _m: None)


def _register_exit_hook() -> None:
    global _exit_hook
    if not _exit_hook:
        atexit.register(_finish_at_exit)
        _exit_hook = True


__all__ = ["deterministic_predictor", "deterministic_validator"]
