"""Is this the number training logged? A training run's validation record against a re-run of it.

:func:`find_run` reads a run folder (YOLOv5 ``opt.yaml`` or Ultralytics ``args.yaml``, its
``determinism.json`` and fingerprint log, its weights); :func:`select` picks the validation of an
epoch (``last``, ``best`` or a number) and the weights it validated: the full-precision EMA of
the checkpoint's yolo-det sidecar (``last.pt.yolo-det``, ``best.pt.yolo-det``), else the
checkpoint's fp16 weights, which can only be said. :func:`compare` holds the re-run's record
against the logged one, predictions and metrics bit for bit, and names what changed: the data
files (content digests of the run's data manifest against the files now), the weights, the
environment, the settings. A changed data file never gives "identical".
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from ..core import data_manifest, verdicts
from . import labels
from ..record.log import FingerprintError, ValRecord, read_log
from ..record.run_folder import SIDECAR_SUFFIX, RunFolderError, find_log, log_pointer, read_report

#: The settings compared between a logged validation and a re-run (the re-run rebuilds the rest).
SETTINGS = ("split", "batch_size", "imgsz", "rect", "pad", "half", "conf_thres", "iou_thres", "max_det",
            "single_cls", "augment", "task", "batch_shapes", "weights_dtype")
#: Environment facts that change a forward pass's bits.
ENVIRONMENT = ("torch", "cuda", "cudnn", "gpus", "driver", "cpu_threads")
#: results.csv columns of the four box metrics, per release.
CSV_METRICS = {
    "precision": ("metrics/precision", "metrics/precision(B)"), "recall": ("metrics/recall", "metrics/recall(B)"),
    "mAP50": ("metrics/mAP_0.5", "metrics/mAP50(B)"), "mAP50-95": ("metrics/mAP_0.5:0.95", "metrics/mAP50-95(B)"),
}


class NotARunError(ValueError):
    """The folder is not a training run yolo-det can re-validate (exit 2: nothing was run)."""


@dataclass
class Run:
    """A training run folder and what it recorded."""

    path: Path
    release: str  # "yolov5" | "ultralytics"
    report: Dict[str, Any]
    log: Optional[Path]
    validations: List[ValRecord]
    notes: List[str] = field(default_factory=list)

    @property
    def weights(self) -> Path:
        return self.path / "weights"

    @property
    def task(self) -> Optional[str]:
        """The Ultralytics task of the run (args.yaml), None for YOLOv5-family runs."""
        return _task(self.path) if self.release == "ultralytics" else None

    @property
    def mode(self) -> str:
        return str(self.report.get("mode") or "warn")

    @property
    def repo(self) -> Optional[str]:
        script = (self.report.get("yolov5") or {}).get("script") if self.release == "yolov5" else None
        return None if not script else str(Path(script).parent)


@dataclass
class Selection:
    """The validation to reproduce and the weights it validated."""

    which: str  # "last" | "best" | "epoch N"
    epoch: Optional[int]
    record: Optional[ValRecord]
    csv_metrics: Optional[Dict[str, float]]
    checkpoint: Path
    sidecar: Optional[Path]
    notes: List[str] = field(default_factory=list)
    csv_text: Dict[str, str] = field(default_factory=dict)  # results.csv's cells as printed (their own rounding)


@dataclass
class Difference:
    """One thing that differs between the logged validation and the re-run."""

    what: str  # data | weights | environment | settings | predictions | metrics | clock
    message: str
    training: Any = None
    rerun: Any = None

    def to_dict(self) -> Dict[str, Any]:
        return {"what": self.what, "message": self.message, "training": self.training, "rerun": self.rerun}


@dataclass
class Verdict(verdicts.Judged):
    """The re-run against the logged record."""

    identical: Optional[bool]  # None: nothing bit-exact to compare with (no fingerprint log, or an empty record)
    which: str
    epoch: Optional[int]
    logged: Dict[str, float]
    rerun: Dict[str, float]
    differences: List[Difference]
    notes: List[str]
    images: int = 0
    printed: List[str] = field(default_factory=list)  # no log: the results.csv metrics matched to their digits
    coco: Optional[Dict[str, Any]] = None  # --evaluator coco: the COCO API's numbers and the gap, labelled
    labels: Optional[Dict[str, Any]] = None  # logged_metrics / rerun_metrics -> which evaluator and rules gave them

    @property
    def verdict(self) -> str:
        """``identical`` (bit for bit), ``differs`` or ``not proven`` (only a statement: no bit-exact record)."""
        if self.identical:
            return verdicts.IDENTICAL
        if self.identical is False or decisive(self.differences):
            return verdicts.DIFFERS
        return verdicts.NOT_PROVEN

    def to_json(self) -> Dict[str, Any]:
        return self.stamped({"identical": self.identical, "validation": self.which, "epoch": self.epoch,
                "images": self.images, "logged_metrics": self.logged, "rerun_metrics": self.rerun,
                "matches_printed_digits": list(self.printed),
                "differences": [d.to_dict() for d in self.differences], "notes": list(self.notes),
                "metric_labels": self.labels or {},
                **({"coco": self.coco} if self.coco is not None else {})})

    def describe(self) -> List[str]:
        lines = self._describe()
        logged = (self.labels or {}).get("logged_metrics")
        if logged:
            lines.append(f"  metrics by: {logged['label']}")
        return lines

    def _describe(self) -> List[str]:
        head = f"validation of {label(self.which, self.epoch)}"
        if self.identical:
            lines = [f"{head}: identical to the logged record ({self.images} images' predictions and every metric, "
                     "bit for bit)"]
        elif self.verdict == "not proven" and self.printed:
            lines = [f"{head}: matches results.csv to its printed digits ({', '.join(self.printed)}): a statement, "
                     "not a proof -- not proven: the run has no fingerprint log, so the predictions and the metrics' "
                     "full bits were not compared"]
        elif self.verdict == "not proven" and self.images:
            lines = [f"{head}: not proven: equal to the logged record, but the equality could not have failed "
                     "(see the note)"]
        elif self.verdict == "not proven":
            lines = [f"{head}: not proven: nothing to compare the re-run with (no fingerprint log record and no "
                     "results.csv metric of that epoch)"]
        else:
            lines = [f"{head}: differs from the logged record"]
        lines += [f"  {d.what}: {d.message}" for d in self.differences]
        lines += [f"  note: {n}" for n in self.notes]
        return lines


def label(which: str, epoch: Optional[int]) -> str:
    """``best (epoch 17)``, ``epoch 3``: the validation as messages name it."""
    return which if epoch is None or which.startswith("epoch") else f"{which} (epoch {epoch})"


# -- the run ---------------------------------------------------------------------------------
def find_run(path: Union[str, Path], log: Optional[Union[str, Path]] = None) -> Run:
    """Read a run folder; :class:`NotARunError` when it is not one."""
    path = Path(path).resolve()
    if not path.is_dir():
        raise NotARunError(f"{path} is not a folder: give a training run's folder (runs/train/exp)")
    if (path / "opt.yaml").is_file():
        release = "yolov5"
    elif (path / "args.yaml").is_file():
        release = "ultralytics"
    else:
        raise NotARunError(f"{path} is not a training run: it has no opt.yaml (YOLOv5) or args.yaml (Ultralytics)")
    if not (path / "weights").is_dir():
        raise NotARunError(f"{path} has no weights/ folder: the run saved no checkpoint to validate")
    try:
        report: Dict[str, Any] = read_report(path) or {}
    except RunFolderError as exc:
        raise NotARunError(f"{exc.path} cannot be read ({exc.reason})") from None
    notes = []
    if not report:
        notes.append("the run has no determinism.json: it was not trained under yolo-det")
    log_path = Path(log) if log else find_log(path, report) or log_pointer(report)  # a pointer to a gone log: noted
    validations: List[ValRecord] = []
    if log_path is not None:
        if not log_path.is_file():
            notes.append(f"the run's fingerprint log {log_path} is gone: only results.csv can be compared")
            log_path = None
        else:
            try:
                validations = [v for v in read_log(log_path).validations if v.names]
            except FingerprintError as exc:
                raise NotARunError(str(exc)) from None
    elif report:
        notes.append("the run was not fingerprinted (no YOLO_DET_FINGERPRINT): only results.csv can be compared")
    if release == "ultralytics" and _task(path) == "classify":
        # Its class scores are recorded, but a re-run of a 1-epoch run gave other scores for some images with the
        # same weights and metrics (cause not found), and no data manifest covers class folders: no verdict yet.
        raise NotARunError(f"{path} is a classification run: yolo-det val does not re-run classification "
                           "validations yet; it re-runs detect, segment, pose and obb validations")
    return Run(path, release, report, log_path, validations, notes)


def _task(path: Path) -> Optional[str]:
    import yaml

    try:
        return (yaml.safe_load((path / "args.yaml").read_text(encoding="utf-8")) or {}).get("task")
    except (OSError, ValueError):
        return None


def select(run: Run, epoch: str = "last") -> Selection:
    """The validation ``epoch`` names (``last``, ``best`` or a number) and the weights it validated."""
    records = run.validations
    notes: List[str] = []
    if epoch == "last":
        record = records[-1] if records else None
    elif epoch == "best":
        best = [v for v in records if v.best]
        record = best[-1] if best else None
    else:
        try:
            number = int(epoch)
        except ValueError:
            raise NotARunError(f"--epoch {epoch!r}: give last, best or an epoch number") from None
        record = next((v for v in reversed(records) if v.epoch == number), None)
        if records and record is None:
            raise NotARunError(f"the run's log has no validation of epoch {number} "
                               f"(it has {', '.join(str(v.epoch) for v in records)})")
    csv_metrics, csv_epoch, csv_text = _csv_row(run, epoch, record)
    number = record.epoch if record is not None else csv_epoch
    checkpoint, sidecar = _weights(run, epoch, number, notes)
    which = epoch if epoch in ("last", "best") else f"epoch {epoch}"
    return Selection(which, number, record, csv_metrics, checkpoint, sidecar, notes, csv_text)


def _weights(run: Run, which: str, epoch: Optional[int], notes: List[str]):
    """The checkpoint of that validation and its full-precision sidecar (None: only fp16 weights exist)."""
    candidates = [which] if which in ("last", "best") else ["last", "best"]
    for name in candidates:
        checkpoint = run.weights / f"{name}.pt"
        sidecar = checkpoint.with_name(checkpoint.name + SIDECAR_SUFFIX)
        if not checkpoint.is_file():
            continue
        sidecar_epoch = _sidecar_epoch(sidecar)
        if sidecar_epoch is not None and (epoch is None or sidecar_epoch == epoch):
            return checkpoint, sidecar
        if which in ("last", "best"):
            if sidecar_epoch is not None:
                notes.append(f"{sidecar.name} holds epoch {sidecar_epoch}, the validation is of epoch {epoch}")
            notes.append(f"only the fp16 weights of {checkpoint.name} exist (no full-precision EMA beside it: "
                         "the run was trained under off, or before yolo-det kept it); the training validated the "
                         "full-precision EMA, so the re-run cannot be expected to match bit for bit")
            return checkpoint, None
    numbered = run.weights / f"epoch{epoch}.pt"
    if numbered.is_file():
        notes.append(f"only the fp16 weights of {numbered.name} exist for epoch {epoch}; the training validated the "
                     "full-precision EMA, so the re-run cannot be expected to match bit for bit")
        return numbered, None
    kept = ", ".join(f"{name}.pt (epoch {_sidecar_epoch(run.weights / f'{name}.pt{SIDECAR_SUFFIX}')})"
                     for name in ("last", "best") if (run.weights / f"{name}.pt").is_file())
    raise NotARunError(f"no weights of epoch {epoch} were kept (the run has {kept or 'no checkpoint'})")


def _sidecar_epoch(path: Path) -> Optional[int]:
    if not path.is_file():
        return None
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - an unreadable sidecar is as good as none
        return None
    epoch = state.get("epoch") if isinstance(state, dict) else None
    return int(epoch) if isinstance(epoch, int) else None


def _csv_row(run: Run, which: str, record: Optional[ValRecord]):
    """(metrics, epoch, cells as printed) of results.csv's row for the validation (its last row for ``last``)."""
    path = run.path / "results.csv"
    if not path.is_file():
        return None, None, {}
    with path.open(newline="", encoding="utf-8") as handle:
        rows = [{k.strip(): (v or "").strip() for k, v in row.items() if k} for row in csv.DictReader(handle)]
    if not rows:
        return None, None, {}
    offset = 1 if run.release == "ultralytics" else 0  # Ultralytics numbers its rows from 1
    wanted = record.epoch if record is not None else None if which in ("last", "best") else _int(which)
    if wanted is not None:
        row = next((r for r in rows if _int(r.get("epoch")) == wanted + offset), None)
    elif which == "last":
        row = rows[-1]
    else:
        row = rows[max((_fitness(r), i) for i, r in enumerate(rows))[1]]
    if row is None:
        return None, None, {}
    text = {name: next((row[c] for c in columns if c in row), None) for name, columns in CSV_METRICS.items()}
    metrics = {name: _float(value) for name, value in text.items()}
    epoch = _int(row.get("epoch"))
    return metrics, None if epoch is None else epoch - offset, {k: v for k, v in text.items() if v}


def _fitness(row: Dict[str, str]) -> float:
    values = [_float(next((row[c] for c in columns if c in row), None)) for columns in CSV_METRICS.values()]
    return 0.1 * values[2] + 0.9 * values[3] if all(not math.isnan(v) for v in values[2:]) else -math.inf


# -- comparing -------------------------------------------------------------------------------
def data_differences(run: Run, split: str = "val") -> List[Difference]:
    """The validation split's files that changed since training, by content; the data the manifest knows now."""
    recorded = data_manifest.read(run.path)
    data = _data_yaml(run)
    if data is None or (recorded is None and run.task == "classify"):  # a class-folder dataset: no manifest kept
        return []
    try:
        now = data_manifest.from_data_yaml(data, splits=(split,))
    except Exception as exc:  # noqa: BLE001 - a data.yaml that no longer resolves
        return [Difference("data", f"the run's data {data} cannot be read now ({type(exc).__name__}: {exc})")]
    if recorded is None:
        return []  # the caller notes that only the current state is known
    changes = data_manifest.compare(recorded, now, splits=(split,))
    if changes.empty:
        return []
    return [Difference("data", changes.describe(), training="data_manifest.json", rerun="the files now")]


def _data_yaml(run: Run) -> Optional[str]:
    import yaml

    name = "opt.yaml" if run.release == "yolov5" else "args.yaml"
    try:
        return (yaml.safe_load((run.path / name).read_text(encoding="utf-8")) or {}).get("data")
    except (OSError, ValueError):
        return None


def compare(run: Run, selection: Selection, record: Optional[ValRecord], weights: Dict[str, Any],
            environment: Dict[str, Any], notes: Sequence[str] = ()) -> Verdict:
    """The re-run ``record`` (its ``weights`` and ``environment``) against the logged validation; each side's
    metrics labelled with the evaluator and rules that gave them (``metric_labels``)."""
    verdict = _compare(run, selection, record, weights, environment, notes)
    logged = selection.record
    verdict.labels = {
        "logged_metrics": labels.of_record(logged.evaluator) if logged is not None else
        {**labels.UNLABELLED, "label": f"results.csv as the {run.release} release printed it (its own metric, "
                                       "rounded to the printed digits)"},
        "rerun_metrics": labels.of_record(record.evaluator) if record is not None else None}
    return verdict


def _compare(run: Run, selection: Selection, record: Optional[ValRecord], weights: Dict[str, Any],
             environment: Dict[str, Any], notes: Sequence[str] = ()) -> Verdict:
    logged = selection.record
    differences = data_differences(run)
    all_notes = list(run.notes) + list(selection.notes) + list(notes)
    if data_manifest.read(run.path) is None and run.task == "classify":
        all_notes.append("yolo-det keeps no data manifest for a classification dataset (class folders): whether its "
                         "image files changed since training is not checked")
    elif data_manifest.read(run.path) is None:
        all_notes.append("the run has no data_manifest.json (trained before yolo-det recorded it): the data files "
                         "are known only as they are now, not whether they changed since training")
    differences += _environment_differences(run.report.get("environment") or {}, environment)
    rerun_metrics = dict(record.metrics) if record is not None else {}
    if logged is None:
        logged_metrics = dict(selection.csv_metrics or {})
        printed = []
        for name, value in logged_metrics.items():
            got, text = rerun_metrics.get(name), selection.csv_text.get(name)
            if got is None or text is None:
                continue
            if printed_match(run.release, text, got):
                printed.append(f"{name} {text}")
            else:
                differences.append(Difference("metrics", f"{name}: results.csv {text}, re-run {got!r} (not equal to "
                                                         f"the file's printed digits: {_rounding(run.release)})",
                                              value, got))
        if not printed and not decisive(differences):
            all_notes.append("no metric of results.csv was compared with the re-run")
        return Verdict(None, selection.which, selection.epoch, logged_metrics, rerun_metrics, differences, all_notes,
                       printed=printed)
    logged_settings, rerun_settings = logged.settings or {}, (record.settings if record is not None else None) or {}
    if logged.settings is None:
        all_notes.append("the logged record has no settings (logged before yolo-det recorded them)")
    for key in SETTINGS:
        a, b = logged_settings.get(key), rerun_settings.get(key)
        if logged.settings is not None and a != b and a is not None:
            differences.append(Difference("settings", f"{key}: training {_short(a)}, re-run {_short(b)}", a, b))
    a_digest, b_digest = logged_settings.get("weights_digest"), weights.get("digest")
    if a_digest and b_digest:  # the record knows the weights it validated: compare contents
        if a_digest != b_digest:
            differences.append(Difference("weights", f"the weights are not the ones the training validated "
                                                     f"({weights.get('source')}: digest {b_digest[:12]}, training "
                                                     f"{a_digest[:12]})", a_digest, b_digest))
    elif not weights.get("sidecar"):
        differences.append(Difference("weights", f"re-run with the {weights.get('source', 'checkpoint weights')}; "
                                                 "the training validated the full-precision EMA",
                                      logged_settings.get("weights_dtype"), weights.get("dtype")))
    if record is None:
        return Verdict(False, selection.which, selection.epoch, dict(logged.metrics), {}, differences, all_notes)
    mine, theirs = logged.entries(), record.entries()
    differing = [n for n in logged.names if mine.get(n) != theirs.get(n)]
    extra = [n for n in record.names if n not in mine]
    if differing or extra:
        first = (differing or extra)[0]
        files = dict(zip(logged.names, logged.files or []))
        where = f" ({files[first]})" if files.get(first) else ""
        differences.append(Difference("predictions", f"{len(differing) + len(extra)} of {len(logged.names)} images' "
                                                     f"predictions differ, first {first}{where}",
                                      len(logged.names), len(record.names)))
    for name in sorted(set(logged.metrics) | set(record.metrics)):
        a, b = logged.metrics.get(name), record.metrics.get(name)
        if not _same(a, b):
            differences.append(Difference("metrics", f"{name}: logged {a!r}, re-run {b!r}", a, b))
    cut = logged_settings.get("nms_cut_batches")
    if cut:
        differences.append(Difference("clock", f"NMS's clock cut batch(es) {cut} of the logged validation", cut, None))
    # the environment explains a difference; with the same predictions and metrics it is only reported
    identical: Optional[bool] = not decisive(differences)
    if identical and not logged.names and not set(logged.metrics) & set(record.metrics):
        identical = None  # an empty record: nothing decisive was compared
        all_notes.append("the logged validation holds no image prediction and no metric: nothing to compare")
    elif identical and _empty(logged) and _empty(record) and uninformative(logged.metrics, record.metrics):
        identical = None  # equal empty prediction sets and constant metrics: an equality that cannot fail
        all_notes.append("not proven: every image's prediction set is empty in both validations and "
                         + "; ".join(uninformative(logged.metrics, record.metrics))
                         + ": equal empty sets prove nothing about what the re-run computes")
    return Verdict(identical, selection.which, selection.epoch, dict(logged.metrics), rerun_metrics, differences,
                   all_notes, images=len(logged.names))


#: Settings an evaluation command is explained by, in the order they are listed.
EXPLAINED = ("split", "data", "batch_size", "batch_shapes", "imgsz", "rect", "pad", "half", "weights_dtype",
             "conf_thres", "iou_thres", "max_det", "single_cls", "augment", "nms_cut_batches")


def setting_differences(training: Dict[str, Any], yours: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Each setting of :data:`EXPLAINED` whose value differs, with both values (``effect`` filled in later)."""
    out = []
    for key in EXPLAINED:
        a, b = training.get(key), yours.get(key)
        if key == "data" and a and b and Path(str(a)).resolve() == Path(str(b)).resolve():
            continue
        if key == "nms_cut_batches" and not a and not b:
            continue
        if key == "imgsz" and _square(a) is not None and _square(a) == _square(b):
            continue  # 64 and [64, 64]: one size (a validator gives an export's as a list)
        if a != b:
            out.append({"setting": key, "training": a, "yours": b, "effect": None})
    return out


def _square(size: Any) -> Optional[List[int]]:
    """An image size as ``[h, w]`` (an int is square), None when it is neither."""
    if isinstance(size, int) and not isinstance(size, bool):
        return [size, size]
    if isinstance(size, (list, tuple)) and len(size) == 2 and all(isinstance(v, int) for v in size):
        return [int(size[0]), int(size[1])]
    return None


@dataclass
class Explanation(verdicts.Judged):
    """Why an evaluation command gives another number than the training's validation."""

    which: str
    epoch: Optional[int]
    training: Dict[str, float]
    yours: Dict[str, float]
    differences: List[Dict[str, Any]]
    notes: List[str]
    all_aligned: Optional[Dict[str, float]] = None  # every alignable setting aligned at once
    coco: Optional[Dict[str, Any]] = None  # --evaluator coco: your evaluation's predictions scored by the COCO API
    export: Optional[Dict[str, Any]] = None  # an exported model evaluated: its source checkpoint, parity's causes
    labels: Optional[Dict[str, Any]] = None  # training_metrics / your_metrics -> which evaluator and rules gave them

    @property
    def reproduced(self) -> bool:
        """The command gives the logged numbers, bit for bit (mAP50 and mAP50-95, both present)."""
        keys = ("mAP50", "mAP50-95")
        return all(self.training.get(k) is not None and _same(self.training.get(k), self.yours.get(k)) for k in keys)

    @property
    def missing(self) -> List[str]:
        """The numbers the verdict needs that one side did not give (``training mAP50``, ``yours mAP50-95``): a
        verdict without them is not proven, neither "reproduces" nor "differs"."""
        return [f"{side} {k}" for side, numbers in (("training", self.training), ("yours", self.yours))
                for k in ("mAP50", "mAP50-95") if numbers.get(k) is None]

    @property
    def no_evidence(self) -> List[str]:
        """Why equal numbers prove nothing (:func:`uninformative`: every metric of both sides one constant, e.g. all 0,
        which any setting gives alike); empty where they are evidence or differ."""
        return uninformative(self.training, self.yours) if self.reproduced and not self.missing else []

    @property
    def verdict(self) -> str:
        """``identical`` (the logged numbers, bit for bit, and they can tell settings apart), ``differs`` or
        ``not proven`` (a number missing, or equal numbers that carry no information)."""
        if self.missing or self.no_evidence:
            return verdicts.NOT_PROVEN
        return verdicts.IDENTICAL if self.reproduced else verdicts.DIFFERS

    def to_json(self) -> Dict[str, Any]:
        unproven = bool(self.missing or self.no_evidence)
        return self.stamped({"reproduced": None if unproven else self.reproduced, "numbers_equal": self.reproduced,
                "not_proven": unproven, "missing": self.missing, "not_proven_why": self.no_evidence,
                "validation": self.which, "epoch": self.epoch,
                "training_metrics": self.training, "your_metrics": self.yours, "all_aligned_metrics": self.all_aligned,
                "differences": self.differences, "notes": self.notes, "metric_labels": self.labels or {},
                **({"coco": self.coco} if self.coco is not None else {}),
                **({"export": self.export} if self.export is not None else {})})

    def describe(self) -> List[str]:
        head = f"training's validation of {label(self.which, self.epoch)}"
        numbers = " ".join(f"{k} {self.training.get(k, math.nan):.6g} vs yours {self.yours.get(k, math.nan):.6g};"
                           for k in ("mAP50", "mAP50-95"))
        verdict = ("not proven: no " + ", no ".join(self.missing) + " to compare") if self.missing else \
            ("not proven: " + "; ".join(self.no_evidence)) if self.no_evidence else \
            "your command reproduces it" if self.reproduced else "your command differs"
        lines = [f"{head}: {numbers} {verdict}"]
        for d in self.differences:
            effect = d.get("effect")
            if effect:
                shown = ", ".join(f"{k} {v:+.6g}" for k, v in effect.items())
                tail = f"aligning only this: {shown}" if d.get("alignable", True) else \
                    f"measured with every other setting aligned: {shown}"
            elif d.get("alignable") is False:
                tail = "not aligned (no option of the command sets it, or it follows from another setting)"
            else:
                tail = "effect not measured"
            if d.get("why"):
                tail += f" ({d['why']})"
            lines.append(f"  {d['setting']}: training {_short(d['training'])}, yours {_short(d['yours'])} -- {tail}")
        if not self.differences and not self.reproduced and not self.missing:
            lines.append("  no setting differs: the gap is elsewhere (the model is loaded another way, e.g. fused)")
        if self.export is not None:
            from . import exported

            lines += exported.describe(self.export)
        lines += [f"  note: {n}" for n in self.notes]
        return lines


def explanation(selection: Selection, result: Dict[str, Any], notes: Sequence[str] = ()) -> Explanation:
    """The :class:`Explanation` of a child's explain result against the selected logged validation."""
    logged = selection.record
    yours = (result.get("yours") or {}).get("metrics") or {}
    return Explanation(selection.which, selection.epoch, dict(logged.metrics) if logged else {}, dict(yours),
                       list(result.get("differences") or []), list(selection.notes) + list(notes),
                       result.get("all_aligned"), result.get("coco"), result.get("export"),
                       {"training_metrics": labels.of_record(logged.evaluator if logged else None),
                        "your_metrics": labels.of_record((result.get("yours") or {}).get("evaluator"))})


#: The metrics whose equality is the verdict's evidence, as a validation record and an explanation name them.
EVIDENCE_METRICS = ("precision", "recall", "mAP50", "mAP50-95")


def uninformative(a: Dict[str, Any], b: Dict[str, Any]) -> List[str]:
    """Why equal metrics ``a`` and ``b`` carry no information: every box metric (:data:`EVIDENCE_METRICS`, those
    present) of both sides is 0 (nothing found) or every one is 1 (nothing missed), or all are NaN: values any
    setting gives alike. Empty where they vary (or differ, or none is a number)."""
    values = [v for side in (a, b) for k, v in side.items() if k in EVIDENCE_METRICS]
    if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return []
    if any(isinstance(v, float) and math.isnan(v) for v in values):
        return ["the metrics are NaN on both sides"] if all(isinstance(v, float) and math.isnan(v)
                                                           for v in values) else []
    if len(set(values)) != 1 or values[0] not in (0, 1):  # another shared value still tells predictions apart
        return []
    keys = sorted({k for side in (a, b) for k in side if k in EVIDENCE_METRICS}, key=EVIDENCE_METRICS.index)
    return [f"every metric ({', '.join(keys)}) is {values[0]:g} in both evaluations: a value every setting gives "
            "alike (no prediction found an object), so equal numbers cannot tell the settings that differ apart"
            if values[0] == 0 else
            f"every metric ({', '.join(keys)}) is {values[0]:g} in both evaluations: a saturated value that equal "
            "numbers cannot tell the settings that differ apart by"]


def _empty(record: "ValRecord") -> bool:
    """Whether every image of the record has no prediction (its box counts all 0; unknown counts: not empty)."""
    return bool(record.names) and record.boxes is not None and not any(record.boxes)


def _environment_differences(a: Dict[str, Any], b: Dict[str, Any]) -> List[Difference]:
    out = []
    for key in ENVIRONMENT:
        if key in a and key in b and a[key] != b[key]:
            out.append(Difference("environment", f"{key}: training {_short(a[key])}, now {_short(b[key])}", a[key],
                                  b[key]))
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def decisive(differences: List["Difference"]) -> List["Difference"]:
    """The differences that decide a verdict: all but the environment's (which only explain one)."""
    return [d for d in differences if d.what != "environment"]


def _rounding(release: str) -> str:
    """How ``release`` rounds a metric into results.csv (named in messages)."""
    return {"yolov5": "5 significant digits, '%.5g'",
            "ultralytics": "5 decimal places (round(x, 5)), then '%.6g'"}.get(release, "half a unit of its last digit")


def printed_match(release: str, text: str, value: float) -> bool:
    """Whether ``value`` prints as results.csv printed ``text``, with the file's own rounding: YOLOv5 writes
    '%.5g' (5 significant digits), Ultralytics rounds to 5 decimal places and writes '%.6g'; otherwise within
    half a unit of the text's last digit. A statement about printed digits, never a bit-for-bit proof."""
    from decimal import Decimal, InvalidOperation

    try:
        printed = float(text)
    except ValueError:
        return False
    if math.isnan(printed) or math.isnan(value):
        return math.isnan(printed) and math.isnan(value)
    if release == "yolov5":
        return "%.5g" % value == "%.5g" % printed
    if release == "ultralytics":
        return "%.6g" % round(value, 5) == "%.6g" % printed
    try:
        exponent = Decimal(text.strip()).as_tuple().exponent
    except InvalidOperation:
        return False
    return isinstance(exponent, int) and abs(value - printed) <= 0.5 * 10.0 ** exponent


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _int(value: Any) -> Optional[int]:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


__all__ = ["Difference", "EVIDENCE_METRICS", "EXPLAINED", "Explanation", "NotARunError", "Run", "Selection", "Verdict",
           "compare", "data_differences", "explanation", "find_run", "label", "printed_match", "select",
           "setting_differences", "uninformative"]
