"""Which trackers a run logs to, decided without importing them (an import of mlflow costs 1-2 s).

``YOLO_DET_TRACKERS`` unset: each tracker the run already uses, installed or skipped silently:
MLflow when ``mlflow`` is installed and ``MLFLOW_TRACKING_URI`` is set, an MLflow run is active in the process
(the user's ``mlflow.start_run()``) or one was noted in the run folder (Ultralytics' MLflow callback's run);
TensorBoard when ``tensorboard`` is installed and the run folder already holds the release's event file.
``off`` (``none``, ``0``, ``false``): none. A list (``mlflow,tensorboard``): those, in use or not.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import List, Mapping, Optional, Tuple

from ..core import env_names

ENV = env_names.TRACKERS
TRACKERS = ("mlflow", "tensorboard")
_OFF = frozenset({"off", "none", "0", "false", "no"})


class SelectionError(ValueError):
    """``YOLO_DET_TRACKERS`` names a tracker yolo-det does not know."""


def requested(environ: Optional[Mapping[str, str]] = None) -> Optional[Tuple[str, ...]]:
    """The trackers ``YOLO_DET_TRACKERS`` names (``()`` for off), or None when unset (automatic)."""
    value = (os.environ if environ is None else environ).get(ENV, "").strip().lower()
    if not value or value == "auto":
        return None
    if value in _OFF:
        return ()
    names = tuple(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))
    unknown = [name for name in names if name not in TRACKERS]
    if unknown:
        raise SelectionError(f"{ENV}={value}: unknown tracker(s) {', '.join(unknown)}; use a comma-separated list "
                             f"of {', '.join(TRACKERS)}, or off")
    return names


def installed(name: str) -> bool:
    """True when the tracker's package can be imported (found, not imported)."""
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def active_mlflow_run() -> Optional[object]:
    """The MLflow run active in this process, when mlflow is already imported (never imports it)."""
    mlflow = sys.modules.get("mlflow")
    if mlflow is None or not hasattr(mlflow, "active_run"):
        return None
    try:
        return mlflow.active_run()
    except Exception:  # noqa: BLE001 - a tracker's state never fails the run
        return None


def mlflow_in_use(link: Optional[Mapping[str, object]] = None) -> bool:
    """MLflow is the run's tracker: a tracking URI is set, a run is active, or the run folder names one."""
    return bool(os.environ.get("MLFLOW_TRACKING_URI") or active_mlflow_run() is not None or (link or {}).get("run_id"))


def tensorboard_in_use(run_dir: Path) -> bool:
    """The release already writes TensorBoard events into the run folder (YOLOv5's logger, Ultralytics'
    ``tensorboard`` setting)."""
    return any(not p.name.endswith(".yolo-det") for p in Path(run_dir).glob("events.out.tfevents.*"))


def chosen(run_dir: Path, links: Mapping[str, Mapping[str, object]]) -> List[str]:
    """The trackers this run logs to (see the module's docstring); raises :class:`SelectionError`."""
    names = requested()
    if names is not None:
        return [name for name in names if installed(name)]
    out = []
    if installed("mlflow") and mlflow_in_use(links.get("mlflow")):
        out.append("mlflow")
    if installed("tensorboard") and tensorboard_in_use(run_dir):
        out.append("tensorboard")
    return out


__all__ = ["ENV", "SelectionError", "TRACKERS", "active_mlflow_run", "chosen", "installed", "mlflow_in_use",
           "requested", "tensorboard_in_use"]
