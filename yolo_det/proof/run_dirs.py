"""Two run folders compared from what the releases write, also for runs made without yolo-det.

A YOLOv5-family run leaves ``opt.yaml`` and ``hyp.yaml`` (the parsed options and the
hyperparameters after defaults), an Ultralytics run ``args.yaml`` (every argument after defaults
and overrides); both leave ``results.csv`` and ``weights/*.pt``, whose top level records the
release (Ultralytics ``version``, PyPI yolov5 ``yolov5pip_version``) and the training arguments
(``train_args`` / ``opt``). yolo-det runs add ``determinism.json`` and ``data_manifest.json``.
Causes come first: releases, settings key by key (with the release that has or lacks a key),
data files, environment; then metrics per epoch and the checkpoints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..core import data_manifest, verdicts
from ..record.run_folder import LOG_NAME, REPORT_NAME, RunFolderError, find_log, read_report
from .artifacts import CHECKPOINTS, RESULTS, compare_run_dirs, _read_table
from .causes import Cause, manifest_causes, report_causes
from .checkpoint import CheckpointError, load_checkpoint
from .settings import (SETTINGS_FILES, SettingsError, differences, read_settings, release_from_report,
                       settings_cause_message)

MARKERS = SETTINGS_FILES + (RESULTS, REPORT_NAME) + CHECKPOINTS
#: results.csv columns shown per epoch (the first present wins per family).
METRIC_COLUMNS = ("metrics/mAP50-95(B)", "metrics/mAP_0.5:0.95", "metrics/mAP50(B)", "metrics/mAP_0.5")
LIMIT = 12


class RunDirError(ValueError):
    """A folder is not a training run folder yolo-det can read."""


def is_run_dir(folder: "os.PathLike[str] | str") -> bool:
    """Whether ``folder`` holds any file a YOLOv5 or Ultralytics training run writes."""
    return Path(folder).is_dir() and any((Path(folder) / name).is_file() for name in MARKERS)


@dataclass
class RunFolder:
    """What one run folder says about how it was made."""

    path: Path
    release: Optional[str] = None  # "ultralytics 8.4.190", "yolov5 7.0.14"
    settings: Dict[str, Any] = field(default_factory=dict)  # flat: "lr0", "hyp.lr0", ...
    settings_from: List[str] = field(default_factory=list)
    report: Optional[Dict[str, Any]] = None
    manifest: Optional[Dict[str, Any]] = None
    notes: List[str] = field(default_factory=list)
    log: Optional[Path] = None  # the run's fingerprint log: its own fingerprint.jsonl, else where the report points

    @classmethod
    def read(cls, path: "os.PathLike[str] | str") -> "RunFolder":
        folder = cls(Path(path))
        if not is_run_dir(folder.path):
            raise RunDirError(f"{folder.path} is not a training run folder (none of {', '.join(MARKERS)}); give "
                              "the folder a YOLOv5 or Ultralytics run saved into (runs/train/exp, runs/detect/train)")
        try:
            folder.settings, folder.settings_from = read_settings(folder.path)
        except SettingsError as exc:
            raise RunDirError(str(exc)) from None
        checkpoint = next((folder.path / c for c in CHECKPOINTS if (folder.path / c).is_file()), None)
        if checkpoint is not None:
            try:
                ckpt = load_checkpoint(checkpoint)
            except CheckpointError as exc:
                folder.notes.append(str(exc))
                ckpt = {}
            folder.release = _release(ckpt)
            if not folder.settings:  # a folder with weights only: the arguments the checkpoint recorded
                args = ckpt.get("train_args") or ckpt.get("opt")
                if isinstance(args, dict):
                    folder.settings = {str(k): v for k, v in args.items()}
                    folder.settings_from.append(f"{checkpoint.relative_to(folder.path)} (training arguments)")
        try:
            folder.report = read_report(folder.path)
        except RunFolderError as exc:
            folder.notes.append(str(exc))
        if folder.release is None and folder.report is not None:
            folder.release = release_from_report(folder.report)
        try:
            folder.manifest = data_manifest.read(folder.path)
        except ValueError as exc:
            folder.notes.append(str(exc))
        folder.log = find_log(folder.path, folder.report)
        return folder


def _release(ckpt: Mapping[str, Any]) -> Optional[str]:
    if isinstance(ckpt.get("version"), str):
        return f"ultralytics {ckpt['version']}"
    for key, value in ckpt.items():
        if isinstance(key, str) and key.endswith("_version") and isinstance(value, str):
            return f"{key[: -len('_version')].replace('pip', '')} {value}"
    return None


def settings_differences(a: RunFolder, b: RunFolder) -> List[str]:
    """Every resolved setting that differs between two run folders, key by key, with their releases."""
    return differences(a.settings, b.settings, a.release, b.release)


def _metric_rows(a: Path, b: Path) -> Tuple[Optional[str], List[Tuple[str, str, str]]]:
    """(column, [(epoch, A, B)]) of the main metric per epoch, where both tables have it."""
    if not (a / RESULTS).is_file() or not (b / RESULTS).is_file():
        return None, []
    try:
        ha, ra = _read_table(a / RESULTS)
        hb, rb = _read_table(b / RESULTS)
    except CheckpointError:
        return None, []
    column = next((c for c in METRIC_COLUMNS if c in ha and c in hb), None)
    if column is None:
        return None, []
    ia, ib = ha.index(column), hb.index(column)
    rows = []
    for number in range(max(len(ra), len(rb))):
        va = ra[number][ia] if number < len(ra) and ia < len(ra[number]) else "-"
        vb = rb[number][ib] if number < len(rb) and ib < len(rb[number]) else "-"
        epoch = (ra[number] if number < len(ra) else rb[number])[0]
        rows.append((epoch, va, vb))
    return column, rows


@dataclass
class RunComparison(verdicts.Judged):
    """Two run folders: causes first (releases, settings, data, environment), then results and checkpoints."""

    folders: Tuple[str, str]
    releases: Tuple[Optional[str], Optional[str]]
    causes: List[Cause] = field(default_factory=list)
    settings: List[str] = field(default_factory=list)
    metric: Optional[str] = None
    metrics: List[Tuple[str, str, str]] = field(default_factory=list)
    artifacts: Any = None
    notes: List[str] = field(default_factory=list)
    compared: List[str] = field(default_factory=list)  # what was compared: "releases", "settings (opt.yaml)", ...
    steps: Any = None  # proof.compare.Comparison of the runs' fingerprint logs, where both have one

    @property
    def differs(self) -> bool:
        """A cause (release, setting, data, environment), a metric, a checkpoint or results.csv differs."""
        metrics = any(va != vb for _, va, vb in self.metrics)
        steps = self.steps is not None and self.steps.first_divergence is not None
        return bool(self.causes) or metrics or steps or (self.artifacts is not None and self.artifacts.differs)

    @property
    def proven(self) -> bool:
        """Whether the weights (what decides that two runs made the same model) were compared tensor by tensor:
        in the checkpoints, or step by step and at the end in the runs' fingerprint logs."""
        return (self.artifacts is not None and self.artifacts.proven) or \
            (self.steps is not None and self.steps.identical)

    @property
    def identical(self) -> bool:
        """Nothing differs and the weights were compared: never true from an empty comparison."""
        return not self.differs and self.proven

    @property
    def verdict(self) -> str:
        """``identical``, ``differs`` or ``not proven`` (nothing differs among what was compared, weights not)."""
        return verdicts.DIFFERS if self.differs else verdicts.IDENTICAL if self.proven else verdicts.NOT_PROVEN

    def not_compared(self) -> List[str]:
        """What decides the verdict but was not compared (the weights, results.csv)."""
        out = []
        if self.artifacts is None:
            out.append("weights and results.csv (not asked for)")
        else:
            if not any(c.proven for c in self.artifacts.checkpoints.values()):
                out.append("weights (" + (", ".join(c for c in CHECKPOINTS if c in self.artifacts.missing)
                                          or "no tensors in the checkpoints") + ")")
            if self.artifacts.results is None or not self.artifacts.results.rows:
                out.append(RESULTS)
        return out

    def _headline(self) -> str:
        compared = ", ".join(self.compared) or "nothing"
        if self.verdict == verdicts.IDENTICAL:
            return f"identical: {compared}"
        if self.verdict == verdicts.DIFFERS:
            return "differ"
        return (f"not proven: nothing differs in what was compared ({compared}), but "
                f"{' and '.join(self.not_compared())} were not compared (missing in both folders), so the runs "
                "are not shown identical")

    def describe(self) -> List[str]:
        lines = [f"likely cause ({c.cls}): {c.message}" for c in self.causes]
        if self.steps is not None and not self.steps.identical:
            lines += [f"fingerprint logs: {line}" for line in self.steps.describe() if not line.startswith("cause:")]
        if self.settings:
            lines.append(f"settings that differ ({len(self.settings)}):")
            lines += [f"  {line}" for line in self.settings[:LIMIT]]
            if len(self.settings) > LIMIT:
                lines.append(f"  ... and {len(self.settings) - LIMIT} more (--json lists them all)")
        if self.metric and any(va != vb for _, va, vb in self.metrics):
            lines.append(f"{self.metric} per epoch (A vs B):")
            lines += [f"  epoch {e}: {va} vs {vb}{'' if va == vb else '  <'}" for e, va, vb in self.metrics[:LIMIT]]
        if self.artifacts is not None:
            lines += self.artifacts.describe()
        lines += [f"note: {n}" for n in self.notes]
        head = (f"A = {self.folders[0]} ({self.releases[0] or 'release unknown'}), "
                f"B = {self.folders[1]} ({self.releases[1] or 'release unknown'})")
        return [f"{self._headline()} - {head}"] + lines

    def to_json(self) -> Dict[str, Any]:
        return self.stamped({"identical": self.identical, "compared": list(self.compared),
                "not_compared": self.not_compared() if self.verdict == verdicts.NOT_PROVEN else [],
                "folders": list(self.folders), "releases": list(self.releases),
                "causes": [c.to_dict() for c in self.causes], "settings": list(self.settings),
                "metric": self.metric, "metrics": [list(r) for r in self.metrics],
                "artifacts": self.artifacts.to_json() if self.artifacts is not None else None,
                "steps": self.steps.to_json() if self.steps is not None else None,
                "notes": list(self.notes)})


def _data_causes(a: RunFolder, b: RunFolder, notes: List[str]) -> Optional[List[Cause]]:
    """Data files compared from the manifests the runs recorded; where only one did, against the other
    run's dataset as it is now (if it is still there). None: the data files were not compared."""
    ma, mb = a.manifest, b.manifest
    if ma is None and mb is None:
        notes.append("data files not compared: neither run recorded a data manifest (runs made without yolo-det)")
        return None
    if ma is None or mb is None:
        data = (a if ma is None else b).settings.get("data")
        side = "A" if ma is None else "B"
        try:
            current = data_manifest.from_data_yaml(str(data)) if data else None
        except (OSError, ValueError) as exc:
            current = None
            notes.append(f"run {side} recorded no data manifest and its data {data} cannot be read now ({exc})")
        if current is None:
            return None
        notes.append(f"run {side} recorded no data manifest: its data is compared as it is now ({data})")
        ma, mb = (current, mb) if side == "A" else (ma, current)
    return manifest_causes(ma, mb)


def _compare_logs(fa: RunFolder, fb: RunFolder, result: "RunComparison") -> None:
    """Both runs' fingerprint logs, step by step (first divergent step and kind), where both have one."""
    if fa.log is None or fb.log is None:
        if fa.log is not None or fb.log is not None:
            result.notes.append(f"only run {'A' if fa.log is not None else 'B'} has a fingerprint log: steps not "
                                "compared")
        return
    from ..record.log import FingerprintError
    from .compare import compare_logs

    if _same_file(fa.log, fb.log):  # a log compared with itself proves nothing about two runs
        result.notes.append(f"both runs name the same fingerprint log {fa.log} (determinism.json's fingerprint_log: "
                            "the later run overwrote the earlier one's): steps not compared")
        return
    for folder, side in ((fa, "A"), (fb, "B")):
        other = _log_of_another_run(folder)
        if other is not None:
            result.notes.append(f"run {side}'s determinism.json names the fingerprint log {folder.log}, which another "
                                f"run ({other}) wrote since: steps not compared")
            return
    try:
        result.steps = compare_logs(fa.log, fb.log)
    except FingerprintError as exc:
        result.notes.append(f"fingerprint logs not compared: {exc}")
        return
    steps = result.steps
    result.compared.append(f"fingerprint logs ({steps.steps} steps, {steps.validations} validations)")
    if steps.problem and steps.first_divergence is None:
        result.notes.append(f"fingerprint logs: {steps.problem}")


def _log_of_another_run(folder: RunFolder) -> Optional[str]:
    """The run folder a log pointed to by ``determinism.json`` says it belongs to (its final line's ``run_dir``,
    from its header's ``cwd`` where relative), when that is another existing folder; None when it is this run's
    log, the run folder's own ``fingerprint.jsonl``, or it cannot be told."""
    from ..record.log import FingerprintError, LogReader

    if folder.log is None or folder.log == folder.path / LOG_NAME:
        return None
    try:
        with LogReader(folder.log) as reader:
            for _ in reader:
                pass
            final, cwd = reader.final, reader.header.get("cwd")
    except (FingerprintError, OSError):
        return None
    if final is None or not final.run_dir:
        return None
    run_dir = Path(final.run_dir)
    if not run_dir.is_absolute():
        if not isinstance(cwd, str):
            return None
        run_dir = Path(cwd) / run_dir
    if not run_dir.is_dir() or _same_file(run_dir, folder.path):
        return None
    return str(run_dir)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def compare_runs(a: "os.PathLike[str] | str", b: "os.PathLike[str] | str",
                 weights: bool = True) -> RunComparison:
    """Compare two run folders (see the module docstring); ``weights``: also compare the checkpoints."""
    fa, fb = RunFolder.read(a), RunFolder.read(b)
    result = RunComparison((str(a), str(b)), (fa.release, fb.release))
    if fa.release != fb.release and fa.release and fb.release:
        result.causes.append(Cause("environment", "release", f"the runs used different releases: {fa.release} "
                                                              f"vs {fb.release}"))
    if fa.release and fb.release:
        result.compared.append("releases")
    result.settings = settings_differences(fa, fb)
    if fa.settings_from and fb.settings_from:
        files = sorted(set(fa.settings_from) | set(fb.settings_from))
        result.compared.append(f"settings ({', '.join(files)})")
    if result.settings:
        result.causes.append(Cause("config", "settings", settings_cause_message(result.settings, fa.settings_from,
                                                                                 fb.settings_from)))
    if not fa.settings_from or not fb.settings_from:
        result.notes.append("a run folder holds no args.yaml / opt.yaml / hyp.yaml: settings not fully compared")
    data = _data_causes(fa, fb, result.notes)
    if data is not None:
        result.causes += data
        result.compared.append("data files")
    if fa.report is not None and fb.report is not None:
        result.causes += report_causes(fa.report, fb.report)
        result.compared.append("environment (determinism.json)")
    order = {"environment": 0, "config": 1, "data": 2}
    result.causes.sort(key=lambda c: -1 if c.what == "compile" else order.get(c.cls, 3))  # compile explains the rest
    _compare_logs(fa, fb, result)
    result.metric, result.metrics = _metric_rows(fa.path, fb.path)
    if weights:
        result.artifacts = compare_run_dirs(fa.path, fb.path)
        for name, checkpoint in result.artifacts.checkpoints.items():
            if checkpoint.proven:
                result.compared.append(f"{name} ({checkpoint.tensor_count} tensors)")
        if result.artifacts.results is not None and result.artifacts.results.rows:
            result.compared.append(f"{RESULTS} ({result.artifacts.results.rows} rows)")
    elif result.metrics:
        result.compared.append(f"{result.metric} per epoch")
    result.notes += fa.notes + fb.notes
    return result


__all__ = ["RunComparison", "RunDirError", "RunFolder", "compare_runs", "is_run_dir", "settings_differences"]
