"""Running one batch as this process's V/N virtual micro-batches, with the gradient of the V-GPU run.

``for mb in engine.micro_batches(len(imgs)):`` yields each micro-batch (its slice of the local batch and
virtual rank); the loop body runs the forward on that slice (through the DDP wrapper if there is one),
multiplies the loss by ``engine.loss_scale`` and calls backward. When the loop ends the parameters hold
the fixed-tree mean over the V micro-batches, added to whatever an accumulation window had gathered
before, and every process holds virtual micro-batch 0's BatchNorm running statistics. Works with
``DistributedDataParallel`` (``static_graph`` on or off: no ``no_sync``), or without it, on one process
or several (the engine then reduces over ``torch.distributed`` itself).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional

import numpy as np
import torch
import torch.nn as nn

from .batchnorm import RunningStatsRule
from .plan import WorldPlan
from .reduce import TreeHookState, fixed_tree_hook, reduce_partials


@dataclass(frozen=True)
class MicroBatch:
    """One virtual micro-batch: its index in this process (``j``), its virtual rank, whether it is the last,
    and its ``slice`` of the local batch (None when the engine was not told the batch length)."""

    j: int
    virtual_rank: int
    last: bool
    slice: Optional[slice]


class WorldEngine:
    """The V/N micro-batches of each batch of ``model`` (``ddp``: its DistributedDataParallel wrapper, or None)."""

    def __init__(self, model: nn.Module, plan: WorldPlan, ddp: Optional[nn.Module] = None, group: Any = None,
                 seed: Optional[int] = None) -> None:
        """``group``: the process group of the N processes (None: the default group). ``seed``: draws made inside
        a micro-batch (dropout, stochastic depth) come from (seed, batch, virtual rank), not from the process's
        generator; None leaves them to the process (then they depend on N if the model draws at all)."""
        self.plan = plan
        self.seed = seed
        self.batches = 0
        self.model = model
        self.ddp = ddp
        self.params: List[torch.Tensor] = [p for p in model.parameters() if p.requires_grad]
        self.bn = RunningStatsRule(model)
        self.group = group if group is not None else getattr(ddp, "process_group", None)
        self.state = TreeHookState(plan.virtual_world_size, group=self.group)
        if ddp is not None:
            ddp.register_comm_hook(self.state, fixed_tree_hook)

    @property
    def loss_scale(self) -> int:
        """V: the factor YOLOv5 and Ultralytics apply under DDP (their world size), here the virtual one."""
        return self.plan.virtual_world_size

    def micro_batches(self, n: Optional[int] = None, batch: Optional[int] = None) -> Iterator[MicroBatch]:
        """Yield this process's micro-batches of one batch of ``n`` local images; see the module docstring.

        ``batch``: the batch's index in the run, for the micro-batches' random streams (default: a count of
        the calls, which a resumed run must set)."""
        batch = self.batches if batch is None else int(batch)
        self.batches = batch + 1
        m = self.plan.per_rank
        slices = [slice(a, b) for a, b in self.plan.slices(n)] if n is not None else [None] * m
        accumulated = self._stash()
        for j in range(m):
            last = j == m - 1
            self.state.last = last
            calls = self.state.calls
            with self.bn.micro_batch(self.plan.first + j), self._streams(batch, self.plan.first + j):
                yield MicroBatch(j, self.plan.first + j, last, slices[j])
            self._after_backward(last, calls)
        for p, g in accumulated.items():
            p.grad = g + p.grad
        self.bn.broadcast(self.group)

    @contextlib.contextmanager
    def _streams(self, batch: int, virtual_rank: int) -> Iterator[None]:
        if self.seed is None:
            yield
            return
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
        with torch.random.fork_rng(devices=devices):
            word = np.random.SeedSequence([int(self.seed), int(batch), int(virtual_rank)]).generate_state(2)
            torch.manual_seed(int(word[0]) << 31 ^ int(word[1]))
            yield

    def _stash(self) -> Dict[torch.Tensor, torch.Tensor]:
        """Set aside the gradients of earlier batches of an accumulation window (added back in a fixed order)."""
        out = {}
        for p in self.params:
            if p.grad is not None:
                out[p] = p.grad.detach().clone() if self.ddp is not None else p.grad
                p.grad = None
        return out

    def _after_backward(self, last: bool, calls: int) -> None:
        missing = [p for p in self.params if p.grad is None]
        if len(missing) == len(self.params) or (self.ddp is not None and self.state.calls == calls):
            raise RuntimeError("a virtual micro-batch ran no backward: run the forward on its slice and call "
                               "backward inside the `for mb in engine.micro_batches()` loop")
        if missing:
            raise RuntimeError(f"{len(missing)} parameters got no gradient in a virtual micro-batch; world-size "
                               f"invariance needs every trainable parameter used in every micro-batch")
        if self.ddp is not None:
            if not last:
                for p in self.params:
                    p.grad = None
            return
        stack = self.state.stack
        for p in self.params:
            stack.push(p, p.grad)
            p.grad = None
        if not last:
            return
        partials = [stack.pop(p) for p in self.params]
        if self.plan.world_size == 1:
            for p, g in zip(self.params, partials):
                p.grad = g / self.plan.virtual_world_size
            return
        flat = reduce_partials(torch.cat([g.reshape(-1) for g in partials]), self.state)
        for p, g in zip(self.params, torch.split(flat, [g.numel() for g in partials])):
            p.grad = g.view_as(p).clone()

    def memory_peak(self) -> int:
        """The most gradient copies one parameter's partial sums held at once (at most log2(V/N) + 1)."""
        return self.state.stack.peak

