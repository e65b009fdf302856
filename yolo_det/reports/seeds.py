"""Seed studies: each seed's value of one metric with the mean and its 95% interval (:mod:`yolo_det.studies`),
and, for two studies, the comparison's verdict (:func:`~yolo_det.studies.compare.compare_studies`)."""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Tuple

from ..core import verdicts
from ..studies import statistics
from ..studies.compare import DEFAULT_METRIC, compare_studies
from ..studies.study import Study, StudyError, load_study
from . import blocks, charts
from .inputs import Item, ReportInputError


def load(item: Item) -> Study:
    try:
        return load_study(item.path)
    except StudyError as exc:
        raise ReportInputError(str(exc)) from None


def pick_metric(studies: Sequence[Study], asked: Optional[str]) -> str:
    """``asked``, else fitness, else the first metric every study has; :class:`ReportInputError` when ``asked`` is
    in none of them."""
    names = [n for n in studies[0].metric_names() if all(n in s.metric_names() for s in studies[1:])]
    if asked:
        if not any(asked in s.summary() for s in studies):
            raise ReportInputError(f"--metric {asked!r} is in none of the studies; they have: "
                                   f"{', '.join(names) or 'no metric'}")
        return asked
    return DEFAULT_METRIC if DEFAULT_METRIC in names else (names[0] if names else DEFAULT_METRIC)


def _points(label: str, study: Study, metric: str) -> charts.Points:
    s = statistics.summarize(study.values(metric))
    return charts.Points(label, [(run.seed, v) for run, v in zip(study.runs, study.values(metric))], s.mean, s.ci)


def _summary_rows(study: Study) -> List[Sequence[Any]]:
    return [(name, s.n, charts.fmt(s.mean, 6), charts.fmt(s.std, 3),
             f"{charts.fmt(s.ci[0], 6)} .. {charts.fmt(s.ci[1], 6)}" if s.ci else "-")
            for name, s in study.summary().items()]


def _comparison(a: Study, b: Study, metric: str) -> blocks.Section:
    try:
        result = compare_studies(a, b, metric)
    except StudyError as exc:
        raise ReportInputError(str(exc)) from None
    return comparison_section(result.to_json(), f"A = {a.folder}  vs  B = {b.folder}", [a, b])


def _said(data: Mapping[str, Any]) -> Tuple[str, str]:
    """(the badge, the sentence) of a compare JSON, from its own ``verdict``: the sentence names the better study
    only beside ``beyond seed noise``; beside any other word (not proven, a tainted seed; too few seeds) a winner an
    earlier release wrote there is not shown, the word and its reason are."""
    try:
        word = verdicts.normalize(data.get("verdict"))
    except ValueError:
        word = str(data.get("verdict"))
    statement = str(data.get("statement") or word)
    if word == verdicts.BEYOND_NOISE and data.get("better"):
        return statement, statement
    if word == verdicts.NOT_PROVEN and not statement.startswith(verdicts.NOT_PROVEN):
        statement = verdicts.NOT_PROVEN + (f": {len(data['tainted'])} seed(s) did not run as their study says"
                                           if data.get("tainted") else "")
    return word, statement


def _metric_said(m: Mapping[str, Any], top: str) -> str:
    """A metric row's verdict: its own sentence, unless the comparison's verdict is withheld (then the word)."""
    if top == verdicts.NOT_PROVEN:
        return verdicts.NOT_PROVEN
    return str(m.get("statement") or m.get("verdict"))


def _tainted_notes(tainted: Sequence[Mapping[str, Any]]) -> List[str]:
    return [f"study {t.get('study')} run {t.get('run')} seed {t.get('seed')}: "
            f"{'; '.join(str(w) for w in t.get('why') or []) or 'tainted'}" for t in tainted]


def comparison_section(data: Mapping[str, Any], title: str, studies: Sequence[Study] = ()) -> blocks.Section:
    """Two studies compared (``compare --json``'s shape, the command's own verdict): the verdict, A - B with its
    interval, every metric, the seeds that tainted it."""
    badge, said = _said(data)
    ci = data.get("ci")
    summary = (f"{data.get('metric')}: {said} (A - B = {charts.fmt(data.get('difference'), 4)}, 95% CI "
               + (f"{charts.fmt(ci[0], 4)} .. {charts.fmt(ci[1], 4)}" if ci else "-")
               + f", p = {charts.fmt(data.get('p_value'), 3)}, {data.get('test')})")
    body = blocks.notes(_tainted_notes(data.get("tainted") or []),
                        "seeds that did not run as their study says: no verdict")
    if studies:
        rows = [_points(label, s, str(data.get("metric"))) for label, s in zip(("A", "B"), studies)]
        body += blocks.figure(charts.interval_chart(rows, str(data.get("metric")), "both studies' seeds"),
                              "each dot a seed; the band: the 95% interval of the mean; the bar: the mean")
    metrics = [data.get("result") or {}] + list(data.get("others") or [])
    body += blocks.table(("metric", "mean A", "mean B", "A - B", "95% CI", "p", "verdict"),
                         [(m.get("metric"), charts.fmt((m.get("a") or {}).get("mean"), 6),
                           charts.fmt((m.get("b") or {}).get("mean"), 6), charts.fmt(m.get("difference"), 4),
                           " .. ".join(charts.fmt(c, 4) for c in m.get("ci") or []) or "-",
                           charts.fmt(m.get("p_value"), 3), _metric_said(m, badge)) for m in metrics if m],
                         caption="the verdict is about the first metric; the others are information")
    body += blocks.table(("class", "what", "set-up difference"),
                         [(c.get("class"), c.get("what"), c.get("message")) for c in data.get("setup_differences") or []])
    body += blocks.notes(data.get("notes") or [])
    return blocks.Section("seed studies compared", title, badge, summary, body, blocks.tone_of(badge))


def study_sections(items: Sequence[Item], metric: Optional[str]) -> List[blocks.Section]:
    """Each study's seeds, then every later study compared with the first."""
    studies = [load(item) for item in items]
    if not studies:
        return []
    chosen = pick_metric(studies, metric)
    out = []
    for item, study in zip(items, studies):
        s = statistics.summarize(study.values(chosen))
        interval = (f"{charts.fmt(s.ci[0], 6)} .. {charts.fmt(s.ci[1], 6)}" if s.ci else
                    "none: the seeds' values are tied, not resolved at this metric's resolution"
                    if s.n > 1 and not s.resolved else "none (fewer than two seeds)")
        summary = (f"{chosen} over {s.n} seed(s): mean {charts.fmt(s.mean, 6)}, 95% interval of the mean {interval}; "
                   "a verdict needs a second study to compare with"
                   + ("" if study.complete else f"; incomplete: {len(study.runs)} of {len(study.seeds)} seeds ran"))
        chart = charts.interval_chart([_points(f"{len(study.runs)} seeds", study, chosen)], chosen,
                                      f"seeds of {item.path}")
        rows = [(run.seed, run.mode, charts.fmt(v, 6), run.best_epoch) for run, v in zip(study.runs,
                                                                                         study.values(chosen))]
        body = (blocks.figure(chart, "each dot a seed; the band: the 95% interval of the mean; the bar: the mean")
                + blocks.facts([("command", " ".join(map(str, study.settings.get("command") or []))),
                                ("varies", study.settings.get("vary")), ("mode", study.settings.get("mode"))])
                + blocks.table(("seed", "mode", chosen, "best epoch"), rows, caption="per seed")
                + blocks.table(("metric", "n", "mean", "std", "95% CI of the mean"), _summary_rows(study),
                               caption="every metric")
                + blocks.notes([f"seed {f.get('seed')}: {f.get('error')}" for f in study.failed], "failed seeds"))
        verdict = verdicts.NO_VERDICT if s.ci else verdicts.NOT_PROVEN  # one study: an interval, nothing compared
        out.append(blocks.Section("seed study", str(item.path), verdict, summary, body,
                                  blocks.INFO if s.ci else blocks.WARN))
    out += [_comparison(studies[0], other, chosen) for other in studies[1:]]
    return out


__all__ = ["comparison_section", "pick_metric", "study_sections"]
