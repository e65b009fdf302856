"""Small seed studies' statistics (issue 55, items 1 and 2): the exact test decides at small n, a verdict is
"beyond seed noise" only where the smallest attainable p can reach alpha, pairing keeps most runs, and tied
runs are "not resolved at this metric's resolution" rather than a zero-width interval or a 0% share."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from yolo_det.cli import main as cli_main
from yolo_det.studies import statistics
from yolo_det.studies.compare import BETTER_A, TOO_FEW, WITHIN, compare_studies
from yolo_det.studies.study import Study, StudyRun, decompose

ALPHA = statistics.ALPHA
MAP = "metrics/mAP_0.5"  # higher is better


def _study(values, seeds=None, name=MAP):
    seeds = list(seeds or range(1, len(values) + 1))
    runs = [StudyRun(i + 1, s, {}, f"/nonexistent/{i}.jsonl", None, {name: v}, {}, None, "strict")
            for i, (s, v) in enumerate(zip(seeds, values))]
    return Study({"seeds": seeds, "vary": "all", "base_seed": 0, "mode": "strict", "command": ["x"]}, runs)


def _brute_sign_flip(d):
    d = np.asarray(d, dtype=float)
    observed = abs(d.sum())
    return np.mean([abs(np.dot(s, d)) >= observed - 1e-12 for s in itertools.product([-1, 1], repeat=d.size)])


def _brute_permutation(a, b):
    pooled = np.concatenate([a, b])
    observed = abs(np.mean(a) - np.mean(b))
    splits = itertools.combinations(range(pooled.size), len(a))
    return np.mean([abs(pooled[list(g)].mean() - np.delete(pooled, list(g)).mean()) >= observed - 1e-12
                    for g in splits])


# -- the three examples ---------------------------------------------------------------------
def test_two_pairs_a_hair_apart_are_too_few_seeds_by_the_exact_sign_flip_test():
    """Paired d = [0.010, 0.011]: the paired t-test says p = 0.03; the exact sign-flip test 0.5, its smallest."""
    b = np.array([0.500, 0.509])
    d = statistics.compare(b + [0.010, 0.011], b, paired=True)
    assert d.p_value == pytest.approx(0.5) and d.min_p == pytest.approx(0.5)
    assert d.too_few() and not d.beyond_noise() and d.test.startswith("exact sign-flip test")
    assert "2 pairs" in d.why and "smallest attainable p is 0.5 > 0.05" in d.why
    assert d.t_p_value is not None and d.t_p_value < ALPHA  # the t-test is kept as information, and only that


def test_three_against_three_with_one_value_off_by_a_hair_is_decided_by_the_exact_permutation_test():
    """Welch 3 vs 3 with B = [.4, .4, .4001] gives p = 1e-7; every relabelling of 6 runs: p = 0.1 at best."""
    d = statistics.compare([0.5, 0.5, 0.5], [0.4, 0.4, 0.4001], paired=False)
    assert d.p_value == pytest.approx(0.1) and d.min_p == pytest.approx(0.1)
    assert d.too_few() and d.test.startswith("exact permutation test")
    assert "3 vs 3 runs" in d.why and "smallest attainable p is 0.1 > 0.05" in d.why


def _sharing_two_seeds():
    a = [0.50, 0.53, 0.47, 0.52, 0.48, 0.51, 0.49, 0.505, 0.510, 0.520]  # seeds 1..10
    b = [0.500, 0.509, 0.53, 0.47, 0.52, 0.48, 0.51, 0.49, 0.506, 0.52]  # seeds 9..18: 9, 10 are 0.010, 0.011 lower
    return _study(a, range(1, 11)), _study(b, range(9, 19))


def test_two_studies_sharing_two_of_twenty_seeds_are_compared_unpaired_on_all_runs(tmp_path, capsys):
    a, b = _sharing_two_seeds()
    result = compare_studies(a, b, MAP)
    d = result.metric.difference
    assert not result.paired and (d.n_a, d.n_b) == (10, 10)
    assert result.metric.verdict == WITHIN and d.p_value > 0.9
    note = [n for n in result.notes if "share only 2 seeds" in n]
    assert len(note) == 1 and "unpaired on all 20 runs" in note[0]
    a.write(tmp_path / "a")
    b.write(tmp_path / "b")
    assert cli_main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--metric", MAP]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{MAP}: within seed noise") and "10 vs 10 runs" in out and "share only 2 seeds" in out


# -- the class: n = 2..6, tie patterns, both designs -------------------------------------------------
PAIRED_PATTERNS = {
    "distinct": lambda n: 0.010 + 0.001 * np.arange(n),
    "all equal": lambda n: np.full(n, 0.01),
    "equal magnitudes, mixed signs": lambda n: 0.01 * np.where(np.arange(n) % 3 == 2, -1.0, 1.0),
    "one pair tied": lambda n: np.concatenate([[0.0], 0.010 + 0.001 * np.arange(n - 1)]),
}


@pytest.mark.parametrize("pattern", sorted(PAIRED_PATTERNS))
@pytest.mark.parametrize("n", range(2, 7))
def test_paired_verdicts_follow_the_exact_sign_flip_test_and_its_smallest_attainable_p(n, pattern):
    diffs = PAIRED_PATTERNS[pattern](n)
    b = 0.5 + 0.02 * np.arange(n)
    d = statistics.compare(b + diffs, b, paired=True)
    assert d.test.startswith("exact sign-flip test") and d.n == n
    assert d.p_value == pytest.approx(_brute_sign_flip(diffs))
    smallest = 2 / 2 ** np.count_nonzero(diffs)  # a zero difference adds no arrangement (issue 59)
    assert d.min_p == pytest.approx(min(1.0, smallest))
    assert d.too_few() == (smallest > ALPHA)  # below 6 non-zero differences no outcome could reject
    assert d.beyond_noise() == (not d.too_few() and d.p_value < ALPHA)
    assert not (n < 6 and d.beyond_noise())
    assert f"{n} pairs" in d.why


UNPAIRED_PATTERNS = {
    "both constant": lambda na, nb: (np.full(na, 0.5), np.full(nb, 0.4)),
    "one off by a hair": lambda na, nb: (np.full(na, 0.5), 0.4 + np.r_[np.zeros(nb - 1), 1e-4]),
    "distinct, separated": lambda na, nb: (0.5 + 0.01 * np.arange(na), 0.4 + 0.01 * np.arange(nb)),
    "overlapping with ties": lambda na, nb: (0.4 + 0.1 * (np.arange(na) % 2), 0.4 + 0.1 * (np.arange(nb) % 3 == 0)),
}


@pytest.mark.parametrize("pattern", sorted(UNPAIRED_PATTERNS))
@pytest.mark.parametrize("na, nb", [(2, 2), (3, 3), (2, 5), (4, 4), (3, 6), (6, 6)])
def test_unpaired_verdicts_follow_the_exact_permutation_test_and_its_smallest_attainable_p(na, nb, pattern):
    a, b = UNPAIRED_PATTERNS[pattern](na, nb)
    d = statistics.compare(a, b, paired=False)
    if d.identical:
        return
    pooled = np.concatenate([a, b])
    gaps = [abs(pooled[list(g)].mean() - np.delete(pooled, list(g)).mean())
            for g in itertools.combinations(range(pooled.size), na)]
    smallest = np.mean(np.asarray(gaps) >= max(gaps) - 1e-12)  # ties coarsen it (issue 59)
    assert smallest >= (2 if na == nb else 1) / math.comb(na + nb, na) - 1e-12
    assert d.test.startswith("exact permutation test") and (d.n_a, d.n_b) == (na, nb)
    assert d.p_value == pytest.approx(_brute_permutation(a, b))
    assert d.min_p == pytest.approx(smallest) and d.too_few() == (smallest > ALPHA)
    assert d.beyond_noise() == (not d.too_few() and d.p_value < ALPHA)
    assert f"{na} vs {nb} runs" in d.why


@pytest.mark.parametrize("paired, sizes, decider", [
    (True, (16, 16), "exact sign-flip test"), (True, (17, 17), "sign-flip test (Monte-Carlo)"),
    (False, (9, 9), "exact permutation test"), (False, (10, 10), "permutation test (Monte-Carlo)"),
])
def test_the_exact_test_decides_while_its_arrangements_can_be_enumerated_monte_carlo_above(paired, sizes, decider):
    """Never a t-test alone (issue 59): above the exact range a seeded Monte-Carlo permutation test decides."""
    rng = np.random.default_rng(1)
    a, b = rng.normal(0.5, 0.01, sizes[0]), rng.normal(0.5, 0.01, sizes[1])
    d = statistics.compare(a, b, paired)
    assert d.test.startswith(decider) and str(statistics.EXACT_LIMIT) in d.why.replace(",", "")
    assert d.ci is not None and d.ci[0] < d.difference < d.ci[1]  # the t interval, kept as information


@pytest.mark.parametrize("na, nb, common, paired", [
    (10, 10, 2, False), (10, 10, 4, False), (3, 10, 2, False),  # pairs would drop most runs
    (10, 10, 5, True), (5, 10, 5, True), (10, 10, 10, True), (4, 12, 4, True),  # at least half the runs pair
])
def test_pairing_is_used_only_where_the_common_seeds_hold_at_least_half_the_runs(na, nb, common, paired):
    rng = np.random.default_rng(na * 100 + nb * 10 + common)
    seeds_a = list(range(1, na + 1))
    seeds_b = list(range(na - common + 1, na - common + 1 + nb))
    result = compare_studies(_study(list(rng.normal(0.5, 0.01, na)), seeds_a),
                             _study(list(rng.normal(0.5, 0.01, nb)), seeds_b), MAP)
    assert result.paired == paired
    d = result.metric.difference
    assert (d.n_a, d.n_b) == ((common, common) if paired else (na, nb))


def test_seeds_for_never_plans_fewer_seeds_than_the_exact_test_needs_to_reject():
    assert statistics.seeds_for(1.0, 10.0, paired=True) == 6  # 2 / 2**6 = 0.031: the fewest pairs that can reject
    assert statistics.seeds_for(1.0, 10.0) == 4  # 2 / C(8, 4) = 0.029
    assert statistics.sign_flip_min_p(5) > ALPHA >= statistics.sign_flip_min_p(6)
    assert statistics.permutation_min_p(3, 3) > ALPHA >= statistics.permutation_min_p(4, 4)


def test_compare_says_which_test_decided_and_why_in_text_and_json(tmp_path, capsys):
    _study([0.510, 0.520], [11, 22]).write(tmp_path / "a")
    _study([0.500, 0.509], [11, 22]).write(tmp_path / "b")
    args = ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--metric", MAP]
    assert cli_main(args) == 3
    out = capsys.readouterr().out
    assert out.startswith(f"{MAP}: {TOO_FEW}") and "exact sign-flip test, 2 pairs" in out
    assert "the smallest attainable p is 0.5 > 0.05" in out and "6 pairs" in out
    assert cli_main(args + ["--json"]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["test"].startswith("exact sign-flip test") and data["p_value"] == pytest.approx(0.5)
    assert "smallest attainable p is 0.5" in data["why"] and data["result"]["t_test"]["p_value"] < ALPHA


def test_six_pairs_all_one_way_are_a_verdict_through_the_cli(tmp_path, capsys):
    seeds = list(range(1, 7))
    _study(list(0.5 + 0.01 * np.arange(6) + 0.02), seeds).write(tmp_path / "a")
    _study(list(0.5 + 0.01 * np.arange(6) + 0.001 * np.arange(6)), seeds).write(tmp_path / "b")
    assert cli_main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--metric", MAP]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{MAP}: {BETTER_A}") and "exact sign-flip test, 6 pairs" in out


# -- item 2: tied runs are not resolved, not zero variance -------------------------------------------
@pytest.mark.parametrize("values, resolution", [
    ([0.0991] * 3, 1e-4), ([0.5] * 3, 0.1), ([0.5] * 5, 0.1), ([0.12345] * 2, 1e-5), ([3.0] * 4, 1.0),
])
def test_equal_runs_have_no_interval_but_a_resolution_at_which_their_spread_is_not_resolved(values, resolution):
    s = statistics.summarize(values)
    assert s.std == 0.0 and s.ci is None and not s.resolved
    assert s.resolution == pytest.approx(resolution)
    data = s.to_dict()
    assert data["resolved"] is False and data["resolution"] == pytest.approx(resolution) and data["ci"] is None


@pytest.mark.parametrize("values, resolution", [
    ([0.5, 0.5, 0.6], 0.1), ([0.42857, 0.57143, 0.42857], 0.14286), ([0.1, 0.1, 0.1, 0.3], 0.2),
])
def test_a_coarse_metric_with_some_ties_keeps_its_interval_and_states_its_resolution(values, resolution):
    s = statistics.summarize(values)
    assert s.resolved and s.ci[0] < s.mean < s.ci[1]
    assert s.resolution == pytest.approx(resolution)


def test_the_study_table_says_not_resolved_instead_of_a_zero_width_interval(tmp_path):
    from yolo_det.cli.seeds import summary_lines

    lines = "\n".join(summary_lines(_study([0.5, 0.5, 0.5])))
    assert "[0.5, 0.5]" not in lines and "not resolved at this metric's resolution" in lines and "0.1" in lines


def _sources(init, order, augment, all_=None):
    return {"init": _study(init), "order": _study(order), "augment": _study(augment),
            "all": _study(all_ or [0.3, 0.35, 0.7])}


@pytest.mark.parametrize("tied", ["init", "order", "augment"])
@pytest.mark.parametrize("n", [2, 3, 5])
def test_a_tied_source_has_no_zero_share_but_an_interval_up_to_what_the_resolution_allows(tied, n):
    spread = {"init": [0.4, 0.6, 0.5, 0.45, 0.55][:n], "order": [0.5, 0.7, 0.6, 0.5, 0.6][:n],
              "augment": [0.3, 0.4, 0.3, 0.35, 0.4][:n]}
    spread[tied] = [0.5] * n
    parts = decompose(_sources(*(spread[r] for r in ("init", "order", "augment"))), MAP)
    row = parts["sources"][tied]
    assert row["resolved"] is False and row["share"] is None
    assert row["variance_ci"][0] == 0.0 and row["variance_ci"][1] > 0.0
    assert row["share_ci"][0] == 0.0 and row["share_ci"][1] > 0.0  # never "0%, CI [0%, 0%]"
    assert parts["resolution"] == pytest.approx(0.05)  # the smallest gap between the values written
    for other in set(spread) - {tied}:
        other_row = parts["sources"][other]
        assert other_row["resolved"] and other_row["share_ci"][0] <= other_row["share"] <= other_row["share_ci"][1]
        assert other_row["share_ci"][1] <= 1.0


def test_every_source_tied_gives_no_shares_and_the_text_says_not_resolved():
    from yolo_det.cli.seeds import decomposition_lines

    parts = decompose(_sources([0.5] * 3, [0.5] * 3, [0.5] * 3, [0.5] * 3), MAP)
    assert all(parts["sources"][r]["share"] is None for r in ("init", "order", "augment"))
    assert all(parts["sources"][r]["share_ci"] == [0.0, 1.0] for r in ("init", "order", "augment"))
    text = "\n".join(decomposition_lines(parts))
    assert "[0%, 0%]" not in text and "not resolved at this metric's resolution" in text
