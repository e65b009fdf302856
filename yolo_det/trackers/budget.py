"""One time budget per command for every tracker call together, and one warning line for all their failures.

A tracker's store can hold a caller far longer than any single timeout says: MLflow 3 retries the creation of a
SQLite engine for ~100 s before it raises (``sqlite:////proc/mlflow.db``), and a server that accepts and never
answers costs the HTTP timeout per request, per judged run. Each call therefore runs in a daemon thread that the
command waits for only as long as the budget has left (``YOLO_DET_TRACKER_BUDGET`` seconds, 10 by default, for
all calls of one command together); a call still running then is abandoned (it ends with the process) and every
later call of the command is skipped. What failed is reported once, in one line (:meth:`Failures.line`).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

from ..core import env_names

BUDGET_ENV = env_names.TRACKER_BUDGET
#: Seconds all tracker calls of one command may take together.
BUDGET_S = 10.0

T = TypeVar("T")


class OutOfTime(TimeoutError):
    """The command's tracker budget was spent before this call could finish (or start)."""


def budget_seconds(environ: Optional[Dict[str, str]] = None) -> float:
    """``YOLO_DET_TRACKER_BUDGET`` as seconds (a bad or negative value: the default)."""
    value = (os.environ if environ is None else environ).get(BUDGET_ENV, "")
    try:
        seconds = float(value)
    except ValueError:
        return BUDGET_S
    return seconds if seconds >= 0 else BUDGET_S


class Budget:
    """The time one command's tracker calls have left; :meth:`call` runs one call within it."""

    def __init__(self, seconds: Optional[float] = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = budget_seconds() if seconds is None else float(seconds)
        self._clock = clock
        self._deadline = clock() + self.seconds
        self.spent = False  # a call outlived the budget: the rest are skipped

    def left(self) -> float:
        """Seconds left (0 once spent)."""
        return 0.0 if self.spent else max(0.0, self._deadline - self._clock())

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a daemon thread, waited for at most :meth:`left` seconds; its exception re-raised
        here. Raises :class:`OutOfTime` when the budget is spent before or while it runs."""
        wait = self.left()
        if wait <= 0:
            self.spent = True
            raise OutOfTime(self.reason())
        box: Dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = exc

        thread = threading.Thread(target=target, name="yolo-det-tracker", daemon=True)
        thread.start()
        thread.join(wait)
        if thread.is_alive():  # abandoned: a daemon thread, it ends when it returns or with the process
            self.spent = True
            raise OutOfTime(self.reason())
        if "error" in box:
            raise box["error"]
        return box["value"]

    def reason(self) -> str:
        return (f"no answer within the {self.seconds:g} s all tracker calls of a command may take "
                f"({BUDGET_ENV} to change it)")


class Failures:
    """The tracker calls of one command that failed, reported in one line."""

    def __init__(self) -> None:
        self.failed: List[Tuple[str, str, BaseException]] = []  # (tracker, what, exception)
        self.tried: Dict[str, int] = {}

    def attempt(self, tracker: str) -> None:
        self.tried[tracker] = self.tried.get(tracker, 0) + 1

    def add(self, tracker: str, what: str, exc: BaseException) -> None:
        self.failed.append((tracker, what, exc))

    def line(self, what: str, hint: str) -> Optional[str]:
        """One warning line for every failure (None when none): which trackers, how many of their calls, the
        first failure's reason, and ``hint`` (what to do)."""
        if not self.failed:
            return None
        trackers = list(dict.fromkeys(tracker for tracker, _, _ in self.failed))
        counts = [(t, sum(1 for f in self.failed if f[0] == t), self.tried.get(t, 0)) for t in trackers]
        many = [f"{n} of {tried} runs" for _, n, tried in counts if tried > 1]
        _, first_what, exc = self.failed[0]
        reason = (str(exc).strip().splitlines() or [""])[0][:300]
        scope = f" for {', '.join(many)}" if many else ""
        detail = f"{first_what}: " if first_what and first_what != what else ""
        return (f"yolo-det: warning: {', '.join(trackers)} could not log {what}{scope} ({detail}"
                f"{type(exc).__name__}: {reason}); nothing else is affected. {hint}")


__all__ = ["BUDGET_ENV", "BUDGET_S", "Budget", "Failures", "OutOfTime", "budget_seconds"]
