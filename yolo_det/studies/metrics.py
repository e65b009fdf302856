"""One seed's metrics: its ``results.csv`` columns at the final epoch and at the best one, ``fitness`` from the log.

The best epoch is the last validation with the highest fitness (the one the release saves as best.pt); a resumed
run's rows are matched by their ``epoch`` column. Also the run's hardware, as its fingerprint header names it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..proof.artifacts import RESULTS, _read_table
from ..record.log import Log
from .results import StudyRun

#: results.csv columns that are not metrics (the epoch, wall-clock time).
NOT_METRICS = ("epoch", "time")


def run_metrics(log: Log) -> Dict[str, Any]:
    """``metrics`` (final epoch), ``best`` and ``best_epoch`` of one finished run.

    Metric names are the run's ``results.csv`` columns (stripped) and ``fitness`` from the log's
    validation records; without a results.csv, the names the validation records carry. The best
    epoch is the last validation with the highest fitness (the one the release saves as best.pt).
    """
    validations = [v for v in log.validations if v.metrics]
    run_dir = log.final.run_dir if log.final is not None else None
    columns: List[str] = []
    rows: List[List[str]] = []
    table = Path(run_dir) / RESULTS if run_dir else None
    if table is not None and table.is_file():
        columns, rows = _read_table(table)
    best_index = None
    if validations:
        fitness = [v.metrics.get("fitness", float("nan")) for v in validations]
        finite = [f for f in fitness if f == f]
        if finite:
            top = max(finite)
            best_index = max(i for i, f in enumerate(fitness) if f == top)

    def row_metrics(row: Sequence[str]) -> Dict[str, float]:
        out = {}
        for name, cell in zip(columns, row):
            if name.lower() in NOT_METRICS:
                continue
            try:
                out[name] = float(cell)
            except ValueError:
                continue
        return out

    def at(k: Optional[int], row: Optional[Sequence[str]]) -> Dict[str, float]:
        values = row_metrics(row) if row is not None else (dict(validations[k].metrics) if k is not None else {})
        if k is not None and "fitness" in validations[k].metrics:
            values["fitness"] = float(validations[k].metrics["fitness"])
        return values

    paired = bool(rows) and len(rows) == len(validations)  # one validation per epoch: rows and records align
    final_k = len(validations) - 1 if validations else None
    final = at(final_k, rows[-1] if rows else None)
    best_row = rows[best_index] if paired and best_index is not None else None
    if best_row is None and best_index is not None and rows:  # a resumed run: its log may lack earlier epochs
        best_row = _rows_by_epoch(columns, rows).get(validations[best_index].epoch)
    best = at(best_index, best_row) if best_index is not None else {}
    epoch = validations[best_index].epoch if best_index is not None else None
    return {"metrics": final, "best": best, "best_epoch": epoch, "run_dir": run_dir}


def _rows_by_epoch(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> Dict[int, Sequence[str]]:
    """results.csv rows by their ``epoch`` column (the last row of an epoch written twice: once before a kill,
    again after the resume); empty without one."""
    names = [c.lower() for c in columns]
    if "epoch" not in names:
        return {}
    k = names.index("epoch")
    out: Dict[int, Sequence[str]] = {}
    for row in rows:
        try:
            out[int(float(row[k]))] = row
        except (ValueError, IndexError):
            continue
    return out


def hardware_of(header: Mapping[str, Any]) -> str:
    """A run's hardware from its fingerprint header: its GPU models with their counts (``2 x NVIDIA A100``),
    ``CPU`` where it saw none, ``unknown`` where the header does not say."""
    if "gpus" not in header:
        return "unknown"
    gpus = Counter(str(g) for g in header.get("gpus") or [])
    return ", ".join(f"{n} x {name}" for name, n in sorted(gpus.items())) if gpus else "CPU"


def _study_run(log: Log, index: int, seed: int) -> StudyRun:
    found = run_metrics(log)
    return StudyRun(index, seed, dict(log.header.get("seeds") or {}), str(log.path), found["run_dir"],
                    found["metrics"], found["best"], found["best_epoch"], log.header.get("mode"),
                    log.header.get("initial_weights"), {"hardware": hardware_of(log.header)})


__all__ = ["NOT_METRICS", "hardware_of", "run_metrics"]
