"""Ultralytics YOLOv8/11 training (every task, RT-DETR) under yolo-det's strict|warn|off modes.

``trainer``: the trainers and ``enable()``; ``api``: every private Ultralytics API touched, found by
feature (the one module that reaches into Ultralytics internals); ``mode``: the trainer's mode inputs;
``streams``: its data streams; ``resume``: exact resume (the sidecar, refusals, the stop after epoch K);
``validation`` and ``evaluation``: training-time validation, standalone ``val``/``predict``; ``export``:
``model.export`` with provenance written into the artifact; ``ddp``: CPU DDP; ``world``: world-size invariance;
``tune``: the tuner as a function of its seed; ``loggers``: the release's logger callbacks kept off the
training's RNG states. The trainers' public path is this package (``yolo_det.integrations.ultralytics.
DeterministicTrainer``, as DDP ranks re-create them); its names are loaded on first use, so importing a
submodule such as ``mode`` does not import Ultralytics.
"""

from __future__ import annotations

import importlib

_SUBMODULES = ("api", "ddp", "evaluation", "export", "loggers", "mode", "resume", "streams", "trainer", "tune",
               "validation", "world")


def __getattr__(name: str):
    """A submodule, or a name of :mod:`.trainer` (the trainers, ``enable()``), loaded on first use."""
    if name.startswith("__"):  # probes such as __wrapped__ or __path__ lookups load nothing
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    return getattr(importlib.import_module(".trainer", __name__), name)
