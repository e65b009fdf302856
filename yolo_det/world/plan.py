"""The micro-batch plan: V virtual ranks of B/V images each, split into contiguous groups over N processes."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Mapping, Optional, Tuple

import torch

from ..core.mode import ConfigError, validate_virtual_world_size


@dataclass(frozen=True)
class WorldPlan:
    """Physical rank ``rank`` of ``world_size`` (N) processes runs virtual ranks ``first .. first + per_rank - 1``
    of ``virtual_world_size`` (V), each a micro-batch of ``batch // V`` images, one after another."""

    virtual_world_size: int
    world_size: int = 1
    rank: int = 0
    batch: Optional[int] = None  # the total batch B of one optimizer step's forward (all ranks), if known

    def __post_init__(self) -> None:
        validate(self.virtual_world_size, self.world_size, self.batch)
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank {self.rank} is outside a world of {self.world_size} processes")

    @property
    def per_rank(self) -> int:
        """V/N: the virtual micro-batches each process runs per batch."""
        return self.virtual_world_size // self.world_size

    @property
    def first(self) -> int:
        return self.rank * self.per_rank

    @property
    def virtual_ranks(self) -> List[int]:
        return list(range(self.first, self.first + self.per_rank))

    @property
    def micro_batch(self) -> Optional[int]:
        """B/V images per virtual rank (None when the batch is not known)."""
        return None if self.batch is None else self.batch // self.virtual_world_size

    @property
    def local_batch(self) -> Optional[int]:
        """B/N images per process and batch: its V/N micro-batches together."""
        return None if self.batch is None else self.batch // self.world_size

    def slices(self, n: int) -> List[Tuple[int, int]]:
        """The ``(start, stop)`` of each of this rank's micro-batches in a local batch of ``n`` images.

        ``n`` is ``local_batch`` except for an epoch's last, shorter batch, where every virtual rank
        contributes the same smaller count (the sampler pads every virtual rank's share alike)."""
        m = self.per_rank
        if n % m:
            raise ValueError(f"a local batch of {n} images does not split into {m} equal virtual micro-batches")
        size = n // m
        return [(j * size, (j + 1) * size) for j in range(m)]

    def to_dict(self) -> dict:
        return {"virtual_world_size": self.virtual_world_size, "world_size": self.world_size,
                "micro_batch": self.micro_batch, "per_rank": self.per_rank}


def validate(virtual_world_size: int, world_size: int = 1, batch: Optional[int] = None) -> None:
    """Raise :class:`ConfigError` unless V is a power of two, N divides V and the batch divides by V."""
    v = validate_virtual_world_size(virtual_world_size)
    if world_size < 1 or v % world_size:
        raise ConfigError(f"virtual_world_size {v} cannot run on {world_size} processes: the number of processes "
                          f"must divide V (run 1, 2, 4 ... {v} processes, or choose another V)")
    if batch is not None and (batch < v or batch % v):
        raise ConfigError(f"the batch size {batch} does not divide into virtual_world_size {v} micro-batches: use a "
                          f"multiple of {v} (each virtual rank trains on batch/V images, as each of V GPUs would)")


def plan_from_env(virtual_world_size: int, batch: Optional[int] = None,
                  env: Optional[Mapping[str, str]] = None) -> WorldPlan:
    """The plan of this process from torchrun's ``RANK``/``WORLD_SIZE`` (one process when they are unset)."""
    env = os.environ if env is None else env
    return WorldPlan(int(virtual_world_size), int(env.get("WORLD_SIZE", 1) or 1), int(env.get("RANK", 0) or 0), batch)


def split_targets(targets: torch.Tensor, lo: int, hi: int, column: int = 0) -> torch.Tensor:
    """The rows of YOLO-format ``targets`` (image index in ``column``) of images ``lo .. hi-1``, re-indexed from 0:
    one micro-batch's labels (YOLOv5's ``[image, class, x, y, w, h]``; Ultralytics' ``batch_idx`` likewise)."""
    index = targets[:, column]
    rows = targets[(index >= lo) & (index < hi)].clone()
    rows[:, column] -= lo
    return rows
