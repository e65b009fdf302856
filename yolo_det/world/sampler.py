"""Each virtual rank's data as a function of (seed, epoch, virtual rank), never of the number of processes.

The epoch's order comes from ``core.streams.epoch_order`` with V shards (padded to a multiple of V,
which depends on V only, unlike ``DistributedSampler`` over N). A process yields, batch after batch,
the micro-batches of its virtual ranks one after another, so a loader with ``batch_size = B/N`` hands
it exactly the images those V/N GPUs would have loaded.
"""

from __future__ import annotations

from typing import Iterator, List, Tuple

from ..core.streams import EpochSampler, epoch_order
from .plan import WorldPlan


class VirtualSampler(EpochSampler):
    """An :class:`~yolo_det.core.streams.EpochSampler` over this process's virtual ranks (items ``(epoch, index)``).

    Use with ``SampleStreams`` (per-sample random streams) and ``batch_size = plan.local_batch``."""

    def __init__(self, n: int, seed: int, plan: WorldPlan, shuffle: bool = True, start_epoch: int = 0,
                 drop_last: bool = False) -> None:
        if plan.micro_batch is None:
            raise ValueError("VirtualSampler needs the plan's batch size")
        super().__init__(n, seed, shuffle, start_epoch, rank=0, world_size=1, drop_last=drop_last)
        self.plan = plan

    def shard(self, epoch: int, virtual_rank: int) -> List[int]:
        """The sample indices virtual rank ``virtual_rank`` trains on in ``epoch``, in order."""
        return epoch_order(self.n, self.seed, epoch, self.shuffle, virtual_rank, self.plan.virtual_world_size,
                           self.drop_last)

    def __len__(self) -> int:
        v = self.plan.virtual_world_size
        per_virtual = self.n // v if self.drop_last else -(-self.n // v)
        return per_virtual * self.plan.per_rank

    def order(self, epoch: int) -> List[int]:
        """This process's indices of ``epoch``: per batch, its virtual ranks' micro-batches in virtual order."""
        shards = [self.shard(epoch, v) for v in self.plan.virtual_ranks]
        mb = int(self.plan.micro_batch or 1)
        out: List[int] = []
        for start in range(0, len(shards[0]), mb):
            for shard in shards:
                out.extend(shard[start:start + mb])
        return out

    def __iter__(self) -> Iterator[Tuple[int, int]]:
        epoch, self.epoch = self.epoch, self.epoch + 1
        return iter([(epoch, i) for i in self.order(epoch)])
