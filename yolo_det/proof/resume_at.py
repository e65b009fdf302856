"""``yolo-det verify --resume-at K``: is a run that was stopped and resumed the same as one that was not?

Run 1 trains uninterrupted. Each further run trains with ``$YOLO_DET_STOP_AFTER_EPOCH=K``: the
integration stops it cleanly once K epochs are complete and their checkpoint (and its resume
sidecar) are on disk, and writes ``$YOLO_DET_RUN_INFO`` (a JSON file: the checkpoint and the
release's own resume command, e.g. ``python train.py --resume <run>/weights/last.pt`` for YOLOv5
or ``resume=True`` for Ultralytics). That command then runs in the same place. The two parts'
fingerprint logs are joined and compared with run 1 step by step; then the final resume states
(full-precision model and EMA beside ``last.pt``) and the per-epoch results (validation metrics,
``results.csv``) are compared. Result: identical, or the first divergence. Under ``off`` the
integrations write the run info but no resume state: the release's own resume is shown, and the
final checkpoints themselves are compared.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import torch

from ..core import env_names, verdicts
from .checkpoint import CheckpointError, compare_checkpoints
from .compare import Comparison, Divergence, compare_logs
from ..record.run_folder import RUN_INFO_NAME as INFO_NAME, SIDECAR_SUFFIX
from ..record.splice import join_logs
from .runner import RunResult, VerifyError, run_once, substitute

STOP_ENV = env_names.STOP_AFTER_EPOCH
INFO_ENV = env_names.RUN_INFO
#: a completed run keeps its full resume state: the uninterrupted and resumed runs' final states are compared
KEEP_ENV = env_names.KEEP_RESUME


@dataclass
class ResumedRun:
    """One interrupted-and-resumed run: both processes, the joined log, and what was compared."""

    index: int
    first: RunResult
    second: RunResult
    checkpoint: Path
    comparison: Comparison
    checkpoints: Optional[str] = None  # first differing final-state tensor, or None when equal
    results: Optional[str] = None  # first differing results.csv entry, or None when equal


@dataclass
class ResumeResult(verdicts.Judged):
    """Run 1 (uninterrupted) and every resumed run compared with it."""

    baseline: RunResult
    baseline_checkpoint: Optional[Path]
    resumed: List[ResumedRun]
    resume_at: int
    notes: List[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return all(r.comparison.identical and r.checkpoints is None and r.results is None for r in self.resumed)

    @property
    def verdict(self) -> str:
        """``identical``; ``differs`` (steps, final state or results of a resumed run); ``not proven`` (the logs hold
        nothing to compare) or ``inconclusive`` (the logs cannot be compared)."""
        worst = self.worst
        if self.identical:
            return verdicts.IDENTICAL
        if worst.comparison.first_divergence is not None or worst.checkpoints or worst.results:
            return verdicts.DIFFERS
        return verdicts.NOT_PROVEN if worst.comparison.not_proven else verdicts.INCONCLUSIVE

    @property
    def worst(self) -> ResumedRun:
        diverged = [r for r in self.resumed if r.comparison.first_divergence is not None]
        if diverged:
            return min(diverged, key=lambda r: Divergence.sort_key(r.comparison.first_divergence))
        return next((r for r in self.resumed if not self._ok(r)), self.resumed[0])

    @staticmethod
    def _ok(r: ResumedRun) -> bool:
        return r.comparison.identical and r.checkpoints is None and r.results is None

    def describe(self) -> List[str]:
        lines: List[str] = []
        for r in self.resumed:
            what = f"run {r.index} (stopped after epoch {self.resume_at}, resumed from {r.checkpoint})"
            if self._ok(r):
                lines.append(f"{what}: identical to run 1: {r.comparison.steps} steps, {r.comparison.tensors} "
                             "tensors, final resume state and results")
                continue
            lines.append(f"{what}: differs from run 1")
            if not r.comparison.identical:
                lines += ["  " + line for line in r.comparison.describe(labels=("run 1", f"run {r.index}"))]
            if r.checkpoints:
                lines.append(f"  final state: {r.checkpoints}")
            if r.results:
                lines.append(f"  results: {r.results}")
        return lines + [f"note: {n}" for n in self.notes]

    def to_json(self) -> Dict[str, Any]:
        worst = self.worst
        out = worst.comparison.to_json()
        out.update({
            "identical": self.identical, "resume_at": self.resume_at, "final_state": worst.checkpoints,
            "results": worst.results, "notes": list(self.notes),
            "runs": [{"run": 1, "log": str(self.baseline.log), "checkpoint": str(self.baseline_checkpoint)}] + [
                {"run": r.index, "logs": [str(r.first.log), str(r.second.log)], "checkpoint": str(r.checkpoint),
                 "identical": self._ok(r), "final_state": r.checkpoints, "results": r.results}
                for r in self.resumed],
        })
        return self.stamped(out)


def _info(path: Path, index: int, what: str) -> Dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise VerifyError(f"run {index} ({what}) left no readable {path.name}: the command does not use a "
                          "yolo-det integration that supports --resume-at (a train.py patched by this yolo-det, "
                          "or yolo-det's Ultralytics trainer)") from None
    if not isinstance(data, dict) or not data.get("checkpoint"):
        raise VerifyError(f"{path} names no checkpoint")
    return data


def compare_final_states(a: Optional[Path], b: Optional[Path]) -> Optional[str]:
    """The first difference between two runs' final resume states (fp32 model, EMA), or None.

    Runs under off write no resume state: their checkpoints themselves (the release's) are compared.
    """
    if a is None or b is None:
        return None
    sa, sb = (Path(str(p) + SIDECAR_SUFFIX) for p in (a, b))
    if not sa.is_file() and not sb.is_file():
        return _checkpoint_difference(a, b)
    if not sa.is_file() or not sb.is_file():
        missing = [str(p) for p in (sa, sb) if not p.is_file()]
        return f"no final resume state to compare ({', '.join(missing)} missing)"
    load = {"map_location": "cpu"}
    try:
        da, db = (torch.load(p, weights_only=True, **load) for p in (sa, sb))
    except TypeError:  # pragma: no cover - torch < 1.13
        da, db = (torch.load(p, **load) for p in (sa, sb))
    if da.get("epoch") != db.get("epoch"):
        return f"saved after different epochs: {da.get('epoch')} vs {db.get('epoch')}"
    for part in ("model", "ema", "optimizer"):
        ta, tb = da.get(part), db.get(part)
        if part == "optimizer" and (ta is None or tb is None):
            continue
        why = _first_difference(ta, tb, part)
        if why:
            return why
    return None


def _checkpoint_difference(a: Path, b: Path) -> Optional[str]:
    try:
        comparison = compare_checkpoints(a, b)
    except (CheckpointError, OSError) as exc:
        return f"the final checkpoints cannot be compared: {exc}"
    if not comparison.differing:  # the fingerprint logs decide a resume; a checkpoint without tensors adds nothing
        return None
    first = comparison.differing[0]
    return f"{a.name}: {first.name}: {first.reason} ({len(comparison.differing)} entries differ)"


def _first_difference(a: Any, b: Any, where: str) -> Optional[str]:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{where}: present in one run only"
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
            return f"{where} differs"
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            why = _first_difference(a.get(key), b.get(key), f"{where}.{key}")
            if why:
                return why
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{where}: {len(a)} vs {len(b)} entries"
        for i, (x, y) in enumerate(zip(a, b)):
            why = _first_difference(x, y, f"{where}[{i}]")
            if why:
                return why
        return None
    return None if a == b else f"{where}: {a!r} vs {b!r}"


def compare_results(a: Optional[Path], b: Optional[Path]) -> Optional[str]:
    """The first differing entry of two runs' ``results.csv`` (per-epoch losses and validation), or None.

    Columns about time are skipped. Missing files compare as equal (the release writes none).
    """
    files = [None if p is None else p.parent.parent / "results.csv" for p in (a, b)]
    if any(f is None or not f.is_file() for f in files):
        return None
    rows = []
    for f in files:
        with open(f, newline="", encoding="utf-8") as handle:
            rows.append([{k.strip(): v.strip() for k, v in row.items() if k is not None}
                         for row in csv.DictReader(handle)])
    ra, rb = rows
    if len(ra) != len(rb):
        return f"results.csv has {len(ra)} epochs in run 1, {len(rb)} in the other"
    for epoch, (x, y) in enumerate(zip(ra, rb), start=1):
        for key in x:
            if "time" in key.lower():
                continue
            if x.get(key) != y.get(key):
                return f"epoch {epoch}: {key} {x.get(key)} vs {y.get(key)} (results.csv)"
    return None


def verify_resume(cmd: Sequence[str], resume_at: int, runs: int = 2, workdir: os.PathLike = "yolo-det-verify",
                  progress: Optional[Callable[[str], None]] = None, *, env: Optional[Mapping[str, str]] = None,
                  cwd: Optional[os.PathLike] = None, poll: float = 0.5, timeout: Optional[float] = None,
                  before_resume: Optional[Callable[[Path], None]] = None) -> ResumeResult:
    """Run ``cmd`` uninterrupted, then ``runs - 1`` times stopped after epoch ``resume_at`` and resumed.

    ``before_resume(checkpoint)`` runs between stop and resume (tests use it to delete the sidecar,
    the documented negative control). Raises :class:`VerifyError` / ``RunFailedError`` like
    :func:`~yolo_det.proof.verify.verify`.
    """
    cmd = [str(c) for c in cmd]
    if not cmd:
        raise VerifyError("no training command given")
    if runs < 2:
        raise VerifyError(f"runs must be at least 2, got {runs}")
    if resume_at < 1:
        raise VerifyError(f"--resume-at must be an epoch count >= 1, got {resume_at}")
    report = progress or (lambda _message: None)
    base_env = dict(os.environ if env is None else env)
    base_env.pop(STOP_ENV, None)
    workdir = Path(workdir).resolve()
    total = 2 * runs - 1

    def info_env(run_dir: Path, **extra: str) -> Dict[str, str]:
        info = run_dir / INFO_NAME
        info.parent.mkdir(parents=True, exist_ok=True)
        if info.exists():
            info.unlink()
        return {**base_env, INFO_ENV: str(info), KEEP_ENV: "1", **extra}  # the final states are compared

    run1_dir = workdir / "run1"
    baseline = run_once(substitute(cmd, 1), 1, total, run1_dir, info_env(run1_dir), cwd, report, poll, timeout)
    baseline_ckpt = Path(_info(run1_dir / INFO_NAME, 1, "uninterrupted")["checkpoint"])
    resumed: List[ResumedRun] = []
    for i in range(2, runs + 1):
        run_dir = workdir / f"run{i}"
        first = run_once(substitute(cmd, i), i, total, run_dir, info_env(run_dir, **{STOP_ENV: str(resume_at)}),
                          cwd, report, poll, timeout)
        info = _info(run_dir / INFO_NAME, i, f"stopped after epoch {resume_at}")
        if info.get("stopped_after_epoch") != resume_at:
            raise VerifyError(f"run {i} did not stop after epoch {resume_at} (it trained "
                              f"{info.get('epochs_done', '?')} epochs): is --resume-at below the number of epochs?")
        checkpoint = Path(info["checkpoint"])
        resume_cmd = [str(c) for c in info.get("resume_command") or []]
        if not resume_cmd:
            raise VerifyError(f"run {i}'s integration gave no resume command")
        if before_resume is not None:
            before_resume(checkpoint)
        resume_dir = run_dir / "resumed"
        second = run_once(resume_cmd, i, total, resume_dir, info_env(resume_dir), info.get("cwd") or cwd, report,
                           poll, timeout)
        final_ckpt = Path(_info(resume_dir / INFO_NAME, i, "resumed")["checkpoint"])
        comparison = compare_logs(baseline.log, join_logs(first.log, second.log))
        resumed.append(ResumedRun(i, first, second, checkpoint, comparison,
                                  compare_final_states(baseline_ckpt, final_ckpt),
                                  compare_results(baseline_ckpt, final_ckpt)))
    sidecar = Path(f"{baseline_ckpt}{SIDECAR_SUFFIX}")
    notes = [f"run 1's final state: {sidecar}" if sidecar.is_file() else
             f"run 1's final checkpoint: {baseline_ckpt} (no resume state: the run trained under off, so the "
             "release's own resume was compared)"]
    return ResumeResult(baseline, baseline_ckpt, resumed, resume_at, notes)


__all__ = ["INFO_ENV", "STOP_ENV", "ResumeResult", "ResumedRun", "compare_final_states",
           "compare_results", "verify_resume"]
