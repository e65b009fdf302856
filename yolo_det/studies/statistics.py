"""The statistics of seed studies (scipy): a metric's spread over seeds, and two studies compared.

Under strict every run is a function of its seed, so the spread over seeds is the variance of the
method itself. The interval of a mean is Student's t interval; two studies are compared on the seeds
both ran (paired: the runs of one seed share initialisation, order and augmentation, so their
difference cancels what the seeds do alike) or on all their runs (unpaired). A permutation test decides
at every size, never a t-test alone: the sign-flip test of the paired differences or the permutation test
of the pooled runs, exact while the arrangements can be enumerated (``EXACT_LIMIT``: up to 16 pairs, 9 vs
9 runs), seeded Monte-Carlo above (checked against ``scipy.stats.permutation_test`` and exact enumeration), where a verdict needs the p's whole
error bound on one side of alpha. A verdict is possible only where the smallest p attainable on the data
(zero differences and tied values counted) reaches alpha; otherwise the answer is "too few seeds". A
NaN/inf value, or one value in every run, is no test at all. The t-test's interval and p are kept as
information. Runs tied at the resolution their metric was written with have no interval: their spread is
"not resolved", not zero.
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import itertools
import math
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 1.0 - CONFIDENCE


def _values(values: Sequence[float]) -> np.ndarray:
    array = np.asarray([float(v) for v in values], dtype=np.float64)
    return array[np.isfinite(array)]


def _clean(value: float) -> Optional[float]:
    return float(value) if value is not None and math.isfinite(float(value)) else None


TIE = 1e-9  #: values whose spread is below this share of their magnitude are tied (rounding residue)
_DIGITS = 17  #: the most decimals a written float can carry


def _decimals_step(value: float) -> Optional[float]:
    """The last decimal place ``value`` was written with (0.0991 -> 1e-4, 3.0 -> 1); None for 0."""
    if value == 0.0 or not math.isfinite(value):
        return None
    exponent = decimal.Decimal(repr(float(value))).normalize().as_tuple().exponent
    return 10.0 ** max(int(exponent), -_DIGITS)


def resolution(values: Sequence[float]) -> Optional[float]:
    """The finest step a metric's values resolve, estimated from the values: the smallest non-zero gap
    between two of them (a precision on 7 images steps by 1/7), or, where they are all equal, the last
    decimal place they were written with. None where nothing can be said (no values; every one 0)."""
    x = np.unique(_values(values))
    if x.size >= 2:
        gaps = np.diff(x)
        gaps = gaps[gaps > TIE * float(np.max(np.abs(x)))]  # a last-bit residue is not a step
        if gaps.size:
            return float(np.min(gaps))
    steps = [s for s in (_decimals_step(float(v)) for v in x) if s is not None]
    return min(steps) if steps else None


def tied(values: Sequence[float]) -> bool:
    """True when the finite ``values`` (at least two) are all equal up to rounding residue."""
    x = _values(values)
    return x.size >= 2 and float(np.ptp(x)) <= TIE * float(np.max(np.abs(x)))


@dataclass(frozen=True)
class Summary:
    """One metric over a study's seeds: count, mean, sample standard deviation, min, max and the
    ``CONFIDENCE`` t interval of the mean (None with fewer than two finite values, and where every run
    is equal: their spread is below the metric's ``resolution``, ``resolved`` False, not zero)."""

    n: int
    mean: Optional[float]
    std: Optional[float]
    min: Optional[float]
    max: Optional[float]
    ci: Optional[List[float]]
    resolution: Optional[float] = None
    resolved: bool = True

    def to_dict(self) -> Dict[str, Any]:
        return {"n": self.n, "mean": self.mean, "std": self.std, "min": self.min, "max": self.max, "ci": self.ci,
                "resolution": self.resolution, "resolved": self.resolved}


def summarize(values: Sequence[float], confidence: float = CONFIDENCE) -> Summary:
    """Mean, standard deviation (ddof 1), range and the t interval of the mean of ``values`` (NaNs dropped),
    with the metric's :func:`resolution`. Equal runs get no interval (a zero-width one would claim a
    spread of 0 that the metric's resolution cannot show): ``resolved`` is False."""
    x = _values(values)
    n = int(x.size)
    if n == 0:
        return Summary(0, None, None, None, None, None)
    step = resolution(x)
    equal = bool(np.all(x == x[0]))
    mean = float(x[0]) if equal else float(np.mean(x))  # equal values: no rounding residue
    if n < 2:
        return Summary(n, mean, None, float(x[0]), float(x[0]), None, step)
    if equal or tied(x):
        return Summary(n, mean, 0.0 if equal else float(np.std(x, ddof=1)), float(np.min(x)), float(np.max(x)),
                       None, step, resolved=False)
    std = float(np.std(x, ddof=1))
    low, high = stats.t.interval(confidence, df=n - 1, loc=mean, scale=std / math.sqrt(n))
    return Summary(n, mean, std, float(np.min(x)), float(np.max(x)), [float(low), float(high)], step)


def unresolved_variance_bound(step: Optional[float], n: int) -> Optional[float]:
    """The largest sample variance ``n`` runs can have when all of them were written as one value at
    resolution ``step`` (their true values lie within one step: half at each end, ``step**2 / 4 * n / (n-1)``
    at even ``n``, a little less at odd); None where ``step`` is unknown."""
    if step is None or n < 2:
        return None
    return step ** 2 / 4.0 * n / (n - 1)


#: sign patterns / relabellings enumerated exactly (16 pairs, 9 vs 9 runs): up to here an exact test decides
EXACT_LIMIT = 1 << 16
MONTE_CARLO = 1 << 16  #: random sign patterns / splits drawn for a p that decides nothing (information)
MONTE_CARLO_MORE = 1 << 20  #: the last draw, where the smaller ones' error bounds still hold alpha
#: a verdict's draws above EXACT_LIMIT: each stage is drawn only where the one before left alpha in its bound
SCHEDULE = (1 << 12, MONTE_CARLO, MONTE_CARLO_MORE)
#: the chance that the exact p lies outside the Monte-Carlo error bound (Clopper-Pearson, two-sided), over
#: every stage of SCHEDULE together (each stage's bound at ERROR_LEVEL / len(SCHEDULE): Bonferroni)
ERROR_LEVEL = 1e-6
_MC_SEED = 20240536


@dataclass(frozen=True)
class PermutationP:
    """A permutation test's two-sided p. Exact (``draws`` 0): ``low == p == high``. Monte-Carlo: ``p`` is
    ``(k + 1) / (draws + 1)`` and [``low``, ``high``] the Clopper-Pearson bound, at ``1 - ERROR_LEVEL``, of
    the exact p that enumerating every arrangement would give."""

    p: float
    low: float
    high: float
    draws: int = 0


def _exact_p(p: float) -> PermutationP:
    return PermutationP(p, p, p, 0)


def error_bound(k: int, draws: int, level: float = ERROR_LEVEL) -> Tuple[float, float]:
    """Where the exact p lies, at ``1 - level``, when ``k`` of ``draws`` uniform random arrangements reached the
    observed statistic (Clopper-Pearson)."""
    low = 0.0 if k == 0 else float(stats.beta.ppf(level / 2, k, draws - k + 1))
    high = 1.0 if k >= draws else float(stats.beta.ppf(1 - level / 2, k + 1, draws - k))
    return low, high


def _sequential(draw: Any, observed: float, tol: float, alpha: Optional[float]) -> PermutationP:
    """Draw the stages of SCHEDULE until the error bound leaves ``alpha`` on one side (one ``MONTE_CARLO`` draw
    where ``alpha`` is None: a p for information). ``draw(rng, rows)``: the statistic of ``rows`` random
    arrangements, drawn uniformly (the observed one among them)."""
    stages = (MONTE_CARLO,) if alpha is None else SCHEDULE
    level = ERROR_LEVEL if alpha is None else ERROR_LEVEL / len(SCHEDULE)
    for draws in stages:
        rng = np.random.default_rng(_MC_SEED)
        k, done = 0, 0
        while done < draws:
            rows = min(_CHUNK, draws - done)
            k += int(np.sum(draw(rng, rows) >= observed - tol))
            done += rows
        low, high = error_bound(k, draws, level)
        test = PermutationP((k + 1) / (draws + 1), low, high, draws)
        if _decided(test, alpha):
            break
    return test


_CHUNK = 1 << 14  #: random arrangements drawn at a time (bounded memory)


def _decided(test: Any, alpha: Optional[float]) -> bool:
    """Whether a Monte-Carlo p's error bound leaves alpha on one side (always, for an exact p)."""
    return alpha is None or test.high < alpha or test.low >= alpha


def snap(values: np.ndarray, tie: float) -> np.ndarray:
    """``values`` with each run of values closer than ``tie`` to its neighbour set to the run's first value:
    rounding residue (0.1 + 0.2 against 0.3) is one value, so that a tie is a tie for every test."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return values
    order = np.argsort(values, kind="stable")
    out = values.copy()
    anchor = values[order[0]]
    for i in order[1:]:
        if values[i] - anchor <= tie:
            out[i] = anchor
        else:
            anchor = values[i]
    return out


@functools.lru_cache(maxsize=32)
def _sign_patterns(n: int) -> np.ndarray:
    """Every ``+-1`` pattern of length ``n`` (``2**n x n``)."""
    bits = (np.arange(1 << n)[:, None] >> np.arange(n)[None, :]) & 1
    return (1 - 2 * bits).astype(np.float64)


def sign_flip_test(d: Sequence[float], alpha: Optional[float] = ALPHA) -> PermutationP:
    """The sign-flip (permutation) test of "the paired differences ``d`` centre on 0", two-sided on ``|sum|``:
    exact up to EXACT_LIMIT patterns; above, seeded Monte-Carlo draws (the stages of ``SCHEDULE``, each drawn
    where the one before left ``alpha`` inside its error bound; ``scipy.stats.permutation_test`` is the tests'
    oracle). Never 0: the
    observed pattern counts. Zero differences flip to themselves: they add no distinct arrangement."""
    d = np.asarray(d, dtype=np.float64)
    n = d.size
    if n == 0:
        return _exact_p(1.0)
    observed = abs(float(np.sum(d)))
    tol = 1e-12 * max(float(np.sum(np.abs(d))), 1e-300)  # sums of the same terms in another order
    if n < 63 and (1 << n) <= EXACT_LIMIT:
        sums = np.abs(_sign_patterns(n) @ d)
        return _exact_p(float(np.mean(sums >= observed - tol)))
    def draw(rng: np.random.Generator, rows: int) -> np.ndarray:
        return np.abs((rng.integers(0, 2, size=(rows, n)) * 2 - 1) @ d)

    return _sequential(draw, observed, tol, alpha)


def sign_flip_p(d: Sequence[float]) -> float:
    """Two-sided p of the sign-flip test of ``d`` (:func:`sign_flip_test`'s ``p``)."""
    return sign_flip_test(d, None).p


def sign_flip_min_p(n: int) -> float:
    """The smallest two-sided p the sign-flip test can give with ``n`` non-zero differences: 2 / 2**n (a zero
    difference adds no arrangement: with ``k`` of ``n`` non-zero it is 2 / 2**k, :func:`sign_flip_min_p_of`)."""
    return 1.0 if n <= 0 else min(1.0, 2.0 / 2.0 ** n)


def sign_flip_min_p_of(d: Sequence[float]) -> float:
    """The smallest p the sign-flip test can give on these differences: 2 / 2**k, ``k`` the non-zero ones
    (only the patterns that give every non-zero difference one sign reach the largest ``|sum|``)."""
    return sign_flip_min_p(int(np.count_nonzero(np.asarray(d, dtype=np.float64))))


def permutation_test(a: Sequence[float], b: Sequence[float], alpha: Optional[float] = ALPHA) -> PermutationP:
    """The permutation test of "A and B come from one distribution" on ``|mean A - mean B|``, two-sided: every
    split of the pooled runs into groups of A's and B's sizes up to EXACT_LIMIT splits; above, seeded
    Monte-Carlo draws with their error bound (as :func:`sign_flip_test`). Never 0."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    pooled = np.concatenate([a, b])
    na, n = a.size, pooled.size
    if na == 0 or na == n:
        return _exact_p(1.0)
    observed = abs(float(np.mean(a)) - float(np.mean(b)))
    tol = 1e-12 * max(float(np.sum(np.abs(pooled))), 1e-300)
    count = math.comb(n, na)
    if count <= EXACT_LIMIT:
        total = float(np.sum(pooled))
        groups = np.asarray(list(itertools.combinations(range(n), na)), dtype=np.int64)
        sum_a = pooled[groups].sum(axis=1)
        gaps = np.abs(sum_a / na - (total - sum_a) / (n - na))
        return _exact_p(float(np.mean(gaps >= observed - tol)))
    total = float(np.sum(pooled))

    def draw(rng: np.random.Generator, rows: int) -> np.ndarray:  # a uniform random group of na: na smallest keys
        groups = np.argpartition(rng.random((rows, n)), na - 1, axis=1)[:, :na]
        sum_a = pooled[groups].sum(axis=1)
        return np.abs(sum_a / na - (total - sum_a) / (n - na))

    return _sequential(draw, observed, tol, alpha)


def permutation_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p of the permutation test of A against B (:func:`permutation_test`'s ``p``)."""
    return permutation_test(a, b, None).p


def permutation_min_p(na: int, nb: int) -> float:
    """The smallest two-sided p the permutation test can give with groups of ``na`` and ``nb`` distinct runs
    (ties coarsen it: :func:`permutation_min_p_of`)."""
    if na <= 0 or nb <= 0:
        return 1.0
    return min(1.0, (2.0 if na == nb else 1.0) / math.comb(na + nb, na))


def permutation_min_p_of(a: Sequence[float], b: Sequence[float]) -> float:
    """The smallest p the permutation test can give on these pooled runs, ties counted: the largest
    ``|mean A - mean B|`` puts the ``na`` largest (or smallest) values in A; the splits that reach it are those
    whose A holds that multiset (``C(c, t)`` ways where ``t`` of a value's ``c`` copies go to A), over all
    ``C(n, na)`` splits. ``[.5, .5, .5, .6]`` vs ``[.5, .4, .4, .4]``: 8 / 70, not 2 / 70."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    na, nb = a.size, b.size
    if na == 0 or nb == 0:
        return 1.0
    pooled = np.sort(np.concatenate([a, b]))
    n = pooled.size
    if pooled[0] == pooled[-1]:
        return 1.0
    tol = 1e-12 * max(float(np.sum(np.abs(pooled))), 1e-300)

    def extreme(group: np.ndarray) -> Tuple[float, int]:
        rest_sum = float(np.sum(pooled)) - float(np.sum(group))
        gap = abs(float(np.mean(group)) - rest_sum / nb)
        edge = group[0] if group is top else group[-1]  # the value the group takes only some copies of
        return gap, math.comb(int(np.sum(pooled == edge)), int(np.sum(group == edge)))

    top, bottom = pooled[n - na:], pooled[:na]
    (gap_top, ways_top), (gap_bottom, ways_bottom) = extreme(top), extreme(bottom)
    best = max(gap_top, gap_bottom)
    ways = (ways_top if gap_top >= best - tol else 0) + (ways_bottom if gap_bottom >= best - tol else 0)
    return min(1.0, ways / math.comb(n, na))


#: What a comparison of one metric found (:meth:`Difference.outcome`).
BEYOND, WITHIN, TOO_FEW, UNDECIDED = "beyond", "within", "too few", "undecided"
IDENTICAL, CONSTANT, NON_FINITE = "identical", "constant", "non-finite"


@dataclass(frozen=True)
class Difference:
    """Study A minus study B for one metric: the difference of means, its interval, the test and its p-value.

    ``test``/``p_value``: the permutation test that decides the verdict (exact while its arrangements can be
    enumerated, seeded Monte-Carlo above, ``p_low``/``p_high`` then the error bound of the exact p), ``why``
    says which and why in a sentence. ``ci``, ``t_test``, ``t_p_value``: the t-test's interval and p,
    information only (None where the runs are tied). ``n_a``/``n_b``: the runs of each study the test used
    (equal when paired: the pairs). ``min_p``: the smallest p the test could have given on these data (ties
    and zero differences counted); above ``alpha`` no outcome could reject, and the verdict is "too few
    seeds". ``p_adjusted`` (and its bound): Holm's p across the secondary metrics (None for the primary).
    ``non_finite``: ``(study, index, value)`` of each NaN/inf value (no test then); ``constant``: one value in
    every run of both studies (no information); ``identical``: equal in every pair up to rounding,
    ``bit_identical`` when exactly."""

    difference: Optional[float]
    ci: Optional[List[float]]
    p_value: Optional[float]
    test: str
    n: int
    n_a: int = 0
    n_b: int = 0
    min_p: Optional[float] = None
    p_adjusted: Optional[float] = None
    identical: bool = False
    why: str = ""
    t_test: Optional[str] = None
    t_p_value: Optional[float] = None
    p_low: Optional[float] = None
    p_high: Optional[float] = None
    draws: int = 0
    adjusted_low: Optional[float] = None
    adjusted_high: Optional[float] = None
    non_finite: Tuple[Tuple[str, int, float], ...] = ()
    constant: bool = False
    bit_identical: bool = False

    @property
    def decisive_p(self) -> Optional[float]:
        """The p the verdict reads: Holm's adjusted p where there is one, else the test's."""
        return self.p_adjusted if self.p_adjusted is not None else self.p_value

    def bounds(self) -> Tuple[Optional[float], Optional[float]]:
        """Where the exact decisive p lies: itself for an exact test, the Monte-Carlo error bound otherwise."""
        if self.p_adjusted is not None:
            return (self.adjusted_low if self.adjusted_low is not None else self.p_adjusted,
                    self.adjusted_high if self.adjusted_high is not None else self.p_adjusted)
        if self.p_value is None:
            return None, None
        return (self.p_low if self.p_low is not None else self.p_value,
                self.p_high if self.p_high is not None else self.p_value)

    def outcome(self, alpha: float = ALPHA) -> str:
        """What the data allow, never more: ``non-finite`` / ``constant`` (no test), ``identical`` (equal in
        every pair), ``too few`` (no outcome could reach ``alpha``), ``beyond`` (the exact p, or the whole
        Monte-Carlo error bound, below ``alpha``), ``within`` (at or above it), ``undecided`` (the error bound
        holds ``alpha`` after every draw)."""
        if self.non_finite:
            return NON_FINITE
        if self.constant:
            return CONSTANT
        if self.identical:
            return IDENTICAL
        if self.p_value is None or (self.min_p is not None and self.min_p > alpha):
            return TOO_FEW
        low, high = self.bounds()
        if high < alpha:
            return BEYOND
        if low >= alpha:
            return WITHIN
        return UNDECIDED

    def too_few(self, alpha: float = ALPHA) -> bool:
        """True when no outcome of the test could reject at ``alpha`` (fewer than 2 runs, or a smallest
        attainable p above ``alpha`` on these data); identical, constant or non-finite runs are not this."""
        return self.outcome(alpha) == TOO_FEW

    def beyond_noise(self, alpha: float = ALPHA) -> bool:
        """True when the test rejects "no difference" at ``alpha`` (and could have), Monte-Carlo error included."""
        return self.outcome(alpha) == BEYOND

    def testable(self) -> bool:
        """Whether a test ran (a p exists): not non-finite, constant or identical runs."""
        return self.outcome() in (BEYOND, WITHIN, TOO_FEW, UNDECIDED) and self.p_value is not None

    def with_adjusted(self, p: Optional[float], low: Optional[float] = None,
                      high: Optional[float] = None) -> "Difference":
        return dataclasses.replace(self, p_adjusted=p, adjusted_low=low, adjusted_high=high)

    def to_dict(self) -> Dict[str, Any]:
        return {"difference": self.difference, "ci": self.ci, "p_value": self.p_value, "p_adjusted": self.p_adjusted,
                "p_bound": None if not self.draws else [self.p_low, self.p_high], "draws": self.draws,
                "test": self.test, "why": self.why, "n": self.n, "n_a": self.n_a, "n_b": self.n_b,
                "min_p": self.min_p, "outcome": self.outcome(),
                "non_finite": [{"study": s, "index": i, "value": repr(v)} for s, i, v in self.non_finite],
                "t_test": {"test": self.t_test, "p_value": self.t_p_value, "ci": self.ci}}


def sizes(n_a: int, n_b: int, paired: bool) -> str:
    """The runs a test used, as the output names them: ``N pairs`` or ``N_A vs N_B runs``."""
    return f"{n_a} pairs" if paired else f"{n_a} vs {n_b} runs"


def fewest_for_exact(paired: bool, alpha: float = ALPHA) -> int:
    """The fewest pairs (paired) or runs per study (unpaired) with which the exact test can reach ``alpha``:
    6 pairs (2 / 2**6 = 0.031) or 4 vs 4 runs (2 / C(8, 4) = 0.029) at 5%, all of them distinct (ties and zero
    differences need more)."""
    n = 2
    while (sign_flip_min_p(n) if paired else permutation_min_p(n, n)) > alpha:
        n += 1
    return n


def arrangements(n_a: int, n_b: int, paired: bool) -> int:
    """How many sign patterns (paired) or relabellings of the pooled runs (unpaired) the exact test weighs."""
    return 2 ** n_a if paired else math.comb(n_a + n_b, n_a)


def _t_test(xa: np.ndarray, xb: np.ndarray, paired: bool, confidence: float) -> tuple:
    """The paired (``ttest_rel``) or Welch's (``ttest_ind(equal_var=False)``) t-test: its p and interval."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_rel(xa, xb) if paired else stats.ttest_ind(xa, xb, equal_var=False)
        interval = result.confidence_interval(confidence)
    return _clean(result.pvalue), [_clean(interval.low), _clean(interval.high)]


def _permutation(xa: np.ndarray, xb: np.ndarray, paired: bool, alpha: float = ALPHA) -> tuple:
    """The permutation test that decides: (its name, its p, the smallest p attainable on these data, why),
    exact while its arrangements can be enumerated (``EXACT_LIMIT``), seeded Monte-Carlo with its error bound
    above."""
    na, nb = xa.size, xb.size
    count = arrangements(na, nb, paired)
    kind = "sign-flip test" if paired else "permutation test"
    unit = "sign patterns" if paired else "relabellings of the pooled runs"
    where = sizes(na, nb, paired)
    d = xa - xb if paired else np.zeros(0)
    min_p = sign_flip_min_p_of(d) if paired else permutation_min_p_of(xa, xb)
    zeros = int(np.sum(d == 0))
    ties = "" if paired or min_p <= permutation_min_p(na, nb) * (1 + 1e-9) else \
        " on these data (tied values coarsen it: splits that swap equal values reach the same difference)"
    if zeros:
        ties = (f" on these data ({zeros} of the {na} differences are 0 and add no arrangement: "
                f"{na - zeros} non-zero)")
    if min_p > alpha:  # no test is needed to say that nothing can reject; the p is shown as information
        test = sign_flip_test(d, None) if paired else permutation_test(xa, xb, None)
        if test.draws:  # the exact p is never below the smallest attainable one
            test = PermutationP(max(test.p, min_p), max(test.low, min_p), max(test.high, min_p), test.draws)
        name = f"exact {kind}" if not test.draws else f"{kind} (Monte-Carlo)"
        need = (f"it can from {fewest_for_exact(paired, alpha)} pairs with a non-zero difference" if paired else
                f"it can from {fewest_for_exact(paired, alpha)} runs per study, values not all tied")
        return name, test, min_p, (f"{name}, {where}: the smallest attainable p is {min_p:.3g}"
                                   f"{ties} > {alpha:.3g}, so no outcome could be beyond seed noise; {need}")
    test = sign_flip_test(d, alpha) if paired else permutation_test(xa, xb, alpha)
    if test.draws:  # the exact p is never below the smallest attainable one
        test = PermutationP(max(test.p, min_p), max(test.low, min_p), max(test.high, min_p), test.draws)
    if not test.draws:
        name = f"exact {kind}"
        return name, test, min_p, (f"{name}, {where}: all {count:,} {unit} weighed (exact up to "
                                   f"{max(count, EXACT_LIMIT):,}; the smallest attainable p is "
                                   f"{min_p:.3g}{ties})")
    name = f"{kind} (Monte-Carlo)"
    bound = f"[{test.low:.3g}, {test.high:.3g}]"
    rule = ("its error bound is below alpha" if test.high < alpha else "its error bound is at or above alpha"
            if test.low >= alpha else f"its error bound holds alpha ({alpha:.3g}) even after {test.draws:,} draws: "
            "not proven either way")
    return name, test, min_p, (f"{name}, {where}: {count:,} {unit} are more than the {EXACT_LIMIT:,} enumerated "
                               f"exactly, so {test.draws:,} seeded random ones: the exact p lies in {bound} "
                               f"(Clopper-Pearson, {1 - ERROR_LEVEL:.4%} over all stages), {rule}; the smallest attainable p is "
                               f"{min_p:.3g}{ties}")


def compare(a: Sequence[float], b: Sequence[float], paired: bool, confidence: float = CONFIDENCE,
            alpha: float = ALPHA) -> Difference:
    """A minus B, paired (pairs in order) or not: the verdict's test, its p and why, and the t-test beside it.

    A permutation test decides at every size, never a t-test alone: the sign-flip test (paired) or the
    permutation test of the pooled runs (unpaired), exact up to ``EXACT_LIMIT`` arrangements (16 pairs, 9 vs
    9 runs), seeded Monte-Carlo above, where a verdict needs the whole error bound on one side of ``alpha``.
    ``min_p``, the smallest p attainable on these data (zero differences and tied values counted), above
    ``alpha`` means "too few seeds". A NaN/inf value anywhere is no test (``non_finite``: dropping it would
    compare other runs than the study's); one value in every run of both studies is ``constant`` (the metric
    carries no information); runs equal in every pair (difference 0 everywhere) are ``identical``.
    """
    raw_a = np.asarray([float(v) for v in a], dtype=np.float64)
    raw_b = np.asarray([float(v) for v in b], dtype=np.float64)
    bad = tuple([("A", i, float(v)) for i, v in enumerate(raw_a) if not math.isfinite(v)]
                + [("B", i, float(v)) for i, v in enumerate(raw_b) if not math.isfinite(v)])
    if paired:
        keep = np.isfinite(raw_a[:len(raw_b)]) & np.isfinite(raw_b[:len(raw_a)])
        xa, xb = raw_a[:len(raw_b)][keep], raw_b[:len(raw_a)][keep]
        n = na = nb = int(xa.size)
    else:
        xa, xb = raw_a[np.isfinite(raw_a)], raw_b[np.isfinite(raw_b)]
        na, nb = int(xa.size), int(xb.size)
        n = min(na, nb)
    t_name = "paired t-test" if paired else "Welch's t-test"
    diff = float(np.mean(xa) - np.mean(xb)) if na and nb else None
    if bad:
        named = ", ".join(f"{s} #{i + 1}: {v!r}" for s, i, v in bad)
        return Difference(diff, None, None, "no test (non-finite values)", n, na, nb, None, non_finite=bad,
                          why=f"non-finite values ({named}): a run that diverged or wrote no value is not left out "
                              "(the others would be a different study), so nothing is tested")
    if n < 2:
        return Difference(diff, None, None, t_name, n, na, nb, 1.0,
                          why=f"{sizes(na, nb, paired)}: a test needs at least two "
                              f"{'pairs' if paired else 'runs in each study'}")
    # equal up to the rounding of the values (0.1 - 0.4 and 0.2 - 0.5 differ in their last bit): a t-test
    # would read that residue as a spread near 0 and give any p it likes
    tie = TIE * max(float(np.max(np.abs(xa))), float(np.max(np.abs(xb))))
    pooled = np.concatenate([xa, xb])
    if np.ptp(pooled) <= tie:
        return Difference(diff, None, None, "no test (one value in every run)", n, na, nb, None, constant=True,
                          bit_identical=bool(np.all(pooled == pooled[0])),
                          why=f"{sizes(na, nb, paired)}, one value in every run of both studies ({pooled[0]!r}): "
                              "the metric carries no information, so nothing can be told from it")
    if paired and np.all(np.abs(xa - xb) <= tie):
        exact = bool(np.all(xa == xb))
        return Difference(diff, [diff, diff], 1.0, "identical in every pair", n, na, nb, None, identical=True,
                          bit_identical=exact,
                          why=f"{sizes(na, nb, paired)} equal in every pair{'' if exact else ' up to rounding'}: "
                              "nothing to test")
    if paired:
        d = xa - xb
        xa = xb + np.where(np.abs(d) <= tie, 0.0, d)  # rounding residue is a zero difference
    else:
        both = snap(pooled, tie)
        xa, xb = both[:na], both[na:]
    no_spread = float(np.ptp(xa - xb)) <= tie if paired else float(max(np.ptp(xa), np.ptp(xb))) <= tie
    t_p, ci = (None, None) if no_spread else _t_test(xa, xb, paired, confidence)
    name, test, min_p, why = _permutation(xa, xb, paired, alpha)
    why += (f"; {t_name}: p = {t_p:.3g}, with its interval, information only" if t_p is not None else
            f"; no {t_name} (the runs have no spread)")
    return Difference(diff, ci, test.p, name, n, na, nb, min_p, why=why, t_test=t_name, t_p_value=t_p,
                      p_low=test.low, p_high=test.high, draws=test.draws)


def holm(p_values: Sequence[Optional[float]]) -> List[Optional[float]]:
    """Holm's step-down adjusted p-values (family-wise error rate) of the p-values given; None stays None.
    Monotone in every p, so the adjusted bounds of Monte-Carlo p's are ``holm`` of their bounds."""
    indexed = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(indexed)
    out: List[Optional[float]] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def power(std: float, difference: float, n: int, alpha: float = ALPHA, paired: bool = False) -> float:
    """Power of the two-sided test at ``alpha`` to find ``difference``, from the test's own distribution:

    paired, ``n`` pairs whose differences spread with ``std``: the one-sample t-test's exact power, a
    noncentral t (``df = n - 1``). Unpaired, ``n`` runs per study each spreading with ``std``: Welch's test,
    whose degrees of freedom depend on the two sample variances; its power is the mean over those variances
    (two scaled chi-squares, Gauss-Legendre in probability space) of the normal numerator's chance to pass the
    critical value they give -- exact up to the quadrature (a few 1e-4), where the noncentral t with the
    pooled ``2n - 2`` degrees of freedom overstates it (0.78 for 0.68 at n = 3, d = 3s).
    """
    if n < 2 or not std or std <= 0:
        return float("nan")
    if paired:
        df, ncp = n - 1, difference / (std / math.sqrt(n))
        crit = stats.t.ppf(1 - alpha / 2, df)
        return float(stats.nct.sf(crit, df, ncp) + stats.nct.cdf(-crit, df, ncp))
    nodes, weights = _quadrature()
    q = stats.chi2.ppf(nodes, n - 1) / (n - 1)  # each study's s**2 / std**2
    s1, s2 = q[:, None], q[None, :]
    scale = np.sqrt((s1 + s2) / 2)  # the estimated standard error over the true one
    df = (s1 + s2) ** 2 * (n - 1) / (s1 ** 2 + s2 ** 2)  # Welch-Satterthwaite
    crit = stats.t.ppf(1 - alpha / 2, df) * scale
    delta = abs(difference) / (std * math.sqrt(2.0 / n))
    reject = stats.norm.sf(crit - delta) + stats.norm.cdf(-crit - delta)
    return float(np.sum(weights[:, None] * weights[None, :] * reject))


@functools.lru_cache(maxsize=1)
def _quadrature(k: int = 96) -> tuple:
    """Gauss-Legendre nodes and weights on (0, 1)."""
    x, w = np.polynomial.legendre.leggauss(k)
    return (x + 1) / 2, w / 2


def seeds_for(std: float, difference: float, power_wanted: float = 0.8, alpha: float = ALPHA,
              paired: bool = False, limit: int = 100_000) -> Optional[int]:
    """The fewest seeds per study (pairs when ``paired``; then ``std`` is the spread of the per-seed
    differences) with which the two-sided t-test finds ``difference`` with ``power_wanted``: exact power
    from the noncentral t distribution, not the normal approximation (which promises 0.8 where Welch's
    test at n = 3, d = 3s has about 0.7). Never fewer than the exact test that decides at small n needs
    to reject at all (:func:`fewest_for_exact`: 6 pairs, 4 runs per study)."""
    if not difference or std is None or not math.isfinite(std) or not math.isfinite(difference) or std <= 0:
        return None
    if power(std, difference, limit, alpha, paired) < power_wanted:
        return None
    low = high = fewest_for_exact(paired, alpha)
    while power(std, difference, high, alpha, paired) < power_wanted:
        low, high = high, high * 2
    while low < high:  # power rises with n
        mid = (low + high) // 2
        if power(std, difference, mid, alpha, paired) >= power_wanted:
            high = mid
        else:
            low = mid + 1
    return high


__all__ = ["ALPHA", "BEYOND", "CONFIDENCE", "CONSTANT", "ERROR_LEVEL", "EXACT_LIMIT", "IDENTICAL", "MONTE_CARLO",
           "MONTE_CARLO_MORE", "NON_FINITE", "SCHEDULE", "TOO_FEW", "UNDECIDED", "WITHIN", "Difference", "PermutationP", "Summary",
           "arrangements", "compare", "error_bound", "fewest_for_exact", "holm", "permutation_min_p",
           "permutation_min_p_of", "permutation_p", "permutation_test", "power", "resolution", "seeds_for",
           "sign_flip_min_p", "sign_flip_min_p_of", "sign_flip_p", "sign_flip_test", "sizes", "snap", "summarize",
           "tied", "unresolved_variance_bound"]
