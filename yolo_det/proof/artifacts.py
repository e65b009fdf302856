"""What a run leaves in its folder, compared between runs: ``weights/last.pt``, ``weights/best.pt``, ``results.csv``.

YOLOv5 and Ultralytics both save into ``<save_dir>/weights/`` and append one row per epoch to
``<save_dir>/results.csv``. Checkpoints are compared tensor by tensor (:mod:`.checkpoint`); the
results table cell by cell, except columns that hold wall-clock time (Ultralytics' ``time``),
which are listed but not judged. The run folder comes from the fingerprint log's final line.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ..core import verdicts
from .checkpoint_format import CheckpointError

if TYPE_CHECKING:
    from .checkpoint import CheckpointComparison

CHECKPOINTS = ("weights/last.pt", "weights/best.pt")
RESULTS = "results.csv"
#: results.csv columns that hold wall-clock time: expected to differ, not judged.
TIME_COLUMNS = ("time",)


@dataclass
class TableComparison(verdicts.Judged):
    """``results.csv`` of two runs: identical, or the first differing cell."""

    paths: Tuple[str, str]
    rows: int = 0
    columns: List[str] = field(default_factory=list)
    first: Optional[str] = None  # "epoch 2, metrics/mAP_0.5: 0.11 vs 0.10" or a shape difference
    differing: int = 0
    not_judged: List[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        """No cell differs and at least one row was compared (two header-only tables prove nothing)."""
        return self.first is None and self.rows > 0

    @property
    def differs(self) -> bool:
        return self.first is not None

    @property
    def verdict(self) -> str:
        """``identical``, ``differs`` or ``not proven`` (no row compared)."""
        return verdicts.DIFFERS if self.differs else verdicts.IDENTICAL if self.identical else verdicts.NOT_PROVEN

    def to_json(self) -> Dict[str, Any]:
        return self.stamped({"identical": self.identical, "differs": self.differs, "files": list(self.paths), "rows": self.rows,
                "differing_cells": self.differing, "first": self.first, "not_judged": list(self.not_judged)})


def _read_table(path: Path) -> Tuple[List[str], List[List[str]]]:
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = [[cell.strip() for cell in row] for row in csv.reader(handle) if row]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise CheckpointError(f"{path}: cannot read it as a results table ({exc})") from None
    return (rows[0], rows[1:]) if rows else ([], [])


def compare_tables(a: os.PathLike, b: os.PathLike) -> TableComparison:
    """Compare two ``results.csv`` files cell by cell (text as written; wall-clock columns skipped)."""
    ha, ra = _read_table(Path(a))
    hb, rb = _read_table(Path(b))
    result = TableComparison((str(a), str(b)), rows=min(len(ra), len(rb)), columns=ha)
    result.not_judged = [c for c in ha if c.lower() in TIME_COLUMNS]
    if ha != hb:
        result.first = f"the columns differ: {len(ha)} vs {len(hb)} ({', '.join(sorted(set(ha) ^ set(hb)))})"
        result.differing = 1
        return result
    judged = [i for i, c in enumerate(ha) if c.lower() not in TIME_COLUMNS]
    for number, (row_a, row_b) in enumerate(zip(ra, rb)):
        for i in judged:
            va = row_a[i] if i < len(row_a) else ""
            vb = row_b[i] if i < len(row_b) else ""
            if va != vb:
                result.differing += 1
                if result.first is None:
                    label = row_a[0] if row_a else str(number)
                    result.first = f"row {number + 1} ({ha[0] if ha else 'epoch'} {label}), {ha[i]}: {va} vs {vb}"
    if len(ra) != len(rb):
        result.differing += abs(len(ra) - len(rb))
        result.first = result.first or f"{len(ra)} rows vs {len(rb)}"
    return result


@dataclass
class ArtifactComparison(verdicts.Judged):
    """The checkpoints and results table of two runs; ``missing`` lists files that were not there to compare.

    Three verdicts: ``differs`` (a file differs, or exists in one run only), ``identical`` (nothing differs and
    the weights -- what decides -- were compared tensor by tensor) and otherwise not proven: nothing differs
    among what was there, but no checkpoint was compared. An empty comparison is never ``identical``.
    """

    run_dirs: Tuple[Optional[str], Optional[str]]
    checkpoints: Dict[str, CheckpointComparison] = field(default_factory=dict)
    results: Optional[TableComparison] = None
    missing: List[str] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        """A file differs, exists in one run only, or cannot be read."""
        return bool(self.errors) or any(c.differing for c in self.checkpoints.values()) or (
            self.results is not None and self.results.differs)

    @property
    def proven(self) -> bool:
        """Whether the weights were compared (at least one checkpoint with tensors)."""
        return any(c.proven for c in self.checkpoints.values())

    @property
    def identical(self) -> bool:
        return not self.differs and self.proven

    @property
    def verdict(self) -> str:
        """``identical``, ``differs`` or ``not proven``."""
        return verdicts.DIFFERS if self.differs else verdicts.IDENTICAL if self.proven else verdicts.NOT_PROVEN

    @property
    def compared(self) -> bool:
        return bool(self.checkpoints) or self.results is not None

    def compared_files(self) -> List[str]:
        """The files compared in both runs (``weights/last.pt``, ``results.csv``)."""
        return list(self.checkpoints) + ([RESULTS] if self.results is not None else [])

    def to_json(self) -> Dict[str, Any]:
        return self.stamped({"run_dirs": list(self.run_dirs), "identical": self.identical,
                "compared": self.compared_files(),
                "checkpoints": {name: c.to_json() for name, c in self.checkpoints.items()},
                "results_csv": self.results.to_json() if self.results is not None else None,
                "missing": list(self.missing), "errors": list(self.errors)})

    def describe(self) -> List[str]:
        lines = []
        for name, comparison in self.checkpoints.items():
            text = comparison.describe(limit=5)
            lines.append(f"{Path(name).name}: {text[0]}")
            lines.extend(f"  {line}" for line in text[1:])
        if self.results is not None:
            r = self.results
            skipped = f" ({', '.join(r.not_judged)} not judged)" if r.not_judged else ""
            lines.append(f"{RESULTS}: identical, {r.rows} rows{skipped}" if r.identical else
                         f"{RESULTS}: no rows to compare (header only)" if not r.differs else
                         f"{RESULTS}: differs in {r.differing} cells, first at {r.first}")
        lines.extend(f"error: {e}" for e in self.errors)
        if self.missing:
            lines.append("not compared (missing in both runs): " + ", ".join(self.missing))
        return lines


def compare_run_dirs(a: Optional[os.PathLike], b: Optional[os.PathLike]) -> ArtifactComparison:
    """Compare what two runs saved (their folders from the logs' final lines; None: unknown)."""
    result = ArtifactComparison((None if a is None else str(a), None if b is None else str(b)))
    if a is None or b is None:
        result.missing.append("run folder (the log's final line names none)")
        return result
    for rel in CHECKPOINTS + (RESULTS,):
        pa, pb = Path(a) / rel, Path(b) / rel
        if not pa.is_file() or not pb.is_file():
            if pa.is_file() != pb.is_file():
                result.errors.append(f"{rel} exists in only one run ({pa if pa.is_file() else pb})")
            else:
                result.missing.append(rel)
            continue
        try:
            if rel == RESULTS:
                result.results = compare_tables(pa, pb)
            else:
                from .checkpoint import compare_checkpoints  # torch, only when there are checkpoints to compare

                result.checkpoints[rel] = compare_checkpoints(pa, pb)
        except CheckpointError as exc:
            result.errors.append(str(exc))
    return result


__all__ = ["ArtifactComparison", "CHECKPOINTS", "RESULTS", "TableComparison", "compare_run_dirs", "compare_tables"]
