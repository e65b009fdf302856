"""Every tracker backend yolo-det knows, in the order it logs to them: a new tracker is one module defining a
:class:`.backend.Backend` as ``BACKEND``, named here once (docs/trackers.md)."""

from __future__ import annotations

import importlib
from typing import Dict, Tuple

from .backend import Backend

#: the backends' modules in this folder, in logging order
MODULES = ("mlflow_runs", "tensorboard_events", "wandb_runs")


def _load() -> Dict[str, Backend]:
    backends = {}
    for module in MODULES:
        backend = importlib.import_module(f"{__package__}.{module}").BACKEND
        backends[backend.name] = backend
    return backends


#: name -> backend (the backend modules import their trackers only when they log)
BACKENDS: Dict[str, Backend] = _load()
#: the names ``YOLO_DET_TRACKERS`` accepts
NAMES: Tuple[str, ...] = tuple(BACKENDS)


def get(name: str) -> Backend:
    """The backend named ``name`` (a KeyError for a name not in :data:`NAMES`)."""
    return BACKENDS[name]


__all__ = ["BACKENDS", "MODULES", "NAMES", "get"]
