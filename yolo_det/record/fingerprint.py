"""Per-step training fingerprints, the public face: start, stop and the calls integrations make.

The recorder (:mod:`.recorder`) writes, for every optimizer step, digests of the input batches,
the loss, every gradient, the learning rates, every parameter and buffer after the step, the
EMA weights and the RNG states; at the end, the final model (and EMA) state. It needs no call
sites in the training script: while it is active it hooks in through the optimizer step hooks
and the process-wide wrappers of :mod:`.global_hooks` (``DataLoader`` batches, the loss given
to ``torch.autograd.backward``). Validations come in through :func:`record_predictions` and
:func:`record_validation`; DDP ranks are compared after every step (:mod:`.rank_check`).
``YOLO_DET_FINGERPRINT=<path>`` turns all this on in :func:`yolo_det.configure`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import torch

from ..core import active as active_session
from . import global_hooks
from .log import ENV_VAR, FingerprintError, FinalRecord, Log, StepRecord, ValRecord, rank_path, rank_paths, read_log
from .predictions import prediction_digests  # noqa: F401 - its old import path
from .rank_check import DDPMismatchWarning
from .run_folder import LOG_NAME, evaluation_log_path
from .recorder import Recorder
from .sources import optimizer_values, rng_digests


_active: Optional[Recorder] = None
_atexit_registered = False


def start(path: os.PathLike, *, session: Any = None, model: Optional[torch.nn.Module] = None, ema: Any = None,
          rank: Optional[int] = None, compact: bool = False) -> Recorder:
    """Start fingerprinting this process into ``path`` (``<stem>.rank<r><suffix>`` on DDP rank r > 0).

    ``session`` (default: the current :func:`yolo_det.configure` session) supplies the rank, the
    tracked model and EMA; ``model``/``ema`` override them. A recorder already running is closed
    first. ``compact``: most steps as one line of root digests (:mod:`.log`). Returns the :class:`Recorder`;
    :func:`stop` ends it.
    """
    global _active, _atexit_registered
    if session is None:
        session = active_session.current()
    stop(closed_by="restart")
    recorder = Recorder(path, session=session, model=model, ema=ema, rank=rank, compact=compact)
    _active = recorder.install()
    global_hooks.patch(active)
    if not _atexit_registered:
        atexit.register(_close_at_exit)
        _atexit_registered = True
    return recorder


def stop(closed_by: str = "finish") -> Optional[Path]:
    """Stop fingerprinting: write the last step and the final state; returns the log path (or None)."""
    global _active
    recorder, _active = _active, None
    global_hooks.unpatch()
    if recorder is None:
        return None
    return recorder.close(closed_by)


def active() -> Optional[Recorder]:
    """The running recorder, or None."""
    return _active


@contextlib.contextmanager
def fingerprinting(path: os.PathLike, **kwargs: Any) -> Iterator[Recorder]:
    """``with fingerprinting(path, model=..., ema=...):`` -- :func:`start` and :func:`stop` around a block."""
    recorder = start(path, **kwargs)
    try:
        yield recorder
    finally:
        if _active is recorder:
            stop()


def start_from_env(session: Any) -> Optional[Recorder]:
    """Start fingerprinting for ``session`` when ``$YOLO_DET_FINGERPRINT`` names a log path (a full record
    unless the ``fingerprint:`` setting says compact)."""
    path = os.environ.get(ENV_VAR, "").strip()
    if not path:
        return None
    choice = getattr(getattr(session, "settings", None), "fingerprint", None)
    return _started(session, start(path, session=session, compact=choice == "compact"))


def start_for_run(session: Any, run_dir: Optional[os.PathLike], name: str = LOG_NAME) -> Optional[Recorder]:
    """Start the log of a training run: ``$YOLO_DET_FINGERPRINT`` when set, else, under strict and warn unless
    ``fingerprint: off``, the run folder's own log ``name`` (:data:`LOG_NAME`; a search's trials sharing one
    folder each name theirs), compact unless ``fingerprint: full``.

    A log already in the folder (a resumed run) is kept: the new one is ``<stem>.resume<k>.jsonl``.
    Returns the recorder, the one already running for ``session``, or None.
    """
    if _running(session) or os.environ.get(ENV_VAR, "").strip():
        return _running(session) or start_from_env(session)
    choice = _default_record(session)
    if run_dir is None or choice is None:
        return None
    folder = Path(run_dir)
    path, k = folder / name, 1
    while any(p.exists() for p in rank_paths(path).values()) or rank_path(path, getattr(session, "rank", -1)).exists():
        path, k = folder / f"{Path(name).stem}.resume{k}{Path(name).suffix}", k + 1
    return _started(session, start(path, session=session, compact=choice == "compact"))


def start_for_evaluation(session: Any) -> Optional[Recorder]:
    """Start the log of a standalone evaluation or prediction (``val.py``, ``detect.py``, ``yolo val/predict``):
    ``$YOLO_DET_FINGERPRINT`` when set, else, under strict and warn unless ``fingerprint: off``, a log kept in
    memory until :func:`place_in` learns the evaluation's run folder (none is written without one).

    Returns the recorder, the one already running for ``session``, or None.
    """
    if _running(session) or os.environ.get(ENV_VAR, "").strip():
        return _running(session) or start_from_env(session)
    choice = _default_record(session)
    if choice is None:
        return None
    return start(None, session=session, compact=choice == "compact")  # type: ignore[arg-type]


def _running(session: Any) -> Optional[Recorder]:
    """The recorder already running for ``session`` (None: none is)."""
    return _active if _active is not None and not _active.closed and _active.session is session else None


def _default_record(session: Any) -> Optional[str]:
    """The default record ``session``'s settings ask for (``compact`` unless ``fingerprint: full``); None under
    off or ``fingerprint: off``."""
    settings = getattr(session, "settings", None)
    choice = getattr(settings, "fingerprint", None)
    if choice == "off" or getattr(settings, "mode", "off") == "off":
        return None
    return "full" if choice == "full" else "compact"


def place_in(session: Any, run_dir: Optional[os.PathLike]) -> Optional[Path]:
    """Put the evaluation's log started by :func:`start_for_evaluation` into ``run_dir`` as :data:`LOG_NAME`
    (``fingerprint.<k>.jsonl`` beside logs already there); a log already placed stays where it is.

    Returns the log's path, or None (no recorder of ``session``, or no folder).
    """
    recorder = _active
    if recorder is None or recorder.closed or recorder.session is not session:
        return None
    if recorder.path is None:
        if run_dir is None:
            return None
        recorder.place(evaluation_log_path(run_dir, getattr(session, "rank", -1)))
        _started(session, recorder)
    return recorder.path


def epoch_end() -> None:
    """An epoch of training ended: the last step's line is written with every tensor's digest (a compact log
    then has per-tensor records at each epoch end, with or without a validation there)."""
    if _active is not None and not _active.closed:
        _active.epoch_end()


def _started(session: Any, recorder: Recorder) -> Recorder:
    extra = getattr(session, "extra", None)
    if isinstance(extra, dict) and recorder.path is not None:  # determinism.json says where the run's log is (yolo-det val RUN_DIR reads it)
        extra["fingerprint_log"] = str(recorder.path.resolve())
        extra["fingerprint_record"] = "compact" if recorder.compact else "full"
    return recorder


def finish_session(session: Any, run_dir: Optional[os.PathLike] = None, closed_by: str = "finish") -> None:
    """Close the recorder that belongs to ``session`` (called by ``Session.finish``).

    ``run_dir``: the run's folder (checkpoints, results.csv), recorded in the final line for ``verify``;
    ``closed_by``: how the run ended (``finish``; ``error`` or ``exit`` for a run that stopped before its end).
    """
    if _active is not None and _active.session is session:
        if run_dir is not None:
            _active.run_dir = str(Path(run_dir).resolve())
        stop(closed_by=closed_by)


def record_predictions(output: Any) -> None:
    """Predictions of one NMS batch (a list with a tensor per image), if fingerprinting."""
    if _active is not None and not _active.closed:
        _active.on_predictions(output)


def record_validation(epoch: Optional[int], metrics: Dict[str, float], *, best: Optional[bool] = None,
                      stop: Optional[bool] = None, settings: Optional[Dict[str, Any]] = None,
                      files: Optional[List[Optional[str]]] = None,
                      evaluator: Optional[Dict[str, Any]] = None) -> None:
    """End of one validation: the predictions recorded since the last one, ``metrics`` (precision, recall,
    mAP50, mAP50-95, fitness), whether it became best and whether training stops after it; ``settings``
    (:func:`.eval_settings.build`), ``files`` (each image's file, in prediction order) and ``evaluator`` (which
    evaluator and rules computed the metrics: ``evaluation.labels``) when known."""
    if _active is not None and not _active.closed:
        _active.on_validation(epoch, metrics, best, stop, settings, files, evaluator)


def set_validation_stop(stop: bool) -> None:
    """Whether training stops (early) after the latest validation, when that was decided after it."""
    if _active is not None and not _active.closed:
        _active.set_stop(stop)


def update_header(**fields: Any) -> bool:
    """Add facts to the running recorder's header before its first step (False: none, or too late)."""
    return _active is not None and not _active.closed and _active.update_header(**fields)


def record_loss(loss: Any) -> None:
    """Record loss components (a tensor, or a list/dict of them) for the current step, if fingerprinting."""
    if _active is not None and loss is not None and not _active.closed:
        _active.on_items(loss)


def _close_at_exit() -> None:
    if _active is not None:
        with contextlib.suppress(Exception):
            stop(closed_by="exit")


__all__ = [
    "DDPMismatchWarning", "ENV_VAR", "LOG_NAME", "epoch_end", "place_in", "start_for_evaluation", "start_for_run", "FingerprintError", "FinalRecord", "Log", "Recorder", "StepRecord", "active",
    "finish_session", "fingerprinting", "optimizer_values", "rank_path", "rank_paths", "read_log", "record_loss",
    "record_predictions", "record_validation", "rng_digests", "set_validation_stop", "start", "start_from_env", "stop",
    "update_header", "ValRecord",
]
