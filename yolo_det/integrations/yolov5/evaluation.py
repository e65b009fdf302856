"""The calls a patched YOLOv5-family evaluation script makes (``val.py``, ``test.py``, ``detect.py``, ``predict.py``).

``apply-patch`` adds ``--deterministic``/``--fingerprint`` to the script's parser
(:func:`add_eval_arguments`), starts a session right after the command line is parsed
(:func:`evaluation_start`: the mode applied before the model loads; NMS's wall clock lifted
under strict/warn by the release's patched ``non_max_suppression``) and, at the end of the
evaluation function, hands it its own local names (:func:`evaluated`): one call serves every
release, whatever it names its batch size or metrics. That records the predictions, metrics
and settings (:mod:`yolo_det.evaluation.settings`) in the fingerprint log and writes
``determinism.json`` (with ``"evaluation"``) into the script's save_dir; under strict and warn that folder also
holds the evaluation's own ``fingerprint.jsonl`` (unless ``--fingerprint-mode off``). Inside a training run
(``train.py`` calls ``val.run`` every epoch) :func:`evaluated` does nothing: training records
its validations itself.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from ...core import nms_limit
from ...core.mode import FINGERPRINT_MODES, MODES, SOURCE_LABELS, ConfigError, mode_arg
from ...evaluation import settings as eval_settings
from ...record import fingerprint
from ...session import Session, configure, current
from .. import metric_labels

KEY = eval_settings.KEY
FINGERPRINT_ENV = fingerprint.ENV_VAR
#: (local name in the release's evaluation function, name in the validation record), per task.
_METRICS = {
    "segment": (("mp_bbox", "precision"), ("mr_bbox", "recall"), ("map50_bbox", "mAP50"), ("map_bbox", "mAP50-95"),
                ("mp_mask", "precision(M)"), ("mr_mask", "recall(M)"), ("map50_mask", "mAP50(M)"),
                ("map_mask", "mAP50-95(M)")),
    "detect": (("mp", "precision"), ("mr", "recall"), ("map50", "mAP50"), ("map", "mAP50-95")),
    "classify": (("top1", "top1"), ("top5", "top5")),
}
_exit_hook = False
_nms_seen = 0  # NMS calls of earlier evaluations in this process (val.py --task study runs several)


def add_eval_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--deterministic`` and ``--fingerprint`` (options the script already has are left alone)."""
    add_mode_options(parser, "strict: every op deterministic or an error, NMS without its wall clock; warn: "
                             "deterministic where possible, each nondeterministic op reported, NMS without its "
                             "clock; off: the release's behaviour. Default: $YOLO_DET_DETERMINISTIC, else warn",
                     f"record predictions and metrics to PATH (JSONL; sets ${FINGERPRINT_ENV}) for yolo-det "
                     "diff / verify")
    return parser


def add_mode_options(parser: argparse.ArgumentParser, mode_help: str, fingerprint_help: str) -> Any:
    """The ``yolo-det (reproducibility)`` group with ``--deterministic`` and ``--fingerprint`` where missing."""
    existing = getattr(parser, "_option_string_actions", {})
    group = parser.add_argument_group("yolo-det (reproducibility)")
    if "--deterministic" not in existing:
        group.add_argument("--deterministic", type=mode_arg, choices=MODES, default=None, help=mode_help)
    if "--fingerprint" not in existing:
        group.add_argument("--fingerprint", metavar="PATH", default=None, help=fingerprint_help)
    if "--fingerprint-mode" not in existing:
        group.add_argument("--fingerprint-mode", type=mode_arg, choices=FINGERPRINT_MODES, default=None,
                           help="the run folder's own fingerprint.jsonl under strict/warn: compact (default), full "
                                "or off (default: the hyp YAML's 'fingerprint:', else $YOLO_DET_FINGERPRINT_MODE)")
    return group


def evaluation_start(opt: Any) -> Session:
    """Right after the script parsed its command line: take yolo-det's options out of ``opt`` (the
    release passes ``**vars(opt)`` to its evaluation function), resolve the mode and start the session.

    A bad mode exits with status 2, naming where it came from.
    """
    mode = _take(opt, "deterministic")
    path = _take(opt, "fingerprint")
    record = _take(opt, "fingerprint_mode")  # the release's run() takes **vars(opt): no yolo-det option may stay
    if path:
        os.environ[FINGERPRINT_ENV] = str(path)
    script = _script(sys._getframe(1))
    try:
        session = configure(mode, repo=None if script is None else Path(script).parent, fingerprint=record)
    except ConfigError as exc:
        print(f"yolo-det: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    session.extra[KEY] = {"script": script, "data": _given(opt, "data"), "weights": _given(opt, "weights"),
                          "runs": [], "save_dir": None}
    if session.is_main:
        source = SOURCE_LABELS.get(session.settings.source, session.settings.source)
        clock = "NMS without its wall clock" if session.settings.mode != "off" else "NMS with the release's clock"
        print(f"yolo-det: evaluation under determinism {session.settings.mode} (from {source}), {clock}")
    fingerprint.start_for_evaluation(session)  # the save_dir's own log under strict/warn (placed by evaluated)
    _register_exit_hook()
    return session


def evaluated(values: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """End of the release's evaluation function; ``values`` are its local names.

    Records the predictions since the last evaluation, the metrics and the settings in the fingerprint
    log and writes ``determinism.json`` into the function's ``save_dir``. Returns the record (None inside
    training, or without an evaluation session).
    """
    session = current()
    if session is None or KEY not in session.extra or values.get("training"):
        return None
    info = session.extra[KEY]
    task = _task(values, info.get("script"))
    metrics = {name: _float(values[local]) for local, name in _METRICS.get(task, ()) if local in values}
    nms = session.extra.get(nms_limit.KEY) or {}
    global _nms_seen
    first = _nms_seen
    cut = [c - first for c in nms.get("cut_calls", []) if c >= first]
    _nms_seen = int(nms.get("calls", 0))
    settings = eval_settings.from_yolov5(values, task=task, nms_cut_batches=cut, data=info.get("data"),
                                         weights=info.get("weights"))
    files = _files(values)
    fingerprint.record_validation(None, metrics, settings=settings, files=files,
                                  evaluator=metric_labels.yolov5(sys._getframe(1).f_globals, settings, task))
    record = {"task": task, "metrics": metrics, "settings": settings, "images": None if files is None else len(files)}
    info["runs"].append(record)
    info.update({"task": task, "settings": settings, "metrics": metrics})  # the last one's, for readers of one
    save_dir = values.get("save_dir")
    if save_dir is not None and str(save_dir):
        fingerprint.place_in(session, save_dir)  # before determinism.json, which says where the log is
    if save_dir is not None and str(save_dir) and session.is_main:
        info["save_dir"] = str(Path(save_dir).resolve())
        session.save(save_dir)
    return record


def _task(values: Mapping[str, Any], script: Optional[str]) -> str:
    """detect, segment or classify: from the metrics the function computed, else the script's folder."""
    for task in ("segment", "classify"):
        if any(local in values for local, _ in _METRICS[task][-1:]):
            return task
    folder = Path(script).parent.name if script else ""
    return folder if folder in ("segment", "classify") else "detect"


def _dataset(values: Mapping[str, Any]) -> Any:
    loader = values.get("dataloader")
    return getattr(loader, "dataset", None) if loader is not None else values.get("dataset")


def _files(values: Mapping[str, Any]) -> Optional[List[str]]:
    """The image files in the order the evaluation saw them (the release's loaders do not shuffle)."""
    dataset = _dataset(values)
    for name in ("im_files", "img_files", "files"):
        files = getattr(dataset, name, None)
        if isinstance(files, (list, tuple)):
            return [str(f) for f in files]
    return None


def _take(opt: Any, name: str) -> Any:
    value = getattr(opt, name, None)
    if hasattr(opt, name):
        try:
            delattr(opt, name)
        except AttributeError:  # pragma: no cover - a namespace that refuses: leave it
            pass
    return value


def _given(opt: Any, name: str) -> Any:
    value = getattr(opt, name, None)
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return None if value is None else str(value)


def _float(value: Any) -> float:
    try:
        return float(np.asarray(value, dtype=np.float64).reshape(-1)[0])
    except (TypeError, ValueError, IndexError):
        return float("nan")


def _script(frame: Any) -> Optional[str]:
    path = frame.f_globals.get("__file__")
    return None if path is None else str(Path(path).resolve())


def _finish_at_exit() -> None:
    session = current()
    if session is None or KEY not in session.extra:
        return
    path = session.finish(session.extra[KEY].get("save_dir"))
    if path is not None:
        print(f"yolo-det: wrote {path}")


def _register_exit_hook() -> None:
    global _exit_hook
    if not _exit_hook:
        atexit.register(_finish_at_exit)
        _exit_hook = True


__all__ = ["KEY", "add_eval_arguments", "add_mode_options", "evaluated", "evaluation_start"]
