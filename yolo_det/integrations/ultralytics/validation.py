"""Validation inside Ultralytics training under yolo-det: NMS without its wall-clock limit, and validation records.

Ultralytics' ``non_max_suppression`` (``utils/nms.py``; ``utils/ops.py`` before late 8.3) stops after
``2.0 + max_time_img * bs`` seconds (``0.5 + ...`` in 8.0)
and drops the rest of the batch. :class:`~yolo_det.integrations.ultralytics.trainer.DeterminismMixin` runs
its validations inside :func:`validation_nms`: validators call ``non_max_suppression`` through
its module, so for the duration of the trainer's validation that name is a wrapper that, under
strict and warn, passes ``max_time_img=inf`` (off: the release's limit), notes a batch that took
longer than the release's limit, and hands the predictions to the fingerprint log.
:func:`record_validation` writes the validation's record; :class:`StopProbe` tells it whether
early stopping fired. Nothing outside the trainer's own validation is touched.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import time
from typing import Any, Dict, Iterator, Optional

from ...core import nms_limit
from ...evaluation import settings as eval_settings
from ...record import fingerprint
from ...session import Session
from .. import metric_labels
from . import api

WHERE = "ultralytics utils/nms.py"
#: Ultralytics metric keys (box metrics of every task) -> the names validation records use.
METRICS = {"metrics/precision(B)": "precision", "metrics/recall(B)": "recall", "metrics/mAP50(B)": "mAP50",
           "metrics/mAP50-95(B)": "mAP50-95", "metrics/accuracy_top1": "top1", "metrics/accuracy_top5": "top5"}


def _batch_size(prediction: Any) -> int:
    if isinstance(prediction, (list, tuple)) and prediction:
        prediction = prediction[0]
    shape = getattr(prediction, "shape", None)
    return int(shape[0]) if shape else 1


@contextlib.contextmanager
def validation_nms(session: Session, record: bool = True, validator: Any = None) -> Iterator[None]:
    """Inside the block, the release's ``non_max_suppression`` has no time limit under strict/warn.

    The function is replaced in each module validators call it through (``utils.nms``, ``utils.ops``:
    :func:`~.api.nms_modules`); a release without one keeps its limit, as determinism.json says.
    A classification ``validator`` (no NMS) has its class scores recorded per image instead.
    """
    with _class_scores(validator if record else None):
        with _nms_unclocked(session, record):
            yield


@contextlib.contextmanager
def _class_scores(validator: Any) -> Iterator[None]:
    """A classification validator's ``postprocess`` output (class scores, a row per image) recorded per batch,
    as NMS output is for the other tasks (the predictions a re-run is compared on)."""
    if validator is None or getattr(getattr(validator, "args", None), "task", None) != "classify" \
            or not callable(getattr(validator, "postprocess", None)):
        yield
        return
    original = validator.postprocess

    def postprocess(preds: Any) -> Any:
        output = original(preds)
        fingerprint.record_predictions(list(output))
        return output

    validator.postprocess = postprocess
    try:
        yield
    finally:
        del validator.postprocess  # the class's own method again


@contextlib.contextmanager
def _nms_unclocked(session: Session, record: bool) -> Iterator[None]:
    modules = api.nms_modules()
    originals = [module.non_max_suppression for module in modules]
    echo = api.logger().warning if session.is_main else (lambda _message: None)
    for module, original in zip(modules, originals):
        module.non_max_suppression = _unclocked(original, module.__name__, session, record, echo)
    try:
        yield
    finally:
        for module, original in zip(modules, originals):
            module.non_max_suppression = original


def _unclocked(original: Any, module: str, session: Session, record: bool, echo: Any) -> Any:
    """``original`` (one module's ``non_max_suppression``) with the limit lifted per the mode, noted, recorded."""
    signature = inspect.signature(original)
    base = api.nms_time_base(original)
    where = "ultralytics " + "/".join(module.split(".")[1:]) + ".py"  # utils/nms.py or utils/ops.py
    default = signature.parameters.get("max_time_img")
    default_time = default.default if default is not None and default.default is not inspect.Parameter.empty \
        else 0.05

    @functools.wraps(original)
    def non_max_suppression(prediction: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(prediction, *args, **kwargs)
        per_image = bound.arguments.get("max_time_img", default_time)
        release = base + float(per_image) * _batch_size(prediction)
        limit = nms_limit.time_limit(session.settings.mode, release, session.extra, where, echo=echo)
        lifted = isinstance(limit, nms_limit.LiftedTimeLimit)
        if lifted and "max_time_img" in signature.parameters:
            bound.arguments["max_time_img"] = math.inf
        start = time.time()  # the release's own clock (its NMS times itself with time.time())
        output = original(*bound.args, **bound.kwargs)
        if lifted:
            limit._check(time.time() - start)  # a batch the release would have cut is noted
        if record:
            fingerprint.record_predictions(output)
        return output

    return non_max_suppression


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        try:
            return float(value.reshape(-1)[0])
        except Exception:  # noqa: BLE001 - a metric that is not a number
            return math.nan


def record_validation(trainer: Any, metrics: Optional[Dict[str, Any]], fitness: Any,
                      settings: Optional[Dict[str, Any]] = None) -> None:
    """The fingerprint log's record of the validation that just ran (no-op without fingerprinting);
    ``settings``: what it ran with (:mod:`~yolo_det.evaluation.settings`)."""
    if metrics is None or fingerprint.active() is None:
        return
    values = {name: _float(metrics[key]) for key, name in METRICS.items() if key in metrics}
    values["fitness"] = _float(fitness)
    best = getattr(trainer, "best_fitness", None)
    epoch = getattr(trainer, "epoch", None)
    validator = getattr(trainer, "validator", None)
    task = getattr(getattr(trainer, "args", None), "task", None)
    fingerprint.record_validation(int(epoch) if isinstance(epoch, int) else None, values,
                                  best=best is not None and _float(best) == values["fitness"], settings=settings,
                                  evaluator=metric_labels.ultralytics(validator, settings, task))


def training_settings(trainer: Any) -> Dict[str, Any]:
    """The settings of a trainer's validation: its validator's args, the loader's batch, half on CUDA with AMP."""
    validator = getattr(trainer, "validator", None)
    args = getattr(validator, "args", None) or getattr(trainer, "args", None)
    loader = getattr(trainer, "test_loader", None)
    device = getattr(trainer, "device", None)
    half = bool(getattr(trainer, "amp", False)) and getattr(device, "type", "cpu") != "cpu"
    ema = getattr(getattr(trainer, "ema", None), "ema", None)
    settings = eval_settings.from_ultralytics(args, model=ema, half=half)
    if loader is not None:
        settings["batch_size"] = getattr(loader, "batch_size", settings.get("batch_size"))
        dataset = getattr(loader, "dataset", None)
        settings["rect"] = getattr(dataset, "rect", settings.get("rect"))
        settings["pad"] = getattr(dataset, "pad", None)
        settings["batch_shapes"] = eval_settings.dataset_shapes(dataset, settings.get("imgsz"))
    settings["split"] = "val"
    return settings



class StopProbe:
    """Wraps the trainer's EarlyStopping: its verdict after each validation goes to the validation record."""

    def __init__(self, stopper: Any) -> None:
        self.__dict__["_stopper"] = stopper

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        stop = self._stopper(*args, **kwargs)
        fingerprint.set_validation_stop(bool(stop))
        return stop

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_stopper"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._stopper, name, value)


__all__ = ["METRICS", "StopProbe", "record_validation", "training_settings", "validation_nms"]
