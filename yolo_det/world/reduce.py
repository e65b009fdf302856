"""Gradients of V micro-batches summed in one fixed binary tree, whatever the number of processes.

Float addition commutes but does not associate, so the tree is fixed: leaves are the virtual ranks
0 .. V-1 in order, each level adds neighbours (left + right). A process holds a contiguous block of
V/N leaves, a whole subtree, which :class:`PartialStack` sums as the leaves arrive (a binary counter:
at most log2(V/N) + 1 gradients are held). Across processes, :func:`fixed_tree_hook` (a DDP
communication hook) sends chunk r of every process's partial to process r (all-to-all), sums the N
partials there in the same pairwise tree, and gathers the chunks back (all-gather): the bytes a ring
all-reduce moves, no arithmetic in transit, and one process (N = 1, no DDP) gives the same bits.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist


def tree_sum(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """Sum ``parts`` pairwise in order, level by level: ((p0 + p1) + (p2 + p3)) + ..."""
    xs = list(parts)
    if not xs:
        raise ValueError("tree_sum of nothing")
    while len(xs) > 1:
        pairs = [xs[i] + xs[i + 1] for i in range(0, len(xs) - 1, 2)]
        xs = pairs + ([xs[-1]] if len(xs) % 2 else [])
    return xs[0]


class PartialStack:
    """Per key (a parameter), the partial sums of the leaves pushed so far, merged as a binary counter."""

    def __init__(self) -> None:
        self._stacks: Dict[Hashable, List[Tuple[int, torch.Tensor]]] = {}
        self.peak = 0  # the most gradients held for one key at once (bench: memory of the partial sums)

    def push(self, key: Hashable, grad: torch.Tensor) -> None:
        stack = self._stacks.setdefault(key, [])
        stack.append((0, grad))
        self.peak = max(self.peak, len(stack))
        while len(stack) >= 2 and stack[-1][0] == stack[-2][0]:
            (level, right), (_, left) = stack.pop(), stack.pop()
            stack.append((level + 1, left + right))

    def pop(self, key: Hashable) -> torch.Tensor:
        """The one partial of a complete subtree (the count pushed must be a power of two)."""
        stack = self._stacks.pop(key, None)
        if not stack or len(stack) != 1:
            raise RuntimeError(f"the micro-batches pushed for one parameter do not form a whole subtree "
                               f"({0 if not stack else len(stack)} partials left): V/N must be a power of two")
        return stack[0][1]

    def __len__(self) -> int:
        return len(self._stacks)

    def clear(self) -> None:
        self._stacks.clear()


@dataclass
class TreeHookState:
    """What :func:`fixed_tree_hook` needs: the partials, whether this backward is the rank's last micro-batch,
    V (the gradient is the mean over V virtual ranks, as DDP's over V GPUs), and bytes counted for the bench."""

    virtual_world_size: int
    stack: PartialStack = field(default_factory=PartialStack)
    last: bool = True
    group: Optional[Any] = None
    bytes_sent: int = 0
    calls: int = 0


def reduce_partials(partial: torch.Tensor, state: TreeHookState) -> torch.Tensor:
    """Combine every process's flat ``partial`` in the fixed tree and divide by V (exact: a power of two)."""
    world = dist.get_world_size(state.group) if dist.is_initialized() else 1
    if world == 1:
        return partial / state.virtual_world_size
    n = partial.numel()
    pad = (-n) % world
    x = torch.cat([partial, partial.new_zeros(pad)]) if pad else partial
    received = torch.empty_like(x)
    dist.all_to_all_single(received, x, group=state.group)  # chunk r of every rank -> rank r, in rank order
    mine = tree_sum(received.chunk(world)) / state.virtual_world_size
    out = torch.empty_like(x)
    dist.all_gather_into_tensor(out, mine.contiguous(), group=state.group)
    state.bytes_sent += 2 * (world - 1) * mine.numel() * mine.element_size()
    return out[:n] if pad else out


def fixed_tree_hook(state: TreeHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook (its annotations are DDP's required ones): store this micro-batch's gradients;
    on the rank's last, reduce the partials.

    Before the last micro-batch the bucket comes back unchanged and nothing is sent; the engine clears the
    parameters' gradients between micro-batches, so every leaf is one micro-batch's gradient alone. gloo
    lacks futures for some collectives, so the reduction runs here and the future is already complete."""
    state.calls += 1
    grads = bucket.gradients()
    params = bucket.parameters()
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    if not state.last:
        for p, g in zip(params, grads):
            state.stack.push(p, g.detach().clone())
        future.set_result(bucket.buffer())
        return future
    parts = []
    for p, g in zip(params, grads):
        state.stack.push(p, g.detach().clone())
        parts.append(state.stack.pop(p).reshape(-1))
    flat = torch.cat(parts) if len(parts) > 1 else parts[0]
    buffer = bucket.buffer()
    if flat.numel() != buffer.numel():
        raise RuntimeError(f"a DDP bucket of {buffer.numel()} elements holds gradients of {flat.numel()}")
    future.set_result(reduce_partials(flat, state).view_as(buffer))
    return future
