"""Seed-study verdicts against independent oracles, on generated studies (issue 59, items 1, 2, 3 and 10).

The oracles, used only here: brute-force enumeration of every sign pattern / split (``itertools``),
``scipy.stats.permutation_test`` enumerating exactly, and an exact integer dynamic programme over the
distribution of the test statistic for values on a grid (exact at every size 1-30, where enumeration is too
slow: it checks the Monte-Carlo range). ``hypothesis`` generates studies of 1-30 runs with ties, zero
differences, NaN/inf values, both metric directions, paired and unpaired, around the exact-range edges
(16/17 pairs, 9 vs 9 / 9 vs 10 runs) and alpha. Properties: a verdict never stronger than the oracle's p
allows, the reported p the oracle's exactly in the exact range and inside the Monte-Carlo error bound
above it, the smallest attainable p the brute-force one, the exit code the verdict word's.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from yolo_det.cli import main as cli_main
from yolo_det.core import verdicts
from yolo_det.studies import statistics
from yolo_det.studies.compare import compare_studies
from yolo_det.studies.study import Study, StudyRun, higher_is_better

ALPHA = statistics.ALPHA
MAP, LOSS, LR = "metrics/mAP_0.5", "train/box_loss", "x/lr0"  # higher is better, lower is better, no direction
UNITS = (1.0, 0.1, 0.01, 0.001, 1e-4)


# -- oracles ----------------------------------------------------------------------------------------------
def brute_sign_flip(d):
    """(p, smallest attainable p) of the sign-flip test of ``d``, every pattern enumerated."""
    d = np.asarray(d, dtype=float)
    sums = np.array([abs(np.dot(s, d)) for s in itertools.product([-1.0, 1.0], repeat=d.size)])
    tol = 1e-9 * max(np.abs(d).sum(), 1e-300)
    return float(np.mean(sums >= abs(d.sum()) - tol)), float(np.mean(sums >= sums.max() - tol))


def brute_permutation(a, b):
    """(p, smallest attainable p) of the permutation test of A against B, every split enumerated."""
    pooled = np.concatenate([a, b]).astype(float)
    gaps = []
    for group in itertools.combinations(range(pooled.size), len(a)):
        mask = np.zeros(pooled.size, bool)
        mask[list(group)] = True
        gaps.append(abs(pooled[mask].mean() - pooled[~mask].mean()))
    gaps = np.asarray(gaps)
    tol = 1e-9 * max(np.abs(pooled).sum(), 1e-300)
    observed = abs(np.mean(a) - np.mean(b))
    return float(np.mean(gaps >= observed - tol)), float(np.mean(gaps >= gaps.max() - tol))


def scipy_exact(a, b=None):
    """scipy's permutation test, every arrangement enumerated (``n_resamples=inf``)."""
    if b is None:
        result = stats.permutation_test((np.asarray(a, float),), lambda x, axis: np.abs(np.sum(x, axis=axis)),
                                        permutation_type="samples", vectorized=True, n_resamples=np.inf,
                                        alternative="greater")
    else:
        result = stats.permutation_test((np.asarray(a, float), np.asarray(b, float)),
                                        lambda x, y, axis: np.abs(np.mean(x, axis=axis) - np.mean(y, axis=axis)),
                                        permutation_type="independent", vectorized=True, n_resamples=np.inf,
                                        alternative="greater")
    return float(result.pvalue)


def _reduced(k):
    """Integers divided by their greatest common divisor (the tests' statistics are scale-free)."""
    k = np.asarray([int(x) for x in k], dtype=np.int64)
    g = int(np.gcd.reduce(np.abs(k))) if np.any(k) else 1
    return k // g


def dp_sign_flip(k):
    """(p, smallest attainable p) of the sign-flip test of integer differences ``k``, exactly: the count of
    sign patterns per sum, by dynamic programming (any n)."""
    k = _reduced(k)
    top = int(np.abs(k).sum())
    counts = np.zeros(2 * top + 1, dtype=np.int64)  # index: sum + top
    counts[top] = 1
    for v in np.abs(k):
        v = int(v)
        nxt = np.zeros_like(counts)
        nxt[v:] += counts[:counts.size - v]
        nxt[:counts.size - v] += counts[v:]
        counts = nxt
    sums = np.abs(np.arange(-top, top + 1))
    total = counts.sum()
    observed = abs(int(k.sum()))
    return (int(counts[sums >= observed].sum()) / total, int(counts[sums == sums[counts > 0].max()].sum()) / total)


def dp_permutation(ka, kb):
    """(p, smallest attainable p) of the permutation test of integer runs, exactly: the count of splits per
    sum of A's group (|mean A - mean B| grows with |n * sum_A - n_A * total|), by dynamic programming."""
    pooled = np.asarray([int(x) for x in ka] + [int(x) for x in kb], dtype=np.int64)
    pooled = _reduced(pooled - pooled.min())
    na, n = len(ka), pooled.size
    total = int(pooled.sum())
    counts = np.zeros((na + 1, total + 1), dtype=np.int64)  # counts[size, sum]
    counts[0, 0] = 1
    for v in pooled:
        v = int(v)
        nxt = counts.copy()
        nxt[1:, v:] += counts[:-1, :total + 1 - v]
        counts = nxt
    stat = np.abs(n * np.arange(total + 1) - na * total)
    observed = abs(n * int(pooled[:na].sum()) - na * total)
    row = counts[na]
    splits = math.comb(n, na)
    assert row.sum() == splits
    return int(row[stat >= observed].sum()) / splits, int(row[stat == stat[row > 0].max()].sum()) / splits


def test_the_oracles_agree_with_each_other():
    """The integer programme against brute force and scipy's exact enumeration, ties and zeros included."""
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = int(rng.integers(2, 9))
        k = rng.integers(-3, 4, n)
        assert dp_sign_flip(k) == pytest.approx(brute_sign_flip(k))
        assert dp_sign_flip(k)[0] == pytest.approx(scipy_exact(k))
        ka, kb = rng.integers(0, 4, int(rng.integers(2, 6))), rng.integers(0, 4, int(rng.integers(2, 6)))
        assert dp_permutation(ka, kb) == pytest.approx(brute_permutation(ka, kb))
        assert dp_permutation(ka, kb)[0] == pytest.approx(scipy_exact(ka, kb))


# -- generated studies ------------------------------------------------------------------------------------
#: sizes at and around every edge the code has: 1-2 runs, 5/6 pairs and 3/4 runs (alpha), 16/17 pairs and
#: 9 vs 9 / 9 vs 10 runs (the exact range), up to 30
EDGES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 16, 17, 18, 20, 25, 30]
sizes_near_edges = st.one_of(st.sampled_from(EDGES), st.integers(1, 30))


@st.composite
def grid_values(draw, n, spread):
    """``n`` integers, many tied (a small range) or few (a wide one)."""
    return draw(st.lists(st.integers(0, spread), min_size=n, max_size=n))


@st.composite
def paired_case(draw):
    n = draw(sizes_near_edges)
    kb = draw(grid_values(n, draw(st.sampled_from([0, 2, 50]))))
    kd = draw(st.lists(st.sampled_from([0, 0, 1, 1, 1, 2, -1, 3]) if draw(st.booleans())
                       else st.integers(-20, 40), min_size=n, max_size=n))  # zero differences are common
    return n, kb, kd, draw(st.sampled_from(UNITS))


@st.composite
def unpaired_case(draw):
    na = draw(sizes_near_edges)
    nb = draw(st.one_of(st.just(na), st.just(min(30, na + 1)), sizes_near_edges))
    spread = draw(st.sampled_from([0, 1, 2, 3, 40]))
    ka = draw(grid_values(na, spread))
    kb = draw(grid_values(nb, spread))
    return ka, [k + draw(st.sampled_from([0, 0, 1, 3])) for k in kb], draw(st.sampled_from(UNITS))


def _check_against_oracle(d, oracle_p, oracle_min_p, exact):
    """The verdict never stronger than the oracle, its p the oracle's (exact) or bounding it (Monte-Carlo)."""
    if d.beyond_noise():
        assert oracle_p < ALPHA, f"beyond seed noise where the exact p is {oracle_p}"
    assert d.too_few() == (oracle_min_p > ALPHA), f"smallest attainable p {oracle_min_p}, reported {d.min_p}"
    assert d.min_p == pytest.approx(oracle_min_p, rel=1e-9)
    if exact:  # in the exact range; above it, a p whose draws were escalated past every arrangement is exact too
        assert d.draws == 0
    if d.draws == 0:
        assert d.p_value == pytest.approx(oracle_p, rel=1e-9)
    else:
        assert d.p_low <= oracle_p <= d.p_high, (d.p_low, oracle_p, d.p_high)
        assert d.p_low <= d.p_value <= d.p_high
    outcome = d.outcome()
    assert (outcome == statistics.TOO_FEW) == (oracle_min_p > ALPHA)
    if outcome == statistics.BEYOND:
        assert oracle_p < ALPHA
    if outcome == statistics.WITHIN:
        assert oracle_p >= ALPHA and oracle_min_p <= ALPHA
    if outcome == statistics.UNDECIDED:
        assert d.draws > 0 and d.p_low < ALPHA <= d.p_high
    assert d.beyond_noise() == (outcome == statistics.BEYOND)


@settings(max_examples=80, deadline=None)
@given(paired_case())
def test_paired_verdicts_never_go_beyond_the_exact_sign_flip_oracle(case):
    n, kb, kd, unit = case
    b = 0.5 + unit * np.asarray(kb, float)
    a = 0.5 + unit * (np.asarray(kb) + np.asarray(kd)).astype(float)
    d = statistics.compare(a, b, paired=True)
    if n < 2 or not np.any(kd):
        assert not d.beyond_noise()
    if n < 2:
        assert d.outcome() in (statistics.TOO_FEW, statistics.CONSTANT, statistics.IDENTICAL)
        return
    if np.ptp(np.concatenate([a, b])) == 0:
        assert d.outcome() == statistics.CONSTANT
        return
    if not np.any(kd):
        assert d.outcome() == statistics.IDENTICAL and d.bit_identical
        return
    oracle_p, oracle_min_p = dp_sign_flip(kd)
    exact = 2 ** n <= statistics.EXACT_LIMIT
    if exact and n <= 16:
        assert scipy_exact(np.asarray(kd, float)) == pytest.approx(oracle_p, rel=1e-9)
    _check_against_oracle(d, oracle_p, oracle_min_p, exact)
    assert d.test.startswith("exact sign-flip test" if not d.draws else "sign-flip test (Monte-Carlo")
    assert "t-test" not in d.test


@settings(max_examples=50, deadline=None)
@given(unpaired_case())
def test_unpaired_verdicts_never_go_beyond_the_exact_permutation_oracle(case):
    ka, kb, unit = case
    a, b = 0.5 + unit * np.asarray(ka, float), 0.5 + unit * np.asarray(kb, float)
    d = statistics.compare(a, b, paired=False)
    if min(len(a), len(b)) < 2 or np.ptp(np.concatenate([a, b])) == 0:
        assert not d.beyond_noise()
    if min(len(a), len(b)) < 2:
        assert d.outcome() in (statistics.TOO_FEW, statistics.CONSTANT)
        return
    if np.ptp(np.concatenate([a, b])) == 0:
        assert d.outcome() == statistics.CONSTANT
        return
    oracle_p, oracle_min_p = dp_permutation(ka, kb)
    exact = math.comb(len(a) + len(b), len(a)) <= statistics.EXACT_LIMIT
    if exact and len(a) + len(b) <= 14:  # on the integers: scipy's tolerance (100 eps of the statistic) is
        assert scipy_exact(ka, kb) == pytest.approx(oracle_p, rel=1e-9)  # too tight for float means of ties
    _check_against_oracle(d, oracle_p, oracle_min_p, exact)
    assert "t-test" not in d.test


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-4, 4), min_size=1, max_size=12), st.sampled_from(UNITS))
def test_the_smallest_attainable_paired_p_is_brute_force_on_every_tie_pattern(k, unit):
    d = unit * np.asarray(k, float)
    assert statistics.sign_flip_min_p_of(d) == pytest.approx(brute_sign_flip(d)[1])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=7), st.lists(st.integers(0, 3), min_size=1, max_size=7),
       st.sampled_from(UNITS))
def test_the_smallest_attainable_unpaired_p_is_brute_force_on_every_tie_pattern(ka, kb, unit):
    a, b = 0.5 + unit * np.asarray(ka, float), 0.5 + unit * np.asarray(kb, float)
    expected = 1.0 if np.ptp(np.concatenate([a, b])) == 0 else brute_permutation(a, b)[1]
    assert statistics.permutation_min_p_of(a, b) == pytest.approx(expected)


# -- studies through the command --------------------------------------------------------------------------
def _study(values, seeds, metric, extra=None):
    runs = []
    for i, (s, v) in enumerate(zip(seeds, values)):
        metrics = {metric: v}
        if extra is not None:
            metrics["fitness"] = extra[i]
        runs.append(StudyRun(i + 1, s, {}, f"/nonexistent/{i}.jsonl", None, metrics, {}, None, "strict"))
    return Study({"seeds": list(seeds), "vary": "all", "base_seed": 0, "mode": "strict", "command": ["x"]}, runs)


def _run_compare(a, b, metric):
    """``yolo-det compare --json`` in this process: (exit code, its JSON, its text output)."""
    with tempfile.TemporaryDirectory() as tmp:
        a.write(Path(tmp) / "a")
        b.write(Path(tmp) / "b")
        args = ["compare", str(Path(tmp) / "a"), str(Path(tmp) / "b"), "--metric", metric]
        out, text = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = cli_main(args + ["--json"])
        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(io.StringIO()):
            text_code = cli_main(args)
    assert code == text_code
    return code, json.loads(out.getvalue()), text.getvalue()


BAD = [float("nan"), float("inf"), float("-inf")]


@st.composite
def study_pair(draw):
    """Two studies: paired (the same seeds) or not, ties, zeros, NaN/inf, any metric direction."""
    metric = draw(st.sampled_from([MAP, LOSS, LR]))
    paired = draw(st.booleans())
    na = draw(st.sampled_from([2, 3, 4, 5, 6, 7, 9, 10, 12, 16, 17]))
    nb = na if paired else draw(st.sampled_from([2, 3, 4, 6, 9, 10]))
    unit = draw(st.sampled_from(UNITS))
    ka = draw(st.lists(st.integers(0, 3), min_size=na, max_size=na))
    shift = draw(st.sampled_from([0, 0, 1, 4]))
    same = paired and draw(st.integers(0, 4)) == 0  # bit-identical seed by seed
    kb = list(ka) if same else [k + shift * draw(st.integers(0, 1)) if paired else draw(st.integers(0, 3)) + shift
                                for k in ka[:nb] + [0] * (nb - len(ka[:nb]))]
    va, vb = [0.5 + unit * k for k in ka], [0.5 + unit * k for k in kb]
    if draw(st.integers(0, 3)) == 0:  # a diverged seed
        which = draw(st.sampled_from(["a", "b"]))
        values = va if which == "a" else vb
        values[draw(st.integers(0, len(values) - 1))] = draw(st.sampled_from(BAD))
    seeds_a = list(range(1, na + 1))
    seeds_b = seeds_a if paired else list(range(100, 100 + nb))
    return metric, paired, (va, seeds_a), (vb, seeds_b)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(study_pair())
def test_the_command_s_verdict_and_exit_code_never_claim_more_than_the_oracle(case):
    metric, paired, (va, seeds_a), (vb, seeds_b) = case
    a, b = _study(va, seeds_a, metric), _study(vb, seeds_b, metric)
    code, data, text = _run_compare(a, b, metric)
    word = data["verdict"]
    assert code == verdicts.exit_code(word)  # the exit code is the printed word's
    assert text.startswith(f"{metric}: {data['statement']}")
    assert data["paired"] == paired
    bad = [(name, i + 1) for name, values in (("A", va), ("B", vb)) for i, v in enumerate(values)
           if not math.isfinite(v)]
    if bad:  # named, never dropped
        assert word == verdicts.NOT_PROVEN and data["better"] is None
        for name, run in bad:
            assert f"study {name} run {run} " in data["why"] and f"study {name} run {run} " in text
        return
    pooled = np.asarray(va + vb)
    if np.ptp(pooled) == 0:
        assert word == verdicts.NOT_PROVEN and "carries no information" in data["statement"]
        return
    if paired and va == vb:
        assert word == verdicts.IDENTICAL and "bit-identical seed by seed" in data["statement"]
        return
    if paired:
        oracle_p, oracle_min_p = dp_sign_flip(np.round((np.asarray(va) - np.asarray(vb)) * 1e6).astype(int))
    else:
        ka, kb = (np.round(np.asarray(v) * 1e6).astype(int) for v in (va, vb))
        oracle_p, oracle_min_p = dp_permutation(ka, kb)
    if word == verdicts.BEYOND_NOISE:
        assert oracle_p < ALPHA and oracle_min_p <= ALPHA
        direction = higher_is_better(metric)
        if direction is None:
            assert data["better"] is None
        else:
            assert data["better"] == ("A" if (np.mean(va) > np.mean(vb)) == direction else "B")
    elif word == verdicts.WITHIN_NOISE:
        assert oracle_p >= ALPHA and oracle_min_p <= ALPHA and data["better"] is None
    else:
        assert word in (verdicts.TOO_FEW, verdicts.NOT_PROVEN) and data["better"] is None
        if word == verdicts.TOO_FEW:
            assert oracle_min_p > ALPHA


# -- the cases ------------------------------------------------------------------------------------
def _write_and_compare(tmp_path, capsys, a, b, metric, *extra):
    a.write(tmp_path / "a")
    b.write(tmp_path / "b")
    code = cli_main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--metric", metric, *extra])
    return code, capsys.readouterr().out


def test_six_pairs_with_one_zero_difference_are_too_few_seeds_not_within_noise(tmp_path, capsys):
    """Item 1: a zero difference adds no arrangement: 5 non-zero of 6 pairs reach p = 0.0625 at best."""
    seeds = list(range(1, 7))
    b = [0.50, 0.51, 0.52, 0.53, 0.54, 0.55]
    a = [0.50] + [v + 0.01 + 0.001 * i for i, v in enumerate(b[1:])]
    d = statistics.compare(a, b, paired=True)
    assert d.min_p == pytest.approx(brute_sign_flip(np.subtract(a, b))[1]) == pytest.approx(0.0625)
    assert d.too_few() and not d.beyond_noise()
    code, out = _write_and_compare(tmp_path, capsys, _study(a, seeds, MAP), _study(b, seeds, MAP), MAP)
    assert code == 3 and out.startswith(f"{MAP}: too few seeds for a verdict")
    assert "1 of the 6 differences are 0" in out and "smallest attainable p is 0.0625" in out


def test_ties_across_the_studies_coarsen_the_unpaired_smallest_p():
    """Item 1: [.5,.5,.5,.6] vs [.5,.4,.4,.4]: 8 of 70 splits reach the largest difference, not 2."""
    a, b = [0.5, 0.5, 0.5, 0.6], [0.5, 0.4, 0.4, 0.4]
    d = statistics.compare(a, b, paired=False)
    assert d.min_p == pytest.approx(brute_permutation(a, b)[1]) == pytest.approx(8 / 70)
    assert d.too_few() and "tied values coarsen it" in d.why


@pytest.mark.parametrize("n", [16, 17, 18])
def test_five_moved_pairs_among_identical_ones_are_never_beyond_noise_at_any_size(n, tmp_path, capsys):
    """Item 2: five seeds moved by +0.01, the rest identical: a paired t-test said p = 0.0201 at 17 pairs; the
    sign-flip test can reach 2 / 2**5 = 0.0625 at best, at every size."""
    seeds = list(range(1, n + 1))
    b = [0.5 + 0.001 * i for i in range(n)]
    a = [v + (0.01 if i < 5 else 0.0) for i, v in enumerate(b)]
    d = statistics.compare(a, b, paired=True)
    assert d.min_p == pytest.approx(0.0625) and d.too_few() and "t-test" not in d.test
    code, out = _write_and_compare(tmp_path, capsys, _study(a, seeds, MAP), _study(b, seeds, MAP), MAP)
    assert code == 3 and out.startswith(f"{MAP}: too few seeds")


def test_nine_against_ten_runs_with_tied_values_follow_the_permutation_test_not_welch(tmp_path, capsys):
    """Item 2, unpaired: A = 6 x .50 + 4 x .51 against 9 x .50: Welch p = 0.04, the permutation test 0.087."""
    a, b = [0.50] * 6 + [0.51] * 4, [0.50] * 9
    d = statistics.compare(a, b, paired=False)
    oracle = dp_permutation([0] * 6 + [1] * 4, [0] * 9)[0]
    assert d.t_p_value < ALPHA <= oracle and d.draws > 0 and d.p_low <= oracle <= d.p_high
    assert not d.beyond_noise()
    code, out = _write_and_compare(tmp_path, capsys, _study(a, range(1, 11), MAP), _study(b, range(20, 29), MAP), MAP)
    assert code == 0 and out.startswith(f"{MAP}: within seed noise") and "Monte-Carlo" in out


def test_above_the_exact_range_a_clear_difference_is_beyond_noise_by_the_monte_carlo_bound():
    b = 0.5 + 0.01 * np.arange(17)
    d = statistics.compare(b + 0.01 + 0.001 * np.arange(17), b, paired=True)
    assert d.beyond_noise() and d.draws > 0 and d.p_high < ALPHA and "Monte-Carlo" in d.test
    assert d.p_low <= dp_sign_flip(10 + np.arange(17))[0] <= d.p_high


def test_a_monte_carlo_p_near_alpha_draws_more_and_is_never_beyond_where_the_exact_p_is_not():
    """The error bound decides: an exact p within 0.002 of alpha (integer programme) needs the last stage."""
    rng = np.random.default_rng(5)
    for _ in range(5000):  # 20 pairs, |d| = 1..20 with random signs: p spreads finely around alpha
        k = np.arange(1, 21) * rng.choice([-1, 1], 20)
        p, _ = dp_sign_flip(k)
        if abs(p - ALPHA) < 0.002:
            break
    assert abs(p - ALPHA) < 0.002
    d = statistics.compare(0.5 + 0.001 * k, np.full(20, 0.5), paired=True)
    assert d.draws == statistics.MONTE_CARLO_MORE and d.p_low <= p <= d.p_high
    assert d.outcome() in (statistics.UNDECIDED, statistics.WITHIN if p >= ALPHA else statistics.BEYOND)
    assert not (d.beyond_noise() and p >= ALPHA)


def test_a_twelve_seed_study_with_six_nan_values_is_not_proven_and_names_them(tmp_path, capsys):
    """Item 3: six NaN values were dropped and the study "won" on the six left."""
    seeds = list(range(1, 13))
    a = [0.6 + 0.001 * i for i in range(6)] + [float("nan")] * 6
    b = [0.5 + 0.001 * i for i in range(12)]
    code, out = _write_and_compare(tmp_path, capsys, _study(a, seeds, MAP), _study(b, seeds, MAP), MAP)
    assert code == 3 and out.startswith(f"{MAP}: not proven: non-finite values")
    for run in range(7, 13):
        assert f"study A run {run} (seed {run}): nan" in out


def test_diverged_seeds_with_nan_or_inf_loss_do_not_win_on_the_loss(tmp_path, capsys):
    seeds = list(range(1, 9))
    a = [0.10, float("nan"), 0.11, float("inf"), 0.10, 0.12, 0.11, 0.10]
    b = [0.50 + 0.01 * i for i in range(8)]
    code, out = _write_and_compare(tmp_path, capsys, _study(a, seeds, LOSS), _study(b, seeds, LOSS), LOSS, "--json")
    data = json.loads(out)
    assert code == 3 and data["verdict"] == "not proven" and data["better"] is None
    assert "study A run 2 (seed 2): nan" in data["why"] and "study A run 4 (seed 4): inf" in data["why"]


def test_a_metric_missing_from_some_runs_is_named_not_dropped():
    a = _study([0.6, 0.61, 0.62, 0.63, 0.64, 0.65], range(1, 7), MAP)
    del a.runs[2].metrics[MAP]
    a.runs[2].metrics["other"] = 1.0
    b = _study([0.5, 0.51, 0.52, 0.53, 0.54, 0.55], range(1, 7), MAP)
    result = compare_studies(a, b, MAP)
    assert result.word == verdicts.NOT_PROVEN and "study A run 3 (seed 3): missing" in result.metric.difference.why


def test_bit_identical_studies_say_no_effect_and_ask_whether_the_setting_was_applied(tmp_path, capsys):
    """Item 10: the changed setting was never applied (optimizer=auto ignores lr0): not "within seed noise"."""
    seeds = list(range(1, 7))
    values = [0.5, 0.52, 0.49, 0.55, 0.51, 0.5]
    code, out = _write_and_compare(tmp_path, capsys, _study(values, seeds, MAP, extra=values),
                                   _study(list(values), seeds, MAP, extra=list(values)), MAP)
    assert code == 0
    assert out.startswith(f"{MAP}: no effect: the studies are bit-identical seed by seed (was the setting applied?)")


def test_a_metric_constant_in_every_run_carries_no_information(tmp_path, capsys):
    """Item 10: fitness 0 everywhere got a verdict with no word that it says nothing."""
    seeds = list(range(1, 8))
    a = _study([0.5 + 0.01 * i for i in range(7)], seeds, MAP, extra=[0.0] * 7)
    b = _study([0.4 + 0.01 * i for i in range(7)], seeds, MAP, extra=[0.0] * 7)
    code, out = _write_and_compare(tmp_path, capsys, a, b, "fitness")
    assert code == 3 and out.startswith("fitness: not proven: the metric is constant in every run and carries no "
                                        "information")


def test_the_holm_column_shows_the_adjusted_p_of_every_tested_secondary_metric(tmp_path, capsys):
    """Item 10: `p (Holm)` was "-" in every row while the note said Holm-adjusted."""
    seeds = list(range(1, 4))
    a = _study([0.5, 0.52, 0.49], seeds, MAP, extra=[0.3, 0.31, 0.33])
    b = _study([0.4, 0.41, 0.45], seeds, MAP, extra=[0.2, 0.25, 0.21])
    code, out = _write_and_compare(tmp_path, capsys, a, b, MAP)
    assert code == 3
    row = next(line for line in out.splitlines() if line.startswith("fitness "))
    result = compare_studies(a, b, MAP)
    adjusted = result.others[0].difference.p_adjusted
    assert adjusted is not None and f"{adjusted:.6g}" in row


def test_the_readme_and_docs_state_the_real_minimum_for_paired_and_unpaired_studies():
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    assert "4 runs a study" not in readme
    assert "6 pairs" in readme and "4 runs per study" in readme
    seeds_doc = (root / "docs" / "seeds.md").read_text()
    assert "non-finite" in seeds_doc and "bit-identical seed by seed" in seeds_doc and "Monte-Carlo" in seeds_doc


@pytest.mark.parametrize("seed", range(4))
def test_just_above_the_exact_range_scipy_s_exact_enumeration_lies_in_the_monte_carlo_bound(seed):
    """17 pairs (131,072 sign patterns) and 9 vs 10 runs (92,378 splits): scipy enumerates them all."""
    rng = np.random.default_rng(seed)
    k = rng.integers(-2, 5, 17)  # ties and zeros
    d = statistics.compare(0.5 + 0.01 * k, np.full(17, 0.5), paired=True)
    if d.testable() and d.draws:
        assert d.p_low <= scipy_exact(k.astype(float)) <= d.p_high
    ka, kb = rng.integers(0, 4, 9), rng.integers(1, 5, 10)
    u = statistics.compare(0.5 + 0.01 * ka, 0.5 + 0.01 * kb, paired=False)
    assert u.draws and u.p_low <= scipy_exact(ka.astype(float), kb.astype(float)) <= u.p_high
