"""Seeds of a hyperparameter search (YOLOv5 ``--evolve``, the Ultralytics tuner, outside sweeps).

Generation (or iteration) ``g`` of a search with seed ``s`` draws its mutation from a generator
derived as ``SeedSequence([s, g, MUTATION])``: a pure function of (seed, generation), so two
searches with one seed mutate identically, another seed mutates otherwise, and a search resumed
at generation ``g`` (which counts the rows already written) continues the same sequence.

Trials train with the search's own seed (:data:`TRIAL_POLICY` ``"run"``), not a derived one: the
releases already do so, and with common random numbers the fitness of two trials differs by their
hyperparameters alone, not by their weight initialisation or data order. :func:`trial_seed` is
the one place this is decided; every record of a generation carries the seed its trial used.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

from . import atomic
from .seeding import MAX_SEED, _check_seed

#: Stream tags mixed into a generation's SeedSequence (one per use, so uses never share a stream).
MUTATION, SELECTION, START = 0, 1, 2
#: How each trial's training is seeded: ``"run"`` = the search's own seed for every trial.
TRIAL_POLICY = "run"


def generation_sequence(seed: int, generation: int, stream: int = MUTATION) -> np.random.SeedSequence:
    """The SeedSequence of one use (``stream``) of generation ``generation`` of a search seeded ``seed``."""
    if int(generation) < 0:
        raise ValueError(f"generation must be >= 0, got {generation}")
    return np.random.SeedSequence([_check_seed(seed), int(generation), int(stream)])


def generation_rng(seed: int, generation: int, stream: int = MUTATION) -> np.random.Generator:
    """A ``numpy.random.Generator`` for generation ``generation`` (what the Ultralytics tuner mutates with)."""
    return np.random.Generator(np.random.PCG64(generation_sequence(seed, generation, stream)))


def generation_random_state(seed: int, generation: int, stream: int = MUTATION) -> np.random.RandomState:
    """A legacy ``RandomState`` for generation ``generation``: the ``np.random`` API YOLOv5's mutation calls."""
    return np.random.RandomState(generation_sequence(seed, generation, stream).generate_state(4, dtype=np.uint32))


def generation_python_random(seed: int, generation: int, stream: int = SELECTION) -> random.Random:
    """A Python ``random.Random`` for generation ``generation`` (parent selection with ``random.choices``)."""
    words = generation_sequence(seed, generation, stream).generate_state(2, dtype=np.uint32)
    return random.Random(int(words[0]) << 32 | int(words[1]))


def trial_seed(seed: int, generation: int) -> int:
    """The training seed of generation ``generation``'s trial under :data:`TRIAL_POLICY` (the search's seed)."""
    generation_sequence(seed, generation)  # validates both
    return int(seed) & MAX_SEED


@dataclass(frozen=True)
class GenerationRecord:
    """What a search writes beside each row of its results: how that row's generation was seeded."""

    generation: int
    search_seed: int
    trial_seed: int
    trial_policy: str
    mode: str
    seeded: bool  # False under off: the release's own (clock / OS entropy) generator was used

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def generation_record(seed: int, generation: int, mode: str) -> GenerationRecord:
    """The record of generation ``generation`` of a search seeded ``seed`` under ``mode``."""
    return GenerationRecord(int(generation), int(seed), trial_seed(seed, generation), TRIAL_POLICY, mode,
                            mode != "off")


#: The file a search writes beside its results: one JSON line per generation (:class:`GenerationRecord`).
RECORDS = "search_seeds.jsonl"


def append_record(folder: "os.PathLike[str] | str", record: GenerationRecord) -> Path:
    """Add ``record`` to ``folder``/:data:`RECORDS`, replacing an earlier line of the same generation."""
    path = Path(folder) / RECORDS
    kept = [r for r in read_records(path) if r.get("generation") != record.generation]
    kept.append(record.to_dict())
    kept.sort(key=lambda r: int(r.get("generation", 0)))
    atomic.write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
    return path


def read_records(path: "os.PathLike[str] | str") -> List[Dict[str, Any]]:
    """The generation records in ``path`` (a :data:`RECORDS` file, or the folder holding one); [] if none."""
    path = Path(path)
    if path.is_dir():
        path = path / RECORDS
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a kill; the next write replaces the file
    return out


__all__ = ["GenerationRecord", "MUTATION", "RECORDS", "SELECTION", "START", "TRIAL_POLICY", "append_record",
           "generation_python_random", "generation_random_state", "generation_record", "generation_rng",
           "generation_sequence", "read_records", "trial_seed"]
