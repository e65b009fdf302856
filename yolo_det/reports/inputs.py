"""What each input of ``yolo-det report`` is, told by its content, not its name.

A folder is a seed study (``study.json``), a training run folder (a file a YOLOv5 or Ultralytics run writes, or
a fingerprint log of its own); a file is a fingerprint log, a ``study.json``, or the JSON a command printed with
``--json`` and the user saved: ``parity``, ``val --evaluator coco`` / ``val --predictions`` (the COCO gap),
``diff`` / ``verify`` / ``locate`` (a comparison, with its located op), ``seeds`` and ``compare``.
Anything else is a :class:`ReportInputError` that names the input and what is accepted; so is a file of a known
kind whose fields break the shape its section reads (saved outputs: the shapes below; a run's own files:
:mod:`yolo_det.core.json_shapes`): a list where a mapping belongs, a text where a count belongs, a run folder's
``determinism.json`` that is not a run's report.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..core.json_shapes import (ANY, BOOL, DETERMINISM_JSON, FINITE, INT, NUM, TEXT, Dict, List as ListOf, Map, Opt,
                                problem)
from ..proof.run_dirs import is_run_dir
from ..record.log import FingerprintError, LogReader
from ..record.run_folder import LOG_NAME, REPORT_NAME, find_log
from ..studies.study import STUDY_JSON

RUN, STUDY, PARITY, GAP, COMPARISON, STUDY_COMPARISON = "run", "study", "parity", "gap", "comparison", "study comparison"

ACCEPTED = ("a training run folder (determinism.json, results.csv, weights/, fingerprint.jsonl), a fingerprint log "
            "(.jsonl), a seed study folder or its study.json, or the JSON that `yolo-det parity`, `val --evaluator "
            "coco`, `val --predictions`, `diff`, `verify`, `locate`, `seeds` or `compare` printed with --json")


class ReportInputError(ValueError):
    """An input of ``yolo-det report`` is missing or is none of the things a report shows."""


_TEXTS = ListOf(TEXT)
_CAUSES = ListOf(Dict({"class": TEXT, "what": TEXT, "message": TEXT}))
_FIRST = Dict({"step": INT, "kind": TEXT, "tensor": TEXT, "epoch": Opt(INT)}, required=("step", "kind", "tensor"))
_LOCATE = Dict({k: TEXT for k in ("op", "module", "phase", "kernel", "cause")})
#: a log comparison (``diff A.jsonl B.jsonl --json``, ``verify``, ``locate``): what the "two runs" section reads
LOG_COMPARISON = Dict({"verdict": TEXT, "identical": Opt(BOOL), "steps": Opt(INT), "tensors": Opt(INT),
                       "first_divergence": Opt(_FIRST), "differing_per_step": Opt(ListOf(INT)),
                       "locate": Opt(_LOCATE), "validations": Opt(Dict({"compared": Opt(INT)})),
                       "problem": TEXT, "not_proven": TEXT, "notes": Opt(_TEXTS), "causes": Opt(_CAUSES)})
#: a run-folder comparison (``diff RUN_A RUN_B --json``): its steps are a log comparison, or null
RUN_COMPARISON = Dict({"verdict": TEXT, "identical": Opt(BOOL), "compared": Opt(_TEXTS),
                       "not_compared": Opt(_TEXTS), "causes": Opt(_CAUSES), "settings": Opt(_TEXTS),
                       "steps": Opt(LOG_COMPARISON), "notes": Opt(_TEXTS), "not_proven": TEXT})
_NUMBERS = Map(Opt(NUM))
_MEAN = Opt(Dict({"mean": Opt(NUM)}))
_METRIC = Dict({"metric": TEXT, "a": _MEAN, "b": _MEAN, "difference": Opt(NUM), "ci": Opt(ListOf(Opt(NUM))),
                "p_value": Opt(NUM), "statement": TEXT, "verdict": TEXT})
#: ``compare --json``: the verdict, A - B with its interval, every metric
STUDY_COMPARISON_SHAPE = Dict({"metric": TEXT, "verdict": TEXT, "statement": TEXT, "difference": Opt(NUM),
                               "ci": Opt(ListOf(Opt(NUM))), "p_value": Opt(NUM), "test": TEXT,
                               "result": Opt(_METRIC), "others": Opt(ListOf(Opt(_METRIC))),
                               "setup_differences": Opt(_CAUSES), "notes": Opt(_TEXTS),
                               "tainted": Opt(ListOf(Dict({"study": TEXT, "run": TEXT, "seed": TEXT,
                                                           "why": Opt(_TEXTS)})))})
#: ``parity --json``
PARITY_SHAPE = Dict({
    "verdict": TEXT, "model": TEXT, "exported": TEXT, "format": TEXT, "images": TEXT, "imgsz": ANY,
    "runtime": Opt(Dict({"name": TEXT, "settings": Opt(Dict({"version": TEXT}))})),
    "raw": Opt(ListOf(Dict({"output": TEXT, "shape": Opt(ListOf(TEXT)), "max_abs": Opt(NUM), "max_rel": Opt(NUM),
                            "atol": Opt(NUM), "within": Opt(BOOL)}))),
    "boxes": Opt(Dict({k: TEXT for k in ("matched", "only_pt", "only_export")})),
    "metrics": Opt(Dict({"pt_matched": Opt(_NUMBERS), "export_matched": Opt(_NUMBERS)})),
    "causes": Opt(ListOf(Dict({"cause": TEXT, "detail": TEXT, "metric_change": Opt(_NUMBERS)}))),
    "reasons": Opt(_TEXTS), "raw_note": TEXT})
#: one chain of ``val --evaluator coco --json`` / ``val --predictions --json`` (the COCO gap): the waterfall adds
#: its changes up, so they are finite numbers
_GAP_MAP = Opt(Dict({"mAP50-95": Opt(FINITE)}))
GAP_CHAIN = Dict({"start": Dict({"mAP50-95": Opt(FINITE), "release_logged": Opt(Map(ANY))}),
                  "steps": ListOf(Dict({"rule": TEXT, "what": TEXT, "release": TEXT, "coco": TEXT, "same": ANY,
                                        "change": Opt(Dict({"mAP50-95": FINITE, "mAP50": Opt(NUM)}))})),
                  "end": _GAP_MAP, "coco_api": _GAP_MAP, "residual": Opt(Map(ANY)), "ends_at_coco_api": ANY},
                 required=("start", "steps", "end"))


@dataclass
class Item:
    """One input: what it is (``kind``), where it is, and the JSON it holds (for saved command outputs)."""

    kind: str
    path: Path
    data: Dict[str, Any] = field(default_factory=dict)
    log: Optional[Path] = None  # a run given as its fingerprint log (or a folder holding only one)


def read_inputs(paths: Sequence[os.PathLike]) -> List[Item]:
    """Every input told apart by content, in the order given; :class:`ReportInputError` at the first bad one."""
    if not paths:
        raise ReportInputError(f"no input given: name at least one of {ACCEPTED}")
    return [read_input(Path(p)) for p in paths]


def read_input(path: Path) -> Item:
    """One input told apart by content (see the module docstring)."""
    if not path.exists():
        raise ReportInputError(f"{path}: no such file or folder")
    if path.is_dir():
        return _folder(path)
    if path.suffix == ".jsonl":
        return Item(RUN, path, log=_checked_log(path))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReportInputError(f"{path} is not JSON a report can read ({type(exc).__name__}: {exc}); accepted: "
                               f"{ACCEPTED}") from None
    kind = json_kind(data) if isinstance(data, dict) else None
    if kind is None:
        raise ReportInputError(f"{path}: its JSON is none of the outputs a report shows; accepted: {ACCEPTED}")
    if kind == RUN:  # determinism.json: the run is its folder
        return _folder(path.parent)
    _check_shape(path, data, kind)
    return Item(kind, path, data)


def _check_shape(path: Path, data: Mapping[str, Any], kind: str) -> None:
    """:class:`ReportInputError` naming ``path`` and the field where ``data`` breaks the shape its section reads."""
    if kind == GAP:
        found = next((f"gap {name!r}: {why}" for name, chain in gap_chains(data).items()
                      for why in [problem(chain, GAP_CHAIN)] if why), None)
        if found is None and isinstance(data.get("coco"), dict):
            found = problem(data["coco"].get("notes"), Opt(_TEXTS))
        elif found is None:
            found = problem(data.get("notes"), Opt(_TEXTS))
    elif kind == COMPARISON:
        found = problem(data, LOG_COMPARISON if "first_divergence" in data else RUN_COMPARISON)
    else:
        shape = {PARITY: PARITY_SHAPE, STUDY_COMPARISON: STUDY_COMPARISON_SHAPE}.get(kind)
        found = problem(data, shape) if shape is not None else None
    if found:
        raise ReportInputError(f"{path} is not a {kind} JSON as the command prints it: {found}; save the command's "
                               "--json output unchanged")


def check_report(folder: Path) -> None:
    """A run folder's ``determinism.json``, where it has one, is a run's report: :class:`ReportInputError` naming the
    file and the field otherwise (a list, ``seeds`` that are not a mapping, a text where a count belongs)."""
    report = folder / REPORT_NAME
    if not report.is_file():
        return
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReportInputError(f"{report} is not JSON ({type(exc).__name__}: {exc}); it is the run's report that "
                               "yolo-det writes: restore it, or give the run's fingerprint log instead") from None
    found = problem(data, DETERMINISM_JSON)
    if found:
        raise ReportInputError(f"{report} is not a run's report: {found}; restore it, or give the run's "
                               "fingerprint log instead")


def _folder(path: Path) -> Item:
    if (path / STUDY_JSON).is_file():
        return Item(STUDY, path)
    if is_run_dir(path):
        check_report(path)
        return Item(RUN, path)
    log = find_log(path)
    if log is not None:  # a verify/seeds run folder: only the log
        return Item(RUN, path, log=_checked_log(log))
    raise ReportInputError(f"{path} is a folder with nothing a report shows (no {STUDY_JSON}, no file a training run "
                           f"writes, no {LOG_NAME}); accepted: {ACCEPTED}")


def _checked_log(path: Path) -> Path:
    try:
        LogReader(path).close()
    except FingerprintError as exc:
        raise ReportInputError(f"{path}: {exc}") from None
    return path


def json_kind(data: Mapping[str, Any]) -> Optional[str]:
    """Which command's ``--json`` output (or which file) ``data`` is, by its keys; None when none."""
    if {"model", "exported", "runtime", "raw", "verdict"} <= set(data):
        return PARITY
    if gap_chains(data):
        return GAP
    if "first_divergence" in data and "differing_per_step" in data:
        return COMPARISON
    if "folders" in data and "verdict" in data and "steps" in data:
        return COMPARISON
    if {"settings", "runs"} <= set(data) and isinstance(data.get("runs"), list):
        return STUDY
    if {"metric", "verdict", "result", "others"} <= set(data):
        return STUDY_COMPARISON
    if {"mode", "mode_source", "environment"} <= set(data):
        return RUN
    return None


def _is_chain(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("steps"), list) and "start" in value and "end" in value


def gap_chains(data: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
    """The gap chains in a saved JSON: ``{name: chain}`` (one per release family for ``val --predictions``)."""
    if _is_chain(data):
        return {"release": dict(data)}
    coco = data.get("coco") if isinstance(data.get("coco"), dict) and "gap" in data["coco"] else data
    gap = coco.get("gap")
    if _is_chain(gap):
        return {str(coco.get("release") or "release"): gap}
    if isinstance(gap, dict) and gap and all(_is_chain(v) for v in gap.values()):
        return {str(k): v for k, v in gap.items()}
    return {}


__all__ = ["ACCEPTED", "COMPARISON", "GAP", "GAP_CHAIN", "Item", "LOG_COMPARISON", "PARITY", "PARITY_SHAPE", "RUN",
           "RUN_COMPARISON", "ReportInputError", "STUDY", "STUDY_COMPARISON", "STUDY_COMPARISON_SHAPE", "check_report",
           "gap_chains", "json_kind", "read_input", "read_inputs"]
