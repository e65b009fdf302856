"""What a run records about itself: bit-exact digests and the per-step fingerprint log.

``digest`` (with ``digest_format``, its torch-free part, and ``digest_kernel``, its compiled CPU loop)
turns tensors into bit-exact digests; ``fingerprint`` is the public face (start/stop, validations),
``recorder`` the per-step recorder with ``sources`` (what it digests), ``pending`` (one step's digests
until written), ``predictions``, ``header`` (the run's set-up) and ``rank_check`` (DDP ranks);
``global_hooks`` wraps loaders and backward passes; ``log`` is the JSONL format (writer and reader);
``splice`` joins resumed logs; ``capture`` records one step op by op for ``locate``;
``export_provenance`` records which checkpoint an exported model came from, inside the artifact and beside it;
``run_folder`` owns the run folder's layout: every file name in it, one reader per artefact, the run folder
of a log or checkpoint.
Imports only :mod:`yolo_det.core`: verdicts on what was recorded live in :mod:`yolo_det.proof`.
"""
