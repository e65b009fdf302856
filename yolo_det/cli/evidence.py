"""The one call each judging command (``verify``, ``diff``, ``val``, ``parity``, ``seeds``) makes where its result
is known: the verdict and its evidence go to the tracker runs of the run folders it judged (docs/trackers.md)."""

from __future__ import annotations

import os
import sys
from typing import Iterable, Optional

from ..core import verdicts


def attach(command: str, result: verdicts.Result, runs: Iterable[Optional[os.PathLike]]) -> int:
    """Attach ``command``'s verdict (``result``: its word, exit code and JSON) to the trackers of each judged run
    that has a ``trackers.json`` (a run folder, a fingerprint log or a checkpoint of it); return the result's exit
    code. A tracker that fails is one warning line on stderr."""
    from ..trackers import log_verdict

    log_verdict(command, result.exit_code, result, list(runs),
                echo=lambda line: print(line, file=sys.stderr, flush=True))
    return result.exit_code


__all__ = ["attach"]
