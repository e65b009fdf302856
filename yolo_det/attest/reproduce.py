"""``yolo-det reproduce``: re-run an attested training on this machine from its provenance statement alone, and
compare the new record with the attested one step by step.

The data is checked against the attested digests first (a changed file is named, and nothing is trained); the
command runs in the attested working folder (or ``--cwd``) with its outputs moved under ``--workdir`` and the
attested mode and environment variables; the new fingerprint log is compared with the bundle's, as ``yolo-det
diff`` compares two runs. Bit-identical, with the attested final record: a *reproduced* Test Result statement,
signed with the reproducer's key when one is given (a third party's assurance). Otherwise the first divergence and
its likely cause (another torch, CPU instruction set, GPU).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional

from ..core import verdicts
from ..core.machine import cpu_facts
from . import bundle as bundles, signing, statements
from .run import final_digest, sha256_file
from .signing import AttestError

#: Options that say where a run writes; their value is moved under the reproduction's workdir.
PROJECT_OPTIONS = {"yolov5": "--project", "ultralytics": "project="}
REPRODUCED_STATEMENT = "reproduced.intoto.json"


@dataclass
class ReproduceResult:
    """A reproduction: its verdict, the new log, where the runs part (when they do) and the causes."""

    bundle: Path
    log: Optional[Path]
    verdict: str
    steps: int = 0
    lines: List[str] = field(default_factory=list)
    causes: List[Dict[str, str]] = field(default_factory=list)
    statement: Optional[Path] = None

    @property
    def exit_code(self) -> int:
        return verdicts.exit_code(self.verdict)

    def to_json(self) -> Dict[str, Any]:
        return verdicts.stamp({"bundle": str(self.bundle), "log": str(self.log) if self.log else None,
                               "steps": self.steps, "details": self.lines, "causes": self.causes,
                               "statement": str(self.statement) if self.statement else None}, self.verdict)


def _program(provenance: Mapping[str, Any]) -> Optional[str]:
    for dep in provenance["predicate"]["buildDefinition"].get("resolvedDependencies") or []:
        name = str(dep.get("name", ""))
        for program in PROJECT_OPTIONS:
            if name.startswith(f"pkg:pypi/{program}@"):
                return program
    return None


def command_for(provenance: Mapping[str, Any], workdir: Path, data_root: Optional[str] = None) -> List[str]:
    """The attested command with its outputs under ``workdir/runs`` and, where ``data_root`` replaces the attested
    root, its data paths moved there; a Python script is run with this interpreter."""
    external = provenance["predicate"]["buildDefinition"]["externalParameters"]
    cmd = [str(c) for c in external.get("command") or []]
    if not cmd:
        raise AttestError("the provenance names no command to re-run")
    old_root = external.get("data_root")
    if data_root and old_root and os.path.abspath(data_root) != os.path.abspath(old_root):
        cmd = [c.replace(str(old_root), str(Path(data_root).resolve())) for c in cmd]
    option = PROJECT_OPTIONS.get(_program(provenance) or "")
    project = str(workdir / "runs")
    if option == "--project":
        if "--project" in cmd and cmd.index("--project") + 1 < len(cmd):
            cmd[cmd.index("--project") + 1] = project
        else:
            cmd += ["--project", project]
    elif option == "project=":
        cmd = [c for c in cmd if not c.startswith("project=")] + [f"project={project}"]
    if cmd[0].endswith(".py"):
        cmd = [sys.executable] + cmd
    if option == "project=":  # Ultralytics: the integration is on only under `yolo-det run`, as when attested
        cmd = [sys.executable, "-m", "yolo_det", "run", "--deterministic", str(external.get("mode") or "strict"),
               "--"] + cmd
    return cmd


def reproduce(bundle: os.PathLike, *, workdir: os.PathLike = "yolo-det-reproduce", data_root: Optional[os.PathLike] = None,
              cwd: Optional[os.PathLike] = None, verify_key: Optional[os.PathLike] = None,
              key: Optional[os.PathLike] = None, env: Optional[Mapping[str, str]] = None,
              progress: Optional[Callable[[str], None]] = None) -> ReproduceResult:
    """Re-run the training a bundle attests and compare it with the attested record."""
    from ..proof.compare import compare_logs
    from ..proof.runner import VerifyError, run_once

    folder = Path(bundle)
    say = progress or (lambda _m: None)
    if verify_key is not None:
        stmts = bundles.read_statements(folder, signing.load_public_key(verify_key))
        provenance = stmts[bundles.PROVENANCE]
        say(f"the bundle's {len(stmts)} statements verify with {verify_key}")
    else:
        envelope = signing.envelope_of(_load(folder / bundles.PROVENANCE))
        import base64

        try:
            provenance = json.loads(base64.b64decode(envelope["payload"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise AttestError(f"{folder / bundles.PROVENANCE}: not a DSSE envelope ({exc})") from None
        say("warning: the bundle's signatures were not checked (give --verify-key PUB.pem)")
    statements.validate(provenance)
    attested_log = folder / bundles.LOG
    if not attested_log.is_file():
        raise AttestError(f"{folder} holds no {bundles.LOG}: the attested record to compare with is missing")
    if sha256_file(attested_log) != bundles._byproduct(provenance, bundles.LOG, "sha256"):  # noqa: SLF001
        return ReproduceResult(folder, None, verdicts.DIFFERS, lines=[f"{bundles.LOG} is not the attested "
                                                                     "fingerprint log (changed after signing)"])
    external = provenance["predicate"]["buildDefinition"]["externalParameters"]
    root = Path(data_root) if data_root else (Path(external["data_root"]) if external.get("data_root") else None)
    if root is not None:
        say(f"checking the data under {root} against the attested digests")
        mismatches = bundles.data_mismatches(provenance, root)
        if mismatches:
            return ReproduceResult(folder, None, verdicts.DIFFERS, lines=mismatches + ["nothing was trained"],
                                   causes=[{"class": "data", "what": "data_files", "message": mismatches[0]}])
    work = Path(workdir).resolve()
    cmd = command_for(provenance, work, str(data_root) if data_root else None)
    run_cwd = Path(cwd) if cwd else Path(external.get("cwd") or ".")
    if not run_cwd.is_dir():
        raise AttestError(f"the attested working folder {run_cwd} does not exist here: give the training code's "
                          "folder with --cwd")
    internal = provenance["predicate"]["buildDefinition"].get("internalParameters") or {}
    run_env = dict(os.environ if env is None else env)
    # yolo-det's own switches as the run had them; the others the header lists (OMP_NUM_THREADS, PYTHONHASHSEED)
    # are read when the log opens, after the release set them itself: set at start they would change the run.
    run_env.update({str(k): str(v) for k, v in (internal.get("env") or {}).items() if str(k).startswith("YOLO_DET_")})
    if (run_cwd / "__init__.py").is_file() and (run_cwd / "train.py").is_file():  # a copy of the PyPI yolov5:
        parent = str(run_cwd.resolve().parent)  # the patched copy is what `import yolov5` must find (docs/patch.md)
        rest = [p for p in run_env.get("PYTHONPATH", "").split(os.pathsep) if p and p != parent]
        run_env["PYTHONPATH"] = os.pathsep.join([parent] + rest)
    try:
        run = run_once(cmd, 1, 1, work / "run", run_env, run_cwd, say, 0.5, None)
    except VerifyError as exc:
        raise AttestError(f"the re-run failed: {exc}") from None
    log = run.log
    comparison = compare_logs(attested_log, log)
    from ..record.log import LogReader

    with LogReader(log) as reader:
        for _ in reader:
            pass
        final = reader.final
    attested_final = bundles._byproduct(provenance, "final-record")  # noqa: SLF001
    new_final = final_digest(final.digests) if final is not None else None
    lines = comparison.describe(("attested", "re-run"))
    word = comparison.verdict
    if word == verdicts.IDENTICAL and new_final != attested_final:
        word = verdicts.DIFFERS
        lines.append(f"the re-run's final record {new_final} is not the attested {attested_final}")
    result = ReproduceResult(folder, log, word, steps=comparison.steps, lines=lines,
                             causes=[c.to_dict() for c in comparison.causes])
    if word == verdicts.IDENTICAL and key is not None:
        result.statement = _reproduced_statement(folder, provenance, log, key, work)
    return result


def _reproduced_statement(folder: Path, provenance: Mapping[str, Any], log: Path, key: os.PathLike,
                          work: Path) -> Path:
    """The *reproduced* Test Result: signed by the reproducer, naming the re-run's log and machine."""
    signer = signing.load_signer(key)
    cpu = cpu_facts()
    final = bundles._byproduct(provenance, "final-record")  # noqa: SLF001
    predicate = {
        "result": "PASSED",
        "configuration": [{"name": "reproduction/fingerprint.jsonl", "digest": {"sha256": sha256_file(log)},
                           "annotations": {"assurance": statements.REPRODUCED, "command": "reproduce",
                                           "verdict": verdicts.IDENTICAL, "final_record": final,
                                           "machine": f"{cpu.get('model')} ({cpu.get('dispatch')})"}}],
        "passedTests": [f"re-run by the signer of this statement: every step and the final record {final} "
                        "bit-identical to the attested run"],
        "warnedTests": [], "failedTests": []}
    stmt = statements.statement(provenance["subject"], statements.TEST_RESULT, predicate)
    path = work / REPRODUCED_STATEMENT
    path.write_text(json.dumps(signing.sign_statement(stmt, signer), indent=2, sort_keys=True) + "\n",
                    encoding="utf-8")
    return path


def _load(path: Path) -> Dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AttestError(f"{path.parent} holds no {path.name}: not a yolo-det attestation bundle") from None
    except (OSError, ValueError) as exc:
        raise AttestError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise AttestError(f"{path}: not a DSSE envelope")
    return data


__all__ = ["ReproduceResult", "command_for", "reproduce"]
