"""The fingerprint log: a JSONL file, its writer and its validating reader.

Line 1 is a header (format name, schema version, digest algorithm, torch version, rank, world
size, host, command). Then one line per optimizer step, numbered from 1::

    {"step": 3, "digests": {"data": "<hex>", "loss": "<hex>", "grad": "<hex>", ...},
     "names": {"grad": ["model.0.conv.weight", ...]}, "lr": {"group0.lr": 0.01},
     "loss": [4.21], "items": [[0.11, 0.05, 0.02]]}

``digests[kind]`` concatenates one 32-character hex digest per tensor; ``names[kind]`` lists the
tensors and appears only when it differs from the previous step (so most lines carry digests
only). The last line holds the final state: ``{"final": true, "steps": S, "names": [...],
"digests": "<hex>", "closed_by": "finish"}``. Under DDP each rank writes its own file.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .digest import ALGORITHM, HEX_CHARS, split_hex

FORMAT = "yolo-det-fingerprint"
SCHEMA = 1
#: Digest kinds in the order they happen within a step (the order divergences are ranked in).
KINDS: Tuple[str, ...] = ("data", "loss", "grad", "lr", "param", "ema", "rng")
_HEX_RE = re.compile(r"[0-9a-f]*")


class FingerprintError(ValueError):
    """A fingerprint log cannot be used: missing, truncated, corrupt or of another schema."""


def rank_path(path: os.PathLike, rank: Optional[int]) -> Path:
    """The log of ``rank``: ``path`` itself for rank 0 (or no DDP), ``<stem>.rank<r><suffix>`` else."""
    path = Path(path)
    if rank is None or rank <= 0:
        return path
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def rank_paths(path: os.PathLike) -> Dict[int, Path]:
    """Every rank's log that exists for the rank-0 log ``path``: ``{rank: path}``."""
    path = Path(path)
    found = {0: path} if path.exists() else {}
    pattern = re.compile(re.escape(path.stem) + r"\.rank(\d+)" + re.escape(path.suffix) + "$")
    if path.parent.is_dir():
        for candidate in path.parent.iterdir():
            match = pattern.match(candidate.name)
            if match:
                found[int(match.group(1))] = candidate
    return dict(sorted(found.items()))


def _number(value: float) -> Any:
    """A float for JSON: non-finite values as strings, so the file stays standard JSON."""
    value = float(value)
    return value if math.isfinite(value) else repr(value)


def _as_float(value: Any) -> float:
    return float(value) if isinstance(value, (int, float, str)) else math.nan


@dataclass
class StepRecord:
    """One optimizer step: per kind, tensor names and their concatenated hex digests."""

    step: int
    names: Dict[str, List[str]]
    digests: Dict[str, str]
    lr: Dict[str, float] = field(default_factory=dict)
    losses: List[float] = field(default_factory=list)
    items: List[List[float]] = field(default_factory=list)
    ddp: Optional[Dict[str, Any]] = None

    def entries(self, kind: str) -> Dict[str, str]:
        """``{tensor name: hex digest}`` for ``kind`` (``lr`` values as text)."""
        if kind == "lr":
            return {name: repr(value) for name, value in self.lr.items()}
        return dict(zip(self.names.get(kind, []), split_hex(self.digests.get(kind, ""))))

    def count(self) -> int:
        """How many tensors (and lr values) this step fingerprints."""
        return sum(len(v) for v in self.names.values()) + len(self.lr)

    @property
    def loss(self) -> float:
        """The step's loss (sum over its backward passes), NaN when none was recorded."""
        return float(sum(self.losses)) if self.losses else math.nan


@dataclass
class FinalRecord:
    """The final state: model (and EMA) tensors after the last step."""

    steps: int
    names: List[str]
    digests: str
    closed_by: str = "finish"

    def entries(self) -> Dict[str, str]:
        return dict(zip(self.names, split_hex(self.digests)))


@dataclass
class Log:
    """A fingerprint log read from disk (see :func:`read_log`)."""

    path: Path
    header: Dict[str, Any]
    steps: List[StepRecord]
    final: Optional[FinalRecord]

    @property
    def complete(self) -> bool:
        """True when the run closed the log (the final line is present)."""
        return self.final is not None

    @property
    def rank(self) -> int:
        return int(self.header.get("rank", 0) or 0)

    @property
    def world_size(self) -> int:
        return int(self.header.get("world_size", 1) or 1)

    def losses(self) -> List[float]:
        """The loss of every step (NaN where none was recorded)."""
        return [step.loss for step in self.steps]

    def ddp_mismatches(self) -> List[StepRecord]:
        """Steps at which this run's DDP ranks held different parameters."""
        return [s for s in self.steps if s.ddp and not s.ddp.get("ok", True)]


class LogWriter:
    """Writes one log: the header now, then a line per step, then the final line.

    Each line is flushed when written, so a crashed run leaves every completed step on disk.
    """

    def __init__(self, path: os.PathLike, header: Mapping[str, Any]) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w", encoding="utf-8")
        except OSError as exc:
            raise FingerprintError(f"cannot write the fingerprint log {self.path}: {exc.strerror}; point "
                                   "YOLO_DET_FINGERPRINT (or --fingerprint) at a writable file") from None
        self._last_names: Dict[str, List[str]] = {}
        self._lines = 0
        self._write({"format": FORMAT, "schema": SCHEMA, "digest": ALGORITHM, **header})

    def replace_header(self, header: Mapping[str, Any]) -> bool:
        """Rewrite the header while it is the only line (facts learned after the log opened, e.g.
        the seed a patched script applies itself); False once a step is written."""
        if self._lines != 1 or self._file.closed:
            return False
        self._file.seek(0)
        self._file.truncate()
        self._lines = 0
        self._write({"format": FORMAT, "schema": SCHEMA, "digest": ALGORITHM, **header})
        return True

    def _write(self, obj: Mapping[str, Any]) -> None:
        self._file.write(json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n")
        self._file.flush()
        self._lines += 1

    def write_step(self, step: int, kinds: Mapping[str, Tuple[Sequence[str], str]], *,
                   lr: Mapping[str, float], losses: Sequence[float] = (),
                   items: Sequence[Sequence[float]] = (), ddp: Optional[Mapping[str, Any]] = None) -> None:
        """Write step ``step``: ``kinds`` maps kind to (tensor names, concatenated hex digests)."""
        line: Dict[str, Any] = {"step": step, "digests": {k: hexes for k, (_, hexes) in kinds.items()}}
        changed = {k: list(names) for k, (names, _) in kinds.items() if self._last_names.get(k) != list(names)}
        if changed:
            line["names"] = changed
            self._last_names.update(changed)
        line["lr"] = {k: _number(v) for k, v in lr.items()}
        if losses:
            line["loss"] = [_number(v) for v in losses]
        if items:
            line["items"] = [[_number(v) for v in row] for row in items]
        if ddp is not None:
            line["ddp"] = dict(ddp)
        self._write(line)

    def write_final(self, steps: int, names: Sequence[str], hexes: str, closed_by: str) -> None:
        self._write({"final": True, "steps": steps, "names": list(names), "digests": hexes,
                     "closed_by": closed_by})

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


# -- reading --------------------------------------------------------------------------------
def _check_digests(path: Path, lineno: int, names: Sequence[str], hexes: Any, what: str) -> str:
    if not isinstance(hexes, str) or not _HEX_RE.fullmatch(hexes) or len(hexes) != HEX_CHARS * len(names):
        raise FingerprintError(
            f"{path} is corrupt: line {lineno} has {what} digests that do not match its "
            f"{len(names)} tensor names")
    return hexes


def _parse_header(path: Path, line: str) -> Dict[str, Any]:
    try:
        header = json.loads(line)
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise FingerprintError(
            f"{path} is not a yolo-det fingerprint log (its first line is not a '{FORMAT}' header)")
    schema = header.get("schema")
    if not isinstance(schema, int) or schema > SCHEMA or schema < 1:
        raise FingerprintError(
            f"{path} uses fingerprint schema {schema!r}; this yolo-det reads schema {SCHEMA}: "
            "compare it with the yolo-det version that wrote it, or upgrade")
    if header.get("digest") != ALGORITHM:
        raise FingerprintError(
            f"{path} uses digest algorithm {header.get('digest')!r}; this yolo-det computes "
            f"{ALGORITHM!r}, so its digests cannot be compared")
    return header


def _parse_step(path: Path, lineno: int, obj: Dict[str, Any], expected: int,
                names: Dict[str, List[str]]) -> StepRecord:
    if obj.get("step") != expected:
        raise FingerprintError(f"{path} is corrupt: line {lineno} is step {obj.get('step')!r}, expected {expected}")
    digests = obj.get("digests")
    if not isinstance(digests, dict):
        raise FingerprintError(f"{path} is corrupt: line {lineno} has no digests")
    for kind, new in (obj.get("names") or {}).items():
        if not isinstance(new, list):
            raise FingerprintError(f"{path} is corrupt: line {lineno} has bad names for {kind!r}")
        names[kind] = [str(n) for n in new]
    step_names = {kind: names.get(kind, []) for kind in digests}
    for kind, hexes in digests.items():
        _check_digests(path, lineno, step_names[kind], hexes, kind)
    lr = obj.get("lr") or {}
    return StepRecord(
        step=expected, names=step_names, digests=dict(digests),
        lr={str(k): _as_float(v) for k, v in lr.items()},
        losses=[_as_float(v) for v in obj.get("loss") or []],
        items=[[_as_float(v) for v in row] for row in obj.get("items") or []],
        ddp=obj.get("ddp"),
    )


def read_log(path: os.PathLike) -> Log:
    """Read and validate a fingerprint log.

    Raises :class:`FingerprintError` naming the file and the problem when it is missing,
    empty, truncated (last line incomplete: the run was killed or is still writing),
    corrupt (a line that is not valid JSON, steps out of order), or of another schema.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise FingerprintError(f"{path}: no such fingerprint log") from None
    except OSError as exc:
        raise FingerprintError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FingerprintError(f"{path} is not a yolo-det fingerprint log (not UTF-8 text)") from None
    if not text.strip():
        raise FingerprintError(f"{path} is empty: the run never started fingerprinting "
                               "(was YOLO_DET_FINGERPRINT set when yolo_det.configure() ran?)")
    lines = text.split("\n")
    truncated_tail = lines[-1] != ""
    if not truncated_tail:
        lines.pop()
    if truncated_tail and len(lines) == 1:
        raise FingerprintError(f"{path} is truncated: its header line is incomplete; the run was killed "
                               "or is still starting")
    header = _parse_header(path, lines[0])
    steps: List[StepRecord] = []
    final: Optional[FinalRecord] = None
    names: Dict[str, List[str]] = {}
    for index, line in enumerate(lines[1:], start=2):
        if final is not None:
            raise FingerprintError(f"{path} is corrupt: line {index} follows the final line")
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            if index == len(lines) and truncated_tail:
                raise FingerprintError(
                    f"{path} is truncated: its last line ({index}) is incomplete; the run was killed "
                    "or is still writing. Rerun it, or compare logs of finished runs")
            raise FingerprintError(f"{path} is corrupt: line {index} is not a JSON object")
        if obj.get("final") is True:
            final_names = obj.get("names")
            if not isinstance(final_names, list):
                raise FingerprintError(f"{path} is corrupt: the final line (line {index}) has no names")
            hexes = _check_digests(path, index, final_names, obj.get("digests"), "final")
            final = FinalRecord(int(obj.get("steps", len(steps))), [str(n) for n in final_names], hexes,
                                str(obj.get("closed_by", "finish")))
            continue
        steps.append(_parse_step(path, index, obj, len(steps) + 1, names))
    return Log(path=path, header=header, steps=steps, final=final)


def iter_kinds(record: StepRecord) -> Iterable[str]:
    """The kinds present in ``record``, in :data:`KINDS` order, then any others."""
    present = set(record.digests) | ({"lr"} if record.lr else set())
    yield from (k for k in KINDS if k in present)
    yield from sorted(present - set(KINDS))


__all__ = ["FORMAT", "SCHEMA", "KINDS", "FingerprintError", "FinalRecord", "Log", "LogWriter", "StepRecord",
           "rank_path", "rank_paths", "read_log"]
