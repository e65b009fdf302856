"""The one call each judging command (``verify``, ``diff``, ``val``, ``parity``, ``seeds``) makes where its result
is known: the verdict and its evidence go to the tracker runs of the run folders it judged (docs/trackers.md)."""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable, Optional


def attach(command: str, code: int, result: Any, runs: Iterable[Optional[os.PathLike]]) -> int:
    """Attach ``command``'s verdict (``result``'s JSON, exit ``code``) to the trackers of each judged run that
    has a ``trackers.json`` (a run folder, a fingerprint log or a checkpoint of it); return ``code`` unchanged.
    A tracker that fails is one warning line on stderr."""
    from ..trackers import log_verdict

    log_verdict(command, code, result, list(runs), echo=lambda line: print(line, file=sys.stderr, flush=True))
    return code


__all__ = ["attach"]
