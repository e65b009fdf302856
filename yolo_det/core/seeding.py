"""Seeds for the main process, DataLoader workers, samplers and hyperparameter trials.

Streams are derived with ``numpy.random.SeedSequence`` from (seed, worker id, rank), never
as ``seed + i``: derived streams are statistically independent, so workers and ranks never
share one, and two base seeds never produce overlapping runs.
"""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING, Any, List, Optional

import numpy as np

from . import env_names

if TYPE_CHECKING:  # torch is imported by the functions that use it: core.search's seeds load without it
    import torch

MAX_SEED = 2**32 - 1  # numpy's legacy seeding accepts 0 .. 2**32 - 1


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    seed = int(seed)
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed {seed} is out of range 0..{MAX_SEED}")
    return seed


def _rank(rank: Optional[int]) -> int:
    """``rank`` as an int >= 0: explicit, else ``$YOLO_DET_RANK``, ``$RANK``, 0 (-1 = no DDP)."""
    if rank is None:
        rank = int(os.environ.get(env_names.RANK) or os.environ.get("RANK") or 0)
    return max(int(rank), 0)


def _sequence(*entropy: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([int(e) for e in entropy])


def _seed_streams(ss: np.random.SeedSequence) -> int:
    """Seed ``random``, ``numpy`` and ``torch`` (CPU and every CUDA device) from one sequence."""
    import torch

    words = ss.generate_state(4, dtype=np.uint32)
    torch_seed = (int(words[0]) << 32 | int(words[1])) & (2**63 - 1)
    random.seed(int(words[2]) << 32 | int(words[3]))
    np.random.seed(words)
    torch.manual_seed(torch_seed)  # also seeds every CUDA device
    return torch_seed


def seed_everything(seed: int, rank: Optional[int] = 0) -> int:
    """Seed ``random``, ``numpy`` and ``torch`` (CPU and CUDA) with ``seed`` and return it.

    ``seed`` is used as is (0 .. 2**32 - 1), so the main process matches scripts that call
    ``random.seed(seed)``, ``np.random.seed(seed)``, ``torch.manual_seed(seed)``. ``rank``
    (the DDP rank; -1 or 0 for one process) is kept in ``$YOLO_DET_RANK`` for
    :func:`seed_worker`, which mixes it into every worker's streams.
    """
    import torch

    seed = _check_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ[env_names.SEED] = str(seed)
    os.environ[env_names.RANK] = str(_rank(rank))
    return seed


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn`` for ``torch.utils.data.DataLoader``: independent streams per worker.

    Derives ``random``, ``numpy`` and ``torch`` seeds with SeedSequence from (the loader's
    base seed for this epoch, worker id, rank). The base seed comes from the loader's
    generator (see :func:`make_generator`), so the same seed gives the same batches, another
    seed other batches, and each epoch fresh augmentations. Albumentations pipelines found
    on the worker's dataset are seeded too (>= 1.4.21 ignores the global seeds).
    """
    import torch

    info = torch.utils.data.get_worker_info()
    base = (info.seed - worker_id) if info is not None else int(os.environ.get(env_names.SEED, "0"))
    ss = _sequence(base & (2**64 - 1), worker_id, _rank(None))
    _seed_streams(ss)
    if info is not None:
        seed_albumentations(info.dataset, int(ss.generate_state(1, dtype=np.uint32)[0]))


def make_generator(seed: int, rank: Optional[int] = 0) -> torch.Generator:
    """A ``torch.Generator`` for a DataLoader's shuffle and worker base seeds, per (seed, rank)."""
    import torch

    seed = _check_seed(seed)
    words = _sequence(seed, _rank(rank), 0x5EED).generate_state(2, dtype=np.uint32)
    generator = torch.Generator()
    generator.manual_seed((int(words[0]) << 32 | int(words[1])) & (2**63 - 1))
    return generator


def trial_seeds(seed: int, n: int) -> List[int]:
    """``n`` independent seeds (0 .. 2**32 - 1) for sweeps or repeated trials, from one base seed."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    children = np.random.SeedSequence(_check_seed(seed)).spawn(n)
    return [int(child.generate_state(1, dtype=np.uint32)[0]) for child in children]


def albumentations_status() -> Optional[str]:
    """How albumentations is seeded, or None when it is not installed.

    Albumentations >= 1.4.21 keeps its own generator and ignores ``random``/``np.random``
    seeds. :func:`seed_worker` seeds the pipelines it finds on the worker's dataset; others
    need ``seed=`` on ``A.Compose``. Earlier versions follow the global seeds.
    """
    try:
        from importlib.metadata import version as _version

        version = _version("albumentations")
    except Exception:
        return None
    parts = tuple(int(p) for p in version.split(".")[:3] if p.isdigit())
    if parts >= (1, 4, 21):
        return (
            f"albumentations {version} ignores global seeds; yolo-det's seed_worker seeds the "
            "pipelines on the DataLoader's dataset, pass seed= to A.Compose for any other"
        )
    return f"albumentations {version} follows the global random/numpy seeds"


def albumentations_pipelines(obj: object, depth: int = 3) -> List[Any]:
    """Albumentations pipelines reachable from ``obj`` (attributes, lists, dicts; ``depth`` levels).

    YOLOv5 keeps its pipeline at ``dataset.albumentations.transform``; Ultralytics inside
    ``dataset.transforms``.
    """
    import torch

    found: List[Any] = []
    seen: set = set()

    def visit(node: object, level: int) -> None:
        if id(node) in seen or level < 0 or isinstance(node, (str, bytes, int, float, np.ndarray, torch.Tensor)):
            return
        seen.add(id(node))
        if type(node).__module__.startswith("albumentations") and hasattr(node, "set_random_seed"):
            found.append(node)
            return
        if isinstance(node, (list, tuple)):
            children = list(node)
        elif isinstance(node, dict):
            children = list(node.values())
        else:
            children = list(getattr(node, "__dict__", {}).values())
        for child in children:
            visit(child, level - 1)

    visit(obj, depth)
    return found


def seed_albumentations(obj: object, seed: int, _depth: int = 3) -> int:
    """Seed every albumentations pipeline reachable from ``obj`` (see :func:`albumentations_pipelines`);
    returns how many were seeded."""
    pipelines = albumentations_pipelines(obj, _depth)
    for pipeline in pipelines:
        pipeline.set_random_seed(int(seed) & MAX_SEED)
    return len(pipelines)
