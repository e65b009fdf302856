"""Each source's share of a metric's variance (init, order, augment), from one study per ``--vary`` role.

Shares come with intervals that hold while all three chi-square variance intervals hold (Bonferroni); a source
whose runs are all equal is not resolved at the metric's resolution and gets a share interval from 0, no share.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from scipy import stats

from ..core import roles
from . import statistics
from .results import Study, StudyError

def decompose(studies: Mapping[str, Study], metric: str, confidence: float = statistics.CONFIDENCE) -> Dict[str, Any]:
    """Each source's share of a metric's variance, from one study per ``--vary`` role (and ``all``).

    A role's variance is its study's sample variance, with its chi-square interval; its share is that
    variance over the sum of the three (the sources as if independent), with an interval that holds while
    all three variance intervals hold (each at ``1 - (1 - confidence) / 3``, Bonferroni): the share's lowest
    value with its own variance at its low end and the others at their high ends, and the reverse. ``all``
    (every source at once) is reported beside them: a total well above the sum says the sources interact.
    A source whose runs are all equal is not resolved at the metric's ``resolution`` (estimated from every
    study's values): not a variance of 0 but one below what that resolution can show, so its variance
    interval runs from 0 to the chi-square bound of the largest spread hidden within one step, and it has no
    share, only a share interval from 0. A metric no study has is a :class:`StudyError`; a source without a
    variance (fewer than two runs with the metric) is named in ``missing`` and no shares are given, rather
    than shares of the others alone.
    """
    known = {n for study in studies.values() for n in study.metric_names()}
    known |= {f"best:{n}" for study in studies.values() for r in study.runs for n in r.best}
    if metric not in known:
        raise StudyError(f"metric {metric!r} is not in the studies; they have: {', '.join(sorted(known)) or 'none'}")
    each = 1.0 - (1.0 - confidence) / len(roles.ROLES)
    step = statistics.resolution([v for study in studies.values() for v in study.values(metric)])
    rows = {vary: _source_row(studies[vary].values(metric), each, step) for vary in roles.VARY if vary in studies}
    missing = [r for r in roles.ROLES if r not in rows or rows[r]["variance"] is None]
    total = None if missing else sum(rows[r]["variance"] for r in roles.ROLES)
    highs = [None if total is None else rows[r]["variance_ci"][1] for r in roles.ROLES]
    if None not in highs and any(h > 0 for h in highs):  # None: all values 0, no resolution to bound them
        for role in roles.ROLES:
            others = [r for r in roles.ROLES if r != role]
            low, high = rows[role]["variance_ci"]
            rows[role]["share"] = rows[role]["variance"] / total if rows[role]["resolved"] and total > 0 else None
            rows[role]["share_ci"] = [_ratio(low, low + sum(rows[o]["variance_ci"][1] for o in others)),
                                      _ratio(high, high + sum(rows[o]["variance_ci"][0] for o in others))]
    return {"metric": metric, "sources": rows, "sum_of_sources": total, "missing": missing,
            "confidence": confidence, "resolution": step,
            "unresolved": [r for r in roles.VARY if r in rows and rows[r]["resolved"] is False]}


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def _source_row(values: List[float], each: float, step: Optional[float]) -> Dict[str, Any]:
    """One source's runs, standard deviation and variance with its chi-square interval at ``each``; runs all
    equal are ``resolved`` False, their interval from 0 to the bound of a spread hidden within ``step``."""
    summary = statistics.summarize(values)
    row = {"n": summary.n, "std": summary.std, "variance": None, "variance_ci": None, "resolved": summary.resolved,
           "share": None, "share_ci": None}
    if summary.std is None:
        return row
    df = summary.n - 1
    row["variance"] = summary.std ** 2
    if summary.resolved:
        row["variance_ci"] = [row["variance"] * df / stats.chi2.ppf(1 - (1 - each) / 2, df),
                              row["variance"] * df / stats.chi2.ppf((1 - each) / 2, df)]
    else:
        hidden = statistics.unresolved_variance_bound(step, summary.n)
        row["variance_ci"] = [0.0, None if hidden is None else hidden * df / stats.chi2.ppf((1 - each) / 2, df)]
    return row


__all__ = ["decompose"]
