"""NMS wall-clock limits: lifted under strict/warn, so what validation reports does not depend on machine speed.

YOLOv5-family and Ultralytics ``non_max_suppression`` stop after ``time_limit`` seconds and drop
the remaining images of the batch. Early in training (many candidates at ``conf=0.001``) or on a
loaded machine that happens, and P/R/mAP, fitness, ``best.pt`` and early stopping then follow the
clock. Under strict and warn the limit does not apply; a batch that would have been cut is noted
(printed once) so users learn that earlier results were clock-dependent. ``off`` keeps the release's
limit. The record lives in the session's ``extra`` under :data:`KEY` (so in ``determinism.json``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, MutableMapping, Optional

KEY = "nms_time_limit"

EXCEEDED = ("yolo-det: NMS took {elapsed:.3g} s for a batch, more than the release's time limit of {limit:.3g} s: "
            "in mode off (the release's behaviour) the remaining images of this batch would have been dropped, so "
            "results of earlier runs on this machine may have depended on its speed. Under {mode} the limit does "
            "not apply (reported once; count in determinism.json, '{key}')")


def record(extra: MutableMapping[str, Any], where: str) -> Dict[str, Any]:
    """The :data:`KEY` entry of a session's ``extra`` (created on first use)."""
    entry = extra.get(KEY)
    if not isinstance(entry, dict):
        entry = extra[KEY] = {"lifted": None, "where": where, "calls": 0, "exceeded": 0, "release_limit_s": None,
                              "max_elapsed_s": None}
    return entry


class LiftedTimeLimit(float):
    """An infinite time limit that remembers the release's value and notes when it would have been exceeded.

    The release compares ``(time.time() - t) > time_limit``; as a float subclass overriding the
    reflected comparison, this object answers that comparison itself (Python tries the subclass's
    ``__lt__`` first): never exceeded, but the first elapsed time past the release's limit is noted.
    """

    release: float
    _note: Callable[[float], None]

    def __new__(cls, release: float, note: Callable[[float], None]) -> "LiftedTimeLimit":
        value = super().__new__(cls, math.inf)
        value.release = float(release)
        value._note = note
        value._noted = False
        return value

    def _check(self, elapsed: Any) -> None:
        if not self._noted and isinstance(elapsed, (int, float)) and elapsed > self.release:
            self._noted = True
            self._note(float(elapsed))

    def __lt__(self, other: Any) -> bool:  # limit < elapsed, i.e. elapsed > limit
        self._check(other)
        return float.__lt__(self, other)

    def __le__(self, other: Any) -> bool:
        self._check(other)
        return float.__le__(self, other)

    def __reduce__(self):  # pickles (and copies) as plain inf
        return (float, (math.inf,))


def time_limit(mode: Optional[str], release_limit: float, extra: MutableMapping[str, Any], where: str,
               echo: Callable[[str], None] = print) -> float:
    """The limit NMS should apply under ``mode``: the release's for ``off`` (or no session), else none.

    Counts the calls in ``extra`` (proof that the patched NMS ran) and, under strict/warn,
    returns a :class:`LiftedTimeLimit` that notes a batch the release would have cut.
    """
    entry = record(extra, where)
    entry["calls"] += 1
    entry["release_limit_s"] = float(release_limit)
    if mode not in ("strict", "warn"):
        entry["lifted"] = False
        return release_limit
    entry["lifted"] = True
    return LiftedTimeLimit(release_limit, lambda elapsed: exceeded(entry, mode, float(release_limit), elapsed, echo))


def exceeded(entry: Dict[str, Any], mode: str, limit: float, elapsed: float,
             echo: Callable[[str], None] = print) -> None:
    """Note one batch that took longer than the release's limit; print the explanation the first time.

    ``cut_calls`` lists the NMS calls (from 0, counted in ``calls``) that took too long."""
    entry["exceeded"] += 1
    entry.setdefault("cut_calls", []).append(max(int(entry.get("calls", 1)) - 1, 0))
    entry["max_elapsed_s"] = max(entry.get("max_elapsed_s") or 0.0, elapsed)
    if entry["exceeded"] == 1:
        echo(EXCEEDED.format(elapsed=elapsed, limit=limit, mode=mode, key=KEY))


__all__ = ["EXCEEDED", "KEY", "LiftedTimeLimit", "exceeded", "record", "time_limit"]
