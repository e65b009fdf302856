"""What ``verify --resume-at``, ``seeds`` and the kill-safety tests reach a training through: a SIGKILL at a point
of a save (``$YOLO_DET_KILL_AT``), a clean stop after some epochs (``$YOLO_DET_STOP_AFTER_EPOCH``), the run-info
file a run reports its checkpoint in (``$YOLO_DET_RUN_INFO``), the command that resumes it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

from ...core import atomic, env_names

INFO_ENV = env_names.RUN_INFO
STOP_ENV = env_names.STOP_AFTER_EPOCH
#: ``point:epoch``: SIGKILL this process at that point of that epoch's save (tests of kill-safety)
KILL_ENV = env_names.KILL_AT
KILL_POINTS = ("before", "between", "after")


def kill_if_asked(point: str, epoch: Any) -> None:
    """``$YOLO_DET_KILL_AT=point:epoch``: SIGKILL this process here (a preemption at that instant of the save)."""
    raw = os.environ.get(KILL_ENV, "").strip()
    if not raw or raw != f"{point}:{epoch}":
        return
    import signal

    print(f"yolo-det: killed {point} the save of epoch {epoch} as ${KILL_ENV} asks", flush=True)
    sys.stderr.flush()
    os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))


def write_run_info(**fields: Any) -> None:
    """Update ``$YOLO_DET_RUN_INFO`` (set by ``yolo-det verify --resume-at``): the checkpoint, the
    release's resume command, whether the run stopped early. Nothing happens when it is unset."""
    path = os.environ.get(INFO_ENV, "").strip()
    if not path:
        return
    target = Path(path)
    try:
        data = json.loads(target.read_text(encoding="utf-8")) if target.is_file() else {}
    except ValueError:
        data = {}
    data.update({k: (str(v) if isinstance(v, Path) else v) for k, v in fields.items()})
    data.setdefault("cwd", os.getcwd())
    data.setdefault("pid", os.getpid())
    atomic.write_text(target, json.dumps(data, indent=2) + "\n")  # DDP ranks each write it (the same fields)


def python_command(*args: str) -> list:
    """This interpreter running this process's script (``sys.argv[0]``, absolute) with ``args``."""
    return [sys.executable, os.path.abspath(sys.argv[0]), *args]


def stop_epoch() -> Optional[int]:
    """``$YOLO_DET_STOP_AFTER_EPOCH``: stop cleanly once this many epochs are complete (None: unset)."""
    raw = os.environ.get(STOP_ENV, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


__all__ = ["INFO_ENV", "KILL_ENV", "KILL_POINTS", "STOP_ENV", "kill_if_asked", "python_command", "stop_epoch",
           "write_run_info"]
