"""Ultralytics' logger callbacks (MLflow, TensorBoard, W&B, HUB, ...) run with the training's RNG states set aside.

A logger that draws from python's, numpy's or torch's global generator moves the training's streams at a moment
that depends on the network or the clock: MLflow retries a busy server with a random back-off
(``random.random()``), a tracker draws a run name at random. Two runs of one command would then differ in an RNG
state for a reason no setting names. Under strict and warn each integration callback (a function of
``ultralytics.utils.callbacks.<integration>``, never ``base`` nor the user's own) gets the states back as they
were; under off the training is left as the release runs it.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, MutableMapping

from ...core import rng

#: where a release keeps its integration callbacks; ``base`` holds the defaults, which log nothing
INTEGRATIONS = "ultralytics.utils.callbacks."
DEFAULTS = "ultralytics.utils.callbacks.base"
_GUARDED = "_yolo_det_rng_guarded"


def is_logger(callback: Any) -> bool:
    """Whether ``callback`` is one of the release's integration callbacks (by the module it was defined in)."""
    module = getattr(callback, "__module__", None) or ""
    return module.startswith(INTEGRATIONS) and module != DEFAULTS


def rng_guarded(callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback`` run with the host RNG states (python, numpy, torch CPU) restored after it, raising or not."""
    if getattr(callback, _GUARDED, False):
        return callback

    @functools.wraps(callback)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        states = rng.host_states()
        try:
            return callback(*args, **kwargs)
        finally:
            rng.set_host_states(states)

    setattr(guarded, _GUARDED, True)
    return guarded


def guard(callbacks: MutableMapping[str, List[Callable[..., Any]]]) -> List[str]:
    """Wrap every logger callback of a trainer's table in place (idempotent); return their names
    (``mlflow.on_fit_epoch_end``), each once, for the run's report."""
    names: Dict[str, None] = {}
    for event, table in callbacks.items():
        for i, callback in enumerate(table):
            if is_logger(callback):
                table[i] = rng_guarded(callback)
                names[f"{callback.__module__.rsplit('.', 1)[-1]}.{event}"] = None
    return list(names)


__all__ = ["DEFAULTS", "INTEGRATIONS", "guard", "is_logger", "rng_guarded"]
