"""Capture PyTorch's nondeterministic-op alerts, count them per op, and summarise them.

PyTorch raises (strict) or warns (``warn_only=True``) with the text
``"<op> does not have a deterministic implementation, but you set ..."``. Warnings raised
in autograd's device threads are replayed in the thread that called ``.backward()``, so a
``warnings`` hook sees them all. Python's default filters show a warning once per code
location and obey the user's ``ignore`` filters; recording puts an ``always`` filter for
the alert first, so every occurrence is counted even when the caller filtered warnings.

An allow-list (pytorch #64883: PyTorch has no per-op switch) runs PyTorch warn-only and
escalates every alert whose op is not allowed into the RuntimeError strict mode raises.
"""

from __future__ import annotations

import contextlib
import re
import threading
import warnings
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional

ALERT_RE = re.compile(r"(?P<op>[\w.:<>\[\]-]+) does not have a deterministic implementation")
_FILTER_RE = r"(?s).*does not have a deterministic implementation"
_STRICT_TAIL = (
    "'torch.use_deterministic_algorithms(True)'. You can turn off determinism just for this "
    "operation, or you can use the 'warn_only=True' option, if that's acceptable for your "
    "application. You can also file an issue at https://github.com/pytorch/pytorch/issues to "
    "help us prioritize adding deterministic support for this operation."
)


def parse_alert(text: str) -> Optional[str]:
    """The op name in a PyTorch nondeterminism alert, or None when ``text`` is not one."""
    match = ALERT_RE.search(text)
    return match.group("op") if match else None


def strict_message(op: str) -> str:
    """The exact RuntimeError text PyTorch raises for ``op`` under strict determinism."""
    return f"{op} does not have a deterministic implementation, but you set {_STRICT_TAIL}"


@dataclass
class OpRecord:
    """How often one op alerted, at which step first, and what happened to it."""

    op: str
    count: int = 0
    first_step: Optional[int] = None
    action: str = "warned"  # warned | allowed | raised

    def to_dict(self) -> dict:
        return {"op": self.op, "count": self.count, "first_step": self.first_step, "action": self.action}


class ViolationReport:
    """Every nondeterministic-op alert seen, per op. ``ops`` maps op name to count.

    ``step`` is the training step to attribute new alerts to (None when unknown); the
    runtime keeps it current.
    """

    def __init__(self) -> None:
        self.records: Dict[str, OpRecord] = {}
        self.step: Optional[int] = None
        self.notes: List[str] = []
        self._lock = threading.Lock()

    @property
    def ops(self) -> Dict[str, int]:
        return {op: rec.count for op, rec in self.records.items()}

    def __bool__(self) -> bool:  # a report is truthy when something alerted
        return bool(self.records)

    def add(self, op: str, action: str = "warned", count: int = 1) -> None:
        """Record ``count`` alerts of ``op``; ``raised`` outranks ``allowed`` outranks ``warned``."""
        with self._lock:
            rec = self.records.get(op)
            if rec is None:
                rec = self.records[op] = OpRecord(op, first_step=self.step, action=action)
            rec.count += count
            rank = ("warned", "allowed", "raised")
            if rank.index(action) > rank.index(rec.action):
                rec.action = action

    def note(self, text: str) -> None:
        """Add a finding that is not an op alert (e.g. CUBLAS_WORKSPACE_CONFIG set too late)."""
        if text not in self.notes:
            self.notes.append(text)

    def to_dict(self) -> dict:
        return {
            "ops": [rec.to_dict() for rec in sorted(self.records.values(), key=lambda r: (-r.count, r.op))],
            "total": sum(rec.count for rec in self.records.values()),
            "notes": list(self.notes),
        }

    def summary(self) -> str:
        """A short table for the end of training."""
        if not self.records and not self.notes:
            return "yolo-det: no nondeterministic ops ran."
        lines = []
        if self.records:
            width = max(len(op) for op in self.records)
            lines.append(f"yolo-det: nondeterministic ops that ran ({sum(self.ops.values())} alerts)")
            lines.append(f"  {'op'.ljust(width)}  {'count':>7}  {'first step':>10}  action")
            for rec in sorted(self.records.values(), key=lambda r: (-r.count, r.op)):
                step = "-" if rec.first_step is None else str(rec.first_step)
                lines.append(f"  {rec.op.ljust(width)}  {rec.count:>7}  {step:>10}  {rec.action}")
        for text in self.notes:
            lines.append(f"yolo-det: note: {text}")
        return "\n".join(lines)


class OpaqueReport:
    """Kernels PyTorch's determinism switch cannot see (compiled extensions, flash-attn, ...) and
    what the run did about each: ``replaced``, ``allowed``, ``warned``, ``refused`` or
    ``not run here`` (named in source, not importable in this process)."""

    ACTIONS = ("not run here", "replaced", "warned", "allowed", "refused")

    def __init__(self) -> None:
        self.records: Dict[str, dict] = {}

    def __bool__(self) -> bool:
        return bool(self.records)

    def add(self, finding: dict, action: str) -> None:
        """Record one finding (``op``, ``modules``, ...: a plain dict) with what was done about it."""
        if action not in self.ACTIONS:
            raise ValueError(f"opaque kernel action {action!r} is not one of {', '.join(self.ACTIONS)}")
        record = self.records.setdefault(finding["op"], {**finding, "modules": [], "action": action})
        record["modules"] += [m for m in finding.get("modules", []) if m not in record["modules"]]
        if self.ACTIONS.index(action) > self.ACTIONS.index(record["action"]):
            record["action"] = action

    def to_dict(self) -> dict:
        return {"ops": list(self.records.values()),
                "note": "kernels outside PyTorch's determinism switch: strict cannot vouch for them unless replaced"}

    def summary(self) -> str:
        """One line per kernel, for the end of training ('' when there is none)."""
        return "\n".join(f"yolo-det: opaque kernel {r['op']} ({r['action']}) in {', '.join(r['modules'][:4]) or '-'}"
                         for r in self.records.values())


class Recorder:
    """Routes alerts into ``report`` while started; a context manager, or ``start``/``stop``.

    ``escalate`` (strict with an allow-list, PyTorch running warn-only) turns alerts of ops
    not in ``allow`` into PyTorch's strict RuntimeError; it may be changed while recording.
    """

    def __init__(self, report: Optional[ViolationReport] = None, allow: Iterable[str] = (),
                 escalate: bool = False) -> None:
        self.report = ViolationReport() if report is None else report
        self.allow = frozenset(allow)
        self.escalate = escalate

    def disposition(self, op: str) -> str:
        if self.escalate:
            return "allowed" if op in self.allow else "raised"
        return "warned"

    def start(self) -> "Recorder":
        _push(self)
        return self

    def stop(self) -> None:
        with contextlib.suppress(ValueError):
            _pop(self)

    def __enter__(self) -> ViolationReport:
        self.start()
        return self.report

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc is not None:
                _record_raise(exc)
        finally:
            self.stop()


_active: List[Recorder] = []
_state_lock = threading.RLock()
_previous_showwarning: Optional[Callable] = None
_FILTER = ("always", re.compile(_FILTER_RE), Warning, None, 0)


def _ensure_filter_first() -> None:
    """Put the ``always`` filter for alerts at the front of ``warnings.filters``."""
    filters = warnings.filters
    if not filters or filters[0] is not _FILTER:
        with contextlib.suppress(ValueError):
            filters.remove(_FILTER)
        filters.insert(0, _FILTER)
        warnings._filters_mutated()  # type: ignore[attr-defined]


def _showwarning(message, category, filename, lineno, file=None, line=None):
    op = parse_alert(str(message))
    with _state_lock:
        recorders = list(_active)
    if op is None or not recorders:
        if _previous_showwarning is not None:
            return _previous_showwarning(message, category, filename, lineno, file, line)
        return None
    actions = [r.disposition(op) for r in recorders]
    for recorder, action in zip(recorders, actions):
        recorder.report.add(op, action)
    if "raised" in actions:
        error = RuntimeError(strict_message(op))
        error._yolo_det_recorded = True  # type: ignore[attr-defined]
        raise error
    return None


def _push(recorder: Recorder) -> None:
    global _previous_showwarning
    with _state_lock:
        if not _active:
            _previous_showwarning = warnings.showwarning
            warnings.showwarning = _showwarning
        _active.append(recorder)
        _ensure_filter_first()


def _pop(recorder: Recorder) -> None:
    global _previous_showwarning
    with _state_lock:
        _active.remove(recorder)
        if not _active:
            if warnings.showwarning is _showwarning:
                warnings.showwarning = _previous_showwarning
            _previous_showwarning = None
            with contextlib.suppress(ValueError):
                warnings.filters.remove(_FILTER)
                warnings._filters_mutated()  # type: ignore[attr-defined]


def refresh() -> None:
    """Re-assert the alert filter ahead of filters added since recording started."""
    with _state_lock:
        if _active:
            _ensure_filter_first()


def _record_raise(exc: BaseException) -> Optional[str]:
    """Count a strict-mode RuntimeError once in every active report; return its op (or None)."""
    op = parse_alert(str(exc)) if isinstance(exc, RuntimeError) else None
    if op is not None and not getattr(exc, "_yolo_det_recorded", False):
        with _state_lock:
            recorders = list(_active)
        for recorder in recorders:
            recorder.report.add(op, "raised")
        exc._yolo_det_recorded = True  # type: ignore[attr-defined]
    return op


def record_violations(
    report: Optional[ViolationReport] = None,
    *,
    allow: Iterable[str] = (),
    escalate: bool = False,
) -> Recorder:
    """Record every nondeterministic-op alert raised or warned inside a ``with`` block.

    ``with record_violations() as rep:`` yields a :class:`ViolationReport` (``rep.ops`` maps
    op name to count). Warnings are counted, not printed; a strict-mode RuntimeError is
    counted and re-raised. With ``escalate=True`` (strict with an allow-list, PyTorch
    running warn-only), alerts of ops not in ``allow`` raise PyTorch's strict RuntimeError
    and allowed ones are recorded as allowed. Nested recorders all see each alert.
    """
    return Recorder(report, allow, escalate)
