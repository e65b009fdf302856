"""Two seed studies compared: is the difference between two configurations more than seed noise?

For each metric: the difference of the studies' means (A minus B) with its confidence interval and
a t-test's p-value (paired when both studies ran the same seeds, Welch's otherwise), and a verdict
from the metric's direction (losses lower is better). Differences between the studies' set-ups
(another dataset, mode, package, GPU) are named from their first runs' fingerprint headers, as
``yolo-det diff`` names causes, so that an effect is not credited to the change the user meant
when something else changed too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from . import statistics
from ..proof.causes import Cause, header_causes
from ..record.log import FingerprintError, LogReader
from .study import Study, StudyError, higher_is_better

DEFAULT_METRIC = "fitness"
BETTER_A, BETTER_B, WITHIN = "A better beyond seed noise", "B better beyond seed noise", "within seed noise"
#: Set-up differences expected between two studies (their seeds, their output folders are compared elsewhere).
_EXPECTED = ("seed", "seeds")


@dataclass
class MetricComparison:
    """One metric: both studies' summaries, A minus B, the verdict."""

    metric: str
    a: statistics.Summary
    b: statistics.Summary
    difference: statistics.Difference
    verdict: str

    def to_dict(self) -> Dict[str, Any]:
        return {"metric": self.metric, "a": self.a.to_dict(), "b": self.b.to_dict(), **self.difference.to_dict(),
                "higher_is_better": higher_is_better(self.metric), "verdict": self.verdict}


@dataclass
class StudyComparison:
    """The metric asked for, every other metric as information, and the set-up differences."""

    metric: MetricComparison
    others: List[MetricComparison]
    paired: bool
    setup: List[Cause] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    @property
    def beyond_noise(self) -> bool:
        return self.metric.verdict != WITHIN

    def to_dict(self) -> Dict[str, Any]:
        return {"metric": self.metric.metric, "verdict": self.metric.verdict, "paired": self.paired,
                "difference": self.metric.difference.difference, "ci": self.metric.difference.ci,
                "p_value": self.metric.difference.p_value, "test": self.metric.difference.test,
                "confidence": statistics.CONFIDENCE, "result": self.metric.to_dict(),
                "others": [m.to_dict() for m in self.others],
                "setup_differences": [c.to_dict() for c in self.setup], "notes": list(self.notes)}


def _verdict(metric: str, difference: statistics.Difference) -> str:
    direction = higher_is_better(metric)
    if not difference.beyond_noise() or difference.difference is None or direction is None:
        return WITHIN
    a_higher = difference.difference > 0
    return BETTER_A if a_higher == direction else BETTER_B


def compare_metric(a: Study, b: Study, metric: str, paired: bool) -> MetricComparison:
    """One metric of two studies (``best:NAME`` for the best epoch's value)."""
    va, vb = a.values(metric), b.values(metric)
    difference = statistics.compare(va, vb, paired)
    return MetricComparison(metric, statistics.summarize(va), statistics.summarize(vb), difference,
                            _verdict(metric, difference))


def _header(study: Study) -> Optional[Dict[str, Any]]:
    if not study.runs:
        return None
    try:
        with LogReader(study.runs[0].log) as reader:
            return dict(reader.header)
    except (FingerprintError, OSError):
        return None


def setup_differences(a: Study, b: Study) -> List[Cause]:
    """What differed between the studies' set-ups besides their seeds: their first runs' headers compared."""
    ha, hb = _header(a), _header(b)
    if ha is None or hb is None:
        return []
    return [c for c in header_causes(ha, hb) if c.what not in _EXPECTED]


def compare_studies(a: Study, b: Study, metric: str = DEFAULT_METRIC) -> StudyComparison:
    """A against B on ``metric`` (the verdict) and on every metric both have (information)."""
    for study, name in ((a, "A"), (b, "B")):
        if len(study.runs) < 2:
            raise StudyError(f"study {name} ({study.path}) has {len(study.runs)} finished run(s); a comparison "
                             "needs at least two per study (continue it with its yolo-det seeds command)")
    names = [n for n in a.metric_names() if n in b.metric_names()]
    names += [f"best:{n}" for n in dict.fromkeys(k for r in a.runs for k in r.best) if any(n in r.best for r in b.runs)]
    if metric not in names:
        raise StudyError(f"metric {metric!r} is not in both studies; they have: {', '.join(names) or 'none'}")
    paired = [r.seed for r in a.runs] == [r.seed for r in b.runs]
    notes = []
    if not paired:
        notes.append("the studies ran different seeds: compared unpaired (Welch's t-test)")
    if a.settings.get("vary") != b.settings.get("vary"):
        notes.append(f"the studies vary different sources: A {a.settings.get('vary')}, B {b.settings.get('vary')}")
    for study, name in ((a, "A"), (b, "B")):
        modes = {r.mode for r in study.runs}
        if modes - {"strict"}:
            notes.append(f"study {name} ran under {', '.join(sorted(str(m) for m in modes))}: outside strict the "
                         "spread also holds kernel noise")
        if not study.complete:
            notes.append(f"study {name} is incomplete: {len(study.runs)} of {len(study.seeds)} seeds")
    main = compare_metric(a, b, metric, paired)
    others = [compare_metric(a, b, n, paired) for n in names if n != metric]
    return StudyComparison(main, others, paired, setup_differences(a, b), notes)


__all__ = ["BETTER_A", "BETTER_B", "DEFAULT_METRIC", "MetricComparison", "StudyComparison", "WITHIN",
           "compare_metric", "compare_studies", "setup_differences"]
