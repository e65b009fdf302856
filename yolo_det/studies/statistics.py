"""The statistics of seed studies (scipy): a metric's spread over seeds, and two studies compared.

Under strict every run is a function of its seed, so the spread over seeds is the variance of the
method itself. The interval of a mean is Student's t interval; two studies are compared with a
paired t-test when both used the same seeds (the runs of one seed share initialisation, order and
augmentation, so their difference cancels what the seeds do alike) and Welch's t-test otherwise.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 1.0 - CONFIDENCE


def _values(values: Sequence[float]) -> np.ndarray:
    array = np.asarray([float(v) for v in values], dtype=np.float64)
    return array[np.isfinite(array)]


def _clean(value: float) -> Optional[float]:
    return float(value) if value is not None and math.isfinite(float(value)) else None


@dataclass(frozen=True)
class Summary:
    """One metric over a study's seeds: count, mean, sample standard deviation, min, max and the
    ``CONFIDENCE`` t interval of the mean (None with fewer than two finite values)."""

    n: int
    mean: Optional[float]
    std: Optional[float]
    min: Optional[float]
    max: Optional[float]
    ci: Optional[List[float]]

    def to_dict(self) -> Dict[str, Any]:
        return {"n": self.n, "mean": self.mean, "std": self.std, "min": self.min, "max": self.max, "ci": self.ci}


def summarize(values: Sequence[float], confidence: float = CONFIDENCE) -> Summary:
    """Mean, standard deviation (ddof 1), range and the t interval of the mean of ``values`` (NaNs dropped)."""
    x = _values(values)
    n = int(x.size)
    if n == 0:
        return Summary(0, None, None, None, None, None)
    equal = bool(np.all(x == x[0]))
    mean = float(x[0]) if equal else float(np.mean(x))  # equal values: no rounding residue
    if n < 2:
        return Summary(n, mean, None, float(x[0]), float(x[0]), None)
    std = 0.0 if equal else float(np.std(x, ddof=1))
    if std == 0.0:
        ci = [mean, mean]
    else:
        low, high = stats.t.interval(confidence, df=n - 1, loc=mean, scale=std / math.sqrt(n))
        ci = [float(low), float(high)]
    return Summary(n, mean, std, float(np.min(x)), float(np.max(x)), ci)


@dataclass(frozen=True)
class Difference:
    """Study A minus study B for one metric: the difference of means, its interval, the test and its p-value."""

    difference: Optional[float]
    ci: Optional[List[float]]
    p_value: Optional[float]
    test: str
    n: int

    def beyond_noise(self, alpha: float = ALPHA) -> bool:
        """True when the test rejects "no difference" at ``alpha`` (the interval then excludes 0)."""
        return self.p_value is not None and self.p_value < alpha

    def to_dict(self) -> Dict[str, Any]:
        return {"difference": self.difference, "ci": self.ci, "p_value": self.p_value, "test": self.test, "n": self.n}


def compare(a: Sequence[float], b: Sequence[float], paired: bool, confidence: float = CONFIDENCE) -> Difference:
    """A minus B: paired t-test (``ttest_rel``, pairs in order) or Welch's (``ttest_ind(equal_var=False)``).

    Without spread (every run of both studies gave the same value, or every pair the same difference)
    a t statistic is undefined: equal values are within noise (p = 1), different ones beyond (p = 0).
    """
    if paired:
        pairs = [(float(x), float(y)) for x, y in zip(a, b) if math.isfinite(float(x)) and math.isfinite(float(y))]
        xa, xb = np.asarray([p[0] for p in pairs]), np.asarray([p[1] for p in pairs])
        n = len(pairs)
    else:
        xa, xb = _values(a), _values(b)
        n = min(xa.size, xb.size)
    test = "paired t-test" if paired else "Welch's t-test"
    if n < 2:
        return Difference(None if n == 0 else float(np.mean(xa) - np.mean(xb)), None, None, test, n)
    diff = float(np.mean(xa) - np.mean(xb))
    constant = np.all(xa - xb == (xa - xb)[0]) if paired else (np.all(xa == xa[0]) and np.all(xb == xb[0]))
    if constant:
        return Difference(diff, [diff, diff], 1.0 if diff == 0.0 else 0.0, test, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_rel(xa, xb) if paired else stats.ttest_ind(xa, xb, equal_var=False)
        interval = result.confidence_interval(confidence)
    return Difference(diff, [_clean(interval.low), _clean(interval.high)], _clean(result.pvalue), test, n)


def seeds_for(std: float, difference: float, power: float = 0.8, alpha: float = ALPHA) -> Optional[int]:
    """Seeds per study a two-sided Welch comparison needs to detect ``difference`` with ``power`` when the
    runs spread with ``std`` (the normal approximation, ``2 (z_{1-a/2} + z_power)^2 s^2 / d^2``, plus one)."""
    if not difference or std is None or not math.isfinite(std) or not math.isfinite(difference):
        return None
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return int(math.ceil(2 * (z * std / difference) ** 2)) + 1


__all__ = ["ALPHA", "CONFIDENCE", "Difference", "Summary", "compare", "seeds_for", "summarize"]
