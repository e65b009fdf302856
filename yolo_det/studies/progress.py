"""A study's progress a person can follow: seeds done / running / queued / failed on a tqdm bar (stderr), with
each running seed's epoch (from the run info its training writes at every checkpoint) and an ETA."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, TextIO, Tuple

from .study import INFO_NAME


def seed_epoch(folder: Path, index: int) -> Optional[Tuple[int, int]]:
    """``(epochs done, epochs)`` of run ``index`` of the study in ``folder``, from the run info its training wrote
    at its last checkpoint; None before its first checkpoint or where the release does not say its epochs."""
    try:
        info = json.loads((Path(folder) / f"run{index}" / INFO_NAME).read_text(encoding="utf-8"))
        done, total = int(info["epochs_done"]), int(info["epochs"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (done, total) if total > 0 else None


def eta_seconds(running: Mapping[int, Tuple[float, Optional[Tuple[int, int]]]], queued: int,
                seed_seconds: Optional[float], slots: int) -> Optional[float]:
    """Seconds until the study ends: each running seed's remaining epochs at its own seconds per epoch so far, plus
    the queued seeds at ``seed_seconds`` each (the mean of the seeds done, else estimated from the running ones'
    epochs), spread over ``slots``. ``running``: run index -> (seconds since it started, (epochs done, epochs)).
    None while nothing allows an estimate (no seed has finished a checkpointed epoch or the whole run)."""
    known = {i: (elapsed, e) for i, (elapsed, e) in running.items() if e is not None and e[0] > 0}
    remaining = [elapsed / e[0] * max(e[1] - e[0], 0) for elapsed, e in known.values()]
    if seed_seconds is None and known:  # no seed finished yet: the running seeds' pace
        seed_seconds = sum(elapsed / e[0] * e[1] for elapsed, e in known.values()) / len(known)
    if seed_seconds is None:
        return None
    remaining += [max(seed_seconds - elapsed, 0.0) for i, (elapsed, _) in running.items() if i not in known]
    # the running seeds end first; the queued ones then share the slots
    return max(remaining, default=0.0) + queued * seed_seconds / max(int(slots), 1)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Board:
    """Counts a study's seeds by state and shows them on a tqdm bar (nothing where tqdm is missing); with the
    study ``folder``, each running seed's epoch and the study's ETA, refreshed every ``refresh`` seconds."""

    def __init__(self, total: int, kept: int = 0, file: Optional[TextIO] = None, enabled: Optional[bool] = None,
                 label: str = "seeds", folder: Optional[Any] = None, slots: int = 1, refresh: float = 5.0) -> None:
        self.total, self.done, self.failed = int(total), int(kept), 0
        self.running: Dict[int, int] = {}  # run index -> seed
        self.folder, self.slots = (Path(folder) if folder is not None else None), max(int(slots), 1)
        self._started: Dict[int, float] = {}
        self._seconds: list = []  # wall-clock seconds of each seed that finished here
        self._lock = threading.Lock()
        self._bar: Any = None
        self._stop = threading.Event()
        stream = file or sys.stderr
        if enabled is None:
            enabled = bool(getattr(stream, "isatty", lambda: False)())
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:  # pragma: no cover - tqdm is an optional extra (yolo-det[progress])
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(total=self.total, initial=self.done, unit="seed", desc=label, file=stream,
                                 dynamic_ncols=True)
        if self._bar is not None and self.folder is not None:
            threading.Thread(target=self._poll, args=(refresh,), daemon=True, name="yolo-det-board").start()
        self._show()

    def counts(self) -> Dict[str, int]:
        """done, running, queued, failed."""
        running = len(self.running)
        return {"done": self.done, "running": running, "failed": self.failed,
                "queued": max(self.total - self.done - running - self.failed, 0)}

    def epochs(self) -> Dict[int, Optional[Tuple[int, int]]]:
        """Each running seed's ``(epochs done, epochs)`` (None before its first checkpoint); empty without a folder."""
        if self.folder is None:
            return {}
        return {index: seed_epoch(self.folder, index) for index in list(self.running)}

    def eta(self) -> Optional[float]:
        """Seconds until the study ends (:func:`eta_seconds`), None while nothing allows an estimate."""
        epochs, now = self.epochs(), time.monotonic()
        with self._lock:
            running = {i: (now - self._started.get(i, now), epochs.get(i)) for i in self.running}
            mean = sum(self._seconds) / len(self._seconds) if self._seconds else None
        return eta_seconds(running, self.counts()["queued"], mean, self.slots)

    def event(self, what: str, index: int, seed: int) -> None:
        """``start``, ``done`` or ``failed`` of run ``index`` (seed ``seed``)."""
        with self._lock:
            if what == "start":
                self.running[index] = seed
                self._started[index] = time.monotonic()
            else:
                self.running.pop(index, None)
                started = self._started.pop(index, None)
                if what == "done":
                    self.done += 1
                    if started is not None:
                        self._seconds.append(time.monotonic() - started)
                    if self._bar is not None:
                        self._bar.update(1)
                else:
                    self.failed += 1
        self._show()

    def status_line(self) -> str:
        """running (each seed's epoch), queued, failed, ETA: what the bar shows after its counts."""
        c = self.counts()
        epochs = self.epochs()
        running_now = dict(self.running)
        seeds = [f"seed {running_now[i]} epoch {e[0]}/{e[1]}" if e else f"seed {running_now[i]}"
                 for i, e in sorted(epochs.items()) if i in running_now]
        running = f"running {c['running']}" + (f" ({', '.join(seeds)})" if seeds else "")
        eta = self.eta() if self.folder is not None else None
        return f"{running}, queued {c['queued']}, failed {c['failed']}" + (
            f", ETA {_duration(eta)}" if eta is not None else "")

    def _show(self) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(self.status_line())

    def _poll(self, refresh: float) -> None:
        while not self._stop.wait(refresh):
            self._show()

    def close(self) -> None:
        """End the bar (the counts stay readable)."""
        self._stop.set()
        if self._bar is not None:
            self._bar.close()
            self._bar = None


__all__ = ["Board", "eta_seconds", "seed_epoch"]
