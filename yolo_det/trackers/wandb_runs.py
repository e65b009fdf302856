"""The Weights & Biases backend: what the MLflow backend logs, in W&B's terms, online or offline (``WANDB_MODE``).

A run's evidence: the ``yolo_det.*`` tags as the run's summary (the runs table's columns), the MLflow params
(mode, seed, data digest) as its config, ``determinism.json`` and the evidence JSON as run files
``yolo_det/determinism.json`` and ``yolo_det/evidence.json``, and the data manifest as a ``dataset`` artifact
whose digest is the data's content digest (W&B offline cannot mark an artifact as a run's input: it is logged by
the run). A command's verdict: ``yolo_det.verdict.<command>`` and its exit code in the summary, and the file
``yolo_det/verdicts/<command>.json``; offline, into a resumed segment of the same run id, which ``wandb sync``
merges. Every ``wandb.init`` here is silent (no console capture, no system stats, no code or git upload); the
user's own active run is logged into and left running.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from .backend import Backend, Link
from .evidence import REPORT_NAME, tags, verdict_tags

FILES_DIR = "yolo_det"
EVIDENCE_NAME = "evidence.json"
#: Evidence that is also config (the MLflow params): the run table's filter columns.
CONFIG = ("mode", "seed", "data.digest")


def active_wandb_run() -> Optional[Any]:
    """The W&B run active in this process, when wandb is already imported (never imports it)."""
    wandb = sys.modules.get("wandb")
    try:
        return getattr(wandb, "run", None) if wandb is not None else None
    except Exception:  # noqa: BLE001 - a tracker's state never fails the run
        return None


def _root(run: Any) -> Optional[str]:
    """The folder that holds the run's ``wandb/`` folder (``<root>/wandb/<run folder>/files`` is ``run.dir``): where
    the run went, whatever ``WANDB_DIR`` says (Ultralytics' callback puts it in the training's folder)."""
    files = Path(getattr(run, "dir", "") or "")
    return str(files.parent.parent.parent) if files.name == "files" else None


def _link(run: Any, started_by: str) -> Link:
    settings = getattr(run, "settings", None)
    return {"run_id": run.id, "project": run.project, "entity": getattr(run, "entity", None) or None,
            "dir": _root(run), "mode": getattr(settings, "mode", None), "started_by": started_by}


def _settings() -> Any:
    import wandb

    return wandb.Settings(silent=True, console="off", x_disable_stats=True, disable_code=True, disable_git=True)


def _open(link: Mapping[str, Any], name: Optional[str] = None) -> Any:
    """A run to log into: the process's active run, else the run ``link`` names (resumed), else a new run."""
    import wandb

    active = active_wandb_run()
    if active is not None and (not link.get("run_id") or link.get("run_id") == active.id):
        return active
    kwargs: Dict[str, Any] = {"settings": _settings(), "reinit": "create_new"}
    if link.get("run_id"):
        kwargs.update(id=link["run_id"], resume="allow")
    elif name:
        kwargs["name"] = name
    if link.get("project"):
        kwargs["project"] = link["project"]
    if link.get("entity"):
        kwargs["entity"] = link["entity"]
    if link.get("dir") and Path(link["dir"]).is_dir():  # the run's next segment beside the earlier ones
        kwargs["dir"] = link["dir"]
    return wandb.init(**kwargs)


def _write(run: Any, name: str, content: Any) -> None:
    """A file in the run's files (uploaded with the run, or by ``wandb sync``)."""
    path = Path(run.dir) / FILES_DIR / name
    path.parent.mkdir(parents=True, exist_ok=True)
    text = content if isinstance(content, str) else json.dumps(content, indent=2, sort_keys=True, default=str) + "\n"
    path.write_text(text, encoding="utf-8")


def _dataset(run: Any, evidence: Mapping[str, Any], run_dir: Path) -> None:
    import wandb

    data = evidence["data"]
    artifact = wandb.Artifact(f"data-{data['digest'][:16]}", type="dataset", metadata={
        "digest": data["digest"], "digest_algorithm": data.get("algorithm"), "root": data.get("root"),
        "files": data.get("files"), "images": data.get("images"), "names": data.get("names")})
    manifest = Path((evidence.get("files") or {}).get("data_manifest") or run_dir / "data_manifest.json")
    if manifest.is_file():
        artifact.add_file(str(manifest), name="data_manifest.json")
    run.log_artifact(artifact, aliases=[data["digest"]])


def log_run(run_dir: Path, evidence: Mapping[str, Any], link: Mapping[str, Any]) -> Dict[str, Any]:
    """Log a run's evidence (see the module's docstring); return the link to remember in ``trackers.json``."""
    active = active_wandb_run()
    run = _open(link, name=Path(run_dir).name)
    ours = run is not active
    try:
        values = tags(evidence)
        run.config.update({f"yolo_det.{key}": values[f"yolo_det.{key}"] for key in CONFIG
                           if f"yolo_det.{key}" in values}, allow_val_change=True)
        run.summary.update(values)
        report = Path(run_dir) / REPORT_NAME
        if report.is_file():
            _write(run, REPORT_NAME, report.read_text(encoding="utf-8"))
        _write(run, EVIDENCE_NAME, evidence)
        if evidence.get("data"):
            _dataset(run, evidence, Path(run_dir))
        started_by = link.get("started_by") or ("yolo-det" if ours else "process")
        out = _link(run, started_by)
    finally:
        if ours:
            run.finish()
    return out


def log_verdict(link: Mapping[str, Any], evidence: Mapping[str, Any]) -> None:
    """Attach a command's verdict to the run ``link`` names: summary values and ``yolo_det/verdicts/<command>.json``."""
    active = active_wandb_run()
    run = _open(link)
    try:
        run.summary.update(verdict_tags(evidence))
        _write(run, f"verdicts/{evidence['command']}.json", evidence)
    finally:
        if run is not active:
            run.finish()


def log_files(link: Mapping[str, Any], folder: Path, name: str) -> None:
    """The files of ``folder`` as an artifact of type ``name`` logged by the run ``link`` names."""
    import wandb

    active = active_wandb_run()
    run = _open(link)
    try:
        artifact = wandb.Artifact(f"{name}-{run.id}", type=name)
        artifact.add_dir(str(folder))
        run.log_artifact(artifact)
    finally:
        if run is not active:
            run.finish()


class WandbBackend(Backend):
    """Weights & Biases (see the module's docstring)."""

    name = "wandb"
    package = "wandb"

    def in_use(self, run_dir: Path, link: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
        """``WANDB_MODE`` (other than ``disabled``) or ``WANDB_PROJECT`` is set, a W&B run is active in the
        process, or the run folder names one."""
        mode = environ.get("WANDB_MODE", "").strip().lower()
        if mode == "disabled":
            return False
        return bool(mode or environ.get("WANDB_PROJECT") or active_wandb_run() is not None or link.get("run_id"))

    def log_run(self, run_dir: Path, evidence: Mapping[str, Any], link: Mapping[str, Any]) -> Link:
        return log_run(run_dir, evidence, link)

    def log_verdict(self, link: Mapping[str, Any], evidence: Mapping[str, Any]) -> None:
        log_verdict(link, evidence)

    def log_files(self, link: Mapping[str, Any], folder: Path, name: str) -> bool:
        log_files(link, folder, name)
        return True

    def active_run(self, started_by: str) -> Optional[Link]:
        run = active_wandb_run()
        return None if run is None else _link(run, started_by)

    def target(self, link: Mapping[str, Any]) -> str:
        return repr((link.get("entity"), link.get("project"), link.get("run_id")))


BACKEND = WandbBackend()

__all__ = ["BACKEND", "EVIDENCE_NAME", "FILES_DIR", "WandbBackend", "active_wandb_run", "log_run", "log_verdict"]
