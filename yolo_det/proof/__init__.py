"""Verdicts on two runs: identical, or the first step, op and cause where they part.

``compare`` (two fingerprint logs) and ``causes`` (set-up differences, named first); ``checkpoint``
(with ``checkpoint_format``) and ``artifacts`` (last.pt, best.pt, results.csv), ``run_dirs`` and
``settings`` (two run folders, also made without yolo-det); ``verify`` (run a command N times and
compare), ``resume_at`` (resume mid-run and compare), ``locate`` (the first op whose output differs),
``compiled_eager`` (one training step compiled vs eager);
``search`` (two hyperparameter searches); ``inputs`` (what `yolo-det diff` was given, and which argument is wrong);
``plot``; ``runner`` (one training command run with fingerprinting on, for ``verify``, ``resume_at``, ``locate``
and seed studies). Imports :mod:`yolo_det.core` and :mod:`yolo_det.record`.
"""
