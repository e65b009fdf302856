"""What every command's ``--json`` prints: its document, stamped with the ``schema`` version and ``verdict``."""

from __future__ import annotations

import json
from typing import Any, Mapping

from ..core import verdicts


def print_json(document: Mapping[str, Any], verdict: str) -> int:
    """Print ``document`` on stdout as JSON, ``{"schema": ..., "verdict": ...}`` first; return the verdict's exit
    code (yolo_det.core.verdicts)."""
    print(json.dumps(verdicts.stamp(document, verdict), indent=2, default=str))
    return verdicts.exit_code(verdict)
