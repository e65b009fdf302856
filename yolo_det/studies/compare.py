"""Two seed studies compared: is the difference between two configurations more than seed noise?

For each metric: the difference of the studies' means (A minus B), the p-value of the test that decides
(:func:`statistics.compare`: a permutation test, exact at small n, seeded Monte-Carlo with its error bound
above; never a t-test alone; no test on NaN/inf values or a metric constant in every run; paired on the seeds both studies ran
when those hold at least half the runs, unpaired on all runs otherwise) with the t-test's interval
beside it, and a verdict from the metric's direction (losses lower is better). Differences between the studies' set-ups
(another dataset, mode, package, GPU) are named from their first runs' fingerprint headers, as
``yolo-det diff`` names causes, so that an effect is not credited to the change the user meant
when something else changed too.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import statistics
from ..core import verdicts
from ..proof.causes import Cause, header_causes
from ..record.log import FingerprintError, LogReader
from .study import Study, StudyError, StudyRun, hardware_of, higher_is_better

DEFAULT_METRIC = "fitness"
#: The sentences a metric's verdict is said in (``statement``); its word is ``verdict`` (yolo_det.core.verdicts).
BETTER_A, BETTER_B, WITHIN = "A better beyond seed noise", "B better beyond seed noise", "within seed noise"
#: No outcome of the test could have rejected at these sizes (2 pairs; tied runs of 3 pairs): the vocabulary's word.
TOO_FEW = verdicts.TOO_FEW
#: ... and its sentence.
TOO_FEW_STATEMENT = "too few seeds for a verdict"
#: A difference beyond noise on a metric without a direction (a learning rate): a difference, not a winner.
DIFFERENT = "different beyond seed noise (no better direction)"
#: A NaN/inf (or missing) value in a run of either study: the other runs are not the study, so no verdict.
NON_FINITE = "not proven: non-finite values"
#: One value in every run of both studies (fitness 0 everywhere): the metric cannot tell anything apart.
NO_INFORMATION = "not proven: the metric is constant in every run and carries no information"
#: Above the exact range, the Monte-Carlo p's error bound still holds alpha after every draw.
UNDECIDED = "not proven: the Monte-Carlo p cannot be told apart from alpha"
#: Every metric equal seed by seed, bit for bit: the change did nothing (or was never applied).
NO_EFFECT = "no effect: the studies are bit-identical seed by seed (was the setting applied?)"
#: This metric equal seed by seed, bit for bit, while another metric differs.
NO_EFFECT_METRIC = "no effect: bit-identical seed by seed"
#: Equal seed by seed up to the last bit's rounding.
NO_EFFECT_ROUNDING = "no effect: equal seed by seed up to rounding"
#: Each statement's word in every command's JSON (the sentence stays, as ``statement``).
_WORDS = {BETTER_A: verdicts.BEYOND_NOISE, BETTER_B: verdicts.BEYOND_NOISE, DIFFERENT: verdicts.BEYOND_NOISE,
          WITHIN: verdicts.WITHIN_NOISE, TOO_FEW_STATEMENT: verdicts.TOO_FEW, TOO_FEW: verdicts.TOO_FEW,
          NON_FINITE: verdicts.NOT_PROVEN, NO_INFORMATION: verdicts.NOT_PROVEN, UNDECIDED: verdicts.NOT_PROVEN, NO_EFFECT: verdicts.IDENTICAL,
          NO_EFFECT_METRIC: verdicts.IDENTICAL, NO_EFFECT_ROUNDING: verdicts.WITHIN_NOISE}
#: Set-up differences expected between two studies (their seeds, their output folders are compared elsewhere).
_EXPECTED = ("seed", "seeds")


def word_of(statement: str) -> str:
    """The vocabulary's word for a metric's statement (a sentence of :data:`_WORDS`, or a word itself); a statement
    without one is a ValueError, never a guess: a new sentence gets its word in ``_WORDS``."""
    if statement in _WORDS:
        return _WORDS[statement]
    try:
        return verdicts.normalize(statement)
    except ValueError:
        raise ValueError(f"seeds compare: the statement {statement!r} has no verdict word; add it to "
                         "yolo_det.studies.compare._WORDS") from None


@dataclass
class MetricComparison(verdicts.Judged):
    """One metric: both studies' summaries, A minus B, the verdict (``verdict`` the word, ``statement`` the
    sentence naming the better study); ``withheld``: why no verdict is given (a tainted seed), then ``not proven``."""

    metric: str
    a: statistics.Summary
    b: statistics.Summary
    difference: statistics.Difference
    statement: str
    withheld: Optional[str] = None

    @property
    def verdict(self) -> str:
        """The verdict in every command's JSON vocabulary (yolo_det.core.verdicts): beyond / within seed noise, too
        few seeds, not proven where withheld; which study is better is ``better``, the sentence ``statement``."""
        return verdicts.NOT_PROVEN if self.withheld else word_of(self.statement)

    @property
    def word(self) -> str:
        """The same as :attr:`verdict` (its earlier name)."""
        return self.verdict

    @property
    def said(self) -> str:
        """The sentence to show: the statement, or why no verdict is given."""
        return f"not proven: {self.withheld}" if self.withheld else self.statement

    @property
    def better(self) -> Optional[str]:
        """``"A"`` or ``"B"`` beyond seed noise on a metric with a direction, else None (also where withheld)."""
        return None if self.withheld else {BETTER_A: "A", BETTER_B: "B"}.get(self.statement)

    def to_json(self) -> Dict[str, Any]:
        return self.stamped({"metric": self.metric, "a": self.a.to_dict(), "b": self.b.to_dict(),
                             **self.difference.to_dict(), "higher_is_better": higher_is_better(self.metric),
                             "better": self.better, "statement": self.said})

    to_dict = to_json


def _taint_reason(tainted: Sequence[Mapping[str, Any]]) -> str:
    """Why a comparison with tainted seeds gives no verdict, naming each seed and what tainted it."""
    seeds = "; ".join(f"study {t.get('study')} run {t.get('run')} seed {t.get('seed')}: "
                      f"{', '.join(str(w) for w in t.get('why') or []) or 'tainted'}" for t in tainted)
    return (f"{len(tainted)} seed(s) did not run as their study says ({seeds}), so the spreads are not the "
            "studies' and no verdict is given")


@dataclass
class StudyComparison(verdicts.Judged):
    """The metric asked for, every other metric as information, and the set-up differences."""

    metric: MetricComparison
    others: List[MetricComparison]
    paired: bool
    setup: List[Cause] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    setup_checked: bool = True
    #: seeds that did not run as their study says (``study`` A or B, ``run``, ``seed``, ``why``): no verdict then
    tainted: List[Dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.tainted:  # no metric carries a winner beside the withheld verdict
            why = _taint_reason(self.tainted)
            self.metric = dataclasses.replace(self.metric, withheld=why)
            self.others = [dataclasses.replace(m, withheld=why) for m in self.others]

    @property
    def verdict(self) -> str:
        """The metric's word: ``not proven`` where a seed is tainted (its spread is not its study's)."""
        return self.metric.verdict

    @property
    def word(self) -> str:
        """The same as :attr:`verdict` (its earlier name)."""
        return self.verdict

    @property
    def beyond_noise(self) -> bool:
        return self.verdict == verdicts.BEYOND_NOISE

    @property
    def not_proven(self) -> bool:
        """No verdict could be reached on the metric asked for (too few seeds for any test to reject, NaN/inf
        values, a constant metric, a Monte-Carlo p too close to alpha, or a seed that resumed inexactly or ran
        under another mode): exit 3."""
        return self.exit_code == verdicts.exit_code(verdicts.NOT_PROVEN)

    def to_json(self) -> Dict[str, Any]:
        return self.stamped({"metric": self.metric.metric, "better": self.metric.better,
                             "statement": self.metric.said, "paired": self.paired,
                             "difference": self.metric.difference.difference, "ci": self.metric.difference.ci,
                             "p_value": self.metric.difference.p_value, "test": self.metric.difference.test,
                             "why": self.metric.difference.why,
                             "confidence": statistics.CONFIDENCE, "result": self.metric.to_json(),
                             "others": [m.to_json() for m in self.others],
                             "n_a": self.metric.difference.n_a, "n_b": self.metric.difference.n_b,
                             "setup_checked": self.setup_checked,
                             "setup_differences": [c.to_dict() for c in self.setup], "notes": list(self.notes),
                             "tainted": list(self.tainted)})

    to_dict = to_json


def _verdict(metric: str, difference: statistics.Difference) -> str:
    """The sentence for what the test found (:meth:`statistics.Difference.outcome`), never more than it found."""
    outcome = difference.outcome()
    plain = {statistics.NON_FINITE: NON_FINITE, statistics.CONSTANT: NO_INFORMATION,
             statistics.TOO_FEW: TOO_FEW_STATEMENT, statistics.UNDECIDED: UNDECIDED, statistics.WITHIN: WITHIN}
    if outcome in plain:
        return plain[outcome]
    if outcome == statistics.IDENTICAL:
        return NO_EFFECT_METRIC if difference.bit_identical else NO_EFFECT_ROUNDING
    if difference.difference is None:
        return WITHIN
    direction = higher_is_better(metric)
    if direction is None:
        return DIFFERENT
    a_higher = difference.difference > 0
    return BETTER_A if a_higher == direction else BETTER_B


def common_seeds(a: Study, b: Study) -> List[int]:
    """The seeds both studies ran, in A's order (a 5-seed and a 10-seed study of one base seed share 5)."""
    seeds_b = {r.seed for r in b.runs}
    return [r.seed for r in a.runs if r.seed in seeds_b]


def pairs_keep_most_runs(common: int, n_a: int, n_b: int) -> bool:
    """Whether to pair on the ``common`` seeds: at least two, holding at least half of the ``n_a + n_b`` runs
    (two 10-seed studies sharing 2 seeds would test 4 runs and leave 16 out: they are compared unpaired)."""
    return common >= 2 and 4 * common >= n_a + n_b


def _pairing_note(common: Sequence[int], n_a: int, n_b: int, paired: bool) -> Optional[str]:
    """What the test was run on and why, where that is not every run paired."""
    total = n_a + n_b
    if paired:
        if len(common) < max(n_a, n_b):
            return (f"paired on the {len(common)} seeds both studies ran (A has {n_a} runs, B {n_b}); the others "
                    f"are left out of the test")
        return None
    if len(common) < 2:
        return f"the studies ran different seeds: compared unpaired on all {total} runs"
    return (f"the studies share only {len(common)} seeds ({', '.join(str(s) for s in common)}): pairing on them "
            f"would leave {total - 2 * len(common)} of {total} runs out of the test, so they are compared unpaired "
            f"on all {total} runs (pairing is used where the common seeds hold at least half the runs)")


def _by_seed(study: Study, metric: str, seeds: Sequence[int]) -> List[float]:
    values = dict(zip((r.seed for r in study.runs), study.values(metric)))
    return [values[s] for s in seeds]


def _non_finite(study: Study, name: str, metric: str) -> List[Tuple[str, int, float]]:
    """``(study, run, value)`` of each run of ``study`` whose ``metric`` is NaN, infinite or missing."""
    return [(name, run.index, value) for run, value in zip(study.runs, study.values(metric))
            if not math.isfinite(float(value))]


def non_finite_runs(a: Study, b: Study, metric: str) -> List[str]:
    """Each run of either study whose ``metric`` is not a finite number, named: ``study A run 3 (seed S): nan``
    (``missing`` where the run has no such metric)."""
    out = []
    for study, name in ((a, "A"), (b, "B")):
        runs = {run.index: run for run in study.runs}
        for _, index, value in _non_finite(study, name, metric):
            run = runs[index]
            table, key = (run.best, metric[5:]) if metric.startswith("best:") else (run.metrics, metric)
            what = repr(float(value)) if key in table else "missing"
            out.append(f"study {name} run {index} (seed {run.seed}): {what}")
    return out


def compare_metric(a: Study, b: Study, metric: str, paired: bool) -> MetricComparison:
    """One metric of two studies (``best:NAME`` for the best epoch's value); ``paired``: on their common seeds.
    A NaN/inf or missing value in any run of either study (also one outside the pairs) is no verdict: it is
    named, never dropped."""
    va, vb = a.values(metric), b.values(metric)
    if paired:
        seeds = common_seeds(a, b)
        difference = statistics.compare(_by_seed(a, metric, seeds), _by_seed(b, metric, seeds), True)
    else:
        difference = statistics.compare(va, vb, False)
    bad = _non_finite(a, "A", metric) + _non_finite(b, "B", metric)
    if bad:
        named = non_finite_runs(a, b, metric)
        difference = dataclasses.replace(
            difference, p_value=None, ci=None, identical=False, constant=False, non_finite=tuple(bad),
            test="no test (non-finite values)",
            why=(f"{len(named)} run(s) without a finite {metric}: {'; '.join(named)} -- a diverged or unfinished "
                 "seed is not left out (the other seeds would be another study, chosen by the outcome), so no "
                 "verdict; find why those seeds gave no number, or compare another metric"))
    return MetricComparison(metric, statistics.summarize(va), statistics.summarize(vb), difference,
                            _verdict(metric, difference))


def _holm(others: List[MetricComparison]) -> List[MetricComparison]:
    """The secondary metrics with Holm's adjusted p-values and the verdicts those give (family-wise 5%)."""
    tested = [m.difference.testable() for m in others]  # the family: every metric a test ran on
    adjusted = statistics.holm([m.difference.p_value if t else None for m, t in zip(others, tested)])
    low = statistics.holm([m.difference.bounds()[0] if t else None for m, t in zip(others, tested)])
    high = statistics.holm([m.difference.bounds()[1] if t else None for m, t in zip(others, tested)])
    out = []
    for m, p, lo, hi in zip(others, adjusted, low, high):
        difference = m.difference.with_adjusted(p, lo, hi)
        out.append(MetricComparison(m.metric, m.a, m.b, difference, _verdict(m.metric, difference)))
    return out


def _header(study: Study) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """The first run's fingerprint header, or None and why it could not be read."""
    if not study.runs:
        return None, "it has no runs"
    path = study.log_path(study.runs[0])
    if not path.is_file():
        return None, f"its run {study.runs[0].index} log {path} is missing"
    try:
        with LogReader(path) as reader:
            return dict(reader.header), None
    except FileNotFoundError:
        return None, f"its run {study.runs[0].index} log {path} is missing"
    except (FingerprintError, OSError) as exc:
        return None, f"its run {study.runs[0].index} log {path} cannot be read ({exc})"


# -- hardware --------------------------------------------------------------------------------------
def run_hardware(study: Study, run: StudyRun) -> str:
    """Where ``run`` trained: the hardware its study record holds, else its log header's (``unknown`` when
    neither can be read)."""
    recorded = (run.placement or {}).get("hardware")
    if recorded:
        return str(recorded)
    try:
        with LogReader(study.log_path(run)) as reader:
            return hardware_of(reader.header)
    except (FingerprintError, OSError):
        return "unknown"


def hardware_groups(study: Study) -> Dict[str, List[StudyRun]]:
    """The study's runs by the hardware they trained on (in order of first appearance)."""
    groups: Dict[str, List[StudyRun]] = {}
    for run in study.runs:
        groups.setdefault(run_hardware(study, run), []).append(run)
    return groups


def split_by_hardware(study: Study) -> Tuple[Study, Study]:
    """The study as two studies, one per hardware it ran on (exactly two, else a :class:`StudyError`), so that
    :func:`compare_studies` says whether the hardware moves the metric beyond seed noise."""
    groups = hardware_groups(study)
    if "unknown" in groups and len(groups) <= 2:  # a split against "unknown" names a hardware difference not known
        known = "; ".join(f"{hw} ({len(runs)} seeds)" for hw, runs in groups.items() if hw != "unknown")
        raise StudyError(f"splitting by hardware needs every seed's hardware; in {study.path} "
                         f"{len(groups['unknown'])} seed(s) (run {', '.join(str(r.index) for r in groups['unknown'])}) "
                         f"have none recorded (no placement in study.json, no readable log header) besides "
                         f"{known or 'no other'}: they may have run on the same hardware, so no difference between "
                         "two kinds can be tested. Copy the run folders with the study, or run it again")
    if len(groups) != 2:
        found = "; ".join(f"{hw} ({len(runs)} seeds)" for hw, runs in groups.items())
        raise StudyError(f"splitting by hardware needs seeds on exactly two kinds of hardware; {study.path} has "
                         f"{len(groups)}: {found}")
    (hw_a, runs_a), (hw_b, runs_b) = groups.items()

    def half(runs: List[StudyRun], hardware: str) -> Study:  # its own seeds: a half is not an incomplete study
        return dataclasses.replace(study, runs=runs, settings={**study.settings, "hardware": hardware,
                                                               "seeds": [r.seed for r in runs]})

    return half(runs_a, hw_a), half(runs_b, hw_b)


def _hardware_notes(a: Study, b: Study) -> Tuple[List[Cause], List[str]]:
    """Hardware differences between the studies (a cause naming both) and within each (a note: its spread
    also holds the hardware)."""
    groups = {"A": hardware_groups(a), "B": hardware_groups(b)}
    notes = []
    for name, found in groups.items():
        if len(found) > 1:
            where = "; ".join(f"{hw} (seeds {', '.join(str(r.seed) for r in runs)})" for hw, runs in found.items())
            notes.append(f"study {name}'s seeds trained on {len(found)} kinds of hardware: {where} -- its spread "
                         f"also holds the hardware; `yolo-det compare STUDY --split-by hardware` tests whether it "
                         f"moves the metric")
    kinds_a, kinds_b = set(groups["A"]) - {"unknown"}, set(groups["B"]) - {"unknown"}
    causes = []
    if kinds_a and kinds_b and kinds_a != kinds_b:
        causes.append(Cause("environment", "hardware", f"hardware: A trained on {'; '.join(sorted(kinds_a))}, "
                                                       f"B on {'; '.join(sorted(kinds_b))}"))
    return causes, notes


def setup_check(a: Study, b: Study, expected: Sequence[str] = ()) -> Tuple[List[Cause], Optional[str]]:
    """What differed between the studies' set-ups besides their seeds and ``expected`` (their first runs' headers
    compared), and, where a header could not be read, why the set-ups were not compared (None when they were)."""
    (ha, why_a), (hb, why_b) = _header(a), _header(b)
    missing = [f"study {name}: {why}" for name, why in (("A", why_a), ("B", why_b)) if why]
    if missing:
        return [], ("set-ups not compared (not proven the same): " + "; ".join(missing)
                    + " -- copy the run folders with the study, or compare on the machine that ran it")
    return [c for c in header_causes(ha, hb) if c.what not in _EXPECTED + tuple(expected)], None


def setup_differences(a: Study, b: Study) -> List[Cause]:
    """What differed between the studies' set-ups besides their seeds (empty where a header is missing)."""
    return setup_check(a, b)[0]


def _mode_cause(a: Study, b: Study) -> Optional[Cause]:
    """A set-up cause when the studies' seeds ran under different determinism modes (every run's recorded mode,
    not only the first run's header); None when the modes each study recorded are the same."""
    modes_a = sorted({str(r.mode) for r in a.runs if r.mode})
    modes_b = sorted({str(r.mode) for r in b.runs if r.mode})
    if not modes_a or not modes_b or modes_a == modes_b:
        return None

    def which(study: Study) -> str:
        found: Dict[str, List[str]] = {}
        for run in study.runs:
            found.setdefault(str(run.mode), []).append(str(run.seed))
        return "; ".join(f"{m} (seeds {', '.join(s)})" for m, s in found.items())

    return Cause("config", "mode", f"the seeds ran under different determinism modes: A {which(a)}, B {which(b)}")


#: What differs by design between the two halves of a study split by hardware.
HARDWARE_CAUSES = ("gpus", "cuda", "driver", "host", "hardware")


def compare_studies(a: Study, b: Study, metric: str = DEFAULT_METRIC, expected: Sequence[str] = ()) -> StudyComparison:
    """A against B on ``metric`` (the verdict) and on every metric both have (information); ``expected``: set-up
    differences that are the comparison's subject (``HARDWARE_CAUSES`` for :func:`split_by_hardware`'s halves)."""
    for study, name in ((a, "A"), (b, "B")):
        if len(study.runs) < 2:
            raise StudyError(f"study {name} ({study.path}) has {len(study.runs)} finished run(s); a comparison "
                             "needs at least two per study (continue it with its yolo-det seeds command)")
    names = [n for n in a.metric_names() if n in b.metric_names()]
    names += [f"best:{n}" for n in dict.fromkeys(k for r in a.runs for k in r.best) if any(n in r.best for r in b.runs)]
    if metric not in names:
        raise StudyError(f"metric {metric!r} is not in both studies; they have: {', '.join(names) or 'none'}")
    common = common_seeds(a, b)
    paired = pairs_keep_most_runs(len(common), len(a.runs), len(b.runs))
    notes = [_pairing_note(common, len(a.runs), len(b.runs), paired)]
    notes = [n for n in notes if n]
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
    others = _holm([compare_metric(a, b, n, paired) for n in names if n != metric])
    every = [main] + others
    if paired and all(m.difference.bit_identical for m in every):
        notes.append(f"every metric is bit-identical seed by seed on the {main.difference.n} seeds both studies "
                     "ran: the change did nothing to these runs (was the setting applied? Ultralytics' "
                     "optimizer=auto, for one, ignores lr0)")
        if main.statement == NO_EFFECT_METRIC:
            main = dataclasses.replace(main, statement=NO_EFFECT)
    if others:
        notes.append(f"the {len(others)} other metrics are information: their p-values are Holm-adjusted "
                     f"across them (family-wise {statistics.ALPHA:.0%}); the verdict is about {metric} alone")
    setup, unchecked = setup_check(a, b, expected)
    if unchecked:
        notes.append(unchecked)
    mode = _mode_cause(a, b)
    if mode is not None and "mode" not in expected and not any(c.what == "mode" for c in setup):
        setup.append(mode)  # the first runs' headers agree, later seeds ran under another mode
    if "hardware" not in expected:
        hardware, hardware_notes = _hardware_notes(a, b)
        notes += hardware_notes
        if not any(c.what in ("gpus", "cuda") for c in setup):  # the first runs' headers named the GPUs already
            setup += hardware
    tainted = [{"study": name, **t} for name, study in (("A", a), ("B", b)) for t in study.tainted()]
    return StudyComparison(main, others, paired, setup, notes, setup_checked=unchecked is None, tainted=tainted)


__all__ = ["BETTER_A", "BETTER_B", "DEFAULT_METRIC", "DIFFERENT", "HARDWARE_CAUSES", "MetricComparison", "NON_FINITE",
           "NO_EFFECT", "NO_EFFECT_METRIC", "NO_EFFECT_ROUNDING", "NO_INFORMATION", "StudyComparison", "TOO_FEW",
           "TOO_FEW_STATEMENT", "UNDECIDED", "WITHIN", "non_finite_runs", "common_seeds", "compare_metric",
           "compare_studies", "hardware_groups", "pairs_keep_most_runs",
           "run_hardware",
           "setup_check", "setup_differences", "split_by_hardware"]
