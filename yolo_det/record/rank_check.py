"""Under ``torch.distributed``: every rank's parameter digests after each step, compared across ranks."""

from __future__ import annotations

import collections
import os
import warnings
from typing import Any, Dict, List, Optional

import numpy as np
import torch


class DDPMismatchWarning(RuntimeWarning):
    """DDP ranks hold different parameters after an optimizer step."""


class RankCheck:
    """Compares this rank's parameter digests with the other ranks' (``all_gather``) and warns once."""

    def __init__(self, rank: int, path: os.PathLike) -> None:
        self.rank = rank
        self.path = path
        self._warned = False
        self._disabled = False
        self._size_checked = False

    def check(self, digests: torch.Tensor, names: List[str], step: int) -> Optional[Dict[str, Any]]:
        """Gather every rank's parameter digests of ``step``; the ``ddp`` field of its line (None: no DDP)."""
        dist = torch.distributed
        if self._disabled or not (dist.is_available() and dist.is_initialized()):
            return None
        world = dist.get_world_size()
        if world < 2:
            return None
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
        flat = digests.reshape(-1).to(device)
        if not self._size_checked:
            sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
            dist.all_gather(sizes, torch.tensor([flat.numel()], dtype=torch.int64, device=device))
            self._size_checked = True
            if len({int(s) for s in sizes}) > 1:
                self._disabled = True
                self._warn(f"yolo-det: DDP ranks train different parameter lists ({[int(s) for s in sizes]} "
                           "digest words); the cross-rank check is off")
                return {"world_size": world, "ok": False, "rank": None, "tensor": None, "ranks": []}
        gathered = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(gathered, flat)
        rows = [g.cpu().numpy().reshape(-1, 2) for g in gathered]
        keys = [r.tobytes() for r in rows]
        counts = collections.Counter(keys)
        reference = min(range(world), key=lambda r: (-counts[keys[r]], r))
        differ = [r for r in range(world) if keys[r] != keys[reference]]
        if not differ:
            return {"world_size": world, "ok": True}
        first = differ[0]
        index = int(np.nonzero((rows[first] != rows[reference]).any(1))[0][0])
        info = {"world_size": world, "ok": False, "ranks": differ, "rank": first, "tensor": names[index],
                "reference_rank": reference}
        if not self._warned:
            self._warned = True
            self._warn(f"yolo-det: DDP ranks diverged at step {step}: rank {first}'s parameters differ from rank "
                       f"{reference}'s, first at {names[index]} (ranks differing: {differ}); see {self.path}")
        return info

    @staticmethod
    def world() -> int:
        """The number of ranks (1 without ``torch.distributed``)."""
        dist = torch.distributed
        return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1

    def _warn(self, message: str) -> None:
        if self.rank <= 0:
            warnings.warn(message, DDPMismatchWarning, stacklevel=2)


__all__ = ["DDPMismatchWarning", "RankCheck"]
