"""The in-toto statements of a run: SLSA Provenance v1 (how the weights were made) and Test Results (what was
proven about them), each checked against the in-toto attestation framework's own schema before it is signed.

The provenance's build definition is what a reproducer needs (:mod:`yolo_det.attest.reproduce` re-runs it from
the statement alone): the command and its working folder, the resolved settings, the mode and the seeds by role as
external parameters; the data (its manifest's digest and every file's digest), the training code and its release
as resolved dependencies. Its run details carry the machine and the record's final digest, and the fingerprint
log as a byproduct, so that a re-run can be compared step by step.
"""

from __future__ import annotations

import datetime as _dt
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional

from .. import __version__
from ..record.run_folder import LOG_NAME, REPORT_NAME
from .run import AttestedRun
from .signing import AttestError

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PROVENANCE = "https://slsa.dev/provenance/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
#: The build type of a training run attested by yolo-det (a URI that names the schema docs/attest.md defines).
BUILD_TYPE = "urn:yolo-det:buildtype:training:v1"
BUILDER = "urn:yolo-det:builder"
#: Assurance levels of a Test Result (docs/attest.md): the run's own record; a second run bit-identical to it.
SELF_ATTESTED, REPRODUCED = "self-attested", "reproduced"
#: A file digest the data manifest and the header record: BLAKE2b with a 128-bit output (not the 512-bit "blake2b").
BLAKE2B_128 = "blake2b-128"


def subject(run: AttestedRun) -> List[Dict[str, Any]]:
    """The statement's subject: the weights file by name and SHA-256."""
    return [{"name": run.weights.name, "digest": {"sha256": run.weights_sha256}}]


def _code(run: AttestedRun) -> List[Dict[str, Any]]:
    """The training code: the release and version, the script's recorded digest, the git commit."""
    env = run.report.get("environment") if isinstance(run.report.get("environment"), Mapping) else {}
    packages = env.get("packages") or {}
    out: List[Dict[str, Any]] = []
    program = run.program
    if program:
        section = run.report.get(program) if isinstance(run.report.get(program), Mapping) else {}
        out.append({"name": f"pkg:pypi/{program}@{packages.get(program, 'unknown')}",
                    "annotations": {"role": "training program", "script": section.get("script")}})
    for entry in run.header.get("files") or []:
        if isinstance(entry, Mapping) and entry.get("digest"):
            out.append({"name": str(entry.get("arg")), "digest": {BLAKE2B_128: str(entry["digest"])},
                        "annotations": {"role": "command argument file", "index": entry.get("index")}})
    if env.get("git_commit"):
        out.append({"name": "git", "digest": {"gitCommit": str(env["git_commit"])},
                    "annotations": {"role": "code commit"}})
    return out


def _data(run: AttestedRun) -> List[Dict[str, Any]]:
    manifest = run.manifest
    if not manifest:
        return []
    root = manifest.get("root")
    out = [{"name": "data_manifest", "digest": {BLAKE2B_128: run.data_digest()},
            "annotations": {"role": "data manifest", "root": root, "files": manifest.get("files"),
                            "names": manifest.get("names")}}]
    out += [{"name": f"data/{rel}", "digest": {BLAKE2B_128: digest}} for rel, digest in run.data_files().items()]
    return out


def _machine(run: AttestedRun) -> Dict[str, Any]:
    env = run.report.get("environment") if isinstance(run.report.get("environment"), Mapping) else {}
    machine = run.header.get("machine") if isinstance(run.header.get("machine"), Mapping) else {}
    cpu = machine.get("cpu") if isinstance(machine.get("cpu"), Mapping) else {}
    return {"torch": env.get("torch") or run.header.get("torch"), "python": env.get("python"),
            "platform": env.get("platform"), "cuda": env.get("cuda"), "cudnn": env.get("cudnn"),
            "driver": env.get("driver"), "gpus": machine.get("gpus") or env.get("gpus") or [],
            "cpu": {k: cpu.get(k) for k in ("vendor", "model", "arch", "features", "dispatch", "caps", "libraries")
                    if k in cpu},
            "threads": run.header.get("threads"), "host": run.header.get("host")}


def provenance(run: AttestedRun) -> Dict[str, Any]:
    """The SLSA Provenance v1 statement of a run's weights."""
    settings = {k: v for k, v in sorted(run.folder.settings.items())}
    external = {
        "command": list(run.header.get("command") or []),
        "cwd": run.header.get("cwd"),
        "mode": run.mode,
        "seeds": run.seeds,
        "settings": settings,
        "settings_from": list(run.folder.settings_from),
        "data_root": (run.manifest or {}).get("root"),
        "release": run.folder.release,
    }
    internal = {"determinism": run.header.get("settings"), "env": run.header.get("env") or {},
                "world_size": run.header.get("world_size"), "virtual_world_size": run.header.get("virtual_world_size"),
                "environment": _machine(run)}
    byproducts = [
        {"name": LOG_NAME, "digest": {"sha256": run.log_sha256},
         "annotations": {"role": "fingerprint log", "steps": run.steps, "path": str(run.log)}},
        {"name": "final-record", "digest": {BLAKE2B_128: run.final_record},
         "annotations": {"role": "final record", "closed_by": run.closed_by, "steps": run.steps}},
    ]
    report = run.path / REPORT_NAME
    if report.is_file():
        from .run import sha256_file

        byproducts.append({"name": REPORT_NAME, "digest": {"sha256": sha256_file(report)}})
    predicate = {
        "buildDefinition": {"buildType": BUILD_TYPE, "externalParameters": external,
                            "internalParameters": internal, "resolvedDependencies": _code(run) + _data(run)},
        "runDetails": {
            "builder": {"id": f"{BUILDER}@{run.report.get('yolo_det') or __version__}",
                        "version": {"yolo-det": str(run.report.get("yolo_det") or __version__)}},
            "metadata": {"invocationId": f"{run.path.name}@{run.header.get('started')}",
                         **{k: v for k, v in (("startedOn", _time(run.header.get("started"))),
                                              ("finishedOn", _mtime(run.log))) if v}},
            "byproducts": byproducts,
        },
    }
    return statement(subject(run), PROVENANCE, predicate)


def test_result(run: AttestedRun, *, name: str, passed: bool, assurance: str, command: str, verdict: str,
                evidence: Iterable[Mapping[str, Any]] = (), warned: bool = False,
                details: Optional[str] = None) -> Dict[str, Any]:
    """An in-toto Test Result statement about the weights: ``name`` passed (or failed / warned) by ``command``'s
    ``verdict``, with the files that decided it and the assurance level they give."""
    configuration = [{**dict(e), "annotations": {**dict(e.get("annotations") or {}), "assurance": assurance,
                                                  "command": command, "verdict": verdict}} for e in evidence]
    if not configuration:
        configuration = [{"name": command, "annotations": {"assurance": assurance, "command": command,
                                                           "verdict": verdict}}]
    text = f"{name}: {details}" if details else name
    predicate = {"result": "PASSED" if passed and not warned else ("WARNED" if passed else "FAILED"),
                 "configuration": configuration,
                 "passedTests": [text] if passed and not warned else [],
                 "warnedTests": [text] if passed and warned else [],
                 "failedTests": [] if passed else [text]}
    return statement(subject(run), TEST_RESULT, predicate)


def statement(subjects: List[Dict[str, Any]], predicate_type: str, predicate: Dict[str, Any]) -> Dict[str, Any]:
    """An in-toto Statement v1, checked against the framework's schema (:func:`validate`)."""
    out = {"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": predicate_type, "predicate": predicate}
    validate(out)
    return out


def validate(stmt: Mapping[str, Any]) -> None:
    """Check a statement (and a provenance or test-result predicate) with in-toto-attestation's protobuf
    definitions and validators; :class:`AttestError` naming the field that does not fit."""
    try:
        from google.protobuf import json_format
        from in_toto_attestation.v1 import statement_pb2
        from in_toto_attestation.v1.statement import Statement
    except ImportError as exc:
        from ..core import extras

        raise AttestError(f"attestation needs {exc.name}: {extras.install_hint('attest')}") from None
    try:
        pb = json_format.ParseDict(dict(stmt), statement_pb2.Statement())
        Statement.copy_from_pb(pb).validate()
        kind = stmt.get("predicateType")
        if kind == PROVENANCE:
            from in_toto_attestation.predicates.provenance.v1 import provenance_pb2

            json_format.ParseDict(dict(stmt["predicate"]), provenance_pb2.Provenance())
        elif kind == TEST_RESULT:
            from in_toto_attestation.predicates.test_result.v0 import test_result_pb2

            json_format.ParseDict(dict(stmt["predicate"]), test_result_pb2.TestResult())
    except (json_format.ParseError, ValueError, TypeError, KeyError) as exc:
        raise AttestError(f"not a valid in-toto statement: {exc}") from None


def _time(value: Any) -> Optional[str]:
    """An RFC 3339 UTC time (``2026-12-07T13:54:54Z``) from the header's ISO time; None when unreadable."""
    try:
        when = _dt.datetime.fromisoformat(str(value))
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return when.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _mtime(path: os.PathLike) -> Optional[str]:
    try:
        stamp = os.stat(path).st_mtime
    except OSError:
        return None
    return _dt.datetime.fromtimestamp(stamp, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


__all__ = ["BUILD_TYPE", "PROVENANCE", "REPRODUCED", "SELF_ATTESTED", "STATEMENT_TYPE", "TEST_RESULT", "provenance",
           "statement", "subject", "test_result", "validate"]
