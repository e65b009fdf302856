"""Training a small conv-BN-SiLU model with dropout, with and without the world engine (the engine tests).

``train`` runs one configuration on this process and returns, per batch, a digest of physical rank 0's
state (weights, BatchNorm buffers, EMA, optimizer momentum) and whether every rank of its group agrees.
Every virtual rank's data is drawn from (batch, virtual rank), so "stock" DDP sees the V-run's images too.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
import torch.nn as nn

from yolo_det.world import WorldEngine, WorldPlan

MB = 4  # images per virtual micro-batch


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.SiLU(),
                               nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16, momentum=0.03),
                               nn.SiLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(16, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.f(x)


def data(batch: int, v: int):
    g = torch.Generator().manual_seed(1000 * batch + v)
    return torch.randn(MB, 3, 16, 16, generator=g), torch.randint(0, 5, (MB,), generator=g)


def digest(model: nn.Module, ema: Dict[str, torch.Tensor], opt: torch.optim.Optimizer) -> str:
    h = hashlib.sha256()
    for t in list(model.state_dict().values()) + list(ema.values()):
        h.update(t.detach().contiguous().numpy().tobytes())
    for state in opt.state.values():
        for t in state.values():
            if torch.is_tensor(t):
                h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _record(mine: str, N: int, group: Any) -> List[Any]:
    """[this rank's digest, whether every rank of the group holds the same]."""
    if N == 1:
        return [mine, True]
    every = [None] * N
    dist.all_gather_object(every, mine, group=group)
    return [mine, len(set(every)) == 1]


def train(mode: str, V: int, N: int = 1, rank: int = 0, group: Any = None, ddp: bool = True,
          static_graph: bool = True, bucket_view: bool = False, batches: int = 4, accumulate: int = 2,
          find_unused: bool = False) -> List[Any]:
    """``mode``: "invariant" (the engine) or "stock" (plain DDP as YOLOv5 runs it: loss x local batch x N)."""
    torch.manual_seed(0)
    model = Net()
    wrapped: Optional[nn.Module] = None
    if N > 1 or (ddp and group is not None):
        if ddp:
            wrapped = nn.parallel.DistributedDataParallel(model, process_group=group, static_graph=static_graph,
                                                          gradient_as_bucket_view=bucket_view,
                                                          find_unused_parameters=find_unused)
    forward = wrapped if wrapped is not None else model
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.937, nesterov=True, weight_decay=5e-4)
    ema = {k: v.detach().clone() for k, v in model.state_dict().items() if v.dtype.is_floating_point}
    crit = nn.CrossEntropyLoss()
    plan = WorldPlan(V, N, rank, V * MB)
    engine = WorldEngine(model, plan, ddp=wrapped, group=group, seed=7) if mode == "invariant" else None
    out = []
    for batch in range(batches):
        xs, ys = zip(*[data(batch, v) for v in plan.virtual_ranks])
        x, y = torch.cat(xs), torch.cat(ys)
        if engine is not None:
            for mb in engine.micro_batches(len(x)):
                xi, yi = x[mb.slice], y[mb.slice]
                (crit(forward(xi), yi) * len(xi) * engine.loss_scale).backward()
        else:
            (crit(forward(x), y) * len(x) * N).backward()
        if (batch + 1) % accumulate == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            with torch.no_grad():
                for k, v in model.state_dict().items():
                    if k in ema:
                        ema[k].mul_(0.9).add_(v.detach(), alpha=0.1)
        out.append(_record(digest(model, ema, opt), N, group))
    return out


def train_yolov5(V: int, N: int = 1, rank: int = 0, group: Any = None, batches: int = 2, accumulate: int = 1,
                 size: int = 64) -> List[Any]:
    """The real PyPI yolov5n (BatchNorm everywhere, several DDP buckets) with YOLOv5's ComputeLoss and ModelEMA
    under the engine, DDP with ``static_graph=True`` as YOLOv5's ``smart_DDP`` builds it; per-batch digests."""
    import contextlib
    import io
    from pathlib import Path

    import yaml
    import yolov5
    from yolov5.models.yolo import Model
    from yolov5.utils.loss import ComputeLoss
    from yolov5.utils.torch_utils import ModelEMA

    from yolo_det.world import split_targets

    package = Path(yolov5.__file__).parent
    hyp = yaml.safe_load((package / "data" / "hyps" / "hyp.scratch-low.yaml").read_text())
    torch.manual_seed(0)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        model = Model(str(package / "models" / "yolov5n.yaml"), nc=2)
    model.hyp = hyp
    model.train()
    wrapped = nn.parallel.DistributedDataParallel(model, process_group=group, static_graph=True) if N > 1 else None
    compute = ComputeLoss(model)
    ema = ModelEMA(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.937, nesterov=True, weight_decay=5e-4)
    plan = WorldPlan(V, N, rank, V * 2)
    engine = WorldEngine(model, plan, ddp=wrapped, group=group, seed=0)
    out = []
    for batch in range(batches):
        imgs, rows = [], []
        for j, v in enumerate(plan.virtual_ranks):  # virtual rank v's 2 images and their 2 boxes each
            g = torch.Generator().manual_seed(1000 * batch + v)
            imgs.append(torch.rand(2, 3, size, size, generator=g))
            image = torch.arange(2).repeat_interleave(2)[:, None].float() + 2 * j
            rows.append(torch.cat([image, torch.randint(0, 2, (4, 1), generator=g).float(),
                                   torch.rand(4, 2, generator=g) * 0.5 + 0.25,
                                   torch.rand(4, 2, generator=g) * 0.3 + 0.1], 1))
        x, targets = torch.cat(imgs), torch.cat(rows)
        for mb in engine.micro_batches(len(x)):
            pred = (wrapped or model)(x[mb.slice])
            loss, _ = compute(pred, split_targets(targets, mb.slice.start, mb.slice.stop))
            (loss * engine.loss_scale).backward()
        if (batch + 1) % accumulate == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            ema.update(model)
        out.append(_record(digest(model, dict(ema.ema.state_dict()), opt), N, group))
    return out


CONFIGS = [  # (name, mode, V, ranks in the group, ddp, static_graph, gradient_as_bucket_view)
    ("v4_n4_dynamic_bucketview", "invariant", 4, 4, True, False, True),
    ("v4_n2_static", "invariant", 4, 2, True, True, False),
    ("v4_n2_no_ddp", "invariant", 4, 2, False, True, False),
    ("v4_n1_ddp_static", "invariant", 4, 1, True, True, False),
    ("v4_n2_find_unused", "invariant", 4, 2, True, False, False),  # Ultralytics' DDP: find_unused_parameters
    ("stock_n2", "stock", 4, 2, True, True, False),
]


def worker() -> None:
    """One process of ``WORLD_SIZE`` (torchrun-style environment): run every configuration, rank 0 writes JSON."""
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    results: Dict[str, Any] = {}
    for name, mode, V, n, ddp, static, view in CONFIGS:
        group = dist.new_group(list(range(n)))
        if rank < n:
            results[name] = train(mode, V, n, rank, group, ddp, static, view, find_unused=name.endswith("find_unused"))
        dist.barrier()
    group = dist.new_group([0, 1])
    if rank < 2:
        results["yolov5n_v4_n2_static"] = train_yolov5(4, 2, rank, group)
    dist.barrier()
    if rank == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(results, f)
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # gloo can abort at interpreter exit on torch 2.14 (see tests/record/test_ddp_ranks.py)


if __name__ == "__main__":
    worker()
