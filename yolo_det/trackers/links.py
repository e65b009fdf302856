"""``trackers.json`` in a run folder: which tracker run holds the run's evidence, so that a later command
(``verify``, ``diff``, ``val``, ``parity``, ``seeds``) attaches its verdict to the same run.

``{"mlflow": {"tracking_uri": ..., "run_id": ..., "experiment_id": ...}, "tensorboard": {"log_dir": ...}}``.
Also: the run folder of what a command was given (a run folder, a fingerprint log, a checkpoint).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional

from ..core import atomic
from ..record.run_folder import TRACKERS_NAME as FILE, read_trackers, run_folder_of


def read(run_dir: os.PathLike) -> Dict[str, Any]:
    """The run's tracker links (empty when none was written or the file is unreadable)."""
    return read_trackers(run_dir)


def remember(run_dir: os.PathLike, tracker: str, link: Mapping[str, Any]) -> Path:
    """Record (or update) ``tracker``'s link in ``run_dir/trackers.json``; return the file."""
    path = Path(run_dir) / FILE
    data = read(run_dir)
    data[tracker] = {**(data.get(tracker) or {}), **dict(link)}
    atomic.write_json(path, data, sort_keys=True, separators=(",", ":"))
    return path


def run_folder(path: os.PathLike) -> Optional[Path]:
    """The run folder behind what a command was given (:func:`yolo_det.record.run_folder.run_folder_of`)."""
    return run_folder_of(path)


def linked_folders(paths: Iterable[Optional[os.PathLike]]) -> List[Path]:
    """The run folders of ``paths`` that hold a ``trackers.json``, each once, in order."""
    out: List[Path] = []
    for path in paths:
        folder = run_folder(path) if path else None
        if folder is not None and (folder / FILE).is_file() and folder not in out:
            out.append(folder)
    return out


__all__ = ["FILE", "linked_folders", "read", "remember", "run_folder"]
