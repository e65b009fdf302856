"""``trackers.json`` in a run folder: which tracker run holds the run's evidence, so that a later command
(``verify``, ``diff``, ``val``, ``parity``, ``seeds``) attaches its verdict to the same run.

``{"mlflow": {"tracking_uri": ..., "run_id": ..., "experiment_id": ...}, "tensorboard": {"log_dir": ...}}``.
Also: the run folder of what a command was given (a run folder, a fingerprint log, a checkpoint).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional

from ..core.data_manifest import write_json_atomic
from .evidence import REPORT_NAME, final_record

FILE = "trackers.json"


def read(run_dir: os.PathLike) -> Dict[str, Any]:
    """The run's tracker links (empty when none was written or the file is unreadable)."""
    try:
        data = json.loads((Path(run_dir) / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def remember(run_dir: os.PathLike, tracker: str, link: Mapping[str, Any]) -> Path:
    """Record (or update) ``tracker``'s link in ``run_dir/trackers.json``; return the file."""
    path = Path(run_dir) / FILE
    data = read(run_dir)
    data[tracker] = {**(data.get(tracker) or {}), **dict(link)}
    write_json_atomic(path, data)
    return path


def run_folder(path: os.PathLike) -> Optional[Path]:
    """The run folder behind what a command was given: the folder itself (it holds ``determinism.json`` or
    ``trackers.json``), a fingerprint log (its final line's ``run_dir``, else its own folder), a checkpoint
    (``weights/last.pt``: the folder above ``weights``); None when none is found."""
    p = Path(path)
    candidates: List[Path] = []
    if p.is_dir():
        candidates.append(p)
    elif p.suffix == ".jsonl":
        final = final_record(p)
        if final and final.get("run_dir"):
            candidates.append(Path(final["run_dir"]))
        candidates.append(p.parent)
    elif p.is_file():
        candidates.extend([p.parent.parent, p.parent] if p.parent.name == "weights" else [p.parent])
    for folder in candidates:
        if (folder / FILE).is_file() or (folder / REPORT_NAME).is_file():
            return folder.resolve()
    return None


def linked_folders(paths: Iterable[Optional[os.PathLike]]) -> List[Path]:
    """The run folders of ``paths`` that hold a ``trackers.json``, each once, in order."""
    out: List[Path] = []
    for path in paths:
        folder = run_folder(path) if path else None
        if folder is not None and (folder / FILE).is_file() and folder not in out:
            out.append(folder)
    return out


__all__ = ["FILE", "linked_folders", "read", "remember", "run_folder"]
