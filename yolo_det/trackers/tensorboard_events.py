"""The TensorBoard backend: an event file of yolo-det's own in the run folder (``*.yolo-det``, beside the release's),
holding the evidence as text summaries (TensorBoard's Text tab): ``yolo_det/run`` (the ``yolo_det.*`` tags as a
table), ``yolo_det/evidence`` (the evidence JSON) and, per command that judged the run,
``yolo_det/verdict/<command>``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Mapping

from .backend import Backend, Link, package_installed
from .evidence import tags, verdict_tags

SUFFIX = ".yolo-det"


def _table(values: Mapping[str, str]) -> str:
    rows = "\n".join(f"| {key} | {str(value).replace('|', '/')} |" for key, value in values.items())
    return "| tag | value |\n|---|---|\n" + rows


def _json_block(content: Mapping[str, Any]) -> str:
    """JSON as a Markdown code block (indented four spaces: TensorBoard renders text summaries as Markdown)."""
    text = json.dumps(content, indent=2, sort_keys=True, default=str)
    return "\n".join("    " + line for line in text.splitlines())


def _write(run_dir: Path, texts: Mapping[str, str], step: int) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(run_dir), filename_suffix=SUFFIX)
    try:
        for tag, text in texts.items():
            writer.add_text(tag, text, global_step=step)
    finally:
        writer.close()


def _step(evidence: Mapping[str, Any]) -> int:
    steps = evidence.get("steps")
    return int(steps) if isinstance(steps, int) else 0


def log_run(run_dir: Path, evidence: Mapping[str, Any], link: Mapping[str, Any]) -> Dict[str, Any]:
    """Write the run's evidence into ``run_dir``; return the link to remember in ``trackers.json``."""
    _write(run_dir, {"yolo_det/run": _table(tags(evidence)), "yolo_det/evidence": _json_block(evidence)},
           _step(evidence))
    return {"log_dir": str(run_dir)}


def log_verdict(link: Mapping[str, Any], evidence: Mapping[str, Any]) -> None:
    """Write a command's verdict into the run's log folder as ``yolo_det/verdict/<command>``."""
    values = verdict_tags(evidence)
    heading = f"**{evidence['verdict']}** (exit {evidence['exit_code']})"
    _write(Path(link["log_dir"]), {f"yolo_det/verdict/{evidence['command']}":
                                   heading + "\n\n" + _table(values) + "\n\n" + _json_block(evidence)}, 0)


def release_events(run_dir: Path) -> bool:
    """The release already writes TensorBoard events into the run folder (YOLOv5's logger, Ultralytics'
    ``tensorboard`` setting): an event file that is not yolo-det's own."""
    return any(not p.name.endswith(SUFFIX) for p in Path(run_dir).glob("events.out.tfevents.*"))


class TensorboardBackend(Backend):
    """TensorBoard (see the module's docstring): in use when the run folder holds the release's event file."""

    name = "tensorboard"
    package = "tensorboard"

    def installed(self) -> bool:
        return package_installed("tensorboard") and package_installed("torch")

    def in_use(self, run_dir: Path, link: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
        return release_events(run_dir)

    def prepare(self) -> None:
        import torch.utils.tensorboard  # noqa: F401

    def log_run(self, run_dir: Path, evidence: Mapping[str, Any], link: Mapping[str, Any]) -> Link:
        return log_run(run_dir, evidence, link)

    def log_verdict(self, link: Mapping[str, Any], evidence: Mapping[str, Any]) -> None:
        log_verdict(link, evidence)

    def target(self, link: Mapping[str, Any]) -> str:
        return repr(link.get("log_dir"))


BACKEND = TensorboardBackend()

__all__ = ["BACKEND", "SUFFIX", "TensorboardBackend", "log_run", "log_verdict", "release_events"]
