"""Seeding: main process, DataLoader workers (num_workers=2), generators, trial seeds."""

import random

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import yolo_det


class RandomDraws(Dataset):
    """Each item is what the worker's random, numpy and torch streams produce, plus the worker id."""

    def __len__(self):
        return 8

    def __getitem__(self, index):
        info = torch.utils.data.get_worker_info()
        return torch.tensor([
            index,
            info.id if info else -1,
            random.random(),
            float(np.random.random()),
            float(torch.rand(())),
        ], dtype=torch.float64)


def _batches(seed, rank=0, epochs=1, shuffle=True):
    loader = DataLoader(
        RandomDraws(), batch_size=2, shuffle=shuffle, num_workers=2,
        worker_init_fn=yolo_det.seed_worker, generator=yolo_det.make_generator(seed, rank=rank),
    )
    return [torch.cat(list(loader)) for _ in range(epochs)]


def test_seed_everything_returns_seed_and_reproduces_streams():
    assert yolo_det.seed_everything(7) == 7
    first = (random.random(), np.random.random(), torch.rand(()).item())
    yolo_det.seed_everything(7)
    assert (random.random(), np.random.random(), torch.rand(()).item()) == first


@pytest.mark.parametrize("bad", [-1, 2**32, 1.5, "3", True])
def test_seed_everything_rejects_bad_seeds(bad):
    with pytest.raises((ValueError, TypeError)):
        yolo_det.seed_everything(bad)


def test_same_seed_same_batches_different_seed_different_batches():
    a, b, c = _batches(0)[0], _batches(0)[0], _batches(1)[0]
    assert torch.equal(a, b)
    assert not torch.equal(a[:, 2:], c[:, 2:])
    assert not torch.equal(a[:, 0], c[:, 0])  # shuffle order follows the seed too


def test_workers_never_share_a_stream():
    batch = _batches(0, shuffle=False)[0]
    by_worker = {w: batch[batch[:, 1] == w] for w in (0, 1)}
    assert set(by_worker) == {0, 1} and all(len(v) == 4 for v in by_worker.values())
    for column in (2, 3, 4):  # random, numpy, torch
        first_draws = [by_worker[w][0, column].item() for w in (0, 1)]
        assert first_draws[0] != first_draws[1]


def test_ranks_get_different_streams():
    assert not torch.equal(_batches(0, rank=0)[0][:, 2:], _batches(0, rank=1)[0][:, 2:])


def test_each_epoch_draws_fresh_augmentations_reproducibly():
    run1, run2 = _batches(3, epochs=2), _batches(3, epochs=2)
    assert all(torch.equal(x, y) for x, y in zip(run1, run2))
    assert not torch.equal(run1[0][:, 2:], run1[1][:, 2:])


def test_make_generator_depends_on_seed_and_rank():
    draws = {(s, r): torch.randint(0, 2**62, (4,), generator=yolo_det.make_generator(s, rank=r)).tolist()
             for s in (0, 1) for r in (0, 1)}
    assert len({tuple(v) for v in draws.values()}) == 4
    assert torch.randint(0, 2**62, (4,), generator=yolo_det.make_generator(0, rank=0)).tolist() == draws[(0, 0)]


def test_trial_seeds_are_independent_reproducible_and_not_base_plus_i():
    seeds = yolo_det.trial_seeds(0, 5)
    assert seeds == yolo_det.trial_seeds(0, 5)
    assert len(set(seeds)) == 5 and all(0 <= s < 2**32 for s in seeds)
    assert seeds != [0, 1, 2, 3, 4] and seeds[:3] == yolo_det.trial_seeds(0, 3)
    assert not set(seeds) & set(yolo_det.trial_seeds(1, 5))


def test_albumentations_pipelines_are_found_and_seeded():
    from yolo_det.core.seeding import seed_albumentations

    class FakeCompose:  # the shape of albumentations.Compose that matters: set_random_seed
        def __init__(self):
            self.seeds = []

        def set_random_seed(self, seed):
            self.seeds.append(seed)

    FakeCompose.__module__ = "albumentations.core.composition"

    class Wrapper:  # YOLOv5 keeps it at dataset.albumentations.transform
        def __init__(self):
            self.transform = FakeCompose()

    class FakeDataset:
        def __init__(self):
            self.albumentations = Wrapper()
            self.labels = [np.zeros((3, 5))] * 100

    ds = FakeDataset()
    assert seed_albumentations(ds, 42) == 1
    assert ds.albumentations.transform.seeds == [42]
