"""DDP on CPU (gloo) and a virtual world size V for a patched YOLOv5-family ``train.py``.

The patch inserts five calls; what they do lives here:

* ``if yolo_det_v5.ddp_launch(LOCAL_RANK != -1, opt):`` (main's DDP block): a torchrun rank with
  ``--device cpu`` runs the release's own checks, joins a gloo process group and skips the block, which asserts
  CUDA devices and picks NCCL;
* ``model = yolo_det_v5.parallel(model)`` (after the release's ``if cuda and RANK != -1: model = smart_DDP(model)``):
  a CPU rank's model is wrapped by the release's ``smart_DDP`` (``static_graph=True`` where it sets it) without
  device ids; under V the world engine goes on the (wrapped) model, its fixed-tree hook on the DDP;
* ``for imgs, targets in yolo_det_v5.micro_batches(imgs, targets):`` around the batch's forward ... backward:
  one pass with the whole batch without V; under V this process's V/N virtual micro-batches of B/V images;
* ``loss = yolo_det_v5.world_loss(loss)`` before the backward: the loss multiplier becomes V (the release
  multiplies by its world size only under DDP; ``ComputeLoss`` already scales by the micro-batch's own size);
* ``with yolo_det_v5.multi_scale_stream(ni):`` around the release's ``if opt.multi_scale:`` draw: under V the
  step's size comes from (seed, step), one size on every process.

What a V-GPU run has that stays as the release makes it: ``accumulate``, warm-up and weight decay from the total
batch and the batches per epoch (the virtual sampler keeps both independent of N), the EMA and validation on rank 0.
What is changed at run time (:class:`YoloV5World`): the seeds (``seed + 1 + v`` of the process's first virtual rank,
as the V-GPU run's rank 0 builds the model), the train sampler (each virtual rank's images from (seed, epoch, v)),
the validation loader's batch (one GPU's ``2 * B / V``, the release sizes it from the per-process batch).
"""

from __future__ import annotations

import contextlib
import os
import random
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ...core import seeding
from ...core.mode import ConfigError
from ...record import fingerprint
from ...world import VirtualSampler, WorldEngine, WorldPlan, split_targets
from ...world import check as refuse
from ..torchrun import TIMEOUT, launched_world_size

#: What only YOLOv5's options switch on (the shared reasons are :data:`yolo_det.world.REASONS`).
REASONS: Dict[str, str] = {
    "rect": "--rect shapes each batch from the aspect ratios of one process's images; train without --rect",
    "quad": "--quad collates four images into one, which the virtual micro-batches cannot split; train without it",
    "evolve": "--evolve trains many runs with mutated settings; evolve without V, then train the result with V",
}

_cpu_world = 0  # N of this process's gloo group when ddp_launch joined one (0: not a CPU DDP rank)
_world: Optional["YoloV5World"] = None


def _rank_env() -> int:
    try:
        return int(os.environ.get("RANK", "-1") or -1)
    except ValueError:
        return -1


def on_cpu(opt: Any) -> bool:
    """Whether ``--device`` asks for the CPU."""
    return str(getattr(opt, "device", "")).strip().lower() == "cpu"


def ddp_launch(launched: Any, opt: Any) -> bool:
    """The test of main()'s DDP block: False for a CPU rank, which joined a gloo group here; else ``launched``."""
    global _cpu_world
    if not launched or not on_cpu(opt):
        return bool(launched)
    world = launched_world_size()
    problem = cpu_ddp_problem(opt, world)
    if problem:
        raise SystemExit(f"yolo-det: error: {problem}")
    if not dist.is_initialized():
        dist.init_process_group(backend="gloo", timeout=TIMEOUT, rank=max(_rank_env(), 0), world_size=world)
    _cpu_world = world
    return False


def cpu_ddp_problem(opt: Any, world: int) -> Optional[str]:
    """What the release's DDP block would have refused (its own asserts, bar the CUDA ones), or None."""
    msg = "is not compatible with YOLOv5 Multi-GPU DDP training"
    if getattr(opt, "image_weights", False):
        return f"--image-weights {msg}"
    if getattr(opt, "evolve", None):
        return f"--evolve {msg}"
    batch = int(getattr(opt, "batch_size", 0) or 0)
    if batch == -1:
        return f"AutoBatch with --batch-size -1 {msg}, please pass a valid --batch-size"
    if batch % max(world, 1):
        return f"--batch-size {batch} must be multiple of WORLD_SIZE"
    return None


def cpu_world() -> int:
    """N of the gloo group :func:`ddp_launch` joined (0 outside one)."""
    return _cpu_world


def parallel(model: torch.nn.Module, wrap: Optional[Callable[[torch.nn.Module], Any]] = None) -> torch.nn.Module:
    """After the release's DDP wrap: a CPU rank's DDP (``wrap``: the release's ``smart_DDP``), then the world engine."""
    if _cpu_world > 1 and not isinstance(model, DistributedDataParallel):
        model = cpu_ddp(model, wrap)
    if _world is not None:
        _world.install(model)
    return model


def cpu_module_ddp(module: torch.nn.Module, device_ids: Any = None, output_device: Any = None, *args: Any,
                   **kwargs: Any) -> DistributedDataParallel:
    """``DDP(...)`` as the release calls it, for a CPU module: the CUDA ``device_ids`` dropped. A plain
    DistributedDataParallel, not a subclass: YOLOv5's ``is_parallel`` compares the type exactly."""
    return DistributedDataParallel(module, None, None, *args, **kwargs)


def cpu_ddp(model: torch.nn.Module, wrap: Optional[Callable[[torch.nn.Module], Any]]) -> DistributedDataParallel:
    """The release's ``smart_DDP(model)`` (``static_graph=True`` where it sets it) with its ``DDP`` building a CPU
    DDP; a plain one when the release has no ``smart_DDP``."""
    names = getattr(wrap, "__globals__", {})
    original = names.get("DDP")
    if wrap is None or original is None:
        return cpu_module_ddp(model)
    names["DDP"] = cpu_module_ddp
    try:
        return wrap(model)
    finally:
        names["DDP"] = original


class YoloV5World:
    """One train() call's virtual world: the plan, its checks, the engine, the micro-batch in flight."""

    def __init__(self, virtual_world_size: int, opt: Any) -> None:
        batch = getattr(opt, "batch_size", None)
        if not isinstance(batch, int) or batch < 1:
            raise ConfigError(f"virtual_world_size {virtual_world_size} needs an explicit batch size (--batch-size "
                              f"{batch!r}): AutoBatch picks one per GPU; pass a multiple of {virtual_world_size}")
        n = launched_world_size()
        self.plan = WorldPlan(int(virtual_world_size), n, max(_rank_env(), 0) if n > 1 else 0, batch)
        self.seed = int(getattr(opt, "seed", 0) or 0)
        self.engine: Optional[WorldEngine] = None
        self.current: Optional[int] = None  # j of the micro-batch whose forward/backward runs now
        self.first_items: Optional[torch.Tensor] = None  # the loss components of this batch's first micro-batch
        self._restore: List[Tuple[dict, str, Any]] = []

    @staticmethod
    def conflicts(opt: Any, scale_stream: bool = False) -> List[str]:
        """The options of ``opt`` that cannot train world-size invariantly (``scale_stream``: the script draws its
        multi-scale size inside :func:`multi_scale_stream`, so ``--multi-scale`` can)."""
        keys = ["sync_bn", "image_weights", "rect", "quad", "evolve"] + ([] if scale_stream else ["multi_scale"])
        return [key for key in keys if getattr(opt, key, None)]

    def check(self, opt: Any, mode: str, warn: Callable[[str], None], scale_stream: bool = False) -> List[str]:
        """Refuse (strict) or report (warn) what V cannot make invariant."""
        return refuse(self.conflicts(opt, scale_stream), mode, warn, REASONS)

    def reseed(self, rank: int) -> Optional[int]:
        """Seed as GPU ``v`` (the process's first virtual rank) of the V-GPU run: ``seed + 1 + v``; V=1 as is."""
        if self.plan.virtual_world_size == 1:
            return None
        return seeding.seed_everything(self.seed + 1 + self.plan.first, rank)

    def size_validation(self, names: dict) -> None:
        """The release's ``create_dataloader`` (in the script's ``names``) builds loaders other than the train loader
        with one GPU's batch of the V-GPU run: the batch it asks for (from B/N) times N/V."""
        original = names.get("create_dataloader")
        if not callable(original):
            return
        world = self

        def create_dataloader(*args: Any, **kwargs: Any) -> Any:
            if not _loading_train:
                if "batch_size" in kwargs:
                    kwargs["batch_size"] = world.per_gpu(kwargs["batch_size"])
                elif len(args) > 2:
                    args = (*args[:2], world.per_gpu(args[2]), *args[3:])
            return original(*args, **kwargs)

        names["create_dataloader"] = create_dataloader
        self._restore.append((names, "create_dataloader", original))

    def record_header(self) -> None:
        """V in the fingerprint log's header (the recorder started before the world was known)."""
        fingerprint.update_header(virtual_world_size=self.plan.virtual_world_size)

    def per_gpu(self, batch: int) -> int:
        return max(int(batch) * self.plan.world_size // self.plan.virtual_world_size, 1)

    def sampler(self, n: int, seed: int, shuffle: bool, start_epoch: int, drop_last: bool) -> VirtualSampler:
        """This process's train sampler: its virtual ranks' shards, one micro-batch of each per batch."""
        return VirtualSampler(n, seed, self.plan, shuffle=shuffle, start_epoch=start_epoch, drop_last=drop_last)

    def loader_batch_problem(self, batch_size: Any) -> Optional[str]:
        """Why the train loader's batch cannot train V (it must be B/N: YOLOv5 caps it at the dataset's size,
        which would change the micro-batch size, and with it the run), or None."""
        if batch_size != self.plan.local_batch:
            return (f"virtual_world_size {self.plan.virtual_world_size}: the train loader's batch of {batch_size} per "
                    f"process is not batch/N = {self.plan.local_batch} (YOLOv5 caps it at the number of training "
                    "images); use a smaller --batch-size or more images")
        return None

    def install(self, model: torch.nn.Module) -> None:
        ddp = model if isinstance(model, DistributedDataParallel) else None
        inner = ddp.module if ddp is not None else model
        if self.plan.world_size > 1 and ddp is None:
            raise ConfigError(f"virtual_world_size {self.plan.virtual_world_size} on {self.plan.world_size} processes "
                              "needs the model in DistributedDataParallel (the release did not wrap it)")
        self.engine = WorldEngine(inner, self.plan, ddp, seed=self.seed)

    def multiplier(self) -> int:
        """What the script multiplies the loss by: its world size under DDP (``RANK != -1``), else 1."""
        return self.plan.world_size if _rank_env() != -1 else 1

    def close(self) -> None:
        for names, key, value in self._restore:
            names[key] = value
        self._restore.clear()

    def describe(self) -> Dict[str, Any]:
        """The ``world`` facts of determinism.json's ``yolov5`` block."""
        facts = dict(self.plan.to_dict())
        facts.update({"rank": self.plan.rank, "virtual_ranks": self.plan.virtual_ranks,
                      "loss_multiplier": self.plan.virtual_world_size,
                      "seeds": f"seed + 1 + {self.plan.first}" if self.plan.virtual_world_size > 1 else "init_seeds",
                      "validation_batch": "2 * batch / V"})
        if self.engine is not None:
            facts["partials_peak"] = self.engine.memory_peak()
        return facts


_loading_train = False  # inside seeded_loaders: the train loader is being built


@contextlib.contextmanager
def loading_train() -> Iterator[None]:
    global _loading_train
    _loading_train = True
    try:
        yield
    finally:
        _loading_train = False


def begin(world: Optional[YoloV5World]) -> None:
    """The world of this train() call (None: no V), replacing a previous call's."""
    global _world
    if _world is not None:
        _world.close()
    _world = world


def current() -> Optional[YoloV5World]:
    return _world


def micro_batches(imgs: torch.Tensor, targets: torch.Tensor,
                  step: Optional[int] = None) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
    """The batch once without V; under V this process's micro-batches (images, their re-indexed targets).

    ``step``: the batch's index in the run (``ni``), for the micro-batches' random streams (dropout); a resumed
    run goes on from it instead of counting from 0."""
    world = _world
    if world is None or world.engine is None:
        yield imgs, targets
        return
    recorder = fingerprint.active()
    recorder = recorder if recorder is not None and not recorder.closed else None
    try:
        for mb in world.engine.micro_batches(len(imgs), batch=step):
            a, b = mb.slice.start, mb.slice.stop
            part = imgs[a:b], split_targets(targets, a, b)
            if mb.j == 0 and recorder is not None:  # the log keeps the batch GPU v of the V-GPU run loads
                recorder.replace_batch(part)
            world.current = mb.j
            yield part
    finally:
        world.current = None


def world_loss(loss: torch.Tensor) -> torch.Tensor:
    """``loss`` times V over what the script multiplied it by (powers of two: exact)."""
    world = _world
    if world is None or world.engine is None:
        return loss
    factor = world.plan.virtual_world_size // world.multiplier()
    return loss * factor if factor != 1 else loss


@contextlib.contextmanager
def multi_scale_stream(step: int) -> Iterator[None]:
    """Around the release's ``if opt.multi_scale:`` draw: under V Python's ``random`` comes from (seed, step) inside,
    so every process and virtual rank trains the step at one size (the process's own stream is put back after)."""
    world = _world
    if world is None or world.engine is None:
        yield
        return
    state = random.getstate()
    words = np.random.SeedSequence([world.seed, int(step), 0x6D73]).generate_state(2)  # 0x6D73: "ms"
    random.seed(int(words[0]) << 32 | int(words[1]))
    try:
        yield
    finally:
        random.setstate(state)


def log_as_first(loss_items: Any) -> None:
    """Under V, at each micro-batch's backward: the loss components the release logs after the micro-batch loop
    (results.csv's train losses, the loggers, the progress bar) become the process's first micro-batch's, which
    rank 0 of a V-GPU run logs (virtual rank 0's on every N). The release's name stays bound to the last micro-batch's
    tensor (detached, logged only), so its values are replaced in place."""
    world = _world
    if world is None or world.engine is None or world.current is None or not isinstance(loss_items, torch.Tensor):
        return
    if world.current == 0:
        world.first_items = loss_items.detach().clone()
    elif world.current == world.plan.per_rank - 1 and world.first_items is not None:
        with torch.no_grad():
            loss_items.copy_(world.first_items)


def muted() -> bool:
    """Whether the running backward is of a micro-batch after the process's first (its loss is not logged)."""
    return _world is not None and bool(_world.current)


__all__ = ["REASONS", "YoloV5World", "begin", "cpu_ddp", "cpu_ddp_problem", "cpu_world", "current", "ddp_launch",
           "loading_train", "log_as_first", "micro_batches", "multi_scale_stream", "muted", "on_cpu", "parallel",
           "world_loss"]
