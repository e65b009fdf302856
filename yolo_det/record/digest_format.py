"""How digests appear in a fingerprint log, without torch: the algorithm's name, the width of
one digest in hex, the algorithms whose logs are read, and splitting a kind's concatenated
digests (``yolo-det diff`` needs no more)."""

from __future__ import annotations

from typing import List

ALGORITHM = "bytes-lin64-v2"  # what this yolo-det computes (see yolo_det.record.digest)
#: Algorithms whose logs this yolo-det reads: its own and the previous one (``bytes-intmm-v1``, an
#: int8 GEMM of the same bytes). A log compares only with logs of its own algorithm.
READABLE = (ALGORITHM, "bytes-intmm-v1")
HEX_CHARS = 32  # one digest: two 64-bit words, hex


def split_hex(text: str) -> List[str]:
    """A string of concatenated digests split into the 32-character digests."""
    return [text[i:i + HEX_CHARS] for i in range(0, len(text), HEX_CHARS)]

