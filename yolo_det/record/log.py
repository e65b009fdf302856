"""The fingerprint log: a JSONL file, its writer and its validating reader.

Line 1 is a header (format name, schema version, digest algorithm, torch version, rank, world
size, host, command). Then one line per optimizer step, numbered from 1::

    {"step": 3, "digests": {"data": "<hex>", "loss": "<hex>", "grad": "<hex>", ...},
     "names": {"grad": ["model.0.conv.weight", ...]}, "lr": {"group0.lr": 0.01},
     "loss": [4.21], "items": [[0.11, 0.05, 0.02]]}

``digests[kind]`` concatenates one 32-character hex digest per tensor; ``names[kind]`` lists the
tensors and appears only when it differs from the previous step (so most lines carry digests
only). After each validation a line ``{"val": true, "epoch": E, "after_step": S, "names": [...],
"digests": "<hex>", "metrics": {"precision": ..., "mAP50": ..., "fitness": ...}, "best": B,
"stop": B}`` holds a digest of every image's predictions after NMS (names ``batch<j>.image<i>``;
BLAKE2b-128 of dtype, shape and bytes, see ``fingerprint.prediction_digests``). Optional keys:
``settings`` (what the evaluation ran with, :mod:`.eval_settings`), ``boxes`` (boxes per image, as
``names``) and ``files`` (the image file of each name, where known). A log of a standalone
evaluation has validation records and no steps.
Compact record (header ``"record": "compact"``, the default of a run's own log): most steps are one line
``{"r":"<8 hex per kind>"}`` (about 57 bytes): one root digest per kind of :data:`COMPACT_KINDS`, in that order,
``--------`` for a kind the step lacks; the step number is the line's place. A root is
:func:`root_digest` of the kind's concatenated per-tensor digests (order-fixed), so it can be computed
from a full line too and a compact log compares with a full one. The first step, the step before each
validation and the last step are written in full.
The last line holds the final state: ``{"final": true, "steps": S, "names": [...],
"digests": "<hex>", "closed_by": "finish", "run_dir": "..."}`` (``run_dir``: where the run saved
its checkpoints and results.csv, when known). Under DDP each rank writes its own file.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from ..core import env_names, json_shapes
from ..core.mode import ConfigError
from .digest_format import ALGORITHM, HEX_CHARS, READABLE, split_hex

#: The environment variable that turns fingerprinting on: the log's path (how ``verify`` talks to a run).
ENV_VAR = env_names.FINGERPRINT
FORMAT = "yolo-det-fingerprint"
SCHEMA = 1
#: Digest kinds in the order they happen within a step (the order divergences are ranked in).
KINDS: Tuple[str, ...] = ("data", "loss", "grad", "lr", "param", "ema", "rng")
_HEX_RE = re.compile(r"[0-9a-f]*")
#: Kinds of a compact line, in their order there (``lr`` follows from the step; its effect shows in ``param``).
COMPACT_KINDS: Tuple[str, ...] = ("data", "loss", "grad", "param", "ema", "rng")
ROOT_CHARS = 8  # a root digest: 32 bits, hex
ABSENT = "-" * ROOT_CHARS
#: The tensor name a root digest stands under (a compact step names no tensors).
ROOT_NAME = "(all tensors)"
_COMPACT_RE = re.compile(r"(?:[0-9a-f]{%d}|-{%d}){%d}" % (ROOT_CHARS, ROOT_CHARS, len(COMPACT_KINDS)))


def root_digest(hexes: str) -> str:
    """One kind's root: BLAKE2b-32 of its per-tensor hex digests concatenated in the log's order."""
    import hashlib

    return hashlib.blake2b(hexes.encode("ascii"), digest_size=ROOT_CHARS // 2).hexdigest()


class FingerprintError(ValueError):
    """A fingerprint log cannot be used: missing, truncated, corrupt or of another schema."""


class FingerprintPathError(FingerprintError, ConfigError):
    """The log cannot be written where ``YOLO_DET_FINGERPRINT`` (or ``--fingerprint``) points: a
    setting with a bad value, so it is reported like one (one line, exit status 2)."""


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
    compact: bool = False  # a compact line: one root digest per kind (digests[kind]), no tensor names

    def root(self, kind: str) -> Optional[str]:
        """The root digest of ``kind`` (None when the step has none)."""
        hexes = self.digests.get(kind)
        if hexes is None:
            return None
        return hexes if self.compact else root_digest(hexes)

    def entries(self, kind: str) -> Dict[str, str]:
        """``{tensor name: hex digest}`` for ``kind`` (``lr`` values as text; a compact step: its root)."""
        if self.compact:
            return {ROOT_NAME: self.digests[kind]} if kind in self.digests else {}
        if kind == "lr":
            return {name: repr(value) for name, value in self.lr.items()}
        return dict(zip(self.names.get(kind, []), split_hex(self.digests.get(kind, ""))))

    def count(self) -> int:
        """How many tensors (and lr values) this step fingerprints."""
        if self.compact:
            return len(self.digests)
        return sum(len(v) for v in self.names.values()) + len(self.lr)

    @property
    def loss(self) -> float:
        """The step's loss (sum over its backward passes), NaN when none was recorded."""
        return float(sum(self.losses)) if self.losses else math.nan


@dataclass
class ValRecord:
    """One validation: a digest per image's predictions after NMS, the metrics, best / early stop."""

    epoch: Optional[int]
    after_step: int
    names: List[str]
    digests: str
    metrics: Dict[str, float] = field(default_factory=dict)
    best: Optional[bool] = None
    stop: Optional[bool] = None
    settings: Optional[Dict[str, Any]] = None  # eval_settings.KEYS; None in logs written before them
    boxes: Optional[List[int]] = None  # boxes per image, in the order of names
    files: Optional[List[Optional[str]]] = None  # the image file of each name
    evaluator: Optional[Dict[str, Any]] = None  # which evaluator and rules computed metrics; None in older logs

    def entries(self) -> Dict[str, str]:
        return dict(zip(self.names, split_hex(self.digests)))


@dataclass
class FinalRecord:
    """The final state: model (and EMA) tensors after the last step."""

    steps: int
    names: List[str]
    digests: str
    closed_by: str = "finish"
    run_dir: Optional[str] = None

    def entries(self) -> Dict[str, str]:
        return dict(zip(self.names, split_hex(self.digests)))


class _RunFacts:
    """What a log's header and final line say about the run (shared by :class:`Log` and :class:`LogReader`)."""

    header: Dict[str, Any]
    final: Optional["FinalRecord"]
    truncated: Optional[str] = None  # why the last line was left out (cut by a kill), None when whole

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


@dataclass
class Log(_RunFacts):
    """A fingerprint log read from disk (see :func:`read_log`)."""

    path: Path
    header: Dict[str, Any]
    steps: List[StepRecord]
    final: Optional[FinalRecord]
    validations: List[ValRecord] = field(default_factory=list)
    truncated: Optional[str] = None

    def losses(self) -> List[float]:
        """The loss of every step (NaN where none was recorded)."""
        return [step.loss for step in self.steps]

    @property
    def count(self) -> int:
        """How many steps the log holds (as :attr:`LogReader.count` once read through)."""
        return len(self.steps)

    def ddp_mismatches(self) -> List[StepRecord]:
        """Steps at which this run's DDP ranks held different parameters."""
        return [s for s in self.steps if s.ddp and not s.ddp.get("ok", True)]


class LogWriter:
    """Writes one log: the header now, then a line per step, then the final line.

    Each line is flushed when written, so a crashed run leaves every completed step on disk.
    """

    def __init__(self, path: Optional[os.PathLike], header: Mapping[str, Any], compact: bool = False) -> None:
        self.path = None if path is None else Path(path)
        self.compact = compact
        self._file: Any = io.StringIO() if self.path is None else self._open(self.path)
        self._last_names: Dict[str, List[str]] = {}
        self._lines = 0
        self._write(self._header(header))

    @staticmethod
    def _open(path: Path) -> Any:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return open(path, "w", encoding="utf-8")
        except OSError as exc:
            raise FingerprintPathError(f"cannot write the fingerprint log {path}: {exc.strerror}; point "
                                       "YOLO_DET_FINGERPRINT (or --fingerprint) at a writable file") from None

    def place(self, path: os.PathLike) -> None:
        """Write a log opened without a path (an evaluation learns its run folder late) to ``path``: the lines
        kept so far, then every later line as it comes."""
        if self.path is not None:
            raise ValueError(f"the fingerprint log is already at {self.path}")
        kept = self._file.getvalue()
        self.path = Path(path)
        self._file = self._open(self.path)
        self._file.write(kept)
        self._file.flush()

    def _header(self, header: Mapping[str, Any]) -> Dict[str, Any]:
        return {"format": FORMAT, "schema": SCHEMA, "digest": ALGORITHM,
                "record": "compact" if self.compact else "full", **header}

    def replace_header(self, header: Mapping[str, Any]) -> bool:
        """Rewrite the header while it is the only line (facts learned after the log opened, e.g.
        the seed a patched script applies itself); False once a step is written."""
        if self._lines != 1 or self._file.closed:
            return False
        self._file.seek(0)
        self._file.truncate()
        self._lines = 0
        self._write(self._header(header))
        return True

    def _write(self, obj: Mapping[str, Any]) -> None:
        self._file.write(json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n")
        self._file.flush()
        self._lines += 1

    def write_step(self, step: int, kinds: Mapping[str, Tuple[Sequence[str], str]], *,
                   lr: Mapping[str, float], losses: Sequence[float] = (),
                   items: Sequence[Sequence[float]] = (), ddp: Optional[Mapping[str, Any]] = None,
                   full: bool = True) -> None:
        """Write step ``step``: ``kinds`` maps kind to (tensor names, concatenated hex digests); in a compact
        log a step not asked ``full`` (and without a DDP finding) is one line of root digests."""
        if self.compact and not full and (ddp is None or ddp.get("ok", True)):
            roots = "".join(root_digest(kinds[k][1]) if k in kinds else ABSENT for k in COMPACT_KINDS)
            self._file.write('{"r":"' + roots + '"}\n')
            self._file.flush()
            self._lines += 1
            return
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

    def write_validation(self, epoch: Optional[int], after_step: int, names: Sequence[str], hexes: str,
                         metrics: Mapping[str, float], best: Optional[bool], stop: Optional[bool],
                         settings: Optional[Mapping[str, Any]] = None, boxes: Optional[Sequence[int]] = None,
                         files: Optional[Sequence[Optional[str]]] = None,
                         evaluator: Optional[Mapping[str, Any]] = None) -> None:
        """Write one validation record (after the line of step ``after_step``); the optional keys when given
        (``evaluator``: which evaluator and rules computed ``metrics``)."""
        line: Dict[str, Any] = {"val": True, "epoch": epoch, "after_step": after_step, "names": list(names),
                                "digests": hexes, "metrics": {k: _number(v) for k, v in metrics.items()},
                                "best": best, "stop": stop}
        for key, value in (("settings", settings), ("boxes", boxes), ("files", files)):
            if value is not None:
                line[key] = dict(value) if key == "settings" else list(value)
        if evaluator is not None:
            line["evaluator"] = dict(evaluator)
        self._write(line)

    def write_final(self, steps: int, names: Sequence[str], hexes: str, closed_by: str,
                    run_dir: Optional[str] = None) -> None:
        line = {"final": True, "steps": steps, "names": list(names), "digests": hexes, "closed_by": closed_by}
        if run_dir is not None:
            line["run_dir"] = str(run_dir)
        self._write(line)

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
    if not _is_int(schema) or schema > SCHEMA or schema < 1:
        raise FingerprintError(
            f"{path} uses fingerprint schema {schema!r}; this yolo-det reads schema {SCHEMA}: "
            "compare it with the yolo-det version that wrote it, or upgrade")
    if header.get("digest") not in READABLE:
        raise FingerprintError(
            f"{path} uses digest algorithm {header.get('digest')!r}; this yolo-det reads logs of "
            f"{' and '.join(repr(r) for r in READABLE)}, so its digests cannot be compared")
    for key in ("rank", "world_size"):
        if header.get(key) is not None and not _is_int(header[key]):
            raise FingerprintError(f"{path} is corrupt: its header has {key} {header[key]!r}, not a whole number")
    shape = json_shapes.problem(header, json_shapes.FINGERPRINT_HEADER)  # issue 59: never a traceback downstream
    if shape:
        raise FingerprintError(f"{path} is corrupt: in its header, {shape}")
    return header


def check_comparable(a: Any, b: Any) -> None:
    """Refuse two logs (anything with ``path`` and ``header``) whose digests were made with different
    algorithms: a difference between them would say nothing about the runs."""
    da, db = a.header.get("digest"), b.header.get("digest")
    if da != db:
        raise FingerprintError(
            f"{a.path} was made with digest algorithm {da!r} and {b.path} with {db!r}, so their digests cannot "
            f"be compared; record both runs with the same yolo-det (this one writes {ALGORITHM!r})")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _float(path: Path, lineno: int, value: Any, what: str) -> float:
    """A number as written by :func:`_number` (non-finite ones as text), or a corrupt-log error."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise FingerprintError(f"{path} is corrupt: line {lineno} has {what} {value!r}, not a number")


def _floats(path: Path, lineno: int, value: Any, what: str) -> List[float]:
    if not isinstance(value, list):
        raise FingerprintError(f"{path} is corrupt: line {lineno} has {what} {_short(value)}, not a list of numbers")
    return [_float(path, lineno, v, what) for v in value]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _parse_compact(path: Path, lineno: int, obj: Dict[str, Any], expected: int) -> StepRecord:
    roots = obj.get("r")
    if not isinstance(roots, str) or not _COMPACT_RE.fullmatch(roots):
        raise FingerprintError(f"{path} is corrupt: line {lineno} is not a compact step (\"r\": "
                               f"{len(COMPACT_KINDS)} root digests of {ROOT_CHARS} hex characters)")
    digests = {kind: roots[i * ROOT_CHARS:(i + 1) * ROOT_CHARS] for i, kind in enumerate(COMPACT_KINDS)}
    return StepRecord(step=expected, names={}, digests={k: v for k, v in digests.items() if v != ABSENT},
                      compact=True)


def _parse_step(path: Path, lineno: int, obj: Dict[str, Any], expected: int,
                names: Dict[str, List[str]]) -> StepRecord:
    if "r" in obj and "digests" not in obj:
        return _parse_compact(path, lineno, obj, expected)
    if obj.get("step") != expected or not _is_int(obj.get("step")):
        raise FingerprintError(f"{path} is corrupt: line {lineno} is step {obj.get('step')!r}, expected {expected}")
    digests = obj.get("digests")
    if not isinstance(digests, dict):
        raise FingerprintError(f"{path} is corrupt: line {lineno} has no digests")
    new_names = obj.get("names") or {}
    if not isinstance(new_names, dict):
        raise FingerprintError(f"{path} is corrupt: line {lineno} has names {_short(new_names)}, not a mapping "
                               "of kind to tensor names")
    for kind, new in new_names.items():
        if not isinstance(new, list) or not all(isinstance(n, str) for n in new):
            raise FingerprintError(f"{path} is corrupt: line {lineno} has bad names for {kind!r}")
        names[kind] = new
    step_names = {kind: names.get(kind, []) for kind in digests}
    for kind, hexes in digests.items():
        _check_digests(path, lineno, step_names[kind], hexes, kind)
    lr = obj.get("lr") or {}
    if not isinstance(lr, dict):
        raise FingerprintError(f"{path} is corrupt: line {lineno} has lr {_short(lr)}, not a mapping of name to value")
    items = obj.get("items") or []
    if not isinstance(items, list):
        raise FingerprintError(f"{path} is corrupt: line {lineno} has items {_short(items)}, not a list of lists")
    ddp = obj.get("ddp")
    if ddp is not None and (not isinstance(ddp, dict) or not isinstance(ddp.get("ok", True), bool)):
        raise FingerprintError(f"{path} is corrupt: line {lineno} has ddp {_short(ddp)}, not a DDP check record")
    return StepRecord(
        step=expected, names=step_names, digests=dict(digests),
        lr={str(k): _float(path, lineno, v, f"lr {k!r}") for k, v in lr.items()},
        losses=_floats(path, lineno, obj.get("loss") or [], "loss"),
        items=[_floats(path, lineno, row, "items") for row in items],
        ddp=ddp,
    )


def _parse_final(path: Path, lineno: int, obj: Dict[str, Any], steps: int) -> FinalRecord:
    final_names = obj.get("names")
    if not isinstance(final_names, list) or not all(isinstance(n, str) for n in final_names):
        raise FingerprintError(f"{path} is corrupt: the final line (line {lineno}) has no names")
    hexes = _check_digests(path, lineno, final_names, obj.get("digests"), "final")
    count = obj.get("steps", steps)
    if not _is_int(count):
        raise FingerprintError(f"{path} is corrupt: the final line (line {lineno}) has steps {count!r}, "
                               "not a whole number")
    run_dir = obj.get("run_dir")
    if run_dir is not None and not isinstance(run_dir, str):
        raise FingerprintError(f"{path} is corrupt: the final line (line {lineno}) has run_dir {run_dir!r}, "
                               "not a path")
    return FinalRecord(count, list(final_names), hexes, str(obj.get("closed_by", "finish")), run_dir)


class LogReader(_RunFacts):
    """Reads a fingerprint log one line at a time (memory bounded by one line, whatever the log's size).

    The header is read and checked when the reader is made; iterating yields the steps in order,
    collects :attr:`validations` and then sets :attr:`final`. Raises :class:`FingerprintError` like :func:`read_log`. Use it
    as a context manager (or call :meth:`close`).
    """

    def __init__(self, path: os.PathLike) -> None:
        self.path = Path(path)
        self.final: Optional[FinalRecord] = None
        self.validations: List[ValRecord] = []  # one per validation: a few per epoch, kept in memory
        self.count = 0
        self.truncated: Optional[str] = None
        self._mismatches: List[StepRecord] = []
        try:
            if self.path.is_dir():
                raise FingerprintError(f"{self.path} is a folder, not a fingerprint log")
            self._file = open(self.path, "rb")
        except FileNotFoundError:
            raise FingerprintError(f"{self.path}: no such fingerprint log") from None
        except OSError as exc:
            raise FingerprintError(f"{self.path}: cannot read: {exc.strerror}") from None
        self._lineno = 0
        first = self._next_line()
        while first is not None and not first[0].strip("\ufeff \t\r"):
            first = self._next_line()  # blank lines before the header
        if first is None:
            self.close()
            raise FingerprintError(f"{self.path} is empty: the run never started fingerprinting "
                                   "(was YOLO_DET_FINGERPRINT set when yolo_det.configure() ran?)")
        text, complete = first
        if not complete:
            self.close()
            raise FingerprintError(f"{self.path} is truncated: its header line is incomplete; the run was killed "
                                   "or is still starting")
        self.header = _parse_header(self.path, text.lstrip("\ufeff"))

    def _next_line(self) -> Optional[Tuple[str, bool]]:
        """(text, ends with a newline), or None at the end of the file."""
        raw = self._file.readline()
        if not raw:
            return None
        self._lineno += 1
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            self.close()
            raise FingerprintError(f"{self.path} is not a yolo-det fingerprint log (line {self._lineno} is not "
                                   "UTF-8 text)") from None
        complete = text.endswith("\n")
        return (text[:-1] if complete else text), complete

    def __iter__(self) -> Iterator[StepRecord]:
        names: Dict[str, List[str]] = {}
        blank: Optional[int] = None
        try:
            while True:
                got = self._next_line()
                if got is None:
                    return
                line, complete = got
                index = self._lineno
                if not line.strip():
                    blank = index if blank is None else blank  # blank lines at the end are tolerated
                    continue
                if blank is not None:
                    raise FingerprintError(f"{self.path} is corrupt: line {blank} is empty")
                if self.final is not None:
                    raise FingerprintError(f"{self.path} is corrupt: line {index} follows the final line")
                try:
                    obj = json.loads(line)
                except ValueError:
                    obj = None
                if not isinstance(obj, dict):
                    if not complete:  # a kill cuts at most the line being written: the lines before it hold
                        self.truncated = (f"{self.path} is truncated: its last line ({index}) is incomplete (the run "
                                          f"was killed or is still writing); the {self.count} complete steps "
                                          "before it were used")
                        return
                    raise FingerprintError(f"{self.path} is corrupt: line {index} is not a JSON object")
                if obj.get("final") is True:
                    self.final = _parse_final(self.path, index, obj, self.count)
                    continue
                if obj.get("val") is True:
                    self.validations.append(_parse_validation(self.path, index, obj, self.count))
                    continue
                step = _parse_step(self.path, index, obj, self.count + 1, names)
                self.count += 1
                if step.ddp and not step.ddp.get("ok", True):
                    self._mismatches.append(step)
                yield step
        finally:
            self.close()

    def ddp_mismatches(self) -> List[StepRecord]:
        """The steps read so far at which DDP ranks held different parameters."""
        return list(self._mismatches)

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> "LogReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_TAIL = 1 << 16  # the bytes read from the end of a log for its final line first (it holds every tensor's digest)


def read_final(path: os.PathLike) -> Optional[FinalRecord]:
    """The log's final line, read from the end of the file (a long log is not read through) and checked as
    :class:`LogReader` checks it; None when the log is missing, unreadable or the run did not close it."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            chunk = _TAIL
            while True:
                f.seek(max(0, size - chunk))
                lines = f.read().rstrip(b"\r\n\t ").rsplit(b"\n", 1)
                if len(lines) == 2 or chunk >= size:
                    break
                chunk *= 4
    except OSError:
        return None
    try:
        last = json.loads(lines[-1].decode("utf-8").lstrip("\ufeff"))
    except ValueError:
        return None
    if not isinstance(last, dict) or last.get("final") is not True:
        return None
    try:
        return _parse_final(path, 0, last, 0)
    except FingerprintError:
        return None


def read_log(path: os.PathLike) -> Log:
    """Read and validate a fingerprint log.

    Raises :class:`FingerprintError` naming the file and the problem when it is missing,
    empty, truncated (last line incomplete: the run was killed or is still writing),
    corrupt (a line that is not valid JSON, a field of the wrong type, steps out of order),
    or of another schema. A BOM and blank lines at the end are accepted; an incomplete last line (a
    kill cuts only the line being written) is left out and :attr:`Log.truncated` says so.
    """
    with LogReader(path) as reader:
        steps = list(reader)
        return Log(path=reader.path, header=reader.header, steps=steps, final=reader.final,
                   validations=reader.validations, truncated=reader.truncated)


def _parse_validation(path: Path, lineno: int, obj: Dict[str, Any], steps: int) -> ValRecord:
    names = obj.get("names")
    if not isinstance(names, list):
        raise FingerprintError(f"{path} is corrupt: the validation record on line {lineno} has no names")
    hexes = _check_digests(path, lineno, names, obj.get("digests"), "validation")
    after = obj.get("after_step")
    if not isinstance(after, int) or after != steps:
        raise FingerprintError(f"{path} is corrupt: the validation record on line {lineno} follows step {steps} "
                               f"but says after_step {after!r}")
    metrics = obj.get("metrics") or {}
    epoch = obj.get("epoch")
    settings = obj.get("settings")
    boxes = obj.get("boxes")
    files = obj.get("files")
    return ValRecord(epoch if isinstance(epoch, int) else None, after, [str(n) for n in names], hexes,
                     {str(k): _as_float(v) for k, v in metrics.items()},
                     obj.get("best") if isinstance(obj.get("best"), bool) else None,
                     obj.get("stop") if isinstance(obj.get("stop"), bool) else None,
                     settings if isinstance(settings, dict) else None,
                     [int(b) for b in boxes] if isinstance(boxes, list) and len(boxes) == len(names)
                     and all(isinstance(b, int) for b in boxes) else None,
                     [f if isinstance(f, str) else None for f in files]
                     if isinstance(files, list) and len(files) == len(names) else None,
                     obj.get("evaluator") if isinstance(obj.get("evaluator"), dict) else None)


def iter_kinds(record: StepRecord) -> Iterable[str]:
    """The kinds present in ``record``, in :data:`KINDS` order, then any others."""
    present = set(record.digests) | ({"lr"} if record.lr else set())
    yield from (k for k in KINDS if k in present)
    yield from sorted(present - set(KINDS))


__all__ = ["ABSENT", "COMPACT_KINDS", "ROOT_NAME", "root_digest", "FORMAT", "SCHEMA", "KINDS", "FingerprintError", "FingerprintPathError", "FinalRecord", "Log", "LogReader",
           "LogWriter", "StepRecord", "ValRecord", "check_comparable", "rank_path", "rank_paths", "read_final", "read_log"]
