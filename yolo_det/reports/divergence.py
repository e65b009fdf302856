"""Two runs: the first divergence (step, kind, tensor; the op and module where a locate result is there) or
"identical", decided by :mod:`yolo_det.proof` (run folders: :func:`~yolo_det.proof.run_dirs.compare_runs`, logs:
:func:`~yolo_det.proof.compare.compare_logs`) or read from a saved ``diff`` / ``verify`` / ``locate`` JSON."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple

from ..core import verdicts
from ..proof.compare import compare_logs
from ..proof.run_dirs import RunDirError, RunFolder, compare_runs
from ..record.log import FingerprintError
from . import blocks, charts
from .inputs import Item, ReportInputError


def _log(item: Item):
    if item.log is not None:
        return item.log
    try:
        return RunFolder.read(item.path).log
    except RunDirError as exc:
        raise ReportInputError(str(exc)) from None


def compare_items(a: Item, b: Item) -> Tuple[Dict[str, Any], Tuple[List[float], List[float]]]:
    """proof's verdict on two runs as its JSON, and both runs' losses per step (for the chart)."""
    try:
        if a.log is None and b.log is None:
            result = compare_runs(a.path, b.path)
            losses = result.steps.losses if result.steps is not None else ([], [])
            return result.to_json(), losses
        log_a, log_b = _log(a), _log(b)
        if log_a is None or log_b is None:
            return verdicts.Document(verdicts.NOT_PROVEN, {"steps": None, "notes": [
                f"{'A' if log_a is None else 'B'} has no fingerprint log: the steps were not compared"]}).to_json(), \
                ([], [])
        comparison = compare_logs(log_a, log_b)
    except (RunDirError, FingerprintError) as exc:
        raise ReportInputError(f"{a.path} vs {b.path}: {exc}") from None
    return comparison.to_json(), comparison.losses


def _parts(data: Mapping[str, Any]) -> Tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(the whole verdict, the step comparison): a log comparison is both; a run-folder one holds it in ``steps``."""
    if "first_divergence" in data:
        return data, data
    return data, data.get("steps") or {}


def _headline(verdict: str, top: Mapping[str, Any], steps: Mapping[str, Any]) -> str:
    first, where = steps.get("first_divergence"), steps.get("locate") or {}
    if first:
        text = f"first divergence at step {first['step']}: {first['kind']} {first['tensor']}"
        if first.get("kind") == "val" and first.get("epoch") is not None:
            text += f" (validation of epoch {first['epoch']})"
        if where.get("op"):
            text += f"; op {where['op']}" + (f" in {where['module']}" if where.get("module") else "") + \
                (f" ({where['phase']})" if where.get("phase") else "")
        return text
    if verdict == verdicts.IDENTICAL:
        vals = (steps.get("validations") or {}).get("compared", 0)
        compared = ", ".join(map(str, top.get("compared") or []))  # scalars shown as text (reports.inputs)
        return (f"identical: {steps.get('steps', 0)} steps, {steps.get('tensors', 0)} tensors, {vals} validations"
                + (f" ({compared})" if compared else ""))
    if verdict == verdicts.DIFFERS:
        return "differ: " + "; ".join(str(c.get("message", "")) for c in top.get("causes") or [])[:400]
    missing = top.get("not_compared") or []
    return f"{verdict}: " + (f"not compared: {', '.join(map(str, missing))}" if missing else
                             (steps.get("problem") or top.get("not_proven") or "nothing decisive was compared"))


def _verdict(top: Mapping[str, Any]) -> str:
    """The command's own verdict word in its JSON (an earlier release's word read as today's); a JSON without one
    (written before the field) is ``identical`` only where it says ``"identical": true``, else ``not proven``."""
    word = top.get("verdict")
    if word is None:
        return verdicts.IDENTICAL if top.get("identical") is True else verdicts.NOT_PROVEN
    try:
        return verdicts.normalize(word)
    except ValueError:
        return str(word)


def _location_rows(steps: Mapping[str, Any]) -> List[Tuple[str, Any]]:
    first, where = steps.get("first_divergence") or {}, steps.get("locate") or {}
    return [("step", first.get("step")), ("kind", first.get("kind")), ("tensor", first.get("tensor")),
            ("epoch", first.get("epoch")), ("op", where.get("op")), ("module", where.get("module")),
            ("phase", where.get("phase")), ("CUDA kernel", where.get("kernel")), ("cause", where.get("cause"))]


def _charts(steps: Mapping[str, Any], losses: Sequence[Sequence[float]], labels: Sequence[str]) -> str:
    counts = [int(n) for n in steps.get("differing_per_step") or []]
    first = steps.get("first_divergence") or {}
    step = first.get("step") if first.get("kind") != "val" else None
    n = max([len(counts)] + [len(x) for x in losses])
    out = ""
    if any(v == v for x in losses for v in x):  # some loss that is not NaN
        series = [charts.Series(label, [(i, v) for i, v in enumerate(x, 1)], charts.COLORS[k], dashed=k == 1)
                  for k, (label, x) in enumerate(zip(labels, losses))]
        marks = [charts.Marker(step, f"step {step}", color=charts.BAD, dashed=False)] if step else []
        out += blocks.figure(charts.line_chart(series, marks, n, "optimizer step", "loss", "both runs' losses"),
                             "both runs' loss per step; red: the first divergence")
    if counts:
        out += blocks.figure(charts.count_chart(counts, "optimizer step", "differing tensors", "differing tensors",
                                                highlight=step), "tensors whose digests differ, per step")
    return out


def divergence_section(data: Mapping[str, Any], title: str, losses: Sequence[Sequence[float]] = ((), ()),
                       labels: Sequence[str] = ("A", "B")) -> blocks.Section:
    """The section of one two-run verdict (``data``: a run-folder or log comparison's JSON)."""
    top, steps = _parts(data)
    verdict = _verdict(top)
    body = _charts(steps, losses, labels)
    if steps.get("first_divergence"):
        body += blocks.facts(_location_rows(steps))
    causes = [(c.get("class"), c.get("what"), c.get("message")) for c in top.get("causes") or []]
    body += blocks.table(("class", "what", "likely cause"), causes, caption="set-up differences, the likely cause first")
    body += blocks.table(("setting that differs",), [(s,) for s in (top.get("settings") or [])[:40]])
    body += blocks.notes(list(dict.fromkeys(list(top.get("notes") or []) + list(steps.get("notes") or []))))
    return blocks.Section("two runs", title, verdict, _headline(verdict, top, steps), body, blocks.tone_of(verdict))


def pair_sections(runs: Sequence[Item]) -> List[blocks.Section]:
    """Every run compared with the first, as ``verify`` compares its runs."""
    out = []
    for other in runs[1:]:
        data, losses = compare_items(runs[0], other)
        out.append(divergence_section(data, f"A = {runs[0].path}  vs  B = {other.path}", losses))
    return out


def saved_section(item: Item) -> blocks.Section:
    """A comparison saved with ``--json`` (``diff``, ``verify``, ``locate``)."""
    return divergence_section(item.data, str(item.path))


__all__ = ["compare_items", "divergence_section", "pair_sections", "saved_section"]
