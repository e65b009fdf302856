"""A study's progress a person can follow: seeds done / running / queued / failed on a tqdm bar (stderr)."""

from __future__ import annotations

import sys
import threading
from typing import Any, Dict, Optional, TextIO


class Board:
    """Counts a study's seeds by state and shows them on a tqdm bar (nothing where tqdm is missing)."""

    def __init__(self, total: int, kept: int = 0, file: Optional[TextIO] = None, enabled: Optional[bool] = None,
                 label: str = "seeds") -> None:
        self.total, self.done, self.failed = int(total), int(kept), 0
        self.running: Dict[int, int] = {}  # run index -> seed
        self._lock = threading.Lock()
        self._bar: Any = None
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
        self._show()

    def counts(self) -> Dict[str, int]:
        """done, running, queued, failed."""
        running = len(self.running)
        return {"done": self.done, "running": running, "failed": self.failed,
                "queued": max(self.total - self.done - running - self.failed, 0)}

    def event(self, what: str, index: int, seed: int) -> None:
        """``start``, ``done`` or ``failed`` of run ``index`` (seed ``seed``)."""
        with self._lock:
            if what == "start":
                self.running[index] = seed
            else:
                self.running.pop(index, None)
                if what == "done":
                    self.done += 1
                    if self._bar is not None:
                        self._bar.update(1)
                else:
                    self.failed += 1
            self._show()

    def _show(self) -> None:
        if self._bar is not None:
            c = self.counts()
            self._bar.set_postfix_str(f"running {c['running']}, queued {c['queued']}, failed {c['failed']}")

    def close(self) -> None:
        """End the bar (the counts stay readable)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


__all__ = ["Board"]
