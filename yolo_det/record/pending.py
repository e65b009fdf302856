"""One optimizer step's digests, held on the device until its log line is written, and their one transfer."""

from __future__ import annotations

import collections
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .log import KINDS


class PendingStep:
    """Digests of one step, on device until the step's line is written."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.kinds: Dict[str, List[Tuple[List[str], Any]]] = collections.defaultdict(list)
        self.values: List[Tuple[str, torch.Tensor]] = []  # ("loss"|"items", float tensor)
        self.lr: Dict[str, float] = {}
        self.ddp: Optional[Dict[str, Any]] = None
        self.full = False  # written in full also in a compact log (the last step of an epoch)
        self.params_pending = False  # parameters still to digest (at the next step's start)
        self.buffers: Tuple[List[str], List[torch.Tensor]] = ([], [])  # copies, digested later

    def add(self, kind: str, names: Sequence[str], digests: Any) -> None:
        """``digests``: a ``T x 2`` int64 tensor, or a list of hex strings (host digests)."""
        if names:
            self.kinds[kind].append((list(names), digests))

    def resolve(self) -> Tuple[Dict[str, Tuple[List[str], str]], List[float], List[List[float]]]:
        """Transfer every device digest and value at once; return hex per kind, losses, items."""
        order = [k for k in KINDS if k in self.kinds] + sorted(set(self.kinds) - set(KINDS))
        parts = [d for kind in order for _, d in self.kinds[kind] if isinstance(d, torch.Tensor)]
        host = transfer(parts + [v for _, v in self.values])
        kinds: Dict[str, Tuple[List[str], str]] = {}
        cursor = 0
        for kind in order:
            names: List[str] = []
            hexes: List[str] = []
            for part_names, digests in self.kinds[kind]:
                names.extend(part_names)
                if isinstance(digests, torch.Tensor):
                    hexes.append(host[cursor].view(np.uint64).astype(">u8").tobytes().hex())
                    cursor += 1
                else:
                    hexes.extend(digests)
            kinds[kind] = (names, "".join(hexes))
        losses: List[float] = []
        items: List[List[float]] = []
        for (what, _), raw in zip(self.values, host[cursor:]):
            floats = raw.view(np.float64).tolist()
            if what == "loss":
                losses.append(floats[0])
            else:
                items.append(floats)
        return kinds, losses, items


def transfer(parts: Sequence[torch.Tensor]) -> List[np.ndarray]:
    """Bring int64 parts (or float64 parts, as raw bits) to the host with one copy per device."""
    out: List[Optional[np.ndarray]] = [None] * len(parts)
    by_device: Dict[torch.device, List[int]] = collections.defaultdict(list)
    for i, part in enumerate(parts):
        by_device[part.device].append(i)
    for indices in by_device.values():
        flat = [parts[i].reshape(-1) for i in indices]
        flat = [t.view(torch.int64) if t.dtype == torch.float64 else t for t in flat]
        joined = torch.cat(flat).cpu().numpy()
        offset = 0
        for i, t in zip(indices, flat):
            n = t.numel()
            out[i] = joined[offset:offset + n].reshape(parts[i].shape) if parts[i].dtype != torch.float64 \
                else joined[offset:offset + n]
            offset += n
    return [a for a in out]  # type: ignore[misc]



__all__ = ["PendingStep", "transfer"]
