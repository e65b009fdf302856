"""What each input of ``yolo-det report`` is, told by its content, not its name.

A folder is a seed study (``study.json``), a training run folder (a file a YOLOv5 or Ultralytics run writes, or
a fingerprint log of its own); a file is a fingerprint log, a ``study.json``, or the JSON a command printed with
``--json`` and the user saved: ``parity``, ``val --evaluator coco`` / ``val --predictions`` (the COCO gap),
``diff`` / ``verify`` / ``locate`` (a comparison, with its located op), ``seeds`` and ``compare``.
Anything else is a :class:`ReportInputError` that names the input and what is accepted.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..proof.run_dirs import is_run_dir
from ..record.log import FingerprintError, LogReader
from ..record.run_folder import LOG_NAME, find_log
from ..studies.study import STUDY_JSON

RUN, STUDY, PARITY, GAP, COMPARISON, STUDY_COMPARISON = "run", "study", "parity", "gap", "comparison", "study comparison"

ACCEPTED = ("a training run folder (determinism.json, results.csv, weights/, fingerprint.jsonl), a fingerprint log "
            "(.jsonl), a seed study folder or its study.json, or the JSON that `yolo-det parity`, `val --evaluator "
            "coco`, `val --predictions`, `diff`, `verify`, `locate`, `seeds` or `compare` printed with --json")


class ReportInputError(ValueError):
    """An input of ``yolo-det report`` is missing or is none of the things a report shows."""


@dataclass
class Item:
    """One input: what it is (``kind``), where it is, and the JSON it holds (for saved command outputs)."""

    kind: str
    path: Path
    data: Dict[str, Any] = field(default_factory=dict)
    log: Optional[Path] = None  # a run given as its fingerprint log (or a folder holding only one)


def read_inputs(paths: Sequence[os.PathLike]) -> List[Item]:
    """Every input told apart by content, in the order given; :class:`ReportInputError` at the first bad one."""
    if not paths:
        raise ReportInputError(f"no input given: name at least one of {ACCEPTED}")
    return [read_input(Path(p)) for p in paths]


def read_input(path: Path) -> Item:
    """One input told apart by content (see the module docstring)."""
    if not path.exists():
        raise ReportInputError(f"{path}: no such file or folder")
    if path.is_dir():
        return _folder(path)
    if path.suffix == ".jsonl":
        return Item(RUN, path, log=_checked_log(path))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReportInputError(f"{path} is not JSON a report can read ({type(exc).__name__}: {exc}); accepted: "
                               f"{ACCEPTED}") from None
    kind = json_kind(data) if isinstance(data, dict) else None
    if kind is None:
        raise ReportInputError(f"{path}: its JSON is none of the outputs a report shows; accepted: {ACCEPTED}")
    if kind == RUN:  # determinism.json: the run is its folder
        return _folder(path.parent)
    return Item(kind, path, data)


def _folder(path: Path) -> Item:
    if (path / STUDY_JSON).is_file():
        return Item(STUDY, path)
    if is_run_dir(path):
        return Item(RUN, path)
    log = find_log(path)
    if log is not None:  # a verify/seeds run folder: only the log
        return Item(RUN, path, log=_checked_log(log))
    raise ReportInputError(f"{path} is a folder with nothing a report shows (no {STUDY_JSON}, no file a training run "
                           f"writes, no {LOG_NAME}); accepted: {ACCEPTED}")


def _checked_log(path: Path) -> Path:
    try:
        LogReader(path).close()
    except FingerprintError as exc:
        raise ReportInputError(f"{path}: {exc}") from None
    return path


def json_kind(data: Mapping[str, Any]) -> Optional[str]:
    """Which command's ``--json`` output (or which file) ``data`` is, by its keys; None when none."""
    if {"model", "exported", "runtime", "raw", "verdict"} <= set(data):
        return PARITY
    if gap_chains(data):
        return GAP
    if "first_divergence" in data and "differing_per_step" in data:
        return COMPARISON
    if "folders" in data and "verdict" in data and "steps" in data:
        return COMPARISON
    if {"settings", "runs"} <= set(data) and isinstance(data.get("runs"), list):
        return STUDY
    if {"metric", "verdict", "result", "others"} <= set(data):
        return STUDY_COMPARISON
    if {"mode", "mode_source", "environment"} <= set(data):
        return RUN
    return None


def _is_chain(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("steps"), list) and "start" in value and "end" in value


def gap_chains(data: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
    """The gap chains in a saved JSON: ``{name: chain}`` (one per release family for ``val --predictions``)."""
    if _is_chain(data):
        return {"release": dict(data)}
    coco = data.get("coco") if isinstance(data.get("coco"), dict) and "gap" in data["coco"] else data
    gap = coco.get("gap")
    if _is_chain(gap):
        return {str(coco.get("release") or "release"): gap}
    if isinstance(gap, dict) and gap and all(_is_chain(v) for v in gap.values()):
        return {str(k): v for k, v in gap.items()}
    return {}


__all__ = ["ACCEPTED", "COMPARISON", "GAP", "Item", "PARITY", "RUN", "ReportInputError", "STUDY", "STUDY_COMPARISON",
           "gap_chains", "json_kind", "read_input", "read_inputs"]
