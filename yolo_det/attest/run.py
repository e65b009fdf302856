"""What an attestation says about one run, read from its folder: the weights, the command and settings, the mode
and seeds, the data it read, the code, the machine, and the record that closes it.

Everything comes from files the run wrote itself (``determinism.json``, the fingerprint log's header and final line,
``data_manifest.json``, ``args.yaml``/``opt.yaml``/``hyp.yaml``); nothing is re-derived from the machine that
attests, so an attestation made later or elsewhere says what the run did.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..core import data_manifest
from ..core.data_manifest import sha256_file
from ..proof.run_dirs import RunDirError, RunFolder
from ..record.log import FingerprintError, LogReader
from .signing import AttestError

#: The weights an attestation signs when none is named, in this order.
WEIGHTS = ("weights/best.pt", "weights/last.pt", "best.pt", "last.pt")
#: Modes whose runs have the record an attestation stands on.
RECORDED_MODES = ("strict", "warn")


def final_digest(digests: str) -> str:
    """The one digest of a final record's per-tensor digests (the run's weights, EMA and optimizer state),
    as the trackers and ``determinism.json`` readers name it."""
    return hashlib.blake2b(digests.encode("ascii"), digest_size=16).hexdigest()


@dataclass
class AttestedRun:
    """One finished strict/warn run, as an attestation describes it."""

    folder: RunFolder
    weights: Path
    weights_sha256: str
    header: Dict[str, Any]
    log: Path
    log_sha256: str
    steps: int
    final_record: str  # blake2b-128 of the final line's per-tensor digests
    closed_by: Optional[str]
    notes: List[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.folder.path

    @property
    def report(self) -> Dict[str, Any]:
        return self.folder.report or {}

    @property
    def manifest(self) -> Optional[Dict[str, Any]]:
        return self.folder.manifest

    @property
    def mode(self) -> Optional[str]:
        return self.report.get("mode")

    @property
    def seeds(self) -> Dict[str, Any]:
        seeds = self.report.get("seeds")
        out = {"seed": self.report.get("seed")}
        if isinstance(seeds, dict):
            out.update({k: seeds.get(k) for k in ("init", "order", "augment") if k in seeds})
        return out

    @property
    def program(self) -> Optional[str]:
        """``yolov5`` or ``ultralytics``: the training program whose section ``determinism.json`` has."""
        return next((name for name in ("yolov5", "ultralytics") if name in self.report), None)

    @classmethod
    def read(cls, run_dir: os.PathLike, weights: Optional[os.PathLike] = None) -> "AttestedRun":
        """Read a run folder; :class:`AttestError` naming what is missing when it cannot be attested."""
        try:
            folder = RunFolder.read(run_dir)
        except RunDirError as exc:
            raise AttestError(str(exc)) from None
        report = folder.report
        if not isinstance(report, dict):
            raise AttestError(f"{folder.path} has no readable determinism.json: only a strict or warn run (yolo-det's "
                              "record of it) can be attested; train with --deterministic strict")
        if report.get("mode") not in RECORDED_MODES:
            raise AttestError(f"{folder.path} ran under mode {report.get('mode')!r}: only strict and warn runs keep "
                              "the record an attestation stands on")
        if folder.log is None:
            raise AttestError(f"{folder.path}: its fingerprint log is missing (determinism.json names "
                              f"{report.get('fingerprint_log')!r}); the record cannot be attested without it")
        weights_path = Path(weights) if weights else next(
            (folder.path / w for w in WEIGHTS if (folder.path / w).is_file()), None)
        if weights_path is None or not weights_path.is_file():
            raise AttestError(f"{folder.path}: no weights to attest ({weights or ', '.join(WEIGHTS)}); name them "
                              "with --weights")
        try:
            with LogReader(folder.log) as reader:
                header = dict(reader.header)
                steps = sum(1 for _ in reader)
                final = reader.final
        except FingerprintError as exc:
            raise AttestError(f"the run's fingerprint log cannot be read: {exc}") from None
        if final is None:
            raise AttestError(f"{folder.log} has no final record: the run did not finish (killed, or still running); "
                              "attest a finished run")
        return cls(folder=folder, weights=weights_path.resolve(), weights_sha256=sha256_file(weights_path),
                   header=header, log=folder.log.resolve(), log_sha256=sha256_file(folder.log), steps=steps,
                   final_record=final_digest(final.digests), closed_by=final.closed_by,
                   notes=list(folder.notes))

    def data_files(self) -> Dict[str, str]:
        """``path under the data root -> blake2b-128`` of every image and label the run read (its data manifest)."""
        out: Dict[str, str] = {}
        for _, record in sorted(((self.manifest or {}).get("splits") or {}).items()):
            for kind in ("images", "labels"):
                for rel, entry in (record.get(kind) or {}).items():
                    if isinstance(entry, dict) and entry.get("digest"):
                        out[rel] = entry["digest"]
        return dict(sorted(out.items()))

    def data_digest(self) -> Optional[str]:
        return data_manifest.content_digest(self.manifest) if self.manifest else None


__all__ = ["AttestedRun", "RECORDED_MODES", "WEIGHTS", "final_digest", "sha256_file"]
