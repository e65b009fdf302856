"""Comparing two hyperparameter searches: YOLOv5 ``--evolve`` and the Ultralytics tuner.

A search folder holds one row per generation: ``evolve.csv`` (YOLOv5 v6.2+), ``evolve.txt`` (v5.0 to
v6.1, yolov7: no header), ``tune_results.ndjson`` (Ultralytics 8.4) or ``tune_results.csv`` (earlier).
Each row's hyperparameters and metrics are judged, exactly; paths (the trials' run folders) and time
columns are not. The first generation that differs is named with why: its hyperparameters (the
mutation: the seeding records in ``search_seeds.jsonl`` say whether seeds or mode differed) or only
its metrics (the trial trained differently with the same hyperparameters).
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..core import verdicts
from ..core.search import RECORDS, read_records

#: Results files of a search, the first found wins.
RESULTS = ("evolve.csv", "evolve.txt", "tune_results.ndjson", "tune_results.csv")
#: Where a search announces its folder to ``verify`` (beside the run's fingerprint log).
POINTER = "search.json"
_TIME_WORDS = ("time", "date", "duration", "seconds", "elapsed")
_EVOLVE_TXT_METRICS = 7  # P, R, mAP50, mAP50-95 and three validation losses lead every v5.0-style row


class SearchError(ValueError):
    """A folder holds no search results that can be read."""


@dataclass
class Row:
    """One generation: its hyperparameters and metrics (judged) and what is shown but not judged."""

    hyperparameters: Dict[str, Any]
    metrics: Dict[str, Any]
    ignored: Dict[str, Any] = field(default_factory=dict)


@dataclass
class SearchComparison(verdicts.Judged):
    """Two searches row by row: identical, or the first generation that differs and why."""

    folders: Tuple[str, str]
    rows: Tuple[int, int]
    generation: Optional[int] = None
    reason: str = ""
    details: List[str] = field(default_factory=list)
    values: int = 0  # judged values (hyperparameters and metrics) compared in the common rows

    @property
    def differs(self) -> bool:
        return self.generation is not None or self.rows[0] != self.rows[1]

    @property
    def identical(self) -> bool:
        """Every row equal and at least one judged value compared (two empty searches prove nothing)."""
        return not self.differs and self.values > 0

    @property
    def verdict(self) -> str:
        """``identical``, ``differs`` or ``not proven`` (no row with a judged value in common)."""
        return verdicts.DIFFERS if self.differs else verdicts.IDENTICAL if self.values > 0 else verdicts.NOT_PROVEN

    def describe(self, labels: Sequence[str] = ("A", "B")) -> List[str]:
        head = f"search ({labels[0]}: {self.folders[0]}, {labels[1]}: {self.folders[1]})"
        if self.identical:
            return [f"identical: {self.rows[0]} generations (hyperparameters and metrics; paths and times not judged) "
                    f"- {head}"]
        if not self.differs:
            return [f"not proven: {self.rows[0]} generations in both and {self.values} judged values: no row holds a "
                    f"hyperparameter or metric to compare (times and paths are not judged) - {head}"]
        where = f"generation {self.generation}" if self.generation is not None else "the number of generations"
        return [f"diverged at {where}: {self.reason} - {head}", *[f"  {line}" for line in self.details]]

    def to_json(self) -> Dict[str, Any]:
        return self.stamped({"identical": self.identical, "values": self.values,
                "folders": list(self.folders), "rows": list(self.rows),
                "generation": self.generation, "reason": self.reason, "details": self.details})


def is_search(folder: "os.PathLike[str] | str") -> bool:
    """Whether ``folder`` holds a search's results file."""
    return Path(folder).is_dir() and any((Path(folder) / name).is_file() for name in RESULTS)


def read_rows(folder: "os.PathLike[str] | str") -> List[Row]:
    """The generations of the search in ``folder``, in order."""
    folder = Path(folder)
    for name in RESULTS:
        path = folder / name
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            if name.endswith(".ndjson"):
                return _ndjson_rows(text)
            if name == "evolve.txt":
                return _txt_rows(text)
            return _csv_rows(text)
    raise SearchError(f"{folder} holds no search results ({', '.join(RESULTS)}); give the folder of an "
                      "--evolve run or of a tune")


def _judged(key: str) -> bool:
    low = key.lower()
    return not any(word in low for word in _TIME_WORDS)


def _number(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text.strip()


def _csv_rows(text: str) -> List[Row]:
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    header = [h.strip() for h in next(reader, [])]
    rows = []
    for values in reader:
        if not values:
            continue
        cells = dict(zip(header, (_number(v) for v in values)))
        row = Row({}, {})
        for key, value in cells.items():
            if not _judged(key):
                row.ignored[key] = value
            elif "/" in key or key == "fitness":  # metrics/..., val/...; Ultralytics' fitness column
                row.metrics[key] = value
            else:
                row.hyperparameters[key] = value
        rows.append(row)
    return rows


def _txt_rows(text: str) -> List[Row]:
    rows = []
    for line in text.splitlines():
        values = [_number(v) for v in line.split()]
        if values:
            rows.append(Row({f"column {i + 1}": v for i, v in enumerate(values[_EVOLVE_TXT_METRICS:],
                                                                           _EVOLVE_TXT_METRICS)},
                            {f"column {i + 1}": v for i, v in enumerate(values[:_EVOLVE_TXT_METRICS])}))
    return rows


def _ndjson_rows(text: str) -> List[Row]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        metrics = {"fitness": record.get("fitness")}
        for dataset, values in sorted((record.get("datasets") or {}).items()):
            metrics.update({f"{dataset}: {k}": v for k, v in (values or {}).items() if _judged(k)})
        ignored = {k: v for k, v in record.items() if k not in ("hyperparameters", "datasets", "fitness")}
        rows.append(Row(dict(record.get("hyperparameters") or {}), metrics, ignored))
    return rows


def _differences(a: Dict[str, Any], b: Dict[str, Any]) -> List[str]:
    keys = list(a) + [k for k in b if k not in a]
    return [f"{k}: {a.get(k, '(absent)')!r} vs {b.get(k, '(absent)')!r}" for k in keys if a.get(k) != b.get(k)]


def _generation_records(records: Tuple[List[dict], List[dict]], generation: int) -> List[Optional[dict]]:
    """Each search's seeding record of ``generation`` (None where it has none)."""
    return [next((r for r in rs if r.get("generation") == generation), None) for rs in records]


def _seeding_reason(records: Tuple[List[dict], List[dict]], generation: int) -> str:
    """Why a generation's mutation differed, from the two searches' seeding records."""
    found = _generation_records(records, generation)
    if found[0] is None or found[1] is None:
        return (f"no seeding record ({RECORDS}) for this generation: the search did not run under yolo-det "
                "(patch train.py / use yolo-det run), so its mutation came from the clock")
    a, b = found
    if not a.get("seeded") or not b.get("seeded"):
        return "the mutation was drawn from the release's own generator (mode off: the wall clock / OS entropy)"
    if a.get("search_seed") != b.get("search_seed"):
        return f"the searches have different seeds ({a.get('search_seed')} vs {b.get('search_seed')})"
    return ("the same seed and generation gave other parents: an earlier trial's fitness differed, "
            "or the release changed")


def _training_reason(records: Tuple[List[dict], List[dict]], generation: int) -> str:
    """Why a generation's trial trained differently with the same hyperparameters."""
    found = _generation_records(records, generation)
    if found[0] is not None and found[1] is not None:
        if found[0].get("trial_seed") != found[1].get("trial_seed"):
            seeds = (found[0].get("trial_seed"), found[1].get("trial_seed"))
            return f"the trials trained with different seeds ({seeds[0]} vs {seeds[1]})"
        if found[0].get("mode") != found[1].get("mode"):
            modes = (found[0].get("mode"), found[1].get("mode"))
            return f"the trials trained under different modes ({modes[0]} vs {modes[1]})"
    return ("the trial trained differently (check it with yolo-det verify on one training, or compare the "
            "trials' fingerprint logs with yolo-det diff)")


def compare_searches(a: "os.PathLike[str] | str", b: "os.PathLike[str] | str") -> SearchComparison:
    """Compare the searches in folders ``a`` and ``b`` generation by generation."""
    rows_a, rows_b = read_rows(a), read_rows(b)
    result = SearchComparison((str(a), str(b)), (len(rows_a), len(rows_b)))
    records = (read_records(a), read_records(b))
    for generation, (ra, rb) in enumerate(zip(rows_a, rows_b)):
        checks = ((ra.hyperparameters, rb.hyperparameters, "hyperparameters differ ({n})", _seeding_reason),
                  (ra.metrics, rb.metrics, "same hyperparameters, different metrics", _training_reason))
        for a_values, b_values, what, reason in checks:
            result.values += len(set(a_values) | set(b_values))
            differences = _differences(a_values, b_values)
            if differences:
                result.generation = generation
                result.reason = f"{what.format(n=len(differences))}: {reason(records, generation)}"
                result.details = differences[:10] + _ignored(ra, rb)
                return result
    if len(rows_a) != len(rows_b):
        result.reason = (f"{len(rows_a)} vs {len(rows_b)} generations, identical as far as both go "
                         "(a search stopped early, or was resumed with another count)")
    return result


def _ignored(a: Row, b: Row) -> List[str]:
    return [f"not judged: {line}" for line in _differences(a.ignored, b.ignored)]


def announce(folder: "os.PathLike[str] | str", fingerprint_log: Optional[str]) -> None:
    """Tell ``verify`` where this run's search is: ``search.json`` beside the fingerprint log it asked for."""
    if not fingerprint_log:
        return
    path = Path(fingerprint_log).parent / POINTER
    try:
        path.write_text(json.dumps({"folder": str(Path(folder).resolve())}), encoding="utf-8")
    except OSError:
        pass  # verify then reports the run without its search


def announced(run_dir: "os.PathLike[str] | str") -> Optional[str]:
    """The search folder a verify run announced, or None."""
    path = Path(run_dir) / POINTER
    try:
        return str(json.loads(path.read_text(encoding="utf-8"))["folder"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


__all__ = ["POINTER", "RESULTS", "Row", "SearchComparison", "SearchError", "announce", "announced",
           "compare_searches", "is_search", "read_rows"]
