"""Why a seed did not run as its study says: a resume its integration reported not exact, another mode.

Read from every attempt's output and log header and from the final run record (``determinism.json``); a tainted
seed is named in ``study.json`` and ``compare`` gives no verdict on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

from ..record.log import FingerprintError, Log, LogReader
from ..record.run_folder import REPORT_NAME
from ..proof.runner import LOG_NAME, OUTPUT_NAME
from .results import _other_mode
from .resumes import attempts

#: What yolo-det's integrations print when a resume is not exact (the attempt's output.log keeps it).
INEXACT_RESUME = "yolo-det: resume not exact:"


def _attempt_name(folder: Path, run_dir: Path) -> str:
    return "the first attempt" if folder == run_dir else f"attempt {folder.name[6:]} ({folder.name}/)"


def _record_of(log: Log) -> Dict[str, Any]:
    """The run record (``determinism.json``) the final attempt wrote: where its log header says, else in its run
    folder; {} where there is none."""
    where = log.header.get("report") or (Path(log.final.run_dir) / REPORT_NAME
                                         if log.final is not None and log.final.run_dir else None)
    try:
        data = json.loads(Path(where).read_text(encoding="utf-8")) if where else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def taints(log: Log, run_dir: Path, mode: str) -> List[str]:
    """Why a seed did not run as its study says (empty: it did): a resume the integrations reported not exact in
    any attempt's output (a lost attempt writes no run record) or in the final run record, and a mode (of the run
    or of its backward passes) other than the study's in an attempt's log header or the run record."""
    folders = [run_dir] + attempts(run_dir)
    final = next((f for f in folders if (f / LOG_NAME).resolve() == Path(log.path).resolve()), folders[-1])
    inexact: Dict[Path, str] = {}
    modes = []
    for folder in folders:
        try:
            text = (folder / OUTPUT_NAME).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        for line in text.splitlines():
            if line.startswith(INEXACT_RESUME):
                inexact.setdefault(folder, line[len(INEXACT_RESUME):].split("; it resumes")[0].strip())
        try:
            with LogReader(folder / LOG_NAME) as reader:
                modes.append(reader.header.get("mode"))
        except (FingerprintError, OSError, ValueError):
            continue
    record = _record_of(log)
    resume = record.get("resume") if isinstance(record.get("resume"), dict) else {}
    if resume.get("exact") is False:
        inexact.setdefault(final, "; ".join(str(p) for p in resume.get("problems") or []) or "not exact")
    found = [f"resumed inexactly ({_attempt_name(f, run_dir)}: {why})" for f, why in inexact.items()]
    for recorded in modes + [record.get("mode")]:
        other = _other_mode(recorded, mode)
        if other and other not in found:
            found.append(other)
    backward = (record.get("settings") or {}).get("backward_mode") if isinstance(record.get("settings"), dict) else None
    if backward and backward != mode and record.get("mode") == mode:
        found.append(f"ran its backward passes under {backward}, not the study's {mode}")
    return found


__all__ = ["INEXACT_RESUME", "taints"]
