"""Which trackers a run logs to, decided without importing them (an import of mlflow costs 1-2 s).

``YOLO_DET_TRACKERS`` unset: each tracker of :mod:`.registry` the run already uses (its backend's ``in_use``),
installed or skipped silently: MLflow when ``MLFLOW_TRACKING_URI`` is set, an MLflow run is active in the process
or one was noted in the run folder; TensorBoard when the run folder already holds the release's event file; W&B
when ``WANDB_MODE`` / ``WANDB_PROJECT`` is set, a W&B run is active or one was noted.
``off`` (``none``, ``0``, ``false``): none. A list (``mlflow,tensorboard``): those, in use or not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Mapping, Optional, Tuple

from ..core import env_names
from .backend import package_installed
from .registry import BACKENDS, NAMES

ENV = env_names.TRACKERS
TRACKERS = NAMES
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
    unknown = [name for name in names if name not in BACKENDS]
    if unknown:
        raise SelectionError(f"{ENV}={value}: unknown tracker(s) {', '.join(unknown)}; use a comma-separated list "
                             f"of {', '.join(BACKENDS)}, or off")
    return names


def installed(name: str) -> bool:
    """True when the tracker's package can be imported (found, not imported); a package name that is not a
    tracker's is looked up as itself."""
    backend = BACKENDS.get(name)
    return backend.installed() if backend is not None else package_installed(name)


def chosen(run_dir: Path, links: Mapping[str, Mapping[str, object]]) -> List[str]:
    """The trackers this run logs to (see the module's docstring); raises :class:`SelectionError`."""
    names = requested()
    if names is not None:
        return [name for name in names if installed(name)]
    return [name for name, backend in BACKENDS.items()
            if backend.installed() and backend.in_use(Path(run_dir), links.get(name) or {}, os.environ)]


__all__ = ["ENV", "SelectionError", "TRACKERS", "chosen", "installed", "requested"]
