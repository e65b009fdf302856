"""Telling a checkpoint file from a fingerprint log without importing torch (``diff`` starts fast)."""

from __future__ import annotations

import os
from pathlib import Path

ZIP_MAGIC = b"PK\x03\x04"  # torch.save's default (zip) format
PICKLE_PROTO = 0x80  # the legacy format starts with a pickle protocol opcode


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
