"""What a study holds: its settings, each seed's run and metrics, the summary per metric; ``study.json`` and
``study.csv`` written (atomically) and read back.

Paths in ``study.json`` are stored relative to the study's folder, so a study stays readable when its folder is
copied or mounted elsewhere; studies written with absolute paths are still read.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from ..core import atomic, json_shapes, roles
from . import statistics
from ..proof.runner import LOG_NAME, VerifyError

STUDY_JSON = "study.json"

STUDY_CSV = "study.csv"

SCHEMA = 1


class StudyError(VerifyError):
    """A study cannot be run or read (bad arguments, another study in the folder, a run that ignored its seed)."""


class StudyStop(StudyError):
    """The study cannot go on (a command that sets its own seed, runs sharing a folder): no further seed starts."""


def higher_is_better(metric: str) -> Optional[bool]:
    """The direction of a metric: losses lower, learning rates none, everything else (mAP, P, R, fitness) higher."""
    name = metric.split(":", 1)[-1].lower()
    if "loss" in name:
        return False
    if name.startswith(("x/lr", "lr/", "lr")):
        return None
    return True


@dataclass
class StudyRun:
    """One seed's run: its seeds, log, run folder, metrics at the final epoch and at the best epoch."""

    index: int
    seed: int
    seeds: Dict[str, Any]
    log: str
    run_dir: Optional[str]
    metrics: Dict[str, float]
    best: Dict[str, float]
    best_epoch: Optional[int]
    mode: Optional[str]
    initial_weights: Optional[str] = None
    placement: Optional[Dict[str, Any]] = None  # where and when it ran (executor, host, devices)
    tainted: List[str] = field(default_factory=list)  # why it did not run as its study says (empty: it did)

    def to_dict(self, folder: Optional[Path] = None) -> Dict[str, Any]:
        """As study.json stores it: with ``folder``, the paths relative to it (the study stays readable when its
        folder is copied or mounted elsewhere), else as they are."""
        log, run_dir = self.log, self.run_dir
        if folder is not None:
            log, run_dir = _relative(log, folder), (None if run_dir is None else _relative(run_dir, folder))
        return {"run": self.index, "seed": self.seed, "seeds": self.seeds, "log": log, "run_dir": run_dir,
                "mode": self.mode, "initial_weights": self.initial_weights, "metrics": self.metrics,
                "best_epoch": self.best_epoch, "best": self.best, "placement": self.placement,
                "tainted": list(self.tainted)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StudyRun":
        return cls(int(data["run"]), int(data["seed"]), dict(data.get("seeds") or {}), str(data["log"]),
                   data.get("run_dir"), {k: float(v) for k, v in (data.get("metrics") or {}).items()},
                   {k: float(v) for k, v in (data.get("best") or {}).items()}, data.get("best_epoch"),
                   data.get("mode"), data.get("initial_weights"), data.get("placement"),
                   [str(t) for t in data.get("tainted") or []])


@dataclass
class Study:
    """A study's settings, its finished runs and the summary per metric."""

    settings: Dict[str, Any]
    runs: List[StudyRun] = field(default_factory=list)
    path: Optional[Path] = None
    failed: List[Dict[str, Any]] = field(default_factory=list)  # seeds whose run failed this time: run, seed, error

    @property
    def seeds(self) -> List[int]:
        return list(self.settings.get("seeds") or [])

    @property
    def complete(self) -> bool:
        return len(self.runs) == len(self.seeds)

    @property
    def folder(self) -> Optional[Path]:
        return None if self.path is None else Path(self.path).parent

    def log_path(self, run: StudyRun) -> Path:
        """Where ``run``'s log is: its stored path (relative to the study folder, or an old absolute one)."""
        return Path(run.log)

    def tainted(self) -> List[Dict[str, Any]]:
        """The runs that did not run as the study says (``run``, ``seed``, ``why``): an inexact resume or another
        mode in their records, or (a study written before those were read) another mode in the run's log."""
        out = []
        for run in self.runs:
            why = list(run.tainted)
            other = _other_mode(run.mode, self.settings.get("mode"))
            if other and other not in why:
                why.append(other)
            if why:
                out.append({"run": run.index, "seed": run.seed, "why": why})
        return out

    def missing_logs(self) -> List[StudyRun]:
        """The runs whose fingerprint log is not where study.json says (a study copied without its runs)."""
        return [r for r in self.runs if not self.log_path(r).is_file()]

    def metric_names(self) -> List[str]:
        names: List[str] = []
        for run in self.runs:
            names += [n for n in run.metrics if n not in names]
        return names

    def values(self, metric: str) -> List[float]:
        """The metric in every run, in seed order (``best:NAME`` for the best epoch; NaN where missing)."""
        if metric.startswith("best:"):
            return [run.best.get(metric[5:], float("nan")) for run in self.runs]
        return [run.metrics.get(metric, float("nan")) for run in self.runs]

    def summary(self) -> Dict[str, statistics.Summary]:
        """Per metric of the final epoch and (``best:NAME``) of the best epoch: mean, std, range, interval."""
        out = {name: statistics.summarize(self.values(name)) for name in self.metric_names()}
        best = [n for run in self.runs for n in run.best]
        for name in dict.fromkeys(best):
            out[f"best:{name}"] = statistics.summarize(self.values(f"best:{name}"))
        return out

    def to_dict(self, folder: Optional[Path] = None) -> Dict[str, Any]:
        return {"schema": SCHEMA, "settings": self.settings, "complete": self.complete,
                "runs": [run.to_dict(folder) for run in self.runs], "failed": list(self.failed),
                "tainted": self.tainted(), "summary": {k: v.to_dict() for k, v in self.summary().items()}}

    def write(self, folder: os.PathLike) -> Path:
        """``study.json`` and ``study.csv`` (one row per seed), each written atomically."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        atomic.write_text(folder / STUDY_JSON, json.dumps(self.to_dict(folder.resolve()), indent=2) + "\n")
        names = self.metric_names()
        best = list(dict.fromkeys(n for run in self.runs for n in run.best))
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(["run", "seed", "init_seed", "order_seed", "augment_seed", "best_epoch"] + names
                        + [f"best:{n}" for n in best] + ["log"])
        for run in self.runs:
            writer.writerow([run.index, run.seed] + [run.seeds.get(r) for r in roles.ROLES] + [run.best_epoch]
                            + [_cell(run.metrics.get(n)) for n in names] + [_cell(run.best.get(n)) for n in best]
                            + [_relative(run.log, folder.resolve())])
        atomic.write_text(folder / STUDY_CSV, text.getvalue())
        self.path = folder / STUDY_JSON
        return self.path


def _cell(value: Optional[float]) -> str:
    return "" if value is None else repr(float(value))


def _relative(path: str, folder: Path) -> str:
    """``path`` relative to ``folder`` (POSIX separators), if it is absolute; else as it is."""
    p = Path(path)
    if not p.is_absolute():
        return str(path)
    try:
        return Path(os.path.relpath(p, folder)).as_posix()
    except ValueError:  # another drive (Windows)
        return str(path)


def _resolve(path: Optional[str], folder: Path, fallback: Optional[Path] = None) -> Optional[str]:
    """A stored path as an absolute one: relative ones from the study folder; an old absolute one as it is,
    unless it is gone and ``fallback`` (the same file under this folder: a study moved) exists."""
    if path is None:
        return None
    p = Path(path)
    if not p.is_absolute():
        return str((folder / p).resolve())
    if not p.exists() and fallback is not None and fallback.exists():
        return str(fallback)
    return str(p)


def load_study(path: os.PathLike) -> Study:
    """A study from its folder or its ``study.json``; :class:`StudyError` when it is not one."""
    path = Path(path)
    file = path / STUDY_JSON if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        shape = json_shapes.problem(data, json_shapes.STUDY_JSON)  # issue 59: a damaged file is exit 2, named
        if shape:
            raise ValueError(shape)
        runs = [StudyRun.from_dict(r) for r in data.get("runs") or []]
        folder = file.resolve().parent
        for run in runs:  # paths relative to the folder; old studies stored absolute ones
            run.log = _resolve(run.log, folder, folder / f"run{run.index}" / LOG_NAME)
            run.run_dir = _resolve(run.run_dir, folder)
        study = Study(dict(data["settings"]), runs, file, list(data.get("failed") or []))
    except FileNotFoundError:
        raise StudyError(f"{path} is not a seed study: no {STUDY_JSON} (make one with yolo-det seeds)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StudyError(f"{file} cannot be read as a seed study ({type(exc).__name__}: {exc})") from None
    return study


def _other_mode(recorded: Optional[str], mode: Optional[str]) -> Optional[str]:
    """The taint of a run recorded under ``recorded`` in a study of ``mode`` (None: the same, or unknown)."""
    if not recorded or not mode or recorded == mode:
        return None
    return f"ran under {recorded}, not the study's {mode}"


__all__ = ["STUDY_CSV", "STUDY_JSON", "Study", "StudyError", "StudyRun", "StudyStop", "higher_is_better", "load_study"]
