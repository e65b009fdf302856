"""What torchrun tells the process it started: how many ranks it runs among, and how long gloo may wait.

Shared by the YOLOv5 and Ultralytics integrations (both start CPU ranks under torchrun as one gloo group).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Dict, Optional

#: How long a gloo collective may wait (Ultralytics gives NCCL three hours; CPU ranks train slower).
TIMEOUT = timedelta(hours=3)


def launched_world_size(env: Optional[Dict[str, str]] = None) -> int:
    """The number of ranks torchrun started this process among (1 outside torchrun)."""
    env = os.environ if env is None else env
    if env.get("LOCAL_RANK") in (None, "", "-1"):
        return 1
    try:
        return max(int(env.get("WORLD_SIZE") or 1), 1)
    except ValueError:
        return 1


__all__ = ["TIMEOUT", "launched_world_size"]
