"""Proof that two runs are identical, or where they part.

Owns: ``digest`` (bit-exact tensor digests), ``fingerprint`` (the per-step recorder) and
``sources`` (what it digests), ``log`` (the JSONL format), ``compare`` (diffing logs),
``verify`` (running a command N times and comparing), ``plot``. May import :mod:`yolo_det.core`.
"""
