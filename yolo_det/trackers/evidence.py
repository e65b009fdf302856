"""The evidence a tracker receives, tracker-agnostic: read from what a run already wrote in its folder
(``determinism.json``, the fingerprint log's final line, ``data_manifest.json``), and a command's verdict.

Each evidence is a JSON-ready dict; :func:`tags` flattens one into ``yolo_det.*`` string pairs, the form
every tracker shows in its run table.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Dict, Iterable, Mapping, Optional

from ..core import data_manifest
from ..record import run_folder
from ..record.run_folder import REPORT_NAME  # noqa: F401  (the name trackers import from here)

SCHEMA = 1
#: The longest tag value written (MLflow keeps 8000 characters; longer evidence goes into the artifact).
TAG_LIMIT = 5000


def final_record(log: os.PathLike) -> Optional[Dict[str, Any]]:
    """The fingerprint log's final line as a dict (``{"final": true, "steps", "names", "digests", "run_dir",
    "closed_by"}``, read by :func:`yolo_det.record.run_folder.final_record`); None when the log is missing or the
    run did not close it."""
    record = run_folder.final_record(log)
    return None if record is None else {"final": True, **dataclasses.asdict(record)}


def _final(report: Mapping[str, Any], run_dir: Path) -> Optional[Dict[str, Any]]:
    """Steps, tensor count and one BLAKE2b-128 digest of the final state's per-tensor digests (two runs with the
    same final weights, EMA and optimizer state have the same one)."""
    log = run_folder.find_log(run_dir, report)
    record = None if log is None else run_folder.final_record(log)
    if record is None:
        return None
    digest = hashlib.blake2b(record.digests.encode("ascii"), digest_size=16).hexdigest()
    return {"steps": record.steps, "tensors": len(record.names), "digest": digest,
            "closed_by": record.closed_by, "log": str(log)}


def _data(run_dir: Path) -> Optional[Dict[str, Any]]:
    try:
        manifest = data_manifest.read(run_dir)
    except ValueError:
        return None
    if manifest is None:
        return None
    splits = manifest.get("splits") or {}
    return {"digest": data_manifest.content_digest(manifest), "algorithm": manifest.get("digest"),
            "root": manifest.get("root"), "files": manifest.get("files"), "names": manifest.get("names"),
            "images": {split: len(record.get("images") or {}) for split, record in splits.items()}}


def _release(report: Mapping[str, Any]) -> Dict[str, Any]:
    """yolo-det, the training program and the machine: what a reader needs to repeat the run."""
    env = report.get("environment") or {}
    packages = env.get("packages") or {}
    program = next((name for name in ("yolov5", "ultralytics") if name in report), None)
    return {"yolo_det": report.get("yolo_det"), "program": program,
            "program_version": packages.get(program) if program else None, "torch": env.get("torch"),
            "python": env.get("python"), "platform": env.get("platform"), "cuda": env.get("cuda"),
            "cuda_available": env.get("cuda_available"), "gpus": env.get("gpus"), "git_commit": env.get("git_commit")}


def _resume(report: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    resume = report.get("resume")
    if not isinstance(resume, Mapping):
        return None
    return {"exact": resume.get("exact"), "checkpoint": resume.get("checkpoint"), "epoch": resume.get("epoch"),
            "problems": list(resume.get("problems") or [])}


def _ops(violations: Any) -> list:
    """The nondeterministic ops that ran (``determinism.json`` ``violations.ops``: one record per op)."""
    ops = violations.get("ops") if isinstance(violations, Mapping) else None
    return sorted({str(op.get("op")) for op in ops or [] if isinstance(op, Mapping)})


def run_evidence(run_dir: os.PathLike) -> Optional[Dict[str, Any]]:
    """What a finished run proves about itself, from its folder; None without a ``determinism.json``."""
    folder = Path(run_dir).resolve()
    try:
        report = run_folder.read_report(folder)
    except run_folder.RunFolderError:
        report = None
    if report is None:
        return None
    violations = report.get("violations") or {}
    return {"schema": SCHEMA, "kind": "run", "run_dir": str(folder), "mode": report.get("mode"),
            "mode_source": report.get("mode_source"), "seed": report.get("seed"), "seeds": report.get("seeds"),
            "steps": report.get("steps"), "data": _data(folder), "release": _release(report),
            "final": _final(report, folder), "resume": _resume(report),
            "nondeterministic_ops": _ops(violations),
            "files": {"determinism": str(folder / REPORT_NAME),
                      "data_manifest": str(folder / data_manifest.MANIFEST_FILE)}}


def verdict_evidence(command: str, verdict: str, code: int, payload: Any, runs: Iterable[os.PathLike]) -> Dict[str, Any]:
    """A command's verdict on the runs it judged, with the command's own JSON result as its evidence."""
    return {"schema": SCHEMA, "kind": "verdict", "command": command, "verdict": verdict, "exit_code": code,
            "runs": [str(r) for r in runs], "result": payload}


def _text(value: Any) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool) or value is None:
        text = json.dumps(value)
    else:
        text = json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= TAG_LIMIT else text[:TAG_LIMIT - 3] + "..."


def tags(evidence: Mapping[str, Any]) -> Dict[str, str]:
    """``yolo_det.*`` tags of a run's evidence: mode, seeds, data digest, release, final digest, resume."""
    out = {"mode": evidence.get("mode"), "mode_source": evidence.get("mode_source"), "seed": evidence.get("seed"),
           "seeds": evidence.get("seeds"), "steps": evidence.get("steps"),
           "nondeterministic_ops": ",".join(evidence.get("nondeterministic_ops") or []) or "none"}
    data = evidence.get("data") or {}
    out.update({"data.digest": data.get("digest"), "data.files": data.get("files")})
    for key, value in (evidence.get("release") or {}).items():
        out[f"release.{key}"] = value
    final = evidence.get("final") or {}
    out.update({"final.digest": final.get("digest"), "final.steps": final.get("steps"),
                "final.tensors": final.get("tensors")})
    resume = evidence.get("resume")
    out["resume.exact"] = "not resumed" if resume is None else resume.get("exact")
    return {f"yolo_det.{key}": _text(value) for key, value in out.items() if value is not None}


def verdict_tags(evidence: Mapping[str, Any]) -> Dict[str, str]:
    """``yolo_det.verdict.<command>`` (the verdict word) and its exit code."""
    command = evidence["command"]
    return {f"yolo_det.verdict.{command}": _text(evidence["verdict"]),
            f"yolo_det.verdict.{command}.exit_code": _text(evidence["exit_code"])}


__all__ = ["SCHEMA", "final_record", "run_evidence", "tags", "verdict_evidence", "verdict_tags"]
