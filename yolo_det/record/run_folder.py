"""The run folder's layout: the name of every file yolo-det keeps in a run folder, one reader per artefact, and
the run folder of a path. Every other module takes a run folder's file names and reads its artefacts here.

A run folder (``runs/train/exp``, ``runs/detect/train``) holds, beside what the release writes:

* ``determinism.json`` (:data:`REPORT_NAME`): the session's report; :func:`read_report`;
* ``fingerprint.jsonl`` (:data:`LOG_NAME`): the run's own fingerprint log (``fingerprint.rank<r>.jsonl`` per
  DDP rank, ``fingerprint.gen<g>.jsonl`` per ``--evolve`` generation); an evaluation whose folder has one
  already writes ``fingerprint.<k>.jsonl`` (:func:`evaluation_log_path`). The training's log is
  :func:`find_log`; its final line :func:`final_record`; an interrupted run's logs joined through
  :mod:`.splice` :func:`read_log_chain`;
* ``trackers.json`` (:data:`TRACKERS_NAME`): which tracker run holds the run's evidence; :func:`read_trackers`;
* ``data_manifest.json`` (:data:`DATA_MANIFEST_NAME`, read by :mod:`yolo_det.core.data_manifest`);
* the exact-resume files in ``weights/``: ``last.pt.yolo-det`` beside each checkpoint (:data:`SIDECAR_SUFFIX`),
  the previous one (``.prev``, only for the instant of a save's swap), a checkpoint staged while its sidecar is
  written (``.partial``) and the marker ``yolo-det-resume.txt`` (:data:`RESUME_MARKER`); :func:`own_weights_files`
  lists them. While the release's ``on_train_end`` callbacks upload ``weights/``, they wait in
  ``.yolo-det-aside/`` (:data:`ASIDE_NAME`) of the run folder.

:func:`run_folder_of` finds the run folder of a folder, a fingerprint log or a checkpoint.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..core import json_shapes
from ..core.data_manifest import MANIFEST_FILE as DATA_MANIFEST_NAME
from .log import FinalRecord, Log, rank_path, read_final

#: the session's report (mode, seeds, alerts, environment, where the fingerprint log is)
REPORT_NAME = "determinism.json"
#: the run's own fingerprint log (on by default under strict and warn)
LOG_NAME = "fingerprint.jsonl"
#: which tracker run holds the run's evidence
TRACKERS_NAME = "trackers.json"
#: the folder of the run's checkpoints
WEIGHTS = "weights"
#: the exact-resume sidecar of a checkpoint: ``last.pt`` -> ``last.pt.yolo-det``
SIDECAR_SUFFIX = ".yolo-det"
#: the sidecar a save replaced, kept for the instant between the sidecar's rename and the checkpoint's:
#: ``last.pt.yolo-det.prev``
PREVIOUS_SUFFIX = ".prev"
#: the release's checkpoint while its sidecar is written: ``last.pt.partial``
STAGED_SUFFIX = ".partial"
#: written into ``weights/`` when training starts under strict/warn: every checkpoint there has its sidecar
RESUME_MARKER = "yolo-det-resume.txt"
#: the run folder's sub-folder yolo-det's own ``weights/`` files wait in while trackers' callbacks upload ``weights/``
ASIDE_NAME = ".yolo-det-aside"
#: the report's key naming the run's fingerprint log
LOG_POINTER = "fingerprint_log"
#: where a run of ``verify`` / ``seeds`` reports its checkpoint and placement (in its ``run<N>/`` folder)
RUN_INFO_NAME = "run-info.json"


class RunFolderError(ValueError):
    """A run folder's file exists but cannot be read; :attr:`path` is the file, :attr:`reason` why."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: unreadable ({reason})")
        self.path, self.reason = path, reason


def _log_name(tag: str) -> str:
    stem, suffix = os.path.splitext(LOG_NAME)
    return f"{stem}.{tag}{suffix}"


def evaluation_log_name(k: int) -> str:
    """The ``k``-th further fingerprint log of a folder that has one: ``fingerprint.<k>.jsonl``."""
    return _log_name(str(k))


def generation_log_name(generation: int) -> str:
    """The fingerprint log of an ``--evolve`` generation: ``fingerprint.gen<g>.jsonl``."""
    return _log_name(f"gen{generation}")


def log_files(folder: os.PathLike) -> List[Path]:
    """Every fingerprint log in ``folder``: its own, the ranks', evaluations' numbered ones, generations' (sorted
    by name; which one is the training's is :func:`find_log`'s answer, never this list's order)."""
    stem, suffix = os.path.splitext(LOG_NAME)
    return sorted(p for p in Path(folder).glob(f"{stem}*{suffix}")
                  if p.is_file() and (p.name == LOG_NAME or p.name.startswith(f"{stem}.")))


def evaluation_log_path(folder: os.PathLike, rank: Optional[int] = None) -> Path:
    """Where an evaluation's log goes in ``folder``: :data:`LOG_NAME`, else the first free
    ``fingerprint.<k>.jsonl`` (a name is taken when it or ``rank``'s log of it exists)."""
    folder = Path(folder)
    path, k = folder / LOG_NAME, 1
    while path.exists() or rank_path(path, rank).exists():
        path, k = folder / evaluation_log_name(k), k + 1
    return path


# -- the resume files beside a checkpoint -----------------------------------------------------------------
def sidecar_path(checkpoint: os.PathLike) -> Path:
    """The sidecar of ``checkpoint``: ``last.pt`` -> ``last.pt.yolo-det`` (never matches ``last*.pt``)."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.name + SIDECAR_SUFFIX)


def staged_path(checkpoint: os.PathLike) -> Path:
    """Where the release writes ``checkpoint`` until its sidecar is on disk: ``last.pt`` -> ``last.pt.partial``."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.name + STAGED_SUFFIX)


def final_path(path: os.PathLike) -> Path:
    """The checkpoint a staged path stands for (``last.pt.partial`` -> ``last.pt``); other paths unchanged."""
    path = Path(path)
    return path.with_name(path.name[:-len(STAGED_SUFFIX)]) if path.name.endswith(STAGED_SUFFIX) else path


def previous_path(checkpoint: os.PathLike) -> Path:
    """The sidecar the last save replaced: ``last.pt`` -> ``last.pt.yolo-det.prev``."""
    sidecar = sidecar_path(checkpoint)
    return sidecar.with_name(sidecar.name + PREVIOUS_SUFFIX)


def rank_state_path(checkpoint: os.PathLike, rank: int) -> Path:
    """Where DDP rank ``rank`` (> 0) keeps its RNG states beside ``checkpoint``: ``last.pt.yolo-det.rank1``."""
    sidecar = sidecar_path(checkpoint)
    return sidecar.with_name(f"{sidecar.name}.rank{int(rank)}")


def own_weights_files(weights: os.PathLike) -> List[Path]:
    """yolo-det's own files in a weights folder (sidecars, their ``.prev`` and DDP ranks' states, staged
    checkpoints, the marker): what a tracker's upload of the folder must not carry."""
    folder = Path(weights)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and (
        p.name == RESUME_MARKER or p.name.endswith(STAGED_SUFFIX) or SIDECAR_SUFFIX + "." in p.name
        or p.name.endswith(SIDECAR_SUFFIX)))


def marker_path(checkpoint: os.PathLike) -> Path:
    """The resume marker of ``checkpoint``'s weights folder (written when training starts under strict/warn)."""
    return Path(checkpoint).parent / RESUME_MARKER


# -- the readers -----------------------------------------------------------------------------------------
def _read_json(path: Path) -> Optional[Dict[str, Any]]:
    """``path``'s JSON object; None when the file does not exist; :class:`RunFolderError` when it cannot be read."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunFolderError(path, str(exc)) from None
    if not isinstance(data, dict):
        raise RunFolderError(path, f"a JSON {type(data).__name__}, not an object")
    return data


def read_report(folder: os.PathLike) -> Optional[Dict[str, Any]]:
    """The run's ``determinism.json``; None without one; :class:`RunFolderError` when it cannot be read or is not
    a run's report (a list, ``seeds`` that are no mapping: :data:`yolo_det.core.json_shapes.DETERMINISM_JSON`)."""
    path = Path(folder) / REPORT_NAME
    report = _read_json(path)
    shape = report is not None and json_shapes.problem(report, json_shapes.DETERMINISM_JSON)
    if shape:  # issue 59: a report of another shape is refused here, never a traceback in a reader later
        raise RunFolderError(path, f"not a run's report: {shape}")
    return report


def log_pointer(report: Optional[Mapping[str, Any]]) -> Optional[Path]:
    """The fingerprint log ``determinism.json`` names (it may be gone since), or None."""
    pointed = report.get(LOG_POINTER) if isinstance(report, Mapping) else None
    return Path(pointed) if isinstance(pointed, str) and pointed else None


def find_log(folder: os.PathLike, report: Optional[Mapping[str, Any]] = None) -> Optional[Path]:
    """The training's fingerprint log of a run folder: its own ``fingerprint.jsonl``, else the existing file
    ``determinism.json`` names; None when neither exists. An evaluation's ``fingerprint.<k>.jsonl`` or a rank's
    log is never the training's."""
    own = Path(folder) / LOG_NAME
    if own.is_file():
        return own
    pointed = log_pointer(report)
    return pointed if pointed is not None and pointed.is_file() else None


def final_record(log: os.PathLike) -> Optional[FinalRecord]:
    """A fingerprint log's final line, read from the end of the file; None when the log is missing, unreadable
    or the run did not close it."""
    return read_final(log)


def read_log_chain(logs: Sequence[Any]) -> Log:
    """The logs of a run and its resumptions (oldest first) as one log (:func:`.splice.join_logs`)."""
    from .splice import join_logs
    from .log import read_log

    if not logs:
        raise ValueError("read_log_chain needs at least one log")
    joined = logs[0] if isinstance(logs[0], Log) else read_log(logs[0])
    for later in logs[1:]:
        joined = join_logs(joined, later)
    return joined


def read_trackers(folder: os.PathLike) -> Dict[str, Any]:
    """The run's tracker links (``trackers.json``); empty when none was written or the file is unreadable."""
    try:
        return _read_json(Path(folder) / TRACKERS_NAME) or {}
    except RunFolderError:
        return {}


# -- the run folder of a path ----------------------------------------------------------------------------
def checkpoint_folder(checkpoint: os.PathLike) -> Path:
    """The run folder of ``checkpoint`` by layout alone: ``runs/train/exp`` for ``runs/train/exp/weights/last.pt``."""
    parent = Path(checkpoint).parent
    return parent.parent if parent.name == WEIGHTS else parent


def is_marked(folder: os.PathLike) -> bool:
    """Whether ``folder`` holds a ``determinism.json`` or a ``trackers.json`` (yolo-det recorded the run there)."""
    folder = Path(folder)
    return (folder / TRACKERS_NAME).is_file() or (folder / REPORT_NAME).is_file()


def run_folder_of(path: os.PathLike) -> Optional[Path]:
    """The run folder (resolved) behind what a command was given: the folder itself, a fingerprint log (its
    final line's ``run_dir``, else its own folder), a checkpoint (``weights/last.pt``: the folder above
    ``weights``, else its own folder); the first of these holding a ``determinism.json`` or ``trackers.json``,
    None when none does."""
    p = Path(path)
    candidates = []
    if p.is_dir():
        candidates.append(p)
    elif p.suffix == ".jsonl":
        final = final_record(p)
        if final is not None and final.run_dir:
            candidates.append(Path(final.run_dir))
        candidates.append(p.parent)
    elif p.is_file():
        candidates.extend([p.parent.parent, p.parent] if p.parent.name == WEIGHTS else [p.parent])
    for folder in candidates:
        if is_marked(folder):
            return folder.resolve()
    return None


__all__ = ["DATA_MANIFEST_NAME", "LOG_NAME", "LOG_POINTER", "PREVIOUS_SUFFIX", "REPORT_NAME", "ASIDE_NAME", "RESUME_MARKER",
           "RUN_INFO_NAME", "RunFolderError", "SIDECAR_SUFFIX", "STAGED_SUFFIX", "TRACKERS_NAME", "WEIGHTS",
           "checkpoint_folder", "evaluation_log_name", "evaluation_log_path", "final_path", "final_record",
           "find_log", "generation_log_name", "is_marked", "log_files", "log_pointer", "marker_path", "own_weights_files",
           "previous_path", "rank_state_path", "read_log_chain", "read_report", "read_trackers", "run_folder_of",
           "sidecar_path", "staged_path"]
