"""DDP on CPU for Ultralytics trainers: ranks that ``torchrun`` started with ``device=cpu`` train as one
gloo process group.

Ultralytics counts devices in ``device`` and gives ``device=cpu`` a world size of 0 (8.0: 1), so a rank
that torchrun started for CPU training trains alone on its own shard-less data, and its DDP wrapper, when
there is one, asks for CUDA (``device_ids=[RANK]``, ``torch.cuda.set_device``, NCCL). Here a CPU rank
takes its world size from torchrun (``WORLD_SIZE``), joins a gloo process group, and is wrapped in a DDP
without device ids. Everything else is Ultralytics' own DDP path (DistributedSampler, ``loss *
world_size``, rank-0 validation and saving). Every piece is found by feature (:data:`HOOKS`), not by version.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from . import api
from ..torchrun import TIMEOUT, launched_world_size

def on_cpu(trainer: Any) -> bool:
    """Whether this trainer trains on CPU (its resolved ``device``)."""
    device = getattr(trainer, "device", None)
    return isinstance(device, torch.device) and device.type == "cpu"


def cpu_world_size(trainer: Any, env: Optional[Dict[str, str]] = None) -> int:
    """The world size a CPU trainer in a torchrun rank trains with (0 or 1: no DDP)."""
    world = launched_world_size(env)
    return world if world > 1 and on_cpu(trainer) else 0


def takes_world_size(method: Callable[..., Any]) -> bool:
    """Whether a trainer method receives the world size as an argument (8.0) instead of ``self.world_size``."""
    try:
        return "world_size" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


def engage(trainer: Any) -> int:
    """After Ultralytics' ``__init__``: a CPU rank of an N-process torchrun run trains with world size N.

    Sets ``world_size`` (8.1-8.4 read the attribute) and clears ``ddp`` (the ranks are already started:
    Ultralytics must not launch its own); 8.0 passes the world size to ``_do_train``, which
    :func:`do_train_args` fills in. Returns N (0 when this is not such a rank).
    """
    world = cpu_world_size(trainer)
    if world:
        trainer.world_size = world
        trainer.ddp = False
        trainer._yolo_det_cpu_world = world
    return world


def do_train_args(trainer: Any, args: tuple, kwargs: Dict[str, Any]) -> tuple:
    """8.0's ``_do_train(world_size)`` gets the CPU world size; other releases' arguments pass unchanged."""
    world = getattr(trainer, "_yolo_det_cpu_world", 0)
    if world and takes_world_size(api.trainer_base()._do_train):
        kwargs.pop("world_size", None)
        return (world,), kwargs
    return args, kwargs


def join_gloo(trainer: Any) -> None:
    """``_setup_ddp`` for a CPU rank: a gloo process group, the device stays the CPU."""
    world = getattr(trainer, "_yolo_det_cpu_world", 0)
    rank = int(os.environ.get("RANK", "0"))
    if not dist.is_initialized():
        dist.init_process_group(backend="gloo", timeout=TIMEOUT, rank=rank, world_size=world)
    trainer.device = torch.device("cpu")


#: Called with each DDP a CPU rank builds, before its first forward (comm hooks go here).
_built: List[Callable[[DistributedDataParallel], None]] = []


class CpuDDP(DistributedDataParallel):
    """DistributedDataParallel of a CPU module: the CUDA ``device_ids`` Ultralytics passes are dropped."""

    def __init__(self, module: torch.nn.Module, device_ids: Any = None, output_device: Any = None,
                 *args: Any, **kwargs: Any) -> None:
        super().__init__(module, None, None, *args, **kwargs)
        for callback in list(_built):
            callback(self)


@contextlib.contextmanager
def cpu_ddp(trainer: Any, built: Optional[Callable[[DistributedDataParallel], None]] = None) -> Iterator[None]:
    """Around ``_setup_train`` of a CPU rank: Ultralytics' ``nn.parallel.DistributedDataParallel(...)`` builds
    a :class:`CpuDDP` (an instance of DistributedDataParallel still, so ``unwrap_model``/``de_parallel`` unwrap it)."""
    if not getattr(trainer, "_yolo_det_cpu_world", 0):
        yield
        return
    parallel = torch.nn.parallel
    original = parallel.DistributedDataParallel
    parallel.DistributedDataParallel = CpuDDP
    if built is not None:
        _built.append(built)
    try:
        yield
    finally:
        parallel.DistributedDataParallel = original
        if built is not None:
            _built.remove(built)


class _FirstDevice:
    """Stands in for the accelerator backend a DDP rank's final validation asks for its current device."""

    @staticmethod
    def current_device() -> int:
        return 0


@contextlib.contextmanager
def cpu_validation(trainer: Any) -> Iterator[None]:
    """Around ``final_eval`` of a CPU rank: the validator loads best.pt onto the CPU.

    A DDP rank's validator builds its ``AutoBackend`` on ``torch.device("cuda", RANK)`` (8.1-8.3) or the
    backend's ``current_device()`` (8.4), which has no meaning (and no driver) for a CPU rank.
    """
    if not getattr(trainer, "_yolo_det_cpu_world", 0):
        yield
        return
    validator = importlib.import_module("ultralytics.engine.validator")
    backend = getattr(validator, "AutoBackend", None)
    if backend is None:
        yield
        return
    saved = {name: getattr(validator, name) for name in ("AutoBackend", "get_torch_device_backend")
             if hasattr(validator, name)}

    def on_cpu_backend(*args: Any, **kwargs: Any) -> Any:
        kwargs["device"] = torch.device("cpu")
        return backend(*args, **kwargs)

    validator.AutoBackend = on_cpu_backend
    if "get_torch_device_backend" in saved:
        validator.get_torch_device_backend = lambda *_: _FirstDevice
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(validator, name, value)


def describe(trainer: Any) -> Dict[str, Any]:
    """The ``ddp`` facts of determinism.json's ``ultralytics`` block."""
    world = getattr(trainer, "_yolo_det_cpu_world", 0)
    if not world:
        return {}
    return {"backend": "gloo", "device": "cpu", "world_size": world, "launched_by": "torchrun",
            "rank": int(os.environ.get("RANK", "0"))}


__all__ = ["CpuDDP", "TIMEOUT", "cpu_ddp", "cpu_validation", "cpu_world_size", "describe", "do_train_args", "engage",
           "join_gloo", "launched_world_size", "on_cpu", "takes_world_size"]
