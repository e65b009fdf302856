"""Per-sample random streams: training batches as a pure function of (seed, epoch, rank, world size).

Every random draw made while producing training sample ``i`` of epoch ``e`` comes from a stream
derived with ``numpy.random.SeedSequence([seed, e, i])``: python ``random``, numpy's global
generator, torch's CPU generator and albumentations' own seed are set from it right before the
dataset builds the sample. The order of epoch ``e`` is a permutation derived from ``(seed, e)``,
split across DDP ranks like ``DistributedSampler.set_epoch``. Which worker (or the main process)
builds a sample, how many workers there are, and whether the run was resumed no longer matter.

The epoch reaches the workers through the sampled items, not through worker-side state:
:class:`EpochSampler` runs in the main process, counts its own passes and yields
``(epoch, index)`` items; :class:`SampleStreams` wraps the dataset, decodes them and seeds.
This also holds for loaders that keep their workers and one iterator for the whole run
(YOLOv5's and Ultralytics' ``InfiniteDataLoader``), where the main process samples the next
epoch while the current one is still being consumed.
"""

from __future__ import annotations

import collections
import random
from typing import Any, Callable, Iterator, List, Optional, Tuple

import numpy as np
import torch

from . import seeding
from .rng import host_states, set_host_states
from .seeding import MAX_SEED, _check_seed

_ORDER_TAG = 0x0DE7  # keeps the order stream apart from the sample streams (SeedSequence entropy)
_SAMPLE_TAG = 0x5A3B


_WORDS = 5  # per sample: python random (2), numpy (1), torch (1 + 1 shared), albumentations (1)
_blocks: "collections.OrderedDict[Tuple[int, int, int], np.ndarray]" = collections.OrderedDict()


def epoch_words(seed: int, epoch: int, n: int) -> np.ndarray:
    """The stream words of every sample of ``epoch`` (an ``n x 5`` uint32 array), from
    ``SeedSequence([seed, tag, epoch])``: drawn once per epoch and process, so seeding a sample
    costs a row lookup. Two epochs are kept (persistent workers run into the next epoch early)."""
    key = (int(seed), int(epoch), int(n))
    block = _blocks.get(key)
    if block is None:
        entropy = np.random.SeedSequence([int(seed), _SAMPLE_TAG, int(epoch)])
        block = entropy.generate_state(_WORDS * max(int(n), 1), dtype=np.uint32).reshape(-1, _WORDS)
        _blocks[key] = block
        while len(_blocks) > 2:
            _blocks.popitem(last=False)
    return block


def sample_words(seed: int, epoch: int, index: int, n: int) -> List[int]:
    """The five 32-bit words of sample ``index``'s stream in ``epoch`` (a dataset of ``n`` samples)."""
    if not 0 <= int(index) < int(n):
        raise IndexError(f"sample {index} is outside a dataset of {n}")
    return epoch_words(seed, epoch, n)[int(index)].tolist()


def seed_sample(seed: int, epoch: int, index: int, n: int) -> int:
    """Seed ``random``, numpy and torch's CPU generator for one sample; return a 32-bit seed for others
    (albumentations). Only torch's CPU generator: data workers do not draw from CUDA. numpy's global
    generator takes a 32-bit seed (its fastest seeding); python's and torch's take 64 and 63 bits."""
    w = sample_words(seed, epoch, index, n)
    random.seed(w[0] << 32 | w[1])
    np.random.seed(w[2])
    torch.default_generator.manual_seed((w[3] << 31 ^ w[0]) & (2**63 - 1))
    return w[4]


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool = True, rank: int = 0, world_size: int = 1,
                drop_last: bool = False) -> List[int]:
    """The sample indices rank ``rank`` sees in ``epoch``: a permutation from ``(seed, epoch)`` (identity
    without ``shuffle``), padded or cut to a multiple of ``world_size`` and strided by rank, as
    ``DistributedSampler`` does."""
    if shuffle:
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), _ORDER_TAG, int(epoch)])))
        order = rng.permutation(n).tolist()
    else:
        order = list(range(n))
    if world_size > 1:
        if drop_last:
            order = order[:n - n % world_size]
        else:
            total = -(-n // world_size) * world_size
            while len(order) < total:
                order += order[:total - len(order)]
        order = order[rank:len(order):world_size]
    return order


class EpochSampler(torch.utils.data.Sampler):
    """A main-process sampler that yields ``(epoch, index)`` items and counts its own epochs.

    Each ``iter()`` is one epoch, starting at ``start_epoch``: a plain DataLoader calls it once per
    epoch, an infinite loader's repeat sampler once per pass. :meth:`set_epoch` (called by training
    loops for ``DistributedSampler``) is accepted and ignored, because an infinite loader has
    already started sampling the next epoch when the loop calls it; :meth:`restart` sets the
    epoch of the next pass for loaders that rebuild their iterator mid-run.
    """

    def __init__(self, n: int, seed: int, shuffle: bool = True, start_epoch: int = 0, rank: int = 0,
                 world_size: int = 1, drop_last: bool = False) -> None:
        self.n, self.seed, self.shuffle = int(n), _check_seed(int(seed) & MAX_SEED), bool(shuffle)
        self.rank, self.world_size, self.drop_last = int(rank), max(int(world_size), 1), bool(drop_last)
        self.epoch = int(start_epoch)  # the epoch the next pass samples

    def __len__(self) -> int:
        if self.world_size == 1:
            return self.n
        return self.n // self.world_size if self.drop_last else -(-self.n // self.world_size)

    def __iter__(self) -> Iterator[Tuple[int, int]]:
        epoch, self.epoch = self.epoch, self.epoch + 1
        order = epoch_order(self.n, self.seed, epoch, self.shuffle, self.rank, self.world_size, self.drop_last)
        return iter([(epoch, i) for i in order])

    def set_epoch(self, epoch: int) -> None:  # noqa: D401 - DistributedSampler's interface
        """Ignored: the sampler counts its passes itself (see the class docstring)."""

    def restart(self, epoch: int) -> None:
        """Make the next pass sample ``epoch`` (for a loader whose iterator is being rebuilt)."""
        self.epoch = int(epoch)


class SampleStreams(torch.utils.data.Dataset):
    """Wraps a map-style dataset: ``(epoch, index)`` items are built under that sample's own streams.

    Attribute reads and writes go to the wrapped dataset (training code keeps using
    ``loader.dataset.labels`` or sets ``loader.dataset.mosaic = False``). In the main process
    (``num_workers=0``) the global RNG states are restored after each sample, so the training
    loop's own draws do not depend on how many samples were loaded.
    """

    _own = ("dataset", "seed", "_pipelines", "prepare")

    def __init__(self, dataset: Any, seed: int, prepare: Optional[Callable[[Any], None]] = None) -> None:
        """``prepare(dataset)`` (a module-level function, for pickling) runs before every sample: an
        integration uses it to switch off per-worker state the release's augmentation reads."""
        object.__setattr__(self, "dataset", dataset)
        object.__setattr__(self, "seed", int(seed) & MAX_SEED)
        object.__setattr__(self, "_pipelines", None)
        object.__setattr__(self, "prepare", prepare)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item: Any) -> Any:
        if not (isinstance(item, tuple) and len(item) == 2):
            return self.dataset[item]
        epoch, index = item
        if torch.utils.data.get_worker_info() is not None:
            self._seed(epoch, index)
            return self.dataset[index]
        state = host_states()
        try:
            self._seed(epoch, index)
            return self.dataset[index]
        finally:
            set_host_states(state)

    def _seed(self, epoch: int, index: int) -> None:
        if self.prepare is not None:
            self.prepare(self.dataset)
        other = seed_sample(self.seed, epoch, index, len(self.dataset))
        pipelines = self._pipelines
        if pipelines is None:
            pipelines = seeding.albumentations_pipelines(self.dataset)
            object.__setattr__(self, "_pipelines", pipelines)
        for pipeline in pipelines:
            pipeline.set_random_seed(other)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in SampleStreams._own:
            raise AttributeError(name)
        return getattr(self.__dict__["dataset"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in SampleStreams._own:
            object.__setattr__(self, name, value)
        else:
            setattr(self.dataset, name, value)


def unwrap_dataset(dataset: Any) -> Any:
    """The dataset inside :class:`SampleStreams` (or ``dataset`` itself)."""
    return dataset.dataset if isinstance(dataset, SampleStreams) else dataset


def is_stream_sampler(sampler: Optional[object]) -> bool:
    return isinstance(sampler, EpochSampler)


__all__ = ["EpochSampler", "SampleStreams", "epoch_order", "epoch_words", "sample_words", "seed_sample", "unwrap_dataset"]
