"""BatchNorm running statistics under V micro-batches: one fixed rule, virtual micro-batch 0 updates them.

This is what DDP's buffer broadcast from rank 0 makes of a V-GPU run: every GPU normalises with its own
batch statistics, and the running statistics that survive are rank 0's. The forwards of the other
micro-batches update the buffers too; they are put back exactly (a copy, not an inverse update).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, List

import torch
import torch.nn as nn


def bn_buffers(model: nn.Module) -> List[torch.Tensor]:
    """Every buffer of every BatchNorm module (running mean and variance, ``num_batches_tracked``)."""
    return [b for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) for b in m.buffers()]


class RunningStatsRule:
    """``with rule.micro_batch(v):`` around a micro-batch's forward: unless ``v`` is 0 the buffers are restored."""

    def __init__(self, model: nn.Module) -> None:
        self.buffers = bn_buffers(model)

    @contextlib.contextmanager
    def micro_batch(self, virtual_rank: int) -> Iterator[None]:
        if virtual_rank == 0 or not self.buffers:
            yield
            return
        saved = [b.detach().clone() for b in self.buffers]
        try:
            yield
        finally:
            with torch.no_grad():
                for b, s in zip(self.buffers, saved):
                    b.copy_(s)

    def broadcast(self, group: Any = None) -> None:
        """Give every process of ``group`` its rank 0's buffers (the holder of virtual micro-batch 0's update)."""
        import torch.distributed as dist

        if self.buffers and dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1:
            src = dist.get_global_rank(group, 0) if group is not None else 0
            with torch.no_grad():
                for b in self.buffers:
                    dist.broadcast(b, src, group=group)
