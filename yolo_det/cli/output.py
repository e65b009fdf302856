"""What every command's ``--json`` prints: its document, stamped with the ``schema`` version and ``verdict``."""

from __future__ import annotations

import json
from typing import Any, Mapping

from ..core import verdicts


def print_result(result: verdicts.Result) -> int:
    """Print ``result.to_json()`` on stdout (``{"schema": ..., "verdict": ...}`` first); return its exit code, the
    one its verdict word maps to (yolo_det.core.verdicts)."""
    document = result.to_json()
    print(json.dumps(verdicts.stamp(document, result.verdict), indent=2, default=str))
    return result.exit_code


def print_json(document: Mapping[str, Any], verdict: str) -> int:
    """Print ``document`` with the word ``verdict`` (a command whose result is a plain document)."""
    return print_result(verdicts.Document(verdict, document))
