"""Seeds by role: model initialisation, epoch order and per-sample augmentation, each its own stream.

A run's randomness comes from three sources yolo-det owns: the main process' streams (model
initialisation and the training loop's own draws, seeded as the release seeds them, ``seed + 1 +
RANK``), the epoch order (:func:`~yolo_det.core.streams.epoch_order`, from ``(order seed, epoch)``)
and the per-sample streams (:func:`~yolo_det.core.streams.epoch_words`, from ``(augment seed,
epoch, index)``). Each role's seed is the run's seed unless ``$YOLO_DET_SEED_<ROLE>`` overrides it,
so a run without overrides is exactly the run it always was, and ``yolo-det seeds --vary ROLE``
changes one source while the others stay fixed. The order and sample streams keep their own
SeedSequence tags, so the three streams never overlap even when the role seeds are equal.
"""

from __future__ import annotations

import os
from typing import Dict, Mapping, Optional

from . import env_names
from .environment import SEED_MAX as MAX_SEED  # the seed range, without importing torch (the CLI reads roles)
from .mode import ConfigError

#: The roles, in the order tables print them.
ROLES = ("init", "order", "augment")
#: What each role seeds, for messages and docs.
ROLE_TEXT = {
    "init": "model initialisation and the training loop's own draws (the main process' random, numpy, torch)",
    "order": "the order of the samples in each epoch",
    "augment": "each sample's augmentation streams (mosaic partners, flips, HSV, albumentations)",
}
#: ``$YOLO_DET_SEED_INIT`` and so on: a role seed that differs from the run's seed.
ROLE_ENV = {role: f"{env_names.SEED_ROLE_PREFIX}{role.upper()}" for role in ROLES}
#: The seed a launched training uses when its command gives none (``yolo-det run --seed``, ``yolo-det seeds``).
TRAIN_SEED_ENV = env_names.TRAIN_SEED
#: ``--vary`` choices.
VARY = ("all",) + ROLES


def _parse(name: str, text: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ValueError(f"${name}={text!r} is not a whole number") from None
    if not 0 <= value <= MAX_SEED:
        raise ValueError(f"${name}={value} is outside 0..{MAX_SEED}")
    return value


def train_seed(env: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """The run seed handed on by ``yolo-det run --seed`` / ``yolo-det seeds`` (None when not set)."""
    env = os.environ if env is None else env
    text = env.get(TRAIN_SEED_ENV, "").strip()
    return _parse(TRAIN_SEED_ENV, text) if text else None


def overrides(env: Optional[Mapping[str, str]] = None) -> Dict[str, int]:
    """The role seeds set in the environment (``{role: seed}``), checked."""
    env = os.environ if env is None else env
    found = {}
    for role in ROLES:
        text = env.get(ROLE_ENV[role], "").strip()
        if text:
            found[role] = _parse(ROLE_ENV[role], text)
    return found


def role_seeds(seed: Optional[int], env: Optional[Mapping[str, str]] = None) -> Dict[str, Optional[int]]:
    """Each role's seed: its override, else the run's ``seed`` (the user's, before ``+ 1 + RANK``)."""
    found = overrides(env)
    return {role: found.get(role, None if seed is None else int(seed)) for role in ROLES}


def seed_for(seeds: Optional[Mapping[str, object]], role: str, default: int) -> int:
    """``role``'s seed in a ``seeds`` record (:func:`record`), else ``default`` (the run's seed as the loader has it)."""
    value = (seeds or {}).get(role)
    return int(default) if value is None else int(value)  # type: ignore[arg-type]


def record(seed: Optional[int], env: Optional[Mapping[str, str]] = None) -> Dict[str, object]:
    """The ``seeds`` block of determinism.json and the fingerprint header: the run seed, one seed per
    role and which roles were overridden."""
    found = overrides(env)
    return {"run": seed, **role_seeds(seed, env), "overridden": sorted(found)}


def check_mode(mode: str, env: Optional[Mapping[str, str]] = None) -> None:
    """Order and augmentation seeds act through the per-sample streams, which run under strict and warn:
    under off an override of either is a :class:`ConfigError` naming the variable."""
    found = [ROLE_ENV[r] for r in ("order", "augment") if r in overrides(env)]
    if mode == "off" and found:
        raise ConfigError(f"{', '.join('$' + f for f in found)} needs yolo-det's per-sample streams, which run "
                          "under strict and warn only; unset it or train with --deterministic strict")


def reseed_init(init_seed: int, applied: int, run_seed: Optional[int], rank: Optional[int] = None) -> int:
    """Re-seed the main process as the release would have with ``init_seed`` as its seed: the release
    applied ``applied`` for ``run_seed`` (YOLOv5 and Ultralytics: ``seed + 1 + RANK``), so the same
    offset is kept. Returns the seed applied."""
    seed = (int(applied) - int(run_seed or 0) + int(init_seed)) & MAX_SEED
    from . import seeding  # torch, only when a run really reseeds

    return seeding.seed_everything(seed, rank)


def study_env(vary: str, trial_seed: int, fixed_seed: int) -> Dict[str, str]:
    """The environment of one study run: ``all`` trains with ``trial_seed`` itself; a single role trains
    with ``fixed_seed`` and gives only that role ``trial_seed`` (the run with ``trial_seed ==
    fixed_seed`` is then the plain run of that seed, in every study)."""
    if vary not in VARY:
        raise ValueError(f"--vary {vary!r} is not one of {', '.join(VARY)}")
    if vary == "all":
        return {TRAIN_SEED_ENV: str(int(trial_seed))}
    env = {TRAIN_SEED_ENV: str(int(fixed_seed))}
    if int(trial_seed) != int(fixed_seed):
        env[ROLE_ENV[vary]] = str(int(trial_seed))
    return env


__all__ = ["ROLES", "ROLE_ENV", "ROLE_TEXT", "TRAIN_SEED_ENV", "VARY", "check_mode", "overrides", "record",
           "reseed_init", "role_seeds", "seed_for", "study_env", "train_seed"]
