"""Per-sample streams: batches are a function of (seed, epoch, rank, world size) only, whatever the
number of workers, persistent workers included, and the main process's RNG is left alone."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from yolo_det.core.streams import EpochSampler, SampleStreams, epoch_order, sample_words, seed_sample


class Augmenting(Dataset):
    """Draws from python random, numpy and torch, like YOLOv5's mosaic/HSV/flip/affine."""

    def __init__(self, n=12):
        self.n = n
        self.indices = list(range(n))
        self.flag = "original"

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        partners = random.choices(self.indices, k=3)  # mosaic partners
        gain = np.random.uniform(-1, 1, 3)  # HSV gains
        noise = torch.rand(2)
        return torch.tensor([index, *partners], dtype=torch.float64), torch.from_numpy(gain), noise


class Persistent(DataLoader):
    """An InfiniteDataLoader: one iterator for the whole run, built (and prefetching) in __init__."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches = len(self.batch_sampler)
        object.__setattr__(self, "batch_sampler", _Repeat(self.batch_sampler))
        self.iterator = super().__iter__()

    def __len__(self):
        return self.batches

    def __iter__(self):
        for _ in range(len(self)):
            yield next(self.iterator)


class _Repeat:
    def __init__(self, sampler):
        self.sampler = sampler

    def __iter__(self):
        while True:
            yield from iter(self.sampler)


def _epochs(loader_class, workers, epochs=3, start_epoch=0, seed=0, **kwargs):
    dataset = SampleStreams(Augmenting(), seed)
    sampler = EpochSampler(len(dataset), seed, shuffle=True, start_epoch=start_epoch)
    loader = loader_class(dataset, batch_size=4, sampler=sampler, num_workers=workers,
                          persistent_workers=workers > 0 and loader_class is DataLoader, **kwargs)
    return [[tuple(torch.cat([t.reshape(-1).double() for t in batch]).tolist()) for batch in loader]
            for _ in range(epochs)]


def test_epoch_order_is_a_function_of_seed_and_epoch_split_like_distributed_sampler():
    assert epoch_order(10, 0, 1) == epoch_order(10, 0, 1)
    assert sorted(epoch_order(10, 0, 1)) == list(range(10))
    assert epoch_order(10, 0, 1) != epoch_order(10, 0, 2) and epoch_order(10, 0, 1) != epoch_order(10, 1, 1)
    assert epoch_order(5, 3, 0, shuffle=False) == [0, 1, 2, 3, 4]
    ranks = [epoch_order(10, 0, 4, rank=r, world_size=3) for r in range(3)]
    assert all(len(r) == 4 for r in ranks)  # padded to 12 like DistributedSampler
    assert sorted(sum(ranks, [])[:10]) != [] and set(sum(ranks, [])) == set(range(10))
    full = epoch_order(10, 0, 4)
    assert ranks[0] == (full + full[:2])[0::3]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_batches_do_not_depend_on_the_number_of_workers(workers):
    reference = _epochs(DataLoader, 0)
    assert _epochs(DataLoader, workers) == reference
    assert _epochs(Persistent, workers) == reference  # persistent workers: the epoch travels with the items


def test_each_epoch_and_seed_gets_other_samples_and_a_resumed_stream_continues():
    epochs = _epochs(DataLoader, 0, epochs=3)
    assert epochs[0] != epochs[1] != epochs[2]
    assert _epochs(DataLoader, 0, seed=1) != epochs
    assert _epochs(Persistent, 2, epochs=2, start_epoch=1) == epochs[1:]  # resume after epoch 1


def test_without_streams_workers_change_the_batches():
    """The control: the same dataset under a seeded generator alone depends on the workers."""
    def run(workers):
        g = torch.Generator().manual_seed(0)
        loader = DataLoader(Augmenting(), batch_size=4, shuffle=True, num_workers=workers, generator=g)
        return [torch.cat([t.reshape(-1).double() for t in b]).tolist() for b in loader]

    assert run(0) != run(2)


def test_main_process_rng_is_untouched_by_loading_in_the_main_process():
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    _epochs(DataLoader, 0, epochs=1, generator=torch.Generator().manual_seed(0))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_wrapper_delegates_attributes_and_pickles():
    inner = Augmenting()
    wrapped = SampleStreams(inner, 3)
    wrapped.flag = "changed"  # Ultralytics sets loader.dataset.mosaic = False at close_mosaic
    assert inner.flag == "changed" and wrapped.indices is inner.indices and len(wrapped) == len(inner)
    assert not hasattr(wrapped, "__getitems__")  # DataLoader must call our __getitem__
    again = pickle.loads(pickle.dumps(wrapped))  # spawn start method
    assert again[(1, 2)][0].tolist() == wrapped[(1, 2)][0].tolist()
    assert wrapped[2][0][0].item() == 2  # plain indices pass through


def test_sampler_counts_its_own_epochs_and_restarts():
    sampler = EpochSampler(6, 0, start_epoch=2)
    assert {e for e, _ in sampler} == {2} and {e for e, _ in sampler} == {3}
    sampler.set_epoch(0)  # DistributedSampler interface: ignored
    assert {e for e, _ in sampler} == {4}
    sampler.restart(1)
    assert [i for _, i in sampler] == epoch_order(6, 0, 1)


def test_seed_sample_is_a_function_of_its_inputs():
    seed_sample(0, 1, 2, 10)
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    seed_sample(0, 1, 2, 10)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == a
    for other in ((0, 1, 3, 10), (0, 2, 2, 10), (1, 1, 2, 10)):
        seed_sample(*other)
        assert (random.random(), np.random.rand(), torch.rand(1).item()) != a
    words = [sample_words(0, 1, i, 10) for i in range(10)]
    assert len({tuple(w) for w in words}) == 10
    assert sample_words(0, 1, 2, 10) == np.random.SeedSequence([0, 0x5A3B, 1]).generate_state(50).reshape(10, 5)[2].tolist()
    with pytest.raises(IndexError):
        sample_words(0, 1, 10, 10)
