"""The Ultralytics tuner (``model.tune(...)``, ``yolo tune``) as a function of its seed.

:func:`enable` wraps ``ultralytics.engine.tuner.Tuner``, found by attribute and by the names its
``_mutate`` draws from (checked on 8.2.103 and 8.4.190):

* ``_mutate``: under strict/warn the numpy generator it mutates with (``np.random.default_rng()``
  in 8.4, ``np.random`` reseeded from the clock before) and Python's ``random`` (parent selection
  in older releases) are derived from (seed, iteration); the iteration is the number of results
  already written, so a resumed search continues the same sequence. Under off the release's own.
* ``__init__``: the base model 8.4 saves and fine-tunes every trial from was built by the caller
  (``YOLO("yolov8n.yaml")``) with PyTorch's start-up generator, which torch seeds from the operating
  system: two searches then trained iteration 1 from different weights. Under strict/warn a
  base model built from a YAML has its weights drawn again from the seed (what ``yolo train`` does
  for a YAML model); one loaded from a checkpoint is left alone.
* ``__call__``: the trials (child ``yolo train`` processes) inherit the mode, the seed, yolo-det's
  launch bootstrap and, with ``$YOLO_DET_FINGERPRINT``, a fingerprint file of their own per iteration.

Every iteration's seeding is recorded in ``search_seeds.jsonl`` in the tune folder.
"""

from __future__ import annotations

import copy
import functools
import os
import random
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
import torch

from ...core import env_names
from ...core import environment, search
from ...core.mode import HYP_KEYS
from ...proof import search as search_proof
from .. import launch
from .mode import ModeInputs

FINGERPRINT_ENV = env_names.FINGERPRINT
_MARK = "_yolo_det_tune"


def tuner_class() -> Optional[type]:
    """Ultralytics' ``Tuner`` class, or None when this release has none."""
    try:
        from ultralytics.engine import tuner
    except ImportError:
        return None
    return getattr(tuner, "Tuner", None)


def enabled() -> bool:
    """Whether :func:`enable` is in effect."""
    cls = tuner_class()
    return cls is not None and getattr(cls._mutate, _MARK, False)


def enable() -> bool:
    """Make the tuner's searches a function of their seed (idempotent); False when there is no Tuner."""
    cls = tuner_class()
    if cls is None or not callable(getattr(cls, "_mutate", None)):
        return False
    if enabled():
        return True
    for name, wrap in (("__init__", _wrap_init), ("_mutate", _wrap_mutate), ("__call__", _wrap_call)):
        original = getattr(cls, name)
        wrapped = functools.wraps(original)(wrap(original))
        setattr(wrapped, _MARK, True)
        setattr(cls, name, wrapped)
    return True


def disable() -> None:
    """Undo :func:`enable`."""
    cls = tuner_class()
    if cls is None:
        return
    for name in ("__init__", "_mutate", "__call__"):
        while getattr(getattr(cls, name), _MARK, False):
            setattr(cls, name, getattr(cls, name).__wrapped__)


# -- the wrappers ----------------------------------------------------------------------------

def _wrap_init(original: Callable) -> Callable:
    def __init__(self: Any, args: Any = None, *a: Any, **kw: Any) -> None:
        mode, args = _split_mode(args)
        original(self, args, *a, **kw)
        seed = _seed(self)
        self.yolo_det_search = {"mode": mode, "seed": seed, "base_weights": "as given"}
        if mode != "off" and _redraw_base(self, seed):
            self.yolo_det_search["base_weights"] = f"drawn from seed {seed} (built from a YAML)"
    return __init__


def _wrap_mutate(original: Callable) -> Callable:
    def _mutate(self: Any, *a: Any, **kw: Any) -> Dict[str, float]:
        mode, seed = _settings(self)
        generation = _done(self)
        _record(self, search.generation_record(seed, generation, mode))
        _trial_fingerprint(self, generation)
        if mode == "off":
            return original(self, *a, **kw)
        with _seeded_globals(original, seed, generation):
            return original(self, *a, **kw)
    return _mutate


def _wrap_call(original: Callable) -> Callable:
    def __call__(self: Any, *a: Any, **kw: Any) -> Any:
        mode, seed = _settings(self)
        saved = {k: os.environ.get(k) for k in _CHILD_VARS}
        os.environ.update(environment.launcher_env(None, seed, os.environ))  # the mode travels as it came
        os.environ.update(launch.child_env(os.environ))  # trials are `yolo train` processes: under yolo-det too
        self.yolo_det_fingerprint = saved.get(FINGERPRINT_ENV)
        try:
            return original(self, *a, **kw)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    return __call__


_CHILD_VARS = (environment.CUBLAS_VAR, "PYTHONHASHSEED", HYP_KEYS["deterministic"], env_names.SEED, "PYTHONPATH",
               launch.BOOTSTRAP_VAR, FINGERPRINT_ENV)


# -- helpers ---------------------------------------------------------------------------------

def _split_mode(args: Any) -> Tuple[str, Any]:
    """The search's mode (yolo-det's keys taken out of ``args`` as a trainer does) and the args left."""
    overrides = dict(args or {})
    inputs = ModeInputs.from_overrides(overrides)
    explicit = inputs.explicit
    mode = inputs.resolve().mode
    if isinstance(overrides.get("deterministic"), str):
        overrides["deterministic"] = True  # Ultralytics' own argument is a bool
    if explicit.get("deterministic"):
        os.environ[HYP_KEYS["deterministic"]] = mode  # the trials read it from the environment
    return mode, overrides


def _seed(tuner: Any) -> int:
    """The search's seed: the tuner's ``seed`` argument (every trial trains with it)."""
    value = getattr(getattr(tuner, "args", None), "seed", None)
    return int(value) if value is not None else int(os.environ.get(env_names.SEED) or 0)


def _settings(tuner: Any) -> Tuple[str, int]:
    info = getattr(tuner, "yolo_det_search", None) or {}
    return info.get("mode", "warn"), info.get("seed", _seed(tuner))


def _done(tuner: Any) -> int:
    """Iterations already recorded (the next one's 0-based index): 8.4's NDJSON, earlier releases' CSV."""
    load = getattr(tuner, "_load_local_results", None)
    if callable(load):
        return len(load())
    csv = getattr(tuner, "tune_csv", None)
    if csv is not None and Path(csv).is_file():
        lines = [line for line in Path(csv).read_text(encoding="utf-8").splitlines() if line.strip()]
        return max(len(lines) - 1, 0)  # a header line
    return 0


def _record(tuner: Any, record: search.GenerationRecord) -> None:
    folder = getattr(tuner, "tune_dir", None)
    if folder is not None:
        search.append_record(folder, record)
        search_proof.announce(folder, getattr(tuner, "yolo_det_fingerprint", None))


def _trial_fingerprint(tuner: Any, generation: int) -> None:
    """With a fingerprint file asked for, each trial writes its own (``NAME.iterN.jsonl``)."""
    base = getattr(tuner, "yolo_det_fingerprint", None)
    if base:
        path = Path(base)
        os.environ[FINGERPRINT_ENV] = str(path.with_name(f"{path.stem}.iter{generation + 1}{path.suffix}"))


def _redraw_base(tuner: Any, seed: int) -> bool:
    """Draw a YAML-built base model's weights again from ``seed``; False when it came from a checkpoint."""
    model = getattr(tuner, "model", None)
    source = str(getattr(getattr(tuner, "args", None), "model", "") or "")
    cfg = getattr(model, "yaml", None)
    from_yaml = Path(source).suffix in (".yaml", ".yml")
    if not isinstance(model, torch.nn.Module) or not isinstance(cfg, dict) or not from_yaml:
        return False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = type(model)(copy.deepcopy(cfg), verbose=False)
    model.load_state_dict(fresh.state_dict())
    return True


class _SeededNumpyRandom:
    """``numpy.random`` as ``_mutate`` sees it: ``default_rng()``, the legacy draws and ``seed`` from one generation."""

    def __init__(self, generator: np.random.Generator, state: np.random.RandomState) -> None:
        self._generator, self._state = generator, state

    def default_rng(self, seed: Any = None) -> np.random.Generator:
        return self._generator if seed is None else np.random.default_rng(seed)

    def seed(self, *args: Any, **kwargs: Any) -> None:
        """The release's clock reseed: ignored, the generation's stream is already seeded."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name) if hasattr(self._state, name) else getattr(np.random, name)


class _NumpyView:
    """The ``np`` a seeded ``_mutate`` sees: numpy with ``random`` replaced."""

    def __init__(self, rng: _SeededNumpyRandom) -> None:
        self.random = rng

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)


class _seeded_globals:
    """Swap ``np`` and ``random`` in ``func``'s module for generation-derived ones while it runs."""

    def __init__(self, func: Callable, seed: int, generation: int) -> None:
        self.namespace = getattr(func, "__globals__", {})
        rng = _SeededNumpyRandom(search.generation_rng(seed, generation),
                                 search.generation_random_state(seed, generation))
        self.swap: Dict[str, Any] = {}
        if self.namespace.get("np") is np:
            self.swap["np"] = _NumpyView(rng)
        if self.namespace.get("random") is random:
            self.swap["random"] = search.generation_python_random(seed, generation)
        self.saved: Dict[str, Any] = {}

    def __enter__(self) -> None:
        for key, value in self.swap.items():
            self.saved[key] = self.namespace[key]
            self.namespace[key] = value

    def __exit__(self, *exc: Any) -> None:
        self.namespace.update(self.saved)


__all__ = ["disable", "enable", "enabled", "tuner_class"]
