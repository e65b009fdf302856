"""Seed-study statistics against known distributions, the role seeds, the study plan and the GPU schedule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from yolo_det.core.seeding import trial_seeds
from yolo_det.studies import statistics
from yolo_det.studies.study import Study, StudyError, StudyRun, decompose, device_slots, higher_is_better, plan, visible_gpus
from yolo_det.studies.compare import BETTER_A, BETTER_B, WITHIN, compare_studies


def test_interval_of_the_mean_covers_the_true_mean_95_percent_of_the_time():
    rng = np.random.default_rng(12345)
    for n in (3, 5, 10):
        hits = 0
        trials = 1500
        for _ in range(trials):
            s = statistics.summarize(rng.normal(2.0, 0.5, n))
            hits += s.ci[0] <= 2.0 <= s.ci[1]
        # binomial sd at p=0.95, 1500 trials: 0.0056; 4 sd either side
        assert abs(hits / trials - 0.95) < 0.023, (n, hits / trials)


def test_summary_is_mean_std_range_and_handles_few_or_equal_values():
    s = statistics.summarize([1.0, 2.0, 4.0, float("nan")])
    assert (s.n, s.mean, s.min, s.max) == (3, pytest.approx(7 / 3), 1.0, 4.0)
    assert s.std == pytest.approx(np.std([1.0, 2.0, 4.0], ddof=1))
    assert s.ci[0] < s.mean < s.ci[1]
    assert statistics.summarize([0.0991] * 3).std == 0.0  # equal values: no rounding residue
    assert statistics.summarize([0.0991] * 3).ci == [0.0991, 0.0991]
    one = statistics.summarize([5.0])
    assert one.n == 1 and one.std is None and one.ci is None
    assert statistics.summarize([]).mean is None


@pytest.mark.parametrize("paired", [False, True])
def test_p_values_are_uniform_under_the_null_and_a_large_effect_is_found(paired):
    rng = np.random.default_rng(7)
    p = []
    for _ in range(800):
        shared = rng.normal(0, 1, 5) if paired else 0.0  # what one seed does to both configurations
        a = shared + rng.normal(0, 0.3, 5)
        b = shared + rng.normal(0, 0.3, 5)
        p.append(statistics.compare(a, b, paired).p_value)
    p = np.asarray(p)
    assert 0.02 < np.mean(p < 0.05) < 0.08
    assert stats.kstest(p, "uniform").pvalue > 1e-3

    detected = 0
    for _ in range(200):
        shared = rng.normal(0, 1, 3) if paired else 0.0
        a = shared + rng.normal(0, 0.3, 3)
        b = shared + rng.normal(3.0, 0.3, 3)  # ten standard deviations of the seed noise
        d = statistics.compare(a, b, paired)
        detected += d.beyond_noise() and d.difference < 0 and d.ci[1] < 0
    assert detected >= 190


def test_compare_without_spread_is_decided_by_equality():
    same = statistics.compare([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], paired=True)
    assert same.p_value == 1.0 and not same.beyond_noise() and same.difference == 0.0
    shifted = statistics.compare([1.0, 2.0, 3.0], [2.0, 3.0, 4.0], paired=True)  # every pair differs by 1
    assert shifted.beyond_noise() and shifted.difference == -1.0
    assert statistics.compare([1.0], [2.0], paired=False).p_value is None


def test_seeds_needed_follows_the_normal_approximation():
    assert statistics.seeds_for(1.0, 1.0) == math.ceil(2 * (1.959964 + 0.841621) ** 2) + 1
    assert statistics.seeds_for(1.0, 2.0) < statistics.seeds_for(1.0, 1.0)
    assert statistics.seeds_for(1.0, 0.0) is None


def _study(values, seeds=None, name="train/box_loss", vary="all"):
    seeds = seeds or list(range(len(values)))
    runs = [StudyRun(i + 1, s, {}, f"/nonexistent/{i}.jsonl", None, {name: v, "fitness": 0.5}, {}, None, "strict")
            for i, (s, v) in enumerate(zip(seeds, values))]
    return Study({"seeds": seeds, "vary": vary}, runs)


def test_verdicts_follow_the_metric_direction():
    low, high = _study([0.10, 0.11, 0.12]), _study([1.00, 1.01, 1.02])
    result = compare_studies(low, high, "train/box_loss")
    assert result.paired and result.metric.verdict == BETTER_A  # a loss: lower is better
    assert compare_studies(high, low, "train/box_loss").metric.verdict == BETTER_B
    assert compare_studies(low, high, "fitness").metric.verdict == WITHIN  # equal in every run
    assert [m.metric for m in result.others] == ["fitness"]
    assert higher_is_better("metrics/mAP50(B)") and higher_is_better("best:fitness")
    assert higher_is_better("val/cls_loss") is False and higher_is_better("x/lr0") is None
    unpaired = compare_studies(low, _study([1.0, 1.01, 1.02], seeds=[7, 8, 9]), "train/box_loss")
    assert not unpaired.paired and unpaired.metric.difference.test == "Welch's t-test"
    with pytest.raises(StudyError, match="not in both studies"):
        compare_studies(low, high, "metrics/nothing")
    with pytest.raises(StudyError, match="at least two"):
        compare_studies(_study([1.0]), high, "fitness")


def test_decomposition_shares_add_up_over_the_sources():
    studies = {"init": _study([1.0, 3.0]), "order": _study([1.0, 2.0]), "augment": _study([1.0, 1.0]),
               "all": _study([0.0, 4.0])}
    parts = decompose(studies, "train/box_loss")["sources"]
    assert parts["init"]["variance"] == pytest.approx(2.0) and parts["order"]["variance"] == pytest.approx(0.5)
    assert parts["init"]["share"] == pytest.approx(0.8) and parts["augment"]["share"] == 0.0
    assert parts["all"]["share"] is None and parts["all"]["variance"] == pytest.approx(8.0)


def test_a_longer_study_starts_with_the_same_seeds():
    assert plan(3, 5, "all")["seeds"][:3] == plan(3, 3, "all")["seeds"] == trial_seeds(3, 3)
    assert plan(3, 3, "init")["fixed_seed"] == trial_seeds(3, 1)[0]
    with pytest.raises(StudyError, match="at least 2"):
        plan(0, 1, "all")
    with pytest.raises(StudyError, match="--vary"):
        plan(0, 3, "weights")


def test_parallel_runs_get_one_visible_gpu_each_or_are_refused():
    assert device_slots(1, gpus=[]) == [{}]
    assert device_slots(2, gpus=["0", "1", "2"]) == [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}]
    with pytest.raises(StudyError, match="more than one visible GPU"):
        device_slots(2, gpus=["0"])
    with pytest.raises(StudyError, match="needs 4 visible GPUs"):
        device_slots(4, gpus=["3", "5"])
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3, 5"}) == ["3", "5"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []
