"""A seed's attempts: where an unfinished one can be resumed, the resumed attempts (``run<i>/resume<k>/``) and
their validations joined, so a seed stopped after a checkpoint (preempted, requeued, killed) resumes, never
starts over.

The run info (``run-info.json``) is what yolo-det's integrations write at every checkpoint (``proof.resume_at``'s
names, spelled here without importing it: it imports torch).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from ..record.log import FingerprintError, Log, read_log
from ..proof.runner import LOG_NAME
from ..core import atomic, env_names
from ..record.run_folder import RUN_INFO_NAME

#: The run info yolo-det's integrations write at every checkpoint (``proof.resume_at``'s, which imports torch).
INFO_ENV, INFO_NAME = env_names.RUN_INFO, RUN_INFO_NAME

RESUMED_NAME = "resumed.json"


def attempts(run_dir: Path) -> List[Path]:
    """A seed's resumed attempts (``run<i>/resume1``, ``resume2``, ...), in order."""
    found = [p for p in Path(run_dir).glob("resume*") if p.is_dir() and p.name[6:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[6:]))


def resume_point(run_dir: Path) -> Optional[Dict[str, Any]]:
    """Where an earlier, unfinished attempt of a seed can be resumed: its run info (``run-info.json``, written by
    yolo-det's integrations at every checkpoint) naming a checkpoint that is on disk and the release's resume
    command; None where there is none or it is the training's last (the seed starts over: under strict it gives
    the same run)."""
    try:
        info = json.loads((Path(run_dir) / INFO_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not info.get("resume_command") or not info.get("checkpoint"):
        return None
    if not Path(info["checkpoint"]).is_file():
        return None
    done, total = info.get("epochs_done"), info.get("epochs")
    if isinstance(done, int) and isinstance(total, int) and done >= total:
        return None  # its last checkpoint is the final one: the releases refuse to resume it, the seed reruns
    return info


def _resumed(attempt: Path, point: Mapping[str, Any]) -> None:
    """Record in a resumed attempt's folder what it resumed from (the seed's record in study.json lists them)."""
    attempt.mkdir(parents=True, exist_ok=True)
    record = {"attempt": int(attempt.name[6:]), "checkpoint": str(point["checkpoint"]),
              "epochs_done": point.get("epochs_done"), "host": os.uname().nodename,
              "slurm_job": (f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID')}"
                            if os.environ.get("SLURM_ARRAY_JOB_ID") else os.environ.get("SLURM_JOB_ID"))}
    atomic.write_text(attempt / RESUMED_NAME, json.dumps(record, indent=2) + "\n")


def _with_earlier_validations(log: Log, run_dir: Path) -> Log:
    """A resumed seed's last log with the validations of its earlier attempts before it (per epoch, the latest
    attempt's: an epoch validated and then lost to the kill is validated again), so its best epoch is the run's."""
    parts = [run_dir / LOG_NAME] + [a / LOG_NAME for a in attempts(run_dir)]
    if len(parts) == 1 or Path(log.path).resolve() != parts[-1].resolve():
        return log
    by_epoch: Dict[Any, Any] = {}
    for part in parts[:-1]:
        try:
            earlier = read_log(part)
        except (FingerprintError, OSError):
            continue
        for v in earlier.validations:
            by_epoch[v.epoch] = v
    for v in log.validations:
        by_epoch[v.epoch] = v
    merged = [by_epoch[k] for k in sorted(by_epoch, key=lambda e: (e is None, e if e is not None else 0))]
    return dataclasses.replace(log, validations=merged)


__all__ = ["INFO_ENV", "INFO_NAME", "RESUMED_NAME", "attempts", "resume_point"]
