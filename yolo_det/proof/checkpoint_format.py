"""The torch-free part of checkpoints: telling one from a fingerprint log, and the error for one that cannot be read.

``diff``, ``verify`` and ``seeds`` import this, not :mod:`.checkpoint`, until a checkpoint is compared, so
commands that compare only logs start without torch.
"""

from __future__ import annotations

import os
from pathlib import Path

ZIP_MAGIC = b"PK\x03\x04"  # torch.save's default (zip) format
PICKLE_PROTO = 0x80  # the legacy format starts with a pickle protocol opcode


class CheckpointError(ValueError):
    """A file cannot be compared as a checkpoint: missing, not a file, not a PyTorch checkpoint, corrupt."""


def looks_like_checkpoint(path: os.PathLike) -> bool:
    """Whether ``path`` is named like a checkpoint or starts like one (zip archive or pickle), for ``diff``."""
    path = Path(path)
    if path.suffix.lower() in (".pt", ".pth", ".ckpt"):
        return True
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError:
        return False
    return head == ZIP_MAGIC or (bool(head) and head[0] == PICKLE_PROTO)
