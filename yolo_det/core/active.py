"""The process's current run session: one slot that :func:`yolo_det.configure` fills.

It lives at the bottom layer so that capabilities (e.g. fingerprinting) can find the session
without importing :mod:`yolo_det.session`, which imports them.
"""

from __future__ import annotations

from typing import Any, Optional

_session: Optional[Any] = None


def current() -> Optional[Any]:
    """The session started in this process, or None."""
    return _session


def set_current(session: Optional[Any]) -> None:
    """Make ``session`` (a :class:`yolo_det.session.Session`, or None) the current one."""
    global _session
    _session = session
