"""A virtual world size V for Ultralytics trainers: the run V GPUs would make, on any N | V processes.

``virtual_world_size=V`` (an Ultralytics-style argument, ``YOLO_DET_VIRTUAL_WORLD_SIZE``) makes each process
run its V/N virtual micro-batches of B/V images one after another through :mod:`yolo_det.world`'s engine.
What is Ultralytics' own here:

* the batch: the train loader yields B/N images per step (V/N micro-batches, each virtual rank's images
  from ``(seed, epoch, v)``); the forward splits the preprocessed batch back into micro-batches, so each
  sees exactly what one of V GPUs would (its BatchNorm batch statistics, the detection loss normalised
  by *its* ``target_scores_sum``, ``loss * batch_size`` with *its* batch size): their sum is the V-GPU
  gradient by construction, not by rescaling;
* the loss multiplier: Ultralytics multiplies by its world size (``loss.sum() * world_size``, only under
  DDP); every micro-batch here is multiplied by V, whatever N (powers of two: exact);
* the seeds: ``init_seeds(seed + 1 + RANK)`` becomes ``seed + 1 + v`` with v the process's first virtual
  rank, so the model is built as on GPU 0 of the V-GPU run in every N;
* ``nbs`` accumulation, warm-up and weight decay already use the total batch and the number of batches
  per epoch, which the virtual sampler keeps independent of N; the EMA follows the model on every rank
  (8.4) or on rank 0 (8.0-8.3), whose parameters and, after the engine's broadcast, BatchNorm buffers
  are the same on every rank.

Settings that draw per process or reorder batches (``multi_scale``, ``rect``, ``compile``, tasks the batch
splitter does not know) are refused under strict and accepted with a warning under warn (:func:`check`, with
:func:`yolo_det.world.check`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch
from torch.nn.parallel import DistributedDataParallel

from ...core.mode import ConfigError
from ...record import fingerprint
from ...world import VirtualSampler, WorldEngine, WorldPlan
from ...world import check as refuse
from ...world.plan import validate as validate_plan
from . import api
from ..torchrun import launched_world_size

#: Tasks whose collated batch :func:`split_batch` knows how to cut into micro-batches.
TASKS = ("detect", "pose", "obb", "classify")
#: Collated keys with one row per labelled instance (the rest have one row per image).
INSTANCE_KEYS = ("cls", "bboxes", "batch_idx", "keypoints", "obb")


def requested_world_size(device: Any, env: Optional[Dict[str, str]] = None) -> int:
    """N, the processes that will train: torchrun's ``WORLD_SIZE`` in a rank, else the devices listed."""
    env = os.environ if env is None else env
    if env.get("LOCAL_RANK") not in (None, "", "-1"):
        return max(int(env.get("WORLD_SIZE") or 1), 1)
    text = str(device or "")
    if isinstance(device, (list, tuple)):
        return max(len(device), 1)
    return max(len([d for d in text.split(",") if d.strip()]), 1) if "," in text else 1


#: What only Ultralytics' arguments switch on (the shared reasons are :data:`yolo_det.world.REASONS`).
REASONS: Dict[str, str] = {
    "rect": "rect=True orders and shapes batches by aspect ratio over one process's images (Ultralytics turns "
            "it off under DDP); train with rect=False",
    "compile": "compile compiles the forward that the virtual micro-batches replace; train with compile=False",
    "task": "yolo-det cannot yet cut the batches of task={task!r} into virtual micro-batches (supported: "
            + ", ".join(TASKS) + ")",
}


def conflicts(args: Any) -> List[str]:
    """The options of these Ultralytics arguments that cannot train world-size invariantly (empty: none)."""
    found = []
    if getattr(args, "multi_scale", 0) not in (None, False, 0, 0.0):  # a bool before 8.4, a fraction since
        found.append("multi_scale")
    if getattr(args, "rect", False):
        found.append("rect")
    if getattr(args, "compile", False):
        found.append("compile")
    if getattr(args, "task", "detect") not in TASKS:
        found.append("task")
    return found


def check(virtual_world_size: int, args: Any, mode: str, warn: Callable[[str], None]) -> None:
    """Before Ultralytics builds anything: V, the batch and N valid (ConfigError), conflicts refused under strict."""
    batch = getattr(args, "batch", None)
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ConfigError(f"virtual_world_size={virtual_world_size} needs an explicit batch size (batch={batch!r}): "
                          f"AutoBatch picks one per machine; pass batch=B with B a multiple of {virtual_world_size}")
    validate_plan(virtual_world_size, requested_world_size(getattr(args, "device", None)), batch)
    reasons = {**REASONS, "task": REASONS["task"].format(task=getattr(args, "task", None))}
    refuse(conflicts(args), mode, warn, reasons)


def split_batch(batch: Dict[str, Any], slices: List[tuple]) -> List[Dict[str, Any]]:
    """A collated, preprocessed Ultralytics batch cut into the micro-batches of images ``[a, b)``.

    Per-image values (``img``, lists of files and shapes) are sliced; per-instance rows (``cls``,
    ``bboxes``, ...) are those whose ``batch_idx`` falls in the slice, re-based to start at 0: what
    Ultralytics' ``collate_fn`` would have made of those images alone.
    """
    n = len(batch["img"])
    index = batch.get("batch_idx")
    instances = len(index) if isinstance(index, torch.Tensor) else None
    parts = []
    for a, b in slices:
        keep = None if index is None else (index >= a) & (index < b)
        part: Dict[str, Any] = {}
        for key, value in batch.items():
            if isinstance(value, torch.Tensor) and keep is not None and key in INSTANCE_KEYS \
                    and value.shape[:1] == (instances,):
                value = value[keep]
                part[key] = value - a if key == "batch_idx" else value
            elif isinstance(value, (torch.Tensor, list, tuple)) and len(value) == n:
                part[key] = value[a:b]
            else:
                part[key] = value
        parts.append(part)
    return parts


def unwrapped(model: Any) -> Any:
    """The module inside a DistributedDataParallel wrapper (the model itself otherwise)."""
    return model.module if isinstance(model, DistributedDataParallel) else model


def processes(trainer: Any) -> int:
    """N of a training process: the trainer's world size (8.1-8.4, or a CPU rank's), else torchrun's (8.0 keeps
    its world size in a local variable of ``train()``)."""
    world = int(getattr(trainer, "world_size", 0) or 0)
    return world if world > 1 else launched_world_size()


def reseed(trainer: Any, plan: WorldPlan) -> None:
    """``init_seeds`` as on the V-GPU run's GPU of this process's first virtual rank (``seed + 1 + v``).

    V = 1 is a one-GPU run, which Ultralytics seeds with ``seed + 1 + RANK`` = ``seed`` (``RANK = -1``): as is."""
    init_seeds = api.optional("ultralytics.utils.torch_utils", "init_seeds")
    if init_seeds is not None and plan.virtual_world_size > 1:
        init_seeds(trainer.args.seed + 1 + plan.first, deterministic=trainer.args.deterministic)


class VirtualWorld:
    """One trainer's virtual world: the plan, the sampler it trains from, the micro-batch forward."""

    def __init__(self, virtual_world_size: int, trainer: Any) -> None:
        self.virtual_world_size = int(virtual_world_size)
        self.trainer = trainer
        n = processes(trainer)
        rank = int(os.environ.get("RANK", "0") or 0) if n > 1 else 0
        self.plan = WorldPlan(self.virtual_world_size, n, rank, int(trainer.args.batch))
        self.engine: Optional[WorldEngine] = None
        self._forward: Any = None
        self._host: Optional[torch.nn.Module] = None
        self._pending: Optional[Iterator[Any]] = None

    # -- data -------------------------------------------------------------------------------
    def sampler(self, n: int, shuffle: bool, drop_last: bool) -> VirtualSampler:
        """This process's epoch sampler: its virtual ranks' shards, one micro-batch of each per step."""
        return VirtualSampler(n, self.trainer.args.seed, self.plan, shuffle=shuffle, drop_last=drop_last)

    def check_batch(self, batch_size: int) -> None:
        """The train loader's batch must stay ``batch/N`` (Ultralytics halves it after a CUDA out-of-memory error,
        which would silently change the micro-batch size, and with it the run)."""
        if batch_size != self.plan.local_batch:
            raise ConfigError(
                f"virtual_world_size={self.virtual_world_size}: the train loader's batch of {batch_size} per process "
                f"is not batch/N = {self.plan.local_batch} (Ultralytics changes the batch after running out of "
                f"memory); the micro-batch size is part of the run: train with a smaller batch that fits")

    def val_batch(self, batch_size: int) -> int:
        """The validation batch of one GPU of the V-GPU run (Ultralytics sizes it from the per-process batch)."""
        return max(batch_size * self.plan.world_size // self.virtual_world_size, 1)

    # -- validation -------------------------------------------------------------------------
    @property
    def distributed(self) -> bool:
        return self.plan.world_size > 1

    def skips_validation(self) -> bool:
        """Ranks other than 0 of an N > 1 run leave validation to rank 0 (which validates every image)."""
        return self.distributed and self.plan.rank != 0

    @contextlib.contextmanager
    def validating_alone(self) -> Iterator[None]:
        """Rank 0 validates the whole set as one process would: the release's validator modules see
        ``RANK = LOCAL_RANK = -1`` and the trainer a world size of 1 inside, so nothing is split, gathered or averaged
        over N (the validation loss Ultralytics averages over ranks would follow N)."""
        if not self.distributed:
            yield
            return
        trainer = self.trainer
        modules = {sys.modules.get("ultralytics.engine.validator")}
        modules.update(sys.modules.get(cls.__module__) for cls in type(trainer.validator).__mro__)
        saved = [(m, name, getattr(m, name)) for m in modules if m is not None for name in ("RANK", "LOCAL_RANK")
                 if isinstance(getattr(m, name, None), int)]
        world = vars(trainer).get("world_size")
        for module, name, _ in saved:
            setattr(module, name, -1)
        trainer.world_size = 1
        try:
            yield
        finally:
            if world is None:
                del trainer.world_size
            else:
                trainer.world_size = world
            for module, name, value in saved:
                setattr(module, name, value)

    def wait_for_final_eval(self) -> None:
        """A rank other than 0 at ``final_eval``: only the barrier rank 0 passes after stripping the checkpoints."""
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.barrier()

    # -- training ---------------------------------------------------------------------------
    def install(self) -> None:
        """After ``_setup_train``: the engine on the (DDP-wrapped) model, its forward and the scaler routed here."""
        trainer = self.trainer
        host = trainer.model
        ddp = host if isinstance(host, DistributedDataParallel) else None
        inner = unwrapped(host)
        self.engine = WorldEngine(inner, self.plan, ddp, seed=int(trainer.args.seed))  # dropout draws per (batch, v)
        self._host, self._forward = host, host.forward
        host.forward = self.forward
        trainer.scaler = WorldScaler(trainer.scaler, self)

    @contextlib.contextmanager
    def detached(self) -> Iterator[None]:
        """The model without the micro-batch forward (a checkpoint deep-copies the model on some releases)."""
        host = self._host
        attached = host is not None and "forward" in vars(host)
        if attached:
            del host.forward
        try:
            yield
        finally:
            if attached:
                host.forward = self.forward

    def remove(self) -> None:
        """Training ended: the model's own forward again."""
        if self._host is not None and "forward" in vars(self._host):
            del self._host.forward

    def loaded(self, batch: Any) -> None:
        """A train batch as the loader gave it (before ``preprocess_batch``): the fingerprint log keeps its
        first micro-batch, the batch GPU ``v`` of the V-GPU run loads, so logs of runs with different N compare."""
        recorder = _recorder()
        if recorder is not None and isinstance(batch, dict) and "img" in batch:
            recorder.replace_batch(split_batch(batch, self.plan.slices(len(batch["img"])))[0])

    def _multiplier(self) -> int:
        """What the trainer multiplies the returned loss by: its world size under DDP, else 1."""
        ranked = os.environ.get("RANK", "-1") not in ("", "-1")
        return self.plan.world_size if ranked else 1

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """A training batch: V/N micro-batch forwards, all but the last with their backward here; the last
        micro-batch's loss goes back to the trainer, whose backward completes the engine's step."""
        batch = args[0] if args else None
        if not isinstance(batch, dict) or "img" not in batch or not torch.is_grad_enabled():
            return self._forward(*args, **kwargs)
        if self._pending is not None:
            raise RuntimeError("yolo-det: a virtual micro-batch step started before the previous one's backward ran")
        assert self.engine is not None
        scale = self.engine.loss_scale
        steps = self.engine.micro_batches(len(batch["img"]))
        parts = split_batch(batch, self.plan.slices(len(batch["img"])))
        scaler = self.trainer.scaler.inner_scaler
        session = self.trainer.yolo_det
        recorder = _recorder()
        first_items = None
        for j, part in enumerate(parts):
            micro = next(steps)
            loss, items = self._forward(part, *args[1:], **kwargs)
            if j == 0:
                first_items = items
            if not micro.last:
                with session.backward(), unrecorded(recorder if j else None):
                    scaler.scale(loss.sum() * scale).backward()
                continue
            self._pending = steps
            return loss * (scale // self._multiplier()), first_items
        raise RuntimeError("yolo-det: a batch without virtual micro-batches")  # pragma: no cover - plan has >= 1

    def finish_step(self) -> None:
        """After the trainer's backward of the last micro-batch: the fixed-tree gradient, the BatchNorm rule."""
        steps, self._pending = self._pending, None
        if steps is not None:
            for _ in steps:  # the engine's loop ends after the last micro-batch
                raise RuntimeError("yolo-det: more virtual micro-batches than the batch was split into")

    def describe(self) -> Dict[str, Any]:
        """The ``world`` facts of determinism.json's ``ultralytics`` block."""
        facts = dict(self.plan.to_dict())
        facts.update({"rank": self.plan.rank, "virtual_ranks": self.plan.virtual_ranks,
                      "loss_multiplier": self.virtual_world_size,
                      "seeds": f"seed + 1 + {self.plan.first}" if self.virtual_world_size > 1 else "seed"})
        if self.engine is not None:
            facts["partials_peak"] = self.engine.memory_peak()
        return facts


def _recorder() -> Any:
    recorder = fingerprint.active()
    return recorder if recorder is not None and not recorder.closed else None


def unrecorded(recorder: Any) -> Any:
    """A block whose backward passes keep no loss in ``recorder``'s log (no-op without one)."""
    return recorder.unrecorded_backward() if recorder is not None else contextlib.nullcontext()


class WorldScaledLoss:
    """The trainer's scaled loss: its backward, then the engine's step completion."""

    def __init__(self, scaled: Any, world: VirtualWorld) -> None:
        self._scaled = scaled
        self._world = world

    def backward(self, *args: Any, **kwargs: Any) -> None:
        alone = self._world.plan.per_rank == 1  # else this last micro-batch's loss is not the logged first one's
        with unrecorded(None if alone else _recorder()):
            self._scaled.backward(*args, **kwargs)
        self._world.finish_step()

    def __getattr__(self, name: str) -> Any:
        if name in ("_scaled", "_world"):
            raise AttributeError(name)
        return getattr(self._scaled, name)


class WorldScaler:
    """Wraps the trainer's scaler (yolo-det's BackwardScaler): ``scale(loss).backward()`` completes the step."""

    def __init__(self, scaler: Any, world: VirtualWorld) -> None:
        self._scaler = scaler
        self._world = world

    @property
    def inner_scaler(self) -> Any:
        """The GradScaler itself, for the micro-batch backwards that record no loss of their own."""
        return getattr(self._scaler, "_scaler", self._scaler)

    def scale(self, outputs: torch.Tensor) -> WorldScaledLoss:
        return WorldScaledLoss(self._scaler.scale(outputs), self._world)

    def __getattr__(self, name: str) -> Any:
        if name in ("_scaler", "_world"):
            raise AttributeError(name)
        return getattr(self._scaler, name)


__all__ = ["INSTANCE_KEYS", "REASONS", "TASKS", "VirtualWorld", "WorldScaledLoss", "WorldScaler", "check", "conflicts",
           "processes", "requested_world_size", "reseed", "split_batch", "unwrapped"]
