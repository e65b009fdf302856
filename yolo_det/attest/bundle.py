"""``yolo-det attest``: a run's signed bundle; ``yolo-det attest verify``: checking one offline.

A bundle is one folder: ``model.sig`` (the weights' OpenSSF model signature), ``provenance.intoto.json`` (SLSA
Provenance v1), one ``test-*.intoto.json`` per verdict (in-toto Test Result), ``bom.cdx.json`` (the CycloneDX ML-BOM)
with ``bom.intoto.json`` (the same BOM in a signed statement), the run's ``fingerprint.jsonl`` (the byproduct a
reproducer compares with) and ``attestation.json``, an unsigned index. Every ``*.intoto.json`` is a DSSE envelope
signed with one key (a certificate's key, carrying the certificate; or a Sigstore bundle holding the envelope:
:mod:`yolo_det.attest.signers`); verification trusts only the key, CA or identity it is given and the files it is
given.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..core import atomic, data_manifest, verdicts
from ..record.run_folder import LOG_NAME
from . import mlbom, signers, signing, statements
from .run import AttestedRun, sha256_file
from .signing import AttestError, Mismatch

INDEX = "attestation.json"
MODEL_SIGNATURE = "model.sig"
PROVENANCE = "provenance.intoto.json"
BOM = "bom.cdx.json"
BOM_STATEMENT = "bom.intoto.json"
LOG = LOG_NAME
CYCLONEDX_PREDICATE = "https://cyclonedx.org/bom"
#: What the bundle's ``verdict`` is when everything checks out.
VERIFIED = verdicts.VERIFIED


@dataclass
class Evidence:
    """One verdict to attest: a test name, whether it passed, the command and its word, the files behind it."""

    name: str
    passed: bool
    assurance: str
    command: str
    verdict: str
    files: List[Dict[str, Any]] = field(default_factory=list)
    details: Optional[str] = None
    warned: bool = False


@dataclass
class AttestResult:
    """What ``yolo-det attest`` wrote."""

    out: Path
    files: List[str]
    tests: List[str]
    verdict: str = verdicts.NO_VERDICT

    @property
    def exit_code(self) -> int:
        return verdicts.exit_code(self.verdict)

    def to_json(self) -> Dict[str, Any]:
        return verdicts.stamp({"out": str(self.out), "files": self.files, "tests": self.tests}, self.verdict)


@dataclass
class VerifyResult:
    """What ``yolo-det attest verify`` found: every check made, and each mismatch named."""

    bundle: Path
    checked: List[str] = field(default_factory=list)
    mismatches: List[str] = field(default_factory=list)
    subject: Optional[Dict[str, Any]] = None

    @property
    def verdict(self) -> str:
        return verdicts.DIFFERS if self.mismatches else VERIFIED

    @property
    def exit_code(self) -> int:
        return verdicts.exit_code(self.verdict)

    def to_json(self) -> Dict[str, Any]:
        return verdicts.stamp({"bundle": str(self.bundle), "subject": self.subject, "checked": self.checked,
                               "mismatches": self.mismatches}, self.verdict)


def self_evidence(run: AttestedRun) -> Evidence:
    """The run's own record: every step recorded under strict/warn, closed normally; self-attested."""
    ops = [str(op.get("op")) for op in ((run.report.get("violations") or {}).get("ops") or []) if isinstance(op, Mapping)]
    closed = run.closed_by in (None, "finish")
    details = (f"{run.steps} steps recorded under {run.mode}, final record {run.final_record}"
               + (f", closed by {run.closed_by}" if not closed else "")
               + (f"; nondeterministic ops ran: {', '.join(sorted(set(ops)))}" if ops else ""))
    return Evidence("training recorded", passed=closed, warned=bool(ops), assurance=statements.SELF_ATTESTED,
                    command="train", verdict=verdicts.NO_VERDICT, details=details,
                    files=[{"name": LOG, "digest": {"sha256": run.log_sha256}}])


def reproduced_by(run: AttestedRun, other: os.PathLike) -> Evidence:
    """Compare the run's record with another run's (a run folder or fingerprint log), as ``yolo-det diff`` does:
    bit-identical is the *reproduced* assurance; anything else is a failed test naming where they part."""
    from ..proof.compare import compare_logs
    from ..proof.run_dirs import RunDirError, RunFolder
    from ..record.log import FingerprintError

    path = Path(other)
    try:
        log = RunFolder.read(path).log if path.is_dir() else path
    except RunDirError as exc:
        raise AttestError(f"--reproduced-by {other}: {exc}") from None
    if log is None or not Path(log).is_file():
        raise AttestError(f"--reproduced-by {other}: no fingerprint log found")
    if Path(log).resolve() == run.log:
        raise AttestError(f"--reproduced-by {other} is the attested run itself: name a second run of the command")
    try:
        comparison = compare_logs(run.log, log)
    except FingerprintError as exc:
        raise AttestError(f"--reproduced-by {other}: {exc}") from None
    word = comparison.verdict
    files = [{"name": f"reproduction/{Path(log).name}", "digest": {"sha256": sha256_file(log)},
              "annotations": {"path": str(Path(log).resolve())}}]
    if word == verdicts.IDENTICAL:
        detail = f"bit-identical to {log}: {comparison.steps} steps, {comparison.tensors} tensors"
    else:
        detail = f"{word}: " + "; ".join(comparison.describe()[:2])
    return Evidence("reproduced bit-identically", passed=word == verdicts.IDENTICAL,
                    assurance=statements.REPRODUCED if word == verdicts.IDENTICAL else statements.SELF_ATTESTED,
                    command="diff", verdict=word, details=detail, files=files)


def saved_evidence(run: AttestedRun, path: os.PathLike) -> Evidence:
    """A verdict saved from a command's ``--json`` (diff/verify, val, parity, seeds compare), checked to be about
    this run where it names runs; its file is named by digest in the Test Result."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AttestError(f"--evidence {path}: not a readable JSON file ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("verdict"), str):
        raise AttestError(f"--evidence {path}: no verdict in it; give a file saved from a yolo-det command's --json")
    try:
        word = verdicts.normalize(data["verdict"])
    except ValueError as exc:
        raise AttestError(f"--evidence {path}: {exc}") from None
    command, name = _kind(data)
    logs = [Path(x).resolve() for x in data.get("logs") or [] if isinstance(x, str)]
    if logs and run.log not in logs:
        raise AttestError(f"--evidence {path}: the {command} verdict compared {', '.join(map(str, logs))}, not this "
                          f"run's log {run.log}")
    passed = verdicts.exit_code(word) == 0
    assurance = statements.REPRODUCED if command in ("diff", "verify") and word == verdicts.IDENTICAL \
        else statements.SELF_ATTESTED
    return Evidence(name, passed=passed, assurance=assurance, command=command, verdict=word,
                    details=str(data.get("statement") or word),
                    files=[{"name": f"evidence/{p.name}", "digest": {"sha256": sha256_file(p)}}])


def _kind(data: Mapping[str, Any]) -> "tuple[str, str]":
    """(command, test name) of a saved ``--json`` document, told by its keys."""
    if {"model", "exported", "runtime"} <= set(data):
        return "parity", "export matches the checkpoint"
    if "first_divergence" in data or "folders" in data:
        return "diff", "reproduced bit-identically"
    if "reproduced" in data:
        return "val", "validation reproduced"
    if {"metric", "result"} <= set(data):
        return "compare", "seed study comparison"
    return "verdict", "verdict"


def _envelope_name(index: int, evidence: Evidence) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in evidence.name.lower()).strip("-")
    return f"test-{index:02d}-{slug}.intoto.json"


def attest_run(run_dir: os.PathLike, key: Optional[os.PathLike], out: os.PathLike, *,
               weights: Optional[os.PathLike] = None, evidence: Sequence[os.PathLike] = (),
               reproduced: Sequence[os.PathLike] = (), intervals: Optional[Mapping[str, Mapping[str, Any]]] = None,
               password: Optional[str] = None, cert: Optional[os.PathLike] = None,
               cert_chain: Sequence[os.PathLike] = (), sigstore: bool = False,
               identity_token: Optional[str] = None) -> AttestResult:
    """Write the signed bundle of a strict/warn run into ``out`` (a new or empty folder; written whole or not at
    all), signed with ``key``, the certificate ``cert`` and its key, or a Sigstore identity (``sigstore``)."""
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise AttestError(f"{target} exists and is not an empty folder: choose a new --out (nothing written)")
    signer = signers.for_attest(key=key, cert=cert, cert_chain=cert_chain, sigstore=sigstore, password=password,
                                identity_token=identity_token)
    run = AttestedRun.read(run_dir, weights)
    tests = [self_evidence(run)] + [reproduced_by(run, o) for o in reproduced] + [saved_evidence(run, e)
                                                                                for e in evidence]
    documents: Dict[str, Any] = {PROVENANCE: signer.sign_statement(statements.provenance(run))}
    for i, ev in enumerate(tests, 1):
        files = [{**f, "annotations": {**dict(f.get("annotations") or {}), "final_record": run.final_record}}
                 for f in ev.files]
        stmt = statements.test_result(run, name=ev.name, passed=ev.passed, warned=ev.warned, assurance=ev.assurance,
                                      command=ev.command, verdict=ev.verdict, evidence=files, details=ev.details)
        documents[_envelope_name(i, ev)] = signer.sign_statement(stmt)
    bom = mlbom.bom(run, intervals)
    documents[BOM] = bom
    documents[BOM_STATEMENT] = signer.sign_statement(
        statements.statement(statements.subject(run), CYCLONEDX_PREDICATE, bom))
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for name, doc in documents.items():
            atomic.write_text(staging / name, json.dumps(doc, indent=2, sort_keys=True) + "\n")
        shutil.copyfile(run.log, staging / LOG)
        signer.sign_weights(run.weights, staging / MODEL_SIGNATURE, staging)
        for name, data in signer.files().items():
            (staging / name).write_bytes(data)
        index = {"schema": verdicts.SCHEMA, "format": "yolo-det-attestation", "keyid": signer.keyid,
                 "signing": signer.index(), "subject": statements.subject(run)[0], "weights": str(run.weights),
                 "run_dir": str(run.path), "final_record": run.final_record,
                 "files": sorted(p.name for p in staging.iterdir())}
        atomic.write_text(staging / INDEX, json.dumps(index, indent=2, sort_keys=True) + "\n")
        if target.exists():
            target.rmdir()
        atomic.replace_folder(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return AttestResult(target, sorted(p.name for p in target.iterdir()), [t.name for t in tests])


def read_statements(bundle: os.PathLike, key: Any) -> Dict[str, Dict[str, Any]]:
    """Every signed statement of a bundle, by file name, each checked with ``key`` (a public key, or a verifier of
    :mod:`yolo_det.attest.signers`; :class:`Mismatch` otherwise)."""
    folder = Path(bundle)
    verifier = key if hasattr(key, "prepare") else None
    if not folder.is_dir():
        raise AttestError(f"{folder}: no such bundle folder (the --out of yolo-det attest)")
    names = sorted(p.name for p in folder.glob("*.intoto.json"))
    if PROVENANCE not in names:
        raise AttestError(f"{folder} holds no {PROVENANCE}: not a yolo-det attestation bundle")
    if verifier is not None:
        verifier.prepare(folder)
    out = {}
    for name in names:
        try:
            envelope = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise AttestError(f"{folder / name}: not readable JSON ({exc})") from None
        stmt = verifier.open(envelope, name) if verifier is not None else signing.open_envelope(envelope, key, name)
        try:
            statements.validate(stmt)
        except AttestError as exc:
            raise Mismatch(f"{name}: {exc}") from None
        out[name] = stmt
    return out


def verify_bundle(bundle: os.PathLike, public_key: Optional[os.PathLike] = None, *,
                  weights: Optional[os.PathLike] = None, data_root: Optional[os.PathLike] = None,
                  cert_chain: Sequence[os.PathLike] = (), identity: Optional[str] = None,
                  issuer: Optional[str] = None) -> VerifyResult:
    """Check a bundle: the signatures (with the public key, a trusted CA chain, or a Sigstore identity and issuer),
    the weights against the subject and the model signature, the data folder against the manifest (when given), the
    statements against each other. Offline, except the Sigstore mode's trust root."""
    folder = Path(bundle)
    verifier = signers.for_verify(key=public_key, cert_chain=cert_chain, identity=identity, issuer=issuer)
    result = VerifyResult(folder)
    try:
        stmts = read_statements(folder, verifier)
    except Mismatch as exc:
        result.mismatches.append(str(exc))
        return result
    result.checked.append(f"{len(stmts)} statements signed by {verifier.describe()}")
    provenance = stmts[PROVENANCE]
    subject = provenance["subject"][0]
    result.subject = subject
    for name, stmt in stmts.items():
        if stmt.get("subject") != provenance["subject"]:
            result.mismatches.append(f"{name}: its subject {stmt.get('subject')} is not the provenance's {subject}")
    final = _byproduct(provenance, "final-record")
    for name, stmt in stmts.items():
        for entry in (stmt.get("predicate") or {}).get("configuration") or []:
            recorded = (entry.get("annotations") or {}).get("final_record")
            if recorded is not None and recorded != final:
                result.mismatches.append(f"{name}: it attests final record {recorded}, the provenance {final}")
    bom = stmts.get(BOM_STATEMENT, {}).get("predicate")
    if bom is not None:
        model = next((c for c in bom.get("components") or [] if c.get("bom-ref") == "model"), {})
        if model.get("version") != final:
            result.mismatches.append(f"{BOM_STATEMENT}: the model's final record {model.get('version')} is not the "
                                     f"provenance's {final}")
        on_disk = _json(folder / BOM)
        if on_disk is not None and on_disk != bom:
            result.mismatches.append(f"{BOM}: differs from the signed BOM in {BOM_STATEMENT} (edited after signing)")
    result.checked.append("statements agree on the subject and the final record")
    log_digest = (_byproduct(provenance, LOG, "sha256") or "")
    if (folder / LOG).is_file():
        if sha256_file(folder / LOG) != log_digest:
            result.mismatches.append(f"{LOG}: its SHA-256 is not the attested byproduct's")
        else:
            result.checked.append(f"{LOG} is the attested fingerprint log")
    index = _json(folder / INDEX) or {}
    path = Path(weights) if weights else (Path(index["weights"]) if isinstance(index.get("weights"), str) else None)
    if path is None or not path.is_file():
        result.checked.append(f"weights not checked: {path or 'none given'} (give --weights)")
    else:
        digest = sha256_file(path)
        if digest != subject["digest"].get("sha256"):
            result.mismatches.append(f"{path}: SHA-256 {digest[:16]}..., the attested {subject['name']} has "
                                     f"{subject['digest'].get('sha256', '')[:16]}...")
        try:
            verifier.verify_weights(path, folder / MODEL_SIGNATURE)
            result.checked.append(f"{path.name}: the model signature verifies")
        except Mismatch as exc:
            result.mismatches.append(str(exc))
    if data_root is not None:
        result.mismatches += data_mismatches(provenance, data_root)
        result.checked.append(f"data under {data_root} against the attested manifest")
    return result


def data_mismatches(provenance: Mapping[str, Any], root: os.PathLike, limit: int = 10) -> List[str]:
    """The data files under ``root`` whose digest is not the attested one (changed or missing), named."""
    deps = provenance["predicate"]["buildDefinition"].get("resolvedDependencies") or []
    files = {d["name"][len("data/"):]: d["digest"].get(statements.BLAKE2B_128) for d in deps
             if str(d.get("name", "")).startswith("data/")}
    if not files:
        return ["the provenance lists no data files: the run had no data manifest, so --data cannot be checked"]
    changed, missing = [], []
    for rel, digest in files.items():
        path = Path(root) / rel
        if not path.is_file():
            missing.append(rel)
        elif data_manifest.file_digest(path) != digest:
            changed.append(rel)
    out = []
    if changed:
        out.append(f"{len(changed)} data file(s) differ from the attested digests: " + ", ".join(changed[:limit])
                   + (", ..." if len(changed) > limit else ""))
    if missing:
        out.append(f"{len(missing)} attested data file(s) missing under {root}: " + ", ".join(missing[:limit])
                   + (", ..." if len(missing) > limit else ""))
    return out


def _byproduct(provenance: Mapping[str, Any], name: str, alg: str = statements.BLAKE2B_128) -> Optional[str]:
    for item in provenance["predicate"]["runDetails"].get("byproducts") or []:
        if item.get("name") == name:
            return (item.get("digest") or {}).get(alg)
    return None


def _json(path: Path) -> Optional[Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


__all__ = ["AttestResult", "Evidence", "VerifyResult", "attest_run", "data_mismatches", "read_statements",
           "verify_bundle"]
