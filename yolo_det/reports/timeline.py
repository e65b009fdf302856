"""A training run's record as a timeline: its steps, epochs, validations and resume points (from the fingerprint
log and the logs of each resumption beside it), and the set-up ``determinism.json`` recorded: mode, seeds,
environment, alerts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..core.mode import SOURCE_LABELS
from ..proof.run_dirs import RunDirError, RunFolder
from ..record.log import FingerprintError, LogReader
from . import blocks, charts
from .inputs import Item, ReportInputError


@dataclass
class Timeline:
    """What a run's fingerprint log(s) hold, step numbers counted across resumptions."""

    logs: List[Path] = field(default_factory=list)
    header: Dict[str, Any] = field(default_factory=dict)
    steps: int = 0
    losses: List[Tuple[int, float]] = field(default_factory=list)  # (step, loss) where the log kept the loss
    validations: List[Dict[str, Any]] = field(default_factory=list)  # epoch, step, metrics, best
    resumes: List[int] = field(default_factory=list)  # the step after which each resumed process went on
    closed_by: Optional[str] = None
    notes: List[str] = field(default_factory=list)

    @property
    def epochs(self) -> int:
        return len({v["epoch"] for v in self.validations if v["epoch"] is not None})


#: what the timeline's loss axis shows: the training step's own loss (YOLOv5, Ultralytics: x the batch size)
LOSS_AXIS = "step loss (x batch size)"


def _count(n: int, word: str) -> str:
    """``1 epoch``, ``2 epochs``, ``0 epochs``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def resume_logs(log: Path) -> List[Path]:
    """``log`` and the logs its resumptions wrote beside it (``<stem>.resume<k>.jsonl``), in order."""
    found = []
    for path in log.parent.glob(f"{log.stem}.resume*{log.suffix}"):
        number = path.name[len(log.stem) + len(".resume"):-len(log.suffix)]
        if number.isdigit():
            found.append((int(number), path))
    return [log] + [p for _, p in sorted(found)]


def read_timeline(log: Path) -> Timeline:
    """The timeline of ``log`` and its resumptions; a log that cannot be read is a :class:`ReportInputError`."""
    timeline = Timeline()
    for part in resume_logs(log):
        offset = timeline.steps
        if part is not log:
            timeline.resumes.append(offset)
        try:
            with LogReader(part) as reader:
                timeline.header = timeline.header or dict(reader.header)
                for step in reader:
                    if not math.isnan(step.loss):
                        timeline.losses.append((offset + step.step, step.loss))
                timeline.steps = offset + reader.count
                timeline.validations += [{"epoch": v.epoch, "step": offset + v.after_step, "metrics": v.metrics,
                                          "best": v.best} for v in reader.validations]
                timeline.closed_by = reader.final.closed_by if reader.final else None
                if reader.truncated:
                    timeline.notes.append(reader.truncated)
        except FingerprintError as exc:
            raise ReportInputError(str(exc)) from None
        timeline.logs.append(part)
    return timeline


def _metric(metrics: Mapping[str, Any]) -> Tuple[str, str]:
    """The validation's headline metric (name, value): mAP50-95 where logged, else fitness; empty when neither."""
    for key in ("mAP50-95", "metrics/mAP50-95(B)", "fitness"):
        if isinstance(metrics.get(key), (int, float)):
            return key, charts.fmt(float(metrics[key]))
    return "", ""


def _markers(timeline: Timeline) -> List[charts.Marker]:
    marks = [charts.Marker(v["step"] + 0.5, f"E{v['epoch']}" if v["epoch"] is not None else "val",
                           title=f"validation after step {v['step']}" + (f" (epoch {v['epoch']})" if v["epoch"]
                                                                          is not None else "")
                           + (": " + " ".join(_metric(v["metrics"])) if _metric(v["metrics"])[0] else ""))
             for v in timeline.validations]
    marks += [charts.Marker(step + 0.5, "resumed", color="#9333ea", dashed=False,
                            title=f"resumed after step {step} (a new process went on from the checkpoint)")
              for step in timeline.resumes]
    return marks


def _environment(env: Mapping[str, Any]) -> str:
    parts = [f"python {env['python']}" if env.get("python") else "", f"torch {env['torch']}" if env.get("torch") else ""]
    gpus = env.get("gpus") or []
    parts.append(", ".join(str(g.get("name", g)) if isinstance(g, dict) else str(g) for g in gpus) if gpus else
                 ("CUDA available" if env.get("cuda_available") else "CPU only"))
    parts.append(str(env.get("platform") or ""))
    return "; ".join(p for p in parts if p)


def _alerts(report: Mapping[str, Any]) -> Tuple[int, str]:
    violations = report.get("violations") or {}
    rows = [(o.get("op"), o.get("count"), o.get("first_step"), o.get("action")) for o in violations.get("ops") or []]
    html = blocks.table(("op", "alerts", "first step", "action"), rows, caption="nondeterministic ops that ran")
    return int(violations.get("total") or 0), html + blocks.notes(violations.get("notes") or [], "alert notes")


def _setup_rows(report: Mapping[str, Any], header: Mapping[str, Any], folder: Optional[RunFolder]) -> List[Tuple[str, Any]]:
    source = report or header
    mode = source.get("mode")
    seeds = source.get("seeds") or {}
    settings = report.get("settings") or {}
    manifest = folder.manifest if folder is not None else None
    return [
        ("mode", f"{mode} (from {SOURCE_LABELS.get(str(report.get('mode_source')), report.get('mode_source'))})"
         if mode and report.get("mode_source") else mode),
        ("backward mode", settings.get("backward_mode") if settings.get("backward_mode") != mode else None),
        ("seed", source.get("seed")),
        ("seeds by role", ", ".join(f"{k} {v}" for k, v in seeds.items() if k in ("init", "order", "augment"))),
        ("release", folder.release if folder is not None else None),
        ("environment", _environment(report.get("environment") or {}) or
         "; ".join(f"{k} {header[k]}" for k in ("python", "torch", "host") if header.get(k))),
        ("data", f"{manifest.get('files')} files, classes {', '.join(map(str, (manifest.get('names') or {}).values()))}"
                 if isinstance(manifest, dict) else None),
        ("replacements", ", ".join(map(str, report.get("replacements") or []))),
        ("yolo-det", report.get("yolo_det") or header.get("yolo_det")),
    ]


def run_section(item: Item) -> blocks.Section:
    """The section of one training run (a folder, or a fingerprint log on its own)."""
    folder = None
    if item.log is None:
        try:
            folder = RunFolder.read(item.path)
        except RunDirError as exc:
            raise ReportInputError(str(exc)) from None
    log = item.log or (folder.log if folder is not None else None)
    report = (folder.report if folder is not None else None) or {}
    timeline = read_timeline(log) if log is not None else Timeline(notes=["no fingerprint log: the steps were not "
                                                                          "recorded (a run made without yolo-det, or "
                                                                          "with fingerprint: off)"])
    alerts, alert_html = _alerts(report)
    mode = report.get("mode") or timeline.header.get("mode") or "unknown mode"
    summary = (f"{mode}: {_count(timeline.steps, 'optimizer step')}, {_count(timeline.epochs, 'epoch')} validated "
               f"({_count(len(timeline.validations), 'validation')}), {_count(len(timeline.resumes), 'resume point')}, "
               f"{_count(alerts, 'nondeterministic-op alert')}"
               + ("" if log is None or timeline.closed_by else "; the log has no final line (the run did not finish)"))
    chart = charts.line_chart([charts.Series("loss", timeline.losses)], _markers(timeline), timeline.steps,
                              "optimizer step", LOSS_AXIS, f"timeline of {item.path}",
                              note="the log keeps no loss (a compact record): only the markers")
    rows = [(v["epoch"], v["step"], "yes" if v["best"] else "", *_metric(v["metrics"]))
            for v in timeline.validations]
    body = (blocks.figure(chart, "the loss of each optimizer step as the training step returned it (where the log "
                                 "kept it): YOLOv5 and Ultralytics multiply the batch's mean loss by the batch size, "
                                 "so it reads about batch-size times results.csv's per-image train losses summed; "
                                 "dashed: a validation after that step, purple: where a resumed process went on")
            + blocks.facts(_setup_rows(report, timeline.header, folder))
            + blocks.table(("epoch", "after step", "best", "metric", "value"), rows, caption="validations")
            + alert_html
            + blocks.notes([f"log: {p}" for p in timeline.logs] + timeline.notes, "record"))
    tone = blocks.GOOD if mode == "strict" and not alerts else blocks.WARN if alerts else blocks.INFO
    verdict = _count(alerts, "alert") if alerts else (f"{mode}, no alert" if log is not None else "no record")
    return blocks.Section("training run", str(item.path), verdict, summary, body, tone)


__all__ = ["Timeline", "read_timeline", "resume_logs", "run_section"]
