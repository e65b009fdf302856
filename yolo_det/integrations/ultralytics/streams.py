"""Per-sample streams for Ultralytics trainers (used by :class:`DeterminismMixin`); exact resume is :mod:`.resume`.

The train loader is rebuilt around :class:`~yolo_det.core.streams.EpochSampler` and
:class:`~yolo_det.core.streams.SampleStreams`. Ultralytics' Mosaic picks its partner images from
``dataset.buffer``, the images *this worker* loaded lately: per-worker state, so partners depend on
the number of workers and restart empty after a resume. Under streams the partners are drawn from
the whole dataset instead, as Ultralytics itself does with ``cache='ram'`` (8.4: ``buffer_enabled``
False; earlier releases: ``get_indexes(buffer=False)``, :func:`~.api.unbuffer_mosaic`).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import torch

from ...core import streams
from ...core.seeding import seed_worker
from . import api
# the resume code that lived here until integrations/ultralytics/resume.py, importable from here still
from .resume import RESUME_ANYWAY, UltralyticsResume, refuse, refuse_missing, refuse_unsaved  # noqa: F401


def no_mosaic_buffer(dataset: Any) -> None:
    """``SampleStreams`` prepare hook: Mosaic transforms draw partners from the whole dataset."""
    transforms = getattr(dataset, "transforms", None)
    key = id(transforms)
    if getattr(dataset, "_yolo_det_unbuffered", None) == key:
        return
    for node in _walk(transforms, 5, {id(dataset)}):
        api.unbuffer_mosaic(node)
    dataset.__dict__["_yolo_det_unbuffered"] = key


def _walk(node: Any, depth: int, seen: set) -> List[Any]:
    if node is None or depth < 0 or id(node) in seen or isinstance(node, (str, bytes, int, float, torch.Tensor)):
        return []
    seen.add(id(node))
    found = [node]
    if isinstance(node, (list, tuple)):
        children = list(node)
    elif isinstance(node, dict):
        children = list(node.values())
    else:
        children = [v for k, v in getattr(node, "__dict__", {}).items() if k != "dataset"]
    for child in children:
        found += _walk(child, depth - 1, seen)
    return found


def stream_loader(loader: Any, seed: int, augment_seed: Optional[int] = None,
                  make_sampler: Optional[Callable[[int, bool, bool], streams.EpochSampler]] = None) -> Any:
    """The train loader rebuilt to sample (epoch, index) items and build each under its own stream:
    the order from ``seed``, the per-sample streams from ``augment_seed`` (default: ``seed``).

    ``make_sampler(n, shuffle, drop_last)`` gives another epoch sampler (a virtual world size's), in place of
    the one that splits the epoch over the loader's DistributedSampler ranks."""
    sampler = getattr(loader, "sampler", None)
    rank, world, shuffle = 0, 1, True
    if sampler is not None and hasattr(sampler, "num_replicas"):
        rank, world = int(getattr(sampler, "rank", 0)), int(sampler.num_replicas)
        shuffle = bool(getattr(sampler, "shuffle", False))
    elif sampler is not None and not isinstance(sampler, torch.utils.data.RandomSampler):
        shuffle = False  # a SequentialSampler: rect training keeps its order
    dataset = loader.dataset
    if make_sampler is not None:
        epoch_sampler = make_sampler(len(dataset), shuffle, bool(loader.drop_last))
    else:
        epoch_sampler = streams.EpochSampler(len(dataset), seed, shuffle, 0, rank, world, bool(loader.drop_last))
    workers = loader.num_workers
    kwargs: Dict[str, Any] = dict(
        dataset=streams.SampleStreams(dataset, seed if augment_seed is None else augment_seed,
                                      prepare=no_mosaic_buffer), batch_size=loader.batch_size,
        shuffle=False, num_workers=workers, sampler=epoch_sampler, pin_memory=loader.pin_memory,
        collate_fn=loader.collate_fn, worker_init_fn=seed_worker, generator=loader.generator,
        drop_last=loader.drop_last)
    if workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    if hasattr(loader, "close"):
        loader.close()
    rebuilt = type(loader)(**kwargs)
    rebuilt.yolo_det_sampler = epoch_sampler
    return rebuilt


__all__ = ["no_mosaic_buffer", "stream_loader"]
