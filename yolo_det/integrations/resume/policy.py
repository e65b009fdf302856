"""What a run folder says about a checkpoint's resume state: whether the run saves sidecars (its
``determinism.json``, the marker in ``weights/``), why one is missing, and what strict does about it (refuses
with a message saying what to do, or resumes inexactly under ``$YOLO_DET_RESUME=inexact``). File names and
readers are :mod:`yolo_det.record.run_folder`'s.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from ...core import atomic, env_names
from ...record import run_folder as _layout
from ...record.run_folder import REPORT_NAME as RUN_RECORD  # the run record yolo-det writes into the run folder
from ...record.run_folder import final_path, previous_path, sidecar_path, staged_path  # noqa: F401 - re-exported
from .state import FORMAT, VERSION

SUFFIX = _layout.SIDECAR_SUFFIX
#: marker written into the run's weights folder when training starts under strict/warn (and with the
#: first sidecar, for runs started otherwise): every checkpoint of this run has its sidecar
MARKER = _layout.RESUME_MARKER
#: the environment variable that lets strict resume inexactly anyway
INEXACT_ENV = env_names.RESUME
#: ``1``: a completed training keeps its full resume state (:mod:`.completion`)
KEEP_ENV = env_names.KEEP_RESUME
#: the key of a sidecar reduced at the end of its training to the full-precision EMA (no resume state)
COMPLETED = "completed"
#: the release's checkpoint while its sidecar is written: ``last.pt.partial``
STAGED_SUFFIX = _layout.STAGED_SUFFIX
#: the sidecar a save replaced, kept until the next save: ``last.pt.yolo-det.prev``
PREVIOUS_SUFFIX = _layout.PREVIOUS_SUFFIX


def unsaved(checkpoint: os.PathLike) -> Optional[str]:
    """Why there is nothing to resume when ``checkpoint`` does not exist but its folder shows a yolo-det run
    whose first save did not complete (its staged ``.partial`` or the run's marker); None otherwise."""
    checkpoint = Path(checkpoint)
    if checkpoint.exists() or not checkpoint.parent.is_dir():
        return None
    staged = staged_path(checkpoint)
    if staged.exists():
        why = (f"{staged.name} is a save that was interrupted before it completed (the process ended before "
               f"{checkpoint.name} was put in place)")
    elif (checkpoint.parent / MARKER).is_file():
        why = f"{checkpoint.parent.name}/{MARKER} shows the run started under yolo-det, and no save completed"
    else:
        return None
    return (f"{checkpoint} does not exist: {why}. No checkpoint of this run was saved, so there is nothing to "
            "resume; nothing was trained. Start the training again")


def expects_sidecar(checkpoint: os.PathLike) -> bool:
    """Whether the run of ``checkpoint`` saves sidecars: the marker in its weights folder, or a run record
    (``determinism.json``) saying yolo-det trained it under strict or warn."""
    if (Path(checkpoint).parent / MARKER).is_file():
        return True
    record = run_record(checkpoint)
    return record is not None and record.get("mode") != "off"


def run_folder(checkpoint: os.PathLike) -> Path:
    """The run folder of ``checkpoint``: ``runs/train/exp`` for ``runs/train/exp/weights/last.pt``."""
    return _layout.checkpoint_folder(checkpoint)


def run_record(checkpoint: os.PathLike) -> Optional[Dict[str, Any]]:
    """What the run folder's ``determinism.json`` says about the training of ``checkpoint``: ``{"mode": ...,
    "path": ...}`` (mode None when the file cannot be read), or None when there is no such file."""
    path = run_folder(checkpoint) / RUN_RECORD
    try:
        data = _layout.read_report(run_folder(checkpoint))
    except _layout.RunFolderError:
        return {"mode": None, "path": path}
    if data is None:
        return None
    mode = data.get("mode")
    return {"mode": mode if mode in ("strict", "warn", "off") else None, "path": path}


def mark_run(weights: os.PathLike, settings: Optional[Mapping[str, Any]] = None) -> Optional[Path]:
    """At the start of training under strict/warn: the marker in the run's weights folder (if not there yet),
    so that a checkpoint without its sidecar is known to have lost it, even the first one. None when the
    folder does not exist (nothing is created) or cannot be written."""
    folder = Path(weights)
    marker = folder / MARKER
    if not folder.is_dir() or marker.exists():
        return None
    body = {"format": FORMAT, "version": VERSION, "settings": dict(settings or {}),
            "note": f"every checkpoint in this folder gets a '{SUFFIX}' sidecar for exact resume (yolo-det)"}
    try:
        atomic.write_text(marker, json.dumps(body, indent=2, default=str) + "\n")
    except OSError:
        return None
    return marker


def marked_settings(checkpoint: os.PathLike) -> Dict[str, Any]:
    """The yolo-det settings the marker beside ``checkpoint`` recorded when training started ({} if none)."""
    try:
        data = json.loads((Path(checkpoint).parent / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no marker, or one of a yolo-det that wrote a line of text
        return {}
    settings = data.get("settings") if isinstance(data, dict) else None
    return dict(settings) if isinstance(settings, dict) else {}


def missing_state(checkpoint: os.PathLike) -> str:
    """Why ``checkpoint`` has no sidecar, as its run folder tells it (a true statement, for the message)."""
    checkpoint = Path(checkpoint)
    sidecar = sidecar_path(checkpoint)
    record = run_record(checkpoint)
    marker = (checkpoint.parent / MARKER).is_file()
    if marker or (record is not None and record["mode"] != "off"):
        if record is not None and record["mode"] is not None:
            evidence = f"{record['path'].name} says it trained under yolo-det, determinism {record['mode']}"
        elif marker:
            evidence = f"{checkpoint.parent.name}/{MARKER} says it trained under yolo-det"
        else:
            evidence = f"it has a yolo-det {record['path'].name}"
        return (f"{sidecar.name} is missing beside {checkpoint}, although this run saves resume state with every "
                f"checkpoint ({evidence}): the process ended after writing {checkpoint.name} and before its "
                "resume state, or the file was removed; the data stream, RNG states and full-precision weights "
                "cannot be restored")
    if record is not None:
        return (f"{checkpoint} has no resume state: its run trained under yolo-det with determinism off "
                f"({record['path']}), which saves none")
    return (f"{checkpoint} has no resume state, and nothing in {run_folder(checkpoint)} shows that yolo-det "
            f"trained it (no {RUN_RECORD}, no {checkpoint.parent.name}/{MARKER}): the run was trained without "
            "yolo-det, so the data stream, RNG states and full-precision weights cannot be restored")


def completed(checkpoint: os.PathLike) -> str:
    """Why ``checkpoint``'s sidecar cannot resume it: its training completed and kept no resume state."""
    return (f"the training of {Path(checkpoint)} completed, and at its end yolo-det removed its resume state (the "
            f"sidecar {sidecar_path(checkpoint).name} keeps only the full-precision EMA, for yolo-det val): a finished "
            f"training is not resumed (the release refuses it too); train with {KEEP_ENV}=1 to keep the resume state")


def inexact_allowed() -> bool:
    """``$YOLO_DET_RESUME=inexact``: strict resumes anyway, as the release does (with the warning)."""
    return os.environ.get(INEXACT_ENV, "").strip().lower() == "inexact"


def refusal(why: str, checkpoint: os.PathLike, resume_anyway: str) -> str:
    """The message of a strict resume that cannot be exact: why, that nothing was trained, what to do.

    ``resume_anyway``: how this program resumes under warn (its own syntax).
    """
    checkpoint = Path(checkpoint)
    others = sorted(p.name for p in checkpoint.parent.glob("*.pt") if p != checkpoint and sidecar_path(p).is_file())
    earlier = (f"from an earlier checkpoint that has its resume state ({', '.join(others)} in {checkpoint.parent} "
               "has a sidecar)" if others else
               f"from an earlier checkpoint that has its resume state (a '<checkpoint>{SUFFIX}' beside it; "
               f"{checkpoint.parent} holds none)")
    restore = f"restore {sidecar_path(checkpoint).name} or " if expects_sidecar(checkpoint) else ""
    return (f"strict mode cannot resume exactly: {why}. Nothing was trained. To resume anyway, not exactly "
            f"(as the release resumes, with a warning saying why), {resume_anyway}, or set "
            f"{INEXACT_ENV}=inexact; to resume exactly, {restore}resume {earlier}")


__all__ = ["COMPLETED", "INEXACT_ENV", "KEEP_ENV", "completed", "MARKER", "PREVIOUS_SUFFIX", "RUN_RECORD", "STAGED_SUFFIX", "SUFFIX", "expects_sidecar",
           "final_path", "inexact_allowed", "mark_run", "marked_settings", "missing_state", "previous_path",
           "refusal", "run_folder", "run_record", "sidecar_path", "staged_path", "unsaved"]
