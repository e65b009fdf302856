"""Proof that two runs are identical, or where they part.

Owns: ``digest`` (bit-exact tensor digests), ``fingerprint`` (the per-step recorder) and
``sources`` (what it digests), ``log`` (the JSONL format; ``digest_format`` is the torch-free part of
the digests it needs), ``compare`` (diffing logs),
``verify`` (running a command N times and comparing), ``plot``. May import :mod:`yolo_det.core`.
"""
